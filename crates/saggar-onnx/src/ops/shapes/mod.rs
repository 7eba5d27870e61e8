//! Shape ops: Shape, Size ([`size`]), Reshape, Flatten, Unsqueeze, Squeeze, Expand, Concat.
//!
//! Most of them only move or repeat elements; their inference carries symbolic extents through
//! (`dims_value`), which is what lets the Shape/Gather/Concat/Reshape chains of exporters keep a
//! symbolic batch or sequence length at import.

pub(crate) mod gpu;
mod size;

use saggar_shape::{DType, Dim};

use self::gpu::ConcatKernel;
use crate::ops::shape_util::{broadcast_dims, broadcast_strides, for_each_broadcast, normalize_axes, normalize_axis};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpEntry, OpError, SymInt, UNKNOWN_DIM, ValueType, unknown_dim};
use crate::tensor::{TensorMut, same_type};

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "Shape", since: 1, until: 14, build: |_| Ok(Box::new(ShapeOp { start: 0, end: None })) },
    OpEntry { op_type: "Shape", since: 15, until: 24, build: build_shape },
    OpEntry { op_type: "Reshape", since: 5, until: 13, build: |_| Ok(Box::new(Reshape { allow_zero: false })) },
    OpEntry { op_type: "Reshape", since: 14, until: 24, build: build_reshape },
    OpEntry { op_type: "Flatten", since: 1, until: 24, build: build_flatten },
    OpEntry { op_type: "Unsqueeze", since: 1, until: 12, build: |c| build_axes_op(c, true, true) },
    OpEntry { op_type: "Unsqueeze", since: 13, until: 24, build: |c| build_axes_op(c, true, false) },
    OpEntry { op_type: "Squeeze", since: 1, until: 12, build: |c| build_axes_op(c, false, true) },
    OpEntry { op_type: "Squeeze", since: 13, until: 24, build: |c| build_axes_op(c, false, false) },
    OpEntry { op_type: "Expand", since: 8, until: 24, build: |_| Ok(Box::new(Expand)) },
    OpEntry { op_type: "Concat", since: 4, until: 24, build: build_concat },
    OpEntry { op_type: "Size", since: 1, until: 24, build: |_| Ok(Box::new(size::Size)) },
];

/// Largest number of elements a shape vector may hold (a rank), so a hostile `Shape`/`Range`
/// chain cannot make inference allocate without bound.
pub(crate) const MAX_RANK: usize = 64;

fn sym_dims(dims: &[Dim]) -> Vec<SymInt> {
    dims.iter().map(SymInt::from_dim).collect()
}

/// Copies the input to the output unchanged (same element count and type).
pub(crate) fn copy_through(inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
    let x = inputs.req(0)?;
    outputs[0].copy_from(x)
}

/// `Shape`, optionally sliced by `start` / `end` (opset 15).
#[derive(Debug)]
struct ShapeOp {
    start: i64,
    end: Option<i64>,
}

fn build_shape(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(ShapeOp { start: ctx.int_or("start", 0)?, end: ctx.int("end")? }))
}

impl ShapeOp {
    fn range(&self, rank: usize) -> (usize, usize) {
        let clamp = |v: i64| {
            let r = rank as i64;
            (if v < 0 { v + r } else { v }).clamp(0, r) as usize
        };
        let start = clamp(self.start);
        let end = clamp(self.end.unwrap_or(rank as i64));
        (start, end.max(start))
    }
}

impl Op for ShapeOp {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (s, e) = self.range(inputs.req(0)?.ty.rank());
        Ok(vec![ValueType::fixed(DType::I64, &[e - s])])
    }

    fn dims_value(&self, inputs: &InferInputs<'_>) -> Option<Vec<SymInt>> {
        let dims = &inputs.req(0).ok()?.ty.dims;
        let (s, e) = self.range(dims.len());
        Some(sym_dims(&dims[s..e]))
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let dims = inputs.req(0)?.dims;
        let (s, e) = self.range(dims.len());
        let out = outputs[0].i64s()?;
        for (o, &d) in out.iter_mut().zip(&dims[s..e]) {
            *o = i64::try_from(d).map_err(|_| OpError::eval("extent overflows i64"))?;
        }
        Ok(())
    }
}

