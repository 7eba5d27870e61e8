// EyeLike: @ONE@ (the bits of 1) where `column - row == k` in a matrix of `cols` columns, 0 elsewhere.
// meta: n, cols, k
(const onnx_i64* meta, @T@* __restrict__ y) {
  const onnx_i64 cols = meta[1], k = meta[2];
  ONNX_LOOP(i, meta[0]) y[i] = (i % cols - i / cols == k) ? (@T@)@ONE@ : (@T@)0;
}
