//! saggar's built-in kernels: one source for every backend.
//!
//! The CUDA C++ below compiles under NVRTC and hipRTC unchanged (the [`PRELUDE`] spells the few things
//! that differ); the host backend registers host functions under the same names with the same
//! signatures. The conformance suite, the arena's padding and the reference models use them.
//!
//! | kernel | parameters | effect |
//! |---|---|---|
//! | `saggar_fill_u32` | `ptr dst, u64 n, u32 value` | `dst[0..n] = value` (32-bit words) |
//! | `saggar_copy_bytes` | `ptr dst, ptr src, u64 n` | `dst[0..n] = src[0..n]`, 16 bytes a load where both are 16-byte aligned (a copy done by the SMs: with mapped pinned memory, a host-device copy without the copy engine) |
//! | `saggar_copy_rows` | `ptr dst, ptr src, u64 row_bytes, u64 real_rows, u64 total_rows` | copy `real_rows` rows, then repeat the last real row up to `total_rows` (batch padding) |
//! | `saggar_axpy_f32` | `u64 n, f32 a, ptr x, ptr y` | `y = a * x + y` |
//! | `saggar_gemm_bias_act_f32` | `ptr out, ptr a, ptr b, ptr bias, u32 m, u32 n, u32 k, u32 act` | `out[m,n] = act(a[m,k] * b[k,n] + bias[n])`; `bias` may be null; `act` 0 = identity, 1 = ReLU |

use crate::api::{Backend, Stream};
use crate::code::KernelSource;
use crate::error::Result;
use crate::types::{DevicePtr, KernelArg, KernelSignature, ParamKind};

/// `saggar_fill_u32(ptr dst, u64 n, u32 value)`.
pub const FILL_U32: &str = "saggar_fill_u32";
/// `saggar_copy_bytes(ptr dst, ptr src, u64 n)`.
pub const COPY_BYTES: &str = "saggar_copy_bytes";
/// Threads a block of [`COPY_BYTES`] is best launched with (see [`copy_bytes_config`]).
pub const COPY_BYTES_BLOCK: u32 = 256;
/// `saggar_copy_rows(ptr dst, ptr src, u64 row_bytes, u64 real_rows, u64 total_rows)`.
pub const COPY_ROWS: &str = "saggar_copy_rows";
/// `saggar_axpy_f32(u64 n, f32 a, ptr x, ptr y)`.
pub const AXPY_F32: &str = "saggar_axpy_f32";
/// `saggar_gemm_bias_act_f32(ptr out, ptr a, ptr b, ptr bias, u32 m, u32 n, u32 k, u32 act)`.
pub const GEMM_BIAS_ACT_F32: &str = "saggar_gemm_bias_act_f32";

/// Activation code for identity in [`GEMM_BIAS_ACT_F32`].
pub const ACT_NONE: u32 = 0;
/// Activation code for ReLU in [`GEMM_BIAS_ACT_F32`].
pub const ACT_RELU: u32 = 1;

