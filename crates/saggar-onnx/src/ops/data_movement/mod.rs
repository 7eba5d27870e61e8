//! Data movement: Slice, Split, Transpose, Pad; Tile, DepthToSpace and SpaceToDepth (strided views
//! of their input, [`view`]); Trilu; ReverseSequence.
//!
//! Indices are checked against their axis at evaluation (negative indices count from the end, as
//! ONNX says); an index out of range is an evaluation error, never an out-of-bounds read.

use saggar_shape::Dim;

mod center_crop_pad;
mod depth_space;
pub(crate) mod gpu;
mod reverse_sequence;
mod tile;
mod trilu;
mod view;

use crate::ops::shape_util::{normalize_axes, normalize_axis, strides};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpEntry, OpError, SymInt, ValueType, unknown_dim};
use crate::tensor::{DataRef, TensorMut, TensorView, same_type};

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "Slice", since: 1, until: 9, build: build_slice_attrs },
    OpEntry { op_type: "Slice", since: 10, until: 24, build: |_| Ok(Box::new(Slice { attrs: None })) },
    OpEntry { op_type: "Split", since: 2, until: 12, build: |c| build_split(c, true) },
    OpEntry { op_type: "Split", since: 13, until: 24, build: |c| build_split(c, false) },
    OpEntry { op_type: "Transpose", since: 1, until: 24, build: build_transpose },
    OpEntry { op_type: "Pad", since: 2, until: 10, build: build_pad_attrs },
    OpEntry { op_type: "Pad", since: 11, until: 24, build: build_pad },
    OpEntry { op_type: "Tile", since: 6, until: 24, build: |_| Ok(Box::new(tile::Tile)) },
    OpEntry { op_type: "DepthToSpace", since: 1, until: 10, build: |c| depth_space::build_depth_to_space(c, false) },
    OpEntry { op_type: "DepthToSpace", since: 11, until: 24, build: |c| depth_space::build_depth_to_space(c, true) },
    OpEntry { op_type: "SpaceToDepth", since: 1, until: 24, build: depth_space::build_space_to_depth },
    OpEntry { op_type: "Trilu", since: 14, until: 24, build: trilu::build_trilu },
    OpEntry { op_type: "ReverseSequence", since: 10, until: 24, build: reverse_sequence::build_reverse_sequence },
    OpEntry { op_type: "CenterCropPad", since: 18, until: 24, build: center_crop_pad::build_center_crop_pad },
];

pub(crate) fn index_values(t: &TensorView<'_>) -> Result<Vec<i64>, OpError> {
    t.to_i64s().ok_or_else(|| OpError::eval("indices must be int64 or int32"))
}

/// Element `k` of an int64 or int32 index tensor, read in place (no copy of the indices).
pub(crate) fn index_at(t: &TensorView<'_>, k: usize) -> Result<i64, OpError> {
    match t.data {
        DataRef::I64(v) => v.get(k).copied(),
        DataRef::I32(v) => v.get(k).map(|&i| i64::from(i)),
        _ => None,
    }
    .ok_or_else(|| OpError::eval("indices must be int64 or int32 and cover the output"))
}

/// An index in `-n..n` made non-negative.
pub(crate) fn wrap_index(i: i64, n: usize) -> Result<usize, OpError> {
    let m = n as i64;
    let j = if i < 0 { i + m } else { i };
    if j < 0 || j >= m {
        return Err(OpError::eval(format!("index {i} is out of range for an axis of {n}")));
    }
    Ok(j as usize)
}

/// Slice's `starts`, `ends` and optional `axes` attributes (opset < 10).
type SliceAttrs = (Vec<i64>, Vec<i64>, Option<Vec<i64>>);

/// `Slice`: starts/ends/axes/steps from attributes (opset < 10) or inputs 1..=4.
#[derive(Debug)]
struct Slice {
    attrs: Option<SliceAttrs>,
}

fn build_slice_attrs(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let starts = ctx.ints("starts")?.ok_or_else(|| OpError::attribute("starts", "required"))?;
    let ends = ctx.ints("ends")?.ok_or_else(|| OpError::attribute("ends", "required"))?;
    Ok(Box::new(Slice { attrs: Some((starts, ends, ctx.ints("axes")?)) }))
}