/// `Reshape`.
#[derive(Debug)]
struct Reshape {
    allow_zero: bool,
}

fn build_reshape(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Reshape { allow_zero: ctx.int_or("allowzero", 0)? != 0 }))
}

/// The product of `dims` when every extent is fixed.
fn fixed_product(dims: &[Dim]) -> Option<u64> {
    dims.iter().try_fold(1u64, |n, d| n.checked_mul(d.as_fixed()?))
}

/// A dimension for the product of `dims`: fixed when all are, the one symbol when the others are
/// all 1, else unknown.
fn product_dim(dims: &[Dim]) -> Dim {
    if let Some(n) = fixed_product(dims) {
        return Dim::Fixed(n);
    }
    let symbolic: Vec<&Dim> = dims.iter().filter(|d| d.as_fixed() != Some(1)).collect();
    match symbolic.as_slice() {
        [one] if one.as_fixed().is_none() => (*one).clone(),
        _ => unknown_dim(),
    }
}

impl Reshape {
    /// The output dimensions for `input` reshaped to `target` (Reshape's rules for `0` and `-1`).
    fn target_dims(&self, input: &[Dim], target: &[SymInt]) -> Result<Vec<Dim>, OpError> {
        let mut out = Vec::with_capacity(target.len());
        let mut infer_at = None;
        for (i, t) in target.iter().enumerate() {
            out.push(match t {
                SymInt::Int(-1) => {
                    if infer_at.replace(i).is_some() {
                        return Err(OpError::infer("Reshape target has more than one -1"));
                    }
                    unknown_dim()
                }
                SymInt::Int(0) if !self.allow_zero => input
                    .get(i)
                    .cloned()
                    .ok_or_else(|| OpError::infer(format!("Reshape target copies axis {i}, which the input lacks")))?,
                SymInt::Int(v) if *v < 0 => return Err(OpError::infer(format!("Reshape target has extent {v}"))),
                other => other.to_dim().unwrap_or_else(unknown_dim),
            });
        }
        let input_total = fixed_product(input);
        if let Some(i) = infer_at {
            let rest: Vec<Dim> = out.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, d)| d.clone()).collect();
            out[i] = match (input_total, fixed_product(&rest)) {
                (Some(total), Some(part)) if part != 0 && total % part == 0 => Dim::Fixed(total / part),
                (Some(_), Some(part)) => {
                    return Err(OpError::infer(format!(
                        "cannot reshape {} elements with -1 next to extents of product {part}",
                        input_total.unwrap_or(0)
                    )));
                }
                _ => cancel_symbols(input, &rest),
            };
        } else if let (Some(a), Some(b)) = (input_total, fixed_product(&out))
            && a != b
        {
            return Err(OpError::infer(format!("cannot reshape {a} elements to {b}")));
        }
        Ok(out)
    }
}

/// The extent left when the dimensions `part` are divided out of `whole`, symbolically: each extent
/// of `part` is cancelled against an equal one of `whole`, then fixed extents divide.
fn cancel_symbols(whole: &[Dim], part: &[Dim]) -> Dim {
    let mut remaining: Vec<Dim> = whole.to_vec();
    let mut divisor = 1u64;
    for d in part {
        if let Some(pos) = remaining.iter().position(|r| r == d && r.symbol() != Some(UNKNOWN_DIM)) {
            remaining.remove(pos);
        } else if let Some(v) = d.as_fixed() {
            divisor = divisor.saturating_mul(v);
        } else {
            return unknown_dim();
        }
    }
    let fixed: u64 = remaining.iter().filter_map(Dim::as_fixed).product();
    let symbols: Vec<&Dim> = remaining.iter().filter(|d| d.as_fixed().is_none()).collect();
    if divisor == 0 || !fixed.is_multiple_of(divisor) {
        return unknown_dim();
    }
    match (symbols.as_slice(), fixed / divisor) {
        ([], n) => Dim::Fixed(n),
        ([s], 1) => (*s).clone(),
        _ => unknown_dim(),
    }
}

