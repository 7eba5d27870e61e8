// TopK along the middle axis of `[outer, len, inner]`, one block per row: `k` rounds, each a
// block-wide search for the first element, in the order `before` defines (better value first, a NaN
// the largest, the lower index first among equals), that comes after the one the previous round
// took. Any `k <= len`; each round reads the row once.
// meta: outer, len, inner, k
(const onnx_i64* meta, const @T@* __restrict__ x, @T@* __restrict__ values, long long* __restrict__ indices) {
  __shared__ @T@ sv[@BLOCK@];
  __shared__ onnx_i64 si[@BLOCK@];
  const onnx_i64 len = meta[1], inner = meta[2], k = meta[3];
  auto before = [](@T@ a, onnx_i64 ia, @T@ b, onnx_i64 ib) {
    const bool an = a != a, bn = b != b;
    if (an && bn) return ia < ib;
    if (an) return @NAN_FIRST@;
    if (bn) return !@NAN_FIRST@;
    return a @CMP@ b || (a == b && ia < ib);
  };
  ONNX_ROWS(row, meta[0] * inner) {
    const onnx_i64 base = (row / inner) * len * inner + row % inner;
    const onnx_i64 out = (row / inner) * k * inner + row % inner;
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