/// One axis of a slice, resolved against its extent.
#[derive(Debug, Clone, Copy)]
struct AxisSlice {
    start: i64,
    step: i64,
    len: usize,
}

/// Resolves `start:end:step` on an axis of `n` (ONNX clamping rules).
fn resolve_slice(start: i64, end: i64, step: i64, n: usize) -> Result<AxisSlice, OpError> {
    if step == 0 {
        return Err(OpError::infer("Slice step cannot be 0"));
    }
    let n = n as i64;
    let fix = |v: i64| if v < 0 { v.saturating_add(n) } else { v };
    let (start, end) = (fix(start), fix(end));
    let (start, end) =
        if step > 0 { (start.clamp(0, n), end.clamp(0, n)) } else { (start.clamp(0, n - 1), end.clamp(-1, n - 1)) };
    let len = if step > 0 {
        if end > start { (end - start + step - 1) / step } else { 0 }
    } else if start > end {
        (start - end + (-step) - 1) / (-step)
    } else {
        0
    };
    Ok(AxisSlice { start, step, len: len.max(0) as usize })
}

impl Slice {
    /// `(starts, ends, axes, steps)` as constants, or `None` when an input is not constant.
    #[allow(clippy::type_complexity)]
    fn params(&self, inputs: &InferInputs<'_>) -> Result<Option<(Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>)>, OpError> {
        let rank = inputs.req(0)?.ty.rank();
        let (starts, ends, axes, steps) = match &self.attrs {
            Some((s, e, a)) => (s.clone(), e.clone(), a.clone(), None),
            None => {
                let get = |i: usize| inputs.get(i).map(|x| x.const_i64s());
                let (Some(Some(s)), Some(Some(e))) = (get(1), get(2)) else { return Ok(None) };
                let axes = match get(3) {
                    None => None,
                    Some(Some(a)) => Some(a),
                    Some(None) => return Ok(None),
                };
                let steps = match get(4) {
                    None => None,
                    Some(Some(a)) => Some(a),
                    Some(None) => return Ok(None),
                };
                (s, e, axes, steps)
            }
        };
        let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
        let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
        if starts.len() != ends.len() || axes.len() != starts.len() || steps.len() != starts.len() {
            return Err(OpError::infer("Slice starts, ends, axes and steps differ in length"));
        }
        let axes = normalize_axes(&axes, rank)?.into_iter().map(|a| a as i64).collect();
        Ok(Some((starts, ends, axes, steps)))
    }
}

impl Slice {
    /// Output extents when starts or ends are shape values rather than constants: `x[0:seq]` on
    /// any axis is `seq` long (exporters slice position tables this way); other sliced axes are
    /// unknown, and every axis is when the sliced axes themselves are not known.
    fn infer_symbolic(&self, inputs: &InferInputs<'_>, dims: &mut [Dim]) -> Result<(), OpError> {
        let rank = dims.len();
        let sym = |i: usize| inputs.get(i).and_then(|x| x.sym_ints());
        let (Some(starts), Some(ends)) = (sym(1), sym(2)) else {
            dims.iter_mut().for_each(|d| *d = unknown_dim());
            return Ok(());
        };
        let axes = match inputs.get(3) {
            None => (0..starts.len() as i64).collect(),
            Some(a) => match a.const_i64s() {
                Some(a) => a,
                None => {
                    dims.iter_mut().for_each(|d| *d = unknown_dim());
                    return Ok(());
                }
            },
        };
        let steps = inputs.get(4).map(|s| s.const_i64s());
        if starts.len() != ends.len() || axes.len() != starts.len() {
            return Err(OpError::infer("Slice starts, ends and axes differ in length"));
        }
        for (i, a) in normalize_axes(&axes, rank)?.into_iter().enumerate() {
            let step_one = match &steps {
                None => true,
                Some(Some(s)) => s.get(i) == Some(&1),
                Some(None) => false,
            };
            dims[a] = match (&starts[i], &ends[i], step_one) {
                (SymInt::Int(0), SymInt::Sym(s), true) => Dim::Symbolic(s.clone()),
                _ => unknown_dim(),
            };
        }
        Ok(())
    }
}

