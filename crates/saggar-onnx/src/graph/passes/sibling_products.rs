//! Sibling projections as one product: MatMuls of one activation by constant weights (`x · Wq`,
//! `x · Wk`, `x · Wv`, each maybe plus a constant bias), whose results are only split into heads
//! (read by Reshapes alone), become one MatMul by the weights side by side, one bias Add, and a
//! Split giving each projection back. The attention fusion then reads Q, K and V in place at their
//! offsets in the one result, so the Split launches nothing: one product launch where there were
//! three, and one larger product for the BLAS library.

use std::collections::HashMap;
use std::sync::Arc;

use super::fuse::add_constant;
use crate::graph::ir::{Graph, Node, Value, ValueId};
use crate::ops::{self, Attribute, Attributes, ValueType};
use crate::tensor::{Tensor, TensorData};

/// One projection of an activation: its MatMul, its bias Add when it has one, the weights
/// `[k, n]`, the bias `[n]`, and the value its readers read.
struct Projection {
    matmul: usize,
    add: Option<usize>,
    weights: Arc<Tensor>,
    bias: Option<Arc<Tensor>>,
    result: ValueId,
}

/// Merges every set of two or more sibling projections ([module docs](self)), one set a scan (a
/// merge moves the nodes after it). Runs on the imported graph, before shapes are bound.
pub(crate) fn merge_sibling_projections(graph: &mut Graph) {
    for _ in 0..graph.nodes.len() {
        let readers = graph.readers();
        let outputs: Vec<ValueId> = graph.outputs.iter().map(|o| o.value).collect();
        let mut siblings: HashMap<(ValueId, usize), Vec<Projection>> = HashMap::new();
        for n in 0..graph.nodes.len() {
            if let Some((x, p)) = projection(graph, &readers, &outputs, n) {
                siblings.entry((x, p.weights.dims()[0])).or_default().push(p);
            }
        }
        let Some(((x, _), set)) =
            siblings.into_iter().filter(|(_, ps)| ps.len() > 1).min_by_key(|(_, ps)| ps[0].matmul)
        else {
            return;
        };
        if !merge(graph, x, &set) {
            return;
        }
    }
}

/// A 2-D or 1-D f32 constant.
fn f32_constant(graph: &Graph, id: ValueId, rank: usize) -> Option<Arc<Tensor>> {
    let t = graph.value(id).constant.as_ref()?;
    (matches!(t.data(), TensorData::F32(_)) && t.dims().len() == rank).then(|| t.clone())
}

/// Node `n` as a projection of its first input, when it is one whose result only Reshapes read.
fn projection(graph: &Graph, readers: &[Vec<usize>], outputs: &[ValueId], n: usize) -> Option<(ValueId, Projection)> {
    let node = &graph.nodes[n];
    let (&[Some(x), Some(w)], [y]) = (node.inputs.as_slice(), node.outputs.as_slice()) else { return None };
    if node.op_type != "MatMul" || graph.value(x).constant.is_some() {
        return None;
    }
    let weights = f32_constant(graph, w, 2)?;
    let cols = weights.dims()[1];
    let only_read_by = |id: ValueId, ok: &dyn Fn(&Node) -> bool| {
        !outputs.contains(&id) && !readers[id.0].is_empty() && readers[id.0].iter().all(|&r| ok(&graph.nodes[r]))
    };
    // A bias Add when the product's one reader adds a constant `[n]` to it.
    let mut add = None;
    if let [a] = readers[y.0].as_slice()
        && graph.nodes[*a].op_type == "Add"
        && !outputs.contains(y)
        && let &[Some(l), Some(r)] = graph.nodes[*a].inputs.as_slice()
        && let Some(bias) = f32_constant(graph, if l == *y { r } else { l }, 1)
        && bias.dims() == [cols]
    {
        add = Some((*a, bias));
    }
    let result = add.as_ref().map_or(*y, |&(a, _)| graph.nodes[a].outputs[0]);
    if !only_read_by(result, &|r: &Node| r.op_type == "Reshape") {
        return None;
    }
    let (add, bias) = add.map_or((None, None), |(a, b)| (Some(a), Some(b)));
    Some((x, Projection { matmul: n, add, weights, bias, result }))
}

