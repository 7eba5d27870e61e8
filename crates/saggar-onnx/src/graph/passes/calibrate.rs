//! `--precision int8` on an f32 model: post-training quantisation of its weight products from
//! calibration data, written as the QDQ form `onnxruntime.quantization.quantize_static` writes, so
//! that [`super::qdq_products`] runs them as `i8` products.
//!
//! 1. **Which products.** Every MatMul, and every Gemm with `transA` 0 (and `beta` 1 where it has a
//!    `C`), whose first operand is an f32 activation and whose second is a constant 2-D f32 weight
//!    matrix with the inner extent and the output columns multiples of 4 (what the `i8` BLAS-Lt
//!    products take).
//! 2. **Activation scales, per tensor.** The model runs on every calibration data set (the reference
//!    evaluator, on the host); each product's activation gets the symmetric scale
//!    `max |a| / 127` over all of them, zero point 0. An activation that is 0 on every set keeps its
//!    f32 product.
//! 3. **Weight scales, per output channel.** `max |w| / 127` over each column (each row with
//!    `transB`); the weights are rounded to nearest and stored as `i8`.
//! 4. The activation becomes `DequantizeLinear(QuantizeLinear(a))`, the weights
//!    `DequantizeLinear(w_i8)`, and the QDQ pass rewrites the product.

use std::sync::Arc;

use saggar_shape::DType;

use crate::error::OnnxError;
use crate::graph::ir::{Graph, GraphOutput, Node, Value, ValueId};
use crate::graph::model::OnnxModel;
use crate::graph::passes::{qdq_products, simplify};
use crate::ops::{self, Attribute, Attributes, ValueType};
use crate::tensor::{Tensor, TensorData};

/// The largest magnitude of a symmetric `i8`.
const Q_MAX: f32 = 127.0;

/// One product to quantise: the node, its activation and weights, and whether the weights are
/// stored `[n, k]` (Gemm's `transB`).
struct Product {
    node: usize,
    activation: ValueId,
    weights: Arc<Tensor>,
    trans_b: bool,
}

/// `model`'s graph with its weight products quantised from `sets` (each a data set of the model's
/// inputs in binding order); how many products became `i8`. See the module docs.
pub(crate) fn quantize_products(model: &OnnxModel, sets: &[Vec<Tensor>]) -> Result<(Graph, usize), OnnxError> {
    let mut graph = model.graph().clone();
    let products = candidates(&graph);
    if products.is_empty() || sets.is_empty() {
        return Ok((graph, 0));
    }
    let ranges = activation_ranges(model, &products, sets)?;
    for (p, range) in products.iter().zip(&ranges).rev() {
        if *range > 0.0 && range.is_finite() {
            quantize(&mut graph, p, range / Q_MAX)?;
        }
    }
    let count = qdq_products::int8_products(&mut graph)?;
    simplify::remove_dead_nodes(&mut graph);
    Ok((graph, count))
}

fn int_attr(node: &Node, name: &str, default: i64) -> i64 {
    match node.attrs.get(name) {
        Some(Attribute::Int(v)) => *v,
        _ => default,
    }
}

/// The products of `graph` the module docs name, in node order.
fn candidates(graph: &Graph) -> Vec<Product> {
    let mut out = Vec::new();
    for (index, node) in graph.nodes.iter().enumerate() {
        let gemm = node.op_type == "Gemm";
        if !(node.op_type == "MatMul" || gemm && int_attr(node, "transA", 0) == 0) {
            continue;
        }
        let beta_one = !matches!(node.attrs.get("beta"), Some(Attribute::Float(b)) if *b != 1.0);
        if gemm && node.inputs.get(2).copied().flatten().is_some() && !beta_one {
            continue;
        }
        let (Some(Some(a)), Some(Some(b))) = (node.inputs.first(), node.inputs.get(1)) else { continue };
        let (av, bv) = (graph.value(*a), graph.value(*b));
        let Some(w) = bv.constant.clone().filter(|w| w.dtype() == DType::F32 && w.dims().len() == 2) else { continue };
        let trans_b = gemm && int_attr(node, "transB", 0) != 0;
        let (k, n) = if trans_b { (w.dims()[1], w.dims()[0]) } else { (w.dims()[0], w.dims()[1]) };
        let f32_activation = av.constant.is_none() && av.ty.as_ref().is_some_and(|t| t.dtype == DType::F32);
        if f32_activation && k % 4 == 0 && n % 4 == 0 && k > 0 && n > 0 {
            out.push(Product { node: index, activation: *a, weights: w, trans_b });
        }
    }
    out
}

/// The largest `|a|` of each product's activation over every data set.
fn activation_ranges(model: &OnnxModel, products: &[Product], sets: &[Vec<Tensor>]) -> Result<Vec<f32>, OnnxError> {
    let mut graph = model.graph().clone();
    let first = graph.outputs.len();
    for p in products {
        let name = graph.value(p.activation).name.clone();
        graph.outputs.push(GraphOutput { name, value: p.activation, declared: None });
    }
    let probe = model.with_graph(graph);
    let mut ranges = vec![0f32; products.len()];
    for set in sets {
        let outputs = probe.run_once(set)?;
        for (range, t) in ranges.iter_mut().zip(&outputs[first..]) {
            if let TensorData::F32(v) = t.data() {
                *range = v.iter().fold(*range, |m, x| m.max(x.abs()));
            }
        }
    }
    Ok(ranges)
}

