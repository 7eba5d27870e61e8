//! Activations kept in half only: at fp16 and bf16, an f32 activation that an elementwise kernel
//! or a LayerNormalization computes, that the precision pass casts to half for the next products,
//! and whose other readers are all elementwise is stored in half alone: a residual network's block
//! output (the next block's convolutions read the half copy, its residual Add the f32 one), a
//! post-norm transformer's LayerNorm output (the next layer's products and its residual Add). The
//! other readers read it through a Cast back to f32, which the elementwise fusion merges into their
//! kernels, so the kernel computing the activation writes two bytes an element instead of six, and
//! no separate Cast kernel rounds it (a LayerNorm stores the half copy in its own pass). The
//! residual path then carries the half-rounded value, as PyTorch's half models do; the arithmetic,
//! and a norm's statistics, stay f32 in registers.

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
    let computes = super::layout::elementwise(&producer.op_type) || producer.op_type == "LayerNormalization";
    if !f32_activation || !computes || graph.outputs.iter().any(|o| o.value == v) {
        return None;
    }
    let others: Vec<(usize, &Node)> =
        graph.nodes.iter().enumerate().filter(|(k, n)| *k != index && n.inputs.contains(&Some(v))).collect();
    // Each other reader elementwise, and after the Cast: the widened copy is defined right after it.
    let all_after = others.iter().all(|&(k, n)| k > index && super::layout::elementwise(&n.op_type));
    (!others.is_empty() && all_after).then_some((v, h))
}

/// A Cast of `half_value` back to f32, defining a new value named after `like`.
fn widen(graph: &mut Graph, half_value: ValueId, like: ValueId) -> Option<Node> {
    let value = graph.value(like);
    let name = format!("{}:widened", value.name);
    let ty = value.ty.as_ref().map(|t| ValueType::new(DType::F32, t.dims.clone()));
    let out = graph.add_value(Value { name: name.clone(), ty, constant: None, dims_value: None });
    super::precision::cast(graph, name, half_value, out).ok()
}

#[cfg(test)]
mod tests {
    use saggar_shape::{DType, Dim};

    use crate::builder::ModelBuilder;
    use crate::graph::passes::precision::convert_products;
    use crate::tensor::{Tensor, TensorData};
    use crate::{ImportLimits, OnnxModel};

    /// A post-norm block: `n = LayerNorm(x)` feeds a product (through the precision pass's Cast) and
    /// the residual `Add(n, r)` before a second LayerNorm. The Add reads the half copy through a Cast,
    /// so the first norm's f32 result has the Cast to half as its only reader (the norm stores only
    /// the half copy); the second norm's result is a graph output and stays f32.
    #[test]
    fn a_norm_read_by_its_half_cast_and_a_residual_add_is_stored_in_half_only() {
        let d = |v: &[u64]| v.iter().map(|&x| Dim::Fixed(x)).collect::<Vec<_>>();
        let constant = |dims: &[usize], seed: f32| {
            let n: usize = dims.iter().product();
            Tensor::new(dims.to_vec(), TensorData::F32((0..n).map(|i| ((i as f32 + seed) * 0.37).sin()).collect()))
                .unwrap()
        };
        let mut b = ModelBuilder::new(17);
        b.input("x", DType::F32, &d(&[2, 3, 8]));
        for (name, dims, seed) in [("g", &[8][..], 1.0), ("beta", &[8], 2.0), ("w", &[8, 8], 3.0)] {
            b.initializer(name, &constant(dims, seed));
        }
        b.node("LayerNormalization", &["x", "g", "beta"], &["n"], &[]);
        b.node("MatMul", &["n", "w"], &["p"], &[]).node("Relu", &["p"], &["r"], &[]);
        b.node("Add", &["n", "r"], &["s"], &[]).node("LayerNormalization", &["s", "g", "beta"], &["y"], &[]);
        b.output("y", DType::F32, &d(&[2, 3, 8]));
        let model = OnnxModel::from_bytes(&b.to_bytes(), "post-norm", &ImportLimits::default()).unwrap();
        let mut graph = model.graph().clone();
        convert_products(&mut graph, DType::F16, &[]).unwrap();
        assert_eq!(super::half_only_activations(&mut graph), 1, "the second norm is a graph output");
        let ops: Vec<&str> = graph.nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops, ["LayerNormalization", "Cast", "Cast", "MatMul", "Relu", "Add", "LayerNormalization"]);
        let n = graph.nodes[0].outputs[0];
        assert_eq!(graph.readers()[n.0], [1], "the first norm's f32 result feeds only its Cast to half");
        let (to_half, widened) = (&graph.nodes[1], &graph.nodes[2]);
        assert_eq!(graph.ty(to_half.outputs[0]).unwrap().dtype, DType::F16);
        assert_eq!(widened.inputs[0], Some(to_half.outputs[0]));
        assert!(graph.nodes[5].inputs.contains(&Some(widened.outputs[0])), "the residual Add reads the widened copy");
    }
}
