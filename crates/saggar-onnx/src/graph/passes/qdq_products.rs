//! QDQ products on integer tensor cores: the `MatMul` (or `Gemm`) of two `DequantizeLinear`s that
//! `onnxruntime.quantization.quantize_static` and QAT exports write, run as an `i8` product.
//!
//! The pattern, matched at import before constant folding (which would fold the weights'
//! `DequantizeLinear` into f32 weights):
//! `MatMul(DequantizeLinear(x_q, s_x, z_x), DequantizeLinear(W_q, s_w, z_w))`, and `Gemm` of the
//! same operands (`transA` 0, either `transB`, any `alpha`, a `C` with `beta` 1), where
//! - `x_q` is an `i8` activation of rank 2 or more, `s_x` a constant f32 scalar and `z_x` a constant
//!   `i8` scalar (any value) or absent;
//! - `W_q` is a constant 2-D `i8` tensor, `s_w` a constant f32 scalar or a vector over the output
//!   columns (per channel), `z_w` absent or constant zeros (symmetric weights);
//! - the inner extent `k` and the output columns `n` are multiples of 4 (what the integer kernels
//!   of cuBLASLt and hipBLASLt take; see [`saggar_device::blas`]).
//!
//! It becomes [`Int8Product`]`(x_q, W_q^T)` (the weights stored `[n, k]`, transposed once here),
//! an `i32` product, then `Sub` of the constant `z_x * colsum(W_q)` when `z_x` is not 0 (so
//! `sum (x_q - z_x) w_q` stays exact in `i32`), `Cast` to f32 and `Mul` by the constant
//! `alpha * s_x * s_w` (per column), plus `C` for a Gemm. The elementwise fusion merges those into
//! one kernel after the product. The product lowers to a BLAS-Lt `i8` matmul on CUDA and HIP and to
//! the host backend's exact `i8` GEMM; where the libraries cannot take it (the GEMM engine is
//! `Generated`), the generated GEMM accumulates the integer products in f32, as the f32 product
//! it replaces did. Anything else (uint8 operands, nonzero weight zero points, blocked scales, f16
//! scales) keeps the path through f32.
//!
//! Every QuantizeLinear and DequantizeLinear whose scale is a constant is checked too: a scale of
//! zero, NaN or infinity is an error naming the node ([`check_scales`]).

use std::collections::HashMap;
use std::sync::Arc;

use saggar_shape::{DType, Dim};

use crate::error::OnnxError;
use crate::graph::ir::{Graph, Node, Value, ValueId};
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, contiguous, ext, numel};
use crate::ops::linalg::gpu::GemmKernel;
use crate::ops::{self, Attribute, Attributes, EvalInputs, InferInputs, Op, OpError, ValueType};
use crate::tensor::{DataMut, DataRef, Tensor, TensorData, TensorMut};

/// The `i8` product `Y[.., m, n] (i32) = sum_k A[.., m, k] B[n, k]` of an activation `A` and
/// weights `B` stored `[n, k]`, accumulated exactly in `i32` (wrapping, as ONNX `MatMulInteger`).
#[derive(Debug)]
pub(crate) struct Int8Product;

