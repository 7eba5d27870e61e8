//! Reductions over a set of axes (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
//! ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp; `axes` an attribute in early
//! opsets and an input later), ArgMax / ArgMin along one axis, and the running sum CumSum
//! ([`cumsum`]).

mod cumsum;
pub(crate) mod gpu;

use saggar_shape::{DType, Dim};

use self::gpu::ArgKernel;
use crate::ops::shape_util::{for_each_broadcast, normalize_axes, normalize_axis, strides};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpEntry, OpError, ValueType, unknown_dim};
use crate::tensor::{
    COMPUTE_DTYPES, DataMut, DataRef, Float, NUMERIC_DTYPES, Number, TensorMut, each_number, same_number,
};

/// The ops of this family. Axes moved from attribute to input at opset 13 for ReduceSum and at 18
/// for the others.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "ReduceSum", since: 1, until: 12, build: |c| build(c, ReduceOp::Sum, false) },
    OpEntry { op_type: "ReduceSum", since: 13, until: 24, build: |c| build(c, ReduceOp::Sum, true) },
    OpEntry { op_type: "ReduceMean", since: 1, until: 17, build: |c| build(c, ReduceOp::Mean, false) },
    OpEntry { op_type: "ReduceMean", since: 18, until: 24, build: |c| build(c, ReduceOp::Mean, true) },
    OpEntry { op_type: "ReduceMax", since: 1, until: 17, build: |c| build(c, ReduceOp::Max, false) },
    OpEntry { op_type: "ReduceMax", since: 18, until: 24, build: |c| build(c, ReduceOp::Max, true) },
    OpEntry { op_type: "ReduceMin", since: 1, until: 17, build: |c| build(c, ReduceOp::Min, false) },
    OpEntry { op_type: "ReduceMin", since: 18, until: 24, build: |c| build(c, ReduceOp::Min, true) },
    OpEntry { op_type: "ReduceProd", since: 1, until: 17, build: |c| build(c, ReduceOp::Prod, false) },
    OpEntry { op_type: "ReduceProd", since: 18, until: 24, build: |c| build(c, ReduceOp::Prod, true) },
    OpEntry { op_type: "ReduceL1", since: 1, until: 17, build: |c| build(c, ReduceOp::L1, false) },
    OpEntry { op_type: "ReduceL1", since: 18, until: 24, build: |c| build(c, ReduceOp::L1, true) },
    OpEntry { op_type: "ReduceL2", since: 1, until: 17, build: |c| build(c, ReduceOp::L2, false) },
    OpEntry { op_type: "ReduceL2", since: 18, until: 24, build: |c| build(c, ReduceOp::L2, true) },
    OpEntry { op_type: "ReduceSumSquare", since: 1, until: 17, build: |c| build(c, ReduceOp::SumSquare, false) },
    OpEntry { op_type: "ReduceSumSquare", since: 18, until: 24, build: |c| build(c, ReduceOp::SumSquare, true) },
    OpEntry { op_type: "ReduceLogSum", since: 1, until: 17, build: |c| build(c, ReduceOp::LogSum, false) },
    OpEntry { op_type: "ReduceLogSum", since: 18, until: 24, build: |c| build(c, ReduceOp::LogSum, true) },
    OpEntry { op_type: "ReduceLogSumExp", since: 1, until: 17, build: |c| build(c, ReduceOp::LogSumExp, false) },
    OpEntry { op_type: "ReduceLogSumExp", since: 18, until: 24, build: |c| build(c, ReduceOp::LogSumExp, true) },
    OpEntry { op_type: "ArgMax", since: 1, until: 24, build: |c| build_arg(c, true) },
    OpEntry { op_type: "ArgMin", since: 1, until: 24, build: |c| build_arg(c, false) },
    OpEntry { op_type: "CumSum", since: 11, until: 24, build: cumsum::build_cumsum },
];

/// What a reduction computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    SumSquare,
    LogSum,
    LogSumExp,
}