impl Op for Slice {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        Some(gpu::slice(self, ctx))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        let mut dims = x.ty.dims.clone();
        match self.params(inputs)? {
            Some((starts, ends, axes, steps)) => {
                for i in 0..starts.len() {
                    let a = axes[i] as usize;
                    dims[a] = match dims[a].as_fixed() {
                        Some(n) => Dim::Fixed(resolve_slice(starts[i], ends[i], steps[i], n as usize)?.len as u64),
                        // The whole of a symbolic axis keeps its symbol.
                        None if starts[i] == 0 && steps[i] == 1 && ends[i] >= i32::MAX as i64 => dims[a].clone(),
                        None => unknown_dim(),
                    };
                }
            }
            None => self.infer_symbolic(inputs, &mut dims)?,
        }
        Ok(vec![ValueType::new(x.ty.dtype, dims)])
    }

    fn dims_value(&self, inputs: &InferInputs<'_>) -> Option<Vec<SymInt>> {
        let x = inputs.req(0).ok()?;
        let values = x.sym_ints()?;
        if x.ty.rank() != 1 {
            return None;
        }
        let (starts, ends, _, steps) = self.params(inputs).ok()??;
        let s = resolve_slice(starts[0], ends[0], steps[0], values.len()).ok()?;
        Some((0..s.len).map(|i| values[(s.start + i as i64 * s.step) as usize].clone()).collect())
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let rank = x.dims.len();
        let mut per_axis: Vec<AxisSlice> = x.dims.iter().map(|&n| AxisSlice { start: 0, step: 1, len: n }).collect();
        let (starts, ends, axes, steps) = match &self.attrs {
            Some((s, e, a)) => {
                (s.clone(), e.clone(), a.clone().unwrap_or_else(|| (0..s.len() as i64).collect()), vec![1; s.len()])
            }
            None => {
                let s = index_values(inputs.req(1)?)?;
                let e = index_values(inputs.req(2)?)?;
                let a = match inputs.get(3) {
                    Some(t) => index_values(t)?,
                    None => (0..s.len() as i64).collect(),
                };
                let st = match inputs.get(4) {
                    Some(t) => index_values(t)?,
                    None => vec![1; s.len()],
                };
                (s, e, a, st)
            }
        };
        if starts.len() != ends.len() || axes.len() != starts.len() || steps.len() != starts.len() {
            return Err(OpError::eval("Slice parameters differ in length"));
        }
        for i in 0..starts.len() {
            let a = normalize_axis(axes[i], rank).map_err(|e| OpError::eval(e.to_string()))?;
            per_axis[a] =
                resolve_slice(starts[i], ends[i], steps[i], x.dims[a]).map_err(|e| OpError::eval(e.to_string()))?;
        }
        let out = &mut outputs[0];
        if out.dims.iter().zip(&per_axis).any(|(&d, s)| d != s.len) {
            return Err(OpError::eval("Slice output shape differs from inference"));
        }
        let in_strides = strides(x.dims);
        same_type!(x.data, &mut out.data, |src, dst| {
            gather_strided(src, dst, &per_axis, &in_strides);
            Ok(())
        })
    }
}

/// Copies the elements selected by `axes` (start, step, len per axis) in row-major order.
fn gather_strided<T: Copy>(src: &[T], dst: &mut [T], axes: &[AxisSlice], in_strides: &[usize]) {
    let rank = axes.len();
    if dst.is_empty() {
        return;
    }
    let mut index = vec![0usize; rank];
    for d in dst.iter_mut() {
        let mut offset = 0i64;
        for a in 0..rank {
            offset += (axes[a].start + index[a] as i64 * axes[a].step) * in_strides[a] as i64;
        }
        *d = src[offset as usize];
        for a in (0..rank).rev() {
            index[a] += 1;
            if index[a] < axes[a].len {
                break;
            }
            index[a] = 0;
        }
    }
}

