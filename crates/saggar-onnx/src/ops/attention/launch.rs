//! Attention's GPU form: one [`AttentionKernel`] launch (a block per query row) writing Y and
//! `qk_matmul_output`, and strided copies of the past and new keys and values into `present_key`
//! and `present_value`.

use super::gpu::{AttentionKernel, MaskKind};
use super::sdpa::{Attention, mask_kind, present_strides, shapes};
use crate::ops::OpError;
use crate::ops::data_movement::gpu::copy_launch;
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, ext};

pub(super) fn gpu(op: &Attention, ctx: &GpuCtx<'_>) -> Result<GpuNode, OpError> {
    let input = |i: usize| ctx.inputs.get(i).and_then(Option::as_ref);
    let g = op.geometry(&shapes(|i| input(i).map(|o| o.dims.as_slice())))?;
    let mask = mask_kind(input(3).map(|m| m.dtype));
    let past = input(4).is_some();
    let kind = AttentionKernel { past, mask, nonpad: input(6).is_some(), qk: op.outputs >= 4 };
    let (pk, pv) = (g.past_strides(g.dk), g.past_strides(g.dv));
    let mask_strides = g.mask.map_or([0; 4], |m| m.strides);
    let mut meta =
        vec![g.b, g.hq, g.sq, g.hkv, g.skv, g.past, g.dk, g.dv, usize::from(op.causal), usize::from(op.mode)]
            .into_iter()
            .map(ext)
            .collect::<Vec<_>>();
    meta.extend([op.scale_for(g.dk), op.softcap].map(|f| i64::from(f.to_bits() as i32)));
    meta.push(ext(g.mask.map_or(0, |m| m.len)));
    for s in [g.q, g.k, g.v, pk, pv, g.y, mask_strides] {
        meta.extend(s.map(ext));
    }
    let mut slots = vec![Slot::In(0), Slot::In(1), Slot::In(2)];
    if past {
        slots.extend([Slot::In(4), Slot::In(5)]);
    }
    if mask != MaskKind::None {
        slots.push(Slot::In(3));
    }
    if kind.nonpad {
        slots.push(Slot::In(6));
    }
    slots.push(Slot::Out(0));
    if kind.qk {
        slots.push(Slot::Out(3));
    }
    let rows = (g.b * g.hq * g.sq) as u64;
    let mut launches = vec![GpuLaunch::new(kind, meta, Work::Rows(rows), slots)];
    // present_key (output 1) and present_value (output 2): the past cache, then the new rows.
    for (out, (d, new_in, new_strides, past_in, past_strides)) in
        [(1, (g.dk, 1, g.k, 4, pk)), (2, (g.dv, 2, g.v, 5, pv))]
    {
        if op.outputs <= out {
            break;
        }
        let to = present_strides(&g, d).map(ext);
        if g.past > 0 {
            let dims = [g.b, g.hkv, g.past, d];
            launches.push(copy_launch(
                4,
                &dims,
                (Slot::In(past_in), 0, &past_strides.map(ext)),
                (Slot::Out(out), 0, &to),
            ));
        }
        let dims = [g.b, g.hkv, g.skv, d];
        let at = ext(g.past * d);
        launches.push(copy_launch(4, &dims, (Slot::In(new_in), 0, &new_strides.map(ext)), (Slot::Out(out), at, &to)));
    }
    Ok(GpuNode::Launches(launches))
}
