//! The GPU forms ([`crate::ops::Op::gpu`]) of the data-movement ops: Slice, Split, Transpose, Tile,
//! DepthToSpace and SpaceToDepth as strided copies ([`CopyKernel`], which other families use to
//! materialise views and outputs); Pad, Trilu and ReverseSequence as kernel kinds of their own.

use super::{Pad, PadMode, Slice, Split, Transpose, resolve_slice};
use crate::error::OpError;
use crate::ops::gpu::{GpuCtx, GpuKernel, GpuLaunch, GpuNode, Slot, Work, bits_type, contiguous, ext, numel, render};
use crate::ops::shape_util::normalize_axis;

/// A strided copy of `elem_bytes`-byte elements (`copy.cu` around its body `copy_body.cuh` in 32-bit
/// and in 64-bit indices), moving groups of four elements as one or two vectors where it can.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CopyKernel {
    pub(crate) elem_bytes: u8,
}

impl GpuKernel for CopyKernel {
    fn prefix(&self) -> &'static str {
        "copy"
    }

    fn source(&self) -> String {
        // A group of four elements: its vector type, how many of them, their alignment in bytes.
        let (vector, count, align) = match self.elem_bytes {
            1 => ("unsigned", "1", "4"),
            2 => ("uint2", "1", "8"),
            4 => ("uint4", "1", "16"),
            _ => ("uint4", "2", "16"),
        };
        let t = bits_type(self.elem_bytes);
        let body = |u: &str, i: &str| {
            render(include_str!("copy_body.cuh"), &[("T", t), ("V", vector), ("VN", count), ("U", u), ("I", i)])
        };
        render(
            include_str!("copy.cu"),
            &[
                ("T", t),
                ("ALIGN", align),
                ("NARROW", &body("unsigned", "int")),
                ("WIDE", &body("unsigned long long", "onnx_i64")),
            ],
        )
    }
}

/// A strided copy's axes after [`coalesce`]: extents, and the input's and the output's strides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct CopyAxes {
    dims: Vec<i64>,
    ins: Vec<i64>,
    outs: Vec<i64>,
}

/// The axes of a copy of `dims` with fewer divisions and the same offsets: axes of extent 1 dropped,
/// each axis merged into the next where both sides step over it as over the next one's whole extent
/// (a contiguous run, in either direction). At least one axis stays.
fn coalesce(dims: &[usize], in_strides: &[i64], out_strides: &[i64]) -> CopyAxes {
    let mut a = CopyAxes::default();
    for ((&d, &i), &o) in dims.iter().zip(in_strides).zip(out_strides) {
        let d = ext(d);
        if d == 1 {
            continue;
        }
        let last = a.dims.len().checked_sub(1);
        match last {
            Some(l) if i.checked_mul(d) == Some(a.ins[l]) && o.checked_mul(d) == Some(a.outs[l]) => {
                a.dims[l] = a.dims[l].saturating_mul(d);
                (a.ins[l], a.outs[l]) = (i, o);
            }
            _ => {
                a.dims.push(d);
                a.ins.push(i);
                a.outs.push(o);
            }
        }
    }
    if a.dims.is_empty() {
        a = CopyAxes { dims: vec![1], ins: vec![1], outs: vec![1] };
    }
    a
}

/// Whether every offset `base + Σ c_d strides_d` over `dims` (and every partial sum of it, each term
/// included) lies in `0..=i32::MAX`: the lowest and the highest sums do (negative strides lower them).
fn offsets_fit_i32(base: i64, dims: &[i64], strides: &[i64]) -> bool {
    let (mut low, mut high) = (i128::from(base), i128::from(base));
    for (&d, &s) in dims.iter().zip(strides) {
        let span = i128::from(d - 1) * i128::from(s);
        if span < 0 { low += span } else { high += span }
    }
    low >= 0 && high <= i128::from(i32::MAX)
}

