// NonZero's bounded form over many elements, in chunks of @CHUNK@ (a block's threads, a run of @RUN@
// consecutive elements each), as three launches over the same `partials` (`chunks + 1` int64s of
// working memory): phase 0, a block per chunk counts its nonzero elements (`nonzero_at`) into
// `partials[chunk]`; phase 1, one block turns the counts into exclusive prefix sums, the total in
// `partials[chunks]` and the count (at most `cols`) in `count`; phase 2, a block per chunk numbers its
// elements from its prefix by a prefix sum over its threads and writes their coordinates, so the
// columns follow the elements' row-major order, then every block zeroes its share of the columns past
// the count.
// meta: n (elements), cols (the output's columns), rank, chunks, dims[rank]
(const onnx_i64* meta, const @BITS@* __restrict__ x, long long* __restrict__ y, long long* __restrict__ count, long long* __restrict__ partials) {
  __shared__ int scan[@BLOCK@];
  __shared__ onnx_i64 base_s;
  @BLOCK_SCAN@
  const onnx_i64 n = meta[0], cols = meta[1], rank = meta[2], chunks = meta[3];
  const onnx_i64* dims = meta + 4;
  @RUN_CODE@
  if (@PHASE@ == 1) {
    if (threadIdx.x == 0) base_s = 0;
    __syncthreads();
    for (onnx_i64 start = 0; start < chunks; start += blockDim.x) {
      const onnx_i64 b = start + threadIdx.x;
      const int c = b < chunks ? (int)partials[b] : 0;
      const int incl = block_scan(c);
      const onnx_i64 base = base_s;
      if (b < chunks) partials[b] = base + incl - c;
      __syncthreads();
      if (threadIdx.x == 0) base_s = base + scan[blockDim.x - 1];
      __syncthreads();
    }
    if (threadIdx.x == 0) { partials[chunks] = base_s; count[0] = base_s < cols ? base_s : cols; }
    return;
  }
  ONNX_ROWS(b, chunks) {
    const onnx_i64 first = b * @CHUNK@ + (onnx_i64)threadIdx.x * @RUN@;
    const int c = count_run(first);
    const int incl = block_scan(c);
    if (@PHASE@ == 0) {
      if (threadIdx.x == blockDim.x - 1) partials[b] = incl;
    } else {
      write_run(first, partials[b] + incl - c);
    }
    __syncthreads();
  }
  if (@PHASE@ == 2) {
    const onnx_i64 total = partials[chunks] < cols ? partials[chunks] : cols, rest = cols - total;
    for (onnx_i64 e = (onnx_i64)blockIdx.x * blockDim.x + threadIdx.x; e < rank * rest; e += (onnx_i64)gridDim.x * blockDim.x) {
      y[(e / rest) * cols + total + e % rest] = 0;
    }
  }
}
