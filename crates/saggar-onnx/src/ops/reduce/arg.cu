// ArgMax / ArgMin over the middle axis of `[outer, len, inner]`, one thread per output, in index
// order: @OP@ keeps the first extreme (`>`, `<`) or the last (`>=`, `<=`).
// meta: outer, len, inner
(const onnx_i64* meta, const @T@* __restrict__ x, long long* __restrict__ y) {
  const onnx_i64 len = meta[1], inner = meta[2];
  ONNX_LOOP(o, meta[0] * inner) {
    const onnx_i64 base = (o / inner) * len * inner + o % inner;
    onnx_i64 at = 0;
    for (onnx_i64 j = 1; j < len; ++j) if (x[base + j * inner] @OP@ x[base + at * inner]) at = j;
    y[o] = at;
  }
}
