//! [`OnnxCompiler`]: saggar-dispatch's `ProgramCompiler` for ONNX models (a [`StepCompiler`]).
//!
//! `compile` specialises the imported graph to the request's input shapes and lowers it
//! ([`crate::lower`]): on the host backend to host kernels ("compiled" into a host plan), on CUDA
//! and HIP to one generated C++ source for the model (the kernels of [`crate::ops::gpu`] and
//! [`crate::fuse`] after their shared prelude) compiled by NVRTC or
//! hipRTC through the device. Generated kernels take every extent from their `meta` tables, so the
//! source is the same for every input shape of the model: the compiler keeps the code object of each
//! source it compiled (per backend and device ordinal) and every later bucket reuses it without
//! compiling ([`OnnxCompiler::gpu_source_compiles`] counts them). The source is compiled as several
//! translation units at once ([`crate::compiler::units`]); each bucket's artifact (saggar-dispatch's
//! step-program container, [`crate::compiler::artifact`]) carries the same code objects (one per unit), the
//! source hash and the request's shapes. `load` lowers again for the request's shapes (computing
//! launch shapes and `meta` tables), checks that the request's code is the artifact's, and hands the
//! plan to saggar-dispatch's `ProgramLoader`, which finds each kernel in its code object, loads the
//! modules (on a GPU device once per source hash and unit, shared by every bucket) and returns the
//! `StepProgram` that runs it.
//!
//! The loader uploads the model's constants once per device (a residency marker read back on reuse:
//! host-backend devices with one ordinal may be distinct simulated devices), shared by every
//! program of that device; constants that exist for one shape only (folded shape vectors) and the
//! `meta` tables are uploaded with their program. A node with no GPU lowering is an
//! [`OnnxError::UnsupportedOnBackend`] naming the op at the first compile for CUDA or HIP.

pub(crate) mod artifact;
#[cfg(test)]
mod attention_choice;
mod options;
pub(crate) mod profile;
pub(crate) mod run;
pub(crate) mod units;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use saggar_device::{Backend, BackendKind, CodeObject, Device as _, KernelSource};
use saggar_dispatch::resident::MARKER_LEN;
use saggar_dispatch::steps::{
    LoadError, ProgramLoader, ProgramPlan, StepArtifact, StepCompiler, StepProgram, source_hash,
};
use saggar_dispatch::{BucketSpec, PadValue, PaddedAxis};
use saggar_dispatch::{CompileRequest, CompilerIdentity, ModelHash, ModelSpec, Segment, SegmentSource};

pub use self::options::{Calibration, DEFAULT_BLAS_WORKSPACE_BYTES, OnnxOptions, Precision};
use crate::error::OnnxError;
use crate::fuse::attention::AttentionKernel;
use crate::graph::ir::Graph;
use crate::graph::model::OnnxModel;
use crate::graph::passes;
use crate::lower::Fusion;
use crate::lower::blas::{BlasLowering, GemmEngine};
use crate::plan::memory::{self, WeightLayout};
use crate::plan::{Lowered, PlanSummary, Target};

/// The compiler's name in its identity.
pub const COMPILER_NAME: &str = "saggar-onnx";
/// The artifact format version, part of the identity.
pub const ARTIFACT_VERSION: u32 = 4;
/// Bytes before the first constant in a device's weight buffer: the residency marker, padded to the
/// constants' alignment.
const CONSTANTS_OFFSET: usize = memory::ALIGN;
const _: () = assert!(CONSTANTS_OFFSET >= MARKER_LEN);

