// Compress in one block: the condition's first `read` entries in chunks of the block's threads,
// each chunk's true ones numbered by a prefix sum in shared memory, then the block copies their
// slices of `[outer, len, inner]` (as bits) to the next slices of `[outer, m, inner]`; the slices
// past the selected ones are zeros, and the count is written when `write_count` is 1.
// meta: outer, len, inner, m, read, write_count
(const onnx_i64* meta, const @T@* __restrict__ x, const unsigned char* __restrict__ cond, @T@* __restrict__ y, long long* __restrict__ count) {
  __shared__ int scan[@BLOCK@];
  __shared__ onnx_i64 sel[@BLOCK@];
  __shared__ onnx_i64 base_s;
  @BLOCK_SCAN@
  const onnx_i64 outer = meta[0], len = meta[1], inner = meta[2], m = meta[3], read = meta[4];
  const onnx_i64 slice = outer * inner;
  if (threadIdx.x == 0) base_s = 0;
  __syncthreads();
  for (onnx_i64 start = 0; start < read; start += blockDim.x) {
    const onnx_i64 j = start + threadIdx.x;
    const int flag = j < read && cond[j] != 0;
    const int incl = block_scan(flag);
    if (flag) sel[incl - 1] = j;
    __syncthreads();
    const onnx_i64 base = base_s, chunk = scan[blockDim.x - 1];
    for (onnx_i64 e = threadIdx.x; e < chunk * slice; e += blockDim.x) {
      const onnx_i64 t = e / slice, r = e % slice, o = r / inner, i = r % inner, k = base + t;
      if (k < m) y[(o * m + k) * inner + i] = x[(o * len + sel[t]) * inner + i];
    }
    __syncthreads();
    if (threadIdx.x == 0) base_s = base + chunk;
    __syncthreads();
  }
  const onnx_i64 total = base_s < m ? base_s : m, rest = m - total;
  for (onnx_i64 e = threadIdx.x; e < outer * rest * inner; e += blockDim.x) {
    const onnx_i64 o = e / (rest * inner), r = e % (rest * inner);
    y[(o * m + total) * inner + r] = 0;
  }
  if (threadIdx.x == 0 && meta[5]) count[0] = total;
}
