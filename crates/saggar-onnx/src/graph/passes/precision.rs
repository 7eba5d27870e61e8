//! Mixed precision for f32 models: their matrix products on tensor cores, in f16 or bf16.
//!
//! On the imported graph, before its weights are packed, every MatMul and Gemm whose `B` is a
//! constant f32 tensor (a layer's weights) and whose `A` is f32, and every one-group Conv with
//! constant f32 weights (the convolutions that run as im2col and a GEMM), unless the keep list names
//! it or its op type, becomes a product of half operands accumulated and written in f32
//! ([`crate::ops::linalg::half_product`], [`crate::ops::conv::half_conv_writing_f32`]):
//! - `B` is rounded to the half type once, at compile time (to nearest even); the packed weights hold
//!   only that copy when nothing else reads the f32 one;
//! - `A` gets a `Cast` to the half type, one per activation, shared by every product reading it; the
//!   elementwise fusion merges it into the kernel that computes `A` where that kernel is elementwise,
//!   and a LayerNormalization computing `A` stores it in the same pass (`fuse::layer_norm`); where
//!   `A` is a reshaping view of an activation, the activation is cast and the view repeated on the
//!   half copy, so the Cast still meets the kernel computing it;
//! - Gemm's `C`, Conv's bias and the output stay f32, so biases and activations add in f32.
//!
//! Every other op computes in f32 as before, among them the numerically sensitive ones (the
//! statistics of normalisations, Softmax, reductions, Exp/Log/Pow, CumSum, integer and shape math).
//! Products of two activations (attention scores) stay f32 too.

use std::collections::HashMap;
use std::sync::Arc;

use saggar_shape::DType;

use crate::error::OnnxError;
use crate::graph::ir::{Graph, Node, Value, ValueId};
use crate::import::proto::dtype_to_onnx;
use crate::ops::{self, Attribute, Attributes, ValueType};

/// The op types the pass converts.
const PRODUCTS: [&str; 3] = ["MatMul", "Gemm", "Conv"];

/// The views a product's activation is cast ahead of.
const VIEWS: [&str; 4] = ["Reshape", "Flatten", "Squeeze", "Unsqueeze"];

/// Checks that every entry of `keep` names a node of `graph` or an op type saggar declares, so a
/// typo is an error rather than a setting that silently does nothing.
pub(crate) fn check_keep_list(graph: &Graph, keep: &[String], model: &str) -> Result<(), OnnxError> {
    let declared = ops::declared_ops();
    for entry in keep {
        let known = declared.contains(&entry.as_str()) || graph.nodes.iter().any(|n| answers_to(n, entry));
        if !known {
            let similar: Vec<&str> =
                graph.nodes.iter().map(|n| n.name.as_str()).filter(|n| n.contains(entry.as_str())).take(5).collect();
            let hint = if similar.is_empty() {
                "list op types (LayerNormalization) or node names as the model names them (saggar check --json shows them)"
                    .to_string()
            } else {
                format!("nodes whose name contains it: {}", similar.join(", "))
            };
            return Err(OnnxError::Precision {
                model: model.to_string(),
                reason: format!(
                    "`{entry}` in the keep-fp32 list is neither an op type nor a node of the model; {hint}"
                ),
            });
        }
    }
    Ok(())
}

/// Whether `keep` names `node` or its op type.
pub(crate) fn kept(keep: &[String], node: &Node) -> bool {
    keep.iter().any(|k| *k == node.op_type || answers_to(node, k))
}

/// Whether `name` is `node`'s name, or the name of one of the nodes it replaced: a node merged
/// from several (sibling projections, `sibling_products`) is named after them, joined by `+`, so
/// keeping any of them keeps the merged node.
fn answers_to(node: &Node, name: &str) -> bool {
    node.name == name || node.name.split('+').any(|part| part == name)
}

