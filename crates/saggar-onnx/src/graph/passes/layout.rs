//! Transposes moved through elementwise ops and cancelled: the layout pass that keeps a network of
//! channels-last convolutions ([`super::conv_gemm`]) channels-last between them.
//!
//! An elementwise node reading `Transpose(a, perm)` computes the same as that transpose of the node
//! applied to `a`: the node is rewritten to read `a` (its other inputs either the same transpose of
//! another value, or constants, which are transposed here once, or single values, which broadcast
//! alike in both layouts) and a Transpose of its result takes over its output. Moved forward so, a
//! transpose meets the one the next convolution put before its input, and the two compose: into
//! nothing when they are inverse (the reader then reads `a`), else into one transpose. Transposes of
//! one value by one permutation merge into one. A MaxPool or AveragePool reading a channels-first
//! view of a channels-last value becomes its channels-last form, and the transpose moves past it
//! too. Nodes no rule covers (global pools, reshapes, concatenations) keep their transposes.

use std::collections::HashMap;
use std::sync::Arc;

use crate::graph::ir::{Graph, Node, Value, ValueId};
use crate::ops::data_movement::{permute, to_channels_first, to_channels_last, transpose_by};
use crate::ops::evaluate::evaluate;
use crate::ops::{self, Attribute, ValueType};

/// Elementwise ops of one data input (the others, if any, single values such as Clip's bounds).
const UNARY: &[&str] = &[
    "Relu",
    "Cast",
    "Sigmoid",
    "Tanh",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "HardSigmoid",
    "HardSwish",
    "Clip",
    "Erf",
    "Neg",
    "Abs",
    "Exp",
    "Log",
    "Sqrt",
    "Softplus",
    "Softsign",
    "Mish",
    "Gelu",
    "Reciprocal",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "ThresholdedRelu",
    "Shrink",
];

/// Elementwise ops of two broadcasting inputs.
const BINARY: &[&str] = &["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu"];

/// Whether nodes of `op_type` are elementwise (one data input, or two broadcasting ones).
pub(crate) fn elementwise(op_type: &str) -> bool {
    UNARY.contains(&op_type) || BINARY.contains(&op_type)
}

/// The largest constant the pass transposes to move a transpose past the node reading it.
const MAX_CONSTANT_ELEMENTS: usize = 1 << 16;

/// Moves transposes forward through elementwise nodes and composes consecutive ones until nothing
/// changes, then drops the nodes left unread. Returns how many rewrites it made.
pub(crate) fn sink_transposes(graph: &mut Graph) -> usize {
    let mut rewrites = 0;
    loop {
        let mut changed = merge_duplicates(graph);
        let mut index = 0;
        while index < graph.nodes.len() {
            if compose(graph, index) {
                changed = true;
            } else if sink(graph, index) || sink_pool(graph, index) {
                changed = true;
                index += 1; // past the transpose inserted after the node
            }
            index += 1;
        }
        if !changed {
            break;
        }
        rewrites += 1;
    }
    super::simplify::remove_dead_nodes(graph);
    rewrites
}

/// Merges the Transposes of one value by one permutation (two convolutions reading one activation
/// each transpose it) into the first; returns whether any was merged.
fn merge_duplicates(graph: &mut Graph) -> bool {
    let mut seen: HashMap<(ValueId, Vec<usize>), ValueId> = HashMap::new();
    let mut merged = false;
    let mut index = 0;
    while index < graph.nodes.len() {
        let node = &graph.nodes[index];
        let key = (node.op_type == "Transpose")
            .then(|| Some((node.inputs.first().copied().flatten()?, perm(graph, node)?)))
            .flatten();
        if let Some(key) = key {
            let out = node.outputs[0];
            if let Some(&first) = seen.get(&key) {
                graph.replace_uses(out, first);
                graph.nodes.remove(index);
                merged = true;
                continue;
            }
            seen.insert(key, out);
        }
        index += 1;
    }
    merged
}

/// The permutation of Transpose node `n` (its `perm`, or the reversal it defaults to).
fn perm(graph: &Graph, n: &Node) -> Option<Vec<usize>> {
    let rank = graph.ty(n.outputs[0])?.rank();
    match n.attrs.get("perm") {
        Some(Attribute::Ints(p)) => p.iter().map(|&v| usize::try_from(v).ok().filter(|&v| v < rank)).collect(),
        None => Some((0..rank).rev().collect()),
        Some(_) => None,
    }
}

