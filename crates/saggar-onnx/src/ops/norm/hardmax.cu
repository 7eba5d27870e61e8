// Hardmax over the middle axis of `[outer, len, inner]`, one thread per row (`outer * inner`):
// 1 at the first largest element (a NaN counting as the largest), 0 elsewhere.
// meta: rows, len, inner
(const onnx_i64* meta, const float* __restrict__ x, float* __restrict__ y) {
  const onnx_i64 len = meta[1], inner = meta[2];
  ONNX_LOOP(row, meta[0]) {
    const onnx_i64 base = (row / inner) * len * inner + row % inner;
    onnx_i64 at = 0;
    for (onnx_i64 j = 1; j < len; ++j) {
      const float v = x[base + j * inner], best = x[base + at * inner];
      if (v > best || (v != v && best == best)) at = j;
    }
    for (onnx_i64 j = 0; j < len; ++j) y[base + j * inner] = j == at ? 1.0f : 0.0f;
  }
}
