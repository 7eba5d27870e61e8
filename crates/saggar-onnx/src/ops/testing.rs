//! Test helpers for op families: build an op from attributes and run it on tensors.

use crate::ops::{Attributes, NodeCtx, OpError, evaluate::evaluate, lookup};
use crate::tensor::Tensor;

/// Builds `op_type` at `opset` from `attrs` (every attribute must be read by the builder) and
/// evaluates it on `inputs`, through the same inference and evaluation the importer uses.
pub fn run_op(
    op_type: &str,
    opset: u32,
    attrs: &Attributes,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>, OpError> {
    run_op_outputs(op_type, opset, attrs, inputs, 1)
}

/// [`run_op`] for a node with `outputs` outputs (Split).
pub fn run_op_outputs(
    op_type: &str,
    opset: u32,
    attrs: &Attributes,
    inputs: &[Option<&Tensor>],
    outputs: usize,
) -> Result<Vec<Tensor>, OpError> {
    let entry =
        lookup(op_type, opset).ok_or_else(|| OpError::infer(format!("{op_type} is not declared at opset {opset}")))?;
    let mut ctx = NodeCtx::new(attrs, opset, inputs.len(), outputs);
    let op = (entry.build)(&mut ctx)?;
    if let Some(name) = ctx.unread().first() {
        return Err(OpError::Unsupported {
            name: name.to_string(),
            value: "present".into(),
            supported: "not read by the builder".into(),
        });
    }
    evaluate(op.as_ref(), inputs, 1 << 24)
}
