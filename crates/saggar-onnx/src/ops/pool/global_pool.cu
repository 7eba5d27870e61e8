// Global pooling, a group of threads per (image, channel) plane (`Work::RowGroups`: a warp a plane
// and several planes a block when there are many planes, a block a plane when there are few). Lane
// `l` of `lanes` takes elements `l, l + lanes, ...` of its plane in order (@TAKE@ of `v` into
// `acc`, from @INIT@), coalesced across the lanes; `onnx_row_fold` then combines the lanes (the
// sum, or with @MAX@ the largest) and lane 0 stores @FINISH@ of `acc` and the plane's size `n`.
// Every thread of a block runs the same number of iterations (a group past the last plane idles
// through them), so a group's lanes always meet at their shuffles.
// meta: planes, n, p (Lp; 0 otherwise)
(const onnx_i64* meta, const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float sh[@BLOCK@ / ONNX_ROW_LANES];
  const onnx_i64 planes = meta[0], n = meta[1], p = meta[2];
  (void)p;
  const onnx_i64 lane = threadIdx.x, lanes = blockDim.x, groups = blockDim.y;
  for (onnx_i64 first = (onnx_i64)blockIdx.x * groups; first < planes; first += (onnx_i64)gridDim.x * groups) {
    const onnx_i64 plane = first + threadIdx.y;
    const bool live = plane < planes;
    const float* xp = x + (live ? plane : 0) * n;
    float acc = @INIT@;
    if (live) for (onnx_i64 j = lane; j < n; j += lanes) { const float v = xp[j]; @TAKE@ }
    acc = onnx_row_fold<@MAX@>(acc, sh);
    if (live && lane == 0) y[plane] = @FINISH@;
  }
}
