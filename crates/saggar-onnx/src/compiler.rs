//! [`OnnxCompiler`]: saggar-dispatch's [`ProgramCompiler`] for ONNX models.
//!
//! `compile` specialises the imported graph to the request's input shapes and lowers it
//! ([`crate::lower`]): on the host backend to host kernels ("compiled" into a host plan), on CUDA
//! and HIP to one generated C++ source for the model (the kernels of [`crate::ops::gpu`] and
//! [`crate::fuse`] after their shared prelude) compiled by NVRTC or
//! hipRTC through the device. Generated kernels take every extent from their `meta` tables, so the
//! source is the same for every input shape of the model: the compiler keeps the code object of each
//! source it compiled (per backend and device ordinal) and every later bucket reuses it without
//! compiling ([`OnnxCompiler::gpu_source_compiles`] counts them). The source is compiled as several
//! translation units at once ([`crate::units`]); each bucket's artifact carries the same code objects
//! (one per unit) and the source hash, and loads on one GPU device share the loaded modules (found by
//! that hash and the unit). The artifact
//! records the shapes ([`crate::artifact`]); `load` lowers again from the recorded shapes (computing
//! launch shapes and `meta` tables), checks the code object and resolves the kernels.
//!
//! The model's constants are uploaded once per device through saggar-dispatch's `PerDevice` (a
//! residency marker read back on reuse: host-backend devices with one ordinal may be distinct
//! simulated devices), and shared by every
//! program of that device; constants that exist for one shape only (folded shape vectors) and the
//! `meta` tables are uploaded with their program. A node with no GPU lowering is an
//! [`OnnxError::UnsupportedOnBackend`] naming the op at the first compile for CUDA or HIP.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use saggar_device::blas::BlasConfig;
use saggar_device::{
    Backend, BackendKind, Blas as _, CodeObject, Device as _, DeviceBuffer as _, DevicePtr, DeviceSlice, KernelArg,
    KernelSource, LaunchConfig, MatmulDesc, MatmulOperands, MatmulPrecision, Module as _, Stream as _,
};
use saggar_dispatch::resident::{MARKER_LEN, PerDevice, ResidentBuffer};
use saggar_dispatch::steps;
use saggar_dispatch::{BucketSpec, PadValue, PaddedAxis};
use saggar_dispatch::{
    CompileRequest, CompilerCapabilities, CompilerError, CompilerIdentity, ModelHash, ModelSpec, Program,
    ProgramCompiler,
};

use crate::artifact::Header;
use crate::error::OnnxError;
use crate::fuse::attention::AttentionKernel;
use crate::graph::model::OnnxModel;
use crate::graph::passes;
use crate::graph::passes::conv_gemm::ConvEngine;
use crate::lower::blas::{BlasLowering, GemmEngine};
use crate::plan::memory::{self, WeightLayout};
use crate::plan::{ArgSource, Lowered, PlanStep, PlanSummary, Target};

/// The compiler's name in its identity.
pub const COMPILER_NAME: &str = "saggar-onnx";
/// The artifact format version, part of the identity.
pub const ARTIFACT_VERSION: u32 = 3;
/// Bytes before the first constant in a device's weight buffer: the residency marker, padded to the
/// constants' alignment.
const CONSTANTS_OFFSET: usize = memory::ALIGN;
const _: () = assert!(CONSTANTS_OFFSET >= MARKER_LEN);

/// Options of an [`OnnxCompiler`].
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
    /// Whether BLAS-Lt GEMMs may use TF32 (default: strict `f32`). Part of the compiler identity.
    pub precision: MatmulPrecision,
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
}

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
            precision: MatmulPrecision::default(),
            blas_workspace_bytes: DEFAULT_BLAS_WORKSPACE_BYTES,
            blas_library: None,
            blas_tune_candidates: saggar_device::DEFAULT_TUNE_CANDIDATES,
            fusion: true,
            attention: AttentionKernel::Auto,
        }
    }
}

