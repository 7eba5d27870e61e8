// A strided copy: `out[out_base + Σ c_d out_stride_d] = in[in_base + Σ c_d in_stride_d]` for every
// coordinate `c` of `dims`, elements of @T@ (an unsigned type of the element's size: copies move bits).
// The launch coalesces the axes (no axis of extent 1; no two axes contiguous on both sides). With
// `quads` the innermost axis is contiguous on both sides and counts groups of four elements (its
// extent in groups, its strides 4, `units` the number of groups; every offset a multiple of four): a
// thread moves a group by @VN@ @V@ access(es) where both pointers are @ALIGN@-byte aligned, else
// the groups' elements move one a thread. The body (`copy_body.cuh`) takes 32-bit indices when
// `narrow` (the launch checked that the element count and every offset reached fit) and 64-bit ones
// otherwise.
// meta: rank, units, in_base, out_base, dims[rank], in_strides[rank], out_strides[rank], narrow, quads
(const onnx_i64* meta, const @T@* __restrict__ in, @T@* __restrict__ out) {
  const int rank = (int)meta[0];
  const onnx_i64* dims = meta + 4; const onnx_i64* is = dims + rank; const onnx_i64* os = is + rank;
  const bool quads = os[rank + 1] != 0;
  const bool vec = quads && (((saggar_u64)in | (saggar_u64)out) & (@ALIGN@ - 1)) == 0;
  const int shift = quads && !vec ? 2 : 0;
  if (os[rank] != 0) {
@NARROW@
  } else {
@WIDE@
  }
}
