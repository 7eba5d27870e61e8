// Pooling, one thread per output element: @INIT@ starts the accumulator `acc`, @TAKE@ takes an
// input element `v` at plane offset `at` (`inside` taps taken before it), @STORE@ writes output
// element `i` (and, for max pooling with indices, the flat input position of the maximum).
// meta: s, N*C, param, in[s], out[s], kernel[s], stride[s], pad_begin[s], pad_end[s], dilation[s]
// with param count_include_pad (average), storage_order (max with indices) or p (Lp).
(const onnx_i64* meta, const float* __restrict__ x, float* __restrict__ y@INDICES_PARAM@) {
  const int s = (int)meta[0];
  const onnx_i64 planes = meta[1], param = meta[2];
  const onnx_i64* in = meta + 3; const onnx_i64* out = in + s; const onnx_i64* ker = out + s;
  const onnx_i64* st = ker + s; const onnx_i64* pb = st + s; const onnx_i64* pe = pb + s; const onnx_i64* dil = pe + s;
  onnx_i64 in_plane = 1, out_plane = 1, taps = 1;
  for (int d = 0; d < s; ++d) { in_plane *= in[d]; out_plane *= out[d]; taps *= ker[d]; }
  (void)param;
  ONNX_LOOP(i, planes * out_plane) {
    onnx_i64 pos[@MAX_SPATIAL@];
    onnx_i64 rem = i % out_plane;
    for (int d = s - 1; d >= 0; --d) { pos[d] = rem % out[d]; rem /= out[d]; }
    const float* xp = x + (i / out_plane) * in_plane;
    float acc = @INIT@;
    onnx_i64 inside = 0, padded = 0, best = 0;
    for (onnx_i64 t = 0; t < taps; ++t) {
      onnx_i64 tr = t, at = 0, stride = 1;
      int where = 0; /* 0 input, 1 padding, 2 beyond */
      for (int d = s - 1; d >= 0; --d) {
        const onnx_i64 k = tr % ker[d]; tr /= ker[d];
        const onnx_i64 p = pos[d] * st[d] + k * dil[d] - pb[d];
        if (p < -pb[d] || p >= in[d] + pe[d]) where = 2;
        else if ((p < 0 || p >= in[d]) && where == 0) where = 1;
        at += p * stride; stride *= in[d];
      }
      if (where == 0) { const float v = xp[at]; @TAKE@ ++inside; }
      else if (where == 1) ++padded;
    }
    (void)padded; (void)best;
    @STORE@
  }
}
