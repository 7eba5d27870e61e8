//! The kernel kinds of the opset 23 and 24 transformer ops and of the linear-algebra and selection
//! ops (Attention, RotaryEmbedding, RMSNormalization, Swish, TensorScatter, Einsum, Det, TopK): a
//! model of opset 24 of its own, run through the emulation against the host backend.

use saggar_shape::{DType, Dim};

use super::{Kinds, f32s, matches_the_host};
use crate::OnnxModel;
use crate::builder::ModelBuilder;
use crate::ops::Attribute::{Float, Int};
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

fn model() -> OnnxModel {
    let mut k = Kinds { b: ModelBuilder::new(24), outputs: Vec::new() };
    k.b.input("x", DType::F32, &[2, 3, 4, 5].map(Dim::Fixed));
    k.init("ten", Tensor::new(vec![], TensorData::F32(vec![10.0])).unwrap());
    // Integers with ties: x times 10, truncated.
    k.hidden("Mul", &["x", "ten"], &["x10f"], &[]);
    k.hidden("Floor", &["x10f"], &["x10"], &[]);
    select_and_norm_nodes(&mut k);
    for (name, dtype) in &k.outputs {
        k.b.output(name, *dtype, &[]);
    }
    OnnxModel::from_bytes(&k.b.to_bytes(), "llm_and_linalg", &crate::ImportLimits::default()).unwrap()
}

#[test]
fn the_transformer_linalg_and_selection_kinds_match_the_host_when_run_on_the_cpu() {
    matches_the_host(model(), 11);
}
