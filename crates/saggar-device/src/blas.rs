//! Matrix multiplication through a vendor BLAS-Lt library: the backend-neutral description of one
//! (batched) GEMM with its fused epilogue ([`MatmulDesc`]), the buffers it runs on ([`MatmulOperands`]),
//! the handle that runs it ([`Blas`]) and how that handle is configured ([`BlasConfig`]).
//!
//! # Convention
//! Every matrix is row-major, as ONNX tensors are. Batch `i` computes
//! `C_i[m, n] = epilogue(alpha * op(A_i)[m, k] * op(B_i)[k, n] + beta * C_i + bias[n])`, where `op(A)` is
//! `A` stored `[m, k]`, or stored `[k, m]` and transposed when `trans_a` is set (likewise `B`: `[k, n]`,
//! or `[n, k]` with `trans_b`). `A_i` starts `i * stride_a` elements after `A` (a stride of 0 broadcasts
//! one matrix to every batch), likewise `B_i` and `C_i`.
//!
//! # Element types
//! `A` and `B` hold [`MatmulDesc::inputs`], `C` and the bias [`MatmulDesc::output`] ([`MatmulType`]):
//! `f32` throughout, or `f16` or `bf16` inputs (which run on tensor cores) with an output of the same
//! half type or `f32`. Accumulation is always `f32` (TF32 where [`MatmulPrecision::Tf32`] allows it for
//! `f32` inputs; the precision means nothing for half inputs), `alpha` and `beta` are `f32`, and the
//! bias and epilogue are applied in `f32` before the result is rounded (to nearest even) to the output
//! type. Strides count elements, whatever their size.
//!
//! `i8` inputs are the exception ([`MatmulType::I8`], on integer tensor cores): they accumulate in
//! `i32` and write an `i32` output exactly, wrapping on overflow (ONNX `MatMulInteger`'s semantics;
//! `k` below 133 000 never overflows). Both libraries run them only in the form their integer
//! kernels take ([`crate::rules::check_matmul_desc`] refuses the others, and the caller falls back to
//! its own kernel): `A` stored `[m, k]` and `B` stored `[n, k]` (`trans_b`, not `trans_a`: cuBLASLt's
//! "TN" form of the column-major `C^T = B A^T`), `k` and `n` multiples of 4, every matrix 4-byte
//! aligned (batch strides of `A` and `B` multiples of 4), `alpha` 1, `beta` 0 or 1, and no bias or
//! epilogue (neither library fuses one into an `i32` output). Scales (a dequantised product's
//! `scale_a * scale_b`) are applied to the `i32` result afterwards.
//!
//! # Capture
//! A handle is created once per device, outside any capture, with its plan for each description made
//! by [`Blas::prepare`]. The workspace the library may use is a [`DeviceSlice`] the caller passes with
//! every call (a run context's own scratch, so concurrent runs never share one), so a matmul enqueued
//! during stream capture allocates nothing on the device.

use std::path::PathBuf;

use crate::api::Backend;
use crate::error::Result;
use crate::float16;
use crate::types::DeviceSlice;

/// The function applied to each output element after the product (and the bias, if any).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Epilogue {
    /// The product as it is.
    #[default]
    None,
    /// `max(x, 0)`.
    Relu,
    /// GELU in the tanh approximation, `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`: the one
    /// cuBLASLt's and hipBLASLt's GELU epilogues compute.
    GeluTanh,
}

impl Epilogue {
    /// The epilogue applied to one value, as every backend computes it.
    #[inline]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Epilogue::None => x,
            Epilogue::Relu => x.max(0.0),
            Epilogue::GeluTanh => {
                const SQRT_2_OVER_PI: f32 = 0.797_884_6;
                0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x)).tanh())
            }
        }
    }
}

/// How `f32` products may be computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MatmulPrecision {
    /// Full `f32` multiply-accumulate (TF32 off): results match a host `f32` GEMM to rounding.
    #[default]
    StrictF32,
    /// Tensor cores may round inputs to TF32 (10-bit mantissa): faster, relative error about 1e-3.
    Tf32,
}

impl MatmulPrecision {
    /// The name used in options and cache keys (`f32`, `tf32`).
    pub const fn name(self) -> &'static str {
        match self {
            MatmulPrecision::StrictF32 => "f32",
            MatmulPrecision::Tf32 => "tf32",
        }
    }
}