impl Op for Int8Product {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (a, b) = (inputs.req(0)?.ty, inputs.req(1)?.ty);
        if a.dtype != DType::I8 || b.dtype != DType::I8 || a.rank() < 2 || b.rank() != 2 {
            return Err(OpError::infer(format!(
                "Int8Product takes an i8 activation of rank 2 or more and i8 [n, k] weights, found {a} and {b}"
            )));
        }
        if let (Some(x), Some(y)) = (a.dims[a.rank() - 1].as_fixed(), b.dims[1].as_fixed())
            && x != y
        {
            return Err(OpError::infer(format!("Int8Product: inner extents differ ({x} vs {y})")));
        }
        let mut dims = a.dims[..a.rank() - 1].to_vec();
        dims.push(b.dims[0].clone());
        Ok(vec![ValueType::new(DType::I32, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (a, b) = (inputs.req(0)?, inputs.req(1)?);
        let (DataRef::I8(av), DataRef::I8(bv), DataMut::I32(out)) = (a.data, b.data, &mut outputs[0].data) else {
            return Err(OpError::eval("Int8Product takes i8 operands and writes i32"));
        };
        let (k, n) = (*a.dims.last().unwrap_or(&0), b.dims.first().copied().unwrap_or(0));
        if b.dims.get(1) != Some(&k) || k == 0 || av.len() % k != 0 || out.len() != av.len() / k * n {
            return Err(OpError::eval(format!("Int8Product: {:?} x {:?}^T does not fit the output", a.dims, b.dims)));
        }
        for (row, out_row) in av.chunks_exact(k).zip(out.chunks_exact_mut(n)) {
            for (o, col) in out_row.iter_mut().zip(bv.chunks_exact(k)) {
                *o = row.iter().zip(col).fold(0i32, |acc, (&x, &w)| acc.wrapping_add(i32::from(x) * i32::from(w)));
            }
        }
        Ok(())
    }

    /// One GEMM launch (`B` read transposed, broadcast over `A`'s batch), which the lowering hands to
    /// the BLAS-Lt `i8` matmul ([`crate::fuse::blas_epilogue`]).
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let (a, b) = (ctx.input(0)?, ctx.input(1)?);
            let r = a.dims.len();
            if r < 2 || b.dims.len() != 2 {
                return Err(OpError::eval("Int8Product takes rank 2 or more times [n, k]"));
            }
            let (batch, m, k, n) = (&a.dims[..r - 2], a.dims[r - 2], a.dims[r - 1], b.dims[0]);
            let mut meta = vec![ext(m), ext(n), ext(k), ext(batch.len()), ext(k), 1, 1, ext(k), 0, 0];
            meta.extend(batch.iter().map(|&d| ext(d)));
            meta.extend(contiguous(batch).iter().map(|s| s * ext(m * k)));
            meta.extend(batch.iter().map(|_| 0));
            let kernel = GemmKernel::f32(1f32.to_bits(), 0, false).with_types(DType::I8, DType::I32);
            let work = Work::Tiles { m: m as u64, n: n as u64, batch: numel(batch) };
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                kernel,
                meta,
                work,
                vec![Slot::In(0), Slot::In(1), Slot::Out(0)],
            )]))
        })())
    }
}

/// The scale of every QuantizeLinear and DequantizeLinear whose scale is a constant must be finite
/// and nonzero: a zero scale quantises everything to the bounds and a NaN poisons every value,
/// which a model meant to compute is never written with.
pub(crate) fn check_scales(graph: &Graph) -> Result<(), OnnxError> {
    for node in graph.nodes.iter().filter(|n| matches!(n.op_type.as_str(), "QuantizeLinear" | "DequantizeLinear")) {
        let Some(scale) = node.inputs.get(1).copied().flatten().and_then(|id| graph.value(id).constant.clone()) else {
            continue;
        };
        let Ok(values) = scale.view().floats() else { continue };
        if let Some((i, v)) = values.iter().enumerate().find(|(_, v)| !v.is_finite() || **v == 0.0) {
            return Err(OnnxError::Node {
                node: node.name.clone(),
                op: node.op_type.clone(),
                opset: graph.opset,
                source: Box::new(OpError::infer(format!(
                    "scale element {i} is {v}: quantisation scales must be finite and nonzero; fix the model's \
                     calibration (a constant input quantised with a zero range gets scale 0)"
                ))),
            });
        }
    }
    Ok(())
}

/// A matched QDQ product: what its replacement needs.
struct Matched {
    index: usize,
    x_q: ValueId,
    x_zero: i32,
    /// The weights stored `[n, k]`, row-major.
    w_t: Vec<i8>,
    n: usize,
    k: usize,
    /// `alpha * s_x * s_w`, one value or one per column.
    scale: Vec<f32>,
    c: Option<ValueId>,
    out: ValueId,
}

/// Rewrites every QDQ product of `graph` (see the module docs); returns how many.
pub(crate) fn int8_products(graph: &mut Graph) -> Result<usize, OnnxError> {
    check_scales(graph)?;
    let producer: HashMap<ValueId, usize> =
        graph.nodes.iter().enumerate().flat_map(|(i, n)| n.outputs.iter().map(move |&o| (o, i))).collect();
    let found: Vec<Matched> = (0..graph.nodes.len()).filter_map(|i| matched(graph, &producer, i)).collect();
    for m in found.iter().rev() {
        let nodes = replacement(graph, m).ok_or_else(|| OnnxError::Graph {
            reason: format!("the QDQ product `{}` could not be rewritten", graph.nodes[m.index].name),
        })?;
        graph.nodes.splice(m.index..=m.index, nodes);
    }
    Ok(found.len())
}

fn int_attr(node: &Node, name: &str, default: i64) -> i64 {
    match node.attrs.get(name) {
        Some(Attribute::Int(v)) => *v,
        _ => default,
    }
}

fn float_attr(node: &Node, name: &str) -> f32 {
    match node.attrs.get(name) {
        Some(Attribute::Float(v)) => *v,
        _ => 1.0,
    }
}

