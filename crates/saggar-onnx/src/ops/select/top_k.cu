// TopK along the middle axis of `[outer, len, inner]`, one block per row, in the order `before`
// defines (better value first, a NaN the largest, the lower index first among equals). Three ways,
// by the row's length and `k`:
// - a row of at most @SORT@ elements with `k` above 8 is sorted whole in shared memory;
// - `k` up to 8: `k` rounds each search the row for the first element after the one the previous
//   round took;
// - otherwise a radix select: from the top, @KEY_BITS@ / 8 passes of a 256-bin histogram of the
//   elements' order keys (`key`: larger is better, both zeros one key, every NaN one key) find the
//   key of the `k`-th element; one pass takes every element above it and, in index order, the first
//   of those equal to it, each thread a run of consecutive elements numbered by a prefix sum; then the `k` taken are sorted, in shared
//   memory when `k` is at most @SORT@, else in place in the outputs.
// Sorts are the prelude's `onnx_block_sort`.
// meta: outer, len, inner, k
(const onnx_i64* meta, const @T@* __restrict__ x, @T@* __restrict__ values, long long* __restrict__ indices) {
  __shared__ @T@ sv[@BLOCK@];
  __shared__ onnx_i64 si[@BLOCK@];
  __shared__ @T@ sort_v[@SORT@];
  __shared__ int sort_i[@SORT@];
  // @COPIES@ copies of the histogram, a thread counting into copy `threadIdx.x % @COPIES@`, each 257
  // words apart so that one digit's counters fall in different banks: the leading digits of a row
  // are often one or two, and one shared counter would serialise the block on it.
  __shared__ unsigned int hist[@COPIES@ * 257];
  __shared__ unsigned long long pick_key;
  __shared__ onnx_i64 pick_need, taken_above, taken_equal;
  __shared__ int scan[@BLOCK@];
  @BLOCK_SCAN@
  const onnx_i64 len = meta[1], inner = meta[2], k = meta[3];
  auto before = [](@T@ a, onnx_i64 ia, @T@ b, onnx_i64 ib) {
    const bool an = a != a, bn = b != b;
    if (an && bn) return ia < ib;
    if (an) return @NAN_FIRST@;
    if (bn) return !@NAN_FIRST@;
    return a @CMP@ b || (a == b && ia < ib);
  };
  auto ascending = [](unsigned long long b) -> unsigned long long { @KEY_BODY@ };
  const @BITS@* bits = (const @BITS@*)x;
  // Sorts sort_v/sort_i[0, n).
  auto sort_shared = [&](onnx_i64 n) {
    onnx_block_sort(n, [&](onnx_i64 a, onnx_i64 b) {
      if (before(sort_v[b], sort_i[b], sort_v[a], sort_i[a])) {
        const @T@ v = sort_v[a]; sort_v[a] = sort_v[b]; sort_v[b] = v;
        const int i = sort_i[a]; sort_i[a] = sort_i[b]; sort_i[b] = i;
      }
    });
  };
  ONNX_ROWS(row, meta[0] * inner) {
    const onnx_i64 base = (row / inner) * len * inner + row % inner;
    const onnx_i64 out = (row / inner) * k * inner + row % inner;
    if (len <= @SORT@ && k > 8) {
      for (int j = threadIdx.x; j < len; j += blockDim.x) { sort_i[j] = j; sort_v[j] = x[base + j * inner]; }
      __syncthreads();
      sort_shared(len);
      for (onnx_i64 t = threadIdx.x; t < k; t += blockDim.x) { values[out + t * inner] = sort_v[t]; indices[out + t * inner] = sort_i[t]; }
      __syncthreads();
      continue;
    }
    if (k > 8) {
      auto key = [&](onnx_i64 j) -> unsigned long long {
        const unsigned long long a = ascending((unsigned long long)bits[base + j * inner]);
        return (@LARGEST@ ? a : ~a) & @KEY_MASK@;
      };
      unsigned long long prefix = 0, mask = 0;
      onnx_i64 need = k;
      for (int shift = @KEY_BITS@ - 8; shift >= 0; shift -= 8) {
        for (int d = threadIdx.x; d < @COPIES@ * 257; d += blockDim.x) hist[d] = 0;
        __syncthreads();
        unsigned int* mine = hist + (threadIdx.x % @COPIES@) * 257;
        for (onnx_i64 j = threadIdx.x; j < len; j += blockDim.x) {
          const unsigned long long kk = key(j);
          if ((kk & mask) == prefix) atomicAdd(&mine[(unsigned int)(kk >> shift) & 255u], 1u);
        }
        __syncthreads();
        for (int d = threadIdx.x; d < 256; d += blockDim.x) {
          unsigned int total = 0;
          for (int c = 0; c < @COPIES@; ++c) total += hist[c * 257 + d];
          hist[d] = total;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
          onnx_i64 above = 0;
          int d = 255;
          for (; d > 0 && above + (onnx_i64)hist[d] < need; --d) above += hist[d];
          pick_key = prefix | ((unsigned long long)d << shift);
          pick_need = need - above;
        }
        __syncthreads();
        prefix = pick_key;
        need = pick_need;
        mask |= 255ull << shift;
      }
      // prefix is the k-th key; take the k - need keys above it and the first `need` equal to it.
      if (threadIdx.x == 0) { taken_above = 0; taken_equal = 0; }
      __syncthreads();
      const bool shared_sort = k <= @SORT@;
      // Each thread takes a run of @RUN@ consecutive elements, so the runs keep the index order.
      for (onnx_i64 start = 0; start < len; start += (onnx_i64)blockDim.x * @RUN@) {
        const onnx_i64 first_j = start + (onnx_i64)threadIdx.x * @RUN@;
        int above = 0, equal = 0;
        for (int e = 0; e < @RUN@ && first_j + e < len; ++e) {
          const unsigned long long kk = key(first_j + e);
          above += kk > prefix;
          equal += kk == prefix;
        }
        const int incl = block_scan(above | (equal << 16));
        const onnx_i64 a0 = taken_above, e0 = taken_equal;
        onnx_i64 a = a0 + (incl & 0xffff) - above, q = e0 + (incl >> 16) - equal;
        for (int e = 0; e < @RUN@ && first_j + e < len && (above > 0 || equal > 0); ++e) {
          const onnx_i64 j = first_j + e;
          const unsigned long long kk = key(j);
          onnx_i64 slot = -1;
          if (kk > prefix) slot = a++;
          else if (kk == prefix && q++ < need) slot = (k - need) + q - 1;
          if (slot >= 0) {
            if (shared_sort) { sort_v[slot] = x[base + j * inner]; sort_i[slot] = (int)j; }
            else { values[out + slot * inner] = x[base + j * inner]; indices[out + slot * inner] = j; }
          }
        }
        __syncthreads();
        if (threadIdx.x == blockDim.x - 1) { taken_above = a0 + (incl & 0xffff); taken_equal = e0 + (incl >> 16); }
        __syncthreads();
      }
      if (shared_sort) {
        __syncthreads();
        sort_shared(k);
        for (onnx_i64 t = threadIdx.x; t < k; t += blockDim.x) { values[out + t * inner] = sort_v[t]; indices[out + t * inner] = sort_i[t]; }
        __syncthreads();
        continue;
      }
      onnx_block_sort(k, [&](onnx_i64 a, onnx_i64 b) {
        const onnx_i64 pa = out + a * inner, pb = out + b * inner;
        if (before(values[pb], indices[pb], values[pa], indices[pa])) {
          const @T@ v = values[pa]; values[pa] = values[pb]; values[pb] = v;
          const long long i = indices[pa]; indices[pa] = indices[pb]; indices[pb] = i;
        }
      });
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
