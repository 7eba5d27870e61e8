// LRN of `(N, C, plane)`, one thread per element, over the window `before`, `after` channels.
// meta: N, C, plane, before, after
(const onnx_i64* meta, const float* __restrict__ x, float* __restrict__ y) {
  const onnx_i64 C = meta[1], plane = meta[2], before = meta[3], after = meta[4];
  ONNX_LOOP(i, meta[0] * C * plane) {
    const onnx_i64 s = i % plane, c = (i / plane) % C, image = i / plane / C;
    const onnx_i64 lo = c > before ? c - before : 0, hi = c + after < C - 1 ? c + after : C - 1;
    float sq = 0.0f;
    for (onnx_i64 k = lo; k <= hi; ++k) { const float v = x[(image * C + k) * plane + s]; sq += v * v; }
    y[i] = x[i] / powf(@BIAS@ + @SCALE@ * sq, @BETA@);
  }
}
