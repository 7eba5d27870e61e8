//! CUDA/HIP C++ for the generated kernels of [`crate::ops::gpu::GpuKind`] (fused elementwise groups:
//! `gpu_fused.rs`). Every kernel is `extern "C"`, takes `const long long* meta` (extents, strides, offsets:
//! see each kind's docs) then its tensor pointers, and loops over its work with grid-stride loops, so
//! one kernel serves every shape and any grid size. The text compiles unchanged under NVRTC and
//! hipRTC and is correct at warp size 32 or 64: block reductions use shared memory, and shuffles
//! stay within groups of at most 32 adjacent lanes; kernels with a block reduction assume [`BLOCK`]
//! threads (a power of two).

use saggar_device::{KernelSignature, ParamKind};
use saggar_shape::DType;

use crate::ops::gpu::{GpuKind, ReduceOp, ctype};

/// Threads per block of every element and row kernel.
pub(crate) const BLOCK: u32 = 256;
/// Threads sharing one row in row-group kernels (`ONNX_ROW_LANES` in the prelude).
pub(crate) const ROW_LANES: u32 = 32;
/// Bytes of dynamic shared memory up to which a row-group LayerNorm keeps its block's rows there
/// (`ONNX_ROW_CACHE_BYTES` in the prelude; the default limit of a launch without opting in).
pub(crate) const ROW_CACHE_BYTES: u64 = 49_152;
/// Tile edge of the generated GEMM (blocks are `TILE x TILE` threads).
pub(crate) const TILE: u32 = 16;

/// Definitions shared by every generated source, after [`saggar_device::builtin::PRELUDE`].
pub(crate) const ONNX_PRELUDE: &str = r#"
typedef long long onnx_i64;
#define ONNX_NEG_INF __int_as_float(0xff800000)
#define ONNX_POS_INF __int_as_float(0x7f800000)
#define ONNX_LOOP(i, n) for (onnx_i64 i = (onnx_i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (onnx_i64)gridDim.x * blockDim.x)
#define ONNX_ROWS(r, n) for (onnx_i64 r = blockIdx.x; r < (n); r += gridDim.x)
template <typename T> __device__ inline T gpu_max(T a, T b) { return b > a ? b : a; }
template <typename T> __device__ inline T gpu_min(T a, T b) { return b < a ? b : a; }
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
// Four consecutive f32 of row `row` at column `4 * q`, from an input of broadcast mode `mode`
// (see the fused kernels' `meta`) whose divisor is the row length (`cols4` vectors): the row
// itself (1), one row for every row (2), one value per row (4), or a scalar (3).
__device__ ONNX_FORCEINLINE float4 onnx_row_load4(const float* __restrict__ p, onnx_i64 mode, onnx_i64 row, int cols4, int q) {
  if (mode == 1) return ((const float4*)p)[row * cols4 + q];
  if (mode == 2) return ((const float4*)p)[q];
  const float x = p[mode == 4 ? row : 0];
  return make_float4(x, x, x, x);
}
// The sum over a row's group: `blockDim.x` threads of one `threadIdx.y` (a warp's lanes, or with
// `blockDim.y == 1` the whole block through `sh`). Every thread of the block calls it together.
__device__ inline float onnx_row_sum(float v, float* sh) {
  for (int o = ONNX_ROW_LANES / 2; o > 0; o >>= 1) v += ONNX_SHFL_XOR(v, o);
  if (blockDim.x > ONNX_ROW_LANES) {
    __syncthreads();
    if (threadIdx.x % ONNX_ROW_LANES == 0) sh[threadIdx.x / ONNX_ROW_LANES] = v;
    __syncthreads();
    v = 0.0f;
    for (unsigned w = 0; w < blockDim.x / ONNX_ROW_LANES; ++w) v += sh[w];
  }
  return v;
}
#define ONNX_BLOCK_REDUCE(v, sh, a, b, EXPR) { \
  sh[threadIdx.x] = v; __syncthreads(); \
  for (unsigned s_ = blockDim.x / 2; s_ > 0; s_ >>= 1) { \
    if (threadIdx.x < s_) { float a = sh[threadIdx.x]; float b = sh[threadIdx.x + s_]; sh[threadIdx.x] = (EXPR); } \
    __syncthreads(); } \
  v = sh[0]; __syncthreads(); }
