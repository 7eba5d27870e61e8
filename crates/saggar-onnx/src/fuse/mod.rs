//! Fusion: which nodes run as one kernel, decided in four passes, and the fused kernels themselves,
//! one file or folder per fusion.
//!
//! 1. Attention patterns ([`crate::fuse::attention`]): each becomes one group rooted at its last node.
//! 2. Elementwise chains, among the other nodes. Rule: a node whose GPU form is an elementwise
//!    expression ([`GpuNode::Elementwise`]), whose single output is not a graph output and is read
//!    only by elementwise nodes of one group, joins that group. Read by one node, it joins that
//!    node's group; read by several (GELU's `x` by its Div and its Mul, SiLU's by Sigmoid and Mul),
//!    the value is computed once per element in the group's kernel and used by each reader, except
//!    where it reads a MatMul's or Gemm's result (a bias Add there is left to the BLAS epilogue,
//!    pass 5). Groups are therefore graphs of elementwise nodes with one result (the root, the last
//!    node in graph order); they run at the root's position. Intermediates are never stored: every
//!    group input is read at the broadcast position of the root's output (broadcasting composes,
//!    so an intermediate of a smaller shape is recomputed per output element instead).
//! 3. An embedding bag: a Gather read only by a ReduceSum or ReduceMean over its index axes
//!    ([`crate::fuse::embedding_bag`]) is one group rooted at the reduction.
//! 4. A LayerNormalization without statistics outputs whose input is an elementwise group's result
//!    read by nothing else takes that group in ([`crate::fuse::layer_norm`]). When the first reader
//!    of its result is a Cast of it to f16 or bf16 (a half-precision product's activation), that
//!    Cast joins the group as its root: the norm's kernel stores the half copy too, and the f32
//!    result only where something else reads it. A per-tensor QuantizeLinear to `i8` or `u8` (a
//!    QDQ model's quantised activation) joins a norm that has an input group the same way. Nothing
//!    between the norm and that node reads the result, so the group may run at its position.
//!
//! 5. A GEMM whose only reader is a bias add or ReLU group takes it into its BLAS-Lt epilogue
//!    ([`blas_epilogue`]; decided by the lowering, which knows whether BLAS-Lt runs the GEMM).
//!
//! Without fusion ([`crate::OnnxOptions::fusion`] off) every node is its own group. The decision
//! depends only on the graph and the ops, not on the backend, so the host backend runs the same
//! grouping (each group one host kernel evaluating its nodes in order) as CUDA and HIP.

pub(crate) mod attention;
pub(crate) mod blas_epilogue;
pub(crate) mod elementwise;
pub(crate) mod embedding_bag;
pub(crate) mod layer_norm;

use std::collections::{HashMap, HashSet};

use saggar_shape::DType;

use self::attention::Attention;
use self::embedding_bag::EmbeddingBag;
use self::layer_norm::{NormCopy, is_plain_layer_norm, norm_copy};
use crate::graph::ir::{Graph, ValueId};
use crate::plan::nodes::NodeInfo;

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

/// Groups the nodes of `graph`: attention patterns first ([`crate::fuse::attention`]), embedding bags
/// ([`crate::fuse::embedding_bag`]), then elementwise chains among the other nodes. Without `fuse` every
/// node is its own group.
pub(crate) fn group(graph: &Graph, info: &[NodeInfo], fuse: bool) -> Grouping {
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
    let mut producer = vec![usize::MAX; graph.values.len()];
    for (i, node) in graph.nodes.iter().enumerate() {
        for o in &node.outputs {
            producer[o.0] = i;
        }
    }
    let graph_outputs: HashSet<ValueId> = graph.outputs.iter().map(|o| o.value).collect();
    let readers = graph.readers();
    // Last to first, so that each reader's group is settled when its producer is considered.
    for i in (0..graph.nodes.len()).rev() {
        let node = &graph.nodes[i];
        let [out] = node.outputs.as_slice() else { continue };
        let rs = &readers[out.0];
        if claimed[i]
            || info[i].elementwise().is_none()
            || graph_outputs.contains(out)
            || rs.is_empty()
            || rs.len() != uses[out.0]
            || (rs.len() > 1 && reads_a_product(graph, &producer, i))
        {
            continue;
        }
        let joinable = |r: usize| r > i && !claimed[r] && info[r].elementwise().is_some();
        if rs.iter().all(|&r| joinable(r) && root[r] == root[rs[0]]) {
            root[i] = root[rs[0]];
        }
    }
    // A LayerNormalization whose input is an elementwise group's result read by nothing else
    // computes that group itself ([`layer_norm`]).
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
        join(&mut root, p, ln);
    }
    join_norm_copies(graph, info, &readers, &claimed, &mut root);
    Grouping { root, attention, bags }
}

/// Whether node `i` reads a MatMul's or Gemm's result: a bias Add or Relu there is left to the
/// GEMM's BLAS-Lt epilogue ([`blas_epilogue`]), which takes only a group of its own.
fn reads_a_product(graph: &Graph, producer: &[usize], i: usize) -> bool {
    graph.nodes[i].inputs.iter().flatten().any(|id| {
        producer
            .get(id.0)
            .and_then(|&p| graph.nodes.get(p))
            .is_some_and(|n| matches!(n.op_type.as_str(), "MatMul" | "Gemm"))
    })
}