/// The Transpose node producing `id`, with its input and permutation.
fn transposed(graph: &Graph, id: ValueId) -> Option<(ValueId, Vec<usize>)> {
    let node = &graph.nodes[graph.producer(id)?];
    if node.op_type != "Transpose" {
        return None;
    }
    Some((node.inputs.first().copied().flatten()?, perm(graph, node)?))
}

/// Composes Transpose node `index` with a Transpose producing its input; returns whether it did.
fn compose(graph: &mut Graph, index: usize) -> bool {
    let node = &graph.nodes[index];
    if node.op_type != "Transpose" {
        return false;
    }
    let (Some(outer), Some(input)) = (perm(graph, node), node.inputs.first().copied().flatten()) else {
        return false;
    };
    let Some((source, inner)) = transposed(graph, input) else { return false };
    let out = node.outputs[0];
    // out[i] = input[outer[i]] = source[inner[outer[i]]].
    let combined = permute(&inner, &outer);
    if combined.iter().enumerate().all(|(i, &p)| i == p) {
        graph.replace_uses(out, source);
        graph.nodes.remove(index);
        return true;
    }
    let (op, attrs) = transpose_by(&combined);
    let node = &mut graph.nodes[index];
    node.inputs = vec![Some(source)];
    node.op = op;
    node.attrs = attrs;
    true
}

/// Moves the channels-last-to-first transpose a MaxPool or AveragePool node `index` reads to after
/// it, the pool becoming its channels-last form ([`ops::pool::channels_last_pool`]); returns whether
/// it did.
fn sink_pool(graph: &mut Graph, index: usize) -> bool {
    let node = &graph.nodes[index];
    let Some(input) = node.inputs.first().copied().flatten() else { return false };
    let Some((source, p)) = transposed(graph, input) else { return false };
    if p.len() < 3 || p != to_channels_first(p.len()) || node.inputs.len() != 1 {
        return false;
    }
    let Some(op) = ops::pool::channels_last_pool(&node.op_type, &node.attrs, graph.opset, node.outputs.len()) else {
        return false;
    };
    let out = node.outputs[0];
    let Some(out_ty) = graph.ty(out).cloned() else { return false };
    let Some(dims) = out_ty.fixed_dims() else { return false };
    let last = permute(&dims, &to_channels_last(dims.len()));
    let name = format!("{}:channels_last", graph.value(out).name);
    let ty = Some(ValueType::fixed(out_ty.dtype, &last));
    let inner = graph.add_value(Value { name, ty, constant: None, dims_value: None });
    let (transpose, attrs) = transpose_by(&p);
    let node = &mut graph.nodes[index];
    node.inputs[0] = Some(source);
    node.outputs = vec![inner];
    node.op = op;
    let name = format!("{}:transpose", node.name);
    let node =
        Node { name, op_type: "Transpose".into(), attrs, inputs: vec![Some(inner)], outputs: vec![out], op: transpose };
    graph.nodes.insert(index + 1, node);
    true
}

/// How an elementwise node's input is read once the transpose moves past the node.
enum Operand {
    /// Read the transpose's input instead.
    Source(ValueId),
    /// Broadcasts the same in both layouts (a single value): read as it is.
    Same,
    /// A constant transposed (after padding its rank) into this new constant.
    Constant(ValueId),
}

/// Moves the transpose an elementwise node `index` reads to after it; returns whether it did.
fn sink(graph: &mut Graph, index: usize) -> bool {
    let node = &graph.nodes[index];
    let unary = UNARY.contains(&node.op_type.as_str());
    if !(unary || BINARY.contains(&node.op_type.as_str())) || node.outputs.len() != 1 {
        return false;
    }
    let out = node.outputs[0];
    let Some(out_ty) = graph.ty(out).cloned() else { return false };
    let Some(out_dims) = out_ty.fixed_dims() else { return false };
    let data = if unary { 1 } else { node.inputs.len() };
    // The permutation every transposed data input shares.
    let mut shared: Option<Vec<usize>> = None;
    for id in node.inputs.iter().take(data).flatten() {
        if let Some((_, p)) = transposed(graph, *id) {
            if shared.as_ref().is_some_and(|s| *s != p) {
                return false;
            }
            shared = Some(p);
        }
    }
    let Some(p) = shared.filter(|p| p.len() == out_dims.len()) else { return false };
    let mut inverse = vec![0; p.len()];
    for (i, &axis) in p.iter().enumerate() {
        inverse[axis] = i;
    }
    let mut operands = Vec::new();
    let inputs = node.inputs.clone();
    for (j, id) in inputs.iter().enumerate() {
        let Some(id) = *id else {
            operands.push(Operand::Same);
            continue;
        };
        match operand(graph, id, j < data, &p, &inverse, &out_dims) {
            Some(o) => operands.push(o),
            None => return false,
        }
    }
    let source_dims = permute(&out_dims, &inverse);
    let name = format!("{}:unpermuted", graph.value(out).name);
    let ty = Some(ValueType::fixed(out_ty.dtype, &source_dims));
    let inner = graph.add_value(Value { name, ty, constant: None, dims_value: None });
    let (op, attrs) = transpose_by(&p);
    let node = &mut graph.nodes[index];
    for (input, operand) in node.inputs.iter_mut().zip(&operands) {
        match operand {
            Operand::Source(id) | Operand::Constant(id) => *input = Some(*id),
            Operand::Same => {}
        }
    }
    node.outputs = vec![inner];
    let name = format!("{}:transpose", node.name);
    let transpose =
        Node { name, op_type: "Transpose".into(), attrs, inputs: vec![Some(inner)], outputs: vec![out], op };
    graph.nodes.insert(index + 1, transpose);
    true
}

