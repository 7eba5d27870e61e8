// Unique's bounded form in one block, over the `d` slices of `[outer, d, inner]` (the flattened
// input: `[1, n, 1]`), each compared lexicographically by its elements' order keys (`@KEY@` of the
// element's bits `b`). The slice numbers are sorted in `indices` by a bitonic network over the next
// power of two (compare-swaps all ascending, so the virtual entries past `d` never move), ties by
// number: log2(d)^2 / 2 passes of d / 2 comparisons each, fine up to about a million slices of a
// few elements. A pass over the sorted numbers in chunks of the block's threads then finds each
// group of equal slices (prefix sums in shared memory). Sorted (@SORTED@ = 1): group g writes Y's
// slice g, indices[g] (its first slice), counts[g], and inverse_indices of its slices. First
// occurrence order: the pass leaves in `counts`, per slice, its group's first slice (minus the
// group's size at the first slice itself); a second pass numbers the first slices in input order
// and writes Y, indices and their inverse_indices, a third gives every slice its first slice's
// number, a fourth turns counts into sizes. Outputs past the count are zeros.
// meta: outer, d, inner
(const onnx_i64* meta, const @BITS@* __restrict__ x, @BITS@* __restrict__ y, long long* __restrict__ indices, long long* __restrict__ inverse, long long* __restrict__ counts, long long* __restrict__ count) {
  __shared__ int scan[@BLOCK@];
  __shared__ onnx_i64 sp[@BLOCK@];
  __shared__ onnx_i64 sf[@BLOCK@];
  __shared__ onnx_i64 ss[@BLOCK@];
  __shared__ onnx_i64 carry[4];
  const onnx_i64 outer = meta[0], d = meta[1], inner = meta[2], len = outer * inner;
  auto key = [&](onnx_i64 e) -> unsigned long long { const unsigned long long b = (unsigned long long)x[e]; @KEY_BODY@ };
  auto cmp = [&](onnx_i64 a, onnx_i64 c) -> int {
    for (onnx_i64 e = 0; e < len; ++e) {
      const onnx_i64 o = e / inner, i = e % inner;
      const unsigned long long ka = key((o * d + a) * inner + i), kc = key((o * d + c) * inner + i);
      if (ka != kc) return ka < kc ? -1 : 1;
    }
    return 0;
  };
  @BLOCK_SCAN@
  for (onnx_i64 k = threadIdx.x; k < d; k += blockDim.x) indices[k] = k;
  onnx_i64 n2 = 1;
  while (n2 < d) n2 <<= 1;
  __syncthreads();
  for (onnx_i64 size = 2; size <= n2; size <<= 1) {
    for (onnx_i64 stride = size >> 1; stride > 0; stride >>= 1) {
      for (onnx_i64 j = threadIdx.x; j < n2 / 2; j += blockDim.x) {
        const onnx_i64 blk = j / stride, off = j % stride, lo = blk * 2 * stride + off;
        const onnx_i64 hi = stride == (size >> 1) ? blk * 2 * stride + 2 * stride - 1 - off : lo + stride;
        if (hi < d) {
          const onnx_i64 a = indices[lo], c = indices[hi];
          const int o = cmp(c, a);
          if (o < 0 || (o == 0 && c < a)) { indices[lo] = c; indices[hi] = a; }
        }
      }
      __syncthreads();
    }
  }
  if (threadIdx.x == 0) { carry[0] = 0; carry[1] = -1; carry[2] = -1; carry[3] = -1; }
  __syncthreads();
  for (onnx_i64 start = 0; start < d; start += blockDim.x) {
    const onnx_i64 k = start + threadIdx.x;
    const bool live = k < d;
    const onnx_i64 p = live ? indices[k] : -1, next = live && k + 1 < d ? indices[k + 1] : -1;
    sp[threadIdx.x] = p;
    __syncthreads();
    const onnx_i64 prev = threadIdx.x == 0 ? carry[1] : sp[threadIdx.x - 1];
    const bool first = live && (k == 0 || cmp(prev, p) != 0);
    const bool last = live && (k + 1 == d || cmp(p, next) != 0);
    const int incl = block_scan(first ? 1 : 0);
    const int chunk = scan[blockDim.x - 1];
    if (first) { sf[incl - 1] = p; ss[incl - 1] = k; }
    __syncthreads();
    const onnx_i64 groups = carry[0], g = groups + incl - 1;
    const onnx_i64 f = incl == 0 ? carry[2] : sf[incl - 1], s = incl == 0 ? carry[3] : ss[incl - 1];
    if (live && @SORTED@) {
      inverse[p] = g;
      if (first) indices[g] = p;
      if (last) counts[g] = k - s + 1;
    } else if (live) {
      if (!first) counts[p] = f;
      if (last) counts[f] = -(k - s + 1);
    }
    if (@SORTED@) {
      for (onnx_i64 e = threadIdx.x; e < chunk * len; e += blockDim.x) {
        const onnx_i64 t = e / len, r = e % len, o = r / inner, i = r % inner;
        y[(o * d + groups + t) * inner + i] = x[(o * d + sf[t]) * inner + i];
      }
    }
    __syncthreads();
    if (threadIdx.x == blockDim.x - 1) { carry[0] = groups + chunk; carry[1] = p; carry[2] = f; carry[3] = s; }
    __syncthreads();
  }
  const onnx_i64 u = carry[0];
  if (!@SORTED@) {
    __syncthreads();
    if (threadIdx.x == 0) carry[0] = 0;
    __syncthreads();
    for (onnx_i64 start = 0; start < d; start += blockDim.x) {
      const onnx_i64 i = start + threadIdx.x;
      const bool head = i < d && counts[i] < 0;
      const int incl = block_scan(head ? 1 : 0);
      const int chunk = scan[blockDim.x - 1];
      const onnx_i64 base = carry[0];
      if (head) { inverse[i] = base + incl - 1; indices[base + incl - 1] = i; sf[incl - 1] = i; }
      __syncthreads();
      for (onnx_i64 e = threadIdx.x; e < chunk * len; e += blockDim.x) {
        const onnx_i64 t = e / len, r = e % len, o = r / inner, c = r % inner;
        y[(o * d + base + t) * inner + c] = x[(o * d + sf[t]) * inner + c];
      }
      __syncthreads();
      if (threadIdx.x == 0) carry[0] = base + chunk;
      __syncthreads();
    }
    for (onnx_i64 i = threadIdx.x; i < d; i += blockDim.x) if (counts[i] >= 0) inverse[i] = inverse[counts[i]];
    __syncthreads();
    for (onnx_i64 start = 0; start < u; start += blockDim.x) {
      const onnx_i64 r = start + threadIdx.x;
      const onnx_i64 size = r < u ? -counts[indices[r]] : 0;
      __syncthreads();
      if (r < u) counts[r] = size;
      __syncthreads();
    }
  }
  for (onnx_i64 e = threadIdx.x; e < outer * (d - u) * inner; e += blockDim.x) {
    const onnx_i64 o = e / ((d - u) * inner), r = e % ((d - u) * inner);
    y[(o * d + u) * inner + r] = 0;
  }
  for (onnx_i64 k = u + threadIdx.x; k < d; k += blockDim.x) { indices[k] = 0; counts[k] = 0; }
  if (threadIdx.x == 0) count[0] = u;
}