// Half precisions are bits in memory; Cast converts through f32 (exactly one way, rounding to
// nearest even the other, as the host's `half` crate does).
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
__device__ inline float onnx_bf16_to_f32(unsigned short h) { return __int_as_float((int)((unsigned)h << 16)); }
__device__ inline unsigned short onnx_f32_to_bf16(float f) {
  const unsigned x = (unsigned)__float_as_int(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
"#;

/// The unsigned C++ type of `bytes`-byte elements (copies move bits).
fn bits_type(bytes: u8) -> &'static str {
    match bytes {
        1 => "unsigned char",
        2 => "unsigned short",
        4 => "unsigned int",
        _ => "unsigned long long",
    }
}

fn index_type(d: DType) -> &'static str {
    if d == DType::I32 { "int" } else { "long long" }
}

/// A kernel name from its text: identical kernels (the same kind, the same fused chain) share one.
pub(crate) fn kernel_name(prefix: &str, text: &str) -> String {
    let hex = blake3::hash(text.as_bytes()).to_hex();
    format!("onnx_{prefix}_{}", &hex[..16])
}

/// The signature of a kernel with `pointers` tensor parameters after the meta table.
pub(crate) fn signature(name: &str, pointers: usize) -> KernelSignature {
    KernelSignature { name: name.to_string(), params: vec![ParamKind::Ptr; pointers + 1] }
}

/// `(name, C++ definition)` of a kind's kernel.
pub(crate) fn kind_kernel(kind: &GpuKind) -> (String, String) {
    let body = kind_body(kind);
    let name = kernel_name(kind_prefix(kind), &body);
    (name.clone(), format!("SAGGAR_GLOBAL void {name}{body}"))
}

fn kind_prefix(kind: &GpuKind) -> &'static str {
    match kind {
        GpuKind::Copy { .. } => "copy",
        GpuKind::Concat { .. } => "concat",
        GpuKind::Gather { .. } => "gather",
        GpuKind::GatherElements { .. } => "gather_elements",
        GpuKind::GatherNd { .. } => "gather_nd",
        GpuKind::Gemm { .. } => "gemm",
        GpuKind::Softmax { .. } => "softmax",
        GpuKind::LayerNorm { .. } => "layer_norm",
        GpuKind::Reduce { .. } => "reduce",
        GpuKind::Conv { .. } => "conv",
        GpuKind::Im2col => "im2col",
        GpuKind::Pool { .. } => "pool",
        GpuKind::Arg { .. } => "arg",
        GpuKind::Pad { .. } => "pad",
        GpuKind::ChannelNorm { lrn: false, .. } => "batch_norm",
        GpuKind::ChannelNorm { lrn: true, .. } => "lrn",
    }
}

fn float_literal(bits: u32) -> String {
    format!("__int_as_float({})", bits as i32)
}