impl OnnxOptions {
    /// The same options with another [`OnnxOptions::max_program_bytes`].
    pub fn with_max_program_bytes(mut self, bytes: u64) -> OnnxOptions {
        self.max_program_bytes = bytes;
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
    pub fn with_precision(mut self, precision: MatmulPrecision) -> OnnxOptions {
        self.precision = precision;
        self
    }

    /// The same options with another [`OnnxOptions::blas_library`].
    pub fn with_blas_library(mut self, path: impl Into<std::path::PathBuf>) -> OnnxOptions {
        self.blas_library = Some(path.into());
        self
    }

    /// The BLAS-Lt handle configuration these options ask for.
    fn blas_config(&self) -> BlasConfig {
        let from_env = BlasConfig::from_env();
        BlasConfig {
            workspace_bytes: self.blas_workspace_bytes,
            library_path: self.blas_library.clone().or(from_env.library_path),
            tune_candidates: self.blas_tune_candidates,
        }
    }
}

/// Compiles one imported ONNX model for sessions. See the module docs.
///
/// # Thread safety
/// `Send + Sync`; loads on one device share one constant upload (under a lock).
pub struct OnnxCompiler {
    model: Arc<OnnxModel>,
    options: OnnxOptions,
    spec: ModelSpec,
    weights: WeightLayout,
    model_hash: [u8; 32],
    resident: PerDevice,
    /// Code objects compiled from generated sources.
    compiled: Mutex<Vec<Compiled>>,
    /// Generated sources compiled (each once per backend and device ordinal).
    source_compiles: AtomicUsize,
    /// Modules loaded from generated sources, shared by every bucket on a GPU device.
    modules: Mutex<Vec<LoadedModule>>,
    /// BLAS-Lt handles, one per GPU device, shared by every bucket (each run passes its own workspace).
    blas_handles: Mutex<Vec<SharedHandle>>,
}

/// A module loaded on one GPU device (one translation unit of a source), type-erased like [`Resident`].
struct LoadedModule {
    backend: BackendKind,
    ordinal: usize,
    source_hash: [u8; 32],
    unit: usize,
    module: Arc<dyn Any + Send + Sync>,
}

/// The typed module inside a [`LoadedModule`].
struct SharedModule<B: Backend>(Arc<B::Module>);

/// A BLAS-Lt handle of one GPU device, type-erased like [`LoadedModule`].
struct SharedHandle {
    backend: BackendKind,
    ordinal: usize,
    handle: Arc<dyn Any + Send + Sync>,
}

/// The typed handle inside a [`SharedHandle`].
struct SharedBlas<B: Backend>(Arc<B::Blas>);

/// The code objects (one per translation unit) compiled from a generated source on one device.
#[derive(Debug)]
struct Compiled {
    backend: BackendKind,
    ordinal: usize,
    source_hash: [u8; 32],
    codes: Vec<CodeObject>,
}

impl std::fmt::Debug for OnnxCompiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnnxCompiler")
            .field("model", &self.model.name())
            .field("options", &self.options)
            .field("weight_bytes", &self.weights.bytes.len())
            .finish_non_exhaustive()
    }
}

impl OnnxCompiler {
    /// A compiler for `model`.
    pub fn new(model: OnnxModel, options: OnnxOptions) -> OnnxCompiler {
        let spec = ModelSpec::new(model.name(), model.inputs().to_vec(), model.outputs().to_vec());
        let weights = memory::weight_layout(model.graph());
        let mut model_hash = [0u8; 32];
        if let Ok(h) = blake3::Hash::from_hex(model.model_hash()) {
            model_hash = *h.as_bytes();
        }
        OnnxCompiler {
            model: Arc::new(model),
            options,
            spec,
            weights,
            model_hash,
            resident: PerDevice::new(),
            compiled: Mutex::new(Vec::new()),
            source_compiles: AtomicUsize::new(0),
            modules: Mutex::new(Vec::new()),
            blas_handles: Mutex::new(Vec::new()),
        }
    }

