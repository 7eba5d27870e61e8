//! Half outputs for the products whose f32 result only feeds an elementwise chain into the next
//! product's half input: a transformer's first feed-forward product and its activation (GELU, in
//! either form, with the bias add), between [`super::precision::convert_products`]'s products.
//!
//! Such a product writes f32 only for the chain to read it and round its result to half again. Here
//! it writes half (f32 accumulation still, rounded once on the way out, as PyTorch's half models
//! do), and a `Cast` back to f32 heads the chain, so the elementwise fusion reads the half
//! product and computes the chain in f32 registers: the product's write and the chain's read move
//! half the bytes. A Gemm's constant bias is rounded to half with its weights. A reshaping view
//! between the product and the chain (GPT-2's `Conv1D` restores its batch axes) is repeated on the
//! half output, so the Cast still meets the chain.

use std::collections::HashSet;

use saggar_shape::DType;

use super::precision::{VIEWS, half_constant, half_twin};
use crate::error::OnnxError;
use crate::graph::ir::{Graph, Node, Value, ValueId};
use crate::import::proto::data_type;
use crate::ops::{self, Attribute, Attributes};

/// The elementwise ops a chain may hold: what activations and their bias adds are made of.
const CHAIN: [&str; 15] = [
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Erf",
    "Tanh",
    "Pow",
    "Relu",
    "Sigmoid",
    "Gelu",
    "Sqrt",
    "Neg",
    "HardSigmoid",
    "HardSwish",
    "Softplus",
];

/// Most nodes a chain may have (GELU's tanh form with its bias add has nine).
const MOST_NODES: usize = 16;

/// Gives the products of half operands writing f32 whose result only reaches the next product's
/// half Cast through an elementwise chain half outputs (see the module docs); returns how many.
pub(crate) fn half_outputs(graph: &mut Graph, half: DType) -> Result<usize, OnnxError> {
    let mut changed = 0;
    let mut n = 0;
    while n < graph.nodes.len() {
        if let Some(view) = half_product_writing_f32(graph, n, half).and_then(|out| chain_start(graph, out, half)) {
            rewrite(graph, n, view, half)?;
            changed += 1;
        }
        n += 1;
    }
    Ok(changed)
}

/// The f32 output of node `n` when it is a MatMul or Gemm of `half` operands writing f32 (with no
/// bias, or a constant one).
fn half_product_writing_f32(graph: &Graph, n: usize, half: DType) -> Option<ValueId> {
    let node = &graph.nodes[n];
    if !matches!(node.op_type.as_str(), "MatMul" | "Gemm") || node.outputs.len() != 1 {
        return None;
    }
    let dtype = |id: Option<ValueId>| id.and_then(|id| graph.ty(id)).map(|t| t.dtype);
    let halves = dtype(node.inputs.first().copied().flatten()) == Some(half)
        && dtype(node.inputs.get(1).copied().flatten()) == Some(half);
    let bias = node.inputs.get(2).copied().flatten();
    let bias_ok = bias.is_none_or(|c| graph.value(c).constant.is_some() && dtype(Some(c)) == Some(DType::F32));
    (halves && bias_ok && dtype(Some(node.outputs[0])) == Some(DType::F32)).then_some(node.outputs[0])
}

/// The nodes reading `id`, in order (a node reading it twice appears once).
fn readers(graph: &Graph, id: ValueId) -> Vec<usize> {
    (0..graph.nodes.len()).filter(|&r| graph.nodes[r].inputs.contains(&Some(id))).collect()
}

/// Where a chain starting at product output `out` begins: `Some(None)` at `out` itself,
/// `Some(Some(v))` after the single reshaping view node `v` reading it; `None` when what reads
/// `out` is not one elementwise chain ending in a single Cast to `half`.
fn chain_start(graph: &Graph, out: ValueId, half: DType) -> Option<Option<usize>> {
    let first = readers(graph, out);
    if let [v] = first.as_slice()
        && VIEWS.contains(&graph.nodes[*v].op_type.as_str())
        && graph.nodes[*v].outputs.len() == 1
    {
        let viewed = graph.nodes[*v].outputs[0];
        return chain_ends_in_half_cast(graph, viewed, half).then_some(Some(*v));
    }
    chain_ends_in_half_cast(graph, out, half).then_some(None)
}

