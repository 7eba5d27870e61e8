// The channels-last patch matrix `[N, out..., taps * C]` of a convolution's input `[N, in..., C]`
// over one or two spatial axes (one comes as two, the first of extent 1), padding taps 0. A row is
// one output position; its columns are the kernel taps in order, each the C channels of the input
// pixel the tap reads. Elements move as units of @T@ (`CU` units a pixel: 16, 8, 4, 2 or 1 bytes,
// the widest that divides a pixel's bytes), one unit a thread, so consecutive threads read
// consecutive units of a pixel and write consecutive units of a row. In 32-bit indices when
// `narrow` (the launch checked that every index fits), else 64-bit.
// meta: N, CU, H, W, OH, OW, KH, KW, SY, SX, PY, PX, DY, DX, narrow
(const onnx_i64* meta, const @T@* __restrict__ x, @T@* __restrict__ col) {
  if (meta[14] != 0) {
@NARROW@
  } else {
@WIDE@
  }
}
