//! Test helpers for op families: build an op from attributes and run it on tensors.

use crate::ops::{Attribute, Attributes, NodeCtx, OpError, evaluate::evaluate, lookup};
use crate::tensor::{Tensor, TensorData};

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

/// An f32 tensor of `dims` holding `v`.
pub fn f32s(dims: &[usize], v: &[f32]) -> Tensor {
    Tensor::new(dims.to_vec(), TensorData::F32(v.to_vec())).unwrap()
}

/// An f32 tensor of `dims` holding 0, 1, 2, ... in row-major order.
pub fn iota(dims: &[usize]) -> Tensor {
    let n = dims.iter().product::<usize>();
    Tensor::new(dims.to_vec(), TensorData::F32((0..n).map(|i| i as f32).collect())).unwrap()
}

/// The values of an f32 tensor (panics on another type).
pub fn values(t: &Tensor) -> &[f32] {
    match t.data() {
        TensorData::F32(v) => v,
        other => panic!("expected f32, found {other:?}"),
    }
}

/// An `ints` attribute.
pub fn ints(v: &[i64]) -> Attribute {
    Attribute::Ints(v.to_vec())
}

/// Asserts that every kernel kind renders completely (no `@NAME@` left, the `meta` table first) and
/// that no two share a name.
pub fn assert_kernels_render(kinds: &[Box<dyn crate::ops::gpu::GpuKernel>]) {
    let mut names = std::collections::HashSet::new();
    for kind in kinds {
        let body = kind.source();
        assert!(!body.contains('@') && body.starts_with("(const onnx_i64* meta"), "{kind:?}: {body}");
        names.insert(crate::ops::gpu::kernel_definition(kind.as_ref()).0);
    }
    assert_eq!(names.len(), kinds.len(), "two kernel kinds share a name");
}
