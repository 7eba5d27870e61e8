//! [`Emitter`]: collects a plan's steps, the kernels they launch (each distinct kernel once, with its
//! C++ definition on GPUs) and the program's own constants (`meta` tables, per-shape constants).

use saggar_device::KernelSignature;

use crate::ops::gpu::{GpuKernel, Work, kernel_definition, kernel_signature};
use crate::plan::launch::launch_config;
use crate::plan::memory::pack;
use crate::plan::{ArgSource, LaunchStep, PlanStep};

/// Kernels and launches being collected.
#[derive(Default)]
pub(crate) struct Emitter {
    pub(crate) steps: Vec<PlanStep>,
    kernels: Vec<KernelSignature>,
    definitions: Vec<String>,
    local_constants: Vec<u8>,
}

impl Emitter {
    /// Adds `signature` (with its C++ `definition` on GPUs) unless a kernel of that name is there;
    /// returns the name.
    pub(crate) fn kernel(&mut self, signature: KernelSignature, definition: Option<String>) -> String {
        let name = signature.name.clone();
        if !self.kernels.iter().any(|k| k.name == name) {
            self.kernels.push(signature);
            self.definitions.push(definition.unwrap_or_default());
        }
        name
    }

    /// Places `bytes` in the program's own constants.
    pub(crate) fn constant(&mut self, bytes: &[u8]) -> ArgSource {
        ArgSource::Local(pack(&mut self.local_constants, bytes))
    }

    /// Places a meta table in the program's constants.
    pub(crate) fn meta(&mut self, meta: &[i64]) -> ArgSource {
        let bytes: Vec<u8> = meta.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.constant(&bytes)
    }

    /// Bytes of the program's own constants so far.
    pub(crate) fn constant_bytes(&self) -> usize {
        self.local_constants.len()
    }

    /// The steps, the kernels with their definitions (empty on the host), and the program's
    /// constants.
    pub(crate) fn into_parts(self) -> (Vec<PlanStep>, Vec<KernelSignature>, Vec<String>, Vec<u8>) {
        (self.steps, self.kernels, self.definitions, self.local_constants)
    }

    /// Emits one launch of `kernel` with its `meta` table and tensor `pointers`.
    pub(crate) fn gpu_launch(&mut self, kernel: &dyn GpuKernel, meta: &[i64], work: Work, pointers: Vec<ArgSource>) {
        let (name, text) = kernel_definition(kernel);
        let name = self.kernel(kernel_signature(&name, pointers.len()), Some(text));
        let mut args = vec![self.meta(meta)];
        args.extend(pointers);
        self.steps.push(PlanStep::Launch(LaunchStep { kernel: name, args, config: launch_config(work) }));
    }
}
