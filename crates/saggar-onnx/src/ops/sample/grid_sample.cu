// GridSample, one thread per output element `(n, c, position)`: along each spatial axis `d` the
// normalised coordinate `grid[n, position, r - 1 - d]` becomes up to 4 taps (input index, -1 reading
// zero, and weight) as `Sampling::axis_taps` (sample/mod.rs) computes them: denormalised with
// align_corners, rounded half to even in nearest mode (`mode` 0), brought inside by border clamping
// (`padding` 1) or reflection (2), split into the floor and the next index (linear, 1) or four
// indices with Keys' cubic weights (cubic, 2). The output sums, over every combination of one tap
// per axis, the weights' product times the input, in the host's order.
// meta: r, n (elements), C, mode, padding, align_corners, in_dims[r], out_dims[r]
(const onnx_i64* meta, const float* __restrict__ x, const float* __restrict__ grid, float* __restrict__ y) {
  const int r = (int)meta[0], mode = (int)meta[3], padding = (int)meta[4];
  const bool align = meta[5] != 0;
  const onnx_i64 C = meta[2];
  const onnx_i64* in = meta + 6; const onnx_i64* out = in + r;
  onnx_i64 in_plane = 1, out_plane = 1;
  for (int d = 0; d < r; ++d) { in_plane *= in[d]; out_plane *= out[d]; }
  const int per = mode == 0 ? 1 : (mode == 1 ? 2 : 4);
  // The reference's reflection of `v` into [lo, hi].
  auto reflect = [](float v, float lo, float hi) -> float {
    const float range = hi - lo;
    if (range <= 0.0f) return lo;
    float dx, near_, far_;
    if (v < lo) { dx = lo - v; near_ = lo; far_ = hi; }
    else if (v > hi) { dx = v - hi; near_ = hi; far_ = lo; }
    else return v;
    const float k = floorf(dx / range), rest = dx - k * range, inward = near_ < far_ ? 1.0f : -1.0f;
    return fmodf(k, 2.0f) == 0.0f ? near_ + inward * rest : far_ - inward * rest;
  };
  ONNX_LOOP(i, meta[1]) {
    const onnx_i64 p = i % out_plane, nc = i / out_plane, n = nc / C;
    const float* g = grid + (n * out_plane + p) * r;
    onnx_i64 idx[@MAX_SPATIAL@][4];
    float w[@MAX_SPATIAL@][4];
    for (int d = 0; d < r; ++d) {
      const onnx_i64 len = in[d];
      const float l = (float)len, gv = g[r - 1 - d];
      float xo = align ? (gv + 1.0f) / 2.0f * (l - 1.0f) : ((gv + 1.0f) * l - 1.0f) / 2.0f;
      if (mode == 0) xo = rintf(xo);
      const float lo = align ? 0.0f : -0.5f, hi = align ? l - 1.0f : l - 0.5f;
      if (xo < lo || xo > hi) {
        if (padding == 1) xo = fminf(fmaxf(xo, 0.0f), l - 1.0f);
        else if (padding == 2) xo = reflect(xo, lo, hi);
      }
      xo = xo != xo ? @LIMIT@ : fminf(fmaxf(xo, -@LIMIT@), @LIMIT@);
      const float f = floorf(xo), t = xo - f;
      const onnx_i64 i0 = (onnx_i64)f;
      onnx_i64 raw[4] = {mode == 0 ? (onnx_i64)xo : (mode == 1 ? i0 : i0 - 1), mode == 1 ? i0 + 1 : i0, i0 + 1, i0 + 2};
      if (mode == 0) { w[d][0] = 1.0f; }
      else if (mode == 1) { w[d][0] = 1.0f - t; w[d][1] = t; }
      else {
        const float a = @CUBIC_A@, t1 = t + 1.0f, t2 = 2.0f - t, s = 1.0f - t;
        w[d][0] = ((a * t1 - 5.0f * a) * t1 + 8.0f * a) * t1 - 4.0f * a;
        w[d][1] = ((a + 2.0f) * t - (a + 3.0f)) * t * t + 1.0f;
        w[d][2] = ((a + 2.0f) * s - (a + 3.0f)) * s * s + 1.0f;
        w[d][3] = ((a * t2 - 5.0f * a) * t2 + 8.0f * a) * t2 - 4.0f * a;
      }
      for (int k = 0; k < per; ++k) {
        const onnx_i64 j = raw[k];
        if (padding == 0) idx[d][k] = j >= 0 && j < len ? j : -1;
        else if (padding == 1) idx[d][k] = j < 0 ? 0 : (j > len - 1 ? len - 1 : j);
        else {
          const onnx_i64 m = (onnx_i64)reflect((float)j, lo, hi);
          idx[d][k] = m < 0 ? 0 : (m > len - 1 ? len - 1 : m);
        }
      }
    }
    onnx_i64 combos = 1;
    for (int d = 0; d < r; ++d) combos *= per;
    const float* xp = x + nc * in_plane;
    float acc = 0.0f;
    for (onnx_i64 t = 0; t < combos; ++t) {
      onnx_i64 rest = t, off = 0, stride = 1;
      float wt = 1.0f;
      bool zero = false;
      for (int d = r - 1; d >= 0; --d) {
        const int k = (int)(rest % per);
        rest /= per;
        const onnx_i64 j = idx[d][k];
        zero = zero || j < 0;
        off += j * stride;
        stride *= in[d];
        wt *= w[d][k];
      }
      if (!zero) acc += wt * xp[off];
    }
    y[i] = acc;
  }
}