/// Element type of a matmul's matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MatmulType {
    /// IEEE `f32`.
    #[default]
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16: `f32`'s exponent range with a 7-bit mantissa.
    BF16,
    /// Signed 8-bit integers: inputs only, with an [`MatmulType::I32`] output.
    I8,
    /// Signed 32-bit integers: the output of `i8` inputs.
    I32,
}

impl MatmulType {
    /// Bytes of one element (4, 2, 2, 1, 4).
    pub const fn bytes(self) -> usize {
        match self {
            MatmulType::F32 | MatmulType::I32 => 4,
            MatmulType::F16 | MatmulType::BF16 => 2,
            MatmulType::I8 => 1,
        }
    }

    /// The name used in messages and keys (`f32`, `f16`, `bf16`, `i8`, `i32`).
    pub const fn name(self) -> &'static str {
        match self {
            MatmulType::F32 => "f32",
            MatmulType::F16 => "f16",
            MatmulType::BF16 => "bf16",
            MatmulType::I8 => "i8",
            MatmulType::I32 => "i32",
        }
    }

    /// Whether elements are integers (`i8`, `i32`).
    pub const fn is_integer(self) -> bool {
        matches!(self, MatmulType::I8 | MatmulType::I32)
    }

    /// `x` rounded to this type (floats to nearest even; integers to nearest, ties away from zero,
    /// saturating) and widened back: the value a matrix of this type holds for it. An `i32` above
    /// 2^24 in magnitude widens to the nearest `f32`.
    pub fn round(self, x: f32) -> f32 {
        match self {
            MatmulType::F32 => x,
            MatmulType::F16 => float16::f16_to_f32(float16::f32_to_f16(x)),
            MatmulType::BF16 => float16::bf16_to_f32(float16::f32_to_bf16(x)),
            MatmulType::I8 => x.round().clamp(-128.0, 127.0),
            MatmulType::I32 => x.round() as i32 as f32,
        }
    }

    /// `values` stored as little-endian elements of this type, rounded to nearest even.
    pub fn encode(self, values: &[f32]) -> Vec<u8> {
        let mut bytes = vec![0; values.len() * self.bytes()];
        for (chunk, &v) in bytes.chunks_exact_mut(self.bytes()).zip(values) {
            self.store(v, chunk);
        }
        bytes
    }

    /// Little-endian elements of this type, widened to `f32` (exact). A trailing partial element is
    /// ignored.
    pub fn decode(self, bytes: &[u8]) -> Vec<f32> {
        bytes.chunks_exact(self.bytes()).map(|chunk| self.load(chunk)).collect()
    }

    /// One element from its little-endian bytes (`self.bytes()` of them).
    #[inline]
    pub(crate) fn load(self, bytes: &[u8]) -> f32 {
        match self {
            MatmulType::F32 => f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            MatmulType::F16 => float16::f16_to_f32(u16::from_le_bytes([bytes[0], bytes[1]])),
            MatmulType::BF16 => float16::bf16_to_f32(u16::from_le_bytes([bytes[0], bytes[1]])),
            MatmulType::I8 => f32::from(bytes[0] as i8),
            MatmulType::I32 => i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as f32,
        }
    }

    /// `value` rounded to this type into `out` (`self.bytes()` long), little-endian.
    #[inline]
    pub(crate) fn store(self, value: f32, out: &mut [u8]) {
        match self {
            MatmulType::F32 => out.copy_from_slice(&value.to_le_bytes()),
            MatmulType::F16 => out.copy_from_slice(&float16::f32_to_f16(value).to_le_bytes()),
            MatmulType::BF16 => out.copy_from_slice(&float16::f32_to_bf16(value).to_le_bytes()),
            MatmulType::I8 => out[0] = self.round(value) as i8 as u8,
            MatmulType::I32 => out.copy_from_slice(&(value.round() as i32).to_le_bytes()),
        }
    }
}

/// The (inputs, output) type pairs a matmul may have: what cuBLASLt and hipBLASLt both run, with `f32`
/// accumulation, and `i8` into `i32` with `i32` accumulation (`CUBLAS_COMPUTE_32I` with `i32` scales,
/// the one integer combination both document with an exact output).
/// [`crate::rules::check_matmul_desc`] refuses the others.
pub const MATMUL_TYPES: [(MatmulType, MatmulType); 6] = [
    (MatmulType::F32, MatmulType::F32),
    (MatmulType::F16, MatmulType::F32),
    (MatmulType::F16, MatmulType::F16),
    (MatmulType::BF16, MatmulType::F32),
    (MatmulType::BF16, MatmulType::BF16),
    (MatmulType::I8, MatmulType::I32),
];

