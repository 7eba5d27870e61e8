// The definitions every generated source shares, after saggar-device's builtin prelude.

typedef long long onnx_i64;
#define ONNX_NEG_INF __int_as_float(0xff800000)
#define ONNX_POS_INF __int_as_float(0x7f800000)
#define ONNX_LOOP(i, n) for (onnx_i64 i = (onnx_i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (onnx_i64)gridDim.x * blockDim.x)
#define ONNX_ROWS(r, n) for (onnx_i64 r = blockIdx.x; r < (n); r += gridDim.x)
template <typename T> __device__ inline T gpu_max(T a, T b) { return b > a ? b : a; }
template <typename T> __device__ inline T gpu_min(T a, T b) { return b < a ? b : a; }
// A float to an integer type as Rust's `as` and PTX's cvt convert it: toward zero, saturated at the
// type's bounds, NaN as 0. `lo` and `hi` are -2^(n-1) and 2^(n-1) (signed) or 0 and 2^n, exact.
template <typename T, typename F> __device__ inline T onnx_float_to_int(F v, F lo, F hi) {
  if (v != v) return (T)0;
  if (v <= lo) return (T)lo;
  if (v >= hi) return (T)(~0ULL >> (64 - 8 * sizeof(T) + (lo < 0 ? 1 : 0)));
  return (T)v;
}
// Convolution tap `t` (row-major over the `s` kernel axes `ker`) of the output position `pos`: the
// offset of its input element in a plane of extents `in`, or -1 when the tap falls in the padding.
// Direct and quantised convolutions share it.
__device__ inline onnx_i64 onnx_conv_tap(onnx_i64 t, const onnx_i64* pos, int s, const onnx_i64* in,
                                         const onnx_i64* ker, const onnx_i64* st, const onnx_i64* pad,
                                         const onnx_i64* dil) {
  onnx_i64 at = 0, stride = 1;
  bool inside = true;
  for (int d = s - 1; d >= 0; --d) {
    const onnx_i64 k = t % ker[d]; t /= ker[d];
    const onnx_i64 p = pos[d] * st[d] + k * dil[d] - pad[d];
    inside = inside && p >= 0 && p < in[d];
    at += p * stride; stride *= in[d];
  }
  return inside ? at : -1;
}
// Row groups: ONNX_ROW_LANES consecutive threads share one row and sum across it with xor
// shuffles within the group (a width of 32 on HIP's 64-lane wavefronts too).
#define ONNX_ROW_LANES 32
#if defined(__HIPCC_RTC__) || defined(__HIP_PLATFORM_AMD__)
#define ONNX_SHFL_XOR(v, o) __shfl_xor((v), (o), ONNX_ROW_LANES)
#else
#define ONNX_SHFL_XOR(v, o) __shfl_xor_sync(0xffffffffu, (v), (o), ONNX_ROW_LANES)
#endif
// A row group keeps its row in dynamic shared memory (the launch reserves it) while the block's
// rows fit ONNX_ROW_CACHE_BYTES, so a row is read from global memory once instead of three times.
#define ONNX_ROW_CACHE_BYTES 49152
// Declared as float4 so that four-element paths may read it as such (16-byte aligned).
#ifndef ONNX_DYNAMIC_SHARED
#define ONNX_DYNAMIC_SHARED(name) extern __shared__ float4 name##_float4[]; float* const name = (float*)name##_float4
#endif
// Device functions inlined into every call (a fused chain in its kernel's loops: a call per element
// would cost more than the chain's arithmetic).
#ifndef ONNX_FORCEINLINE
#if defined(__HIPCC_RTC__) || defined(__HIP_PLATFORM_AMD__)
#define ONNX_FORCEINLINE inline __attribute__((always_inline))
#else
#define ONNX_FORCEINLINE __forceinline__
#endif
#endif
// Device functions called, not inlined: a slow path's value function read at several places
// (the scalar LayerNorm's three loops), one copy of its code instead of three, which NVRTC takes
// a third less time over.
#ifndef ONNX_NOINLINE
#if defined(__HIPCC_RTC__) || defined(__HIP_PLATFORM_AMD__)
#define ONNX_NOINLINE __attribute__((noinline))
#else
#define ONNX_NOINLINE __noinline__
#endif
#endif
// Launch bounds: at most `threads` a block, and on CUDA registers for `blocks` blocks an SM.
#ifndef ONNX_BOUNDS
#if defined(__HIPCC_RTC__) || defined(__HIP_PLATFORM_AMD__)
#define ONNX_BOUNDS(threads, blocks) __launch_bounds__(threads)
#else
#define ONNX_BOUNDS(threads, blocks) __launch_bounds__(threads, blocks)
#endif
#endif
// Xor shuffles within groups of `w` adjacent lanes (a power of two up to 32).
#if defined(__HIPCC_RTC__) || defined(__HIP_PLATFORM_AMD__)
#define ONNX_SHFL_XOR_W(v, o, w) __shfl_xor((v), (o), (w))
#else
#define ONNX_SHFL_XOR_W(v, o, w) __shfl_xor_sync(0xffffffffu, (v), (o), (w))
#endif
// Whether `p` may be read or written as float4 (16-byte aligned).
__device__ inline bool onnx_aligned16(const void* p) { return ((saggar_u64)p & 15) == 0; }
// Four consecutive elements of row `row` at column `4 * q` as a vector `V` of `T` (`float4` of
// f32, `ushort4` of half bits, `int4`, `char4`, `uchar4`), from an input of broadcast mode `mode`
// (see the fused kernels' `meta`) whose divisor is the row length (`cols4` vectors): the row
// itself (1), one row for every row (2), one value per row (4), or a scalar (3).
template <typename V, typename T>
__device__ ONNX_FORCEINLINE V onnx_row_load4(const T* __restrict__ p, onnx_i64 mode, onnx_i64 row, int cols4, int q) {
  if (mode == 1) return ((const V*)p)[row * cols4 + q];
  if (mode == 2) return ((const V*)p)[q];
  const T x = p[mode == 4 ? row : 0];
  V v;
  v.x = x; v.y = x; v.z = x; v.w = x;
  return v;
}
// The offsets `(j / inner) % count` of the four flat indices `j = i .. i + 3` of an input read in
// blocks (broadcast modes 2, 4 and 5 of the fused kernels: a per-channel bias over NCHW has blocks
// of `inner = H * W`): at most a division and a remainder for the four, each further lane stepping
// into the next block where it crosses one (the four may straddle several blocks when `inner < 4`)
// and back to block 0 after `count`. In 32-bit arithmetic when `n32` (every index fits).
template <typename I> __device__ ONNX_FORCEINLINE void onnx_block_offsets4_in(I i, I inner, I count, onnx_i64* o) {
  I t = i, r = 0;
  if (inner != 1) { t = i / inner; r = i - t * inner; }
  t %= count;
  o[0] = (onnx_i64)t;
#pragma unroll
  for (int l = 1; l < 4; ++l) {
    if (++r == inner) { r = 0; if (++t == count) t = 0; }
    o[l] = (onnx_i64)t;
  }
}
__device__ ONNX_FORCEINLINE void onnx_block_offsets4(onnx_i64 i, onnx_i64 inner, onnx_i64 count, bool n32, onnx_i64* o) {
  if (n32) onnx_block_offsets4_in<unsigned>((unsigned)i, (unsigned)inner, (unsigned)count, o);
  else onnx_block_offsets4_in<onnx_i64>(i, inner, count, o);
}
// The sum (or with MAX the largest, NaN ignored as `gpu_max` does) over a row's group: `blockDim.x`
// threads of one `threadIdx.y` (a warp's lanes, or with `blockDim.y == 1` the whole block through
// `sh`). Xor shuffles combine the lanes of each warp (offsets 16, 8, 4, 2, 1), then the warps'
// results are combined in order from 0. Every thread of the block calls it together.
// The sum (or with MAX the largest) over a group of ONNX_ROW_LANES lanes, every lane getting it.
template <bool MAX> __device__ ONNX_FORCEINLINE float onnx_lanes_fold(float v) {
  for (int o = ONNX_ROW_LANES / 2; o > 0; o >>= 1) { const float u = ONNX_SHFL_XOR(v, o); v = MAX ? gpu_max(v, u) : v + u; }
  return v;
}
template <bool MAX> __device__ inline float onnx_row_fold(float v, float* sh) {
  v = onnx_lanes_fold<MAX>(v);
  if (blockDim.x > ONNX_ROW_LANES) {
    __syncthreads();
    if (threadIdx.x % ONNX_ROW_LANES == 0) sh[threadIdx.x / ONNX_ROW_LANES] = v;
    __syncthreads();
    v = MAX ? ONNX_NEG_INF : 0.0f;
    for (unsigned w = 0; w < blockDim.x / ONNX_ROW_LANES; ++w) v = MAX ? gpu_max(v, sh[w]) : v + sh[w];
  }
  return v;
}
__device__ inline float onnx_row_sum(float v, float* sh) { return onnx_row_fold<false>(v, sh); }
#define ONNX_BLOCK_REDUCE(v, sh, a, b, EXPR) { \
  sh[threadIdx.x] = v; __syncthreads(); \
  for (unsigned s_ = blockDim.x / 2; s_ > 0; s_ >>= 1) { \
    if (threadIdx.x < s_) { const auto a = sh[threadIdx.x]; const auto b = sh[threadIdx.x + s_]; sh[threadIdx.x] = (EXPR); } \
    __syncthreads(); } \
  v = sh[0]; __syncthreads(); }
