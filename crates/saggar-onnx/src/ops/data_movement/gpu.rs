//! The GPU forms ([`crate::ops::Op::gpu`]) of the data-movement ops: Slice, Split, Transpose, Tile,
//! DepthToSpace and SpaceToDepth as strided copies ([`CopyKernel`], which other families use to
//! materialise views and outputs); Pad, Trilu and ReverseSequence as kernel kinds of their own.

use super::{Pad, PadMode, Slice, Split, Transpose, resolve_slice};
use crate::error::OpError;
use crate::ops::gpu::{GpuCtx, GpuKernel, GpuLaunch, GpuNode, Slot, Work, bits_type, contiguous, ext, numel, render};
use crate::ops::shape_util::normalize_axis;

/// A strided copy of `elem_bytes`-byte elements (`copy.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CopyKernel {
    pub(crate) elem_bytes: u8,
}

impl GpuKernel for CopyKernel {
    fn prefix(&self) -> &'static str {
        "copy"
    }

    fn source(&self) -> String {
        render(include_str!("copy.cu"), &[("T", bits_type(self.elem_bytes))])
    }
}

/// Pad in `mode` (`pad.cu`); the fill value is the `value` input's first element when
/// `from_input`, else the f32 attribute `fill_bits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PadKernel {
    mode: PadMode,
    elem_bytes: u8,
    from_input: bool,
    fill_bits: u32,
}

impl GpuKernel for PadKernel {
    fn prefix(&self) -> &'static str {
        "pad"
    }

    fn source(&self) -> String {
        let t = bits_type(self.elem_bytes);
        let (value_param, fill) = if self.from_input {
            (format!(", const {t}* __restrict__ value"), "value[0]".to_string())
        } else {
            (String::new(), format!("({t}){}u", self.fill_bits))
        };
        let outside = match self.mode {
            PadMode::Constant => "inside = false;",
            PadMode::Reflect => {
                "if (n == 1) s = 0; else { const onnx_i64 period = 2 * (n - 1); onnx_i64 m = s % period; if (m < 0) m += period; s = m < n ? m : period - m; }"
            }
            PadMode::Edge => "s = s < 0 ? 0 : n - 1;",
            PadMode::Wrap => "{ onnx_i64 m = s % n; if (m < 0) m += n; s = m; }",
        };
        render(
            include_str!("pad.cu"),
            &[("T", t), ("VALUE_PARAM", &value_param), ("FILL", &fill), ("OUTSIDE", outside)],
        )
    }
}

/// Trilu of `elem_bytes`-byte elements (`trilu.cu`), the diagonal read from the `k` input when
/// `k_input` (else 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TriluKernel {
    pub(crate) upper: bool,
    pub(crate) elem_bytes: u8,
    pub(crate) k_input: bool,
}

impl GpuKernel for TriluKernel {
    fn prefix(&self) -> &'static str {
        "trilu"
    }

    fn source(&self) -> String {
        let (k_param, k) = if self.k_input { (", const long long* __restrict__ kp", "kp[0]") } else { ("", "0") };
        let keep = if self.upper { ">=" } else { "<=" };
        render(
            include_str!("trilu.cu"),
            &[("T", bits_type(self.elem_bytes)), ("K_PARAM", k_param), ("K", k), ("KEEP", keep)],
        )
    }
}

/// ReverseSequence of `elem_bytes`-byte elements (`reverse_sequence.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReverseSequenceKernel {
    pub(crate) elem_bytes: u8,
}

impl GpuKernel for ReverseSequenceKernel {
    fn prefix(&self) -> &'static str {
        "reverse_sequence"
    }

    fn source(&self) -> String {
        render(include_str!("reverse_sequence.cu"), &[("T", bits_type(self.elem_bytes))])
    }
}

/// A [`CopyKernel`] launch of `dims` elements with the given bases and strides.
pub(crate) fn copy_launch(
    elem_bytes: usize,
    dims: &[usize],
    (input, in_base, in_strides): (Slot, i64, &[i64]),
    (output, out_base, out_strides): (Slot, i64, &[i64]),
) -> GpuLaunch {
    let mut meta = vec![ext(dims.len()), numel(dims) as i64, in_base, out_base];
    meta.extend(dims.iter().map(|&d| ext(d)));
    meta.extend_from_slice(in_strides);
    meta.extend_from_slice(out_strides);
    GpuLaunch::new(CopyKernel { elem_bytes: elem_bytes as u8 }, meta, Work::Elements(numel(dims)), vec![input, output])
}

/// A copy of input 0 into output 0 of the same element count (a view that must materialise).
pub(crate) fn contiguous_copy(ctx: &GpuCtx<'_>) -> Result<GpuNode, OpError> {
    let out = ctx.output(0)?;
    let dims = [numel(&out.dims) as usize];
    Ok(GpuNode::Launches(vec![copy_launch(
        out.dtype.size_bytes(),
        &dims,
        (Slot::In(0), 0, &[1]),
        (Slot::Out(0), 0, &[1]),
    )]))
}

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
    let kernel = PadKernel { mode: op.mode, elem_bytes: x.dtype.size_bytes() as u8, from_input, fill_bits };
    Ok(GpuNode::Launches(vec![GpuLaunch::new(kernel, meta, Work::Elements(numel(&out.dims)), slots)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trilu_and_reverse_sequence_kernels_render_completely_with_names_of_their_own() {
        let mut kinds: Vec<Box<dyn GpuKernel>> = Vec::new();
        for upper in [false, true] {
            for k_input in [false, true] {
                kinds.push(Box::new(TriluKernel { upper, elem_bytes: 4, k_input }));
            }
        }
        kinds.extend([1, 8].map(|b| Box::new(ReverseSequenceKernel { elem_bytes: b }) as Box<dyn GpuKernel>));
        crate::ops::testing::assert_kernels_render(&kinds);
    }
}
