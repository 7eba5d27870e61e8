// NonZero's bounded form in one block: each round a thread counts the nonzero elements of its own
// run of @RUN@ consecutive ones (`nonzero_at`: floats at either sign of zero are zero), a
// prefix sum over the block's threads in shared memory numbers the runs, and each thread writes its
// elements' coordinates, so the columns follow the elements' row-major order; the columns past the
// count are zeros. A scalar is given as one dimension of 1.
// meta: n (elements), cols (the output's columns), rank, dims[rank]
(const onnx_i64* meta, const @BITS@* __restrict__ x, long long* __restrict__ y, long long* __restrict__ count) {
  __shared__ int scan[@BLOCK@];
  __shared__ onnx_i64 base_s;
  @BLOCK_SCAN@
  const onnx_i64 n = meta[0], cols = meta[1], rank = meta[2];
  const onnx_i64* dims = meta + 3;
  @RUN_CODE@
  if (threadIdx.x == 0) base_s = 0;
  __syncthreads();
  for (onnx_i64 start = 0; start < n; start += (onnx_i64)blockDim.x * @RUN@) {
    const onnx_i64 first = start + (onnx_i64)threadIdx.x * @RUN@;
    const int c = count_run(first);
    const int incl = block_scan(c);
    const onnx_i64 base = base_s;
    write_run(first, base + incl - c);
    __syncthreads();
    if (threadIdx.x == 0) base_s = base + scan[blockDim.x - 1];
    __syncthreads();
  }
  const onnx_i64 total = base_s < cols ? base_s : cols;
  for (onnx_i64 e = threadIdx.x; e < rank * (cols - total); e += blockDim.x) y[(e / (cols - total)) * cols + total + e % (cols - total)] = 0;
  if (threadIdx.x == 0) count[0] = total;
}