/// `Split`.
#[derive(Debug)]
struct Split {
    axis: i64,
    split: Option<Vec<i64>>,
    outputs: usize,
}

fn build_split(ctx: &mut NodeCtx<'_>, from_attr: bool) -> Result<Box<dyn Op>, OpError> {
    let axis = ctx.int_or("axis", 0)?;
    let split = if from_attr { ctx.ints("split")? } else { None };
    if let Some(n) = ctx.int("num_outputs")?
        && n as usize != ctx.num_outputs()
    {
        return Err(OpError::attribute(
            "num_outputs",
            format!("is {n} but the node has {} outputs", ctx.num_outputs()),
        ));
    }
    Ok(Box::new(Split { axis, split, outputs: ctx.num_outputs() }))
}

impl Split {
    fn sizes(&self, extent: Option<u64>, split_input: Option<Vec<i64>>) -> Result<Option<Vec<usize>>, OpError> {
        if let Some(s) = self.split.clone().or(split_input) {
            if s.len() != self.outputs || s.iter().any(|&v| v < 0) {
                return Err(OpError::infer(format!("split {s:?} does not fit {} outputs", self.outputs)));
            }
            let sizes: Vec<usize> = s.iter().map(|&v| v as usize).collect();
            if let Some(n) = extent
                && sizes.iter().sum::<usize>() as u64 != n
            {
                return Err(OpError::infer(format!("split {s:?} does not sum to the axis extent {n}")));
            }
            return Ok(Some(sizes));
        }
        let Some(n) = extent else { return Ok(None) };
        let n = n as usize;
        let k = self.outputs.max(1);
        // Equal parts, the last one smaller when the extent does not divide (opset 18 rule).
        let part = n.div_ceil(k);
        Ok(Some((0..k).map(|i| part.min(n.saturating_sub(i * part))).collect()))
    }
}

impl Op for Split {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        Some(gpu::split(self, ctx))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        let axis = normalize_axis(self.axis, x.ty.rank())?;
        let split_input = match inputs.get(1).map(|s| s.const_i64s()) {
            // Sizes known only at run time: the split axis is unknown until shapes are concrete.
            Some(None) => {
                let mut dims = x.ty.dims.clone();
                dims[axis] = unknown_dim();
                return Ok(vec![ValueType::new(x.ty.dtype, dims); self.outputs]);
            }
            Some(Some(v)) => Some(v),
            None => None,
        };
        let sizes = self.sizes(x.ty.dims[axis].as_fixed(), split_input)?;
        Ok((0..self.outputs)
            .map(|i| {
                let mut dims = x.ty.dims.clone();
                dims[axis] = sizes.as_ref().map_or_else(unknown_dim, |s| Dim::Fixed(s[i] as u64));
                ValueType::new(x.ty.dtype, dims)
            })
            .collect())
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let axis = normalize_axis(self.axis, x.dims.len()).map_err(|e| OpError::eval(e.to_string()))?;
        let outer: usize = x.dims[..axis].iter().product();
        let row: usize = x.dims[axis..].iter().product();
        let inner: usize = x.dims[axis + 1..].iter().product();
        let mut offset = 0;
        for out in outputs.iter_mut() {
            let width = out.dims.get(axis).copied().unwrap_or(0) * inner;
            if offset + width > row {
                return Err(OpError::eval("Split outputs exceed the input"));
            }
            same_type!(x.data, &mut out.data, |s, d| {
                for r in 0..outer {
                    d[r * width..(r + 1) * width].copy_from_slice(&s[r * row + offset..r * row + offset + width]);
                }
                Ok(())
            })?;
            offset += width;
        }
        Ok(())
    }
}

/// `Transpose`.
#[derive(Debug)]
struct Transpose {
    perm: Option<Vec<i64>>,
}

/// A Transpose by `perm` and the node attributes that say so, for the passes that insert one.
pub(crate) fn transpose_by(perm: &[usize]) -> (std::sync::Arc<dyn Op>, crate::ops::Attributes) {
    let ints: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
    let attrs = crate::ops::Attributes(vec![("perm".into(), crate::ops::Attribute::Ints(ints.clone()))]);
    (std::sync::Arc::new(Transpose { perm: Some(ints) }), attrs)
}