// Half precisions are bits in memory; Cast converts through f32 (exactly one way, rounding to
// nearest even the other, as the host's `half` crate does; NaN payloads may differ on CUDA).
#if defined(__CUDACC__) && !defined(__HIPCC_RTC__) && !defined(__HIP_PLATFORM_AMD__)
// CUDA: the hardware conversions (round to nearest even; a NaN becomes the canonical 0x7fff).
__device__ inline float onnx_f16_to_f32(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ inline unsigned short onnx_f32_to_f16(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
#else
__device__ inline float onnx_f16_to_f32(unsigned short h) {
  const unsigned sign = ((unsigned)h & 0x8000u) << 16, e = ((unsigned)h >> 10) & 0x1fu, m = (unsigned)h & 0x3ffu;
  if (e == 0) { const float f = (float)m * 5.9604644775390625e-8f; return sign ? -f : f; }
  if (e == 31) return __int_as_float((int)(sign | 0x7f800000u | (m << 13)));
  return __int_as_float((int)(sign | ((e + 112u) << 23) | (m << 13)));
}
__device__ inline unsigned short onnx_f32_to_f16(float f) {
  const unsigned x = (unsigned)__float_as_int(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x47800000u) return (unsigned short)(sign | 0x7c00u);
  if (ax < 0x38800000u) return (unsigned short)(sign | (unsigned)rintf(__int_as_float((int)ax) * 16777216.0f));
  const unsigned h = (ax >> 13) - (112u << 10), rem = ax & 0x1fffu;
  return (unsigned short)(sign | (h + ((rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ? 1u : 0u)));
}
#endif
__device__ inline float onnx_bf16_to_f32(unsigned short h) { return __int_as_float((int)((unsigned)h << 16)); }
__device__ inline unsigned short onnx_f32_to_bf16(float f) {
  const unsigned x = (unsigned)__float_as_int(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Four consecutive elements as floats: f32 16-byte aligned, halves (bits) 8-byte aligned.
__device__ ONNX_FORCEINLINE float4 onnx_ld4_f32(const float* p) { return *(const float4*)p; }
template <bool BF16> __device__ ONNX_FORCEINLINE float4 onnx_ld4_half(const unsigned short* p) {
  const uint2 w = *(const uint2*)p;
  const unsigned short h[4] = {(unsigned short)(w.x & 0xffffu), (unsigned short)(w.x >> 16),
                               (unsigned short)(w.y & 0xffffu), (unsigned short)(w.y >> 16)};
  float f[4];
  for (int i = 0; i < 4; ++i) f[i] = BF16 ? onnx_bf16_to_f32(h[i]) : onnx_f16_to_f32(h[i]);
  return make_float4(f[0], f[1], f[2], f[3]);
}

// Two floats rounded to a pair of halves in one 32-bit word (`lo` in the low bits), f16 or bf16.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(__HIPCC_RTC__) && !defined(__HIP_PLATFORM_AMD__)
#define ONNX_MMA_PTX 1
__device__ ONNX_FORCEINLINE unsigned onnx_pack_f16(float lo, float hi) { unsigned r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }
__device__ ONNX_FORCEINLINE unsigned onnx_pack_bf16(float lo, float hi) { unsigned r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }
#else
__device__ ONNX_FORCEINLINE unsigned onnx_pack_f16(float lo, float hi) { return (unsigned)onnx_f32_to_f16(lo) | ((unsigned)onnx_f32_to_f16(hi) << 16); }
__device__ ONNX_FORCEINLINE unsigned onnx_pack_bf16(float lo, float hi) { return (unsigned)onnx_f32_to_bf16(lo) | ((unsigned)onnx_f32_to_bf16(hi) << 16); }
#endif
// `c += a * b` for one warp: the m16n8k16 tensor-core product of a 16 x 16 tile `a` (row-major) and a
// 16 x 8 tile `b` (column-major), halves in pairs, f32 accumulators, in the PTX `mma` fragment
// layouts (lane = 4 * group + thread in group: a = rows group and group + 8 at columns 2 thread
// and 8 + 2 thread; b = column group at rows 2 thread and 8 + 2 thread; c = rows group and group + 8
// at columns 2 thread and 2 thread + 1). CUDA from sm_80 issues the instruction; elsewhere (HIP, the
// CPU emulation) the lanes gather the operands by shuffles and multiply exactly in f32.
#if defined(ONNX_MMA_PTX)
__device__ ONNX_FORCEINLINE void onnx_mma_f16(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ ONNX_FORCEINLINE void onnx_mma_bf16(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Four 8x8 tiles of halves from shared memory in `mma` fragment order: lane l gives the address of
// row l % 8 of tile l / 8 (16-byte aligned); lane 4g + t receives row g, halves 2t and 2t + 1 of
// each tile (`_trans`: column g, rows 2t and 2t + 1).
__device__ ONNX_FORCEINLINE void onnx_ldsm_x4(unsigned* r, const unsigned* row) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ ONNX_FORCEINLINE void onnx_ldsm_x4_trans(unsigned* r, const unsigned* row) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
#else
#if defined(__HIPCC_RTC__) || defined(__HIP_PLATFORM_AMD__)
#define ONNX_SHFL_IDX(v, src) __shfl((v), (src), 32)
#else
#define ONNX_SHFL_IDX(v, src) __shfl_sync(0xffffffffu, (v), (src), 32)
#endif
// The dot product of two pairs of halves, in f32.
template <bool BF16> __device__ ONNX_FORCEINLINE float onnx_dot2(unsigned x, unsigned y) {
  const float x0 = BF16 ? onnx_bf16_to_f32((unsigned short)(x & 0xffffu)) : onnx_f16_to_f32((unsigned short)(x & 0xffffu));
  const float x1 = BF16 ? onnx_bf16_to_f32((unsigned short)(x >> 16)) : onnx_f16_to_f32((unsigned short)(x >> 16));
  const float y0 = BF16 ? onnx_bf16_to_f32((unsigned short)(y & 0xffffu)) : onnx_f16_to_f32((unsigned short)(y & 0xffffu));
  const float y1 = BF16 ? onnx_bf16_to_f32((unsigned short)(y >> 16)) : onnx_f16_to_f32((unsigned short)(y >> 16));
  return x0 * y0 + x1 * y1;
}
template <bool BF16> __device__ ONNX_FORCEINLINE void onnx_mma_soft(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  const int lane = (int)(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  for (int kp = 0; kp < 4; ++kp) {
    const unsigned x0 = ONNX_SHFL_IDX(a[0], g * 4 + kp), x1 = ONNX_SHFL_IDX(a[1], g * 4 + kp);
    const unsigned x2 = ONNX_SHFL_IDX(a[2], g * 4 + kp), x3 = ONNX_SHFL_IDX(a[3], g * 4 + kp);
    const unsigned y00 = ONNX_SHFL_IDX(b0, 8 * t + kp), y01 = ONNX_SHFL_IDX(b1, 8 * t + kp);
    const unsigned y10 = ONNX_SHFL_IDX(b0, 8 * t + 4 + kp), y11 = ONNX_SHFL_IDX(b1, 8 * t + 4 + kp);
    c[0] += onnx_dot2<BF16>(x0, y00) + onnx_dot2<BF16>(x2, y01);
    c[1] += onnx_dot2<BF16>(x0, y10) + onnx_dot2<BF16>(x2, y11);
    c[2] += onnx_dot2<BF16>(x1, y00) + onnx_dot2<BF16>(x3, y01);
    c[3] += onnx_dot2<BF16>(x1, y10) + onnx_dot2<BF16>(x3, y11);
  }
}
__device__ ONNX_FORCEINLINE void onnx_mma_f16(float* c, const unsigned* a, unsigned b0, unsigned b1) { onnx_mma_soft<false>(c, a, b0, b1); }
__device__ ONNX_FORCEINLINE void onnx_mma_bf16(float* c, const unsigned* a, unsigned b0, unsigned b1) { onnx_mma_soft<true>(c, a, b0, b1); }
#endif

__device__ inline onnx_i64 red_offset(onnx_i64 j, int nr, const onnx_i64* rd, const onnx_i64* rs) {
  onnx_i64 off = 0;
  for (int d = nr - 1; d >= 0; --d) { off += (j % rd[d]) * rs[d]; j /= rd[d]; }
  return off;
}
// The passes of a bitonic network over positions [0, n) whose first step of each merge compares
// mirrored pairs, so any `n` works without padding: `order(a, b)`, for positions a < b, swaps the
// two when they are out of order. The mirrored step of merge `size`, then one of stride `stride`;
// each ends with a barrier.
template <typename Order> __device__ inline void onnx_sort_mirror(onnx_i64 n, onnx_i64 size, Order order) {
  for (onnx_i64 j = threadIdx.x; j < n; j += blockDim.x) {
    const onnx_i64 p = (j | (size - 1)) - (j & (size - 1));
    if ((j & (size >> 1)) == 0 && p < n) order(j, p);
  }
  __syncthreads();
}
template <typename Order> __device__ inline void onnx_sort_stride(onnx_i64 n, onnx_i64 stride, Order order) {
  for (onnx_i64 j = threadIdx.x; j < n; j += blockDim.x) {
    if ((j & stride) == 0 && (j | stride) < n) order(j, j | stride);
  }
  __syncthreads();
}
// Sorts positions [0, n) with a block's threads (every thread calls it) by that network.
template <typename Order> __device__ inline void onnx_block_sort(onnx_i64 n, Order order) {
  for (onnx_i64 size = 2; size < 2 * n; size <<= 1) {
    onnx_sort_mirror(n, size, order);
    for (onnx_i64 stride = size >> 2; stride > 0; stride >>= 1) onnx_sort_stride(n, stride, order);
  }
}
// The same network over the values `v[0, n)`, every pass of a stride below `chunk` (a power of two)
// run in shared memory: the values are staged a chunk at a time in `stage` (`chunk` of them) for the
// merges up to `chunk` and, in each longer merge, for its strides below `chunk`; only the longer
// strides pass through `v`. `swapped(a, b)`, for the values at positions a < b, says whether they are
// out of order.
template <typename T, typename Swapped>
__device__ inline void onnx_block_sort_staged(T* v, onnx_i64 n, T* stage, onnx_i64 chunk, Swapped swapped) {
  auto order_in = [&](T* a) {
    return [=](onnx_i64 x, onnx_i64 y) {
      if (swapped(a[x], a[y])) { const T t = a[x]; a[x] = a[y]; a[y] = t; }
    };
  };
  // Merges `first` to `last` or, without `mirror`, only the strides below `chunk` of merge `first`,
  // a chunk at a time. A chunk starts at a multiple of `chunk`, so partners closer than that are in
  // the same chunk, at the same offsets.
  auto in_chunks = [&](onnx_i64 first, onnx_i64 last, bool mirror) {
    for (onnx_i64 c0 = 0; c0 < n; c0 += chunk) {
      const onnx_i64 len = n - c0 < chunk ? n - c0 : chunk;
      for (onnx_i64 j = threadIdx.x; j < len; j += blockDim.x) stage[j] = v[c0 + j];
      __syncthreads();
      for (onnx_i64 size = first; size <= last; size <<= 1) {
        if (mirror) onnx_sort_mirror(len, size, order_in(stage));
        for (onnx_i64 stride = mirror ? size >> 2 : chunk >> 1; stride > 0; stride >>= 1) {
          onnx_sort_stride(len, stride, order_in(stage));
        }
      }
      for (onnx_i64 j = threadIdx.x; j < len; j += blockDim.x) v[c0 + j] = stage[j];
      __syncthreads();
    }
  };
  if (n < 2) return;
  onnx_i64 last = 2;
  while (last < n) last <<= 1;
  in_chunks(2, last < chunk ? last : chunk, true);
  for (onnx_i64 size = 2 * chunk; size <= last; size <<= 1) {
    onnx_sort_mirror(n, size, order_in(v));
    for (onnx_i64 stride = size >> 2; stride >= chunk; stride >>= 1) onnx_sort_stride(n, stride, order_in(v));
    in_chunks(size, size, false);
  }
}