/// Rewrites the weight products of `graph` to `half` (f16 or bf16) operands, except those `keep`
/// names (by node name or op type); returns how many it converted. See the module docs.
pub(crate) fn convert_products(graph: &mut Graph, half: DType, keep: &[String]) -> Result<usize, OnnxError> {
    let mut casts: HashMap<ValueId, ValueId> = HashMap::new();
    let mut halves: HashMap<ValueId, ValueId> = HashMap::new();
    let mut converted = 0;
    let mut index = 0;
    while index < graph.nodes.len() {
        let node = &graph.nodes[index];
        let kept = kept(keep, node);
        let Some((a, b)) = weight_product(graph, node).filter(|_| !kept) else {
            index += 1;
            continue;
        };
        let op = match node.op_type.as_str() {
            "Conv" => ops::conv::half_conv_writing_f32(&node.attrs, graph.opset, half),
            _ => ops::linalg::half_product(&node.op_type, &node.attrs, DType::F32, false),
        };
        let op = op.map_err(|e| at_node(graph, node, e))?;
        let b_half = match halves.get(&b) {
            Some(&id) => id,
            None => {
                let id = half_constant(graph, b, half)?;
                halves.insert(b, id);
                id
            }
        };
        let a_half = match (casts.get(&a), view_of(graph, a)) {
            (Some(&id), _) => id,
            // A view (GPT-2's Conv1D reshapes its input) of an activation: the half view of the
            // activation's Cast, so the Cast fuses into the kernel computing the activation.
            (None, Some((view, x))) => {
                let x_half = half_of(graph, &mut casts, &mut index, x, half)?;
                let (node, id) = half_view(graph, view, x_half, half)?;
                graph.nodes.insert(index, node);
                index += 1;
                casts.insert(a, id);
                id
            }
            (None, None) => half_of(graph, &mut casts, &mut index, a, half)?,
        };
        let node = &mut graph.nodes[index];
        node.inputs[0] = Some(a_half);
        node.inputs[1] = Some(b_half);
        node.op = op;
        converted += 1;
        index += 1;
    }
    Ok(converted)
}

/// The half Cast of activation `a`: the one made before, or a new one inserted at `index`, which
/// moves past it.
fn half_of(
    graph: &mut Graph,
    casts: &mut HashMap<ValueId, ValueId>,
    index: &mut usize,
    a: ValueId,
    half: DType,
) -> Result<ValueId, OnnxError> {
    if let Some(&id) = casts.get(&a) {
        return Ok(id);
    }
    let (cast, id) = cast_node(graph, a, half)?;
    graph.nodes.insert(*index, cast);
    *index += 1;
    casts.insert(a, id);
    Ok(id)
}

/// The reshaping view (Reshape, Flatten, Squeeze, Unsqueeze) that computes `a` and the f32
/// activation it views, when `a` is one.
fn view_of(graph: &Graph, a: ValueId) -> Option<(usize, ValueId)> {
    let view = graph.producer(a)?;
    let node = &graph.nodes[view];
    let x = node.inputs.first().copied().flatten()?;
    let activation = graph.value(x).constant.is_none() && graph.ty(x).is_some_and(|t| t.dtype == DType::F32);
    (VIEWS.contains(&node.op_type.as_str()) && node.outputs.len() == 1 && activation).then_some((view, x))
}

/// A copy of view node `view` reading `x_half` instead, and its half output.
fn half_view(graph: &mut Graph, view: usize, x_half: ValueId, half: DType) -> Result<(Node, ValueId), OnnxError> {
    let mut node = graph.nodes[view].clone();
    let (name, out) = half_twin(graph, node.outputs[0], half)?;
    node.name = name;
    node.inputs[0] = Some(x_half);
    node.outputs = vec![out];
    Ok((node, out))
}

