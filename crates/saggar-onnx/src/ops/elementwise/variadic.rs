//! The variadic Sum, Mean, Max and Min over any number of broadcast inputs.

use saggar_shape::DType;

use super::{NUMBERS, check_broadcast, output_mismatch, require_dtype};
use crate::ops::gpu::{GpuCtx, GpuNode};
use crate::ops::shape_util::{broadcast_all, broadcast_strides, for_each_broadcast};
use crate::ops::{EvalInputs, InferInputs, Op, OpError, ValueType};
use crate::tensor::{DataMut, DataRef, TensorMut};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum VariadicKind {
    Sum,
    Mean,
    Max,
    Min,
}

/// `Sum`, `Mean`, `Max`, `Min` over any number of broadcast inputs.
#[derive(Debug)]
pub(super) struct Variadic(VariadicKind);

impl Variadic {
    pub(super) fn boxed(kind: VariadicKind) -> Result<Box<dyn Op>, OpError> {
        Ok(Box::new(Variadic(kind)))
    }
}

macro_rules! fold_into {
    ($kind:expr, $acc:expr, $x:expr) => {
        match $kind {
            VariadicKind::Sum | VariadicKind::Mean => $acc + $x,
            VariadicKind::Max => {
                if $x > $acc {
                    $x
                } else {
                    $acc
                }
            }
            VariadicKind::Min => {
                if $x < $acc {
                    $x
                } else {
                    $acc
                }
            }
        }
    };
}

impl Op for Variadic {
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        let n = ctx.inputs.iter().flatten().count();
        if n == 0 || ctx.inputs.iter().any(Option::is_none) {
            return Some(Err(OpError::eval("every input must be present")));
        }
        let mut expr = "$0".to_string();
        for i in 1..n {
            expr = match self.0 {
                VariadicKind::Sum | VariadicKind::Mean => format!("({expr} + ${i})"),
                VariadicKind::Max => format!("gpu_max({expr}, ${i})"),
                VariadicKind::Min => format!("gpu_min({expr}, ${i})"),
            };
        }
        if self.0 == VariadicKind::Mean {
            expr = format!("({expr} / {n}.0f)");
        }
        Some(Ok(GpuNode::Elementwise(expr)))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let first = inputs.req(0)?;
        let allowed: &[DType] = match self.0 {
            VariadicKind::Max | VariadicKind::Min => NUMBERS,
            _ => &[DType::F32],
        };
        require_dtype(&format!("{:?}", self.0), first.ty.dtype, allowed)?;
        if inputs.present().any(|i| i.ty.dtype != first.ty.dtype) {
            return Err(OpError::infer("inputs differ in element type"));
        }
        let dims = broadcast_all(inputs.present().map(|i| i.ty.dims.as_slice()))?;
        Ok(vec![ValueType::new(first.ty.dtype, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let kind = self.0;
        let out = &mut outputs[0];
        let od = out.dims;
        let count = inputs.len();
        for i in 0..count {
            let x = inputs.req(i)?;
            // The first input is copied (broadcast) into the output; later ones fold into it. The
            // output has the broadcast shape, so it is its own first operand.
            match (x.data, &mut out.data) {
                (DataRef::F32(x_data), DataMut::F32(o)) => {
                    fold_step(i, x_data, x.dims, o, od, |a, b| fold_into!(kind, a, b))?
                }
                (DataRef::I64(x_data), DataMut::I64(o)) => {
                    fold_step(i, x_data, x.dims, o, od, |a, b| fold_into!(kind, a, b))?
                }
                (DataRef::I32(x_data), DataMut::I32(o)) => {
                    fold_step(i, x_data, x.dims, o, od, |a, b| fold_into!(kind, a, b))?
                }
                _ => return Err(output_mismatch()),
            }
        }
        if kind == VariadicKind::Mean {
            let o = out.f32s()?;
            let n = count as f32;
            o.iter_mut().for_each(|v| *v /= n);
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
