// AffineGrid, one thread per output element `(n, position, j)` of `[N, spatial[r], r]`: coordinate `j`
// of `theta[n] @ (x, y[, z], 1)`, where the base coordinate of axis `r - 1 - k` at index `i` of
// extent `L` is `2i / (L - 1) - 1` with align_corners (-1 when L is 1), else `(2i + 1) / L - 1`
// (`affine::base` computes the same, in f32, summing in the same order).
// meta: r, n (elements), align_corners, spatial[r]
(const onnx_i64* meta, const float* __restrict__ theta, float* __restrict__ y) {
  const int r = (int)meta[0];
  const bool align = meta[2] != 0;
  const onnx_i64* sp = meta + 3;
  onnx_i64 plane = 1;
  for (int d = 0; d < r; ++d) plane *= sp[d];
  ONNX_LOOP(i, meta[1]) {
    const int j = (int)(i % r);
    const onnx_i64 p = (i / r) % plane, n = i / r / plane;
    const float* th = theta + (n * r + j) * (r + 1);
    float acc = 0.0f;
    for (int k = 0; k < r; ++k) {
      const int d = r - 1 - k;
      onnx_i64 rest = p;
      for (int e = r - 1; e > d; --e) rest /= sp[e];
      const onnx_i64 at = rest % sp[d], len = sp[d];
      const float b = align ? (len > 1 ? (float)(2 * at) / (float)(len - 1) - 1.0f : -1.0f)
                            : (float)(2 * at + 1) / (float)len - 1.0f;
      acc += th[k] * b;
    }
    y[i] = acc + th[r];
  }
}