/// The parameter list and body of a kind's kernel (everything after the name).
fn kind_body(kind: &GpuKind) -> String {
    match *kind {
        GpuKind::Copy { elem_bytes } => {
            let t = bits_type(elem_bytes);
            format!(
                r#"(const onnx_i64* meta, const {t}* __restrict__ in, {t}* __restrict__ out) {{
  const int rank = (int)meta[0];
  const onnx_i64* dims = meta + 4; const onnx_i64* is = dims + rank; const onnx_i64* os = is + rank;
  ONNX_LOOP(i, meta[1]) {{
    onnx_i64 rem = i, a = meta[2], b = meta[3];
    for (int d = rank - 1; d >= 0; --d) {{ onnx_i64 c = rem % dims[d]; rem /= dims[d]; a += c * is[d]; b += c * os[d]; }}
    out[b] = in[a];
  }}
}}
"#
            )
        }
        GpuKind::Concat { elem_bytes, inputs } => {
            let t = bits_type(elem_bytes);
            let params: String = (0..inputs).map(|p| format!(", const {t}* __restrict__ in{p}")).collect();
            let cases: String = (0..inputs).map(|p| format!("      case {p}: v = in{p}[src]; break;\n")).collect();
            format!(
                r#"(const onnx_i64* meta{params}, {t}* __restrict__ out) {{
  const onnx_i64 outer = meta[0], inner = meta[1], total = meta[2];
  const onnx_i64* off = meta + 3;
  ONNX_LOOP(i, outer * total * inner) {{
    const onnx_i64 k = i % inner, r = i / inner, j = r % total, o = r / total;
    int p = 0;
    while (p + 1 < {inputs} && off[p + 1] <= j) ++p;
    const onnx_i64 len = off[p + 1] - off[p];
    const onnx_i64 src = (o * len + (j - off[p])) * inner + k;
    {t} v = 0;
    switch (p) {{
{cases}      default: break;
    }}
    out[i] = v;
  }}
}}
"#
            )
        }
        GpuKind::Gather { elem_bytes, index } => {
            let (t, ix) = (bits_type(elem_bytes), index_type(index));
            format!(
                r#"(const onnx_i64* meta, const {t}* __restrict__ data, const {ix}* __restrict__ idx, {t}* __restrict__ out) {{
  const onnx_i64 outer = meta[0], len = meta[1], inner = meta[2], nidx = meta[3];
  ONNX_LOOP(i, outer * nidx * inner) {{
    const onnx_i64 k = i % inner, r = i / inner, j = r % nidx, o = r / nidx;
    onnx_i64 x = (onnx_i64)idx[j];
    if (x < 0) x += len;
    out[i] = (x >= 0 && x < len) ? data[(o * len + x) * inner + k] : ({t})0;
  }}
}}
"#
            )
        }
        GpuKind::GatherElements { elem_bytes, index } => {
            let (t, ix) = (bits_type(elem_bytes), index_type(index));
            format!(
                r#"(const onnx_i64* meta, const {t}* __restrict__ data, const {ix}* __restrict__ idx, {t}* __restrict__ out) {{
  const int rank = (int)meta[0], axis = (int)meta[2];
  const onnx_i64 len = meta[3];
  const onnx_i64* dims = meta + 4; const onnx_i64* ds = dims + rank;
  ONNX_LOOP(i, meta[1]) {{
    onnx_i64 rem = i, off = 0;
    bool ok = true;
    for (int d = rank - 1; d >= 0; --d) {{
      onnx_i64 c = rem % dims[d]; rem /= dims[d];
      if (d == axis) {{ c = (onnx_i64)idx[i]; if (c < 0) c += len; ok = c >= 0 && c < len; }}
      off += c * ds[d];
    }}
    out[i] = ok ? data[off] : ({t})0;
  }}
}}
"#
            )
        }
        GpuKind::GatherNd { elem_bytes, index } => {
            let (t, ix) = (bits_type(elem_bytes), index_type(index));
            format!(
                r#"(const onnx_i64* meta, const {t}* __restrict__ data, const {ix}* __restrict__ idx, {t}* __restrict__ out) {{
  const onnx_i64 batch = meta[0], m = meta[1], k = meta[2], slice = meta[3], bstride = meta[4];
  const onnx_i64* dims = meta + 5; const onnx_i64* st = dims + k;
  ONNX_LOOP(i, batch * m * slice) {{
    const onnx_i64 s = i % slice, r = i / slice, mm = r % m, b = r / m;
    const {ix}* x = idx + (b * m + mm) * k;
    onnx_i64 off = b * bstride;
    bool ok = true;
    for (onnx_i64 j = 0; j < k; ++j) {{
      onnx_i64 v = (onnx_i64)x[j];
      if (v < 0) v += dims[j];
      ok = ok && v >= 0 && v < dims[j];
      off += v * st[j];
    }}
    out[i] = ok ? data[off + s] : ({t})0;
  }}
}}
"#
            )
        }
        GpuKind::Gemm { alpha_bits, beta_bits, bias } => gemm_body(alpha_bits, beta_bits, bias),
        GpuKind::Softmax { log } => {
            let store = if log { "x[at] - m - logf(s)" } else { "expf(x[at] - m) / s" };
            format!(
                r#"(const onnx_i64* meta, const float* __restrict__ x, float* __restrict__ y) {{
  __shared__ float sh[{BLOCK}];
  const onnx_i64 len = meta[1], inner = meta[2];
  ONNX_ROWS(row, meta[0] * inner) {{
    const onnx_i64 base = (row / inner) * len * inner + row % inner;
    float m = ONNX_NEG_INF;
    for (onnx_i64 j = threadIdx.x; j < len; j += blockDim.x) m = fmaxf(m, x[base + j * inner]);
    ONNX_BLOCK_REDUCE(m, sh, a, b, fmaxf(a, b));
    float s = 0.0f;
    for (onnx_i64 j = threadIdx.x; j < len; j += blockDim.x) s += expf(x[base + j * inner] - m);
    ONNX_BLOCK_REDUCE(s, sh, a, b, a + b);
    for (onnx_i64 j = threadIdx.x; j < len; j += blockDim.x) {{ const onnx_i64 at = base + j * inner; y[at] = {store}; }}
  }}
}}
"#
            )
        }
        GpuKind::LayerNorm { epsilon_bits, bias, stats, channels } => {
            let p = if channels { "row % meta[2]" } else { "j" };
            let (bias_param, bias_add) =
                if bias { (", const float* __restrict__ bias", format!(" + bias[{p}]")) } else { ("", String::new()) };
            let (stat_params, stats_written) = match stats {
                0 => ("", ""),
                1 => (", float* __restrict__ mean_out", "mean_out[row] = mean;"),
                _ => (
                    ", float* __restrict__ mean_out, float* __restrict__ inv_out",
                    "mean_out[row] = mean; inv_out[row] = inv;",
                ),
            };
            // The Mean and InvStdDev outputs, written by one thread of the row's (`writer`).
            let stat_stores = |writer: &str| {
                if stats_written.is_empty() {
                    String::new()
                } else {
                    format!("\n    if ({writer}) {{ {stats_written} }}")
                }
            };
            let eps = float_literal(epsilon_bits);
            if !channels {
                return layer_norm_rows_body(bias_param, &bias_add, stat_params, &stat_stores("lane == 0"), &eps);
            }
            let stat_stores = stat_stores("threadIdx.x == 0");
            format!(
                r#"(const onnx_i64* meta, const float* __restrict__ x, const float* __restrict__ scale{bias_param}, float* __restrict__ y{stat_params}) {{
  __shared__ float sh[{BLOCK}];
  const onnx_i64 cols = meta[1];
  ONNX_ROWS(row, meta[0]) {{
    const float* xr = x + row * cols;
    float s = 0.0f;
    for (onnx_i64 j = threadIdx.x; j < cols; j += blockDim.x) s += xr[j];
    ONNX_BLOCK_REDUCE(s, sh, a, b, a + b);
    const float mean = s / (float)cols;
    float v = 0.0f;
    for (onnx_i64 j = threadIdx.x; j < cols; j += blockDim.x) {{ const float d = xr[j] - mean; v += d * d; }}
    ONNX_BLOCK_REDUCE(v, sh, a, b, a + b);
    const float inv = 1.0f / sqrtf(v / (float)cols + {eps});{stat_stores}
    for (onnx_i64 j = threadIdx.x; j < cols; j += blockDim.x) y[row * cols + j] = (xr[j] - mean) * inv * scale[{p}]{bias_add};
  }}
}}
"#
            )
        }
        GpuKind::Reduce { op } => reduce_body(op),
        GpuKind::Conv { bias } => conv_body(bias),
        GpuKind::Im2col => im2col_body(),
        GpuKind::Pool { max } => pool_body(max),
        GpuKind::Pad { mode, elem_bytes, from_input, fill_bits } => {
            let t = bits_type(elem_bytes);
            let (value_param, fill) = if from_input {
                (format!(", const {t}* __restrict__ value"), "value[0]".to_string())
            } else {
                (String::new(), format!("({t}){fill_bits}u"))
            };
            let outside = match mode {
                0 => "inside = false;",
                1 => {
                    "if (n == 1) s = 0; else { const onnx_i64 period = 2 * (n - 1); onnx_i64 m = s % period; if (m < 0) m += period; s = m < n ? m : period - m; }"
                }
                _ => "s = s < 0 ? 0 : n - 1;",
            };
            format!(
                r#"(const onnx_i64* meta, const {t}* __restrict__ x{value_param}, {t}* __restrict__ y) {{
  const int rank = (int)meta[0];
  const onnx_i64* od = meta + 2; const onnx_i64* id = od + rank; const onnx_i64* before = id + rank; const onnx_i64* is = before + rank;
  ONNX_LOOP(i, meta[1]) {{
    onnx_i64 rem = i, off = 0;
    bool inside = true;
    for (int d = rank - 1; d >= 0; --d) {{
      const onnx_i64 n = id[d];
      onnx_i64 s = rem % od[d] - before[d]; rem /= od[d];
      if (s < 0 || s >= n) {{ {outside} }}
      off += s * is[d];
    }}
    y[i] = inside ? x[off] : {fill};
  }}
}}
"#
            )
        }
        GpuKind::ChannelNorm { lrn: false, a_bits, .. } => format!(
            r#"(const onnx_i64* meta, const float* __restrict__ x, const float* __restrict__ scale, const float* __restrict__ bias, const float* __restrict__ mean, const float* __restrict__ var, float* __restrict__ y) {{
  const onnx_i64 C = meta[1], plane = meta[2];
  ONNX_LOOP(i, meta[0] * C * plane) {{
    const onnx_i64 c = (i / plane) % C;
    const float s = scale[c] / sqrtf(var[c] + {eps});
    y[i] = x[i] * s + (bias[c] - mean[c] * s);
  }}
}}
"#,
            eps = float_literal(a_bits)
        ),
        GpuKind::ChannelNorm { lrn: true, a_bits, b_bits, c_bits } => format!(
            r#"(const onnx_i64* meta, const float* __restrict__ x, float* __restrict__ y) {{
  const onnx_i64 C = meta[1], plane = meta[2], before = meta[3], after = meta[4];
  ONNX_LOOP(i, meta[0] * C * plane) {{
    const onnx_i64 s = i % plane, c = (i / plane) % C, image = i / plane / C;
    const onnx_i64 lo = c > before ? c - before : 0, hi = c + after < C - 1 ? c + after : C - 1;
    float sq = 0.0f;
    for (onnx_i64 k = lo; k <= hi; ++k) {{ const float v = x[(image * C + k) * plane + s]; sq += v * v; }}
    y[i] = x[i] / powf({bias} + {scale} * sq, {beta});
  }}
}}
"#,
            scale = float_literal(a_bits),
            beta = float_literal(b_bits),
            bias = float_literal(c_bits)
        ),
        GpuKind::Arg { max, last, dtype } => {
            let t = ctype(dtype).unwrap_or("float");
            let op = match (max, last) {
                (true, false) => ">",
                (true, true) => ">=",
                (false, false) => "<",
                (false, true) => "<=",
            };
            format!(
                r#"(const onnx_i64* meta, const {t}* __restrict__ x, long long* __restrict__ y) {{
  const onnx_i64 len = meta[1], inner = meta[2];
  ONNX_LOOP(o, meta[0] * inner) {{
    const onnx_i64 base = (o / inner) * len * inner + o % inner;
    onnx_i64 at = 0;
    for (onnx_i64 j = 1; j < len; ++j) if (x[base + j * inner] {op} x[base + at * inner]) at = j;
    y[o] = at;
  }}
}}
"#
            )
        }
    }
}

