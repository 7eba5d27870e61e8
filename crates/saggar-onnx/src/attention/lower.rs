//! Lowering of an attention group: one launch of a fused kernel (GPU: the tiled or the row kernel,
//! [`choose`]) or of the host kernel running the same algorithm, with the operands' locations from
//! the memory plan.

use std::collections::HashMap;

use saggar_device::{Dim3, LaunchConfig};

use super::Attention;
use super::kernel::{self, HostAttention, TILED_MIN_TILES, TILED_THREADS};
use crate::compiler::AttentionKernel;
use crate::error::OnnxError;
use crate::fusion::operand;
use crate::gpu_codegen::{self, BLOCK};
use crate::ir::{Graph, ValueId};
use crate::lowering::{ArgSource, Emitter, PlanStep, Step, Target, host_config, launch_config};
use crate::ops::gpu::{Work, numel};

/// Tiles of the tiled kernel for `a`: batch positions × query tiles.
fn tiles(a: &Attention) -> u64 {
    let (rows, _) = kernel::tile_shape(a.d.max(a.dv));
    a.batch.iter().map(|&b| b as u64).product::<u64>() * a.sq.div_ceil(rows) as u64
}

/// Whether `a` runs the tiled kernel: as asked, or under [`AttentionKernel::Auto`] when it has at
/// least [`TILED_MIN_TILES`] tiles.
pub(crate) fn choose(a: &Attention, kernel: AttentionKernel) -> bool {
    match kernel {
        AttentionKernel::Auto => tiles(a) >= TILED_MIN_TILES,
        AttentionKernel::Rows => false,
        AttentionKernel::Tiled => true,
    }
}

/// Emits the one launch of an attention group. Under [`AttentionKernel::Auto`] both GPU kernels are
/// defined whichever one this shape launches, so every bucket of a model has the same source.
pub(crate) fn emit(
    graph: &Graph,
    a: &Attention,
    location: &HashMap<ValueId, ArgSource>,
    target: Target,
    choice: AttentionKernel,
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
            let tiled = choose(a, choice);
            let tiled_kernel = kernel::gpu_tiled_kernel(a.mask.is_some(), a.nan_to_zero, a.d, a.dv);
            let row_kernel = kernel::gpu_kernel(a.mask.is_some(), a.nan_to_zero);
            let name = if tiled { tiled_kernel.0.clone() } else { row_kernel.0.clone() };
            for ((kernel, text), defined) in
                [(tiled_kernel, choice != AttentionKernel::Rows), (row_kernel, choice != AttentionKernel::Tiled)]
            {
                if defined {
                    emit.kernel(gpu_codegen::signature(&kernel, args.len()), Some(text));
                }
            }
            let config = if tiled {
                LaunchConfig { block: Dim3::x(TILED_THREADS), ..launch_config(Work::Rows(tiles(a))) }
            } else {
                let rows = a.batch.iter().map(|&b| b as u64).product::<u64>() * a.sq as u64;
                // One key per thread per chunk: fewer keys than a block need a smaller
                // (power-of-two) block.
                let block = (a.sk.next_power_of_two() as u32).clamp(32, BLOCK);
                LaunchConfig { block: Dim3::x(block), ..launch_config(Work::Rows(rows)) }
            };
            let mut all = vec![emit.meta(&a.meta())];
            all.extend(args);
            emit.steps.push(PlanStep::Launch(Step { kernel: name, args: all, config }));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use saggar_device::BackendKind;

    use crate::lowering::PlanStep;
    use crate::synthetic::{AttentionConfig, attention_block};
    use crate::{AttentionKernel, ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions};

    fn compiler(kernel: AttentionKernel) -> OnnxCompiler {
        let cfg = AttentionConfig {
            heads: 4,
            head_dim: 64,
            div_scale: true,
            mask: true,
            nan_guard: false,
            scores_output: false,
        };
        let model =
            OnnxModel::from_bytes(&attention_block(cfg).to_bytes(), "attention", &ImportLimits::default()).unwrap();
        OnnxCompiler::new(model, OnnxOptions::default().with_attention(kernel))
    }

    /// The attention launch of the CUDA plan at `batch` (sequence 128): its kernel and threads.
    fn attention_launch(c: &OnnxCompiler, batch: u64) -> (String, u32) {
        let dims = vec![vec![batch, 128, 256], vec![batch, 1, 1, 128]];
        let lowered = c.lower(&dims, BackendKind::Cuda).unwrap();
        let launches: Vec<_> = lowered
            .steps
            .iter()
            .filter_map(|s| match s {
                PlanStep::Launch(l) if l.kernel.starts_with("onnx_attention") => {
                    Some((l.kernel.clone(), l.config.block.x))
                }
                _ => None,
            })
            .collect();
        assert_eq!(launches.len(), 1, "{launches:?}");
        launches[0].clone()
    }

    #[test]
    fn auto_runs_the_row_kernel_at_small_batches_and_the_tiled_one_at_large_from_one_source() {
        let auto = compiler(AttentionKernel::Auto);
        // 4 heads x 2 query tiles per batch position: 8 tiles at batch 1, 512 at batch 64.
        let (small, small_threads) = attention_launch(&auto, 1);
        let (large, large_threads) = attention_launch(&auto, 64);
        assert!(small.starts_with("onnx_attention_") && !small.starts_with("onnx_attention_tiled"), "{small}");
        assert_eq!(small_threads, 128, "one key per thread, 128 keys");
        assert!(large.starts_with("onnx_attention_tiled_"), "{large}");
        assert_eq!(large_threads, super::TILED_THREADS);
        let source = |batch: u64| auto.gpu_source(&[vec![batch, 128, 256], vec![batch, 1, 1, 128]]).unwrap();
        let one = source(1);
        assert_eq!(one, source(64), "every bucket compiles the same source");
        assert!(one.contains(&small) && one.contains(&large));
        // Forced, each bucket launches the one kernel asked for, and only it is generated.
        for (kernel, prefix) in
            [(AttentionKernel::Rows, "onnx_attention_"), (AttentionKernel::Tiled, "onnx_attention_tiled_")]
        {
            let c = compiler(kernel);
            for batch in [1, 64] {
                let (name, _) = attention_launch(&c, batch);
                assert!(name.starts_with(prefix), "{kernel:?} batch {batch}: {name}");
            }
            let source = c.gpu_source(&[vec![1, 128, 256], vec![1, 1, 1, 128]]).unwrap();
            assert_eq!(source.contains("onnx_attention_tiled_"), kernel == AttentionKernel::Tiled);
        }
    }

    #[test]
    fn tile_shapes_keep_shared_memory_under_48_kib_for_every_head_size() {
        for head in 1..=super::super::MAX_HEAD {
            let (rows, keys) = super::kernel::tile_shape(head);
            assert_eq!((rows % 16, keys % 8), (0, 0), "16 row groups by 8 lanes");
            let floats = head * (rows + 1) + head * (keys + 1) + keys * head + rows * (keys + 1) + 3 * rows;
            assert!(floats * 4 <= 48 << 10, "head {head}: {} bytes", floats * 4);
        }
    }
}
