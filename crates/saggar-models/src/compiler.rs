//! The reference compiler: [`ReferenceCompiler`] is a saggar-dispatch [`StepCompiler`], which makes
//! it a `ProgramCompiler` for every backend.
//!
//! - On CUDA and HIP, `ProgramCompiler::compile` generates C++ for the model whose kernels take the
//!   batch as an argument ([`crate::codegen`]) and compiles it with NVRTC or hipRTC through
//!   [`Device::compile`]: one artifact serves every bucket (the compiler declares
//!   `CompilerCapabilities::one_artifact_per_model` there), loaded once per bucket with that
//!   bucket's plan.
//! - On the host backend it makes a plan of host kernels ([`crate::host_kernels`], registered once per
//!   process) and "compiles" that, which checks every kernel is registered.
//!
//! Either way the artifact is saggar-dispatch's step-program container holding the code object
//! ([`crate::artifact`]). Weights are not in the artifact: `ProgramCompiler::load` plans the
//! request again and hands the plan to saggar-dispatch's
//! [`ProgramLoader`], which uploads the weights once per device (shared by the programs, the
//! buckets, of that device) and returns the [`StepProgram`] (a [`ModelProgram`]).
//!
//! # Which device holds the weights
//! The loader keeps one weight buffer per device: two handles with the same ordinal are not always
//! the same device (each host-backend `open` makes an independent simulated device), so each upload
//! carries a residency marker read back on reuse; programs still holding a replaced buffer keep it
//! alive. On CUDA and HIP the programs of a device also share the module of the model's source.

use std::sync::OnceLock;

use saggar_device::{Backend, BackendKind, Device as _, KernelSource};
use saggar_dispatch::steps::{PlanStep, ProgramLoader, ProgramPlan, StepArtifact, StepCompiler, StepProgram};
use saggar_dispatch::{CompileRequest, CompilerIdentity, ModelHash, ModelSpec};

use crate::artifact::{ARTIFACT_FORMAT, ARTIFACT_VERSION, ArtifactHeader};
use crate::codegen;
use crate::config::{MAX_BATCH, ModelConfig};
use crate::error::{ArtifactError, ModelError};
use crate::host_kernels;
use crate::plan::{self, GemmVariant, Target, WeightLayout, WeightPacking};
use crate::weights::Weights;

/// The compiler's name in its identity.
pub const COMPILER_NAME: &str = "saggar-models";

/// Compiles one model (config + weights) for any backend. See the module docs.
///
/// # Thread safety
/// `Send + Sync`. `compile` and `load` may be called from several threads; loads on the same device
/// share one weight upload (the first load uploads, under a lock, the others reuse it).
pub struct ReferenceCompiler {
    config: ModelConfig,
    weights: Weights,
    spec: ModelSpec,
    model_hash: ModelHash,
    config_hash: [u8; 32],
    gemm: GemmVariant,
    /// The weights as GPU kernels read them (row-major layers).
    row_major_weights: Vec<u8>,
    /// The weights as host kernels read them (panel-packed layers), made on first use.
    panel_weights: OnceLock<Vec<u8>>,
    /// Loads programs, sharing each device's weights (which start at offset 0 of its buffer: the
    /// layout leaves room for the residency marker).
    loader: ProgramLoader,
}

impl std::fmt::Debug for ReferenceCompiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReferenceCompiler")
            .field("model", &self.config.name())
            .field("kind", &self.config.kind())
            .field("model_hash", &self.model_hash)
            .field("gemm", &self.gemm)
            .field("weight_bytes", &self.row_major_weights.len())
            .finish_non_exhaustive()
    }
}

impl ReferenceCompiler {
    /// A compiler for `config` with `weights`, which must match it. GEMM variant: split-K.
    pub fn new(config: ModelConfig, weights: Weights) -> Result<ReferenceCompiler, ModelError> {
        config.validate()?;
        weights.check(&config)?;
        let row_major_weights = WeightLayout::new(&config, WeightPacking::RowMajor).pack(&config, &weights);
        Ok(ReferenceCompiler {
            spec: config.model_spec(),
            model_hash: ModelHash::from_digest(weights.model_digest(&config)),
            config_hash: config.config_hash(),
            gemm: GemmVariant::default(),
            row_major_weights,
            panel_weights: OnceLock::new(),
            loader: ProgramLoader::new(0),
            config,
            weights,
        })
    }

