//! [`OnnxOptions`]: how an [`OnnxCompiler`](super::OnnxCompiler) lowers a model; the options that
//! change the generated code are part of its identity.

use std::fmt;
use std::str::FromStr;

use saggar_device::MatmulPrecision;
use saggar_device::blas::BlasConfig;
use saggar_shape::DType;

use crate::fuse::attention::AttentionKernel;
use crate::graph::passes::conv_gemm::ConvEngine;
use crate::lower::blas::GemmEngine;

/// Options of an [`OnnxCompiler`](super::OnnxCompiler).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnnxOptions {
    /// Largest scratch memory, and largest single tensor, a program may need; requests above it are
    /// refused at compile before anything is allocated.
    pub max_program_bytes: u64,
    /// How MatMul and Gemm run: through the backend's BLAS-Lt library (default) or the generated
    /// kernel. Part of the compiler identity.
    pub gemm: GemmEngine,
    /// How Conv runs: one-group convolutions as im2col plus a GEMM (default) or always the direct
    /// kernel. Part of the compiler identity.
    pub conv: ConvEngine,
    /// The precision products compute in ([`Precision`]; default strict `fp32`). Part of the
    /// compiler identity.
    pub precision: Precision,
    /// Products kept in strict f32 at `fp16` and `bf16`, named by op type (`Gemm`) or node name, as
    /// TensorRT's layer precisions and ONNX Runtime's op block list do (a Q, K or V projection's
    /// name keeps the one product import merged them into). An entry that names neither is an
    /// [`crate::OnnxError::Precision`]. Part of the compiler identity.
    pub keep_fp32: Vec<String>,
    /// Scratch each run reserves for the BLAS-Lt library's workspace on CUDA and HIP (the host
    /// backend needs none). Part of the compiler identity.
    pub blas_workspace_bytes: usize,
    /// The BLAS-Lt library to load instead of the vendor's default names (see
    /// [`saggar_device::blas::BlasConfig::library_path`]); `None` reads
    /// [`saggar_device::blas::LIBRARY_ENV`].
    pub blas_library: Option<std::path::PathBuf>,
    /// How many BLAS-Lt candidates a load times per matmul shape and keeps the fastest of
    /// ([`saggar_device::BlasConfig::tune_candidates`]; 1, the default, takes the heuristic's
    /// first choice). Not part of the compiler identity: it picks kernels, not results' layout.
    pub blas_tune_candidates: usize,
    /// Whether nodes are fused (attention patterns and elementwise chains into one kernel each);
    /// off, every node is its own launch (for comparisons and benches). On by default.
    pub fusion: bool,
    /// Which kernel a fused attention pattern runs on CUDA and HIP. Part of the compiler identity
    /// unless [`AttentionKernel::Auto`].
    pub attention: AttentionKernel,
    /// Data sets the `int8` precision calibrates an f32 model's activation scales from
    /// ([`Calibration`]). Part of the compiler identity (by digest).
    pub calibration: Option<Calibration>,
    /// Most iterations a `Loop` run at run time (its condition computed from the values it carries)
    /// may take in one request; past it the request fails with
    /// [`saggar_dispatch::DispatchError::LoopIterations`] rather than hang. Not part of the compiler
    /// identity: it limits runs, not programs.
    pub max_loop_iterations: u64,
}

/// Calibration data of [`Precision::Int8`]: data sets of the model's inputs (binding order), which
/// the host runs the f32 model on to find each weight product's activation range.
#[derive(Clone)]
pub struct Calibration {
    sets: std::sync::Arc<Vec<Vec<crate::tensor::Tensor>>>,
    digest: String,
}

impl Calibration {
    /// Calibration from `sets`, each a data set of the model's inputs in binding order.
    pub fn new(sets: Vec<Vec<crate::tensor::Tensor>>) -> Calibration {
        let mut hasher = blake3::Hasher::new();
        for set in &sets {
            hasher.update(b"set");
            for t in set {
                hasher.update(t.dtype().name().as_bytes());
                for d in t.dims() {
                    hasher.update(&(*d as u64).to_le_bytes());
                }
                hasher.update(&t.to_le_bytes());
            }
        }
        Calibration { sets: std::sync::Arc::new(sets), digest: hasher.finalize().to_hex()[..16].to_string() }
    }

    /// The data sets.
    pub fn sets(&self) -> &[Vec<crate::tensor::Tensor>] {
        &self.sets
    }

    /// A digest of the data (the compiler identity's `calibration` option).
    pub fn digest(&self) -> &str {
        &self.digest
    }
}

impl fmt::Debug for Calibration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Calibration({} data sets, {})", self.sets.len(), self.digest)
    }
}

impl PartialEq for Calibration {
    fn eq(&self, other: &Calibration) -> bool {
        self.digest == other.digest
    }
}

impl Eq for Calibration {}

/// Default BLAS-Lt workspace per run context: [`saggar_device::blas::DEFAULT_WORKSPACE_BYTES`]
/// (32 MiB). The libraries choose split-K kernels only when the workspace holds their partial sums:
/// at 128 rows cuBLASLt's first choice with 4 MiB runs BERT-base's 128 x 768 x 3072 GEMM in 63 us on
/// an H100, with 32 MiB in 24 us.
pub const DEFAULT_BLAS_WORKSPACE_BYTES: usize = saggar_device::blas::DEFAULT_WORKSPACE_BYTES;

impl Default for OnnxOptions {
    fn default() -> OnnxOptions {
        OnnxOptions {
            max_program_bytes: 8 << 30,
            gemm: GemmEngine::default(),
            conv: ConvEngine::default(),
            precision: Precision::default(),
            keep_fp32: Vec::new(),
            blas_workspace_bytes: DEFAULT_BLAS_WORKSPACE_BYTES,
            blas_library: None,
            blas_tune_candidates: saggar_device::DEFAULT_TUNE_CANDIDATES,
            fusion: true,
            attention: AttentionKernel::Auto,
            calibration: None,
            max_loop_iterations: crate::graph::passes::segments::DEFAULT_MAX_LOOP_ITERATIONS,
        }
    }
}

