//! The kernel kinds of the opset 23 and 24 transformer ops and of the linear-algebra and selection
//! ops (Attention, RotaryEmbedding, RMSNormalization, Swish, TensorScatter, Einsum, Det, TopK): a
//! model of opset 24 of its own, run through the emulation against the host backend.

use saggar_shape::{DType, Dim};

use super::{Kinds, f32s, matches_the_host};
use crate::OnnxModel;
use crate::builder::ModelBuilder;
use crate::ops::Attribute::{Float, Int, String as Str};
use crate::{Tensor, TensorData};

/// TopK of each element type and direction, ties and a `k` of the whole axis; RMSNormalization with
/// a scale over the row and one broadcast over a leading axis; Swish.
fn select_and_norm_nodes(k: &mut Kinds) {
    let (f, i) = (DType::F32, DType::I64);
    let scalar = |v: i64| Tensor::from_i64s(vec![v]);
    k.init("k3", scalar(3));
    k.init("k5", scalar(5));
    k.init("rms_s", f32s(&[5], 40));
    k.init("rms_lead", f32s(&[3, 1, 1], 41));
    k.hidden("Cast", &["x10"], &["x10i"], &[("to", Int(7))]);
    k.hidden("Cast", &["x10"], &["x10s"], &[("to", Int(6))]);
    for (x, name, ty) in [("x", "tk_f", f), ("x10i", "tk_l", i), ("x10s", "tk_s", DType::I32)] {
        let idx: &'static str = format!("{name}_i").leak();
        k.b.node("TopK", &[x, "k3"], &[name, idx], &[("axis", Int(2))]);
        k.outputs.extend([(name, ty), (idx, i)]);
    }
    k.b.node("TopK", &["x10i", "k5"], &["tk_all", "tk_all_i"], &[("largest", Int(0))]);
    k.outputs.extend([("tk_all", i), ("tk_all_i", i)]);
    k.node("RMSNormalization", &["x", "rms_s"], &["rms"], &[("epsilon", Float(1e-3))], f);
    k.node("RMSNormalization", &["x", "rms_lead"], &["rms_l"], &[("axis", Int(2))], f);
    k.node("Swish", &["x"], &["swish"], &[("alpha", Float(0.7))], f);
}

/// Einsum as a batched GEMM (run through BLAS), as the generic kernel of f32 and i64 operands with a
/// diagonal, a sum over one operand's label and three operands; Det of small and larger matrices.
fn linalg_nodes(k: &mut Kinds) {
    let (f, i) = (DType::F32, DType::I64);
    let eq = |e: &str| ("equation", Str(e.as_bytes().to_vec()));
    k.init("ein_w", f32s(&[3, 5], 42));
    k.init("ein_v", f32s(&[5, 2], 43));
    k.init("sq_start", Tensor::from_i64s(vec![0]));
    k.init("sq_end", Tensor::from_i64s(vec![4]));
    k.init("sq_axis", Tensor::from_i64s(vec![3]));
    k.init("flat", Tensor::from_i64s(vec![120]));
    k.init("hundred", Tensor::from_i64s(vec![100]));
    k.init("ten_ten", Tensor::from_i64s(vec![10, 10]));
    k.node("Einsum", &["x", "x"], &["ein_mm"], &[eq("bhqd,bhkd->bhqk")], f);
    k.node("Einsum", &["x", "ein_w"], &["ein_g"], &[eq("bhqd,hd->bqh")], f);
    k.node("Einsum", &["x", "ein_w", "ein_v"], &["ein_3"], &[eq("...qd,hd,de->...eh")], f);
    k.node("Einsum", &["x10i", "x10i"], &["ein_i"], &[eq("abcd,abcd->da")], i);
    k.hidden("Slice", &["x", "sq_start", "sq_end", "sq_axis"], &["x_sq"], &[]);
    k.node("Einsum", &["x_sq"], &["ein_diag"], &[eq("bhii->bh")], f);
    k.node("Det", &["x_sq"], &["det"], &[], f);
    k.hidden("Reshape", &["x", "flat"], &["x_flat"], &[]);
    k.hidden("Slice", &["x_flat", "sq_start", "hundred"], &["x100"], &[]);
    k.hidden("Reshape", &["x100", "ten_ten"], &["x_10"], &[]);
    k.node("Det", &["x_10"], &["det10"], &[], f);
}

fn model() -> OnnxModel {
    let mut k = Kinds { b: ModelBuilder::new(24), outputs: Vec::new() };
    k.b.input("x", DType::F32, &[2, 3, 4, 5].map(Dim::Fixed));
    k.init("ten", Tensor::new(vec![], TensorData::F32(vec![10.0])).unwrap());
    // Integers with ties: x times 10, truncated.
    k.hidden("Mul", &["x", "ten"], &["x10f"], &[]);
    k.hidden("Floor", &["x10f"], &["x10"], &[]);
    select_and_norm_nodes(&mut k);
    linalg_nodes(&mut k);
    for (name, dtype) in &k.outputs {
        k.b.output(name, *dtype, &[]);
    }
    OnnxModel::from_bytes(&k.b.to_bytes(), "llm_and_linalg", &crate::ImportLimits::default()).unwrap()
}

#[test]
fn the_transformer_linalg_and_selection_kinds_match_the_host_when_run_on_the_cpu() {
    matches_the_host(model(), 18);
}
