//! Lowering of an attention group: one launch of a fused kernel (GPU: the tensor-core kernel for
//! half precisions, [`half_tiles`]; in f32 the tiled or the row kernel, [`choose`]) or of the host kernel running the same algorithm, with the operands' locations from
//! the memory plan.

use std::collections::HashMap;

use saggar_device::{Dim3, LaunchConfig};
use saggar_shape::DType;

use super::Attention;
use super::kernel::{
    self, Form, HostAttention, MMA_MAX_HEAD, MMA_ROW_WARPS, MMA_SPLIT_MAX_HEAD, MmaBlock, TILED_FILL_TILES,
    TILED_MIN_TILES, TILED_THREADS,
};
use crate::error::OnnxError;
use crate::fuse::attention::AttentionKernel;
use crate::graph::ir::{Graph, ValueId};
use crate::ops::gpu::{BLOCK, kernel_signature};
use crate::ops::gpu::{Work, numel};
use crate::plan::emitter::Emitter;
use crate::plan::launch::{host_config, launch_config};
use crate::plan::nodes::operand;
use crate::plan::{ArgSource, LaunchStep, PlanStep, Target};

/// `at` moved `offset` elements of `dtype` on, where the memory is the plan's own (scratch, weights,
/// the program's constants); a binding only at its start.
fn starting_at(at: ArgSource, offset: i64, dtype: DType) -> Option<ArgSource> {
    let bytes = usize::try_from(offset).ok()?.checked_mul(dtype.size_bytes())?;
    match at {
        ArgSource::Scratch(o) => Some(ArgSource::Scratch(o.checked_add(bytes)?)),
        ArgSource::Weights(o) => Some(ArgSource::Weights(o.checked_add(bytes)?)),
        ArgSource::Local(o) => Some(ArgSource::Local(o.checked_add(bytes)?)),
        other => (bytes == 0).then_some(other),
    }
}

/// Blocks of the tiled kernel for `a` with tiles of `rows` query rows: batch positions × tiles.
fn tiles(a: &Attention, rows: usize) -> u64 {
    a.batch.iter().map(|&b| b as u64).product::<u64>() * a.sq.div_ceil(rows) as u64
}

/// The tile rows `a` runs the tiled kernel with, or `None` for the row kernel: as asked, or under
/// [`AttentionKernel::Auto`] the tiled kernel when its 32-bit offsets reach every element
/// (`offsets32`: each operand has fewer than 2^31) and tiles of 16 rows give at least
/// [`TILED_MIN_TILES`] blocks. The tile is the largest that gives [`TILED_FILL_TILES`] blocks, or
/// the smallest.
pub(crate) fn choose(a: &Attention, kernel: AttentionKernel, offsets32: bool) -> Option<usize> {
    let (rows, _) = kernel::tile_shapes(a.d.max(a.dv));
    let tiled = match kernel {
        AttentionKernel::Auto => offsets32 && tiles(a, rows[0]) >= TILED_MIN_TILES,
        AttentionKernel::Rows => false,
        AttentionKernel::Tiled => true,
    };
    tiled.then(|| rows.iter().rev().copied().find(|&r| tiles(a, r) >= TILED_FILL_TILES).unwrap_or(rows[0]))
}

/// The half type `a` computes in: `half` (the precision's, unless the keep list names a member) when
/// the tensor-core kernel takes its heads and its 32-bit offsets reach every element (`offsets32`);
/// else `None` (f32 throughout). Both targets decide alike, so the host computes what the GPU does.
pub(crate) fn half_tiles(a: &Attention, half: Option<DType>, offsets32: bool) -> Option<DType> {
    half.filter(|_| a.d <= MMA_MAX_HEAD && a.dv <= MMA_MAX_HEAD && offsets32)
}

/// Warps below which the tensor-core kernel's blocks leave the GPU short of work: about 16 an SM
/// (its 128 registers a thread) on an H100's or H200's 132 SMs.
const MMA_SPLIT_BELOW_WARPS: u64 = 2048;

