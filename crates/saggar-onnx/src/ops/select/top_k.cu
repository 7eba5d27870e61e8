// TopK along the middle axis of `[outer, len, inner]`, one block per row, in the order `before`
// defines (better value first, a NaN the largest, the lower index first among equals). A row of at
// most @SORT@ elements with `k` above 8 is sorted whole in shared memory (a bitonic sort, padded
// to a power of two with entries of index -1 that sort last); otherwise `k` rounds each search the
// row for the first element after the one the previous round took (any `k <= len`).
// meta: outer, len, inner, k
(const onnx_i64* meta, const @T@* __restrict__ x, @T@* __restrict__ values, long long* __restrict__ indices) {
  __shared__ @T@ sv[@BLOCK@];
  __shared__ onnx_i64 si[@BLOCK@];
  __shared__ @T@ sort_v[@SORT@];
  __shared__ int sort_i[@SORT@];
  const onnx_i64 len = meta[1], inner = meta[2], k = meta[3];
  auto before = [](@T@ a, onnx_i64 ia, @T@ b, onnx_i64 ib) {
    const bool an = a != a, bn = b != b;
    if (an && bn) return ia < ib;
    if (an) return @NAN_FIRST@;
    if (bn) return !@NAN_FIRST@;
    return a @CMP@ b || (a == b && ia < ib);
  };
  // `before` over the padded sort, where index -1 comes last.
  auto first = [&](@T@ a, int ia, @T@ b, int ib) { return ib < 0 ? ia >= 0 : (ia >= 0 && before(a, ia, b, ib)); };
  ONNX_ROWS(row, meta[0] * inner) {
    const onnx_i64 base = (row / inner) * len * inner + row % inner;
    const onnx_i64 out = (row / inner) * k * inner + row % inner;
    if (len <= @SORT@ && k > 8) {
      int n = 1;
      while (n < len) n <<= 1;
      for (int j = threadIdx.x; j < n; j += blockDim.x) { sort_i[j] = j < len ? j : -1; sort_v[j] = j < len ? x[base + j * inner] : (@T@)0; }
      __syncthreads();
      for (int size = 2; size <= n; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
          for (int j = threadIdx.x; j < n; j += blockDim.x) {
            const int p = j ^ stride;
            if (p <= j) continue;
            const bool up = (j & size) == 0;
            const bool swap = up ? first(sort_v[p], sort_i[p], sort_v[j], sort_i[j]) : first(sort_v[j], sort_i[j], sort_v[p], sort_i[p]);
            if (swap) { const @T@ v = sort_v[j]; sort_v[j] = sort_v[p]; sort_v[p] = v; const int i = sort_i[j]; sort_i[j] = sort_i[p]; sort_i[p] = i; }
          }
          __syncthreads();
        }
      }
      for (onnx_i64 t = threadIdx.x; t < k; t += blockDim.x) { values[out + t * inner] = sort_v[t]; indices[out + t * inner] = sort_i[t]; }
      __syncthreads();
      continue;
    }
    @T@ last_v = (@T@)0;
    onnx_i64 last_i = -1;
    for (onnx_i64 t = 0; t < k; ++t) {
      @T@ bv = (@T@)0;
      onnx_i64 bi = -1;
      for (onnx_i64 j = threadIdx.x; j < len; j += blockDim.x) {
        const @T@ v = x[base + j * inner];
        if ((last_i < 0 || before(last_v, last_i, v, j)) && (bi < 0 || before(v, j, bv, bi))) { bv = v; bi = j; }
      }
      sv[threadIdx.x] = bv; si[threadIdx.x] = bi;
      __syncthreads();
      for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
          const onnx_i64 oi = si[threadIdx.x + s], mi = si[threadIdx.x];
          if (oi >= 0 && (mi < 0 || before(sv[threadIdx.x + s], oi, sv[threadIdx.x], mi))) { sv[threadIdx.x] = sv[threadIdx.x + s]; si[threadIdx.x] = oi; }
        }
        __syncthreads();
      }
      last_v = sv[0]; last_i = si[0];
      if (threadIdx.x == 0) { values[out + t * inner] = last_v; indices[out + t * inner] = last_i; }
      __syncthreads();
    }
  }
}
