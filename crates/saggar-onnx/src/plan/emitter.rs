//! [`Emitter`]: collects a plan's steps, the kernels they launch (each distinct kernel once, with its
//! C++ definition on GPUs) and the program's own constants (`meta` tables, per-shape constants).
//!
//! Every GPU kernel's first statement is `SAGGAR_GRID_DEPENDENCY()` (saggar-device's builtin prelude): it waits for the
//! kernel before it, so its launches are programmatic ([`saggar_device::LaunchConfig::programmatic`])
//! and start while that kernel finishes. A definition whose body the emitter cannot find keeps
//! ordinary launches.

use std::collections::HashSet;

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
    /// The kernels whose definition starts with the grid dependency wait.
    waiting: HashSet<String>,
    local_constants: Vec<u8>,
}

impl Emitter {
    /// Adds `signature` (with its C++ `definition` on GPUs) unless a kernel of that name is there;
    /// returns the name.
    pub(crate) fn kernel(&mut self, signature: KernelSignature, definition: Option<String>) -> String {
        let name = signature.name.clone();
        if !self.kernels.iter().any(|k| k.name == name) {
            let definition = definition.unwrap_or_default();
            let definition = match waiting_at_entry(&definition, &name) {
                Some(waits) => {
                    self.waiting.insert(name.clone());
                    waits
                }
                None => definition,
            };
            self.kernels.push(signature);
            self.definitions.push(definition);
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
    /// The launches of kernels that wait for the kernel before them are programmatic.
    pub(crate) fn into_parts(mut self) -> (Vec<PlanStep>, Vec<KernelSignature>, Vec<String>, Vec<u8>) {
        for step in &mut self.steps {
            if let PlanStep::Launch(launch) = step {
                launch.config.programmatic = self.waiting.contains(&launch.kernel);
            }
        }
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

/// `definition` with `SAGGAR_GRID_DEPENDENCY();` as the first statement of kernel `name`: the body
/// opened by the first `{` outside comments after `SAGGAR_GLOBAL void [ONNX_BOUNDS(..)] name`.
/// `None` when there is no such kernel in the text (a host kernel has none).
fn waiting_at_entry(definition: &str, name: &str) -> Option<String> {
    let global = definition.find("SAGGAR_GLOBAL void ")?;
    let head = global + definition[global..].find(name)? + name.len();
    let bytes = definition.as_bytes();
    let mut at = head;
    while at < bytes.len() {
        match bytes[at] {
            b'{' => {
                let mut text = definition.to_string();
                text.insert_str(at + 1, "\n  SAGGAR_GRID_DEPENDENCY();");
                return Some(text);
            }
            b'/' if bytes.get(at + 1) == Some(&b'/') => at += definition[at..].find('\n')?,
            b'/' if bytes.get(at + 1) == Some(&b'*') => at += definition[at..].find("*/")? + 1,
            _ => {}
        }
        at += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kernel_waits_first_and_launches_programmatically() {
        let text = "__device__ float onnx_k_v(float a) { return a; }\nSAGGAR_GLOBAL void ONNX_BOUNDS(128, 4) onnx_k\n\
                    // a comment with { and (parens)\n/* { */ (const onnx_i64* meta, float* out) {\n  out[0] = 1.0f;\n}\n";
        let waits = waiting_at_entry(text, "onnx_k").unwrap();
        assert!(waits.contains("float* out) {\n  SAGGAR_GRID_DEPENDENCY();\n  out[0] = 1.0f;"), "{waits}");
        assert!(
            waits.starts_with("__device__ float onnx_k_v(float a) { return a; }"),
            "the helper is untouched: {waits}"
        );
        assert_eq!(waiting_at_entry("// host", "onnx_k"), None);

        let mut emit = Emitter::default();
        let gpu = emit.kernel(KernelSignature::new("onnx_k", &[]), Some(text.to_string()));
        let host = emit.kernel(KernelSignature::new("host_k", &[]), None);
        for kernel in [gpu, host] {
            let config = launch_config(Work::Elements(8));
            emit.steps.push(PlanStep::Launch(LaunchStep { kernel, args: Vec::new(), config }));
        }
        let (steps, _, definitions, _) = emit.into_parts();
        let programmatic: Vec<bool> = steps
            .iter()
            .map(|s| match s {
                PlanStep::Launch(l) => l.config.programmatic,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(programmatic, [true, false], "only the kernel that waits");
        assert!(definitions[0].contains("SAGGAR_GRID_DEPENDENCY();"));
    }
}
