//! Loading a planned program from an artifact's code objects: each kernel found in the code object
//! that declares it with the same signature, the modules loaded (once per GPU device and source),
//! the weights uploaded once per device, the program's own constants uploaded, and the BLAS-Lt
//! handle of its matmuls made ready.

use std::collections::HashMap;
use std::sync::Arc;

use saggar_device::blas::BlasConfig;
use saggar_device::{
    Backend, BackendKind, Blas as _, CodeObject, Device as _, DeviceBuffer as _, Module as _, Stream as _,
};

use super::artifact::{ArtifactError, StepArtifact};
use super::plan::{PlanStep, ProgramPlan};
use super::program::{LoadedStep, StepProgram};
use crate::resident::{DeviceMap, PerDevice};

/// Why a program does not load. Exhaustive on purpose: a load fails on what the artifact holds or on
/// the device, and a compiler reports the two apart.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The artifact does not hold what the plan launches.
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
    /// A device operation failed (loading a module, uploading, preparing a matmul).
    #[error(transparent)]
    Device(#[from] saggar_device::Error),
}

/// What a step-program compiler keeps across its loads, so the programs of one device share it:
/// the weights (uploaded once per device, [`PerDevice`]), the modules of each source (loaded once
/// per GPU device and translation unit) and a BLAS-Lt handle per GPU device.
///
/// On the host backend modules and BLAS handles are made per program: host devices of one ordinal
/// may be distinct simulated devices.
///
/// # Thread safety
/// `Send + Sync`: loads on several threads share one upload, module and handle per device (the
/// first load makes each under a lock).
#[derive(Debug)]
pub struct ProgramLoader {
    weights_offset: usize,
    weights: PerDevice,
    modules: DeviceMap<([u8; 32], usize)>,
    blas: DeviceMap<()>,
    blas_config: BlasConfig,
}

impl ProgramLoader {
    /// A loader whose weight bytes start `weights_offset` bytes into each device's weight buffer
    /// ([`super::ArgSource::Weights`] offsets count from there). The first
    /// [`crate::resident::MARKER_LEN`] bytes of the buffer hold its residency marker: the offset
    /// is at least that, or the weight bytes leave that much room at their start.
    pub fn new(weights_offset: usize) -> ProgramLoader {
        ProgramLoader {
            weights_offset,
            weights: PerDevice::new(),
            modules: DeviceMap::default(),
            blas: DeviceMap::default(),
            blas_config: BlasConfig::default(),
        }
    }

    /// The same loader making BLAS-Lt handles with `config`.
    pub fn with_blas(mut self, config: BlasConfig) -> ProgramLoader {
        self.blas_config = config;
        self
    }

    /// Loads `plan` on `device` from `artifact`'s code objects: every kernel of the plan must be
    /// declared with the same signature by one of them ([`ArtifactError::CodeObject`] otherwise).
    /// `weights` gives the weight bytes if this device does not hold them yet. The artifact's own
    /// checks ([`StepArtifact::check_made_for`], the request) are the compiler's, before this.
    pub fn load<'w, B: Backend>(
        &self,
        device: &B::Device,
        artifact: &StepArtifact,
        plan: ProgramPlan,
        weights: impl FnOnce() -> &'w [u8],
    ) -> Result<StepProgram<B>, LoadError> {
        let mut unit_of: HashMap<&str, usize> = HashMap::with_capacity(plan.kernels.len());
        for signature in &plan.kernels {
            let unit = artifact.codes.iter().position(|c| c.signature(&signature.name) == Some(signature));
            let unit = unit.ok_or_else(|| ArtifactError::CodeObject {
                reason: format!("kernel `{}` is missing or has another signature", signature.name),
            })?;
            unit_of.insert(&signature.name, unit);
        }
        let modules = artifact
            .codes
            .iter()
            .enumerate()
            .map(|(unit, code)| self.module::<B>(device, &artifact.source_hash, unit, code))
            .collect::<Result<Vec<_>, _>>()?;
        let steps = plan
            .steps
            .into_iter()
            .map(|step| match step {
                PlanStep::Launch(launch) => {
                    let unit = unit_of.get(launch.kernel.as_str()).copied().ok_or_else(|| {
                        ArtifactError::CodeObject { reason: format!("kernel `{}` is in no code object", launch.kernel) }
                    })?;
                    let kernel = modules[unit].kernel(&launch.kernel)?;
                    Ok(LoadedStep::Launch { kernel, args: launch.args, config: launch.config })
                }
                PlanStep::Matmul(m) => Ok(LoadedStep::Matmul(m)),
            })
            .collect::<Result<Vec<_>, LoadError>>()?;
        let blas = self.blas::<B>(device, &steps)?;
        let weights = self.weights.get_or_upload::<B>(device, self.weights_offset, weights)?;
        let local = if plan.local_constants.is_empty() {
            None
        } else {
            let buffer = device.alloc(plan.local_constants.len())?;
            let stream = device.create_stream()?;
            stream.upload(&plan.local_constants, buffer.as_slice())?;
            stream.synchronize()?;
            Some(buffer)
        };
        Ok(StepProgram {
            label: plan.label,
            output_dims: plan.output_dims,
            input_bytes: plan.input_bytes,
            output_bytes: plan.output_bytes,
            scratch_bytes: plan.scratch_bytes,
            steps,
            weights,
            local,
            blas,
            _modules: modules,
        })
    }

    /// The module of code object `unit` of the source hashing to `source_hash`: on a GPU the one an
    /// earlier load of this device made (the driver would otherwise load the same code per bucket).
    fn module<B: Backend>(
        &self,
        device: &B::Device,
        source_hash: &[u8; 32],
        unit: usize,
        code: &CodeObject,
    ) -> saggar_device::Result<Arc<B::Module>> {
        if B::KIND == BackendKind::Host {
            return Ok(Arc::new(device.load_module(code)?));
        }
        self.modules.get_or_make::<B, _, _>(device, (*source_hash, unit), |_| true, || device.load_module(code))
    }

    /// The BLAS-Lt handle the matmul steps run on, every description prepared (`None` when there are
    /// none): on a GPU the device's shared handle (each run passes its own workspace).
    fn blas<B: Backend>(
        &self,
        device: &B::Device,
        steps: &[LoadedStep<B>],
    ) -> saggar_device::Result<Option<Arc<B::Blas>>> {
        let mut descs = steps.iter().filter_map(|s| match s {
            LoadedStep::Matmul(m) => Some(&m.desc),
            LoadedStep::Launch { .. } => None,
        });
        let Some(first) = descs.next() else { return Ok(None) };
        let blas = if B::KIND == BackendKind::Host {
            Arc::new(device.create_blas(&self.blas_config)?)
        } else {
            self.blas.get_or_make::<B, _, _>(device, (), |_| true, || device.create_blas(&self.blas_config))?
        };
        for desc in std::iter::once(first).chain(descs) {
            blas.prepare(desc)?;
        }
        Ok(Some(blas))
    }
}