/// The block of the tensor-core kernel for `a`: the most warps (of [`MMA_ROW_WARPS`]) whose
/// tiles of query rows still give [`TILED_FILL_TILES`] blocks, or one warp. Where those blocks have
/// fewer than [`MMA_SPLIT_BELOW_WARPS`] warps in all (one sequence of BERT-base: 96 tiles of 16
/// rows; Whisper-tiny's encoder, 6 heads of 1,500 rows: 282 blocks of two warps, each warp visiting
/// all 1,500 keys), the split-keys block instead, whose four warps divide the keys of one tile of 16
/// rows between them, for heads up to [`MMA_SPLIT_MAX_HEAD`] and more than one warp's worth of keys.
fn mma_block(a: &Attention) -> MmaBlock {
    let warps = MMA_ROW_WARPS.into_iter().rev().find(|&w| tiles(a, 16 * w as usize) >= TILED_FILL_TILES).unwrap_or(1);
    let rows = MmaBlock::rows(warps);
    if splits_keys(a) && tiles(a, rows.query_rows()) * u64::from(warps) < MMA_SPLIT_BELOW_WARPS {
        return MmaBlock::SPLIT;
    }
    rows
}

/// Whether the split-keys block may run `a`: heads up to [`MMA_SPLIT_MAX_HEAD`] and more than one
/// warp's tile of keys.
fn splits_keys(a: &Attention) -> bool {
    a.d.max(a.dv) <= MMA_SPLIT_MAX_HEAD && a.sk > 32
}

