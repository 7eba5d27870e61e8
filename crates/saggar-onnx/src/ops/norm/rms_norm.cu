// RMSNormalization over rows by groups of `ONNX_ROW_LANES` threads (`Work::RowGroups`, as
// `layer_norm_rows.cu`): each element divided by the root of the row's mean square plus epsilon,
// times its scale. The scale is read at `j` when it covers the row exactly (`mode` 1), else at its
// broadcast offsets: leading axes from the row, normalised axes from the column.
// meta: rows, cols, mode, nl, nn, ldims[nl], lstrides[nl], ndims[nn], nstrides[nn]
(const onnx_i64* meta, const float* __restrict__ x, const float* __restrict__ scale, float* __restrict__ y) {
  __shared__ float sh[@BLOCK@ / ONNX_ROW_LANES];
  ONNX_DYNAMIC_SHARED(onnx_row_cache);
  const onnx_i64 rows = meta[0], cols = meta[1], mode = meta[2];
  const int nl = (int)meta[3], nn = (int)meta[4];
  const onnx_i64* ld = meta + 5; const onnx_i64* ls = ld + nl; const onnx_i64* nd = ls + nl; const onnx_i64* ns = nd + nn;
  const int lane = (int)threadIdx.x, lanes = (int)blockDim.x;
  const onnx_i64 groups = blockDim.y;
  const bool cached = cols * groups * 4 <= ONNX_ROW_CACHE_BYTES;
  float* cache = onnx_row_cache + (cached ? (onnx_i64)threadIdx.y * cols : 0);
  for (onnx_i64 first = (onnx_i64)blockIdx.x * groups; first < rows; first += (onnx_i64)gridDim.x * groups) {
    const onnx_i64 row = first + threadIdx.y;
    const bool live = row < rows;
    const float* xr = x + (live ? row : 0) * cols;
    float s = 0.0f;
    if (live) for (onnx_i64 j = lane; j < cols; j += lanes) { const float e = xr[j]; if (cached) cache[j] = e; s += e * e; }
    const float inv = 1.0f / sqrtf(onnx_row_sum(s, sh) / (float)cols + @EPS@);
    if (live) {
      const onnx_i64 base = mode == 1 ? 0 : red_offset(row, nl, ld, ls);
      for (onnx_i64 j = lane; j < cols; j += lanes) {
        const float w = mode == 1 ? scale[j] : scale[base + red_offset(j, nn, nd, ns)];
        y[row * cols + j] = (cached ? cache[j] : xr[j]) * inv * w;
      }
    }
  }
}
