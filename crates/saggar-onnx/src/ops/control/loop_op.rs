//! `Loop`: runs its body while the iteration count is under `M` (absent: no bound) and `cond`
//! holds (absent: true), carrying values from one iteration to the next and stacking the body's
//! scan outputs.

use std::sync::Arc;

use saggar_shape::DType;

use super::{Body, Scope, carried, graph_attr, infer_body, refuse_eval, scalar_input};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType, unknown_dim};
use crate::tensor::TensorMut;

/// `Loop`.
#[derive(Debug)]
struct Loop {
    body: Arc<dyn Body>,
    scope: Scope,
    outputs: usize,
}

pub(super) fn build(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let body = graph_attr(ctx, "body")?;
    if ctx.num_inputs() < 2 {
        return Err(OpError::infer(format!(
            "Loop takes M and cond (either may be empty) before its carried values, the node has {} inputs",
            ctx.num_inputs()
        )));
    }
    let scope = Scope::of(ctx, &[&body]);
    Ok(Box::new(Loop { body, scope, outputs: ctx.num_outputs() }))
}

impl Op for Loop {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        if let Some(m) = inputs.get(0) {
            scalar_input(m, DType::I64, "Loop's trip count M")?;
        }
        if let Some(cond) = inputs.get(1) {
            scalar_input(cond, DType::Bool, "Loop's cond")?;
        }
        let n = self.scope.explicit - 2;
        let body = self.body.as_ref();
        if self.outputs < n || body.outputs() != 1 + self.outputs {
            return Err(OpError::infer(format!(
                "the body `{}` makes {} outputs; with {n} carried values and {} node outputs it must make {} (cond, the carried values, then the scan outputs)",
                body.name(),
                body.outputs(),
                self.outputs,
                1 + self.outputs.max(n)
            )));
        }
        let initial: Vec<ValueType> =
            (0..n).map(|j| inputs.req(2 + j).map(|x| x.ty.clone())).collect::<Result<_, _>>()?;
        let mut formal = vec![ValueType::new(DType::I64, Vec::new()), ValueType::new(DType::Bool, Vec::new())];
        formal.extend(initial.iter().cloned());
        let types = infer_body(body, "body", &formal, inputs, &self.scope)?;
        if types[0].dtype != DType::Bool {
            return Err(OpError::infer(format!("the body's output 0 (cond) is {}, not bool", types[0])));
        }
        let mut out = Vec::with_capacity(self.outputs);
        for (j, init) in initial.iter().enumerate() {
            out.push(carried(init, &types[1 + j], &format!("carried value {j}"))?);
        }
        for scan in &types[1 + n..] {
            let mut dims = vec![unknown_dim()];
            dims.extend(scan.dims.iter().cloned());
            out.push(ValueType::new(scan.dtype, dims));
        }
        Ok(out)
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        refuse_eval("Loop", inputs, outputs)
    }

    fn foldable(&self) -> bool {
        false
    }
}
