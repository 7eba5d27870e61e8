//! The GPU forms ([`crate::ops::Op::gpu`]) of the data-movement ops: Slice, Split and Transpose as
//! strided copies, Pad as its own kernel kind.

use super::{Pad, PadMode, Slice, Split, Transpose, resolve_slice};
use crate::ops::OpError;
use crate::ops::gpu::{GpuCtx, GpuKind, GpuLaunch, GpuNode, Slot, Work, contiguous, copy_launch, ext, numel};
use crate::ops::shape_util::normalize_axis;

/// Slice on the GPU.
pub(super) fn slice(op: &Slice, ctx: &GpuCtx<'_>) -> Result<GpuNode, OpError> {
    let (x, out) = (ctx.input(0)?, ctx.output(0)?);
    let (starts, ends, axes, steps) =
        op.params(ctx.infer)?.ok_or_else(|| OpError::eval("Slice bounds are not constant"))?;
    let own = contiguous(&x.dims);
    let (mut base, mut st) = (0i64, own.clone());
    for i in 0..starts.len() {
        let a = usize::try_from(axes[i]).map_err(|_| OpError::eval("negative axis"))?;
        let s = resolve_slice(starts[i], ends[i], steps[i], x.dims[a])?;
        if s.len > 0 {
            base += s.start * own[a];
        }
        st[a] = s.step * own[a];
    }
    let launch = copy_launch(
        x.dtype.size_bytes(),
        &out.dims,
        (Slot::In(0), base, &st),
        (Slot::Out(0), 0, &contiguous(&out.dims)),
    );
    Ok(GpuNode::Launches(vec![launch]))
}

/// Split on the GPU.
pub(super) fn split(op: &Split, ctx: &GpuCtx<'_>) -> Result<GpuNode, OpError> {
    let x = ctx.input(0)?;
    let axis = normalize_axis(op.axis, x.dims.len())?;
    let in_strides = contiguous(&x.dims);
    let mut at = 0i64;
    let mut launches = Vec::new();
    for (k, out) in ctx.outputs.iter().enumerate() {
        launches.push(copy_launch(
            x.dtype.size_bytes(),
            &out.dims,
            (Slot::In(0), at * in_strides[axis], &in_strides),
            (Slot::Out(k), 0, &contiguous(&out.dims)),
        ));
        at += ext(out.dims.get(axis).copied().unwrap_or(0));
    }
    Ok(GpuNode::Launches(launches))
}

/// Transpose on the GPU.
pub(super) fn transpose(op: &Transpose, ctx: &GpuCtx<'_>) -> Result<GpuNode, OpError> {
    let (x, out) = (ctx.input(0)?, ctx.output(0)?);
    let perm = op.perm(x.dims.len())?;
    let own = contiguous(&x.dims);
    let st: Vec<i64> = perm.iter().map(|&p| own[p]).collect();
    let launch =
        copy_launch(x.dtype.size_bytes(), &out.dims, (Slot::In(0), 0, &st), (Slot::Out(0), 0, &contiguous(&out.dims)));
    Ok(GpuNode::Launches(vec![launch]))
}

/// Pad on the GPU.
pub(super) fn pad(op: &Pad, ctx: &GpuCtx<'_>) -> Result<GpuNode, OpError> {
    let (x, out) = (ctx.input(0)?, ctx.output(0)?);
    let pads = op.infer_pads(ctx.infer)?.ok_or_else(|| OpError::eval("Pad pads are not constant"))?;
    let from_input = op.attrs.is_none() && ctx.inputs.get(2).and_then(Option::as_ref).is_some();
    let fill_bits = op.attrs.as_ref().map_or(0, |(_, v)| v.to_bits());
    let rank = x.dims.len();
    let mut meta = vec![ext(rank), numel(&out.dims) as i64];
    meta.extend(out.dims.iter().map(|&d| ext(d)));
    meta.extend(x.dims.iter().map(|&d| ext(d)));
    meta.extend(pads.iter().map(|p| p.0));
    meta.extend(contiguous(&x.dims));
    let mut slots = vec![Slot::In(0)];
    if from_input {
        slots.push(Slot::In(2));
    }
    slots.push(Slot::Out(0));
    let mode = match op.mode {
        PadMode::Constant => 0,
        PadMode::Reflect => 1,
        PadMode::Edge => 2,
    };
    Ok(GpuNode::Launches(vec![GpuLaunch {
        kind: GpuKind::Pad { mode, elem_bytes: x.dtype.size_bytes() as u8, from_input, fill_bits },
        meta,
        work: Work::Elements(numel(&out.dims)),
        slots,
    }]))
}
