// DeformConv, one thread per output element `(n, m, position)`: for each input channel of the
// group and kernel tap, the input sampled at the tap's position plus its offset (N-linear, zero
// outside; coordinates held within +-@LIMIT@), times the weight and the mask, summed in deform.rs's
// order.
// meta: s, N, C, M, group, offset_group, in[s], out[s], kernel[s], stride[s], pad_begin[s], dilation[s]
(const onnx_i64* meta, const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ offset@BIAS_PARAM@@MASK_PARAM@, float* __restrict__ y) {
  const int s = (int)meta[0];
  const onnx_i64 N = meta[1], C = meta[2], M = meta[3], G = meta[4], OG = meta[5];
  const onnx_i64* in = meta + 6; const onnx_i64* out = in + s; const onnx_i64* ker = out + s;
  const onnx_i64* st = ker + s; const onnx_i64* pad = st + s; const onnx_i64* dil = pad + s;
  onnx_i64 in_plane = 1, out_plane = 1, taps = 1;
  for (int d = 0; d < s; ++d) { in_plane *= in[d]; out_plane *= out[d]; taps *= ker[d]; }
  const onnx_i64 cg = C / G, mg = M / G, per_og = C / OG;
  ONNX_LOOP(i, N * M * out_plane) {
    onnx_i64 pos[@MAX_SPATIAL@], k[@MAX_SPATIAL@], i0[@MAX_SPATIAL@];
    float frac[@MAX_SPATIAL@];
    const onnx_i64 p = i % out_plane, m = (i / out_plane) % M, n = i / out_plane / M;
    onnx_i64 rem = p;
    for (int d = s - 1; d >= 0; --d) { pos[d] = rem % out[d]; rem /= out[d]; }
    float acc = @INIT@;
    for (onnx_i64 cl = 0; cl < cg; ++cl) {
      const onnx_i64 ch = (m / mg) * cg + cl, og = ch / per_og;
      const float* xp = x + (n * C + ch) * in_plane;
      for (onnx_i64 t = 0; t < taps; ++t) {
        onnx_i64 tr = t;
        for (int d = s - 1; d >= 0; --d) { k[d] = tr % ker[d]; tr /= ker[d]; }
        for (int d = 0; d < s; ++d) {
          const onnx_i64 chan = (og * taps + t) * s + d;
          const float base = (float)(pos[d] * st[d] + k[d] * dil[d]) - (float)pad[d];
          float c = base + offset[(n * OG * taps * s + chan) * out_plane + p];
          c = c != c ? @LIMIT@ : fminf(fmaxf(c, -@LIMIT@), @LIMIT@);
          const float f = floorf(c);
          i0[d] = (onnx_i64)f;
          frac[d] = c - f;
        }
        float v = 0.0f;
        for (onnx_i64 combo = 0; combo < ((onnx_i64)1 << s); ++combo) {
          onnx_i64 rest = combo, off = 0, stride = 1;
          float wt = 1.0f;
          bool inside = true;
          for (int d = s - 1; d >= 0; --d) {
            const onnx_i64 b = rest % 2;
            rest /= 2;
            const onnx_i64 j = i0[d] + b;
            inside = inside && j >= 0 && j < in[d];
            off += j * stride;
            stride *= in[d];
            wt *= b == 0 ? 1.0f - frac[d] : frac[d];
          }
          if (inside) v += wt * xp[off];
        }
        acc += v * w[(m * cg + cl) * taps + t] * @MASK@;
      }
    }
    y[i] = acc;
  }
}
