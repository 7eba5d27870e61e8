//! Activations kept in half only: at fp16 and bf16, an f32 activation that an elementwise kernel
//! computes, that the precision pass casts to half for the next products, and whose other readers
//! are all elementwise (a residual network's block output: the next block's convolutions read the
//! half copy, its residual Add the f32 one) is stored in half alone. The other readers read it
//! through a Cast back to f32, which the elementwise fusion merges into their kernels, so the
//! kernel computing the activation writes two bytes an element instead of six, and no separate
//! Cast kernel rounds it. The residual path then carries the half-rounded value, as PyTorch's half
//! models do; the arithmetic stays f32 in registers.

use crate::graph::ir::{Graph, Node, Value, ValueId};
use crate::ops::ValueType;
use saggar_shape::DType;

/// Rewrites the f32 readers of every such activation (see the module docs) to read its half copy
/// through a Cast; returns how many activations it changed.
pub(crate) fn half_only_activations(graph: &mut Graph) -> usize {
    let mut changed = 0;
    let mut index = 0;
    while index < graph.nodes.len() {
        if let Some((f32_value, half_value)) = candidate(graph, index) {
            let Some(cast) = widen(graph, half_value, f32_value) else { break };
            // Every reader but the rounding Cast itself (the value is no graph output).
            graph.replace_uses(f32_value, cast.outputs[0]);
            graph.nodes[index].inputs[0] = Some(f32_value);
            graph.nodes.insert(index + 1, cast);
            changed += 1;
        }
        index += 1;
    }
    changed
}

/// `(v, h)` when node `index` is a Cast of an f32 activation `v` to half `h` that the module docs
/// describe.
fn candidate(graph: &Graph, index: usize) -> Option<(ValueId, ValueId)> {
    graph.half_cast(index)?;
    let node = &graph.nodes[index];
    let (v, h) = (node.inputs.first().copied().flatten()?, node.outputs[0]);
    let producer = &graph.nodes[graph.producer(v)?];
    let f32_activation = graph.ty(v).is_some_and(|t| t.dtype == DType::F32) && graph.value(v).constant.is_none();
    if !f32_activation || !super::layout::elementwise(&producer.op_type) || graph.outputs.iter().any(|o| o.value == v) {
        return None;
    }
    let others: Vec<&Node> = graph
        .nodes
        .iter()
        .enumerate()
        .filter(|(k, n)| *k != index && n.inputs.contains(&Some(v)))
        .map(|(_, n)| n)
        .collect();
    (!others.is_empty() && others.iter().all(|n| super::layout::elementwise(&n.op_type))).then_some((v, h))
}

/// A Cast of `half_value` back to f32, defining a new value named after `like`.
fn widen(graph: &mut Graph, half_value: ValueId, like: ValueId) -> Option<Node> {
    let value = graph.value(like);
    let name = format!("{}:widened", value.name);
    let ty = value.ty.as_ref().map(|t| ValueType::new(DType::F32, t.dims.clone()));
    let out = graph.add_value(Value { name: name.clone(), ty, constant: None, dims_value: None });
    super::precision::cast(graph, name, half_value, out).ok()
}
