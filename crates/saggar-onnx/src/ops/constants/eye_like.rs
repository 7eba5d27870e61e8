//! `EyeLike` (opset 9): a matrix of the input's shape (the input's values are not read) with ones
//! on the `k`-th diagonal (`c - r == k`) and zeros elsewhere, of the `dtype` attribute's type or
//! the input's.

use saggar_shape::DType;

use super::gpu::EyeLikeKernel;
use crate::error::OpError;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, ValueType};
use crate::tensor::{DataMut, Number, TensorMut, Wide, each_number_mut, is_supported_dtype};

/// `EyeLike`.
#[derive(Debug)]
pub(super) struct EyeLike {
    dtype: Option<DType>,
    k: i64,
}

pub(super) fn build_eye_like(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let dtype = match ctx.int("dtype")? {
        None => None,
        Some(code) => {
            Some(crate::import::proto::dtype_from_onnx(code).filter(|d| is_supported_dtype(*d)).ok_or_else(|| {
                ctx.unsupported("dtype", code, "1 (FLOAT), 6 (INT32), 7 (INT64), 9 (BOOL), 10 (FLOAT16), 16 (BFLOAT16)")
            })?)
        }
    };
    Ok(Box::new(EyeLike { dtype, k: ctx.int_or("k", 0)? }))
}

/// The bits of 1 in `dtype`.
pub(super) fn one_bits(dtype: DType) -> u64 {
    match dtype {
        DType::F32 => u64::from(1f32.to_bits()),
        DType::F64 => 1f64.to_bits(),
        DType::F16 => u64::from(half::f16::ONE.to_bits()),
        DType::BF16 => u64::from(half::bf16::ONE.to_bits()),
        _ => 1,
    }
}

impl Op for EyeLike {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, ext, numel};
        Some(ctx.output(0).and_then(|y| {
            let &[_, cols] = y.dims.as_slice() else { return Err(OpError::eval("EyeLike makes matrices")) };
            let n = numel(&y.dims);
            let kind = EyeLikeKernel { elem_bytes: y.dtype.size_bytes() as u8, one_bits: one_bits(y.dtype) };
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                kind,
                vec![n as i64, ext(cols), self.k],
                Work::Elements(n),
                vec![Slot::Out(0)],
            )]))
        }))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        if x.rank() != 2 {
            return Err(OpError::infer(format!("EyeLike takes a matrix, not {x}")));
        }
        Ok(vec![ValueType::new(self.dtype.unwrap_or(x.dtype), x.dims.clone())])
    }

    fn eval(&self, _: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let out = &mut outputs[0];
        let &[_, cols] = out.dims else { return Err(OpError::eval("EyeLike makes matrices")) };
        let k = self.k;
        let on = |i: usize| (i % cols) as i64 - (i / cols) as i64 == k;
        fn fill<T: Copy>(o: &mut [T], zero: T, one: T, on: impl Fn(usize) -> bool) {
            o.iter_mut().enumerate().for_each(|(i, o)| *o = if on(i) { one } else { zero });
        }
        let one = one_bits(out.dtype());
        each_number_mut!(&mut out.data, |o| fill(o, Default::default(), Number::narrow(Wide::Int(1)), on), other => match other {
            DataMut::Bool(o) => fill(o, 0, 1, on),
            DataMut::F16(o) | DataMut::BF16(o) => fill(o, 0, one as u16, on),
            _ => return Err(OpError::eval(format!("EyeLike cannot make {}", other.dtype()))),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{iota, run_op, values};
    use crate::ops::{Attribute, Attributes};
    use crate::tensor::{Tensor, TensorData};

    #[test]
    fn ones_on_the_kth_diagonal_of_the_chosen_type() {
        let x = iota(&[3, 4]);
        let out = run_op("EyeLike", 9, &Attributes::default(), &[Some(&x)]).unwrap();
        assert_eq!(values(&out[0]), [1., 0., 0., 0., 0., 1., 0., 0., 0., 0., 1., 0.]);
        let a = Attributes(vec![("k".into(), Attribute::Int(-1)), ("dtype".into(), Attribute::Int(7))]);
        let out = run_op("EyeLike", 9, &a, &[Some(&x)]).unwrap();
        assert_eq!(out[0].data(), &TensorData::I64(vec![0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0]));
        let ints = Tensor::new(vec![2, 2], TensorData::I32(vec![5; 4])).unwrap();
        let a = Attributes(vec![("k".into(), Attribute::Int(1)), ("dtype".into(), Attribute::Int(10))]);
        let out = run_op("EyeLike", 9, &a, &[Some(&ints)]).unwrap();
        assert_eq!(out[0].data(), &TensorData::F16(vec![0, 0x3c00, 0, 0]));
        let far = Attributes(vec![("k".into(), Attribute::Int(i64::MAX))]);
        assert_eq!(values(&run_op("EyeLike", 9, &far, &[Some(&x)]).unwrap()[0]), [0.0; 12]);
    }

    #[test]
    fn vectors_and_unsupported_types_are_errors() {
        assert!(run_op("EyeLike", 9, &Attributes::default(), &[Some(&iota(&[3]))]).is_err());
        let f64s = Attributes(vec![("dtype".into(), Attribute::Int(11))]);
        let out = run_op("EyeLike", 9, &f64s, &[Some(&iota(&[2, 2]))]).unwrap();
        assert_eq!(out[0].data(), &TensorData::F64(vec![1.0, 0.0, 0.0, 1.0]));
        let float8 = Attributes(vec![("dtype".into(), Attribute::Int(17))]);
        assert!(matches!(
            run_op("EyeLike", 9, &float8, &[Some(&iota(&[2, 2]))]),
            Err(crate::error::OpError::Unsupported { .. })
        ));
    }
}