    /// The model.
    pub fn onnx_model(&self) -> &OnnxModel {
        &self.model
    }

    /// The options.
    pub fn options(&self) -> &OnnxOptions {
        &self.options
    }

    /// The constants uploaded once per device (after the residency marker).
    #[cfg(test)]
    pub(crate) fn weight_layout(&self) -> &WeightLayout {
        &self.weights
    }

    /// A padded axis of this model for [`saggar_dispatch::SessionConfigBuilder::padded_axis`]: the
    /// symbolic dimension `symbol` (as the model's inputs name it, such as a sequence), bucketed by
    /// `buckets`, with every input that carries it padded with `pad` (for a BERT-style encoder,
    /// token id 0 and attention mask 0: padded tokens are masked out of every real token's
    /// attention). Every output that carries the symbol is sliced back to the request's extent.
    /// Declare different values per input with [`PaddedAxis::pad`] instead.
    pub fn padded_axis(&self, symbol: &str, buckets: BucketSpec, pad: impl Into<PadValue>) -> PaddedAxis {
        let pad = pad.into();
        self.spec
            .inputs
            .iter()
            .filter(|spec| spec.dims().iter().any(|d| d.symbol() == Some(symbol)))
            .fold(PaddedAxis::new(symbol, buckets), |axis, spec| axis.pad(spec.name(), pad))
    }

    /// Bytes of constants uploaded once per device.
    pub fn weight_bytes(&self) -> usize {
        self.weights.bytes.len()
    }

    pub(crate) fn lower(&self, input_dims: &[Vec<u64>], backend: BackendKind) -> Result<Lowered, OnnxError> {
        let mut graph = passes::specialise(self.model.graph(), input_dims, self.model.name())?;
        if self.options.conv == ConvEngine::Im2col {
            passes::conv_gemm::convs_as_gemms(&mut graph);
        }
        let target = if backend == BackendKind::Host { Target::Host } else { Target::Gpu(backend) };
        let blas = (self.options.gemm == GemmEngine::BlasLt).then_some(BlasLowering {
            precision: self.options.precision,
            workspace_bytes: if backend == BackendKind::Host { 0 } else { self.options.blas_workspace_bytes },
        });
        let fusion = self.options.fusion.then_some(self.options.attention);
        crate::lower::lower(&graph, &self.weights, self.options.max_program_bytes, target, blas, fusion)
    }

    /// Lowers the model for `input_dims` on `backend` and returns its kernel counts (before and
    /// after fusion) and scratch bytes, for reports and benches. Compiles nothing.
    pub fn plan_summary(&self, input_dims: &[Vec<u64>], backend: BackendKind) -> Result<PlanSummary, OnnxError> {
        Ok(self.lower(input_dims, backend)?.summary)
    }

    /// The CUDA/HIP C++ source generated for `input_dims` (the same text for every input shape of
    /// a model whose specialised graphs have the same structure). Compiles nothing.
    pub fn gpu_source(&self, input_dims: &[Vec<u64>]) -> Result<String, OnnxError> {
        Ok(self.source(&self.lower(input_dims, BackendKind::Cuda)?).code)
    }

    /// How many generated CUDA/HIP sources this compiler has compiled: one per model, backend and
    /// device ordinal however many buckets (input shapes) were compiled, since every bucket's source
    /// is the same text (each compile runs the source's translation units concurrently).
    pub fn gpu_source_compiles(&self) -> usize {
        self.source_compiles.load(Ordering::Relaxed)
    }

    /// The translation units compiled for `lowered`: on GPUs the generated source split by
    /// [`crate::units`], on the host the plan source.
    pub(crate) fn units(&self, lowered: &Lowered, source: &KernelSource) -> Vec<KernelSource> {
        if lowered.definitions.iter().all(String::is_empty) {
            return vec![source.clone()];
        }
        let prelude = self.prelude(lowered);
        crate::units::split(
            &format!("saggar_onnx_{}", self.model.name()),
            &prelude,
            &lowered.definitions,
            &lowered.kernels,
        )
    }