/// Ends the group of each plain LayerNormalization with the half Cast or the per-tensor
/// QuantizeLinear that first reads its result, where that node is a group of its own.
/// `readers`: each value's readers in graph order ([`Graph::readers`]).
fn join_norm_copies(graph: &Graph, info: &[NodeInfo], readers: &[Vec<usize>], claimed: &[bool], root: &mut [usize]) {
    for ln in 0..graph.nodes.len() {
        let Some(y) = graph.nodes[ln].outputs.first() else { continue };
        let Some(&cast) = readers[y.0].first() else { continue };
        if claimed[ln] || root[ln] != ln || claimed[cast] || root[cast] != cast || !is_plain_layer_norm(graph, info, ln)
        {
            continue;
        }
        // A quantisation only where the norm has an input group: the op's own kernel stores no
        // quantised copy.
        let grouped = root.iter().take(ln).any(|&r| r == ln);
        match norm_copy(graph, info, ln, cast) {
            Some(NormCopy::Half(_)) => join(root, ln, cast),
            Some(NormCopy::Quantized(_)) if grouped => join(root, ln, cast),
            _ => {}
        }
    }
}

/// Moves the group rooted at `from` into the group rooted at `to` (later in graph order).
fn join(root: &mut [usize], from: usize, to: usize) {
    for r in root.iter_mut().take(from + 1) {
        if *r == from {
            *r = to;
        }
    }
}

#[cfg(test)]
mod tests {
    use saggar_shape::{DType, Dim};

    use super::*;
    use crate::builder::ModelBuilder;
    use crate::plan::nodes::describe;

    fn specialised(b: &ModelBuilder, dims: &[Vec<u64>]) -> Graph {
        let model = crate::OnnxModel::from_bytes(&b.to_bytes(), "m", &crate::ImportLimits::default()).unwrap();
        crate::graph::passes::specialise(model.graph(), dims, &[], "m").unwrap()
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
        let root = group(&g, &info, true).root;
        let at = |op: &str| g.nodes.iter().position(|n| n.op_type == op).unwrap();
        assert_eq!(root[at("MatMul")], at("MatMul"), "GEMMs are not fused");
        // `a` has two readers (Erf and Mul): Add stays its own group; Erf, Mul and Relu fuse.
        assert_eq!(root[at("Add")], at("Add"));
        assert_eq!(root[at("Erf")], at("Relu"));
        assert_eq!(root[at("Mul")], at("Relu"));
        assert_eq!(root[at("Relu")], at("Relu"));
    }

    /// An int8 encoder's GELU: the requantised product's value (not a GEMM's own result) is read by
    /// GELU's Div and Mul, one group with the chain before it; a value read by two groups is not.
    #[test]
    fn a_value_read_only_inside_one_group_joins_it_and_one_read_by_two_groups_does_not() {
        let build = |neg: bool| {
            let mut b = ModelBuilder::new(17);
            b.input("x", DType::I32, &[Dim::symbolic("n"), Dim::Fixed(4)]);
            let t = |v: f32| crate::Tensor::new(vec![4], crate::TensorData::F32(vec![v; 4])).unwrap();
            b.initializer("scale", &t(0.5));
            b.initializer("bias", &t(0.25));
            b.initializer(
                "root2",
                &crate::Tensor::new(vec![], crate::TensorData::F32(vec![std::f32::consts::SQRT_2])).unwrap(),
            );
            b.node("Cast", &["x"], &["xf"], &[("to", crate::ops::Attribute::Int(1))]);
            b.node("Mul", &["xf", "scale"], &["s"], &[]);
            b.node("Add", &["s", "bias"], &["a"], &[]);
            b.node("Div", &["a", "root2"], &["d"], &[]);
            b.node("Erf", &["d"], &["e"], &[]);
            b.node("Mul", &["a", "e"], &["g"], &[]);
            b.node("Relu", &["g"], &["y"], &[]);
            b.output("y", DType::F32, &[Dim::symbolic("n"), Dim::Fixed(4)]);
            if neg {
                b.node("Neg", &["a"], &["z"], &[]);
                b.output("z", DType::F32, &[Dim::symbolic("n"), Dim::Fixed(4)]);
            }
            let g = specialised(&b, &[vec![3, 4]]);
            let info = describe(&g).unwrap();
            let root = group(&g, &info, true).root;
            (g, root)
        };
        // `a` read only by the GELU's Div and Mul: one group, Relu its root.
        let (g, root) = build(false);
        let relu = g.nodes.iter().position(|n| n.op_type == "Relu").unwrap();
        assert!(root.iter().all(|&r| r == relu), "{root:?}");
        // With Neg reading `a` too, `a`'s chain is a group of its own, stored for both.
        let (g, root) = build(true);
        let at = |op: &str| g.nodes.iter().position(|n| n.op_type == op).unwrap();
        let add = at("Add");
        assert_eq!((root[at("Cast")], root[add]), (add, add));
        assert_eq!((root[at("Div")], root[at("Erf")]), (at("Relu"), at("Relu")));
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
            let root = group(&g, &info, true).root;
            let ln = g.nodes.iter().position(|n| n.op_type == "LayerNormalization").unwrap();
            let expect = if stats { 1 } else { ln };
            assert_eq!((root[0], root[1], root[ln]), (expect, expect, ln), "statistics outputs: {stats}");
            assert_eq!(group(&g, &info, false).root, (0..g.nodes.len()).collect::<Vec<_>>(), "fusion off");
        }
    }
}
