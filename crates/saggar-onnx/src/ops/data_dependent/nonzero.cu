// NonZero's bounded form in one block: the elements in chunks of the block's threads, each chunk's
// nonzero ones (`(x & @MASK@) != 0`: floats at either sign of zero are zero) numbered by a prefix
// sum in shared memory, so the columns follow the elements' row-major order; the columns past the
// count are zeros. A scalar is given as one dimension of 1.
// meta: n (elements), cols (the output's columns), rank, dims[rank]
(const onnx_i64* meta, const @BITS@* __restrict__ x, long long* __restrict__ y, long long* __restrict__ count) {
  __shared__ int scan[@BLOCK@];
  __shared__ onnx_i64 base_s;
  @BLOCK_SCAN@
  const onnx_i64 n = meta[0], cols = meta[1], rank = meta[2];
  const onnx_i64* dims = meta + 3;
  if (threadIdx.x == 0) base_s = 0;
  __syncthreads();
  for (onnx_i64 start = 0; start < n; start += blockDim.x) {
    const onnx_i64 i = start + threadIdx.x;
    const int flag = i < n && (x[i] & @MASK@) != 0;
    const int incl = block_scan(flag);
    const onnx_i64 base = base_s;
    const onnx_i64 k = base + incl - 1;
    if (flag && k < cols) {
      onnx_i64 rem = i;
      for (onnx_i64 d = rank - 1; d >= 0; --d) { y[d * cols + k] = rem % dims[d]; rem /= dims[d]; }
    }
    __syncthreads();
    if (threadIdx.x == 0) base_s = base + scan[blockDim.x - 1];
    __syncthreads();
  }
  const onnx_i64 total = base_s < cols ? base_s : cols;
  for (onnx_i64 e = threadIdx.x; e < rank * (cols - total); e += blockDim.x) y[(e / (cols - total)) * cols + total + e % (cols - total)] = 0;
  if (threadIdx.x == 0) count[0] = total;
}