fn gemm_body(alpha_bits: u32, beta_bits: u32, bias: bool) -> String {
    let (bias_param, bias_add) = if bias {
        (", const float* __restrict__ c", format!(" + {} * c[row * c_rs + col * c_cs]", float_literal(beta_bits)))
    } else {
        ("", String::new())
    };
    let alpha = float_literal(alpha_bits);
    format!(
        r#"(const onnx_i64* meta, const float* __restrict__ A, const float* __restrict__ B{bias_param}, float* __restrict__ Y) {{
  __shared__ float ta[{TILE}][{TILE} + 1];
  __shared__ float tb[{TILE}][{TILE} + 1];
  const onnx_i64 M = meta[0], N = meta[1], K = meta[2];
  const int br = (int)meta[3];
  const onnx_i64 a_rs = meta[4], a_cs = meta[5], b_rs = meta[6], b_cs = meta[7], c_rs = meta[8], c_cs = meta[9];
  const onnx_i64* bdims = meta + 10; const onnx_i64* abs_ = bdims + br; const onnx_i64* bbs = abs_ + br;
  (void)c_rs; (void)c_cs;
  onnx_i64 nb = 1;
  for (int d = 0; d < br; ++d) nb *= bdims[d];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const onnx_i64 col = (onnx_i64)blockIdx.x * {TILE} + tx;
  for (onnx_i64 bz = blockIdx.z; bz < nb; bz += gridDim.z) {{
    onnx_i64 ao = 0, bo = 0, rem = bz;
    for (int d = br - 1; d >= 0; --d) {{ const onnx_i64 c = rem % bdims[d]; rem /= bdims[d]; ao += c * abs_[d]; bo += c * bbs[d]; }}
    for (onnx_i64 r0 = (onnx_i64)blockIdx.y * {TILE}; r0 < M; r0 += (onnx_i64)gridDim.y * {TILE}) {{
      const onnx_i64 row = r0 + ty;
      float acc = 0.0f;
      for (onnx_i64 k0 = 0; k0 < K; k0 += {TILE}) {{
        const onnx_i64 ka = k0 + tx, kb = k0 + ty;
        ta[ty][tx] = (row < M && ka < K) ? A[ao + row * a_rs + ka * a_cs] : 0.0f;
        tb[ty][tx] = (kb < K && col < N) ? B[bo + kb * b_rs + col * b_cs] : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < {TILE}; ++kk) acc += ta[ty][kk] * tb[kk][tx];
        __syncthreads();
      }}
      if (row < M && col < N) Y[(bz * M + row) * N + col] = {alpha} * acc{bias_add};
    }}
  }}
}}
"#
    )
}

