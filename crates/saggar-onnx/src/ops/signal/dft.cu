// DFT along the middle axis of `[outer, n_in, inner, parts]` (parts 1: real, 2: complex), one thread
// per output bin `(o, k, i)` of `[outer, bins, inner, 2]`: the sum over `n < min(n_in, length)` of
// `x[n] * exp(-+2 pi i k n / length)`, the angle from `k * n mod length`, in double precision;
// `inverse` takes the + sign and scales by 1 / length (dft.rs `transform` sums in the same order).
// meta: n (bins in all), n_in, inner, parts, length, bins, inverse
(const onnx_i64* meta, const float* __restrict__ x, float* __restrict__ y) {
  const onnx_i64 n_in = meta[1], inner = meta[2], parts = meta[3], len = meta[4], nb = meta[5];
  const bool inverse = meta[6] != 0;
  const double sign = inverse ? 1.0 : -1.0, scale = inverse ? 1.0 / (double)len : 1.0;
  const double step = 6.283185307179586 / (double)len;
  const onnx_i64 count = n_in < len ? n_in : len;
  ONNX_LOOP(t, meta[0]) {
    const onnx_i64 i = t % inner, k = (t / inner) % nb, o = t / inner / nb;
    double re = 0.0, im = 0.0;
    for (onnx_i64 n = 0; n < count; ++n) {
      const double a = (double)((k * n) % len) * step;
      const double s = sin(a), c = cos(a);
      const onnx_i64 base = ((o * n_in + n) * inner + i) * parts;
      const double xr = (double)x[base], xi = parts == 2 ? (double)x[base + 1] : 0.0;
      re += xr * c - sign * xi * s;
      im += xi * c + sign * xr * s;
    }
    y[2 * t] = (float)(re * scale);
    y[2 * t + 1] = (float)(im * scale);
  }
}
