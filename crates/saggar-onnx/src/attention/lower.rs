//! Lowering of an attention group: one launch of the fused kernel (GPU) or of the host kernel
//! running the same algorithm, with the operands' locations from the memory plan.

use std::collections::HashMap;

use saggar_device::Dim3;

use super::Attention;
use super::kernel::{self, HostAttention};
use crate::error::OnnxError;
use crate::fusion::operand;
use crate::gpu_codegen::{self, BLOCK};
use crate::ir::{Graph, ValueId};
use crate::lowering::{ArgSource, Emitter, PlanStep, Step, Target, host_config, launch_config};
use crate::ops::gpu::{Work, numel};

/// Emits the one launch of an attention group.
pub(crate) fn emit(
    graph: &Graph,
    a: &Attention,
    location: &HashMap<ValueId, ArgSource>,
    target: Target,
    emit: &mut Emitter,
) -> Result<(), OnnxError> {
    let inputs = a.inputs();
    let at = |id: &ValueId| {
        location.get(id).copied().ok_or_else(|| OnnxError::Graph {
            reason: format!("attention operand `{}` has no location", graph.value(*id).name),
        })
    };
    let mut args = inputs.iter().map(at).collect::<Result<Vec<_>, _>>()?;
    args.push(at(&a.out.value)?);
    let elements = |id: ValueId| operand(graph, id).map(|o| numel(&o.dims) as usize);
    match target {
        Target::Host => {
            let kernel = HostAttention {
                meta: a.meta(),
                mask: a.mask.is_some(),
                nan_to_zero: a.nan_to_zero,
                lens: inputs.iter().map(|&id| elements(id)).collect::<Result<_, _>>()?,
                out_len: elements(a.out.value)?,
            };
            kernel.ensure_registered()?;
            let name = emit.kernel(kernel.signature(), None);
            emit.steps.push(PlanStep::Launch(Step { kernel: name, args, config: host_config() }));
        }
        Target::Gpu(_) => {
            let (name, text) = kernel::gpu_kernel(a.mask.is_some(), a.nan_to_zero);
            let name = emit.kernel(gpu_codegen::signature(&name, args.len()), Some(text));
            let rows = a.batch.iter().map(|&b| b as u64).product::<u64>() * a.sq as u64;
            let mut all = vec![emit.meta(&a.meta())];
            all.extend(args);
            // One key per thread per chunk: fewer keys than a block need a smaller (power-of-two) block.
            let mut config = launch_config(Work::Rows(rows));
            config.block = Dim3::x((a.sk.next_power_of_two() as u32).clamp(32, BLOCK));
            emit.steps.push(PlanStep::Launch(Step { kernel: name, args: all, config }));
        }
    }
    Ok(())
}
