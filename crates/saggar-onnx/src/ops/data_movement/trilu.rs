//! `Trilu` (opset 14): the upper or lower triangle of each matrix of the last two axes, from the
//! `k`-th diagonal (optional input, 0 by default); the other elements are zero. Elements move as
//! bits on the GPU.

use saggar_shape::DType;

use super::gpu::TriluKernel;
use crate::error::OpError;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, ValueType};
use crate::tensor::{TensorMut, TensorView, same_type};

/// `Trilu`: keeps element `(r, c)` of each matrix when `c - r >= k` (`upper`) or `c - r <= k`.
#[derive(Debug)]
pub(super) struct Trilu {
    upper: bool,
}

pub(super) fn build_trilu(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let upper = match ctx.int_or("upper", 1)? {
        0 => false,
        1 => true,
        other => return Err(OpError::attribute("upper", format!("must be 0 or 1, found {other}"))),
    };
    Ok(Box::new(Trilu { upper }))
}

/// The diagonal `k`: input 1's single element, or 0 without it.
fn diagonal(k: Option<&TensorView<'_>>) -> Result<i64, OpError> {
    let Some(k) = k else { return Ok(0) };
    match k.to_i64s().as_deref() {
        Some(&[v]) => Ok(v),
        _ => Err(OpError::eval(format!("Trilu k must be one int64, not {} x{}", k.dtype(), k.len()))),
    }
}

impl Op for Trilu {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, ext, numel};
        Some((|| {
            let x = ctx.input(0)?;
            let [rows, cols] = matrix(&x.dims)?;
            // The diagonal is read on the device when given, so it need not be a constant.
            let k_input = ctx.inputs.get(1).is_some_and(Option::is_some);
            let mut slots = vec![Slot::In(0)];
            if k_input {
                slots.push(Slot::In(1));
            }
            slots.push(Slot::Out(0));
            let kind = TriluKernel { upper: self.upper, elem_bytes: x.dtype.size_bytes() as u8, k_input };
            let n = numel(&x.dims);
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                kind,
                vec![n as i64, ext(rows), ext(cols), 0],
                Work::Elements(n),
                slots,
            )]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        if x.rank() < 2 {
            return Err(OpError::infer(format!("Trilu takes matrices (rank 2 or more), not {x}")));
        }
        if let Some(k) = inputs.get(1)
            && (k.ty.dtype != DType::I64 || k.ty.dims.iter().any(|d| d.as_fixed().is_some_and(|n| n != 1)))
        {
            return Err(OpError::infer(format!("Trilu k must be an int64 scalar, not {}", k.ty)));
        }
        Ok(vec![x.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let k = diagonal(inputs.get(1))?;
        let [rows, cols] = matrix(x.dims)?;
        let upper = self.upper;
        let keep = |i: usize| {
            let (c, r) = ((i % cols) as i64, (i / cols % rows) as i64);
            if upper { c - r >= k } else { c - r <= k }
        };
        same_type!(x.data, &mut outputs[0].data, |s, d| {
            if s.len() != d.len() {
                return Err(OpError::eval("Trilu output size differs from the input's"));
            }
            for (i, (d, &s)) in d.iter_mut().zip(s).enumerate() {
                *d = if keep(i) { s } else { Default::default() };
            }
            Ok(())
        })
    }
}

/// `[rows, cols]` of the matrices of `dims`.
fn matrix(dims: &[usize]) -> Result<[usize; 2], OpError> {
    match dims {
        [.., r, c] => Ok([*r, *c]),
        _ => Err(OpError::eval(format!("Trilu takes matrices, not {dims:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{iota, run_op, values};
    use crate::ops::{Attribute, Attributes};
    use crate::tensor::{Tensor, TensorData};

    fn trilu(x: &Tensor, upper: i64, k: Option<i64>) -> Result<Vec<Tensor>, crate::error::OpError> {
        let a = Attributes(vec![("upper".into(), Attribute::Int(upper))]);
        let k = k.map(|k| Tensor::from_i64s(vec![k]).reshaped(vec![]).unwrap());
        run_op("Trilu", 14, &a, &[Some(x), k.as_ref()])
    }

    #[test]
    fn upper_and_lower_triangles_from_any_diagonal() {
        let x = iota(&[3, 4]);
        #[rustfmt::skip]
        let cases: [(i64, Option<i64>, [f32; 12]); 5] = [
            (1, None, [0., 1., 2., 3., 0., 5., 6., 7., 0., 0., 10., 11.]),
            (1, Some(2), [0., 0., 2., 3., 0., 0., 0., 7., 0., 0., 0., 0.]),
            (0, None, [0., 0., 0., 0., 4., 5., 0., 0., 8., 9., 10., 0.]),
            (0, Some(-1), [0., 0., 0., 0., 4., 0., 0., 0., 8., 9., 0., 0.]),
            (0, Some(i64::MIN), [0.; 12]),
        ];
        for (upper, k, want) in cases {
            assert_eq!(values(&trilu(&x, upper, k).unwrap()[0]), want, "upper {upper} k {k:?}");
        }
        // Each matrix of a batch; integers and bools.
        let b = Tensor::new(vec![2, 2, 2], TensorData::I64((1..=8).collect())).unwrap();
        assert_eq!(trilu(&b, 1, Some(1)).unwrap()[0].data(), &TensorData::I64(vec![0, 2, 0, 0, 0, 6, 0, 0]));
        let flags = Tensor::new(vec![2, 2], TensorData::Bool(vec![1; 4])).unwrap();
        assert_eq!(trilu(&flags, 0, None).unwrap()[0].data(), &TensorData::Bool(vec![1, 0, 1, 1]));
    }

    #[test]
    fn bad_inputs_and_attributes_are_errors() {
        assert!(trilu(&iota(&[3]), 1, None).is_err());
        assert!(trilu(&iota(&[2, 2]), 2, None).is_err());
        let float_k = iota(&[1]);
        assert!(run_op("Trilu", 14, &Attributes::default(), &[Some(&iota(&[2, 2])), Some(&float_k)]).is_err());
        assert!(
            run_op("Trilu", 14, &Attributes::default(), &[Some(&iota(&[2, 2])), Some(&Tensor::from_i64s(vec![1, 2]))])
                .is_err()
        );
        assert!(run_op("Trilu", 13, &Attributes::default(), &[Some(&iota(&[2, 2]))]).is_err());
    }
}