    fn prelude(&self, lowered: &Lowered) -> String {
        let mut code = format!(
            "// saggar-onnx {}: model `{}`, {} kernels\n",
            env!("CARGO_PKG_VERSION"),
            self.model.name(),
            lowered.kernels.len()
        );
        code.push_str(saggar_device::builtin::PRELUDE);
        code.push_str(crate::ops::gpu::PRELUDE);
        code
    }

    pub(crate) fn source(&self, lowered: &Lowered) -> KernelSource {
        if !lowered.gpu {
            return KernelSource::new(
                format!("saggar_onnx_{}.plan", self.model.name()),
                format!("saggar-onnx host plan: model `{}`, {} launches", self.model.name(), lowered.steps.len()),
                lowered.kernels.clone(),
            );
        }
        let mut code = self.prelude(lowered);
        for definition in &lowered.definitions {
            code.push('\n');
            code.push_str(definition);
        }
        KernelSource::new(format!("saggar_onnx_{}.cu", self.model.name()), code, lowered.kernels.clone())
    }

    /// Compiles the units of `source` on `device`, or returns the code objects an earlier bucket
    /// compiled from the same text on the same backend and ordinal.
    fn compile_source<B: Backend>(
        &self,
        device: &B::Device,
        source: &KernelSource,
        units: &[KernelSource],
    ) -> Result<Vec<CodeObject>, OnnxError> {
        let hash = *blake3::hash(source.code.as_bytes()).as_bytes();
        let ordinal = device.info().ordinal;
        // Held while compiling: buckets compiled concurrently wait for the first compile of a source.
        let mut compiled = self.compiled.lock();
        let found = compiled
            .iter()
            .find(|c| c.backend == B::KIND && c.ordinal == ordinal && c.source_hash == hash)
            .map(|c| c.codes.clone());
        if let Some(codes) = found {
            return Ok(codes);
        }
        let codes = crate::units::compile_all(device, units)?;
        self.source_compiles.fetch_add(1, Ordering::Relaxed);
        compiled.push(Compiled { backend: B::KIND, ordinal, source_hash: hash, codes: codes.clone() });
        Ok(codes)
    }

    pub(crate) fn compile_impl<B: Backend>(
        &self,
        device: &B::Device,
        request: &CompileRequest<'_>,
    ) -> Result<Vec<u8>, OnnxError> {
        let lowered = self.lower(request.input_dims, B::KIND)?;
        let source = self.source(&lowered);
        let codes = if B::KIND == BackendKind::Host {
            vec![device.compile(&source)?]
        } else {
            self.compile_source::<B>(device, &source, &self.units(&lowered, &source))?
        };
        let header = Header {
            backend: B::KIND,
            model_hash: self.model_hash,
            bucket: request.bucket,
            input_dims: request.input_dims.to_vec(),
            source_hash: *blake3::hash(source.code.as_bytes()).as_bytes(),
        };
        Ok(header.encode(&codes))
    }

    /// Loads `code` (unit `unit` of a source) on `device`, or on a GPU returns the module an earlier
    /// bucket loaded from the same unit on the same backend and ordinal (the driver would otherwise
    /// JIT the same code per bucket).
    fn module<B: Backend>(
        &self,
        device: &B::Device,
        source_hash: &[u8; 32],
        unit: usize,
        code: &CodeObject,
    ) -> Result<Arc<B::Module>, OnnxError> {
        if B::KIND == BackendKind::Host {
            return Ok(Arc::new(device.load_module(code)?));
        }
        let ordinal = device.info().ordinal;
        let mut modules = self.modules.lock();
        let found = modules
            .iter()
            .filter(|m| m.backend == B::KIND && m.ordinal == ordinal && &m.source_hash == source_hash && m.unit == unit)
            .find_map(|m| m.module.clone().downcast::<SharedModule<B>>().ok());
        if let Some(shared) = found {
            return Ok(shared.0.clone());
        }
        let module = Arc::new(device.load_module(code)?);
        let shared: Arc<dyn Any + Send + Sync> = Arc::new(SharedModule::<B>(module.clone()));
        modules.push(LoadedModule { backend: B::KIND, ordinal, source_hash: *source_hash, unit, module: shared });
        Ok(module)
    }

