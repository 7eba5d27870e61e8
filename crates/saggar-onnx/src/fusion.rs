//! Fusion: which nodes run as one kernel, decided in four passes.
//!
//! 1. Attention patterns ([`crate::attention`]): each becomes one group rooted at its last node.
//! 2. Elementwise chains, among the other nodes. Rule: a node whose GPU form is an elementwise
//!    expression ([`GpuNode::Elementwise`]) and whose single output is read by exactly one node,
//!    that node also elementwise, and is not a graph output, joins its reader's group. Groups are
//!    therefore trees of elementwise nodes with one result (the root, the last node in graph order);
//!    they run at the root's position. Intermediates are never stored: every group input is read at
//!    the broadcast position of the root's output (broadcasting composes, so an intermediate of a
//!    smaller shape is recomputed per output element instead).
//! 3. An embedding bag: a Gather read only by a ReduceSum or ReduceMean over its index axes
//!    ([`crate::embedding_bag`]) is one group rooted at the reduction.
//! 4. A LayerNormalization without statistics outputs whose input is an elementwise group's result
//!    read by nothing else takes that group in ([`crate::gpu_prologue`]).
//!
//! Without fusion ([`crate::OnnxOptions::fusion`] off) every node is its own group. The decision
//! depends only on the graph and the ops, not on the backend, so the host backend runs the same
//! grouping (each group one host kernel evaluating its nodes in order) as CUDA and HIP.

use std::collections::{HashMap, HashSet};

use saggar_shape::DType;

use crate::attention::{self, Attention};
use crate::embedding_bag::{self, EmbeddingBag};
use crate::error::OnnxError;
use crate::host_kernels::Operand;
use crate::ir::{Graph, ValueId};
use crate::ops::gpu::{GpuCtx, GpuKind, GpuNode, ctype};
use crate::ops::{InferInput, InferInputs, OpError};

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

/// Which nodes run together.
#[derive(Debug, Clone)]
pub(crate) struct Grouping {
    /// `root[i]`: the node whose group node `i` belongs to (`root[i] == i` for a group's root).
    pub(crate) root: Vec<usize>,
    /// The attention groups, by root.
    pub(crate) attention: HashMap<usize, Attention>,
    /// The embedding bags, by root (the reduction).
    pub(crate) bags: HashMap<usize, EmbeddingBag>,
}

/// Groups the nodes of `graph`: attention patterns first ([`crate::attention`]), embedding bags
/// ([`crate::embedding_bag`]), then elementwise chains among the other nodes. Without `fuse` every
/// node is its own group.
pub(crate) fn plan(graph: &Graph, info: &[NodeInfo], fuse: bool) -> Grouping {
    let mut root: Vec<usize> = (0..graph.nodes.len()).collect();
    let mut attention = HashMap::new();
    if !fuse {
        return Grouping { root, attention, bags: HashMap::new() };
    }
    let mut claimed = vec![false; graph.nodes.len()];
    for a in attention::find(graph, info) {
        let r = *a.members.last().expect("a pattern has nodes");
        for &m in &a.members {
            root[m] = r;
            claimed[m] = true;
        }
        attention.insert(r, a);
    }
    let bags = embedding_bag::find(graph, info, &claimed);
    for bag in bags.values() {
        root[bag.gather] = bag.reduce;
        claimed[bag.gather] = true;
        claimed[bag.reduce] = true;
    }
    let uses = graph.use_counts();
    let graph_outputs: HashSet<ValueId> = graph.outputs.iter().map(|o| o.value).collect();
    let mut reader = vec![usize::MAX; graph.values.len()];
    for (i, node) in graph.nodes.iter().enumerate() {
        for id in node.inputs.iter().flatten() {
            reader[id.0] = i;
        }
    }
    for i in (0..graph.nodes.len()).rev() {
        let node = &graph.nodes[i];
        let [out] = node.outputs.as_slice() else { continue };
        if claimed[i] || info[i].elementwise().is_none() || uses[out.0] != 1 || graph_outputs.contains(out) {
            continue;
        }
        let r = reader[out.0];
        if r != usize::MAX && r > i && !claimed[r] && info[r].elementwise().is_some() {
            root[i] = root[r];
        }
    }
    // A LayerNormalization whose input is an elementwise group's result read by nothing else
    // computes that group itself (`gpu_prologue`).
    let mut producer = vec![usize::MAX; graph.values.len()];
    for (i, node) in graph.nodes.iter().enumerate() {
        for o in &node.outputs {
            producer[o.0] = i;
        }
    }
    for ln in 0..graph.nodes.len() {
        let Some(Some(x)) = graph.nodes[ln].inputs.first() else { continue };
        let p = producer[x.0];
        if !is_plain_layer_norm(graph, info, ln)
            || p == usize::MAX
            || claimed[p]
            || root[p] != p
            || info[p].elementwise().is_none()
            || info[p].outputs[0].dtype != DType::F32
            || uses[x.0] != 1
            || graph_outputs.contains(x)
        {
            continue;
        }
        for r in root.iter_mut().take(p + 1) {
            if *r == p {
                *r = ln;
            }
        }
    }
    Grouping { root, attention, bags }
}