    /// A compiler for `config` with the weights its `weights` field names (seed or safetensors file).
    pub fn from_config(config: ModelConfig) -> Result<ReferenceCompiler, ModelError> {
        let weights = Weights::for_config(&config)?;
        ReferenceCompiler::new(config, weights)
    }

    /// The same compiler with another GEMM variant for GPU code (it changes the identity).
    pub fn with_gemm(mut self, gemm: GemmVariant) -> ReferenceCompiler {
        self.gemm = gemm;
        self
    }

    /// The model config.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The weights.
    pub fn weights(&self) -> &Weights {
        &self.weights
    }

    /// The GEMM variant of GPU code.
    pub fn gemm(&self) -> GemmVariant {
        self.gemm
    }

    /// BLAKE3 of the canonical config JSON and the weights, hex (see [`Weights::model_hash`]).
    pub fn model_hash(&self) -> &str {
        self.model_hash.as_str()
    }

    /// Scratch bytes a program for `batch` rows on `backend` needs, or `None` for a batch outside
    /// `1..=MAX_BATCH`.
    pub fn scratch_bytes(&self, batch: usize, backend: BackendKind) -> Option<usize> {
        if batch == 0 || batch as u64 > MAX_BATCH {
            return None;
        }
        Some(plan::plan(&self.config, batch, self.target(backend, self.gemm)).scratch_bytes)
    }

    fn target(&self, backend: BackendKind, gemm: GemmVariant) -> Target {
        match backend {
            BackendKind::Host => Target::Host,
            BackendKind::Cuda | BackendKind::Hip => Target::Gpu(gemm),
        }
    }

    fn ensure_host_kernels(&self) -> Result<(), saggar_device::Error> {
        let arity = match &self.config {
            ModelConfig::Recsys(c) => Some((c.dense_inputs, c.sparse_inputs)),
            ModelConfig::Mlp(_) => None,
        };
        host_kernels::ensure_registered(arity)
    }

    /// Checks input dimensions (and the bucket) against the model; returns the batch.
    fn check_dims(&self, input_dims: &[Vec<u64>], bucket: Option<u64>) -> Result<usize, ModelError> {
        let err = |reason: String| ModelError::Request { model: self.config.name().to_string(), reason };
        let specs = &self.spec.inputs;
        if input_dims.len() != specs.len() {
            return Err(err(format!("{} input shapes given, the model has {} inputs", input_dims.len(), specs.len())));
        }
        let batch = input_dims.first().and_then(|d| d.first()).copied().unwrap_or(0);
        let expected = self.config.input_dims(batch);
        for ((spec, dims), want) in specs.iter().zip(input_dims).zip(&expected) {
            if dims != want {
                return Err(err(format!(
                    "input `{}` has dimensions {dims:?}, expected {want:?} (every input must have the same batch)",
                    spec.name()
                )));
            }
        }
        if batch == 0 || batch > MAX_BATCH {
            return Err(err(format!("batch {batch} is outside 1..={MAX_BATCH}")));
        }
        if let Some(bucket) = bucket
            && bucket != batch
        {
            return Err(err(format!("bucket {bucket} differs from the inputs' batch {batch}")));
        }
        Ok(batch as usize)
    }

    /// The weights as `backend`'s kernels read them.
    fn weight_bytes(&self, backend: BackendKind) -> &[u8] {
        match WeightPacking::for_target(self.target(backend, self.gemm)) {
            WeightPacking::RowMajor => &self.row_major_weights,
            WeightPacking::Panels => self.panel_weights.get_or_init(|| {
                WeightLayout::new(&self.config, WeightPacking::Panels).pack(&self.config, &self.weights)
            }),
        }
    }
}

impl StepCompiler for ReferenceCompiler {
    type Error = ModelError;

    fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    fn code_identity(&self) -> CompilerIdentity {
        CompilerIdentity::new(COMPILER_NAME, env!("CARGO_PKG_VERSION"), self.model_hash.clone())
            .with_option("gemm", self.gemm.name())
            .with_option("artifact", ARTIFACT_VERSION.to_string())
    }