/// The constant of optional input `i` of `node`.
fn constant(graph: &Graph, node: &Node, i: usize) -> Option<Arc<Tensor>> {
    graph.value(node.inputs.get(i).copied().flatten()?).constant.clone()
}

/// The DequantizeLinear producing `id`: per tensor or per axis (no blocks), writing f32 from f32
/// scales.
fn dequantize<'g>(graph: &'g Graph, producer: &HashMap<ValueId, usize>, id: ValueId) -> Option<&'g Node> {
    let node = &graph.nodes[*producer.get(&id)?];
    let plain = int_attr(node, "block_size", 0) == 0 && int_attr(node, "output_dtype", 1) == 1;
    let f32_scale = constant(graph, node, 1).is_some_and(|s| s.dtype() == DType::F32);
    (node.op_type == "DequantizeLinear" && plain && f32_scale && graph.ty(id)?.dtype == DType::F32).then_some(node)
}

fn matched(graph: &Graph, producer: &HashMap<ValueId, usize>, index: usize) -> Option<Matched> {
    let node = &graph.nodes[index];
    let (gemm, trans_b) = match node.op_type.as_str() {
        "MatMul" => (false, false),
        "Gemm" if int_attr(node, "transA", 0) == 0 => (true, int_attr(node, "transB", 0) != 0),
        _ => return None,
    };
    let c = if gemm { node.inputs.get(2).copied().flatten() } else { None };
    if c.is_some() && float_attr(node, "beta") != 1.0 {
        return None;
    }
    let alpha = if gemm { float_attr(node, "alpha") } else { 1.0 };
    let (a, b) = (node.inputs.first().copied().flatten()?, node.inputs.get(1).copied().flatten()?);
    let (da, db) = (dequantize(graph, producer, a)?, dequantize(graph, producer, b)?);
    // The activation: i8 of rank 2 or more (2 for Gemm), one scale, one i8 zero point.
    let x_q = da.inputs.first().copied().flatten()?;
    let x_ty = graph.ty(x_q)?;
    if x_ty.dtype != DType::I8 || x_ty.rank() < 2 || (gemm && x_ty.rank() != 2) {
        return None;
    }
    let s_x = constant(graph, da, 1)?.view().floats().ok()?.to_vec();
    let x_zero = match constant(graph, da, 2) {
        None => 0,
        Some(z) => match (z.data(), z.len()) {
            (TensorData::I8(v), 1) => i32::from(v[0]),
            _ => return None,
        },
    };
    // The weights: a constant 2-D i8 tensor with zero zero points.
    let w = constant(graph, db, 0)?;
    let (TensorData::I8(wv), [rows, cols]) = (w.data(), w.dims()) else { return None };
    let (k, n) = if trans_b { (*cols, *rows) } else { (*rows, *cols) };
    if let Some(z) = constant(graph, db, 2) {
        let TensorData::I8(zv) = z.data() else { return None };
        if zv.iter().any(|&v| v != 0) {
            return None;
        }
    } else if db.inputs.get(2).copied().flatten().is_some() {
        return None;
    }
    if x_ty.dims.last()?.as_fixed() != Some(k as u64) || !k.is_multiple_of(4) || !n.is_multiple_of(4) {
        return None;
    }
    let s_w = constant(graph, db, 1)?.view().floats().ok()?.to_vec();
    let axis = int_attr(db, "axis", 1).rem_euclid(2);
    let per_column = s_w.len() == n && n > 1 && axis == if trans_b { 0 } else { 1 };
    if s_x.len() != 1 || !(s_w.len() == 1 || per_column) {
        return None;
    }
    let scale = s_w.iter().map(|&s| s_x[0] * s * alpha).collect();
    let w_t = if trans_b { wv.to_vec() } else { (0..n * k).map(|i| wv[(i % k) * n + i / k]).collect() };
    Some(Matched { index, x_q, x_zero, w_t, n, k, scale, c, out: *node.outputs.first()? })
}

