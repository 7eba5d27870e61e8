// InstanceNormalization and GroupNormalization as a LayerNorm over each row's `cols`, one block
// per row, scale and bias indexed by column `j`'s channel @P@ (`row % C` for InstanceNormalization).
// meta: rows, cols, then what @P@ reads (InstanceNormalization: C; GroupNormalization: G,
// per_group, run)
(const onnx_i64* meta, const float* __restrict__ x, const float* __restrict__ scale@BIAS_PARAM@@OUT_PARAMS@@STAT_PARAMS@) {
  __shared__ float sh[@BLOCK@];
  const onnx_i64 cols = meta[1];
  ONNX_ROWS(row, meta[0]) {
    const float* xr = x + row * cols;
    float s = 0.0f;
    for (onnx_i64 j = threadIdx.x; j < cols; j += blockDim.x) s += xr[j];
    ONNX_BLOCK_REDUCE(s, sh, a, b, a + b);
    const float mean = s / (float)cols;
    float v = 0.0f;
    for (onnx_i64 j = threadIdx.x; j < cols; j += blockDim.x) { const float d = xr[j] - mean; v += d * d; }
    ONNX_BLOCK_REDUCE(v, sh, a, b, a + b);
    const float inv = 1.0f / sqrtf(v / (float)cols + @EPS@);@STAT_STORES@
    for (onnx_i64 j = threadIdx.x; j < cols; j += blockDim.x) {
      const float o = (xr[j] - mean) * inv * scale[@P@]@BIAS_ADD@;
      @STORE@
    }
  }
}