/// Whether node `n` is a LayerNormalization launching one kernel without its statistics outputs.
pub(crate) fn is_plain_layer_norm(graph: &Graph, info: &[NodeInfo], n: usize) -> bool {
    graph.nodes[n].op_type == "LayerNormalization"
        && graph.nodes[n].outputs.len() == 1
        && matches!(&info[n].gpu, Some(Ok(GpuNode::Launches(l)))
            if matches!(l.as_slice(), [one] if matches!(one.kind, GpuKind::LayerNorm { stats: 0, channels: false, .. })))
}

#[cfg(test)]
mod tests {
    use saggar_shape::{DType, Dim};

    use super::*;
    use crate::builder::ModelBuilder;

    fn specialised(b: &ModelBuilder, dims: &[Vec<u64>]) -> Graph {
        let model = crate::OnnxModel::from_bytes(&b.to_bytes(), "m", &crate::ImportLimits::default()).unwrap();
        crate::passes::specialise(model.graph(), dims, "m").unwrap()
    }

    #[test]
    fn a_chain_of_single_use_elementwise_nodes_is_one_group_and_a_shared_value_splits_it() {
        let mut b = ModelBuilder::new(17);
        b.input("x", DType::F32, &[Dim::symbolic("n"), Dim::Fixed(4)]);
        b.input("bias", DType::F32, &[Dim::Fixed(4)]);
        b.node("MatMul", &["x", "w"], &["mm"], &[]);
        b.initializer("w", &crate::Tensor::new(vec![4, 4], crate::TensorData::F32(vec![0.5; 16])).unwrap());
        b.node("Add", &["mm", "bias"], &["a"], &[]);
        b.node("Erf", &["a"], &["e"], &[]);
        b.node("Mul", &["e", "a"], &["m"], &[]);
        b.node("Relu", &["m"], &["r"], &[]);
        b.output("r", DType::F32, &[Dim::symbolic("n"), Dim::Fixed(4)]);
        let g = specialised(&b, &[vec![3, 4], vec![4]]);
        let info = describe(&g).unwrap();
        let root = plan(&g, &info, true).root;
        let at = |op: &str| g.nodes.iter().position(|n| n.op_type == op).unwrap();
        assert_eq!(root[at("MatMul")], at("MatMul"), "GEMMs are not fused");
        // `a` has two readers (Erf and Mul): Add stays its own group; Erf, Mul and Relu fuse.
        assert_eq!(root[at("Add")], at("Add"));
        assert_eq!(root[at("Erf")], at("Relu"));
        assert_eq!(root[at("Mul")], at("Relu"));
        assert_eq!(root[at("Relu")], at("Relu"));
    }

    #[test]
    fn the_elementwise_group_feeding_a_layer_norm_joins_it_unless_the_norm_has_statistics_outputs() {
        for stats in [false, true] {
            let mut b = ModelBuilder::new(17);
            b.input("x", DType::F32, &[Dim::symbolic("n"), Dim::Fixed(4)]);
            b.input("r", DType::F32, &[Dim::symbolic("n"), Dim::Fixed(4)]);
            let t = |v: f32| crate::Tensor::new(vec![4], crate::TensorData::F32(vec![v; 4])).unwrap();
            b.initializer("bias", &t(0.5));
            b.initializer("scale", &t(2.0));
            b.node("Add", &["x", "bias"], &["a"], &[]);
            b.node("Add", &["a", "r"], &["s"], &[]);
            let outs: &[&str] = if stats { &["y", "mean", "inv"] } else { &["y"] };
            b.node("LayerNormalization", &["s", "scale", "bias"], outs, &[]);
            b.output("y", DType::F32, &[]);
            let g = specialised(&b, &[vec![3, 4], vec![3, 4]]);
            let info = describe(&g).unwrap();
            let root = plan(&g, &info, true).root;
            let ln = g.nodes.iter().position(|n| n.op_type == "LayerNormalization").unwrap();
            let expect = if stats { 1 } else { ln };
            assert_eq!((root[0], root[1], root[ln]), (expect, expect, ln), "statistics outputs: {stats}");
            assert_eq!(plan(&g, &info, false).root, (0..g.nodes.len()).collect::<Vec<_>>(), "fusion off");
        }
    }
}