    fn resident_weights<B: Backend>(&self, device: &B::Device) -> Result<Arc<ResidentBuffer<B>>, OnnxError> {
        Ok(self.resident.get_or_upload::<B>(device, CONSTANTS_OFFSET, || &self.weights.bytes)?)
    }

    pub(crate) fn load_impl<B: Backend>(
        &self,
        device: &B::Device,
        request: &CompileRequest<'_>,
        artifact: &[u8],
    ) -> Result<OnnxProgram<B>, OnnxError> {
        let (header, codes) = Header::parse(artifact)?;
        if header.backend != B::KIND {
            return Err(OnnxError::Artifact {
                reason: format!("made for {:?}, loaded on {:?}", header.backend, B::KIND),
            });
        }
        if header.model_hash != self.model_hash {
            return Err(OnnxError::Artifact { reason: "made for another model".into() });
        }
        // One artifact serves every shape whose generated code is the same text (the shapes are kernel
        // arguments): the check is that this request's code is the artifact's.
        let lowered = self.lower(request.input_dims, B::KIND)?;
        if *blake3::hash(self.source(&lowered).code.as_bytes()).as_bytes() != header.source_hash {
            return Err(OnnxError::Artifact {
                reason: format!(
                    "made for input shapes {:?}, whose code differs from that of {:?}",
                    header.input_dims, request.input_dims
                ),
            });
        }
        // The unit holding each kernel.
        let mut unit_of: HashMap<&str, usize> = HashMap::new();
        for signature in &lowered.kernels {
            let unit = codes.iter().position(|c| c.signature(&signature.name) == Some(signature)).ok_or_else(|| {
                OnnxError::Artifact {
                    reason: format!("kernel `{}` is missing or has another signature", signature.name),
                }
            })?;
            unit_of.insert(&signature.name, unit);
        }
        let modules = codes
            .iter()
            .enumerate()
            .map(|(u, code)| self.module::<B>(device, &header.source_hash, u, code))
            .collect::<Result<Vec<_>, _>>()?;
        let steps = lowered
            .steps
            .iter()
            .map(|s| match s {
                PlanStep::Launch(s) => {
                    let unit = unit_of.get(s.kernel.as_str()).copied().ok_or_else(|| OnnxError::Artifact {
                        reason: format!("kernel `{}` is in no code object", s.kernel),
                    })?;
                    Ok(LoadedStep::Launch {
                        kernel: modules[unit].kernel(&s.kernel)?,
                        args: s.args.clone(),
                        config: s.config,
                    })
                }
                PlanStep::Matmul(m) => Ok(LoadedStep::Matmul(*m)),
            })
            .collect::<Result<Vec<_>, OnnxError>>()?;
        let kinds = crate::plan::labels::kinds(&lowered.steps);
        let blas = self.blas::<B>(device, &steps)?;
        let weights = self.resident_weights::<B>(device)?;
        let local = if lowered.local_constants.is_empty() {
            None
        } else {
            let buffer = device.alloc(lowered.local_constants.len())?;
            let stream = device.create_stream()?;
            stream.upload(&lowered.local_constants, buffer.as_slice())?;
            stream.synchronize()?;
            Some(buffer)
        };
        Ok(OnnxProgram {
            model: self.model.name().to_string(),
            output_dims: lowered.output_dims,
            input_bytes: lowered.input_bytes,
            output_bytes: lowered.output_bytes,
            scratch_bytes: lowered.scratch_bytes,
            steps,
            weights,
            local,
            blas,
            _modules: modules,
            kinds,
            labels: lowered.labels,
        })
    }

