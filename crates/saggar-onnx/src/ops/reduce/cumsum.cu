// CumSum of @T@ along the middle axis of `[outer, len, inner]`, one thread per line (`outer *
// inner` of them) adding in order: from the end when @REVERSE@, each sum without its own element
// when @EXCLUSIVE@.
// meta: lines, len, inner
(const onnx_i64* meta, const @T@* __restrict__ x, @T@* __restrict__ y) {
  const onnx_i64 len = meta[1], inner = meta[2];
  ONNX_LOOP(line, meta[0]) {
    const onnx_i64 base = (line / inner) * len * inner + line % inner;
    @T@ acc = (@T@)0;
    for (onnx_i64 j = 0; j < len; ++j) {
      const onnx_i64 at = base + (@REVERSE@ ? len - 1 - j : j) * inner;
      const @T@ v = x[at];
      if (@EXCLUSIVE@) { y[at] = acc; acc = acc + v; } else { acc = acc + v; y[at] = acc; }
    }
  }
}
