// Softmax / LogSoftmax over the middle axis of `[outer, len, inner]`, one block per row; @STORE@
// writes one element.
// meta: outer, len, inner
(const onnx_i64* meta, const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float sh[@BLOCK@];
  const onnx_i64 len = meta[1], inner = meta[2];
  ONNX_ROWS(row, meta[0] * inner) {
    const onnx_i64 base = (row / inner) * len * inner + row % inner;
    float m = ONNX_NEG_INF;
    for (onnx_i64 j = threadIdx.x; j < len; j += blockDim.x) m = fmaxf(m, x[base + j * inner]);
    ONNX_BLOCK_REDUCE(m, sh, a, b, fmaxf(a, b));
    float s = 0.0f;
    for (onnx_i64 j = threadIdx.x; j < len; j += blockDim.x) s += expf(x[base + j * inner] - m);
    ONNX_BLOCK_REDUCE(s, sh, a, b, a + b);
    for (onnx_i64 j = threadIdx.x; j < len; j += blockDim.x) { const onnx_i64 at = base + j * inner; y[at] = @STORE@; }
  }
}