    /// The BLAS-Lt handle the program's matmul steps run on, every description planned (`None` when
    /// it has none). GPU handles are shared by every program of a device; on the host each program
    /// gets its own (host-backend devices of one ordinal may be distinct simulated devices).
    fn blas<B: Backend>(&self, device: &B::Device, steps: &[LoadedStep<B>]) -> Result<Option<Arc<B::Blas>>, OnnxError> {
        let descs: Vec<&MatmulDesc> = steps
            .iter()
            .filter_map(|s| match s {
                LoadedStep::Matmul(m) => Some(&m.desc),
                LoadedStep::Launch { .. } => None,
            })
            .collect();
        if descs.is_empty() {
            return Ok(None);
        }
        let ordinal = device.info().ordinal;
        let blas = if B::KIND == BackendKind::Host {
            Arc::new(device.create_blas(&self.options.blas_config())?)
        } else {
            let mut handles = self.blas_handles.lock();
            let found = handles
                .iter()
                .filter(|h| h.backend == B::KIND && h.ordinal == ordinal)
                .find_map(|h| h.handle.clone().downcast::<SharedBlas<B>>().ok());
            match found {
                Some(shared) => shared.0.clone(),
                None => {
                    let blas = Arc::new(device.create_blas(&self.options.blas_config())?);
                    let shared: Arc<dyn Any + Send + Sync> = Arc::new(SharedBlas::<B>(blas.clone()));
                    handles.push(SharedHandle { backend: B::KIND, ordinal, handle: shared });
                    blas
                }
            }
        };
        for desc in descs {
            blas.prepare(desc)?;
        }
        Ok(Some(blas))
    }
}

impl<B: Backend> ProgramCompiler<B> for OnnxCompiler {
    type Program = OnnxProgram<B>;

    fn model(&self) -> &ModelSpec {
        &self.spec
    }

    fn identity(&self) -> CompilerIdentity {
        let identity =
            CompilerIdentity::new(COMPILER_NAME, env!("CARGO_PKG_VERSION"), ModelHash::from_digest(self.model_hash))
                .with_option("artifact", ARTIFACT_VERSION.to_string())
                .with_option("gemm", self.options.gemm.name().to_string())
                .with_option("conv", self.options.conv.name().to_string())
                .with_option("precision", self.options.precision.name().to_string())
                .with_option("blas_workspace", self.options.blas_workspace_bytes.to_string());
        // Unfused plans, and plans with one attention kernel forced, have other kernels: their
        // artifacts are keyed apart.
        match (self.options.fusion, self.options.attention) {
            (false, _) => identity.with_option("fusion", "off"),
            (true, AttentionKernel::Auto) => identity,
            (true, kernel) => identity.with_option("attention", kernel.name().to_string()),
        }
    }

    /// Thread-safe (compiles share the model's code objects under a lock). On CUDA and HIP one
    /// artifact serves every bucket: the generated code takes the batch as an argument, and a load
    /// checks that the request's code is the artifact's. The host backend's plans are specialised
    /// per shape, so there each bucket has its own artifact.
    fn capabilities(&self) -> CompilerCapabilities {
        CompilerCapabilities::default().with_thread_safe(true).with_one_artifact_per_model(B::KIND != BackendKind::Host)
    }

    fn compile(&self, device: &B::Device, request: &CompileRequest<'_>) -> Result<Vec<u8>, CompilerError> {
        Ok(self.compile_impl::<B>(device, request)?)
    }

    fn load(
        &self,
        device: &B::Device,
        request: &CompileRequest<'_>,
        artifact: &[u8],
    ) -> Result<OnnxProgram<B>, CompilerError> {
        Ok(self.load_impl::<B>(device, request, artifact)?)
    }
}