/// Whether everything reading `start` is an elementwise chain of [`CHAIN`] nodes over `start`,
/// their own values and constants, read by nothing but each other and one Cast to `half`, and no
/// graph output.
fn chain_ends_in_half_cast(graph: &Graph, start: ValueId, half: DType) -> bool {
    let outputs: HashSet<ValueId> = graph.outputs.iter().map(|o| o.value).collect();
    let (mut region, mut sink) = (HashSet::new(), None);
    let mut inside = HashSet::from([start]);
    let mut pending = vec![start];
    while let Some(value) = pending.pop() {
        if outputs.contains(&value) {
            return false;
        }
        for r in readers(graph, value) {
            if region.contains(&r) || sink == Some(r) {
                continue;
            }
            if graph.half_cast(r) == Some(half) {
                if sink.is_some() {
                    return false;
                }
                sink = Some(r);
                continue;
            }
            let node = &graph.nodes[r];
            let f32_out = node.outputs.len() == 1 && graph.ty(node.outputs[0]).is_some_and(|t| t.dtype == DType::F32);
            if !CHAIN.contains(&node.op_type.as_str()) || !f32_out || region.len() == MOST_NODES {
                return false;
            }
            region.insert(r);
            inside.insert(node.outputs[0]);
            pending.push(node.outputs[0]);
        }
    }
    // Every operand of the chain is its own, the start, or a constant (a bias, a coefficient).
    let operands_ok = region.iter().all(|&r| {
        graph.nodes[r].inputs.iter().flatten().all(|id| inside.contains(id) || graph.value(*id).constant.is_some())
    });
    sink.is_some() && operands_ok
}

/// Product `n` writes `half` and its view `view` (if any) is repeated on the half value. Each read of
/// the f32 value the chain read (the product's, the view's, or their bias add's) becomes a Cast of
/// the half value of its own (and a bias add of its own), so each has one reader and fuses into the
/// chain's kernel, which reads the half value however many of its nodes read it.
fn rewrite(graph: &mut Graph, n: usize, view: Option<usize>, half: DType) -> Result<(), OnnxError> {
    let opset = graph.opset.max(ops::MODERN_OPSET);
    let op_type = graph.nodes[n].op_type.clone();
    let mut inputs = graph.nodes[n].inputs.clone();
    if let Some(Some(c)) = inputs.get(2).copied() {
        inputs[2] = Some(half_constant(graph, c, half)?);
    }
    let op = ops::build_op(&op_type, opset, &graph.nodes[n].attrs, inputs.len(), 1).map_err(|e| OnnxError::Graph {
        reason: format!("the half-output pass's {op_type} `{}`: {e}", graph.nodes[n].name),
    })?;
    let out = graph.nodes[n].outputs[0];
    let (_, out_half) = half_twin(graph, out, half)?;
    let node = &mut graph.nodes[n];
    (node.inputs, node.outputs, node.op) = (inputs, vec![out_half], op);
    let (mut read, mut read_half) = (out, out_half);
    if let Some(v) = view {
        let (name, twin) = half_twin(graph, graph.nodes[v].outputs[0], half)?;
        let node = &mut graph.nodes[v];
        read = node.outputs[0];
        (node.name, node.inputs[0], node.outputs) = (name, Some(out_half), vec![twin]);
        read_half = twin;
    }
    // A bias add is repeated per read, after its Cast; the original then computes nothing read.
    let add = bias_add(graph, read);
    let value = add.map_or(read, |a| graph.nodes[a].outputs[0]);
    recompute_each_read(graph, value, read_half, add.map(|a| graph.nodes[a].clone()), read)?;
    if let Some(a) = add {
        let id = graph.nodes[a].outputs[0];
        let a = graph.producer(id).expect("the bias add is still in the graph");
        graph.nodes.remove(a);
    }
    Ok(())
}

/// The single `Add` reading `value` with a constant f32 vector over its last axis.
fn bias_add(graph: &Graph, value: ValueId) -> Option<usize> {
    let [r] = readers(graph, value)[..] else { return None };
    let node = &graph.nodes[r];
    let other = node.inputs.iter().flatten().copied().find(|&id| id != value)?;
    let columns = graph.ty(value)?.dims.last()?.as_fixed()?;
    let bias = graph.value(other).constant.as_ref()?;
    let vector = bias.dims() == [columns as usize] && bias.dtype() == DType::F32;
    (node.op_type == "Add" && node.inputs.len() == 2 && vector).then_some(r)
}