/// The projections in `set` (of activation `x`, graph order) as one MatMul, one Add when some has
/// a bias (zeros for those without), and a Split into their results, at the first one's place.
/// False, the graph untouched, where a node cannot be built.
fn merge(graph: &mut Graph, x: ValueId, set: &[Projection]) -> bool {
    let k = set[0].weights.dims()[0];
    let cols: Vec<usize> = set.iter().map(|p| p.weights.dims()[1]).collect();
    let total: usize = cols.iter().sum();
    let mut w = vec![0f32; k * total];
    let mut b = vec![0f32; total];
    let mut at = 0;
    for (p, &n) in set.iter().zip(&cols) {
        let TensorData::F32(pw) = p.weights.data() else { return false };
        for r in 0..k {
            w[r * total + at..r * total + at + n].copy_from_slice(&pw[r * n..(r + 1) * n]);
        }
        if let Some(TensorData::F32(pb)) = p.bias.as_ref().map(|t| t.data()) {
            b[at..at + n].copy_from_slice(pb);
        }
        at += n;
    }
    // The merged nodes are named after the nodes they replace, joined by `+` (never `:`, which
    // names a part of one node).
    let joined = |of: &dyn Fn(&Projection) -> Option<usize>| {
        set.iter().filter_map(of).map(|n| graph.nodes[n].name.as_str()).collect::<Vec<_>>().join("+")
    };
    let (name, add_name) = (joined(&|p| Some(p.matmul)), joined(&|p| p.add));
    let Some(product_ty) = graph.ty(graph.nodes[set[0].matmul].outputs[0]).cloned() else { return false };
    let mut dims = product_ty.dims.clone();
    let Some(last) = dims.last_mut() else { return false };
    *last = saggar_shape::Dim::Fixed(total as u64);
    let merged_ty = ValueType::new(product_ty.dtype, dims);
    let (Ok(w), Ok(b)) =
        (Tensor::new(vec![k, total], TensorData::F32(w)), Tensor::new(vec![total], TensorData::F32(b)))
    else {
        return false;
    };
    let sizes = Tensor::new(vec![cols.len()], TensorData::I64(cols.iter().map(|&c| c as i64).collect()));
    let Ok(sizes) = sizes else { return false };
    let w = add_constant(graph, format!("{name}:siblings_weight"), w);
    let product = activation(graph, format!("{name}:siblings"), &merged_ty);
    let mut nodes = vec![node(graph, &name, "MatMul", Attributes::default(), vec![x, w], vec![product])];
    let mut split_input = product;
    if set.iter().any(|p| p.bias.is_some()) {
        let b = add_constant(graph, format!("{name}:siblings_bias"), b);
        split_input = activation(graph, format!("{name}:siblings_biased"), &merged_ty);
        nodes.push(node(graph, &add_name, "Add", Attributes::default(), vec![product, b], vec![split_input]));
    }
    let sizes = add_constant(graph, format!("{name}:siblings_sizes"), sizes);
    let mut attrs = Attributes::default();
    attrs.set("axis", Attribute::Int(-1));
    let results = set.iter().map(|p| p.result).collect();
    nodes.push(node(graph, &format!("{name}/split"), "Split", attrs, vec![split_input, sizes], results));
    let Some(nodes) = nodes.into_iter().collect::<Option<Vec<Node>>>() else { return false };
    let first = set[0].matmul;
    let mut gone: Vec<usize> = set.iter().flat_map(|p| [Some(p.matmul), p.add]).flatten().collect();
    gone.sort_unstable();
    for &g in gone.iter().rev() {
        graph.nodes.remove(g);
    }
    graph.nodes.splice(first..first, nodes);
    true
}

fn activation(graph: &mut Graph, name: String, ty: &ValueType) -> ValueId {
    graph.add_value(Value { name, ty: Some(ty.clone()), constant: None, dims_value: None })
}

/// A node of `op_type` built through the op registry, or `None` when it refuses.
fn node(
    graph: &Graph,
    name: &str,
    op_type: &str,
    attrs: Attributes,
    inputs: Vec<ValueId>,
    outputs: Vec<ValueId>,
) -> Option<Node> {
    let opset = graph.opset.max(ops::MODERN_OPSET);
    let op = ops::build_op(op_type, opset, &attrs, inputs.len(), outputs.len()).ok()?;
    Some(Node {
        name: name.to_string(),
        op_type: op_type.into(),
        attrs,
        inputs: inputs.into_iter().map(Some).collect(),
        outputs,
        op,
    })
}

#[cfg(test)]
mod tests {
    use crate::graph::passes::precision::{check_keep_list, kept};
    use crate::synthetic::{AttentionConfig, attention_block};
    use crate::{ImportLimits, OnnxModel};

    /// The three projections of an attention block import as one MatMul by `[h, 3h]` weights and a
    /// Split; each replaced MatMul's name still names the merged product in a keep-fp32 list.
    #[test]
    fn sibling_projections_import_as_one_product_that_answers_to_each_name() {
        let bytes = attention_block(AttentionConfig::default()).to_bytes();
        let model = OnnxModel::from_bytes(&bytes, "attention", &ImportLimits::default()).unwrap();
        let graph = model.graph();
        let products: Vec<_> = graph.nodes.iter().filter(|n| n.op_type == "MatMul").collect();
        // The merged product, then the two attention MatMuls (scores, context).
        assert_eq!(products.len(), 3, "{:?}", graph.nodes.iter().map(|n| &n.op_type).collect::<Vec<_>>());
        let merged = products[0];
        let weights = merged.inputs[1].and_then(|w| graph.value(w).constant.clone()).unwrap();
        assert_eq!(weights.dims(), [16, 48]);
        assert_eq!(graph.nodes.iter().filter(|n| n.op_type == "Split").count(), 1);
        let names: Vec<&str> = merged.name.split('+').collect();
        assert_eq!(names.len(), 3, "{}", merged.name);
        for name in names {
            let keep = vec![name.to_string()];
            check_keep_list(graph, &keep, "attention").unwrap();
            assert!(kept(&keep, merged), "{name} keeps {}", merged.name);
        }
        assert!(check_keep_list(graph, &["not_a_node".to_string()], "attention").is_err());
    }
}