#[derive(Debug)]
enum LoadedStep<B: Backend> {
    Launch { kernel: B::Kernel, args: Vec<ArgSource>, config: LaunchConfig },
    Matmul(crate::plan::MatmulStep),
}

/// A loaded program: one model at one input shape on one device.
///
/// It holds the device's constant buffer (shared with the device's other programs); drop a program
/// only after the work it enqueued has run.
///
/// # Thread safety
/// `Send + Sync` and stateless between runs: concurrent launches with their own bindings and
/// scratch do not interfere.
#[derive(Debug)]
pub struct OnnxProgram<B: Backend> {
    model: String,
    output_dims: Vec<Vec<u64>>,
    input_bytes: Vec<usize>,
    output_bytes: Vec<usize>,
    scratch_bytes: usize,
    steps: Vec<LoadedStep<B>>,
    weights: Arc<ResidentBuffer<B>>,
    local: Option<B::DeviceBuffer>,
    /// The BLAS-Lt handle of the matmul steps, when there are any.
    blas: Option<Arc<B::Blas>>,
    _modules: Vec<Arc<B::Module>>,
    /// What each step runs (kernel name or matmul shape), for profiles.
    pub(crate) kinds: Vec<String>,
    /// The nodes each step computes, for profiles.
    pub(crate) labels: crate::plan::labels::StepLabels,
}

impl<B: Backend> OnnxProgram<B> {
    /// Kernel launches and matmuls per run.
    pub fn launches(&self) -> usize {
        self.steps.len()
    }

    /// Matmuls per run that go through the BLAS-Lt library.
    pub fn blas_matmuls(&self) -> usize {
        self.steps.iter().filter(|s| matches!(s, LoadedStep::Matmul(_))).count()
    }

    /// The scratch bytes and the bytes of each input and output binding a launch needs.
    pub(crate) fn binding_bytes(&self) -> (usize, &[usize], &[usize]) {
        (self.scratch_bytes, &self.input_bytes, &self.output_bytes)
    }

    fn check_bindings(
        &self,
        inputs: &[DeviceSlice],
        outputs: &[DeviceSlice],
        scratch: DeviceSlice,
    ) -> saggar_device::Result<()> {
        steps::check_bindings(inputs, outputs, scratch, &self.input_bytes, &self.output_bytes, self.scratch_bytes)
            .map_err(|reason| saggar_device::Error::InvalidLaunchConfig {
                kernel: format!("saggar-onnx program `{}`", self.model),
                reason,
            })
    }

    fn resolve(
        &self,
        arg: ArgSource,
        inputs: &[DeviceSlice],
        outputs: &[DeviceSlice],
        scratch: DeviceSlice,
    ) -> KernelArg {
        let at = |base: DevicePtr, bytes: usize| KernelArg::Ptr(DevicePtr(base.0 + bytes as u64));
        match arg {
            ArgSource::Input(i) => KernelArg::Ptr(inputs[i].ptr()),
            ArgSource::Output(i) => KernelArg::Ptr(outputs[i].ptr()),
            ArgSource::Scratch(off) => at(scratch.ptr(), off),
            ArgSource::Weights(off) => at(self.weights.buffer().ptr(), CONSTANTS_OFFSET + off),
            ArgSource::Local(off) => at(self.local.as_ref().map_or(DevicePtr::NULL, |b| b.ptr()), off),
            ArgSource::Bytes(n) => KernelArg::U64(n),
        }
    }
}

impl<B: Backend> Program<B> for OnnxProgram<B> {
    fn output_dims(&self) -> &[Vec<u64>] {
        &self.output_dims
    }

    fn scratch_bytes(&self) -> usize {
        self.scratch_bytes
    }

    unsafe fn launch(
        &self,
        stream: &B::Stream,
        inputs: &[DeviceSlice],
        outputs: &[DeviceSlice],
        scratch: DeviceSlice,
    ) -> Result<(), saggar_device::Error> {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.enqueue(stream, 0..self.steps.len(), inputs, outputs, scratch) }
    }
}

