//! The variadic Sum, Mean (floats), Max and Min (every numeric type from opset 12) over any number
//! of broadcast inputs.

use saggar_shape::DType;

use super::check_broadcast;
use super::element::{FLOATS, c_suffix};
use super::{output_mismatch, require_dtype};
use crate::ops::gpu::{GpuCtx, GpuNode};
use crate::ops::shape_util::{broadcast_all, broadcast_strides, for_each_broadcast};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType};
use crate::tensor::{NUMERIC_DTYPES, Number, TensorMut, each_number, typed_like_mut};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum VariadicKind {
    Sum,
    Mean,
    Max,
    Min,
}

/// `Sum`, `Mean`, `Max`, `Min` over any number of broadcast inputs, with the element types the
/// signature takes at the model's opset.
#[derive(Debug)]
pub(super) struct Variadic {
    kind: VariadicKind,
    dtypes: &'static [DType],
}

impl Variadic {
    pub(super) fn boxed(ctx: &mut NodeCtx<'_>, kind: VariadicKind) -> Result<Box<dyn Op>, OpError> {
        // Max and Min take every numeric type from opset 12.
        let numeric = matches!(kind, VariadicKind::Max | VariadicKind::Min) && ctx.opset() >= 12;
        Ok(Box::new(Variadic { kind, dtypes: if numeric { &NUMERIC_DTYPES } else { FLOATS } }))
    }
}

/// The fold of a kind on `T` (NaN does not win a comparison: `gpu_max`/`gpu_min` on GPU).
fn fold<T: Number>(kind: VariadicKind) -> fn(T, T) -> T {
    match kind {
        VariadicKind::Sum | VariadicKind::Mean => Number::add,
        VariadicKind::Max => |acc, x| if x > acc { x } else { acc },
        VariadicKind::Min => |acc, x| if x < acc { x } else { acc },
    }
}

impl Op for Variadic {
    fn extents_from_shapes(&self) -> bool {
        true
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        let n = ctx.inputs.iter().flatten().count();
        if n == 0 || ctx.inputs.iter().any(Option::is_none) {
            return Some(Err(OpError::eval("every input must be present")));
        }
        let mut expr = "$0".to_string();
        for i in 1..n {
            expr = match self.kind {
                VariadicKind::Sum | VariadicKind::Mean => format!("({expr} + ${i})"),
                VariadicKind::Max => format!("gpu_max({expr}, ${i})"),
                VariadicKind::Min => format!("gpu_min({expr}, ${i})"),
            };
        }
        if self.kind == VariadicKind::Mean {
            let s = ctx.input(0).map_or("f", |x| c_suffix(x.dtype));
            expr = format!("({expr} / {n}.0{s})");
        }
        Some(Ok(GpuNode::Elementwise(expr)))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let first = inputs.req(0)?;
        require_dtype(&format!("{:?}", self.kind), first.ty.dtype, self.dtypes)?;
        if inputs.present().any(|i| i.ty.dtype != first.ty.dtype) {
            return Err(OpError::infer("inputs differ in element type"));
        }
        let dims = broadcast_all(inputs.present().map(|i| i.ty.dims.as_slice()))?;
        Ok(vec![ValueType::new(first.ty.dtype, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let kind = self.kind;
        let out = &mut outputs[0];
        let od = out.dims;
        let count = inputs.len();
        for i in 0..count {
            let x = inputs.req(i)?;
            // The first input is copied (broadcast) into the output; later ones fold into it. The
            // output has the broadcast shape, so it is its own first operand.
            each_number!(x.data, |v| {
                let o = typed_like_mut(v, &mut out.data)?;
                fold_step(i, v, x.dims, o, od, fold(kind))?;
                if kind == VariadicKind::Mean && i + 1 == count {
                    o.iter_mut().for_each(|v| *v = v.div_count(count));
                }
            }, _ => return Err(output_mismatch()))
        }
        Ok(())
    }
}

fn fold_step<T: Copy>(
    index: usize,
    x: &[T],
    x_dims: &[usize],
    out: &mut [T],
    out_dims: &[usize],
    f: impl Fn(T, T) -> T,
) -> Result<(), OpError> {
    if x_dims.len() > out_dims.len() {
        return Err(OpError::eval("input rank exceeds the output rank"));
    }
    check_broadcast(x_dims, out_dims)?;
    let sx = broadcast_strides(x_dims, out_dims.len());
    if index == 0 {
        for_each_broadcast(out_dims, [&sx], |i, [ox]| out[i] = x[ox]);
    } else {
        for_each_broadcast(out_dims, [&sx], |i, [ox]| out[i] = f(out[i], x[ox]));
    }
    Ok(())
}
