//! Canonicalisation on constants: BatchNormalization folded into the Conv before it, and Gemm
//! normalised (constant `B` pre-transposed and scaled by `alpha`, constant `C` scaled by `beta`).
//!
//! Both rewrites read the nodes' raw ONNX attributes, so op structs stay private to their family;
//! a rewritten Gemm is rebuilt through the op registry from its new attributes.

use std::sync::Arc;

use crate::graph::ir::{Graph, Value, ValueId};
use crate::ops::{self, Attribute, ValueType};
use crate::tensor::{Tensor, TensorData};

fn constant_f32(graph: &Graph, id: Option<ValueId>) -> Option<(Vec<usize>, Vec<f32>)> {
    let t = graph.value(id?).constant.as_ref()?;
    match t.data() {
        TensorData::F32(v) => Some((t.dims().to_vec(), v.clone())),
        _ => None,
    }
}

pub(super) fn add_constant(graph: &mut Graph, name: String, tensor: Tensor) -> ValueId {
    let ty = ValueType::fixed(tensor.dtype(), tensor.dims());
    graph.add_value(Value { name, ty: Some(ty), constant: Some(Arc::new(tensor)), dims_value: None })
}

/// Folds `BatchNormalization(Conv(x, W, B))` into `Conv(x, W', B')` when W, B and the
/// normalisation parameters are f32 constants and the Conv output has no other reader.
pub(crate) fn fold_batch_norm_into_conv(graph: &mut Graph) {
    let mut index = 0;
    while index < graph.nodes.len() {
        if let Some(conv_index) = foldable_pair(graph, index) {
            fold_pair(graph, conv_index, index);
            graph.nodes.remove(index);
        } else {
            index += 1;
        }
    }
}

/// The index of the Conv feeding BatchNormalization node `bn`, when the pair can be folded.
fn foldable_pair(graph: &Graph, bn: usize) -> Option<usize> {
    let node = &graph.nodes[bn];
    if node.op_type != "BatchNormalization" || node.outputs.len() != 1 || node.inputs.len() != 5 {
        return None;
    }
    if node.attrs.0.iter().any(|(n, _)| n != "epsilon" && n != "momentum" && n != "spatial") {
        return None;
    }
    let x = node.inputs[0]?;
    let conv = graph.nodes[..bn].iter().rposition(|n| n.op_type == "Conv" && n.outputs.first() == Some(&x))?;
    let uses = graph.use_counts();
    if uses[x.0] != 1 || graph.outputs.iter().any(|o| o.value == x) {
        return None;
    }
    let c = &graph.nodes[conv];
    let (w_dims, _) = constant_f32(graph, c.inputs.get(1).copied().flatten())?;
    let m = *w_dims.first()?;
    if c.inputs.get(2).copied().flatten().is_some() && constant_f32(graph, c.inputs[2]).is_none_or(|(d, _)| d != [m]) {
        return None;
    }
    for i in 1..5 {
        let (dims, _) = constant_f32(graph, node.inputs[i])?;
        if dims != [m] {
            return None;
        }
    }
    Some(conv)
}