/// Emits the one launch of an attention group, computing in `half` where [`half_tiles`] allows (the
/// tensor-core kernel, whatever `choice` says) and in f32 otherwise. Every f32 kernel the choice may
/// pick for some shape (the row kernel, the tiled kernel of each tile size) is defined whichever one
/// this shape launches, so every bucket of a model has the same source.
pub(crate) fn emit(
    graph: &Graph,
    a: &Attention,
    location: &HashMap<ValueId, ArgSource>,
    target: Target,
    (choice, half): (AttentionKernel, Option<DType>),
    emit: &mut Emitter,
) -> Result<(), OnnxError> {
    let inputs = a.inputs();
    let at = |id: &ValueId| {
        location.get(id).copied().ok_or_else(|| OnnxError::Graph {
            reason: format!("attention operand `{}` has no location", graph.value(*id).name),
        })
    };
    // Each operand from where it starts in the value it is read from.
    let mut args = Vec::new();
    for s in a.operands() {
        let moved = starting_at(at(&s.value)?, s.offset, s.dtype).ok_or_else(|| OnnxError::Graph {
            reason: format!("attention operand `{}` cannot be read at an offset", graph.value(s.value).name),
        })?;
        args.push(moved);
    }
    args.push(at(&a.out.value)?);
    let elements = |id: ValueId| operand(graph, id).map(|o| numel(&o.dims) as usize);
    let mut offsets32 = true;
    for &id in inputs.iter().chain([&a.out.value]) {
        offsets32 &= elements(id)? <= i32::MAX as usize;
    }
    let half = half_tiles(a, half, offsets32);
    let types = [a.q.dtype, a.k.dtype, a.v.dtype];
    let form = Form { mask: a.mask.is_some(), nan_to_zero: a.nan_to_zero, store: a.store(), inputs: types };
    match (target, half) {
        (Target::Host, _) => {
            let kernel = HostAttention {
                meta: a.meta(),
                mask: a.mask.is_some(),
                nan_to_zero: a.nan_to_zero,
                half,
                store: a.store(),
                lens: a
                    .operands()
                    .iter()
                    .map(|s| Ok(elements(s.value)?.saturating_sub(s.offset as usize)))
                    .collect::<Result<_, OnnxError>>()?,
                dtypes: a.operands().iter().map(|s| s.dtype).collect(),
                out_len: elements(a.out.value)?,
            };
            kernel.ensure_registered()?;
            let name = emit.kernel(kernel.signature(), None);
            emit.steps.push(PlanStep::Launch(LaunchStep { kernel: name, args, config: host_config() }));
        }
        (Target::Gpu(_), Some(half)) => {
            // Every block size a bucket may pick is defined, so all buckets share one source.
            let block = mma_block(a);
            let mut name = String::new();
            let split = (a.d.max(a.dv) <= MMA_SPLIT_MAX_HEAD).then_some(MmaBlock::SPLIT);
            for b in MMA_ROW_WARPS.into_iter().map(MmaBlock::rows).chain(split) {
                let (kernel, text) = kernel::gpu_mma_kernel(form, (a.d, a.dv), half, b);
                if b == block {
                    name = kernel.clone();
                }
                emit.kernel(kernel_signature(&kernel, args.len()), Some(text));
            }
            let config = LaunchConfig {
                block: Dim3::x(32 * block.warps),
                ..launch_config(Work::Rows(tiles(a, block.query_rows())))
            };
            let mut all = vec![emit.meta(&a.meta())];
            all.extend(args);
            emit.steps.push(PlanStep::Launch(LaunchStep { kernel: name, args: all, config }));
        }
        (Target::Gpu(backend), None) => {
            let mut kernels = Vec::new();
            if choice != AttentionKernel::Tiled {
                kernels.push((None, kernel::gpu_kernel(form)));
            }
            if choice != AttentionKernel::Rows {
                for &rows in kernel::tile_shapes(a.d.max(a.dv)).0 {
                    kernels.push((Some(rows), kernel::gpu_tiled_kernel(form, a.d, a.dv, rows)));
                }
            }
            if choice == AttentionKernel::Tiled && !offsets32 {
                return Err(OnnxError::UnsupportedOnBackend {
                    backend,
                    op: "fused attention".into(),
                    node: graph.value(a.out.value).name.clone(),
                    reason: "the tiled attention kernel indexes its operands with 32 bits and an operand has 2^31 \
                             elements or more: use the automatic or the row attention kernel"
                        .into(),
                });
            }
            let chosen = choose(a, choice, offsets32);
            let mut name = String::new();
            for (rows, (kernel, text)) in kernels {
                if rows == chosen {
                    name = kernel.clone();
                }
                emit.kernel(kernel_signature(&kernel, args.len()), Some(text));
            }
            let config = match chosen {
                Some(rows) => {
                    LaunchConfig { block: Dim3::x(TILED_THREADS), ..launch_config(Work::Rows(tiles(a, rows))) }
                }
                None => {
                    let rows = a.batch.iter().map(|&b| b as u64).product::<u64>() * a.sq as u64;
                    // One key per thread per chunk: fewer keys than a block need a smaller
                    // (power-of-two) block.
                    let block = (a.sk.next_power_of_two() as u32).clamp(32, BLOCK);
                    LaunchConfig { block: Dim3::x(block), ..launch_config(Work::Rows(rows)) }
                }
            };
            let mut all = vec![emit.meta(&a.meta())];
            all.extend(args);
            emit.steps.push(PlanStep::Launch(LaunchStep { kernel: name, args: all, config }));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn tile_shapes_keep_shared_memory_under_48_kib_for_every_head_size() {
        for head in 1..=super::super::MAX_HEAD {
            let (all_rows, keys) = super::kernel::tile_shapes(head);
            assert_eq!(all_rows[0], 16, "the smallest tile is 16 rows");
            for &rows in all_rows {
                assert_eq!((rows % 16, keys % 8), (0, 0), "16 row groups by 8 lanes");
                let floats = head * (rows + 1) + head * (keys + 1) + keys * head + rows * (keys + 1);
                assert!(floats * 4 <= 48 << 10, "head {head} rows {rows}: {} bytes", floats * 4);
            }
        }
    }
}