fn reduce_body(op: ReduceOp) -> String {
    // (initial value, value of one element `v`, combine `a` and `b`, result from `acc` and `n`)
    let (init, map, combine, finish) = match op {
        ReduceOp::Sum => ("0.0f", "v", "a + b", "acc"),
        ReduceOp::Mean => ("0.0f", "v", "a + b", "acc / (float)n"),
        ReduceOp::Max => ("ONNX_NEG_INF", "v", "gpu_max(a, b)", "acc"),
        ReduceOp::Min => ("ONNX_POS_INF", "v", "gpu_min(a, b)", "acc"),
        ReduceOp::Prod => ("1.0f", "v", "a * b", "acc"),
        ReduceOp::L1 => ("0.0f", "fabsf(v)", "a + b", "acc"),
        ReduceOp::L2 => ("0.0f", "v * v", "a + b", "sqrtf(acc)"),
        ReduceOp::SumSquare => ("0.0f", "v * v", "a + b", "acc"),
        ReduceOp::LogSum => ("0.0f", "v", "a + b", "logf(acc)"),
        ReduceOp::LogSumExp => ("0.0f", "expf(v - top)", "a + b", "top + logf(acc)"),
    };
    // LogSumExp first finds the largest element, so exp never overflows.
    let top = if op == ReduceOp::LogSumExp {
        r#"float top = ONNX_NEG_INF;
    for (onnx_i64 j = threadIdx.x; j < n; j += blockDim.x) { const float v = x[base + ONNX_RED_OFF(j)]; top = gpu_max(top, v); }
    ONNX_BLOCK_REDUCE(top, sh, a, b, gpu_max(a, b));
    if (top == ONNX_NEG_INF) top = 0.0f;"#
    } else {
        ""
    };
    format!(
        r#"(const onnx_i64* meta, const float* __restrict__ x, float* __restrict__ y) {{
  __shared__ float sh[{BLOCK}];
  const int nk = (int)meta[0], nr = (int)meta[1];
  const onnx_i64 n = meta[3];
  const onnx_i64* kd = meta + 4; const onnx_i64* ks = kd + nk; const onnx_i64* rd = ks + nk; const onnx_i64* rs = rd + nr;
#define ONNX_RED_OFF(j) red_offset(j, nr, rd, rs)
  ONNX_ROWS(o, meta[2]) {{
    onnx_i64 rem = o, base = 0;
    for (int d = nk - 1; d >= 0; --d) {{ base += (rem % kd[d]) * ks[d]; rem /= kd[d]; }}
    {top}
    float acc = {init};
    for (onnx_i64 j = threadIdx.x; j < n; j += blockDim.x) {{ const float v = x[base + ONNX_RED_OFF(j)]; const float a = acc, b = {map}; acc = {combine}; }}
    ONNX_BLOCK_REDUCE(acc, sh, a, b, {combine});
    if (threadIdx.x == 0) y[o] = {finish};
  }}
#undef ONNX_RED_OFF
}}
"#
    )
}

