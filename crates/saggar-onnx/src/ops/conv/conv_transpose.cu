// Transposed convolution, one thread per output element, gathering the input positions and kernel
// taps that reach it: tap k of input position o lands on o * stride + k * dilation - pad_begin.
// The axes are those of the forward convolution: `y` the output extents (its input), `x` the
// input extents (its output). Weights are (C, M / group, kernel...).
// meta: s, N, C, M, group, y[s], x[s], kernel[s], stride[s], pad_begin[s], dilation[s]
(const onnx_i64* meta, const float* __restrict__ x, const float* __restrict__ w@BIAS_PARAM@, float* __restrict__ y) {
  const int s = (int)meta[0];
  const onnx_i64 N = meta[1], C = meta[2], M = meta[3], G = meta[4];
  const onnx_i64* yd = meta + 5; const onnx_i64* xd = yd + s; const onnx_i64* ker = xd + s;
  const onnx_i64* st = ker + s; const onnx_i64* pad = st + s; const onnx_i64* dil = pad + s;
  onnx_i64 y_plane = 1, x_plane = 1, taps = 1;
  for (int d = 0; d < s; ++d) { y_plane *= yd[d]; x_plane *= xd[d]; taps *= ker[d]; }
  const onnx_i64 cg = C / G, mg = M / G;
  ONNX_LOOP(i, N * M * y_plane) {
    onnx_i64 pos[@MAX_SPATIAL@];
    onnx_i64 rem = i % y_plane;
    for (int d = s - 1; d >= 0; --d) { pos[d] = rem % yd[d]; rem /= yd[d]; }
    const onnx_i64 m = (i / y_plane) % M, n = i / y_plane / M, g = m / mg;
    const float* xg = x + (n * C + g * cg) * x_plane;
    const float* wg = w + (g * cg * mg + m % mg) * taps;
    float acc = @INIT@;
    for (onnx_i64 t = 0; t < taps; ++t) {
@TAP@
      if (!hit) continue;
      for (onnx_i64 c = 0; c < cg; ++c) acc += xg[c * x_plane + at] * wg[c * mg * taps + t];
    }
    y[i] = acc;
  }
}