impl ReduceOp {
    /// The element types the reduction takes (and gives).
    fn dtypes(self) -> &'static [DType] {
        match self {
            ReduceOp::Max | ReduceOp::Min => &COMPUTE_DTYPES,
            ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Prod | ReduceOp::L1 | ReduceOp::SumSquare => &NUMERIC_DTYPES,
            ReduceOp::L2 | ReduceOp::LogSum | ReduceOp::LogSumExp => &[DType::F32, DType::F64],
        }
    }
}

/// One reduction node.
#[derive(Debug)]
struct Reduce {
    kind: ReduceOp,
    /// The `axes` attribute (attribute opsets).
    attr_axes: Option<Vec<i64>>,
    /// Axes come from input 1.
    axes_input: bool,
    keepdims: bool,
    /// With no axes, return the input unchanged instead of reducing every axis.
    noop_with_empty_axes: bool,
}

fn flag(ctx: &NodeCtx<'_>, name: &str, default: i64) -> Result<bool, OpError> {
    match ctx.int_or(name, default)? {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(OpError::attribute(name, format!("must be 0 or 1, found {other}"))),
    }
}

fn build(ctx: &mut NodeCtx<'_>, kind: ReduceOp, axes_input: bool) -> Result<Box<dyn Op>, OpError> {
    let attr_axes = if axes_input { None } else { ctx.ints("axes")? };
    let keepdims = flag(ctx, "keepdims", 1)?;
    let noop_with_empty_axes = flag(ctx, "noop_with_empty_axes", 0)?;
    Ok(Box::new(Reduce { kind, attr_axes, axes_input, keepdims, noop_with_empty_axes }))
}

/// The axes a reduction applies to.
enum Axes {
    /// These (normalized, possibly empty meaning "all" or "none" per `noop_with_empty_axes`).
    Known(Vec<usize>),
    /// Given by a non-constant input of this many elements (if known).
    Unknown(Option<usize>),
}

impl Reduce {
    /// The reduced axes, or `None` for "return the input unchanged".
    fn resolve(&self, axes: Vec<usize>, rank: usize) -> Option<Vec<usize>> {
        if axes.is_empty() {
            if self.noop_with_empty_axes { None } else { Some((0..rank).collect()) }
        } else {
            Some(axes)
        }
    }

    fn out_dims<T: Clone>(&self, dims: &[T], reduced: &[usize], one: T) -> Vec<T> {
        let mut out = Vec::with_capacity(dims.len());
        for (i, d) in dims.iter().enumerate() {
            if !reduced.contains(&i) {
                out.push(d.clone());
            } else if self.keepdims {
                out.push(one.clone());
            }
        }
        out
    }
}

