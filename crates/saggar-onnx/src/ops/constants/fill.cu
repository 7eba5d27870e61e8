// ConstantOfShape: every element the bits @BITS@ (the value, as bits of the element's width).
// meta: n
(const onnx_i64* meta, @T@* __restrict__ y) {
  ONNX_LOOP(i, meta[0]) y[i] = (@T@)@BITS@;
}
