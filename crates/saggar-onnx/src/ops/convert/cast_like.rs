//! `CastLike` (opset 15): `Cast` to the element type of its second input (whose values are not
//! read). Everything is `Cast`'s: inference, evaluation and the GPU expression. On the GPU the cast
//! fuses with its neighbours when the second input broadcasts onto the output (the fused kernel loads
//! every input of a node, so it must be safe to read); otherwise it is a launch of its own
//! ([`CastLikeKernel`]) computing the same expression.

use saggar_shape::DType;

use super::Cast;
use super::gpu::CastLikeKernel;
use crate::error::OpError;
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, numel};
use crate::ops::shape_util::broadcast_concrete;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, SymInt, ValueType};
use crate::tensor::{TensorMut, is_supported_dtype};

/// `CastLike`.
#[derive(Debug)]
pub(super) struct CastLike;

pub(super) fn build_cast_like(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    // As for Cast, `saturate` (opset 19) only affects float8 targets, which are not supported.
    ctx.ignore("saturate");
    Ok(Box::new(CastLike))
}

/// The Cast to `target`'s element type.
fn cast_to(target: DType) -> Result<Cast, OpError> {
    if is_supported_dtype(target) {
        Ok(Cast { to: target })
    } else {
        Err(OpError::infer(format!("CastLike to {target} is not supported")))
    }
}

impl Op for CastLike {
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let (x, target, out) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0)?);
            let node = cast_to(target.dtype)?.gpu(ctx).ok_or_else(|| OpError::eval("Cast has no GPU form"))??;
            let GpuNode::Elementwise(expr) = node else { return Ok(node) };
            if broadcast_concrete(&target.dims, &out.dims).is_ok_and(|d| d == out.dims) {
                return Ok(GpuNode::Elementwise(expr));
            }
            let kind = CastLikeKernel { from: x.dtype, to: out.dtype, expr };
            let n = numel(&out.dims);
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                kind,
                vec![n as i64],
                Work::Elements(n),
                vec![Slot::In(0), Slot::Out(0)],
            )]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        cast_to(inputs.req(1)?.ty.dtype)?.infer(inputs)
    }

    fn dims_value(&self, inputs: &InferInputs<'_>) -> Option<Vec<SymInt>> {
        cast_to(inputs.req(1).ok()?.ty.dtype).ok()?.dims_value(inputs)
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        cast_to(inputs.req(1)?.dtype())?.eval(inputs, outputs)
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{f32s, run_op};
    use crate::ops::{Attribute, Attributes};
    use crate::tensor::{Tensor, TensorData};

    #[test]
    fn casts_to_the_type_of_the_second_input() {
        let x = f32s(&[3], &[1.7, -2.5, 0.0]);
        let like = Tensor::new(vec![5, 5], TensorData::I64(vec![0; 25])).unwrap();
        let out = run_op("CastLike", 15, &Attributes::default(), &[Some(&x), Some(&like)]).unwrap();
        assert_eq!(out[0].data(), &TensorData::I64(vec![1, -2, 0]));
        let flags = Tensor::new(vec![], TensorData::Bool(vec![0])).unwrap();
        let sat = Attributes(vec![("saturate".into(), Attribute::Int(1))]);
        let out = run_op("CastLike", 19, &sat, &[Some(&x), Some(&flags)]).unwrap();
        assert_eq!(out[0].data(), &TensorData::Bool(vec![1, 1, 0]));
        let half = Tensor::new(vec![1], TensorData::F16(vec![0])).unwrap();
        let out = run_op("CastLike", 21, &Attributes::default(), &[Some(&x), Some(&half)]).unwrap();
        assert_eq!(out[0].data(), &TensorData::F16(vec![0x3ecd, 0xc100, 0]));
        assert!(run_op("CastLike", 14, &Attributes::default(), &[Some(&x), Some(&like)]).is_err());
    }

    #[test]
    fn the_standalone_kernel_renders_the_cast_expression() {
        use crate::ops::gpu::GpuKernel;
        use saggar_shape::DType;
        let kind = super::CastLikeKernel { from: DType::F32, to: DType::I64, expr: "(long long)$0".into() };
        let body = kind.source();
        assert!(!body.contains('@') && !body.contains('$') && body.starts_with("(const onnx_i64* meta"), "{body}");
        assert!(body.contains("(long long)x[i]"), "{body}");
    }
}