/// How input `id` of an elementwise node is read after the transpose `p` (inverse `inverse`) moves
/// past it, or `None` when it cannot be (a transposed input whose extents are not the output's, a
/// large or non-constant untransposed input).
fn operand(
    graph: &mut Graph,
    id: ValueId,
    data: bool,
    p: &[usize],
    inverse: &[usize],
    out_dims: &[usize],
) -> Option<Operand> {
    if data && let Some((source, q)) = transposed(graph, id) {
        let dims = graph.ty(id)?.fixed_dims()?;
        return (q == p && dims == out_dims).then_some(Operand::Source(source));
    }
    let value = graph.value(id);
    let (dtype, dims) = (value.ty.as_ref()?.dtype, value.ty.as_ref()?.fixed_dims()?);
    if dims.iter().product::<usize>() == 1 {
        return Some(Operand::Same);
    }
    let constant = value.constant.clone().filter(|c| c.len() <= MAX_CONSTANT_ELEMENTS && dims.len() <= p.len())?;
    let mut padded = vec![1; p.len() - dims.len()];
    padded.extend(&dims);
    let tensor = crate::tensor::Tensor::clone(&constant).reshaped(padded.clone()).ok()?;
    let (op, _) = transpose_by(inverse);
    let permuted = evaluate(op.as_ref(), &[Some(&tensor)], tensor.len()).ok()?.pop()?;
    let permuted_dims = permute(&padded, inverse);
    let name = format!("{}:permuted", graph.value(id).name);
    let ty = Some(ValueType::fixed(dtype, &permuted_dims));
    Some(Operand::Constant(graph.add_value(Value { name, ty, constant: Some(Arc::new(permuted)), dims_value: None })))
}

#[cfg(test)]
mod tests {
    use saggar_shape::{DType, Dim};

    use super::*;
    use crate::builder::ModelBuilder;
    use crate::graph::model::evaluate_graph;
    use crate::graph::passes::conv_gemm::{ConvEngine, convs_as_gemms};
    use crate::tensor::{Tensor, TensorData};
    use crate::{ImportLimits, OnnxModel};