/// Whether a copy of `axes` may move groups of four elements: the innermost axis contiguous on both
/// sides with whole groups, every other stride and both bases whole groups.
fn moves_quads(axes: &CopyAxes, in_base: i64, out_base: i64) -> bool {
    let l = axes.dims.len() - 1;
    let whole = |v: &i64| v % 4 == 0;
    (axes.ins[l], axes.outs[l]) == (1, 1)
        && whole(&axes.dims[l])
        && axes.ins[..l].iter().chain(&axes.outs[..l]).chain([&in_base, &out_base]).all(whole)
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

/// A [`CopyKernel`] launch of `dims` elements with the given bases and strides: the axes coalesced,
/// 32-bit indices where they provably fit, a thread per group of four elements where the groups are
/// whole on both sides.
pub(crate) fn copy_launch(
    elem_bytes: usize,
    dims: &[usize],
    (input, in_base, in_strides): (Slot, i64, &[i64]),
    (output, out_base, out_strides): (Slot, i64, &[i64]),
) -> GpuLaunch {
    let n = numel(dims);
    let mut axes = coalesce(dims, in_strides, out_strides);
    let narrow = n <= i32::MAX as u64
        && (n == 0
            || offsets_fit_i32(in_base, &axes.dims, &axes.ins) && offsets_fit_i32(out_base, &axes.dims, &axes.outs));
    let quads = n > 0 && moves_quads(&axes, in_base, out_base);
    let units = if quads {
        let l = axes.dims.len() - 1;
        axes.dims[l] /= 4;
        (axes.ins[l], axes.outs[l]) = (4, 4);
        n / 4
    } else {
        n
    };
    let mut meta = vec![ext(axes.dims.len()), units as i64, in_base, out_base];
    meta.extend([axes.dims, axes.ins, axes.outs].concat());
    meta.extend([i64::from(narrow), i64::from(quads)]);
    GpuLaunch::new(CopyKernel { elem_bytes: elem_bytes as u8 }, meta, Work::Elements(units), vec![input, output])
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

    /// The `meta` table of a copy launch of `dims`.
    fn meta(dims: &[usize], (ib, is): (i64, &[i64]), (ob, os): (i64, &[i64])) -> Vec<i64> {
        copy_launch(4, dims, (Slot::In(0), ib, is), (Slot::Out(0), ob, os)).meta
    }

    #[test]
    fn copies_coalesce_their_axes_and_move_whole_groups_of_four_in_32_bit_indices() {
        // The second piece of GPT-2's QKV split ([32, 128, 2304] to [32, 128, 768]): two axes, 192
        // groups a row, a thread a group.
        let launch = copy_launch(
            4,
            &[32, 128, 768],
            (Slot::In(0), 768, &[294_912, 2304, 1]),
            (Slot::Out(1), 0, &[98_304, 768, 1]),
        );
        let rows = 32 * 128;
        assert_eq!(launch.meta, [2, rows * 192, 768, 0, rows, 192, 2304, 4, 768, 4, 1, 1]);
        assert_eq!(launch.work, Work::Elements(rows as u64 * 192));
        // The head split's transpose ([32, 128, 12, 64] to [32, 12, 128, 64]): no axes merge.
        let m = meta(&[32, 12, 128, 64], (0, &[98_304, 64, 768, 1]), (0, &[98_304, 8192, 64, 1]));
        assert_eq!(m, [4, 32 * 12 * 128 * 16, 0, 0, 32, 12, 128, 16, 98_304, 64, 768, 4, 98_304, 8192, 64, 4, 1, 1]);
        // Axes of extent 1 go; a reversed run merges into one axis of stride -1 (element by element).
        assert_eq!(meta(&[1, 3, 1, 5], (14, &[7, -5, 9, -1]), (0, &[15, 5, 5, 1])), [1, 15, 14, 0, 15, -1, 1, 1, 0]);
        assert_eq!(meta(&[1, 1], (3, &[1, 1]), (0, &[1, 1])), [1, 1, 3, 0, 1, 1, 1, 1, 0], "one axis stays");
        // An odd inner extent, a row stride or a base not of whole groups: element by element.
        assert_eq!(meta(&[2, 5, 3], (0, &[15, 1, 5]), (0, &[15, 3, 1]))[13..], [1, 0]);
        assert_eq!(meta(&[3, 4], (0, &[6, 1]), (0, &[4, 1])), [2, 12, 0, 0, 3, 4, 6, 1, 4, 1, 1, 0]);
        assert_eq!(meta(&[8], (2, &[1]), (0, &[1])), [1, 8, 2, 0, 8, 1, 1, 1, 0]);
    }

    #[test]
    fn copies_take_32_bit_indices_only_where_the_count_and_every_offset_fit() {
        let max = i32::MAX as usize;
        let flags = |m: Vec<i64>| (m[m.len() - 2], m[m.len() - 1]);
        // 2^31 elements: 64-bit indices, still in groups of four.
        assert_eq!(flags(meta(&[1 << 31], (0, &[1]), (0, &[1]))), (0, 1));
        assert_eq!(flags(meta(&[max - 3], (4, &[1]), (0, &[1]))), (1, 1), "the last offset is i32::MAX");
        assert_eq!(flags(meta(&[max - 2], (4, &[1]), (0, &[1]))), (0, 0));
        // Two elements far apart: the offset, not the count.
        assert_eq!(flags(meta(&[2], (0, &[1 << 31]), (0, &[1]))), (0, 0));
        assert_eq!(flags(meta(&[2], (0, &[1]), (max as i64, &[-(max as i64)]))), (1, 0), "down to 0");
        // Negative steps: the lowest offset is below 0 (a malformed launch) or the highest above.
        assert_eq!(flags(meta(&[3, 5], (13, &[-5, -1]), (0, &[5, 1]))), (0, 0));
        assert_eq!(flags(meta(&[3, 5], (max as i64, &[-5, -1]), (0, &[5, 1]))), (1, 0));
        assert_eq!(flags(meta(&[0, 5], (0, &[5, 1]), (0, &[5, 1]))), (1, 0), "no elements");
    }

    #[test]
    fn copy_kernels_render_completely_with_both_bodies_and_the_vector_of_their_element_size() {
        for (bytes, vector, count) in [(1, "unsigned", "1"), (2, "uint2", "1"), (4, "uint4", "1"), (8, "uint4", "2")] {
            let text = CopyKernel { elem_bytes: bytes }.source();
            assert!(text.contains(&format!("const {vector}* src = (const {vector}*)(in + a);")), "{text}");
            assert!(text.contains(&format!("k < {count};")), "{text}");
            assert!(text.contains("unsigned rem = (unsigned)(i >> shift);"), "{text}");
            assert!(text.contains("unsigned long long rem = (unsigned long long)(i >> shift);"), "{text}");
        }
    }

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