impl Op for Reshape {
    fn is_view(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (data, shape) = (inputs.req(0)?, inputs.req(1)?);
        if !matches!(shape.ty.dtype, DType::I64) || shape.ty.rank() != 1 {
            return Err(OpError::infer("Reshape's shape must be a 1-D int64 tensor"));
        }
        let dims = match shape.sym_ints() {
            Some(target) => self.target_dims(&data.ty.dims, &target)?,
            None => {
                let n = shape.ty.dims[0].as_fixed().filter(|&n| n as usize <= MAX_RANK).ok_or_else(|| {
                    OpError::infer("Reshape's target rank is not known (the shape input is not a known 1-D tensor)")
                })?;
                vec![unknown_dim(); n as usize]
            }
        };
        Ok(vec![ValueType::new(data.ty.dtype, dims)])
    }

    fn dims_value(&self, inputs: &InferInputs<'_>) -> Option<Vec<SymInt>> {
        // Reshaping a shape vector (to a scalar or a 1-D of the same length) keeps its elements.
        inputs.req(0).ok()?.sym_ints()
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        copy_through(inputs, outputs)
    }
}

/// `Flatten`.
#[derive(Debug)]
struct Flatten {
    axis: i64,
}

fn build_flatten(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Flatten { axis: ctx.int_or("axis", 1)? }))
}

impl Op for Flatten {
    fn is_view(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        let rank = x.ty.rank();
        let axis = if self.axis == rank as i64 { rank } else { normalize_axis(self.axis, rank.max(1))? };
        let dims = vec![product_dim(&x.ty.dims[..axis]), product_dim(&x.ty.dims[axis..])];
        Ok(vec![ValueType::new(x.ty.dtype, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        copy_through(inputs, outputs)
    }
}

/// `Unsqueeze` or `Squeeze`, axes from an attribute (opset < 13) or input 1.
#[derive(Debug)]
struct AxesOp {
    unsqueeze: bool,
    axes: Option<Vec<i64>>,
}

fn build_axes_op(ctx: &mut NodeCtx<'_>, unsqueeze: bool, from_attr: bool) -> Result<Box<dyn Op>, OpError> {
    let axes = if from_attr { ctx.ints("axes")? } else { None };
    if unsqueeze && from_attr && axes.is_none() {
        return Err(OpError::attribute("axes", "required"));
    }
    Ok(Box::new(AxesOp { unsqueeze, axes }))
}

impl AxesOp {
    fn axes(&self, inputs: &InferInputs<'_>) -> Result<Option<Vec<i64>>, OpError> {
        if let Some(a) = &self.axes {
            return Ok(Some(a.clone()));
        }
        match inputs.get(1) {
            None => Ok(None),
            Some(input) => input.const_i64s().map(Some).ok_or_else(|| OpError::infer("axes must be a constant")),
        }
    }

    fn out_dims(&self, dims: &[Dim], axes: Option<Vec<i64>>) -> Result<Vec<Dim>, OpError> {
        if self.unsqueeze {
            let axes = axes.ok_or_else(|| OpError::infer("Unsqueeze needs axes"))?;
            let rank = dims.len() + axes.len();
            let axes = normalize_axes(&axes, rank)?;
            let mut src = dims.iter();
            Ok((0..rank)
                .map(|i| if axes.contains(&i) { Dim::Fixed(1) } else { src.next().cloned().unwrap_or(Dim::Fixed(1)) })
                .collect())
        } else {
            let axes = match axes {
                Some(a) => normalize_axes(&a, dims.len())?,
                None => {
                    // An extent import could not know (an unnamed symbol: a value input's, which
                    // every compile binds and infers again) is assumed not 1 until then; a named
                    // symbol (a batch) may be 1 in any request, so it is refused.
                    if dims.iter().any(|d| d.as_fixed().is_none() && !crate::ops::shape_util::is_unnamed(d)) {
                        return Err(OpError::infer(
                            "Squeeze without axes needs every extent known: give the axes, or fix the symbolic extents",
                        ));
                    }
                    (0..dims.len()).filter(|&i| dims[i].as_fixed() == Some(1)).collect()
                }
            };
            for &a in &axes {
                if let Some(v) = dims[a].as_fixed()
                    && v != 1
                {
                    return Err(OpError::infer(format!("Squeeze axis {a} has extent {v}, not 1")));
                }
            }
            Ok(dims.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, d)| d.clone()).collect())
        }
    }
}

impl Op for AxesOp {
    fn is_view(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        if self.axes.is_none()
            && let Some(axes) = inputs.get(1).filter(|a| a.const_i64s().is_none())
        {
            // Axes known only at run time (a model input, whose values key the program): the rank
            // is known, the extents are not.
            let n = axes.ty.dims.first().and_then(Dim::as_fixed).filter(|&n| n as usize <= MAX_RANK);
            let n = n.ok_or_else(|| OpError::infer("the count of Squeeze or Unsqueeze axes is not known"))? as usize;
            let rank = if self.unsqueeze { Some(x.ty.rank() + n) } else { x.ty.rank().checked_sub(n) };
            let rank =
                rank.ok_or_else(|| OpError::infer(format!("Squeeze of {n} axes of a rank {} input", x.ty.rank())))?;
            return Ok(vec![ValueType::new(x.ty.dtype, vec![unknown_dim(); rank])]);
        }
        Ok(vec![ValueType::new(x.ty.dtype, self.out_dims(&x.ty.dims, self.axes(inputs)?)?)])
    }