/// `items` permuted as Transpose permutes extents: item `i` of the result is `items[perm[i]]`.
pub(crate) fn permute<T: Clone>(items: &[T], perm: &[usize]) -> Vec<T> {
    perm.iter().map(|&p| items[p].clone()).collect()
}

/// The permutation from channels-first `[N, C, spatial...]` to channels-last `[N, spatial..., C]`
/// of rank `rank` (at least 2).
pub(crate) fn to_channels_last(rank: usize) -> Vec<usize> {
    [0].into_iter().chain(2..rank).chain([1]).collect()
}

/// The permutation from channels-last back to channels-first, of rank `rank` (at least 2).
pub(crate) fn to_channels_first(rank: usize) -> Vec<usize> {
    [0, rank - 1].into_iter().chain(1..rank - 1).collect()
}

fn build_transpose(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Transpose { perm: ctx.ints("perm")? }))
}

impl Transpose {
    fn perm(&self, rank: usize) -> Result<Vec<usize>, OpError> {
        match &self.perm {
            None => Ok((0..rank).rev().collect()),
            Some(p) if p.len() == rank => normalize_axes(p, rank),
            Some(p) => Err(OpError::infer(format!("perm {p:?} does not fit rank {rank}"))),
        }
    }
}

impl Op for Transpose {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        Some(gpu::transpose(self, ctx))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        let perm = self.perm(x.ty.rank())?;
        Ok(vec![ValueType::new(x.ty.dtype, perm.iter().map(|&p| x.ty.dims[p].clone()).collect())])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let perm = self.perm(x.dims.len()).map_err(|e| OpError::eval(e.to_string()))?;
        let in_strides = strides(x.dims);
        let axes: Vec<AxisSlice> = perm.iter().map(|&p| AxisSlice { start: 0, step: 1, len: x.dims[p] }).collect();
        let permuted: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
        let out = &mut outputs[0];
        same_type!(x.data, &mut out.data, |s, d| {
            if d.len() != s.len() {
                return Err(OpError::eval("Transpose output size differs"));
            }
            gather_strided(s, d, &axes, &permuted);
            Ok(())
        })
    }
}

/// How `Pad` fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PadMode {
    Constant,
    Reflect,
    Edge,
    /// Opset 19: the axis repeats periodically.
    Wrap,
}

/// `Pad`: pads and value from attributes (opset < 11) or inputs 1..=3.
#[derive(Debug)]
struct Pad {
    mode: PadMode,
    attrs: Option<(Vec<i64>, f32)>,
}

fn pad_mode(ctx: &NodeCtx<'_>) -> Result<PadMode, OpError> {
    match ctx.string_or("mode", "constant")?.as_str() {
        "constant" => Ok(PadMode::Constant),
        "reflect" => Ok(PadMode::Reflect),
        "edge" => Ok(PadMode::Edge),
        "wrap" if ctx.opset() >= 19 => Ok(PadMode::Wrap),
        other if ctx.opset() >= 19 => Err(ctx.unsupported("mode", other, "constant, reflect, edge, wrap")),
        other => Err(ctx.unsupported("mode", other, "constant, reflect, edge")),
    }
}

fn build_pad_attrs(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let pads = ctx.ints("pads")?.ok_or_else(|| OpError::attribute("pads", "required"))?;
    let value = ctx.float_or("value", 0.0)?;
    Ok(Box::new(Pad { mode: pad_mode(ctx)?, attrs: Some((pads, value)) }))
}

fn build_pad(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Pad { mode: pad_mode(ctx)?, attrs: None }))
}