/// Rewrites product `p` of `graph` to read its activation through QuantizeLinear/DequantizeLinear at
/// `scale` and its weights as `i8` through a per-channel DequantizeLinear.
fn quantize(graph: &mut Graph, p: &Product, scale: f32) -> Result<(), OnnxError> {
    let node_name = graph.nodes[p.node].name.clone();
    let opset = graph.opset.max(13);
    let a_ty = graph.value(p.activation).ty.clone();
    let mut b = Builder { graph, opset, prefix: node_name, nodes: Vec::new() };
    let sx = b.constant("sx", vec![], TensorData::F32(vec![scale]))?;
    let zx = b.constant("zx", vec![], TensorData::I8(vec![0]))?;
    let q_ty = a_ty.clone().map(|t| ValueType::new(DType::I8, t.dims));
    let aq = b.value("aq", q_ty);
    b.push("QuantizeLinear", &[p.activation, sx, zx], aq, Attributes::default())?;
    let ad = b.value("ad", a_ty);
    b.push("DequantizeLinear", &[aq, sx, zx], ad, Attributes::default())?;
    let (wq, sw, axis) = quantize_weights(&p.weights, p.trans_b)?;
    let dims = p.weights.dims().to_vec();
    let n = sw.len();
    let wq = b.constant("wq", dims.clone(), TensorData::I8(wq))?;
    let sw = b.constant("sw", vec![n], TensorData::F32(sw))?;
    let zw = b.constant("zw", vec![n], TensorData::I8(vec![0; n]))?;
    let wd = b.value("wd", Some(ValueType::fixed(DType::F32, &dims)));
    b.push("DequantizeLinear", &[wq, sw, zw], wd, Attributes(vec![("axis".into(), Attribute::Int(axis))]))?;
    let nodes = std::mem::take(&mut b.nodes);
    let node = &mut graph.nodes[p.node];
    node.inputs[0] = Some(ad);
    node.inputs[1] = Some(wd);
    graph.nodes.splice(p.node..p.node, nodes);
    Ok(())
}

/// The weights rounded to `i8` per output channel, the channels' scales and the channel axis.
fn quantize_weights(w: &Tensor, trans_b: bool) -> Result<(Vec<i8>, Vec<f32>, i64), OnnxError> {
    let TensorData::F32(v) = w.data() else {
        return Err(OnnxError::Graph { reason: "calibration: weights are not f32".into() });
    };
    let (rows, cols) = (w.dims()[0], w.dims()[1]);
    let channel = |i: usize| if trans_b { i / cols } else { i % cols };
    let channels = if trans_b { rows } else { cols };
    let mut range = vec![0f32; channels];
    for (i, x) in v.iter().enumerate() {
        range[channel(i)] = range[channel(i)].max(x.abs());
    }
    // A column of zeros quantises to zeros at any scale: 1 keeps the scale valid.
    let scales: Vec<f32> = range.iter().map(|&r| if r > 0.0 && r.is_finite() { r / Q_MAX } else { 1.0 }).collect();
    let q = v.iter().enumerate().map(|(i, x)| (x / scales[channel(i)]).round().clamp(-Q_MAX, Q_MAX) as i8).collect();
    Ok((q, scales, if trans_b { 0 } else { 1 }))
}

/// The nodes and values one product's quantisation adds.
struct Builder<'g> {
    graph: &'g mut Graph,
    opset: u32,
    prefix: String,
    nodes: Vec<Node>,
}

impl Builder<'_> {
    fn value(&mut self, what: &str, ty: Option<ValueType>) -> ValueId {
        let name = format!("{}:int8:{what}", self.prefix);
        self.graph.add_value(Value { name, ty, constant: None, dims_value: None })
    }

    fn constant(&mut self, what: &str, dims: Vec<usize>, data: TensorData) -> Result<ValueId, OnnxError> {
        let t = Tensor::new(dims, data).map_err(|e| OnnxError::Graph { reason: format!("calibration: {e}") })?;
        let ty = Some(ValueType::fixed(t.dtype(), t.dims()));
        let name = format!("{}:int8:{what}", self.prefix);
        Ok(self.graph.add_value(Value { name, ty, constant: Some(Arc::new(t)), dims_value: None }))
    }

    fn push(&mut self, op_type: &str, inputs: &[ValueId], out: ValueId, attrs: Attributes) -> Result<(), OnnxError> {
        let op = ops::build_op(op_type, self.opset, &attrs, inputs.len(), 1)
            .map_err(|e| OnnxError::Graph { reason: format!("calibration: {e}") })?;
        let name = format!("{}:int8:{}{}", self.prefix, op_type, self.nodes.len());
        let inputs = inputs.iter().map(|&i| Some(i)).collect();
        self.nodes.push(Node { name, op_type: op_type.to_string(), attrs, inputs, outputs: vec![out], op });
        Ok(())
    }
}