    fn f32s(dims: &[usize], seed: u32) -> Tensor {
        let n: usize = dims.iter().product();
        let v = (0..n).map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0);
        Tensor::new(dims.to_vec(), TensorData::F32(v.collect())).unwrap()
    }

    /// A residual network in miniature: a padded 3x3 stem and Relu, with `pool` a max pool, then
    /// `blocks` bottlenecks (1x1, 3x3, 1x1 convolutions with Relus, a per-channel scale, the
    /// residual Add and Relu) and a global average pool.
    fn residual_net(pool: bool, blocks: usize) -> OnnxModel {
        use crate::ops::Attribute::Ints;
        let mut b = ModelBuilder::new(17);
        b.input("x", DType::F32, &[Dim::symbolic("n"), Dim::Fixed(3), Dim::Fixed(10), Dim::Fixed(10)]);
        let pad = [("pads", Ints(vec![1, 1, 1, 1]))];
        b.initializer("w", &f32s(&[8, 3, 3, 3], 1));
        b.initializer("b", &f32s(&[8], 2));
        b.node("Conv", &["x", "w", "b"], &["c"], &pad);
        b.node("Relu", &["c"], &["r"], &[]);
        let mut x = "r".to_string();
        if pool {
            let window = [("kernel_shape", Ints(vec![2, 2])), ("strides", Ints(vec![2, 2]))];
            b.node("MaxPool", &["r"], &["p"], &window);
            x = "p".into();
        }
        for k in 0..blocks {
            let v = |s: &str| format!("{s}{k}");
            for (i, dims) in [[4, 8, 1, 1], [4, 4, 3, 3], [8, 4, 1, 1]].iter().enumerate() {
                b.initializer(&v(&format!("w{i}_")), &f32s(dims, (10 * k + i) as u32));
                b.initializer(&v(&format!("b{i}_")), &f32s(&dims[..1], (10 * k + i + 5) as u32));
            }
            b.initializer(&v("scale"), &f32s(&[8, 1, 1], 20 + k as u32));
            b.node("Conv", &[&x, &v("w0_"), &v("b0_")], &[&v("c1_")], &[]);
            b.node("Relu", &[&v("c1_")], &[&v("r1_")], &[]);
            b.node("Conv", &[&v("r1_"), &v("w1_"), &v("b1_")], &[&v("c2_")], &pad);
            b.node("Relu", &[&v("c2_")], &[&v("r2_")], &[]);
            b.node("Conv", &[&v("r2_"), &v("w2_"), &v("b2_")], &[&v("c3_")], &[]);
            b.node("Mul", &[&v("c3_"), &v("scale")], &[&v("s3_")], &[]);
            b.node("Add", &[&v("s3_"), &x], &[&v("sum")], &[]);
            b.node("Relu", &[&v("sum")], &[&v("out")], &[]);
            x = v("out");
        }
        b.node("GlobalAveragePool", &[&x], &["y"], &[]);
        b.output("y", DType::F32, &[]);
        OnnxModel::from_bytes(&b.to_bytes(), "residual", &ImportLimits::default()).unwrap()
    }

    fn transposes(graph: &Graph) -> usize {
        graph.nodes.iter().filter(|n| n.op_type == "Transpose").count()
    }

    /// The largest difference relative to `1 + |want|` between two f32 outputs of equal extents.
    fn worst(got: &Tensor, want: &Tensor) -> f32 {
        assert_eq!(got.dims(), want.dims());
        let (TensorData::F32(g), TensorData::F32(w)) = (got.data(), want.data()) else { panic!("f32") };
        g.iter().zip(w).map(|(a, b)| (a - b).abs() / (1.0 + b.abs())).fold(0f32, f32::max)
    }

    #[test]
    fn a_residual_network_stays_channels_last_between_its_convolutions() {
        for (pool, blocks, auto_last) in [(true, 1, false), (false, 3, true)] {
            let model = residual_net(pool, blocks);
            let dims = [vec![2, 3, 10, 10]];
            let specialised = crate::graph::passes::specialise(model.graph(), &dims, &[], "r").unwrap();
            let x = f32s(&[2, 3, 10, 10], 7);
            let want = model.run_once(std::slice::from_ref(&x)).unwrap();
            for engine in [ConvEngine::Auto, ConvEngine::Nhwc, ConvEngine::Im2col] {
                let mut g = specialised.clone();
                convs_as_gemms(&mut g, engine);
                let got = evaluate_graph(&g, std::slice::from_ref(&x), "r").unwrap();
                let err = worst(&got[0], &want[0]);
                assert!(err <= 1e-4, "{} with pool {pool}: {err}", engine.name());
                let expected = match engine {
                    // The stem's input and the global pool's input: the transposes between the
                    // convolutions, through the Relus, the max pool (channels-last), the scales
                    // and the residual Adds, cancel.
                    ConvEngine::Nhwc => 2,
                    // Auto keeps channels-last where the transposes left move at most a quarter of
                    // the convolutions' outputs: with three blocks, not with the pool and one.
                    ConvEngine::Auto if auto_last => 2,
                    _ => 0,
                };
                assert_eq!(transposes(&g), expected, "{} with pool {pool}, {blocks} blocks", engine.name());
                if engine == ConvEngine::Nhwc {
                    let pools = g.nodes.iter().filter(|n| n.op_type == "MaxPool").count();
                    assert_eq!(pools, usize::from(pool));
                }
            }
        }
    }

    /// At fp16 the block outputs of the channels-last network are stored in half alone: the next
    /// block's residual Add reads the half copy through a Cast, and the result stays within half
    /// rounding of the f32 network.
    #[test]
    fn block_outputs_of_a_half_residual_network_are_stored_in_half_only() {
        use crate::graph::passes::{half_storage, precision};
        let model = residual_net(false, 3);
        let mut graph = model.graph().clone();
        precision::convert_products(&mut graph, DType::F16, &[]).unwrap();
        let mut g = crate::graph::passes::specialise(&graph, &[vec![2, 3, 10, 10]], &[], "r").unwrap();
        convs_as_gemms(&mut g, ConvEngine::Nhwc);
        let f32_readers = |g: &Graph| {
            let uses = g.use_counts();
            (0..g.nodes.len())
                .filter(|&k| g.half_cast(k).is_some())
                .map(|k| uses[g.nodes[k].inputs[0].unwrap().0])
                .max()
        };
        assert_eq!(f32_readers(&g), Some(2), "a block output: its Cast and the next residual Add");
        // The stem's and the first two blocks' outputs.
        assert_eq!(half_storage::half_only_activations(&mut g), 3);
        assert_eq!(f32_readers(&g), Some(1), "only the Cast reads an activation it rounds");
        let x = f32s(&[2, 3, 10, 10], 7);
        let half = evaluate_graph(&g, std::slice::from_ref(&x), "r").unwrap();
        let exact = model.run_once(std::slice::from_ref(&x)).unwrap();
        let err = worst(&half[0], &exact[0]);
        assert!(err > 0.0 && err < 2e-2, "fp16 against f32: {err}");
    }

    #[test]
    fn convolutions_between_ops_the_pass_cannot_cross_stay_channels_first_under_auto() {
        // Grouped (depthwise) convolutions between pointwise ones: each pointwise convolution would
        // keep a transpose on both sides.
        use crate::ops::Attribute::{Int, Ints};
        let mut b = ModelBuilder::new(17);
        b.input("x", DType::F32, &[Dim::Fixed(2), Dim::Fixed(4), Dim::Fixed(6), Dim::Fixed(6)]);
        b.initializer("pw0", &f32s(&[8, 4, 1, 1], 1));
        b.initializer("dw", &f32s(&[8, 1, 3, 3], 2));
        b.initializer("pw1", &f32s(&[4, 8, 1, 1], 3));
        b.node("Conv", &["x", "pw0"], &["a"], &[]);
        b.node("Conv", &["a", "dw"], &["d"], &[("group", Int(8)), ("pads", Ints(vec![1, 1, 1, 1]))]);
        b.node("Conv", &["d", "pw1"], &["y"], &[]);
        b.output("y", DType::F32, &[]);
        let model = OnnxModel::from_bytes(&b.to_bytes(), "depthwise", &ImportLimits::default()).unwrap();
        let specialised = crate::graph::passes::specialise(model.graph(), &[vec![2, 4, 6, 6]], &[], "d").unwrap();
        let mut auto = specialised.clone();
        convs_as_gemms(&mut auto, ConvEngine::Auto);
        assert_eq!(transposes(&auto), 0, "channels-first");
        assert_eq!(auto.nodes.iter().filter(|n| n.op_type == "MatMul").count(), 2);
        let mut last = specialised;
        convs_as_gemms(&mut last, ConvEngine::Nhwc);
        assert_eq!(transposes(&last), 4);
    }

    #[test]
    fn inverse_transposes_compose_into_nothing_and_others_into_one() {
        use crate::ops::Attribute::Ints;
        let mut b = ModelBuilder::new(17);
        b.input("x", DType::F32, &[Dim::Fixed(2), Dim::Fixed(3), Dim::Fixed(4)]);
        b.node("Transpose", &["x"], &["t0"], &[("perm", Ints(vec![1, 2, 0]))]);
        b.node("Relu", &["t0"], &["r"], &[]);
        b.node("Transpose", &["r"], &["t1"], &[("perm", Ints(vec![2, 0, 1]))]);
        b.node("Transpose", &["t1"], &["t2"], &[("perm", Ints(vec![0, 2, 1]))]);
        b.output("t1", DType::F32, &[]);
        b.output("t2", DType::F32, &[]);
        let model = OnnxModel::from_bytes(&b.to_bytes(), "perm", &ImportLimits::default()).unwrap();
        let mut g = crate::graph::passes::specialise(model.graph(), &[vec![2, 3, 4]], &[], "p").unwrap();
        sink_transposes(&mut g);
        // t1 = Relu(x); t2 = Transpose(Relu(x), [0, 2, 1]).
        let ops: Vec<&str> = g.nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops, ["Relu", "Transpose"]);
        assert_eq!(g.outputs[0].value, g.nodes[0].outputs[0]);
        let x = f32s(&[2, 3, 4], 5);
        let got = evaluate_graph(&g, std::slice::from_ref(&x), "p").unwrap();
        let want = model.run_once(std::slice::from_ref(&x)).unwrap();
        assert_eq!(got, want);
    }
}
