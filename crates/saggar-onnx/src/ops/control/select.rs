//! `IfSelect`, made by the segments pass, never read from a model: an `If` whose branches were
//! copied into the graph (both computed), choosing between their outputs by `cond`. Inputs: `cond`,
//! then each output of `then_branch`, then each of `else_branch`. It exists so an op with a bounded
//! form inside a branch (a detector's NonMaxSuppression under `If(boxes.numel() == 0)`) is cut like
//! any other: `cond` is a boundary value, and a compile that knows it inlines the choice as
//! Identity nodes.

use saggar_shape::DType;

use super::{branch_types, refuse_eval, scalar_input, truth};
use crate::ops::{EvalInputs, InferInputs, Op, OpError, ValueType};
use crate::tensor::TensorMut;

/// The op type of [`IfSelect`] nodes.
pub(crate) const IF_SELECT: &str = "If.select";

/// See the module docs.
#[derive(Debug)]
pub(crate) struct IfSelect {
    /// The node's outputs (each branch's).
    pub(crate) outputs: usize,
}

impl IfSelect {
    /// The input slots of the chosen branch's outputs.
    pub(crate) fn chosen(&self, cond: bool) -> std::ops::Range<usize> {
        let first = if cond { 1 } else { 1 + self.outputs };
        first..first + self.outputs
    }
}

impl Op for IfSelect {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let cond = inputs.req(0)?;
        scalar_input(cond, DType::Bool, "If's cond")?;
        if inputs.len() != 1 + 2 * self.outputs {
            return Err(OpError::infer(format!("If.select takes {} inputs", 1 + 2 * self.outputs)));
        }
        if let Some(value) = cond.value {
            return self.chosen(truth(value)?).map(|i| inputs.req(i).map(|t| t.ty.clone())).collect();
        }
        let types = |first: usize| -> Result<Vec<ValueType>, OpError> {
            (first..first + self.outputs).map(|i| inputs.req(i).map(|t| t.ty.clone())).collect()
        };
        branch_types(&types(1)?, &types(1 + self.outputs)?)
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        refuse_eval("If", inputs, outputs)
    }

    fn foldable(&self) -> bool {
        false
    }
}
