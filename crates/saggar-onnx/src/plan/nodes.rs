//! What each node of a specialised graph is: its concrete operands and its GPU form
//! ([`crate::ops::Op::gpu`]), computed once per lowering and read by fusion and lowering alike.

use crate::error::{OnnxError, OpError};
use crate::graph::ir::{Graph, ValueId};
use crate::ops::gpu::{GpuCtx, GpuNode, Operand, ctype};
use crate::ops::{InferInput, InferInputs};

/// Per node: its operands and what it is on the GPU.
#[derive(Debug)]
pub(crate) struct NodeInfo {
    pub(crate) inputs: Vec<Option<Operand>>,
    pub(crate) outputs: Vec<Operand>,
    /// `None`: no GPU lowering for the op; `Some(Err)`: not for these operands.
    pub(crate) gpu: Option<Result<GpuNode, OpError>>,
}

impl NodeInfo {
    /// The expression when the node is elementwise on the GPU with device element types throughout.
    pub(crate) fn elementwise(&self) -> Option<&str> {
        match &self.gpu {
            Some(Ok(GpuNode::Elementwise(e)))
                if self.outputs.len() == 1
                    && self.outputs.iter().chain(self.inputs.iter().flatten()).all(|o| ctype(o.dtype).is_some()) =>
            {
                Some(e)
            }
            _ => None,
        }
    }
}

/// Element type and fixed dimensions of a value.
pub(crate) fn operand(graph: &Graph, id: ValueId) -> Result<Operand, OnnxError> {
    let v = graph.value(id);
    let ty = v.ty.as_ref().ok_or_else(|| OnnxError::Graph { reason: format!("value `{}` has no type", v.name) })?;
    let dims = ty
        .fixed_dims()
        .ok_or_else(|| OnnxError::Graph { reason: format!("value `{}` has shape {ty}, not fixed", v.name) })?;
    Ok(Operand { dtype: ty.dtype, dims })
}

/// Operands and GPU forms of every node of a specialised graph.
pub(crate) fn describe(graph: &Graph) -> Result<Vec<NodeInfo>, OnnxError> {
    graph
        .nodes
        .iter()
        .map(|node| {
            let inputs: Vec<Option<Operand>> =
                node.inputs.iter().map(|i| i.map(|id| operand(graph, id)).transpose()).collect::<Result<_, _>>()?;
            let outputs: Vec<Operand> = node.outputs.iter().map(|&id| operand(graph, id)).collect::<Result<_, _>>()?;
            let slots: Vec<Option<InferInput<'_>>> = node
                .inputs
                .iter()
                .map(|i| {
                    i.and_then(|id| {
                        let v = graph.value(id);
                        v.ty.as_ref().map(|ty| InferInput { ty, value: v.constant.as_deref(), dims_value: None })
                    })
                })
                .collect();
            let infer = InferInputs::new(&slots);
            let gpu = node.op.gpu(&GpuCtx { inputs: &inputs, outputs: &outputs, infer: &infer });
            Ok(NodeInfo { inputs, outputs, gpu })
        })
        .collect()
}
