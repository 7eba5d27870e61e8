// Pooling, one thread per output element `i` of (image, channel) plane `nc`: @INIT@ starts the
// accumulator `acc`, @TAKE@ takes an input element `v` at plane offset `at` (`inside` taps taken
// before it), @STORE@ writes output element `i` (and, for max pooling with indices, the flat input
// position of the maximum). Every body visits a window's taps in row-major order (the last axis
// fastest), as the host does; a tap past an axis's `pad_end` (ceil mode) is skipped, one in the
// padding counts in `padded`. The body is the planar one (two spatial axes, `pool_planar.cuh`; one
// axis comes with a leading axis of extent 1) or the one of any rank (`pool_rank.cuh`), in 32-bit
// indices when `narrow` (the launch checked that every index and coordinate fits) and in 64-bit
// ones otherwise.
// meta: s, N*C, param, in[s], out[s], kernel[s], stride[s], pad_begin[s], pad_end[s], dilation[s],
// narrow; param is count_include_pad (average), storage_order (max with indices) or p (Lp).
(const onnx_i64* meta, const @T@* __restrict__ x, @T@* __restrict__ y@INDICES_PARAM@) {
  const int s = (int)meta[0];
  const onnx_i64 param = meta[2];
  const onnx_i64* in = meta + 3;
  (void)param; (void)in;
  const bool narrow = meta[3 + 7 * s] != 0;
  if (s == 2 && narrow) {
@PLANAR_NARROW@
  } else if (s == 2) {
@PLANAR_WIDE@
  } else if (narrow) {
@RANK_NARROW@
  } else {
@RANK_WIDE@
  }
}