/// `__device__` helpers some kernels call, emitted once per source.
pub(crate) const HELPERS: &str = r#"
__device__ inline onnx_i64 red_offset(onnx_i64 j, int nr, const onnx_i64* rd, const onnx_i64* rs) {
  onnx_i64 off = 0;
  for (int d = nr - 1; d >= 0; --d) { off += (j % rd[d]) * rs[d]; j /= rd[d]; }
  return off;
}
"#;

/// Largest spatial rank of Conv and pooling on GPU.
pub(crate) const MAX_SPATIAL: usize = 8;

fn conv_body(bias: bool) -> String {
    let (bias_param, init) = if bias { (", const float* __restrict__ bias", "bias[m]") } else { ("", "0.0f") };
    format!(
        r#"(const onnx_i64* meta, const float* __restrict__ x, const float* __restrict__ w{bias_param}, float* __restrict__ y) {{
  const int s = (int)meta[0];
  const onnx_i64 N = meta[1], C = meta[2], M = meta[3], G = meta[4];
  const onnx_i64* in = meta + 5; const onnx_i64* out = in + s; const onnx_i64* ker = out + s;
  const onnx_i64* st = ker + s; const onnx_i64* pad = st + s; const onnx_i64* dil = pad + s;
  onnx_i64 in_plane = 1, out_plane = 1, taps = 1;
  for (int d = 0; d < s; ++d) {{ in_plane *= in[d]; out_plane *= out[d]; taps *= ker[d]; }}
  const onnx_i64 cg = C / G, mg = M / G;
  ONNX_LOOP(i, N * M * out_plane) {{
    onnx_i64 pos[{MAX_SPATIAL}];
    onnx_i64 rem = i % out_plane;
    for (int d = s - 1; d >= 0; --d) {{ pos[d] = rem % out[d]; rem /= out[d]; }}
    const onnx_i64 m = (i / out_plane) % M, n = i / out_plane / M, g = m / mg;
    float acc = {init};
    for (onnx_i64 c = 0; c < cg; ++c) {{
      const float* xp = x + (n * C + g * cg + c) * in_plane;
      const float* wp = w + (m * cg + c) * taps;
      for (onnx_i64 t = 0; t < taps; ++t) {{
        onnx_i64 tr = t, at = 0, stride = 1;
        bool inside = true;
        for (int d = s - 1; d >= 0; --d) {{
          const onnx_i64 k = tr % ker[d]; tr /= ker[d];
          const onnx_i64 p = pos[d] * st[d] + k * dil[d] - pad[d];
          inside = inside && p >= 0 && p < in[d];
          at += p * stride; stride *= in[d];
        }}
        if (inside) acc += xp[at] * wp[t];
      }}
    }}
    y[i] = acc;
  }}
}}
"#
    )
}

