//! Evaluating one op on owned tensors: constant folding at import and tests use it.

use crate::ops::{EvalInputs, InferInput, InferInputs, Op, OpError, ValueType};
use crate::tensor::{Tensor, TensorMut, TensorView, checked_numel};

/// Runs `op` on `inputs` (absent optional inputs `None`), allocating outputs of at most
/// `max_elements` elements each (checked before allocating).
pub fn evaluate(op: &dyn Op, inputs: &[Option<&Tensor>], max_elements: usize) -> Result<Vec<Tensor>, OpError> {
    let types: Vec<Option<ValueType>> =
        inputs.iter().map(|t| t.map(|t| ValueType::fixed(t.dtype(), t.dims()))).collect();
    let infer_inputs: Vec<Option<InferInput<'_>>> = inputs
        .iter()
        .zip(&types)
        .map(|(t, ty)| match (t, ty) {
            (Some(t), Some(ty)) => Some(InferInput { ty, value: Some(*t), dims_value: None }),
            _ => None,
        })
        .collect();
    let out_types = op.infer(&InferInputs::new(&infer_inputs))?;
    let mut outputs = Vec::with_capacity(out_types.len());
    for ty in &out_types {
        let dims = ty
            .fixed_dims()
            .ok_or_else(|| OpError::eval(format!("output shape {ty} is not known from constant inputs")))?;
        match checked_numel(&dims) {
            Some(n) if n <= max_elements => {}
            _ => {
                return Err(OpError::eval(format!(
                    "output of shape {dims:?} exceeds the limit of {max_elements} elements"
                )));
            }
        }
        outputs.push(Tensor::zeros(ty.dtype, dims)?);
    }
    let views: Vec<Option<TensorView<'_>>> = inputs.iter().map(|t| t.map(Tensor::view)).collect();
    let mut outs: Vec<TensorMut<'_>> = outputs.iter_mut().map(Tensor::view_mut).collect();
    guarded(|| op.eval(&EvalInputs::new(&views), &mut outs))?;
    Ok(outputs)
}

/// Runs an op's evaluation, turning a panic (an op bug on inputs it should have refused) into an
/// evaluation error, so a hostile model is a typed error even then.
pub fn guarded(eval: impl FnOnce() -> Result<(), OpError>) -> Result<(), OpError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(eval))
        .unwrap_or_else(|_| Err(OpError::eval("the op's evaluation panicked (a bug in saggar-onnx; please report it)")))
}