/// One (batched) GEMM, as the handle plans it. Two equal descriptions share one plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MatmulDesc {
    /// Rows of `op(A)` and `C`.
    pub m: u64,
    /// Columns of `op(B)` and `C`.
    pub n: u64,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: u64,
    /// Number of products (1 for a plain GEMM).
    pub batch: u64,
    /// Elements between consecutive `A` matrices (0: one `A` for every batch).
    pub stride_a: u64,
    /// Elements between consecutive `B` matrices (0: one `B` for every batch).
    pub stride_b: u64,
    /// Elements between consecutive `C` matrices (at least `m * n` when `batch > 1`).
    pub stride_c: u64,
    /// `A` is stored `[k, m]`.
    pub trans_a: bool,
    /// `B` is stored `[n, k]`.
    pub trans_b: bool,
    /// Scale of the product. Stored as bits so the description hashes; see [`MatmulDesc::alpha`].
    pub alpha_bits: u32,
    /// Scale of the existing `C` (0: `C` is only written). Bits, as `alpha_bits`.
    pub beta_bits: u32,
    /// A bias vector of `n` elements is added to every row.
    pub bias: bool,
    /// Applied last.
    pub epilogue: Epilogue,
    /// Whether TF32 is allowed (for `f32` inputs only).
    pub precision: MatmulPrecision,
    /// Element type of `A` and `B`.
    pub inputs: MatmulType,
    /// Element type of `C` (read and written) and the bias vector.
    pub output: MatmulType,
}

impl MatmulDesc {
    /// A plain `C[m, n] = A[m, k] * B[k, n]`: one batch, no transposes, `alpha` 1, `beta` 0, no bias or
    /// epilogue, strict `f32` matrices. Adjust the fields from there.
    pub const fn gemm(m: u64, n: u64, k: u64) -> MatmulDesc {
        MatmulDesc {
            m,
            n,
            k,
            batch: 1,
            stride_a: m.saturating_mul(k),
            stride_b: k.saturating_mul(n),
            stride_c: m.saturating_mul(n),
            trans_a: false,
            trans_b: false,
            alpha_bits: 1.0f32.to_bits(),
            beta_bits: 0,
            bias: false,
            epilogue: Epilogue::None,
            precision: MatmulPrecision::StrictF32,
            inputs: MatmulType::F32,
            output: MatmulType::F32,
        }
    }

    /// The scale of the product.
    pub fn alpha(&self) -> f32 {
        f32::from_bits(self.alpha_bits)
    }

    /// The scale of the existing `C`.
    pub fn beta(&self) -> f32 {
        f32::from_bits(self.beta_bits)
    }

    /// Sets `alpha` and `beta`.
    pub fn with_scales(mut self, alpha: f32, beta: f32) -> MatmulDesc {
        self.alpha_bits = alpha.to_bits();
        self.beta_bits = beta.to_bits();
        self
    }

    /// Sets the element types of `A` and `B` (`inputs`) and of `C` and the bias (`output`); see
    /// [`MATMUL_TYPES`] for the pairs allowed.
    pub fn with_types(mut self, inputs: MatmulType, output: MatmulType) -> MatmulDesc {
        self.inputs = inputs;
        self.output = output;
        self
    }

    /// An `i8` product `C[m, n] (i32) = A[m, k] * B^T` with `B` stored `[n, k]`: the form the
    /// integer kernels of both libraries take (see the module docs for the other constraints).
    pub const fn gemm_i8(m: u64, n: u64, k: u64) -> MatmulDesc {
        let mut desc = MatmulDesc::gemm(m, n, k);
        desc.trans_b = true;
        desc.inputs = MatmulType::I8;
        desc.output = MatmulType::I32;
        desc
    }
}

/// The buffers one matmul reads and writes. Sizes are checked against the description
/// ([`crate::rules::check_matmul`]) before anything is enqueued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatmulOperands {
    /// `A`, every batch.
    pub a: DeviceSlice,
    /// `B`, every batch.
    pub b: DeviceSlice,
    /// `C`, every batch (read too when `beta` is not 0).
    pub c: DeviceSlice,
    /// The bias vector, when the description has one.
    pub bias: Option<DeviceSlice>,
    /// Scratch the library may use, at least [`Blas::workspace_bytes`] long (may be empty when that is 0).
    pub workspace: DeviceSlice,
}

