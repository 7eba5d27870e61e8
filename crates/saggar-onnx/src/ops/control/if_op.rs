//! `If`: the outputs of `then_branch` where `cond` is true, else of `else_branch`. Both make the
//! node's output count and one element type per output; shapes, ranks included, may differ.

use std::sync::Arc;

use saggar_shape::DType;

use super::{Body, Scope, branch_types, graph_attr, infer_body, refuse_eval, scalar_input, truth};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType};
use crate::tensor::TensorMut;

/// `If`.
#[derive(Debug)]
struct If {
    then_branch: Arc<dyn Body>,
    else_branch: Arc<dyn Body>,
    scope: Scope,
}

pub(super) fn build(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let then_branch = graph_attr(ctx, "then_branch")?;
    let else_branch = graph_attr(ctx, "else_branch")?;
    if ctx.num_inputs() != 1 {
        return Err(OpError::infer(format!("If takes one input (cond), the node has {}", ctx.num_inputs())));
    }
    for (what, body) in [("then_branch", &then_branch), ("else_branch", &else_branch)] {
        if body.outputs() != ctx.num_outputs() {
            return Err(OpError::attribute(
                what,
                format!("`{}` makes {} outputs, the node has {}", body.name(), body.outputs(), ctx.num_outputs()),
            ));
        }
    }
    let scope = Scope::of(ctx, &[&then_branch, &else_branch]);
    Ok(Box::new(If { then_branch, else_branch, scope }))
}

impl If {
    fn branch(&self, body: &dyn Body, what: &str, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        infer_body(body, what, &[], inputs, &self.scope)
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
        // Unknown: both branches. One that does not infer here (it may need values the compile
        // binds, and then not be taken) leaves the other's types; the compile infers the branch
        // taken exactly.
        let then_types = self.branch(self.then_branch.as_ref(), "then_branch", inputs);
        let else_types = self.branch(self.else_branch.as_ref(), "else_branch", inputs);
        let (then_types, else_types) = match (then_types, else_types) {
            (Ok(t), Ok(e)) => (t, e),
            (Ok(t), Err(_)) => return Ok(t),
            (Err(_), Ok(e)) => return Ok(e),
            (Err(e), Err(_)) => return Err(e),
        };
        branch_types(&then_types, &else_types)
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        refuse_eval("If", inputs, outputs)
    }

    fn foldable(&self) -> bool {
        false
    }
}
