// Direct convolution, one thread per output element: input and weights of type @T@ read as f32,
// accumulated and written in f32.
// meta: s, N, C, M, group, in[s], out[s], kernel[s], stride[s], pad_begin[s], dilation[s]
(const onnx_i64* meta, const @T@* __restrict__ x, const @T@* __restrict__ w@BIAS_PARAM@, float* __restrict__ y) {
  const int s = (int)meta[0];
  const onnx_i64 N = meta[1], C = meta[2], M = meta[3], G = meta[4];
  const onnx_i64* in = meta + 5; const onnx_i64* out = in + s; const onnx_i64* ker = out + s;
  const onnx_i64* st = ker + s; const onnx_i64* pad = st + s; const onnx_i64* dil = pad + s;
  onnx_i64 in_plane = 1, out_plane = 1, taps = 1;
  for (int d = 0; d < s; ++d) { in_plane *= in[d]; out_plane *= out[d]; taps *= ker[d]; }
  const onnx_i64 cg = C / G, mg = M / G;
  ONNX_LOOP(i, N * M * out_plane) {
    onnx_i64 pos[@MAX_SPATIAL@];
    onnx_i64 rem = i % out_plane;
    for (int d = s - 1; d >= 0; --d) { pos[d] = rem % out[d]; rem /= out[d]; }
    const onnx_i64 m = (i / out_plane) % M, n = i / out_plane / M, g = m / mg;
    float acc = @INIT@;
    for (onnx_i64 c = 0; c < cg; ++c) {
      const @T@* xp = x + (n * C + g * cg + c) * in_plane;
      const @T@* wp = w + (m * cg + c) * taps;
      for (onnx_i64 t = 0; t < taps; ++t) {
        const onnx_i64 at = onnx_conv_tap(t, pos, s, in, ker, st, pad, dil);
        if (at >= 0) acc += @X@ * @W@;
      }
    }
    y[i] = acc;
  }
}