/// Each read of f32 `value` becomes a read of a Cast of `half_value` of its own, inserted before the
/// reader; with `add` (the bias add computing `value` from `was`), of a copy of that add over the
/// Cast.
fn recompute_each_read(
    graph: &mut Graph,
    value: ValueId,
    half_value: ValueId,
    add: Option<Node>,
    was: ValueId,
) -> Result<(), OnnxError> {
    let opset = graph.opset.max(ops::MODERN_OPSET);
    let mut attrs = Attributes::default();
    attrs.set("to", Attribute::Int(i64::from(data_type::FLOAT)));
    let ty = graph.value(value).ty.clone();
    let fresh = |graph: &mut Graph, name: String| {
        graph.add_value(Value { name, ty: ty.clone(), constant: None, dims_value: None })
    };
    let mut r = 0;
    while r < graph.nodes.len() {
        let slots: Vec<usize> =
            (0..graph.nodes[r].inputs.len()).filter(|&k| graph.nodes[r].inputs[k] == Some(value)).collect();
        for k in slots {
            let name = format!("{}:f32:{}.{k}", graph.value(half_value).name, graph.nodes[r].name);
            let copy = fresh(graph, name.clone());
            let op = ops::build_op("Cast", opset, &attrs, 1, 1)
                .map_err(|e| OnnxError::Graph { reason: format!("the half-output pass's Cast: {e}") })?;
            let cast = Node {
                name: name.clone(),
                op_type: "Cast".into(),
                attrs: attrs.clone(),
                inputs: vec![Some(half_value)],
                outputs: vec![copy],
                op,
            };
            graph.nodes.insert(r, cast);
            r += 1;
            let mut read = copy;
            if let Some(add) = &add {
                let sum = fresh(graph, format!("{name}+bias"));
                let mut node = add.clone();
                node.name = format!("{}:{}.{k}", add.name, graph.nodes[r].name);
                node.inputs = add.inputs.iter().map(|i| if *i == Some(was) { Some(copy) } else { *i }).collect();
                node.outputs = vec![sum];
                graph.nodes.insert(r, node);
                r += 1;
                read = sum;
            }
            graph.nodes[r].inputs[k] = Some(read);
        }
        r += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use saggar_device::BackendKind;
    use saggar_shape::{DType, Dim};

    use crate::builder::ModelBuilder;
    use crate::tensor::{Tensor, TensorData};
    use crate::{OnnxCompiler, OnnxModel, OnnxOptions, Precision};

    /// `y = MatMul(gelu(MatMul(x, w1) + b1), w2)`, GELU in its erf form as exporters write it; with
    /// `output_gelu`, the activation is a graph output too.
    fn feed_forward(output_gelu: bool) -> OnnxModel {
        let mut b = ModelBuilder::new(17);
        let t = |dims: &[usize], n: usize| {
            Tensor::new(dims.to_vec(), TensorData::F32((0..n).map(|i| (i % 7) as f32 / 7.0 - 0.4).collect())).unwrap()
        };
        let scalar = |v: f32| Tensor::new(vec![], TensorData::F32(vec![v])).unwrap();
        b.input("x", DType::F32, &[Dim::symbolic("n"), Dim::Fixed(8)]);
        b.initializer("w1", &t(&[8, 16], 128)).initializer("b1", &t(&[16], 16)).initializer("w2", &t(&[16, 8], 128));
        b.initializer("sqrt2", &scalar(std::f32::consts::SQRT_2)).initializer("one", &scalar(1.0));
        b.initializer("half", &scalar(0.5));
        b.node("MatMul", &["x", "w1"], &["p"], &[]).node("Add", &["p", "b1"], &["h"], &[]);
        b.node("Div", &["h", "sqrt2"], &["d"], &[]).node("Erf", &["d"], &["e"], &[]);
        b.node("Add", &["e", "one"], &["e1"], &[]).node("Mul", &["h", "e1"], &["m"], &[]);
        b.node("Mul", &["m", "half"], &["g"], &[]).node("MatMul", &["g", "w2"], &["y"], &[]);
        b.output("y", DType::F32, &[Dim::symbolic("n"), Dim::Fixed(8)]);
        if output_gelu {
            b.output("g", DType::F32, &[Dim::symbolic("n"), Dim::Fixed(16)]);
        }
        OnnxModel::from_bytes(&b.to_bytes(), "ffn", &crate::ImportLimits::default()).unwrap()
    }

    /// The group labels of the CUDA plan at `precision`.
    fn groups(model: &OnnxModel, precision: Precision) -> Vec<String> {
        let compiler = OnnxCompiler::new(model.clone(), OnnxOptions::default().with_precision(precision));
        let lowered = compiler.lower(&[vec![4, 8]], &[], BackendKind::Cuda).unwrap();
        lowered.labels.groups.iter().map(|g| g.ops.join("+")).collect()
    }

    #[test]
    fn the_first_product_writes_half_and_its_activation_reads_it_in_one_kernel() {
        let model = feed_forward(false);
        for precision in [Precision::Fp16, Precision::Bf16] {
            let groups = groups(&model, precision);
            // The bias add and GELU read the half product through Casts of their own, in one kernel
            // that stores the half input of the second product.
            assert!(
                groups.iter().any(|g| g.starts_with("Cast+") && g.contains("Erf") && g.ends_with("+Cast")),
                "{groups:?}"
            );
            // (The lone Cast is the model input's, which no kernel computes.)
            assert_eq!(groups.iter().filter(|g| g.starts_with("Cast")).count(), 2, "{groups:?}");
        }
        let mut graph = model.graph().clone();
        super::super::precision::convert_products(&mut graph, DType::F16, &[]).unwrap();
        assert_eq!(super::half_outputs(&mut graph, DType::F16).unwrap(), 1, "the second product feeds the output");
    }

    #[test]
    fn an_activation_read_by_a_graph_output_keeps_its_product_in_f32() {
        let mut graph = feed_forward(true).graph().clone();
        super::super::precision::convert_products(&mut graph, DType::F16, &[]).unwrap();
        assert_eq!(super::half_outputs(&mut graph, DType::F16).unwrap(), 0);
    }
}
