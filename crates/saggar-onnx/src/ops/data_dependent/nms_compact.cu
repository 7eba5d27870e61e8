// NonMaxSuppression's packing in one block: the rows of `[batch, class, box]` the selection kept
// (those not -1), in order, moved to the front in chunks of the block's threads (numbered by a
// prefix sum in shared memory; a row only moves forward, after its chunk is read), zeros after
// them, and their number.
// meta: rows
(const onnx_i64* meta, long long* __restrict__ sel, long long* __restrict__ count) {
  __shared__ int scan[@BLOCK@];
  __shared__ onnx_i64 base_s;
  @BLOCK_SCAN@
  const onnx_i64 rows = meta[0];
  if (threadIdx.x == 0) base_s = 0;
  __syncthreads();
  for (onnx_i64 start = 0; start < rows; start += blockDim.x) {
    const onnx_i64 r = start + threadIdx.x;
    const bool live = r < rows && sel[r * 3] >= 0;
    long long a = 0, b = 0, c = 0;
    if (live) { a = sel[r * 3]; b = sel[r * 3 + 1]; c = sel[r * 3 + 2]; }
    const int incl = block_scan(live ? 1 : 0);
    const onnx_i64 base = base_s;
    if (live) {
      const onnx_i64 to = base + incl - 1;
      sel[to * 3] = a; sel[to * 3 + 1] = b; sel[to * 3 + 2] = c;
    }
    __syncthreads();
    if (threadIdx.x == 0) base_s = base + scan[blockDim.x - 1];
    __syncthreads();
  }
  const onnx_i64 total = base_s;
  for (onnx_i64 e = total * 3 + threadIdx.x; e < rows * 3; e += blockDim.x) sel[e] = 0;
  if (threadIdx.x == 0) count[0] = total;
}
