// Resize in linear or cubic mode (f32), one thread per output element: along each resized axis the
// source coordinate (`resize_coord.cuh`) gives a floor `q` and fraction `r` in (0, 1]; taps
// `t0..t0 + taps` from `q` (clamped to the axis) weigh by the triangle (`pick` 0) or the cubic kernel
// (`pick` 1) at distance `|t - r| * stretch`, normalised with antialias (flags 1), the taps outside
// the input dropped and the rest renormalised with exclude_outside (flags 2); the output is the sum
// over every combination of taps of the weights' product times the input. tf_crop_and_resize writes
// `fill` where a source coordinate is outside. geometry.rs `AxisPlan::filter` and host.rs compute
// the same weights and sum in the same order.
// meta: rank, n, k (resized axes), coord, pick, flags, fill (f32 bits), cubic constants a, a + 2,
// a + 3, 5a, 8a, 4a (f32 bits), out_dims[rank], in_strides[rank], then per resized axis in ascending
// order a record of 10: axis, in, taps, t0, and as f32 bits scale, out_w, p, q, c, stretch.
(const onnx_i64* meta, const float* __restrict__ x, float* __restrict__ y) {
  const int rank = (int)meta[0], k = (int)meta[2], coord = (int)meta[3];
  const bool cubic = meta[4] == 1, antialias = (meta[5] & 1) != 0, exclude = (meta[5] & 2) != 0;
  const float fill = __int_as_float((int)meta[6]);
  const float ca = __int_as_float((int)meta[7]), ca2 = __int_as_float((int)meta[8]);
  const float ca3 = __int_as_float((int)meta[9]), ca5 = __int_as_float((int)meta[10]);
  const float ca8 = __int_as_float((int)meta[11]), ca4 = __int_as_float((int)meta[12]);
  const onnx_i64* od = meta + @HEADER@;
  const onnx_i64* is = od + rank;
  const onnx_i64* ax = is + rank;
  ONNX_LOOP(i, meta[1]) {
    onnx_i64 lo[@MAX_AXES@];
    float r[@MAX_AXES@], n1[@MAX_AXES@], n2[@MAX_AXES@];
    // The weight of tap `t` of axis `b` before normalisation (`AxisPlan::raw_weight`).
    auto raw = [&](int b, onnx_i64 t) -> float {
      const float dd = fabsf(((float)t - r[b]) * __int_as_float((int)ax[b * @RECORD@ + 9]));
      if (!cubic) return fmaxf(1.0f - dd, 0.0f);
      if (dd <= 1.0f) return (ca2 * dd - ca3) * dd * dd + 1.0f;
      if (dd < 2.0f) return ((ca * dd - ca5) * dd + ca8) * dd - ca4;
      return 0.0f;
    };
    // The final weight of tap `kk` of axis `b`.
    auto weight = [&](int b, onnx_i64 kk) -> float {
      const float w0 = raw(b, ax[b * @RECORD@ + 3] + kk);
      const float w = antialias ? w0 / n1[b] : w0;
      if (!exclude) return w;
      const onnx_i64 j = lo[b] + kk;
      return j >= 0 && j < ax[b * @RECORD@ + 1] ? w / n2[b] : 0.0f;
    };
    onnx_i64 rem = i, base = 0;
    int a = k - 1;
    bool outside = false;
    for (int d = rank - 1; d >= 0; --d) {
      const onnx_i64 o = rem % od[d];
      rem /= od[d];
      if (a < 0 || ax[a * @RECORD@] != d) {
        base += o * is[d];
        continue;
      }
      const onnx_i64* m = ax + a * @RECORD@;
      const float xr = (float)o;
@COORD@
      outside = outside || away;
      lo[a] = 0;
      r[a] = 1.0f;
      n1[a] = 1.0f;
      n2[a] = 1.0f;
      if (!outside) {
        const float fl = floorf(xo);
        float qf = fl;
        r[a] = xo - fl;
        if (r[a] == 0.0f) { qf = fl - 1.0f; r[a] = 1.0f; }
        lo[a] = (onnx_i64)qf + m[3];
        if (antialias) {
          float s1 = 0.0f;
          for (onnx_i64 kk = 0; kk < m[2]; ++kk) s1 += raw(a, m[3] + kk);
          n1[a] = s1;
        }
        if (exclude) {
          float s2 = 0.0f;
          for (onnx_i64 kk = 0; kk < m[2]; ++kk) {
            const onnx_i64 j = lo[a] + kk;
            if (j >= 0 && j < m[1]) { const float w0 = raw(a, m[3] + kk); s2 += antialias ? w0 / n1[a] : w0; }
          }
          n2[a] = s2 == 0.0f ? 1.0f : s2;
        }
      }
      --a;
    }
    if (outside) {
      y[i] = fill;
      continue;
    }
    onnx_i64 total = 1;
    for (int b = 0; b < k; ++b) total *= ax[b * @RECORD@ + 2];
    float acc = 0.0f;
    for (onnx_i64 t = 0; t < total; ++t) {
      onnx_i64 tr = t, off = base;
      float w = 1.0f;
      for (int b = k - 1; b >= 0; --b) {
        const onnx_i64* m = ax + b * @RECORD@;
        const onnx_i64 kk = tr % m[2];
        tr /= m[2];
        onnx_i64 j = lo[b] + kk;
        j = j < 0 ? 0 : (j >= m[1] ? m[1] - 1 : j);
        off += j * is[m[0]];
        w *= weight(b, kk);
      }
      acc += w * x[off];
    }
    y[i] = acc;
  }
}