impl Op for Reduce {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::data_movement::gpu::contiguous_copy;
        use gpu::reduce_launch;
        Some((|| {
            let x = ctx.input(0)?;
            // Max and Min of bools (0 or 1) are Or and And: the u8 kernel over their bytes.
            let dtype = if x.dtype == DType::Bool { DType::U8 } else { x.dtype };
            let axes = match (&self.attr_axes, ctx.infer.get(1)) {
                (Some(a), _) => a.clone(),
                (None, Some(a)) if self.axes_input => {
                    a.const_i64s().ok_or_else(|| OpError::eval("reduction axes must be constant"))?
                }
                _ => Vec::new(),
            };
            let axes = normalize_axes(&axes, x.dims.len())?;
            let Some(reduced) = self.resolve(axes, x.dims.len()) else { return contiguous_copy(ctx) };
            Ok(reduce_launch(self.kind, dtype, &x.dims, &reduced))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        if !self.kind.dtypes().contains(&x.dtype) {
            return Err(OpError::infer(format!("{:?} reduction does not take {} inputs", self.kind, x.dtype)));
        }
        let axes = match (&self.attr_axes, inputs.get(1)) {
            (Some(a), _) => Axes::Known(normalize_axes(a, x.rank())?),
            (None, Some(input)) if self.axes_input => match input.const_i64s() {
                Some(a) => Axes::Known(normalize_axes(&a, x.rank())?),
                None => Axes::Unknown(input.ty.dims.first().and_then(Dim::as_fixed).map(|n| n as usize)),
            },
            _ => Axes::Known(Vec::new()),
        };
        let dims = match axes {
            Axes::Known(a) => match self.resolve(a, x.rank()) {
                None => x.dims.clone(),
                Some(reduced) => self.out_dims(&x.dims, &reduced, Dim::Fixed(1)),
            },
            // Which axes is not known until the axes input is folded: each output extent is unknown.
            Axes::Unknown(_) if self.keepdims => vec![unknown_dim(); x.rank()],
            Axes::Unknown(Some(n)) if n > 0 && n <= x.rank() => vec![unknown_dim(); x.rank() - n],
            Axes::Unknown(_) => {
                return Err(OpError::infer("the reduction's axes must be constant when keepdims is 0"));
            }
        };
        Ok(vec![ValueType::new(x.dtype, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let xv = inputs.req(0)?;
        let in_dims = xv.dims;
        if in_dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) != Some(xv.len()) {
            return Err(OpError::eval("reduction input data does not match its shape"));
        }
        let axes = match (&self.attr_axes, inputs.get(1)) {
            (Some(a), _) => a.clone(),
            (None, Some(a)) if self.axes_input => {
                a.to_i64s().ok_or_else(|| OpError::eval("reduction axes must be integers"))?
            }
            _ => Vec::new(),
        };
        let axes = normalize_axes(&axes, in_dims.len()).map_err(|e| OpError::eval(e.to_string()))?;
        let out = &mut outputs[0];
        let Some(reduced) = self.resolve(axes, in_dims.len()) else {
            return out.copy_from(xv);
        };
        if out.dims.iter().ne(self.out_dims(in_dims, &reduced, 1).iter()) {
            return Err(OpError::eval(format!("reduction output {:?} does not match the input", out.dims)));
        }
        // Each input element's offset in the output: the reduced axes do not move it.
        let kept: Vec<usize> =
            in_dims.iter().enumerate().map(|(i, &d)| if reduced.contains(&i) { 1 } else { d }).collect();
        let mut out_strides = strides(&kept);
        for &a in &reduced {
            out_strides[a] = 0;
        }
        let count = reduced.iter().map(|&a| in_dims[a]).product::<usize>();
        let walk =
            |f: &mut dyn FnMut(usize, usize)| for_each_broadcast(in_dims, [out_strides.as_slice()], |i, [o]| f(i, o));
        let kind = self.kind;
        match (kind, xv.data, &mut out.data) {
            (ReduceOp::L2 | ReduceOp::LogSum | ReduceOp::LogSumExp, DataRef::F32(x), DataMut::F32(y)) => {
                reduce_floats(kind, x, y, walk)
            }
            (ReduceOp::L2 | ReduceOp::LogSum | ReduceOp::LogSumExp, DataRef::F64(x), DataMut::F64(y)) => {
                reduce_floats(kind, x, y, walk)
            }
            (ReduceOp::Max | ReduceOp::Min, DataRef::Bool(x), DataMut::Bool(y)) => {
                let max = kind == ReduceOp::Max;
                y.fill(u8::from(!max));
                walk(&mut |i, o| y[o] = if max { y[o] | x[i] } else { y[o] & x[i] });
                Ok(())
            }
            (_, x, y) => same_number!(x, y, |x, y| reduce_numbers(kind, x, y, count, walk), _ => {
                Err(OpError::eval(format!("{kind:?} reduction of {} elements is not supported", xv.dtype())))
            }),
        }
    }
}

/// The reductions every numeric type has (wrapping integer arithmetic; Mean divides integers toward
/// zero; Max and Min propagate NaN).
fn reduce_numbers<T: Number>(
    kind: ReduceOp,
    x: &[T],
    y: &mut [T],
    count: usize,
    walk: impl Fn(&mut dyn FnMut(usize, usize)),
) -> Result<(), OpError> {
    #[allow(clippy::eq_op)] // `v != v` is NaN's test, generic over floats and integers
    let (init, step): (T, fn(T, T) -> T) = match kind {
        ReduceOp::Sum | ReduceOp::Mean => (T::ZERO, T::add),
        ReduceOp::Prod => (T::ONE, T::mul),
        ReduceOp::Max => (T::LOWEST, |a, v| if v > a || v != v { v } else { a }),
        ReduceOp::Min => (T::HIGHEST, |a, v| if v < a || v != v { v } else { a }),
        ReduceOp::L1 => (T::ZERO, |a, v| a.add(v.abs())),
        ReduceOp::SumSquare => (T::ZERO, |a, v| a.add(v.mul(v))),
        ReduceOp::L2 | ReduceOp::LogSum | ReduceOp::LogSumExp => {
            return Err(OpError::eval(format!("{kind:?} reduction takes floats, not {}", T::DTYPE)));
        }
    };
    y.fill(init);
    walk(&mut |i, o| y[o] = step(y[o], x[i]));
    if kind == ReduceOp::Mean {
        y.iter_mut().for_each(|a| *a = a.div_count(count));
    }
    Ok(())
}

/// The float-only reductions: L2, LogSum and LogSumExp.
fn reduce_floats<T: Float>(
    kind: ReduceOp,
    x: &[T],
    y: &mut [T],
    walk: impl Fn(&mut dyn FnMut(usize, usize)),
) -> Result<(), OpError> {
    let step: fn(T, T) -> T = match kind {
        ReduceOp::L2 => |a, v| a.add(v.mul(v)),
        ReduceOp::LogSumExp => |a, v| a.add(v.exp()),
        _ => T::add,
    };
    y.fill(T::ZERO);
    walk(&mut |i, o| y[o] = step(y[o], x[i]));
    let finish: fn(T) -> T = if kind == ReduceOp::L2 { T::sqrt } else { T::ln };
    y.iter_mut().for_each(|a| *a = finish(*a));
    Ok(())
}

/// `ArgMax` / `ArgMin`: the index of the extreme element along `axis` (the first, or with
/// `select_last_index` the last, of equal extremes), as i64.
#[derive(Debug)]
struct Arg {
    max: bool,
    axis: i64,
    keepdims: bool,
    last: bool,
}

fn build_arg(ctx: &mut NodeCtx<'_>, max: bool) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Arg {
        max,
        axis: ctx.int_or("axis", 0)?,
        keepdims: flag(ctx, "keepdims", 1)?,
        last: flag(ctx, "select_last_index", 0)?,
    }))
}

impl Op for Arg {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, ext, numel};
        Some((|| {
            let x = ctx.input(0)?;
            let axis = normalize_axis(self.axis, x.dims.len())?;
            if x.dims[axis] == 0 {
                return Err(OpError::eval("ArgMax/ArgMin over an empty axis has no answer"));
            }
            let (outer, inner) = (numel(&x.dims[..axis]), numel(&x.dims[axis + 1..]));
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                ArgKernel { max: self.max, last: self.last, dtype: x.dtype },
                vec![outer as i64, ext(x.dims[axis]), inner as i64],
                Work::Elements(outer * inner),
                vec![Slot::In(0), Slot::Out(0)],
            )]))
        })())
    }
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        if !NUMERIC_DTYPES.contains(&x.dtype) {
            return Err(OpError::infer(format!("ArgMax/ArgMin take numeric inputs, not {}", x.dtype)));
        }
        let axis = normalize_axis(self.axis, x.rank())?;
        let mut dims = x.dims.clone();
        if self.keepdims {
            dims[axis] = Dim::Fixed(1);
        } else {
            dims.remove(axis);
        }
        Ok(vec![ValueType::new(DType::I64, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let xv = inputs.req(0)?;
        let axis = normalize_axis(self.axis, xv.dims.len()).map_err(|e| OpError::eval(e.to_string()))?;
        let (outer, len, inner) =
            (xv.dims[..axis].iter().product::<usize>(), xv.dims[axis], xv.dims[axis + 1..].iter().product::<usize>());
        let y = outputs[0].i64s()?;
        if outer.checked_mul(len).and_then(|n| n.checked_mul(inner)) != Some(xv.len()) || y.len() != outer * inner {
            return Err(OpError::eval("ArgMax/ArgMin: shapes do not match"));
        }
        if len == 0 {
            return Err(OpError::eval("ArgMax/ArgMin over an empty axis has no answer"));
        }
        let (max, last) = (self.max, self.last);
        each_number!(xv.data, |x| arg_along(x, y, len, inner, |a, b| better(max, last, a, b)), other => {
            return Err(OpError::eval(format!("ArgMax/ArgMin do not take {} inputs", other.dtype())));
        });
        Ok(())
    }
}

/// Whether candidate `v` replaces the current extreme `cur`.
fn better<T: PartialOrd>(max: bool, last: bool, v: T, cur: T) -> bool {
    match (max, last) {
        (true, false) => v > cur,
        (true, true) => v >= cur,
        (false, false) => v < cur,
        (false, true) => v <= cur,
    }
}

fn arg_along<T: Copy>(x: &[T], y: &mut [i64], len: usize, inner: usize, better: impl Fn(T, T) -> bool) {
    for (o, slot) in y.iter_mut().enumerate() {
        let base = (o / inner) * len * inner + o % inner;
        let mut at = 0;
        for j in 1..len {
            if better(x[base + j * inner], x[base + at * inner]) {
                at = j;
            }
        }
        *slot = at as i64;
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{f32s, run_op};
    use crate::ops::{Attribute, Attributes, OpError};
    use crate::tensor::{Tensor, TensorData};

    fn grid() -> Tensor {
        // [[1, 2, 3], [4, 5, 6]]
        f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    }

    fn attrs(pairs: &[(&str, Attribute)]) -> Attributes {
        Attributes(pairs.iter().map(|(n, a)| (n.to_string(), a.clone())).collect())
    }

    #[test]
    fn axes_as_attribute_and_as_input() {
        let x = grid();
        let a = attrs(&[("axes", Attribute::Ints(vec![1]))]);
        let sum12 = run_op("ReduceSum", 12, &a, &[Some(&x)]).unwrap();
        assert_eq!(sum12[0].dims(), &[2, 1]);
        assert_eq!(sum12[0].data(), &TensorData::F32(vec![6.0, 15.0]));
        let axes = Tensor::from_i64s(vec![-2]);
        let no_keep = attrs(&[("keepdims", Attribute::Int(0))]);
        let sum13 = run_op("ReduceSum", 13, &no_keep, &[Some(&x), Some(&axes)]).unwrap();
        assert_eq!(sum13[0].dims(), &[3]);
        assert_eq!(sum13[0].data(), &TensorData::F32(vec![5.0, 7.0, 9.0]));
        // ReduceMean takes the attribute until 17 and the input from 18.
        let mean17 = run_op("ReduceMean", 17, &a, &[Some(&x)]).unwrap();
        assert_eq!(mean17[0].data(), &TensorData::F32(vec![2.0, 5.0]));
        let mean18 = run_op("ReduceMean", 18, &Attributes::default(), &[Some(&x), Some(&Tensor::from_i64s(vec![1]))]);
        assert_eq!(mean18.unwrap()[0].data(), &TensorData::F32(vec![2.0, 5.0]));
        assert!(matches!(run_op("ReduceMean", 18, &a, &[Some(&x)]), Err(OpError::Unsupported { .. })));
    }

    #[test]
    fn empty_axes_reduce_everything_or_nothing() {
        let x = grid();
        let all = run_op("ReduceSum", 13, &Attributes::default(), &[Some(&x)]).unwrap();
        assert_eq!(all[0].dims(), &[1, 1]);
        assert_eq!(all[0].data(), &TensorData::F32(vec![21.0]));
        let noop = attrs(&[("noop_with_empty_axes", Attribute::Int(1))]);
        let same = run_op("ReduceSum", 13, &noop, &[Some(&x), Some(&Tensor::from_i64s(vec![]))]).unwrap();
        assert_eq!(same[0], x);
        // Reducing an empty axis gives each reduction's identity.
        let empty = f32s(&[2, 0], &[]);
        let axis1 = attrs(&[("axes", Attribute::Ints(vec![1]))]);
        for (op, want) in [("ReduceSum", 0.0), ("ReduceProd", 1.0), ("ReduceMax", f32::NEG_INFINITY)] {
            let out = run_op(op, 12, &axis1, &[Some(&empty)]).unwrap();
            assert_eq!(out[0].data(), &TensorData::F32(vec![want; 2]), "{op}");
        }
    }

    #[test]
    fn every_kind_by_hand() {
        let x = f32s(&[2, 2], &[1.0, -2.0, 3.0, -4.0]);
        let a = attrs(&[("axes", Attribute::Ints(vec![0, 1])), ("keepdims", Attribute::Int(0))]);
        let one = |op: &str| match run_op(op, 17, &a, &[Some(&x)]).unwrap().remove(0).data() {
            TensorData::F32(v) => v[0],
            other => panic!("{other:?}"),
        };
        assert_eq!(one("ReduceMax"), 3.0);
        assert_eq!(one("ReduceMin"), -4.0);
        assert_eq!(one("ReduceProd"), 24.0);
        assert_eq!(one("ReduceL1"), 10.0);
        assert_eq!(one("ReduceSumSquare"), 30.0);
        assert!((one("ReduceL2") - 30f32.sqrt()).abs() < 1e-6);
        let pos = f32s(&[2], &[1.0, 2.0]);
        let b = attrs(&[]);
        let out = run_op("ReduceLogSum", 17, &b, &[Some(&pos)]).unwrap();
        assert_eq!(out[0].data(), &TensorData::F32(vec![3f32.ln()]));
        let out = run_op("ReduceLogSumExp", 17, &b, &[Some(&pos)]).unwrap();
        let TensorData::F32(v) = out[0].data() else { panic!() };
        assert!((v[0] - (1f32.exp() + 2f32.exp()).ln()).abs() < 1e-6);
    }

    #[test]
    fn integers_and_bools() {
        let x = Tensor::new(vec![2, 2], TensorData::I64(vec![1, 2, 3, 5])).unwrap();
        let a = attrs(&[("axes", Attribute::Ints(vec![1]))]);
        let mean = run_op("ReduceMean", 13, &a, &[Some(&x)]).unwrap();
        assert_eq!(mean[0].data(), &TensorData::I64(vec![1, 4]));
        let b = Tensor::new(vec![2, 2], TensorData::Bool(vec![1, 0, 0, 0])).unwrap();
        let any = run_op("ReduceMax", 20, &Attributes::default(), &[Some(&b), Some(&Tensor::from_i64s(vec![1]))]);
        assert_eq!(any.unwrap()[0].data(), &TensorData::Bool(vec![1, 0]));
        let all = run_op("ReduceMin", 20, &Attributes::default(), &[Some(&b)]).unwrap();
        assert_eq!(all[0].data(), &TensorData::Bool(vec![0]));
        assert!(run_op("ReduceL2", 13, &a, &[Some(&x)]).is_err());
    }

    #[test]
    fn arg_max_and_min_with_ties() {
        let x = f32s(&[2, 3], &[1.0, 3.0, 3.0, 0.0, -1.0, 0.0]);
        let a = attrs(&[("axis", Attribute::Int(1))]);
        let out = run_op("ArgMax", 13, &a, &[Some(&x)]).unwrap();
        assert_eq!(out[0].dims(), &[2, 1]);
        assert_eq!(out[0].data(), &TensorData::I64(vec![1, 0]));
        let last = attrs(&[("axis", Attribute::Int(1)), ("select_last_index", Attribute::Int(1))]);
        let out = run_op("ArgMax", 13, &last, &[Some(&x)]).unwrap();
        assert_eq!(out[0].data(), &TensorData::I64(vec![2, 2]));
        let down = attrs(&[("keepdims", Attribute::Int(0))]);
        let out = run_op("ArgMin", 13, &down, &[Some(&x)]).unwrap();
        assert_eq!(out[0].dims(), &[3]);
        assert_eq!(out[0].data(), &TensorData::I64(vec![1, 1, 1]));
    }
}