/// Definitions that let one source compile under both NVRTC and hipRTC.
pub const PRELUDE: &str = r#"
#if defined(__HIPCC_RTC__) || defined(__HIP_PLATFORM_AMD__)
#define SAGGAR_GLOBAL extern "C" __global__
#else
#define SAGGAR_GLOBAL extern "C" __global__
#endif
typedef unsigned long long saggar_u64;
typedef unsigned int saggar_u32;
#define SAGGAR_GRID_STRIDE(i, n) \
  for (saggar_u64 i = (saggar_u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (saggar_u64)gridDim.x * blockDim.x)
// The first statement of a kernel that may be launched programmatically (`LaunchConfig::programmatic`):
// it waits for the kernel before it on the stream to finish and its writes to be visible, then lets
// the kernel after it launch, whose blocks are then placed while this one runs. Launched otherwise,
// before compute capability 9.0, or on HIP, it does nothing.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(__HIPCC_RTC__) && !defined(__HIP_PLATFORM_AMD__)
#define SAGGAR_GRID_DEPENDENCY() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define SAGGAR_GRID_DEPENDENCY() ((void)0)
#endif
"#;

const BODY: &str = r#"
SAGGAR_GLOBAL void saggar_fill_u32(saggar_u32* dst, saggar_u64 n, saggar_u32 value) {
  SAGGAR_GRID_STRIDE(i, n) { dst[i] = value; }
}

SAGGAR_GLOBAL void saggar_copy_bytes(unsigned char* dst, const unsigned char* src, saggar_u64 n) {
  saggar_u64 whole = 0;
  if ((((saggar_u64)dst | (saggar_u64)src) & 15) == 0) {
    whole = n / 16;
    const uint4* s = (const uint4*)src;
    uint4* d = (uint4*)dst;
    SAGGAR_GRID_STRIDE(i, whole) { d[i] = s[i]; }
  }
  saggar_u64 done = whole * 16;
  SAGGAR_GRID_STRIDE(i, n - done) { dst[done + i] = src[done + i]; }
}

SAGGAR_GLOBAL void saggar_copy_rows(unsigned char* dst, const unsigned char* src, saggar_u64 row_bytes,
                                saggar_u64 real_rows, saggar_u64 total_rows) {
  saggar_u64 total = row_bytes * total_rows;
  SAGGAR_GRID_STRIDE(i, total) {
    saggar_u64 row = i / row_bytes;
    saggar_u64 col = i - row * row_bytes;
    saggar_u64 src_row = row < real_rows ? row : real_rows - 1;
    dst[i] = src[src_row * row_bytes + col];
  }
}

SAGGAR_GLOBAL void saggar_axpy_f32(saggar_u64 n, float a, const float* x, float* y) {
  SAGGAR_GRID_DEPENDENCY();
  SAGGAR_GRID_STRIDE(i, n) { y[i] = a * x[i] + y[i]; }
}

SAGGAR_GLOBAL void saggar_gemm_bias_act_f32(float* out, const float* a, const float* b, const float* bias,
                                        saggar_u32 m, saggar_u32 n, saggar_u32 k, saggar_u32 act) {
  saggar_u64 total = (saggar_u64)m * n;
  SAGGAR_GRID_STRIDE(idx, total) {
    saggar_u32 row = (saggar_u32)(idx / n);
    saggar_u32 col = (saggar_u32)(idx - (saggar_u64)row * n);
    float acc = bias ? bias[col] : 0.0f;
    for (saggar_u32 t = 0; t < k; ++t) acc += a[(saggar_u64)row * k + t] * b[(saggar_u64)t * n + col];
    out[idx] = (act == 1u && acc < 0.0f) ? 0.0f : acc;
  }
}
"#;

/// The signatures of the built-in kernels.
pub fn signatures() -> Vec<KernelSignature> {
    use ParamKind::*;
    vec![
        KernelSignature::new(FILL_U32, &[Ptr, U64, U32]),
        KernelSignature::new(COPY_BYTES, &[Ptr, Ptr, U64]),
        KernelSignature::new(COPY_ROWS, &[Ptr, Ptr, U64, U64, U64]),
        KernelSignature::new(AXPY_F32, &[U64, F32, Ptr, Ptr]),
        KernelSignature::new(GEMM_BIAS_ACT_F32, &[Ptr, Ptr, Ptr, Ptr, U32, U32, U32, U32]),
    ]
}

/// The launch shape for [`COPY_BYTES`] of `n` bytes: a thread per 16 bytes, at most 256 blocks (the
/// kernel strides over the rest; more blocks only add scheduling for a copy this kernel is meant for,
/// one small enough that the copy engine's start-up would dominate).
pub fn copy_bytes_config(n: u64) -> crate::LaunchConfig {
    let threads = n.div_ceil(16).max(1);
    let blocks = threads.div_ceil(COPY_BYTES_BLOCK as u64).clamp(1, 256) as u32;
    crate::LaunchConfig {
        grid: crate::Dim3::x(blocks),
        block: crate::Dim3::x(COPY_BYTES_BLOCK),
        shared_mem_bytes: 0,
        programmatic: false,
    }
}

/// Enqueues [`COPY_BYTES`] (`kernel`, loaded from [`source`]) on `stream`: `n` bytes from `src` to
/// `dst`, launched with [`copy_bytes_config`].
///
/// # Safety
/// Both ranges must be live device memory (mapped pinned memory included) of at least `n` bytes until
/// the stream has passed the launch, and the host must keep off the pinned memory among them until
/// then.
pub unsafe fn enqueue_copy_bytes<B: Backend>(
    stream: &B::Stream,
    kernel: &B::Kernel,
    src: DevicePtr,
    dst: DevicePtr,
    n: u64,
) -> Result<()> {
    let args = [KernelArg::Ptr(dst), KernelArg::Ptr(src), KernelArg::U64(n)];
    // SAFETY: the caller's promises; the kernel touches exactly `n` bytes of each range.
    unsafe { stream.launch(kernel, &copy_bytes_config(n), &args) }
}

/// The built-in kernels as one source, ready for [`crate::Device::compile`].
pub fn source() -> KernelSource {
    KernelSource::new("saggar_builtin.cu", format!("{PRELUDE}{BODY}"), signatures())
}
