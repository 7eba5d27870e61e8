// The im2col patch matrix `[N, C * taps, plane]` of a convolution's input, padding taps 0 (elements
// moved as @T@ bits). A thread takes one output position `p` of one (image, channel) plane and
// writes element `p` of each of the plane's `taps` rows: the divisions are a position's, not an
// element's, and consecutive threads write consecutive elements of each row. The body is the
// planar one (two spatial axes, `im2col_planar.cuh`) or the one of any rank (`im2col_rank.cuh`),
// in 32-bit indices when `narrow` (the launch checked that every index and coordinate fits) and in
// 64-bit ones otherwise.
// meta: s, N, C, in[s], out[s], kernel[s], stride[s], pad_begin[s], dilation[s], narrow
(const onnx_i64* meta, const @T@* __restrict__ x, @T@* __restrict__ col) {
  if (meta[3 + 6 * meta[0]] != 0) {
@NARROW@
  } else {
@WIDE@
  }
}
