// Inference BatchNormalization of `(N, C, plane)`, one thread per element (@EPS@: epsilon).
// meta: N, C, plane
(const onnx_i64* meta, const float* __restrict__ x, const float* __restrict__ scale, const float* __restrict__ bias, const float* __restrict__ mean, const float* __restrict__ var, float* __restrict__ y) {
  const onnx_i64 C = meta[1], plane = meta[2];
  ONNX_LOOP(i, meta[0] * C * plane) {
    const onnx_i64 c = (i / plane) % C;
    const float s = scale[c] / sqrtf(var[c] + @EPS@);
    y[i] = x[i] * s + (bias[c] - mean[c] * s);
  }
}