/// The nodes replacing matched product `m` (see the module docs).
fn replacement(graph: &mut Graph, m: &Matched) -> Option<Vec<Node>> {
    let name = graph.nodes[m.index].name.clone();
    let opset = graph.opset.max(ops::MODERN_OPSET);
    let mut dims = graph.ty(m.x_q)?.dims.clone();
    *dims.last_mut()? = Dim::Fixed(m.n as u64);
    let mut nodes = Vec::new();
    let value = |graph: &mut Graph, what: &str, ty: ValueType, constant: Option<Tensor>| {
        let name = format!("{name}:{what}");
        graph.add_value(Value { name, ty: Some(ty), constant: constant.map(Arc::new), dims_value: None })
    };
    let w_t = Tensor::new(vec![m.n, m.k], TensorData::I8(m.w_t.clone())).ok()?;
    let w_t = value(graph, "weights_nk", ValueType::fixed(DType::I8, &[m.n, m.k]), Some(w_t));
    let mut push = |op_type: &str, op: Arc<dyn Op>, inputs: Vec<ValueId>, out: ValueId, attrs: Attributes| {
        let node_name = format!("{name}:{}{}", op_type.to_lowercase(), nodes.len());
        let inputs = inputs.into_iter().map(Some).collect();
        nodes.push(Node { name: node_name, op_type: op_type.into(), attrs, inputs, outputs: vec![out], op });
    };
    let build = |op_type: &str, attrs: &Attributes| ops::build_op(op_type, opset, attrs, 2, 1).ok();
    let none = Attributes::default();
    let mut sum = value(graph, "i32", ValueType::new(DType::I32, dims.clone()), None);
    push("Int8Product", Arc::new(Int8Product), vec![m.x_q, w_t], sum, none.clone());
    if m.x_zero != 0 {
        let columns: Vec<i32> = (0..m.n)
            .map(|j| m.w_t[j * m.k..(j + 1) * m.k].iter().fold(0i32, |acc, &w| acc.wrapping_add(i32::from(w))))
            .map(|s| s.wrapping_mul(m.x_zero))
            .collect();
        let shift = Tensor::new(vec![m.n], TensorData::I32(columns)).ok()?;
        let shift = value(graph, "zero_point_shift", ValueType::fixed(DType::I32, &[m.n]), Some(shift));
        let centred = value(graph, "centred", ValueType::new(DType::I32, dims.clone()), None);
        push("Sub", build("Sub", &none)?, vec![sum, shift], centred, none.clone());
        sum = centred;
    }
    let cast_attrs = Attributes(vec![("to".into(), Attribute::Int(1))]);
    let float = value(graph, "f32", ValueType::new(DType::F32, dims.clone()), None);
    push("Cast", build("Cast", &cast_attrs)?, vec![sum], float, cast_attrs);
    let scale_dims = if m.scale.len() == 1 { vec![] } else { vec![m.n] };
    let scale = Tensor::new(scale_dims.clone(), TensorData::F32(m.scale.clone())).ok()?;
    let scale = value(graph, "scale", ValueType::fixed(DType::F32, &scale_dims), Some(scale));
    let product = match m.c {
        None => m.out,
        Some(_) => value(graph, "scaled", ValueType::new(DType::F32, dims), None),
    };
    push("Mul", build("Mul", &none)?, vec![float, scale], product, none.clone());
    if let Some(c) = m.c {
        push("Add", build("Add", &none)?, vec![product, c], m.out, none);
    }
    Some(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::evaluate::evaluate;

    fn run_op(op: &dyn Op, inputs: &[Option<Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let inputs: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
        evaluate(op, &inputs, 1 << 20)
    }

    fn i8s(dims: &[usize], values: &[i8]) -> Tensor {
        Tensor::new(dims.to_vec(), TensorData::I8(values.to_vec())).unwrap()
    }

    #[test]
    fn int8_product_is_exact_and_wraps_like_matmul_integer() {
        // A [2, 4] times B stored [3, 4]: Y[i, j] = sum_k A[i, k] B[j, k].
        let a = i8s(&[2, 4], &[1, -2, 3, -128, 127, 0, -1, 5]);
        let b = i8s(&[3, 4], &[1, 1, 1, 1, -128, 2, 0, -1, 4, 3, 2, 1]);
        let out = run_op(&Int8Product, &[Some(a), Some(b)]).unwrap();
        let TensorData::I32(y) = out[0].data() else { panic!("i32 output") };
        assert_eq!(out[0].dims(), [2, 3]);
        assert_eq!(y, &[-126, -4 - 128 + 128, 4 - 6 + 6 - 128, 131, -128 * 127 - 5, 508 - 2 + 5]);
    }

    #[test]
    fn int8_product_refuses_other_operands() {
        let a = i8s(&[2, 4], &[0; 8]);
        let f = Tensor::new(vec![3, 4], TensorData::F32(vec![0.0; 12])).unwrap();
        assert!(run_op(&Int8Product, &[Some(a.clone()), Some(f)]).is_err(), "f32 weights");
        assert!(run_op(&Int8Product, &[Some(a), Some(i8s(&[3, 5], &[0; 15]))]).is_err(), "inner extents");
    }
}