impl<B: Backend> OnnxProgram<B> {
    /// Enqueues the steps in `range` (of `0..launches()`) on `stream`, after checking the bindings.
    ///
    /// # Safety
    /// As [`Program::launch`].
    pub(crate) unsafe fn enqueue(
        &self,
        stream: &B::Stream,
        range: std::ops::Range<usize>,
        inputs: &[DeviceSlice],
        outputs: &[DeviceSlice],
        scratch: DeviceSlice,
    ) -> Result<(), saggar_device::Error> {
        self.check_bindings(inputs, outputs, scratch)?;
        let steps = self.steps.get(range).unwrap_or(&[]);
        // SAFETY: forwarded from this function's contract; `check_bindings` verified each binding
        // holds what the plan reads and writes (the plan placed every tensor inside those lengths),
        // and the weight and local constant buffers are kept alive by `self`, sized by the same layout.
        unsafe {
            steps::enqueue_steps::<B, _>(stream, steps, |step, args| match step {
                LoadedStep::Launch { kernel, args: sources, config } => {
                    args.extend(sources.iter().map(|a| self.resolve(*a, inputs, outputs, scratch)));
                    steps::StepWork::Launch { kernel, config }
                }
                LoadedStep::Matmul(m) => {
                    let blas = self.blas.as_deref().expect("a program with matmul steps holds a BLAS handle");
                    let slice = |src: ArgSource, bytes: u64| {
                        let ptr = self.resolve(src, inputs, outputs, scratch).as_ptr().unwrap_or(DevicePtr::NULL);
                        DeviceSlice::from_raw(ptr, bytes as usize)
                    };
                    let d = &m.desc;
                    let span = |stride: u64, elements: u64| ((d.batch - 1) * stride + elements) * 4;
                    let workspace =
                        DeviceSlice::from_raw(DevicePtr(scratch.ptr().0 + m.workspace as u64), blas.workspace_bytes());
                    let operands = MatmulOperands {
                        a: slice(m.a, span(d.stride_a, d.m * d.k)),
                        b: slice(m.b, span(d.stride_b, d.k * d.n)),
                        c: slice(m.c, span(d.stride_c, d.m * d.n)),
                        bias: m.bias.map(|b| slice(b, d.n * 4)),
                        workspace,
                    };
                    steps::StepWork::Matmul { blas, desc: d, operands }
                }
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_source_compiles_once_for_every_bucket_as_several_units() {
        use saggar_device::host::{HostBackend, register_kernel};
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/bert/model.onnx");
        let c = OnnxCompiler::new(OnnxModel::load(path).unwrap(), OnnxOptions::default());
        let device = HostBackend::open(0).unwrap();
        let mut all = Vec::new();
        for batch in [1, 2, 4, 64] {
            let dims = [vec![batch, 16], vec![batch, 16]];
            let lowered = c.lower(&dims, BackendKind::Cuda).unwrap();
            let source = c.source(&lowered);
            // Stand-ins, so the host device accepts the units as it would compiled CUDA.
            for k in &lowered.kernels {
                register_kernel(k.clone(), |_, _, _| Ok(())).unwrap();
            }
            let units = c.units(&lowered, &source);
            assert!(units.len() > 1, "the source is split");
            all.push(c.compile_source::<HostBackend>(&device, &source, &units).unwrap());
        }
        assert_eq!(c.gpu_source_compiles(), 1, "four buckets, one compile");
        assert!(all.windows(2).all(|w| w[0] == w[1]), "every bucket gets the same code objects");
    }

    #[test]
    fn compiler_and_program_are_send_sync_static() {
        fn check<T: Send + Sync + 'static>() {}
        check::<OnnxCompiler>();
        check::<OnnxProgram<saggar_device::host::HostBackend>>();
    }
}
