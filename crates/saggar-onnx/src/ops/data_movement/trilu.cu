// Trilu: element (r, c) of each `rows x cols` matrix kept when `c - r @KEEP@ k`, else zero;
// elements of @T@ (bits). `k` is @K@ (the k input's element, or 0).
// meta: n, rows, cols, unused
(const onnx_i64* meta, const @T@* __restrict__ x@K_PARAM@, @T@* __restrict__ y) {
  const onnx_i64 rows = meta[1], cols = meta[2], k = @K@;
  ONNX_LOOP(i, meta[0]) {
    const onnx_i64 c = i % cols, r = (i / cols) % rows;
    y[i] = (c - r @KEEP@ k) ? x[i] : (@T@)0;
  }
}
