// Direct 2-D convolution, one thread per output element, in 32-bit indices (the launch checks that
// they fit): input and weights of type @T@ read as f32, accumulated and written in f32, the taps in
// `conv.cu`'s order (so the sums are the same), row by row with the rows and columns outside the
// input skipped.
// meta: s (2), N, C, M, group, in[2], out[2], kernel[2], stride[2], pad_begin[2], dilation[2]
(const onnx_i64* meta, const @T@* __restrict__ x, const @T@* __restrict__ w@BIAS_PARAM@, float* __restrict__ y) {
  const int C = (int)meta[2], M = (int)meta[3], G = (int)meta[4];
  const int H = (int)meta[5], W = (int)meta[6], OH = (int)meta[7], OW = (int)meta[8];
  const int KH = (int)meta[9], KW = (int)meta[10], SH = (int)meta[11], SW = (int)meta[12];
  const int PH = (int)meta[13], PW = (int)meta[14], DH = (int)meta[15], DW = (int)meta[16];
  const int cg = C / G, mg = M / G, taps = KH * KW;
  ONNX_LOOP(i, meta[1] * M * OH * OW) {
    const int e = (int)i, ox = e % OW, oy = e / OW % OH, m = e / (OW * OH) % M, n = e / (OW * OH * M);
    const int y0 = oy * SH - PH, x0 = ox * SW - PW, g = m / mg;
    float acc = @INIT@;
    for (int c = 0; c < cg; ++c) {
      const @T@* xp = x + (n * C + g * cg + c) * H * W;
      const @T@* wp = w + (m * cg + c) * taps;
      for (int ky = 0; ky < KH; ++ky) {
        const int iy = y0 + ky * DH;
        if (iy < 0 || iy >= H) continue;
        for (int kx = 0; kx < KW; ++kx) {
          const int ix = x0 + kx * DW, at = iy * W + ix, t = ky * KW + kx;
          if (ix >= 0 && ix < W) acc += @X@ * @W@;
        }
      }
    }
    y[i] = acc;
  }
}