fn fold_pair(graph: &mut Graph, conv: usize, bn: usize) {
    let bn_node = graph.nodes[bn].clone();
    let eps = match bn_node.attrs.get("epsilon") {
        Some(Attribute::Float(e)) => *e,
        _ => 1e-5,
    };
    let param = |i: usize| constant_f32(graph, bn_node.inputs[i]).map(|(_, v)| v).unwrap_or_default();
    let (scale, bias, mean, var) = (param(1), param(2), param(3), param(4));
    let c = &graph.nodes[conv];
    let Some((w_dims, mut w)) = constant_f32(graph, c.inputs[1]) else { return };
    let m = w_dims[0];
    let mut b = c
        .inputs
        .get(2)
        .copied()
        .flatten()
        .and_then(|id| constant_f32(graph, Some(id)))
        .map_or(vec![0.0; m], |(_, v)| v);
    let per_channel = w.len() / m.max(1);
    for ch in 0..m {
        let s = scale[ch] / (var[ch] + eps).sqrt();
        w[ch * per_channel..(ch + 1) * per_channel].iter_mut().for_each(|v| *v *= s);
        b[ch] = (b[ch] - mean[ch]) * s + bias[ch];
    }
    let name = c.name.clone();
    let (Ok(w), Ok(b)) = (Tensor::new(w_dims, TensorData::F32(w)), Tensor::new(vec![m], TensorData::F32(b))) else {
        return;
    };
    let w_id = add_constant(graph, format!("{name}:folded_weight"), w);
    let b_id = add_constant(graph, format!("{name}:folded_bias"), b);
    let conv_out = graph.nodes[conv].outputs[0];
    let conv_node = &mut graph.nodes[conv];
    conv_node.inputs.truncate(1);
    conv_node.inputs.extend([Some(w_id), Some(b_id)]);
    graph.replace_uses(bn_node.outputs[0], conv_out);
}

/// Normalises every Gemm with a constant 2-D f32 `B`: `B` is transposed and scaled at import so
/// the kernel sees `transB = 0, alpha = 1`; a constant `C` is scaled so `beta = 1`.
pub(crate) fn normalise_gemm(graph: &mut Graph) {
    for index in 0..graph.nodes.len() {
        let node = &graph.nodes[index];
        if node.op_type != "Gemm" {
            continue;
        }
        let int = |n: &str| match node.attrs.get(n) {
            Some(Attribute::Int(v)) => *v,
            _ => 0,
        };
        let float = |n: &str| match node.attrs.get(n) {
            Some(Attribute::Float(v)) => *v,
            _ => 1.0,
        };
        let (trans_b, alpha, beta) = (int("transB") != 0, float("alpha"), float("beta"));
        let Some((b_dims, b)) = constant_f32(graph, node.inputs.get(1).copied().flatten()) else { continue };
        if b_dims.len() != 2 || (!trans_b && alpha == 1.0 && beta == 1.0) {
            continue;
        }
        let c = node.inputs.get(2).copied().flatten();
        let c_const = constant_f32(graph, c);
        if beta != 1.0 && c.is_some() && c_const.is_none() {
            continue;
        }
        let (rows, cols) = (b_dims[0], b_dims[1]);
        let (new_dims, mut new_b) = if trans_b {
            let mut t = vec![0.0f32; b.len()];
            for r in 0..rows {
                for k in 0..cols {
                    t[k * rows + r] = b[r * cols + k];
                }
            }
            (vec![cols, rows], t)
        } else {
            (b_dims.clone(), b)
        };
        new_b.iter_mut().for_each(|v| *v *= alpha);
        let mut attrs = node.attrs.clone();
        attrs.remove("transB");
        attrs.remove("alpha");
        attrs.remove("beta");
        let name = node.name.clone();
        let opset = graph.opset;
        let n_inputs = node.inputs.len();
        let n_outputs = node.outputs.len();
        let Ok(op) = ops::build_op("Gemm", opset, &attrs, n_inputs, n_outputs) else { continue };
        let Ok(b_tensor) = Tensor::new(new_dims, TensorData::F32(new_b)) else { continue };
        let b_id = add_constant(graph, format!("{name}:normalised_b"), b_tensor);
        let c_id = match (c_const, beta != 1.0) {
            (Some((dims, v)), true) => {
                let Ok(t) = Tensor::new(dims, TensorData::F32(v.iter().map(|x| x * beta).collect())) else { continue };
                Some(add_constant(graph, format!("{name}:normalised_c"), t))
            }
            _ => c,
        };
        let node = &mut graph.nodes[index];
        node.inputs[1] = Some(b_id);
        if n_inputs > 2 {
            node.inputs[2] = c_id;
        }
        node.attrs = attrs;
        node.op = op;
    }
}
