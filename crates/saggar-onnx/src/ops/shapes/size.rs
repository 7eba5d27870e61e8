//! `Size`: the element count of the input, an int64 scalar. Its value is a shape value
//! ([`Op::dims_value`]), so the per-shape compile folds it to a constant wherever the input's shape
//! is fixed, as it does `Shape`, and no device kernel is needed.

use saggar_shape::DType;

use super::product_dim;
use crate::error::OpError;
use crate::ops::{EvalInputs, InferInputs, Op, SymInt, ValueType};
use crate::tensor::TensorMut;

/// `Size`.
#[derive(Debug)]
pub(super) struct Size;

impl Op for Size {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        inputs.req(0)?;
        Ok(vec![ValueType::fixed(DType::I64, &[])])
    }

    fn dims_value(&self, inputs: &InferInputs<'_>) -> Option<Vec<SymInt>> {
        Some(vec![SymInt::from_dim(&product_dim(&inputs.req(0).ok()?.ty.dims))])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let n = inputs.req(0)?.dims.iter().try_fold(1i64, |n, &d| n.checked_mul(i64::try_from(d).ok()?));
        let out = outputs[0].i64s()?;
        match (n, out) {
            (Some(n), [o]) => *o = n,
            _ => return Err(OpError::eval("Size: the element count overflows i64, or the output is not a scalar")),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use saggar_shape::{DType, Dim};

    use crate::ops::testing::{iota, run_op};
    use crate::ops::{Attributes, InferInput, InferInputs, Op, SymInt, ValueType};
    use crate::tensor::{Tensor, TensorData};

    #[test]
    fn the_element_count_as_a_scalar_and_a_shape_value() {
        let out = run_op("Size", 13, &Attributes::default(), &[Some(&iota(&[2, 3, 4]))]).unwrap();
        assert_eq!(out[0], Tensor::new(vec![], TensorData::I64(vec![24])).unwrap());
        let out = run_op("Size", 1, &Attributes::default(), &[Some(&iota(&[0, 3]))]).unwrap();
        assert_eq!(out[0].data(), &TensorData::I64(vec![0]));
        // Known from the shape alone: fixed, or one symbol.
        for (dims, want) in [
            (vec![Dim::Fixed(2), Dim::Fixed(5)], Some(SymInt::Int(10))),
            (vec![Dim::symbolic("n"), Dim::Fixed(1)], Some(SymInt::Sym("n".into()))),
        ] {
            let ty = ValueType::new(DType::F32, dims);
            let slots = [Some(InferInput { ty: &ty, value: None, dims_value: None })];
            assert_eq!(super::Size.dims_value(&InferInputs::new(&slots)), want.map(|w| vec![w]));
        }
    }
}
