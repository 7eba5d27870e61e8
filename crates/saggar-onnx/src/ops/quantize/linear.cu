// QuantizeLinear and DequantizeLinear per axis or blocked: `y[i] = EXPR` of x[i], its scale s[j] and
// zero point z[j], where element `(o, l, k)` of x viewed `[outer, len, inner]` reads
// `j = o * so + (l / block) * sa + k * sk`.
// meta: n, len, inner, so, block, sa, sk
(const onnx_i64* meta, const @TX@* __restrict__ x, const @TS@* __restrict__ s@ZP_PARAM@, @TY@* __restrict__ y) {
  const onnx_i64 n = meta[0], len = meta[1], inner = meta[2], so = meta[3], block = meta[4], sa = meta[5], sk = meta[6];
  ONNX_LOOP(i, n) {
    const onnx_i64 k = i % inner, r = i / inner, l = r % len, o = r / len;
    const onnx_i64 j = o * so + (l / block) * sa + k * sk;
    y[i] = @EXPR@;
  }
}