impl Pad {
    /// Per-axis `(before, after)` pads for rank `rank`.
    fn pads(&self, rank: usize, pads: Vec<i64>, axes: Option<Vec<i64>>) -> Result<Vec<(i64, i64)>, OpError> {
        let axes = match axes {
            Some(a) => normalize_axes(&a, rank)?,
            None => (0..rank).collect(),
        };
        if pads.len() != 2 * axes.len() {
            return Err(OpError::infer(format!("pads {pads:?} do not fit {} axes", axes.len())));
        }
        let mut out = vec![(0, 0); rank];
        for (k, &a) in axes.iter().enumerate() {
            out[a] = (pads[k], pads[k + axes.len()]);
        }
        Ok(out)
    }

    fn infer_pads(&self, inputs: &InferInputs<'_>) -> Result<Option<Vec<(i64, i64)>>, OpError> {
        let rank = inputs.req(0)?.ty.rank();
        if let Some((p, _)) = &self.attrs {
            return self.pads(rank, p.clone(), None).map(Some);
        }
        let Some(pads) = inputs.req(1)?.const_i64s() else { return Ok(None) };
        let axes = match inputs.get(3) {
            Some(a) => Some(a.const_i64s().ok_or_else(|| OpError::infer("Pad axes must be a constant"))?),
            None => None,
        };
        self.pads(rank, pads, axes).map(Some)
    }
}