    fn compile_steps<B: Backend>(
        &self,
        device: &B::Device,
        request: &CompileRequest<'_>,
    ) -> Result<Vec<u8>, ModelError> {
        let batch = self.check_dims(request.input_dims, request.bucket)?;
        let source = match B::KIND {
            BackendKind::Host => {
                self.ensure_host_kernels()?;
                let plan = plan::plan(&self.config, batch, Target::Host);
                let description = format!(
                    "saggar-models host plan: model `{}`, batch {batch}, {} launches",
                    self.config.name(),
                    plan.steps.len()
                );
                KernelSource::new(
                    format!("saggar_models_{}_b{batch}.plan", self.config.kind()),
                    description,
                    plan.kernels,
                )
            }
            BackendKind::Cuda | BackendKind::Hip => codegen::gpu_source(&self.config, self.gemm),
        };
        let code = device.compile(&source)?;
        let mut artifact = StepArtifact::for_request(B::KIND, self.config_hash, request, &source, vec![code]);
        artifact.fields = ArtifactHeader::fields(self.gemm, batch as u64);
        Ok(artifact.encode(ARTIFACT_FORMAT))
    }

    fn load_steps<B: Backend>(
        &self,
        device: &B::Device,
        request: &CompileRequest<'_>,
        artifact: &[u8],
    ) -> Result<ModelProgram<B>, ModelError> {
        let artifact = StepArtifact::parse(artifact, ARTIFACT_FORMAT)?;
        let header = ArtifactHeader::of(&artifact)?;
        artifact.check_made_for(B::KIND, &self.config_hash)?;
        let header_batch = self
            .check_dims(&header.input_dims, header.bucket)
            .map_err(|e| ArtifactError::Malformed { reason: format!("input dimensions do not fit the model: {e}") })?;
        if header.batch != header_batch as u64 {
            return Err(ArtifactError::Malformed {
                reason: format!("batch {} differs from the input dimensions' batch {header_batch}", header.batch),
            }
            .into());
        }
        // A host plan is the request's alone; GPU code serves every batch, and the request's own
        // dimensions make its plan.
        let batch = if B::KIND == BackendKind::Host {
            if header.input_dims != request.input_dims || header.bucket != request.bucket {
                let describe = |dims: &[Vec<u64>], bucket: Option<u64>| format!("inputs {dims:?} (bucket {bucket:?})");
                return Err(ArtifactError::RequestMismatch {
                    artifact: describe(&header.input_dims, header.bucket),
                    requested: describe(request.input_dims, request.bucket),
                }
                .into());
            }
            self.ensure_host_kernels()?;
            header_batch
        } else {
            self.check_dims(request.input_dims, request.bucket)?
        };
        let plan = plan::plan(&self.config, batch, self.target(B::KIND, header.gemm));
        let row_bytes = |rows: Vec<usize>| rows.into_iter().map(|r| r * batch).collect::<Vec<_>>();
        let plan = ProgramPlan {
            label: format!("saggar-models program `{}` (batch {batch})", self.config.name()),
            steps: plan.steps.into_iter().map(PlanStep::Launch).collect(),
            kernels: plan.kernels,
            output_dims: self.config.output_dims(batch as u64),
            input_bytes: row_bytes(self.config.input_row_bytes()),
            output_bytes: row_bytes(self.config.output_row_bytes()),
            scratch_bytes: plan.scratch_bytes,
            local_constants: Vec::new(),
        };
        Ok(self.loader.load::<B>(device, &artifact, plan, || self.weight_bytes(B::KIND))?)
    }
}

/// A loaded program: one model at one batch on one device, a saggar-dispatch [`StepProgram`] (which
/// checks the bindings on every launch). It holds the device's weight buffer (shared with the
/// device's other programs), so the weights stay allocated while any program lives; drop a program
/// only after the work it enqueued has run.
pub type ModelProgram<B> = StepProgram<B>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiler_and_program_are_send_sync_static() {
        fn check<T: Send + Sync + 'static>() {}
        check::<ReferenceCompiler>();
        check::<ModelProgram<saggar_device::host::HostBackend>>();
    }
}
