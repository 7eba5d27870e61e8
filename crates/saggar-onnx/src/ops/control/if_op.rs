//! `If`: the outputs of `then_branch` where `cond` is true, else of `else_branch`.

use std::sync::Arc;

use saggar_shape::DType;

use super::{Body, Scope, graph_attr, infer_body, merge_dims, refuse_eval, scalar_input, truth};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType};
use crate::tensor::TensorMut;

/// `If`.
#[derive(Debug)]
struct If {
    then_branch: Arc<dyn Body>,
    else_branch: Arc<dyn Body>,
    scope: Scope,
    outputs: usize,
}

pub(super) fn build(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let then_branch = graph_attr(ctx, "then_branch")?;
    let else_branch = graph_attr(ctx, "else_branch")?;
    if ctx.num_inputs() != 1 {
        return Err(OpError::infer(format!("If takes one input (cond), the node has {}", ctx.num_inputs())));
    }
    let scope = Scope::of(ctx, &[&then_branch, &else_branch]);
    Ok(Box::new(If { then_branch, else_branch, scope, outputs: ctx.num_outputs() }))
}

impl If {
    fn branch(&self, body: &dyn Body, what: &str, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let types = infer_body(body, what, &[], inputs, &self.scope)?;
        if types.len() != self.outputs {
            return Err(OpError::infer(format!(
                "{what} `{}` makes {} outputs, the node has {}",
                body.name(),
                types.len(),
                self.outputs
            )));
        }
        Ok(types)
    }
}

impl Op for If {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let cond = inputs.req(0)?;
        scalar_input(cond, DType::Bool, "If's cond")?;
        // A known condition: only the branch taken matters (the other may not even fit the shapes).
        if let Some(value) = cond.value {
            return if truth(value)? {
                self.branch(self.then_branch.as_ref(), "then_branch", inputs)
            } else {
                self.branch(self.else_branch.as_ref(), "else_branch", inputs)
            };
        }
        let then_types = self.branch(self.then_branch.as_ref(), "then_branch", inputs)?;
        let else_types = self.branch(self.else_branch.as_ref(), "else_branch", inputs)?;
        then_types
            .iter()
            .zip(&else_types)
            .enumerate()
            .map(|(k, (t, e))| {
                if t.dtype != e.dtype || t.rank() != e.rank() {
                    return Err(OpError::infer(format!(
                        "output {k}: then_branch makes {t} and else_branch makes {e}; the branches must agree in element type and rank"
                    )));
                }
                Ok(ValueType::new(t.dtype, merge_dims(&t.dims, &e.dims)))
            })
            .collect()
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        refuse_eval("If", inputs, outputs)
    }

    fn foldable(&self) -> bool {
        false
    }
}