impl Op for Pad {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        Some(gpu::pad(self, ctx))
    }
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        let dims = match self.infer_pads(inputs)? {
            Some(pads) => {
                x.ty.dims
                    .iter()
                    .zip(&pads)
                    .map(|(d, &(a, b))| match d.as_fixed() {
                        Some(n) => {
                            let m = n as i64 + a + b;
                            if m < 0 {
                                return Err(OpError::infer(format!("pads {a}, {b} make an axis of {n} negative")));
                            }
                            if self.mode != PadMode::Constant && n == 0 && m > 0 {
                                return Err(OpError::infer("reflect, edge and wrap padding need a non-empty axis"));
                            }
                            Ok(Dim::Fixed(m as u64))
                        }
                        None if a == 0 && b == 0 => Ok(d.clone()),
                        None => Ok(unknown_dim()),
                    })
                    .collect::<Result<_, _>>()?
            }
            None => vec![unknown_dim(); x.ty.rank()],
        };
        Ok(vec![ValueType::new(x.ty.dtype, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let rank = x.dims.len();
        let (pads, value) = match &self.attrs {
            Some((p, v)) => (self.pads(rank, p.clone(), None)?, Some(crate::tensor::Wide::Float(f64::from(*v)))),
            None => {
                let axes = inputs.get(3).map(index_values).transpose()?;
                let pads = self.pads(rank, index_values(inputs.req(1)?)?, axes)?;
                (pads, inputs.get(2).and_then(|v| crate::tensor::first_wide(v.data)))
            }
        };
        let out = &mut outputs[0];
        let od = out.dims;
        if od.len() != rank {
            return Err(OpError::eval("Pad output rank differs"));
        }
        let is = strides(x.dims);
        let mode = self.mode;
        // Maps an output coordinate on axis `a` to the input coordinate, or None for the fill value.
        let source = |a: usize, o: usize| -> Option<usize> {
            let n = x.dims[a] as i64;
            let i = o as i64 - pads[a].0;
            if (0..n).contains(&i) {
                return Some(i as usize);
            }
            match mode {
                PadMode::Constant => None,
                PadMode::Edge => Some(i.clamp(0, n - 1) as usize),
                PadMode::Wrap => Some(i.rem_euclid(n) as usize),
                PadMode::Reflect => {
                    if n == 1 {
                        return Some(0);
                    }
                    let period = 2 * (n - 1);
                    let m = i.rem_euclid(period);
                    Some(if m < n { m } else { period - m } as usize)
                }
            }
        };
        // The fill value as one element of the output's type.
        let mut fill = crate::tensor::Tensor::zeros(out.dtype(), vec![1])?;
        if let Some(v) = value {
            crate::tensor::cast_into(DataRef::F64(&[v.to_f64()]), &mut fill.view_mut().data)?;
        }
        macro_rules! pad_typed {
            ($s:expr, $d:expr, $fill:expr) => {{
                let mut index = vec![0usize; rank];
                for dst in $d.iter_mut() {
                    let mut offset = Some(0usize);
                    for a in 0..rank {
                        offset = match (offset, source(a, index[a])) {
                            (Some(o), Some(i)) => Some(o + i * is[a]),
                            _ => None,
                        };
                    }
                    *dst = match offset {
                        Some(o) => *$s.get(o).ok_or_else(|| OpError::eval("Pad read out of range"))?,
                        None => $fill,
                    };
                    for a in (0..rank).rev() {
                        index[a] += 1;
                        if index[a] < od[a] {
                            break;
                        }
                        index[a] = 0;
                    }
                }
                Ok(())
            }};
        }
        crate::tensor::same_type!(x.data, &mut out.data, |s, d| {
            let fill = crate::tensor::typed_like(s, fill.view().data)?[0];
            pad_typed!(s, d, fill)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{iota, run_op, run_op_outputs, values};
    use crate::ops::{Attribute, Attributes};
    use crate::tensor::Tensor;

    #[test]
    fn slice_with_negative_step_and_clamping() {
        let x = iota(&[2, 4]);
        let (s, e, a, st) = (
            Tensor::from_i64s(vec![-1]),
            Tensor::from_i64s(vec![i64::MIN]),
            Tensor::from_i64s(vec![1]),
            Tensor::from_i64s(vec![-2]),
        );
        let out =
            run_op("Slice", 13, &Attributes::default(), &[Some(&x), Some(&s), Some(&e), Some(&a), Some(&st)]).unwrap();
        assert_eq!(out[0].dims(), &[2, 2]);
        assert_eq!(values(&out[0]), vec![3.0, 1.0, 7.0, 5.0]);
    }

    #[test]
    fn split_gather_and_out_of_range_indices() {
        let x = iota(&[2, 3]);
        let attrs = Attributes(vec![("axis".into(), Attribute::Int(1))]);
        let split = Tensor::from_i64s(vec![1, 2]);
        let parts = run_op_outputs("Split", 13, &attrs, &[Some(&x), Some(&split)], 2).unwrap();
        assert_eq!(values(&parts[1]), vec![1.0, 2.0, 4.0, 5.0]);

        let idx = Tensor::from_i64s(vec![-1, 0]);
        let g = run_op("Gather", 13, &attrs, &[Some(&x), Some(&idx)]).unwrap();
        assert_eq!(values(&g[0]), vec![2.0, 0.0, 5.0, 3.0]);
        let bad = Tensor::from_i64s(vec![3]);
        assert!(run_op("Gather", 13, &attrs, &[Some(&x), Some(&bad)]).is_err());
    }

    #[test]
    fn transpose_and_pad_modes() {
        let x = iota(&[2, 3]);
        let t = run_op("Transpose", 13, &Attributes::default(), &[Some(&x)]).unwrap();
        assert_eq!(t[0].dims(), &[3, 2]);
        assert_eq!(values(&t[0]), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);

        let row = iota(&[3]);
        let pads = Tensor::from_i64s(vec![2, 1]);
        for (mode, want) in [
            ("constant", vec![0.0, 0.0, 0.0, 1.0, 2.0, 0.0]),
            ("edge", vec![0.0, 0.0, 0.0, 1.0, 2.0, 2.0]),
            ("reflect", vec![2.0, 1.0, 0.0, 1.0, 2.0, 1.0]),
            ("wrap", vec![1.0, 2.0, 0.0, 1.0, 2.0, 0.0]),
        ] {
            let attrs = Attributes(vec![("mode".into(), Attribute::String(mode.into()))]);
            let p = run_op("Pad", 19, &attrs, &[Some(&row), Some(&pads)]).unwrap();
            assert_eq!(values(&p[0]), want, "{mode}");
        }
        // Wrap is opset 19's; an unknown mode is refused naming the value.
        let wrap = Attributes(vec![("mode".into(), Attribute::String(b"wrap".to_vec()))]);
        assert!(matches!(
            run_op("Pad", 18, &wrap, &[Some(&row), Some(&pads)]),
            Err(crate::error::OpError::Unsupported { .. })
        ));
    }
}
