// LayerNormalization over rows by groups of `ONNX_ROW_LANES` threads (`Work::RowGroups`): a row of
// a transformer (64 to a few thousand columns) keeps a whole group busy with coalesced reads, where
// a block per row would leave most of its threads idle and synchronise the block twice per row.
// Every thread of a block runs the same number of iterations (a group past the last row idles
// through them), so a group's lanes always meet at their shuffles. The block's rows stay in dynamic
// shared memory while they fit ONNX_ROW_CACHE_BYTES. RMSNormalization renders the same kernel: its
// first pass sums squares (@TERM@, `mean` is then the mean square), it subtracts nothing
// (@CENTER@) and reads its scale at @SCALE_AT@, which broadcasts (see `RmsNormKernel`). Each result
// `o` is stored by @STORE@: into `y`, into a half-precision copy `yh`, or both (`NormStores`).
// meta: rows, cols (RMSNormalization: then mode, nl, nn, ldims[nl], lstrides[nl], ndims[nn],
// nstrides[nn])
(const onnx_i64* meta, const float* __restrict__ x, const float* __restrict__ scale@BIAS_PARAM@@OUT_PARAMS@@STAT_PARAMS@) {
  __shared__ float sh[@BLOCK@ / ONNX_ROW_LANES];
  ONNX_DYNAMIC_SHARED(onnx_row_cache);
  const onnx_i64 rows = meta[0], cols = meta[1];@SCALE_META@
  const int lane = (int)threadIdx.x, lanes = (int)blockDim.x;
  const onnx_i64 groups = blockDim.y;
  const bool cached = cols * groups * 4 <= ONNX_ROW_CACHE_BYTES;
  float* cache = onnx_row_cache + (cached ? (onnx_i64)threadIdx.y * cols : 0);
  for (onnx_i64 first = (onnx_i64)blockIdx.x * groups; first < rows; first += (onnx_i64)gridDim.x * groups) {
    const onnx_i64 row = first + threadIdx.y;
    const bool live = row < rows;
    const float* xr = x + (live ? row : 0) * cols;
    float s = 0.0f;
    if (live) for (onnx_i64 j = lane; j < cols; j += lanes) { const float e = xr[j]; if (cached) cache[j] = e; s += @TERM@; }
    const float mean = onnx_row_sum(s, sh) / (float)cols;
    @INV@
    if (live) {@STAT_STORES@@SCALE_ROW@
      for (onnx_i64 j = lane; j < cols; j += lanes) {
        const float o = ((cached ? cache[j] : xr[j])@CENTER@) * inv * scale[@SCALE_AT@]@BIAS_ADD@;
        @STORE@
      }
    }
  }
}