impl OnnxOptions {
    /// The same options with another [`OnnxOptions::max_program_bytes`].
    pub fn with_max_program_bytes(mut self, bytes: u64) -> OnnxOptions {
        self.max_program_bytes = bytes;
        self
    }

    /// The same options with another [`OnnxOptions::max_loop_iterations`].
    pub fn with_max_loop_iterations(mut self, iterations: u64) -> OnnxOptions {
        self.max_loop_iterations = iterations;
        self
    }

    /// The same options with fusion on or off ([`OnnxOptions::fusion`]).
    pub fn with_fusion(mut self, fusion: bool) -> OnnxOptions {
        self.fusion = fusion;
        self
    }

    /// The same options with another [`OnnxOptions::blas_tune_candidates`].
    pub fn with_blas_tuning(mut self, candidates: usize) -> OnnxOptions {
        self.blas_tune_candidates = candidates;
        self
    }

    /// The same options with another [`OnnxOptions::blas_workspace_bytes`].
    pub fn with_blas_workspace(mut self, bytes: usize) -> OnnxOptions {
        self.blas_workspace_bytes = bytes;
        self
    }

    /// The same options with another [`OnnxOptions::attention`].
    pub fn with_attention(mut self, attention: AttentionKernel) -> OnnxOptions {
        self.attention = attention;
        self
    }

    /// The same options with another [`OnnxOptions::gemm`].
    pub fn with_gemm(mut self, gemm: GemmEngine) -> OnnxOptions {
        self.gemm = gemm;
        self
    }

    /// The same options with another [`OnnxOptions::conv`].
    pub fn with_conv(mut self, conv: ConvEngine) -> OnnxOptions {
        self.conv = conv;
        self
    }

    /// The same options with another [`OnnxOptions::precision`].
    pub fn with_precision(mut self, precision: Precision) -> OnnxOptions {
        self.precision = precision;
        self
    }

    /// The same options with another [`OnnxOptions::keep_fp32`] list.
    pub fn with_keep_fp32<S: Into<String>>(mut self, keep: impl IntoIterator<Item = S>) -> OnnxOptions {
        self.keep_fp32 = keep.into_iter().map(Into::into).collect();
        self
    }

    /// The same options with calibration data for [`Precision::Int8`] ([`OnnxOptions::calibration`]).
    pub fn with_calibration(mut self, calibration: Calibration) -> OnnxOptions {
        self.calibration = Some(calibration);
        self
    }

    /// The same options with another [`OnnxOptions::blas_library`].
    pub fn with_blas_library(mut self, path: impl Into<std::path::PathBuf>) -> OnnxOptions {
        self.blas_library = Some(path.into());
        self
    }

    /// The BLAS-Lt handle configuration these options ask for.
    pub(super) fn blas_config(&self) -> BlasConfig {
        let from_env = BlasConfig::from_env();
        BlasConfig {
            workspace_bytes: self.blas_workspace_bytes,
            library_path: self.blas_library.clone().or(from_env.library_path),
            tune_candidates: self.blas_tune_candidates,
        }
    }
}

/// The precision an f32 model's products compute in. Half models (f16, bf16 files) keep their own
/// types whatever the setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Precision {
    /// Strict f32 everywhere (TF32 off): results match the host backend to rounding.
    #[default]
    Fp32,
    /// f32 storage; BLAS-Lt products may round their inputs to TF32 on tensor cores (relative error
    /// about 1e-3).
    Tf32,
    /// Weight products (MatMul, Gemm with constant weights) on f16 tensor cores: weights stored f16,
    /// activations cast to f16 at the product, f32 accumulation and output; every other op in f32.
    Fp16,
    /// As [`Precision::Fp16`] in bfloat16 (f32's range, 8 mantissa bits).
    Bf16,
    /// Weight products on int8 tensor cores (int32 accumulation): a QDQ-quantised model's as
    /// written (they are `i8` at every setting), an f32 model's after calibration from
    /// [`OnnxOptions::calibration`] (per-tensor activation scales, per-channel weight scales); every
    /// other op in f32. An f32 model without calibration data is an [`crate::OnnxError::Precision`].
    Int8,
}

impl Precision {
    /// Every setting, in the order the CLI lists them.
    pub const ALL: [Precision; 5] =
        [Precision::Fp32, Precision::Tf32, Precision::Fp16, Precision::Bf16, Precision::Int8];

    /// The name used in options, flags and cache keys (`fp32`, `tf32`, `fp16`, `bf16`, `int8`).
    pub const fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
            Precision::Int8 => "int8",
        }
    }

    /// How f32 BLAS-Lt products compute.
    pub const fn matmul(self) -> MatmulPrecision {
        match self {
            Precision::Tf32 => MatmulPrecision::Tf32,
            _ => MatmulPrecision::StrictF32,
        }
    }

    /// The half type weight products use, if any.
    pub const fn half(self) -> Option<DType> {
        match self {
            Precision::Fp16 => Some(DType::F16),
            Precision::Bf16 => Some(DType::BF16),
            _ => None,
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = String;

    /// A name of [`Precision::name`]; `f32` is read as `fp32`.
    fn from_str(s: &str) -> Result<Precision, String> {
        match s {
            "f32" => Ok(Precision::Fp32),
            _ => Precision::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
                format!("unknown precision `{s}`: use fp32 (strict, the default), tf32, fp16, bf16 or int8")
            }),
        }
    }
}