    fn dims_value(&self, inputs: &InferInputs<'_>) -> Option<Vec<SymInt>> {
        inputs.req(0).ok()?.sym_ints()
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        copy_through(inputs, outputs)
    }
}

/// `Expand`: broadcast to a shape.
#[derive(Debug)]
struct Expand;

impl Op for Expand {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::data_movement::gpu::copy_launch;
        use crate::ops::gpu::{GpuNode, Slot, broadcast, contiguous};
        Some((|| {
            let (x, out) = (ctx.input(0)?, ctx.output(0)?);
            let launch = copy_launch(
                x.dtype.size_bytes(),
                &out.dims,
                (Slot::In(0), 0, &broadcast(&x.dims, &out.dims)),
                (Slot::Out(0), 0, &contiguous(&out.dims)),
            );
            Ok(GpuNode::Launches(vec![launch]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (x, shape) = (inputs.req(0)?, inputs.req(1)?);
        let target = match shape.as_dims() {
            Some(t) => t,
            None => {
                let n = shape.ty.dims.first().and_then(Dim::as_fixed).filter(|&n| n as usize <= MAX_RANK);
                vec![unknown_dim(); n.ok_or_else(|| OpError::infer("Expand's shape length is not known"))? as usize]
            }
        };
        Ok(vec![ValueType::new(x.ty.dtype, broadcast_dims(&x.ty.dims, &target)?)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let out = &mut outputs[0];
        let od = out.dims;
        if x.dims.len() > od.len() {
            return Err(OpError::eval("Expand input rank exceeds the output rank"));
        }
        let sx = broadcast_strides(x.dims, od.len());
        same_type!(x.data, &mut out.data, |s, d| {
            for_each_broadcast(od, [&sx], |i, [o]| d[i] = s[o]);
            Ok(())
        })
    }
}

/// `Concat`.
#[derive(Debug)]
struct Concat {
    axis: i64,
}

fn build_concat(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Concat { axis: ctx.int("axis")?.ok_or_else(|| OpError::attribute("axis", "required"))? }))
}

impl Op for Concat {
    fn extents_from_shapes(&self) -> bool {
        true
    }

    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, ext, numel};
        Some((|| {
            // One launch for every input: `[outer, len_p, inner]` pieces, contiguous, into the
            // output's `[outer, Σ len_p, inner]`.
            let out = ctx.output(0)?;
            let axis = normalize_axis(self.axis, out.dims.len())?;
            let outer = numel(&out.dims[..axis]) as i64;
            let inner = numel(&out.dims[axis + 1..]) as i64;
            let mut offsets = vec![0i64];
            let mut slots = Vec::new();
            for (i, x) in ctx.inputs.iter().enumerate() {
                let Some(x) = x else { continue };
                offsets.push(offsets[offsets.len() - 1] + ext(x.dims[axis]));
                slots.push(Slot::In(i));
            }
            let inputs = u16::try_from(slots.len()).map_err(|_| OpError::eval("Concat of more than 65535 inputs"))?;
            slots.push(Slot::Out(0));
            let mut meta = vec![outer, inner, offsets[offsets.len() - 1]];
            meta.extend(offsets);
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                ConcatKernel { elem_bytes: out.dtype.size_bytes() as u8, inputs },
                meta,
                Work::Elements(numel(&out.dims)),
                slots,
            )]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let first = inputs.req(0)?;
        let rank = first.ty.rank();
        let axis = normalize_axis(self.axis, rank)?;
        let mut dims = first.ty.dims.clone();
        let mut total: Option<u64> = dims[axis].as_fixed();
        for x in inputs.present().skip(1) {
            if x.ty.dtype != first.ty.dtype || x.ty.rank() != rank {
                return Err(OpError::infer(format!("Concat inputs differ: {} and {}", first.ty, x.ty)));
            }
            for (i, (a, b)) in dims.iter_mut().zip(&x.ty.dims).enumerate() {
                if i == axis {
                    continue;
                }
                match (a.as_fixed(), b.as_fixed()) {
                    (Some(p), Some(q)) if p != q => {
                        return Err(OpError::infer(format!("Concat inputs differ on axis {i}: {p} vs {q}")));
                    }
                    (None, Some(_)) => *a = b.clone(),
                    _ => {}
                }
            }
            total = total.and_then(|t| t.checked_add(x.ty.dims[axis].as_fixed()?));
        }
        let single = inputs.present().count() == 1;
        dims[axis] = match total {
            Some(t) => Dim::Fixed(t),
            None if single => first.ty.dims[axis].clone(),
            None => unknown_dim(),
        };
        Ok(vec![ValueType::new(first.ty.dtype, dims)])
    }

    fn dims_value(&self, inputs: &InferInputs<'_>) -> Option<Vec<SymInt>> {
        let mut out = Vec::new();
        for x in inputs.present() {
            if x.ty.rank() > 1 {
                return None;
            }
            out.extend(x.sym_ints()?);
            if out.len() > MAX_RANK {
                return None;
            }
        }
        Some(out)
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let out = &mut outputs[0];
        let axis = normalize_axis(self.axis, out.dims.len()).map_err(|e| OpError::eval(e.to_string()))?;
        let outer: usize = out.dims[..axis].iter().product();
        let out_row: usize = out.dims[axis..].iter().product();
        let mut offset = 0;
        for i in 0..inputs.len() {
            let Some(x) = inputs.get(i) else { continue };
            let row: usize = x.dims.get(axis..).map_or(0, |d| d.iter().product());
            if offset + row > out_row || x.len() != outer * row {
                return Err(OpError::eval("Concat input does not fit the output"));
            }
            same_type!(x.data, &mut out.data, |s, d| {
                for r in 0..outer {
                    d[r * out_row + offset..r * out_row + offset + row].copy_from_slice(&s[r * row..(r + 1) * row]);
                }
                Ok(())
            })?;
            offset += row;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::{iota, run_op};
    use crate::ops::{Attribute, Attributes, InferInput};
    use crate::tensor::{Tensor, TensorData};

    #[test]
    fn reshape_with_zero_and_minus_one() {
        let x = iota(&[2, 3, 4]);
        let shape = Tensor::from_i64s(vec![0, -1]);
        let out = run_op("Reshape", 14, &Attributes::default(), &[Some(&x), Some(&shape)]).unwrap();
        assert_eq!(out[0].dims(), &[2, 12]);
        let bad = Tensor::from_i64s(vec![5, -1]);
        assert!(run_op("Reshape", 14, &Attributes::default(), &[Some(&x), Some(&bad)]).is_err());
    }

    #[test]
    fn reshape_keeps_symbols_through_a_shape_chain() {
        let ty = ValueType::new(DType::F32, vec![Dim::symbolic("batch"), Dim::symbolic("seq"), Dim::Fixed(64)]);
        let target = [SymInt::Sym("batch".into()), SymInt::Sym("seq".into()), SymInt::Int(4), SymInt::Int(-1)];
        let shape_ty = ValueType::fixed(DType::I64, &[4]);
        let inputs = [
            Some(InferInput { ty: &ty, value: None, dims_value: None }),
            Some(InferInput { ty: &shape_ty, value: None, dims_value: Some(&target) }),
        ];
        let out = Reshape { allow_zero: false }.infer(&InferInputs::new(&inputs)).unwrap();
        assert_eq!(out[0].dims, vec![Dim::symbolic("batch"), Dim::symbolic("seq"), Dim::Fixed(4), Dim::Fixed(16)]);
    }

    #[test]
    fn concat_unsqueeze_squeeze_expand_flatten() {
        let a = iota(&[2, 1]);
        let b = iota(&[2, 2]);
        let attrs = Attributes(vec![("axis".into(), Attribute::Int(1))]);
        let c = run_op("Concat", 13, &attrs, &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(c[0].data(), &TensorData::F32(vec![0.0, 0.0, 1.0, 1.0, 2.0, 3.0]));
        let axes = Tensor::from_i64s(vec![0, -1]);
        let u = run_op("Unsqueeze", 13, &Attributes::default(), &[Some(&a), Some(&axes)]).unwrap();
        assert_eq!(u[0].dims(), &[1, 2, 1, 1]);
        let s = run_op("Squeeze", 13, &Attributes::default(), &[Some(&u[0])]).unwrap();
        assert_eq!(s[0].dims(), &[2]);
        let shape = Tensor::from_i64s(vec![2, 3]);
        let e = run_op("Expand", 13, &Attributes::default(), &[Some(&a), Some(&shape)]).unwrap();
        assert_eq!(e[0].data(), &TensorData::F32(vec![0.0, 0.0, 0.0, 1.0, 1.0, 1.0]));
        let f = run_op("Flatten", 13, &Attributes::default(), &[Some(&iota(&[2, 3, 4]))]).unwrap();
        assert_eq!(f[0].dims(), &[2, 12]);
    }

    #[test]
    fn squeeze_without_axes_keeps_extents_import_cannot_know_and_refuses_named_ones() {
        let op = AxesOp { unsqueeze: false, axes: None };
        let fresh = crate::ops::unknown_dim();
        let dims = [fresh.clone(), Dim::Fixed(1), Dim::Fixed(3)];
        assert_eq!(op.out_dims(&dims, None).unwrap(), vec![fresh, Dim::Fixed(3)]);
        let named = [Dim::symbolic("batch"), Dim::Fixed(1)];
        assert!(op.out_dims(&named, None).unwrap_err().to_string().contains("give the axes"));
    }

    #[test]
    fn shape_slices_and_unknown_attributes_are_reported() {
        let x = iota(&[2, 3, 4]);
        let attrs = Attributes(vec![("start".into(), Attribute::Int(-2))]);
        let s = run_op("Shape", 15, &attrs, &[Some(&x)]).unwrap();
        assert_eq!(s[0], Tensor::from_i64s(vec![3, 4]));
        let odd = Attributes(vec![("frobnicate".into(), Attribute::Int(1))]);
        assert!(matches!(run_op("Identity", 13, &odd, &[Some(&x)]), Err(OpError::Unsupported { .. })));
    }
}