/// `(A, B)` of a MatMul or Gemm computing an f32 activation `A` times a constant f32 `B`, or
/// `(X, W)` of a one-group Conv of an f32 activation with constant f32 weights.
fn weight_product(graph: &Graph, node: &Node) -> Option<(ValueId, ValueId)> {
    if !PRODUCTS.contains(&node.op_type.as_str()) || node.outputs.len() != 1 {
        return None;
    }
    if node.op_type == "Conv" && matches!(node.attrs.get("group"), Some(Attribute::Int(g)) if *g != 1) {
        return None;
    }
    let (a, b) = (node.inputs.first().copied().flatten()?, node.inputs.get(1).copied().flatten()?);
    let f32_value = |id: ValueId| graph.ty(id).is_some_and(|t| t.dtype == DType::F32);
    let b_const = graph.value(b).constant.as_ref().is_some_and(|t| t.dtype() == DType::F32);
    let a_activation = graph.value(a).constant.is_none() && f32_value(a);
    let out_f32 = f32_value(node.outputs[0]);
    (b_const && a_activation && out_f32).then_some((a, b))
}

/// `e`, an op's refusal while a pass rewrites `node`, as the error naming that node.
pub(crate) fn at_node(graph: &Graph, node: &Node, e: ops::OpError) -> OnnxError {
    OnnxError::Node { node: node.name.clone(), op: node.op_type.clone(), opset: graph.opset, source: Box::new(e) }
}

/// A new constant value holding constant `b` rounded to `half`.
pub(super) fn half_constant(graph: &mut Graph, b: ValueId, half: DType) -> Result<ValueId, OnnxError> {
    let value = graph.value(b);
    let name = format!("{}:{}", value.name, half);
    let tensor = value.constant.as_ref().map(|t| (**t).clone()).ok_or_else(|| graph_error("weights", &value.name))?;
    let tensor = tensor.narrowed(half).map_err(|e| OnnxError::Tensor { name: name.clone(), reason: e.to_string() })?;
    let ty = value.ty.as_ref().map(|t| ValueType::new(half, t.dims.clone()));
    Ok(graph.add_value(Value { name, ty, constant: Some(Arc::new(tensor)), dims_value: None }))
}

/// A new activation `<name of a>:<half>` of `a`'s dims in `half`: its name and id.
fn half_twin(graph: &mut Graph, a: ValueId, half: DType) -> Result<(String, ValueId), OnnxError> {
    half_twin_named(graph, a, half, "")
}

/// [`half_twin`] with `suffix` after the name, so that two half twins of one value have two names.
pub(super) fn half_twin_named(
    graph: &mut Graph,
    a: ValueId,
    half: DType,
    suffix: &str,
) -> Result<(String, ValueId), OnnxError> {
    let value = graph.value(a);
    let name = format!("{}:{}{suffix}", value.name, half);
    let dims = value.ty.as_ref().map(|t| t.dims.clone()).ok_or_else(|| graph_error("activation", &value.name))?;
    let ty = Some(ValueType::new(half, dims));
    Ok((name.clone(), graph.add_value(Value { name, ty, constant: None, dims_value: None })))
}

/// A `Cast` of activation `a` to `half`, and the value it defines.
fn cast_node(graph: &mut Graph, a: ValueId, half: DType) -> Result<(Node, ValueId), OnnxError> {
    let (name, out) = half_twin(graph, a, half)?;
    Ok((cast(graph, name, a, out)?, out))
}

/// A `Cast` node `name` of `input` into `out`, to `out`'s element type.
pub(crate) fn cast(graph: &Graph, name: String, input: ValueId, out: ValueId) -> Result<Node, OnnxError> {
    let to = graph.ty(out).map(|t| t.dtype).ok_or_else(|| graph_error("activation", &graph.value(out).name))?;
    let mut attrs = Attributes::default();
    attrs.set("to", Attribute::Int(i64::from(dtype_to_onnx(to))));
    let opset = graph.opset.max(ops::MODERN_OPSET);
    let op = ops::build_op("Cast", opset, &attrs, 1, 1)
        .map_err(|e| OnnxError::Graph { reason: format!("the precision pass's Cast of `{name}`: {e}") })?;
    Ok(Node { name, op_type: "Cast".into(), attrs, inputs: vec![Some(input)], outputs: vec![out], op })
}

fn graph_error(what: &str, name: &str) -> OnnxError {
    OnnxError::Graph { reason: format!("the precision pass found {what} `{name}` without a type") }
}