/// Compiles one imported ONNX model for sessions. See the module docs.
///
/// # Thread safety
/// `Send + Sync`; loads on one device share one constant upload (under a lock).
pub struct OnnxCompiler {
    /// The model as imported: its name, inputs and outputs, and the strict-f32 reference.
    model: Arc<OnnxModel>,
    /// The graph the programs are lowered from: the model's own, or its precision conversion.
    graph: Graph,
    options: OnnxOptions,
    spec: ModelSpec,
    weights: WeightLayout,
    model_hash: [u8; 32],
    /// Loads programs, sharing per device the constants, the modules of the model's source (one per
    /// translation unit) and a BLAS-Lt handle (each run passes its own workspace).
    loader: ProgramLoader,
    /// Code objects compiled from generated sources.
    compiled: Mutex<Vec<Compiled>>,
    /// Generated sources compiled (each once per backend and device ordinal).
    source_compiles: AtomicUsize,
    /// Why the precision setting does not fit the model, reported by every compile.
    precision_error: Option<String>,
    /// The cut of a model whose extents depend on values it computes (`graph::passes::segments`),
    /// made once; `None` for a model one program runs (or one the pass cannot cut: its compile
    /// reports why).
    split: Option<passes::segments::Split>,
}

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
    /// A compiler for `model`. At `fp16` and `bf16` its weight products are converted first
    /// ([`OnnxOptions::precision`]); a setting that does not fit the model (a keep-fp32 entry naming
    /// nothing) fails every compile with [`OnnxError::Precision`]: [`OnnxCompiler::try_new`] reports
    /// it at once.
    pub fn new(model: OnnxModel, options: OnnxOptions) -> OnnxCompiler {
        let (graph, precision_error) = match convert_precision(&model, &options) {
            Ok(Some(converted)) => (converted, None),
            Ok(None) => (model.graph().clone(), None),
            Err(e) => (model.graph().clone(), Some(e)),
        };
        let split = passes::segments::split(&graph).ok().flatten();
        let spec = ModelSpec::new(model.name(), model.inputs().to_vec(), model.outputs().to_vec())
            .with_value_inputs(model_value_inputs(&graph, split.as_ref()));
        let weights = memory::weight_layout(&graph);
        let mut model_hash = [0u8; 32];
        if let Ok(h) = blake3::Hash::from_hex(model.model_hash()) {
            model_hash = *h.as_bytes();
        }
        let loader = ProgramLoader::new(CONSTANTS_OFFSET).with_blas(options.blas_config());
        OnnxCompiler {
            model: Arc::new(model),
            graph,
            options,
            spec,
            weights,
            model_hash,
            loader,
            compiled: Mutex::new(Vec::new()),
            source_compiles: AtomicUsize::new(0),
            precision_error,
            split,
        }
    }

    /// As [`OnnxCompiler::new`], failing at once when the precision setting does not fit the model.
    pub fn try_new(model: OnnxModel, options: OnnxOptions) -> Result<OnnxCompiler, OnnxError> {
        let compiler = OnnxCompiler::new(model, options);
        compiler.check_precision()?;
        Ok(compiler)
    }

    fn check_precision(&self) -> Result<(), OnnxError> {
        match &self.precision_error {
            None => Ok(()),
            Some(reason) => Err(OnnxError::Precision { model: self.model.name().to_string(), reason: reason.clone() }),
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

    /// The model inputs whose values, not only their shapes, fix the program (binding order): a
    /// `shape`, `axes` or `k` given as an input. Sessions key programs by their values too.
    pub fn value_inputs(&self) -> &[usize] {
        &self.spec.value_inputs
    }

    /// The model cut into segments, when some of its extents depend on values it computes
    /// (`graph::passes::segments`).
    pub(crate) fn split(&self) -> Option<&passes::segments::Split> {
        self.split.as_ref()
    }

    /// The compiler of segment `k`, `graph`, with these options; a loop body (`per_shape`) is served a program per shape.
    pub(crate) fn segment_compiler(&self, k: usize, graph: Graph, per_shape: bool) -> OnnxCompiler {
        let mut c = OnnxCompiler::new(self.model.segment(k, graph), self.options.clone());
        c.spec = c.spec.with_per_shape(per_shape);
        c
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

    pub(crate) fn lower(
        &self,
        input_dims: &[Vec<u64>],
        values: &[(usize, Vec<u8>)],
        backend: BackendKind,
    ) -> Result<Lowered, OnnxError> {
        self.check_precision()?;
        let mut graph = passes::specialise(&self.graph, input_dims, values, self.model.name())?;
        passes::conv_gemm::convs_as_gemms(&mut graph, self.options.conv);
        if self.options.precision.half().is_some() {
            passes::half_storage::half_only_activations(&mut graph);
        }
        let target = if backend == BackendKind::Host { Target::Host } else { Target::Gpu(backend) };
        let blas = (self.options.gemm == GemmEngine::BlasLt).then_some(BlasLowering {
            precision: self.options.precision.matmul(),
            workspace_bytes: if backend == BackendKind::Host { 0 } else { self.options.blas_workspace_bytes },
        });
        let fusion = self.options.fusion.then_some(Fusion {
            attention: self.options.attention,
            half: self.options.precision.half(),
            keep_fp32: &self.options.keep_fp32,
        });
        match crate::lower::lower(&graph, &self.weights, self.options.max_program_bytes, target, blas, fusion) {
            // A refusal names every node the GPU lowering cannot run, not only the first it met.
            Err(first @ OnnxError::UnsupportedOnBackend { .. }) if backend != BackendKind::Host => {
                let mut all = crate::lower::gpu_refusals(&graph, backend)?;
                if !all.iter().any(|e| same_node(e, &first)) {
                    all.insert(0, first);
                }
                Err(OnnxError::refused(all).expect("at least the first refusal"))
            }
            lowered => lowered,
        }
    }

    /// Lowers the model for `input_dims` on `backend` and returns its kernel counts (before and
    /// after fusion) and scratch bytes, for reports and benches. Compiles nothing.
    pub fn plan_summary(&self, input_dims: &[Vec<u64>], backend: BackendKind) -> Result<PlanSummary, OnnxError> {
        Ok(self.lower(input_dims, &[], backend)?.summary)
    }

    /// The CUDA/HIP C++ source generated for `input_dims` (the same text for every input shape of
    /// a model whose specialised graphs have the same structure). Compiles nothing.
    pub fn gpu_source(&self, input_dims: &[Vec<u64>]) -> Result<String, OnnxError> {
        Ok(self.source(&self.lower(input_dims, &[], BackendKind::Cuda)?).code)
    }

    /// The translation units [`Self::gpu_source`] is compiled as, `(name, text)` each (see
    /// `compiler/units.rs`), for compiling and timing one on its own. Compiles nothing.
    pub fn gpu_units(&self, input_dims: &[Vec<u64>]) -> Result<Vec<(String, String)>, OnnxError> {
        let lowered = self.lower(input_dims, &[], BackendKind::Cuda)?;
        let source = self.source(&lowered);
        Ok(self.units(&lowered, &source).into_iter().map(|u| (u.name, u.code)).collect())
    }

    /// How many generated CUDA/HIP sources this compiler has compiled: one per model, backend and
    /// device ordinal however many buckets (input shapes) were compiled, since every bucket's source
    /// is the same text (each compile runs the source's translation units concurrently).
    pub fn gpu_source_compiles(&self) -> usize {
        self.source_compiles.load(Ordering::Relaxed)
    }

    /// The translation units compiled for `lowered`: on GPUs the generated source split by
    /// [`crate::compiler::units`], on the host the plan source.
    pub(crate) fn units(&self, lowered: &Lowered, source: &KernelSource) -> Vec<KernelSource> {
        if lowered.definitions.iter().all(String::is_empty) {
            return vec![source.clone()];
        }
        let prelude = self.prelude(lowered);
        crate::compiler::units::split(
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
        let hash = source_hash(source);
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
        let codes = crate::compiler::units::compile_all(device, units)?;
        self.source_compiles.fetch_add(1, Ordering::Relaxed);
        compiled.push(Compiled { backend: B::KIND, ordinal, source_hash: hash, codes: codes.clone() });
        Ok(codes)
    }

    /// Parses artifact bytes and checks they were compiled from this model for `B`.
    pub(crate) fn parse_artifact<B: Backend>(&self, bytes: &[u8]) -> Result<StepArtifact, OnnxError> {
        let artifact = StepArtifact::parse(bytes, artifact::FORMAT).map_err(artifact::error)?;
        artifact.check_made_for(B::KIND, &self.model_hash).map_err(artifact::error)?;
        Ok(artifact)
    }

    /// Loads `artifact` for `request`, whose lowering is `lowered`.
    pub(crate) fn load_lowered<B: Backend>(
        &self,
        device: &B::Device,
        request: &CompileRequest<'_>,
        artifact: &StepArtifact,
        lowered: Lowered,
    ) -> Result<OnnxProgram<B>, OnnxError> {
        // One artifact serves every shape whose generated code is the same text (the shapes are kernel
        // arguments): the check is that this request's code is the artifact's.
        if source_hash(&self.source(&lowered)) != artifact.source_hash {
            return Err(OnnxError::Artifact {
                reason: format!(
                    "made for input shapes {:?}, whose code differs from that of {:?}",
                    artifact.input_dims, request.input_dims
                ),
            });
        }
        let plan = ProgramPlan {
            label: format!("saggar-onnx program `{}`", self.model.name()),
            steps: lowered.steps,
            kernels: lowered.kernels,
            output_dims: lowered.output_dims,
            input_bytes: lowered.input_bytes,
            output_bytes: lowered.output_bytes,
            scratch_bytes: lowered.scratch_bytes,
            local_constants: lowered.local_constants,
        };
        self.loader.load::<B>(device, artifact, plan, || &self.weights.bytes).map_err(|e| match e {
            LoadError::Artifact(e) => artifact::error(e),
            LoadError::Device(e) => OnnxError::Device(e),
        })
    }
}

impl StepCompiler for OnnxCompiler {
    type Error = OnnxError;

    fn segments(&self) -> Option<saggar_dispatch::Segments<Self>> {
        let split = self.split()?.clone();
        let source = |s: passes::segments::Source| match s {
            passes::segments::Source::Input(i) => SegmentSource::Input(i),
            passes::segments::Source::Output { segment, output } => SegmentSource::Output { segment, output },
        };
        let segments = split
            .segments
            .into_iter()
            .enumerate()
            .map(|(k, s)| Segment {
                compiler: Arc::new(self.segment_compiler(k, s.graph, s.repeat.is_some())),
                inputs: s.inputs.into_iter().map(source).collect(),
                repeat: s.repeat.map(|r| saggar_dispatch::Repeat {
                    name: r.name,
                    trip_count: r.trip_count.map(source),
                    cond: r.cond.map(source),
                    carried: r.carried,
                    max_iterations: self.options.max_loop_iterations,
                }),
            })
            .collect();
        Some(saggar_dispatch::Segments { segments, outputs: split.outputs.into_iter().map(source).collect() })
    }

    fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    fn code_identity(&self) -> CompilerIdentity {
        let identity =
            CompilerIdentity::new(COMPILER_NAME, env!("CARGO_PKG_VERSION"), ModelHash::from_digest(self.model_hash))
                .with_option("artifact", ARTIFACT_VERSION.to_string())
                .with_option("gemm", self.options.gemm.name().to_string())
                .with_option("conv", self.options.conv.name().to_string())
                .with_option("precision", self.options.precision.name().to_string())
                .with_option("blas_workspace", self.options.blas_workspace_bytes.to_string());
        let identity = match self.options.keep_fp32.is_empty() {
            true => identity,
            false => identity.with_option("keep_fp32", self.options.keep_fp32.join(",")),
        };
        let identity = match (&self.options.calibration, self.options.precision) {
            (Some(c), Precision::Int8) => identity.with_option("calibration", c.digest().to_string()),
            _ => identity,
        };
        // Unfused plans, and plans with one attention kernel forced, have other kernels: their
        // artifacts are keyed apart.
        match (self.options.fusion, self.options.attention) {
            (false, _) => identity.with_option("fusion", "off"),
            (true, AttentionKernel::Auto) => identity,
            (true, kernel) => identity.with_option("attention", kernel.name().to_string()),
        }
    }

    fn compile_steps<B: Backend>(
        &self,
        device: &B::Device,
        request: &CompileRequest<'_>,
    ) -> Result<Vec<u8>, OnnxError> {
        let lowered = self.lower(request.input_dims, request.input_values, B::KIND)?;
        let source = self.source(&lowered);
        let codes = if B::KIND == BackendKind::Host {
            vec![device.compile(&source)?]
        } else {
            self.compile_source::<B>(device, &source, &self.units(&lowered, &source))?
        };
        Ok(StepArtifact::for_request(B::KIND, self.model_hash, request, &source, codes).encode(artifact::FORMAT))
    }

    fn load_steps<B: Backend>(
        &self,
        device: &B::Device,
        request: &CompileRequest<'_>,
        artifact: &[u8],
    ) -> Result<OnnxProgram<B>, OnnxError> {
        let artifact = self.parse_artifact::<B>(artifact)?;
        let lowered = self.lower(request.input_dims, request.input_values, B::KIND)?;
        self.load_lowered(device, request, &artifact, lowered)
    }
}

/// Whether two refusals name the same node.
/// `model`'s graph with its weight products converted to the half type `options` ask for (`None`:
/// nothing to convert), or why the setting does not fit it.
fn convert_precision(model: &OnnxModel, options: &OnnxOptions) -> Result<Option<Graph>, String> {
    let keep = &options.keep_fp32;
    passes::precision::check_keep_list(model.graph(), keep, model.name()).map_err(|e| match e {
        OnnxError::Precision { reason, .. } => reason,
        other => other.to_string(),
    })?;
    if options.precision == Precision::Int8 {
        return calibrate_products(model, options);
    }
    let Some(half) = options.precision.half() else { return Ok(None) };
    let mut graph = model.graph().clone();
    passes::precision::convert_products(&mut graph, half, keep).map_err(|e| e.to_string())?;
    passes::half_outputs::half_results(&mut graph, half).map_err(|e| e.to_string())?;
    passes::reciprocals::reciprocal_divisions(&mut graph, keep).map_err(|e| e.to_string())?;
    Ok(Some(graph))
}

/// At `int8`: a QDQ model as it is (its products are `i8` already), an f32 model quantised from the
/// calibration data; an f32 model without it cannot be.
fn calibrate_products(model: &OnnxModel, options: &OnnxOptions) -> Result<Option<Graph>, String> {
    let quantised = model.graph().nodes.iter().any(|n| n.op_type == "Int8Product");
    match &options.calibration {
        None if quantised => Ok(None),
        None => Err("--precision int8 needs a QDQ-quantised model (onnxruntime.quantization.quantize_static) or \
                     calibration data: pass --calibration-inputs DIR (data sets of input_N.pb files, as \
                     --load-inputs reads), or in Rust OnnxOptions::with_calibration"
            .into()),
        Some(calibration) => {
            let (graph, count) = passes::calibrate::quantize_products(model, calibration.sets())
                .map_err(|e| format!("calibration: {e}"))?;
            if count == 0 && !quantised {
                return Err(
                    "--precision int8: the model has no weight product int8 can run (a MatMul or Gemm of an f32 \
                            activation and constant 2-D f32 weights with both extents multiples of 4, whose activation \
                            is not 0 on every calibration set)"
                        .into(),
                );
            }
            Ok(Some(graph))
        }
    }
}

/// The model inputs whose values fix programs: `graph`'s value inputs, or for a segmented model the
/// model inputs that are value inputs of some segment (a count a segment computes is not traced
/// back into the data it counts).
fn model_value_inputs(graph: &Graph, split: Option<&passes::segments::Split>) -> Vec<usize> {
    let Some(split) = split else {
        return passes::value_inputs::value_inputs(graph);
    };
    let mut found: Vec<usize> = split
        .segments
        .iter()
        .flat_map(|s| {
            let own = if s.repeat.is_some() { saggar_dispatch::Repeat::OWN_INPUTS } else { 0 };
            let keyed = passes::value_inputs::value_inputs(&s.graph).into_iter();
            keyed.filter_map(move |i| match s.inputs.get(i.checked_sub(own)?)? {
                passes::segments::Source::Input(m) => Some(*m),
                passes::segments::Source::Output { .. } => None,
            })
        })
        .collect();
    found.sort_unstable();
    found.dedup();
    found
}

fn same_node(a: &OnnxError, b: &OnnxError) -> bool {
    matches!((a, b), (OnnxError::UnsupportedOnBackend { node: x, .. }, OnnxError::UnsupportedOnBackend { node: y, .. }) if x == y)
}

/// A loaded program: one model at one input shape on one device, run by saggar-dispatch's step
/// runtime. It holds the device's constant buffer (shared with the device's other programs); drop a
/// program only after the work it enqueued has run.
pub type OnnxProgram<B> = StepProgram<B>;

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
            let lowered = c.lower(&dims, &[], BackendKind::Cuda).unwrap();
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
