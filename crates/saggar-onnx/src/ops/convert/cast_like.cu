// CastLike as a launch of its own: `y[i] = @EXPR@`, Cast's expression of `x[i]`.
// meta: n
(const onnx_i64* meta, const @TI@* __restrict__ x, @TO@* __restrict__ y) {
  ONNX_LOOP(i, meta[0]) y[i] = @EXPR@;
}
