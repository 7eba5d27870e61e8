// Col2Im, one thread per image element `(n, c, position)`: the sum of the columns `[N, C * taps, L]`
// whose tap reaches it (tap k of block position o lands on o * stride + k * dilation - pad_begin),
// gathered as the transposed convolution gathers (`conv_transpose.cu`).
// meta: s, N, C, image[s], blocks[s], kernel[s], stride[s], pad_begin[s], dilation[s]
(const onnx_i64* meta, const float* __restrict__ col, float* __restrict__ y) {
  const int s = (int)meta[0];
  const onnx_i64 N = meta[1], C = meta[2];
  const onnx_i64* yd = meta + 3; const onnx_i64* xd = yd + s; const onnx_i64* ker = xd + s;
  const onnx_i64* st = ker + s; const onnx_i64* pad = st + s; const onnx_i64* dil = pad + s;
  onnx_i64 y_plane = 1, x_plane = 1, taps = 1;
  for (int d = 0; d < s; ++d) { y_plane *= yd[d]; x_plane *= xd[d]; taps *= ker[d]; }
  ONNX_LOOP(i, N * C * y_plane) {
    onnx_i64 pos[@MAX_SPATIAL@];
    onnx_i64 rem = i % y_plane;
    for (int d = s - 1; d >= 0; --d) { pos[d] = rem % yd[d]; rem /= yd[d]; }
    const float* cp = col + (i / y_plane) * taps * x_plane;
    float acc = 0.0f;
    for (onnx_i64 t = 0; t < taps; ++t) {
@TAP@
      if (hit) acc += cp[t * x_plane + at];
    }
    y[i] = acc;
  }
}