/// Environment variable naming the BLAS-Lt library to load instead of the vendor's default names. Read
/// in one place, [`BlasConfig::from_env`].
pub const LIBRARY_ENV: &str = "SAGGAR_BLASLT_LIBRARY";

/// How a [`Blas`] handle is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlasConfig {
    /// The most workspace the library may use per call; every call passes at least this much.
    pub workspace_bytes: usize,
    /// The library file to load instead of the vendor's default names (`libcublasLt.so.13`,
    /// `libhipblaslt.so.1`, ...). The host backend loads nothing and ignores it.
    pub library_path: Option<PathBuf>,
    /// How many of the library's heuristic candidates [`Blas::prepare`] times on the device for a
    /// problem of [`TUNE_MIN_FLOP`] to [`TUNE_MAX_FLOP`] before keeping the fastest; 0 or 1 (the
    /// default, [`DEFAULT_TUNE_CANDIDATES`]) keeps the heuristic's first choice. Opt in with up to
    /// 16 (8 is a good start); the GPU conformance suite runs a prepared handle with 8.
    pub tune_candidates: usize,
}

/// Smallest problem (2·m·n·k·batch floating-point operations) whose candidates [`Blas::prepare`]
/// times: below it a call is a few microseconds whichever kernel runs, and a load of many small
/// buckets stays as fast as without timing.
pub const TUNE_MIN_FLOP: u64 = 50_000_000;

/// Largest problem whose candidates [`Blas::prepare`] times (each candidate runs four times, about
/// a millisecond each at this size on an H100 in strict f32).
pub const TUNE_MAX_FLOP: u64 = 64_000_000_000;

/// Default [`BlasConfig::tune_candidates`]: the heuristic's first choice, no timing.
pub const DEFAULT_TUNE_CANDIDATES: usize = 1;

/// 32 MiB: what cuBLASLt's documentation recommends for Hopper. With less, the libraries leave out
/// split-K kernels, the fast ones at a few hundred rows: a 128 x 768 x 3072 strict-f32 GEMM's first
/// choice runs 63 us with 4 MiB and 24 us with 32 MiB on an H100 (cuBLAS's `sgemm`: 24 us).
pub const DEFAULT_WORKSPACE_BYTES: usize = 32 << 20;

impl Default for BlasConfig {
    fn default() -> Self {
        BlasConfig {
            workspace_bytes: DEFAULT_WORKSPACE_BYTES,
            library_path: None,
            tune_candidates: DEFAULT_TUNE_CANDIDATES,
        }
    }
}

impl BlasConfig {
    /// The default configuration, with `library_path` taken from [`LIBRARY_ENV`] when it is set.
    pub fn from_env() -> BlasConfig {
        BlasConfig { library_path: std::env::var_os(LIBRARY_ENV).map(PathBuf::from), ..BlasConfig::default() }
    }
}

/// A BLAS-Lt handle of one device: the loaded library, its context and a plan per description.
///
/// # Thread safety
/// `Send + Sync`: calls from several threads onto several streams are allowed (cuBLASLt: "the handle
/// [...] is thread safe"; the plans are behind a lock of this handle only). Each call's workspace must
/// be used by no other call in flight, which is why the caller passes it.
pub trait Blas: Send + Sync + std::fmt::Debug {
    /// The backend.
    type Backend: Backend;

    /// The workspace every call must be given at least.
    fn workspace_bytes(&self) -> usize;

    /// Makes the plan for `desc` now (algorithm choice included), so a later [`Blas::matmul`] with it,
    /// during a capture for instance, only enqueues. On a GPU a small problem's candidates are timed
    /// here ([`BlasConfig::tune_candidates`]; scratch operands are allocated and freed, so this is
    /// not for a capturing thread). Refuses a description no backend can run.
    fn prepare(&self, desc: &MatmulDesc) -> Result<()>;

    /// Enqueues the matmul `desc` on `operands` on `stream` (planning it first if
    /// [`Blas::prepare`] was not called).
    ///
    /// # Safety
    /// Every slice of `operands` must name live device memory until the stream has passed the work, and
    /// the workspace must be used by nothing else until then.
    unsafe fn matmul(
        &self,
        stream: &<Self::Backend as Backend>::Stream,
        desc: &MatmulDesc,
        operands: &MatmulOperands,
    ) -> Result<()>;
}