fn im2col_body() -> String {
    r#"(const onnx_i64* meta, const float* __restrict__ x, float* __restrict__ col) {
  const int s = (int)meta[0];
  const onnx_i64 N = meta[1], C = meta[2];
  const onnx_i64* in = meta + 3; const onnx_i64* out = in + s; const onnx_i64* ker = out + s;
  const onnx_i64* st = ker + s; const onnx_i64* pad = st + s; const onnx_i64* dil = pad + s;
  onnx_i64 in_plane = 1, out_plane = 1, taps = 1;
  for (int d = 0; d < s; ++d) { in_plane *= in[d]; out_plane *= out[d]; taps *= ker[d]; }
  ONNX_LOOP(i, N * C * taps * out_plane) {
    onnx_i64 rem = i % out_plane, tr = (i / out_plane) % taps;
    const onnx_i64 c = (i / out_plane / taps) % C, n = i / out_plane / taps / C;
    onnx_i64 at = 0, stride = 1;
    bool inside = true;
    for (int d = s - 1; d >= 0; --d) {
      const onnx_i64 o = rem % out[d]; rem /= out[d];
      const onnx_i64 k = tr % ker[d]; tr /= ker[d];
      const onnx_i64 p = o * st[d] + k * dil[d] - pad[d];
      inside = inside && p >= 0 && p < in[d];
      at += p * stride; stride *= in[d];
    }
    col[i] = inside ? x[(n * C + c) * in_plane + at] : 0.0f;
  }
}
"#
    .to_string()
}

