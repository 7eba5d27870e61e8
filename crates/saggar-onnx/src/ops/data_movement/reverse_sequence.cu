// ReverseSequence: along the time axis (`steps` long, stride `ts`), the first `lens[b]` elements of
// batch entry `b` (batch axis of `batch`, stride `bs`) reversed, the rest copied; a length outside
// 0..=steps is clamped into it. Elements of @T@ (bits).
// meta: n, steps, batch, ts, bs
(const onnx_i64* meta, const @T@* __restrict__ x, const long long* __restrict__ lens, @T@* __restrict__ y) {
  const onnx_i64 steps = meta[1], batch = meta[2], ts = meta[3], bs = meta[4];
  ONNX_LOOP(i, meta[0]) {
    const onnx_i64 t = (i / ts) % steps, b = (i / bs) % batch;
    onnx_i64 len = lens[b];
    len = len < 0 ? 0 : (len > steps ? steps : len);
    y[i] = t < len ? x[i + (len - 1 - 2 * t) * ts] : x[i];
  }
}
