// MaxUnpool, one thread per element: zeroing the output, then scattering each input element to
// the flat output position its index names (indices outside the output are skipped).
// meta: input elements, output elements
(const onnx_i64* meta, @PARAMS@) {
  @BODY@
}