/// LayerNormalization over rows by groups of `ONNX_ROW_LANES` threads ([`Work::RowGroups`]): a row
/// of a transformer (64 to a few thousand columns) keeps a whole group busy with coalesced reads,
/// where a block per row would leave most of its threads idle and synchronise the block twice per
/// row. Every thread of a block runs the same number of iterations (a group past the last row idles
/// through them), so a group's lanes always meet at their shuffles.
fn layer_norm_rows_body(bias_param: &str, bias_add: &str, stat_params: &str, stat_stores: &str, eps: &str) -> String {
    format!(
        r#"(const onnx_i64* meta, const float* __restrict__ x, const float* __restrict__ scale{bias_param}, float* __restrict__ y{stat_params}) {{
  __shared__ float sh[{BLOCK} / ONNX_ROW_LANES];
  ONNX_DYNAMIC_SHARED(onnx_row_cache);
  const onnx_i64 rows = meta[0], cols = meta[1];
  const int lane = (int)threadIdx.x, lanes = (int)blockDim.x;
  const onnx_i64 groups = blockDim.y;
  const bool cached = cols * groups * 4 <= ONNX_ROW_CACHE_BYTES;
  float* cache = onnx_row_cache + (cached ? (onnx_i64)threadIdx.y * cols : 0);
  for (onnx_i64 first = (onnx_i64)blockIdx.x * groups; first < rows; first += (onnx_i64)gridDim.x * groups) {{
    const onnx_i64 row = first + threadIdx.y;
    const bool live = row < rows;
    const float* xr = x + (live ? row : 0) * cols;
    float s = 0.0f;
    if (live) for (onnx_i64 j = lane; j < cols; j += lanes) {{ const float e = xr[j]; if (cached) cache[j] = e; s += e; }}
    const float mean = onnx_row_sum(s, sh) / (float)cols;
    float v = 0.0f;
    if (live) for (onnx_i64 j = lane; j < cols; j += lanes) {{ const float d = (cached ? cache[j] : xr[j]) - mean; v += d * d; }}
    const float inv = 1.0f / sqrtf(onnx_row_sum(v, sh) / (float)cols + {eps});
    if (live) {{{stat_stores}
      for (onnx_i64 j = lane; j < cols; j += lanes) y[row * cols + j] = ((cached ? cache[j] : xr[j]) - mean) * inv * scale[j]{bias_add};
    }}
  }}
}}
"#
    )
}

fn pool_body(max: bool) -> String {
    let (init, take, result) = if max {
        ("ONNX_NEG_INF", "if (v > acc || (inside == 0 && v != v)) acc = v;", "acc")
    } else {
        ("0.0f", "acc += v;", "acc / (float)(count_pad ? inside + padded : inside)")
    };
    format!(
        r#"(const onnx_i64* meta, const float* __restrict__ x, float* __restrict__ y) {{
  const int s = (int)meta[0];
  const onnx_i64 planes = meta[1];
  const bool count_pad = meta[2] != 0;
  const onnx_i64* in = meta + 3; const onnx_i64* out = in + s; const onnx_i64* ker = out + s;
  const onnx_i64* st = ker + s; const onnx_i64* pb = st + s; const onnx_i64* pe = pb + s; const onnx_i64* dil = pe + s;
  onnx_i64 in_plane = 1, out_plane = 1, taps = 1;
  for (int d = 0; d < s; ++d) {{ in_plane *= in[d]; out_plane *= out[d]; taps *= ker[d]; }}
  (void)count_pad;
  ONNX_LOOP(i, planes * out_plane) {{
    onnx_i64 pos[{MAX_SPATIAL}];
    onnx_i64 rem = i % out_plane;
    for (int d = s - 1; d >= 0; --d) {{ pos[d] = rem % out[d]; rem /= out[d]; }}
    const float* xp = x + (i / out_plane) * in_plane;
    float acc = {init};
    onnx_i64 inside = 0, padded = 0;
    for (onnx_i64 t = 0; t < taps; ++t) {{
      onnx_i64 tr = t, at = 0, stride = 1;
      int where = 0; /* 0 input, 1 padding, 2 beyond */
      for (int d = s - 1; d >= 0; --d) {{
        const onnx_i64 k = tr % ker[d]; tr /= ker[d];
        const onnx_i64 p = pos[d] * st[d] + k * dil[d] - pb[d];
        if (p < -pb[d] || p >= in[d] + pe[d]) where = 2;
        else if ((p < 0 || p >= in[d]) && where == 0) where = 1;
        at += p * stride; stride *= in[d];
      }}
      if (where == 0) {{ const float v = xp[at]; {take} ++inside; }}
      else if (where == 1) ++padded;
    }}
    y[i] = {result};
  }}
}}
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_differ_in_name_when_their_text_differs() {
        let a = kind_kernel(&GpuKind::Softmax { log: false });
        let b = kind_kernel(&GpuKind::Softmax { log: true });
        assert_ne!(a.0, b.0);
        assert!(b.1.contains("logf(s)"));
        let g = kind_kernel(&GpuKind::Gemm { alpha_bits: 1f32.to_bits(), beta_bits: 1f32.to_bits(), bias: true });
        assert!(g.1.contains("const float* __restrict__ c"), "{}", g.1);
    }
}
