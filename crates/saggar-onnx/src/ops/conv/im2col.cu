// The im2col patch matrix `[N, C * taps, plane]` of a convolution's input, one thread per element,
// padding taps 0 (elements moved as @T@ bits).
// meta: s, N, C, in[s], out[s], kernel[s], stride[s], pad_begin[s], dilation[s]
(const onnx_i64* meta, const @T@* __restrict__ x, @T@* __restrict__ col) {
  const int s = (int)meta[0];
  const onnx_i64 N = meta[1], C = meta[2];
  const onnx_i64* in = meta + 3; const onnx_i64* out = in + s; const onnx_i64* ker = out + s;
  const onnx_i64* st = ker + s; const onnx_i64* pad = st + s; const onnx_i64* dil = pad + s;
  onnx_i64 in_plane = 1, out_plane = 1, taps = 1;
  for (int d = 0; d < s; ++d) { in_plane *= in[d]; out_plane *= out[d]; taps *= ker[d]; }
  ONNX_LOOP(i, N * C * taps * out_plane) {
    onnx_i64 rem = i % out_plane, tr = (i / out_plane) % taps;
    const onnx_i64 c = (i / out_plane / taps) % C, n = i / out_plane / taps / C;
    onnx_i64 at = 0, stride = 1;
    bool inside = true;
    for (int d = s - 1; d >= 0; --d) {
      const onnx_i64 o = rem % out[d]; rem /= out[d];
      const onnx_i64 k = tr % ker[d]; tr /= ker[d];
      const onnx_i64 p = o * st[d] + k * dil[d] - pad[d];
      inside = inside && p >= 0 && p < in[d];
      at += p * stride; stride *= in[d];
    }
    col[i] = inside ? x[(n * C + c) * in_plane + at] : (@T@)0;
  }
}
