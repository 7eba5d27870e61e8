// STFT of `[batch, signal, parts]`, one thread per output bin `(b, frame, k)` of
// `[batch, frames, bins, 2]`: the sum over the frame's `length` samples from `frame * step` of
// `x[n] * window[n] * exp(-2 pi i k n / length)`, the angle from `k * n mod length`, in double
// precision (dft.rs `transform` sums in the same order).
// meta: n (bins in all), signal, parts, step, length, frames, bins
(const onnx_i64* meta, const float* __restrict__ x@WINDOW_PARAM@, float* __restrict__ y) {
  const onnx_i64 signal = meta[1], parts = meta[2], step_ = meta[3], len = meta[4], frames = meta[5], nb = meta[6];
  const double step = 6.283185307179586 / (double)len;
  ONNX_LOOP(t, meta[0]) {
    const onnx_i64 k = t % nb, f = (t / nb) % frames, b = t / nb / frames;
    double re = 0.0, im = 0.0;
    for (onnx_i64 n = 0; n < len; ++n) {
      const double a = (double)((k * n) % len) * step;
      const double s = sin(a), c = cos(a), w = @WEIGHT@;
      const onnx_i64 base = (b * signal + f * step_ + n) * parts;
      const double xr = (double)x[base] * w, xi = (parts == 2 ? (double)x[base + 1] : 0.0) * w;
      re += xr * c + xi * s;
      im += xi * c - xr * s;
    }
    y[2 * t] = (float)re;
    y[2 * t + 1] = (float)im;
  }
}
