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
    // Rows of 120 with k above 8: sorted whole (ties among the integers).
    k.init("k100", scalar(100));
    k.init("s_flat2", Tensor::from_i64s(vec![1, 120]));
    k.hidden("Reshape", &["x10", "s_flat2"], &["x10_row"], &[]);
    k.hidden("Cast", &["x10_row"], &["x10_rowi"], &[("to", Int(7))]);
    k.b.node("TopK", &["x10_row", "k100"], &["tk_sf", "tk_sf_i"], &[("largest", Int(0))]);
    k.b.node("TopK", &["x10_rowi", "k100"], &["tk_si", "tk_si_i"], &[]);
    k.outputs.extend([("tk_sf", f), ("tk_sf_i", i), ("tk_si", i), ("tk_si_i", i)]);
    // NaN (0 / 0) sorts as the largest.
    k.hidden("Div", &["x10_row", "x10_row"], &["x_nan"], &[]);
    k.b.node("TopK", &["x_nan", "k100"], &["tk_nan", "tk_nan_i"], &[]);
    k.outputs.extend([("tk_nan", f), ("tk_nan_i", i)]);
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

/// Attention: masks of both kinds (one shorter than the keys), causal, soft-capped, every cache and
/// `qk_matmul_output` mode, grouped 3-D heads with `nonpad_kv_seqlen`, keys past one chunk, heads
/// longer than the shared query and one pass of values.
fn attention_nodes(k: &mut Kinds) {
    let f = DType::F32;
    let bools = |dims: &[usize], n: usize| {
        Tensor::new(dims.to_vec(), TensorData::Bool((0..n).map(|i| u8::from(i % 3 != 1)).collect())).unwrap()
    };
    k.init("att_mask", f32s(&[4, 4], 44));
    k.init("att_bmask", bools(&[2, 1, 4, 5], 40));
    k.init("past_k", f32s(&[2, 3, 2, 5], 45));
    k.init("past_v", f32s(&[2, 3, 2, 5], 46));
    k.init("nonpad", Tensor::from_i64s(vec![3, 4]));
    k.init("s_q3", Tensor::from_i64s(vec![2, 4, 15]));
    k.init("a0", Tensor::from_i64s(vec![0]));
    k.init("a5", Tensor::from_i64s(vec![5]));
    k.init("a2", Tensor::from_i64s(vec![2]));
    k.init("reps18", Tensor::from_i64s(vec![18]));
    k.init("n2060", Tensor::from_i64s(vec![2060]));
    k.init("s_long", Tensor::from_i64s(vec![1, 1, 2, 1030]));
    k.init("s_keys", Tensor::from_i64s(vec![1, 1, 360, 1]));
    k.init("reps3", Tensor::from_i64s(vec![3]));
    let mode = |m: i64| ("qk_matmul_output_mode", Int(m));
    // Scores of masked keys are -inf, which the comparison does not take: modes 0 and 1 where the
    // mask is a bool one or causal, 2 with a float mask only, 3 anywhere.
    k.node("Attention", &["x", "x", "x", "att_mask"], &["att"], &[("is_causal", Int(1)), ("softcap", Float(2.0))], f);
    let ins = ["x", "x", "x", "att_bmask", "past_k", "past_v"];
    let outs = ["att_p", "att_pk", "att_pv", "att_qk"];
    k.node(
        "Attention",
        &ins,
        &outs,
        &[("is_causal", Int(1)), mode(1), ("scale", Float(0.3)), ("softcap", Float(1.0))],
        f,
    );
    k.b.node("Attention", &["x", "x", "x", "att_mask"], &["att_s", "", "", "att_sm"], &[mode(2)]);
    k.outputs.extend([("att_s", f), ("att_sm", f)]);
    k.hidden("Reshape", &["x", "s_q3"], &["q3"], &[]);
    k.hidden("Slice", &["q3", "a0", "a5", "a2"], &["kv3"], &[]);
    let gqa = [("q_num_heads", Int(3)), ("kv_num_heads", Int(1)), ("is_causal", Int(1)), mode(3)];
    k.b.node("Attention", &["q3", "kv3", "kv3", "", "", "", "nonpad"], &["att_g", "", "", "att_gq"], &gqa);
    k.outputs.extend([("att_g", f), ("att_gq", f)]);
    k.hidden("Reshape", &["x", "flat"], &["xf"], &[]);
    k.hidden("Tile", &["xf", "reps18"], &["xt"], &[]);
    k.hidden("Slice", &["xt", "a0", "n2060"], &["x2060"], &[]);
    k.hidden("Reshape", &["x2060", "s_long"], &["long"], &[]);
    k.hidden("Slice", &["long", "a0", "a2", "a2"], &["long_q"], &[]);
    k.node("Attention", &["long_q", "long", "long"], &["att_long"], &[], f);
    k.hidden("Tile", &["xf", "reps3"], &["x360"], &[]);
    k.hidden("Reshape", &["x360", "s_keys"], &["keys"], &[]);
    k.hidden("Slice", &["keys", "a0", "a2", "a2"], &["keys_q"], &[]);
    k.b.node("Attention", &["keys_q", "keys", "keys"], &["att_keys", "", "", "att_kq"], &[]);
    k.outputs.extend([("att_keys", f), ("att_kq", f)]);
}

/// RotaryEmbedding in halves (partial, caches per token) and interleaved (3-D, position ids with
/// a negative one); TensorScatter in both modes.
fn rotary_and_cache_nodes(k: &mut Kinds) {
    let f = DType::F32;
    k.init("rope_c", f32s(&[2, 4, 2], 47));
    k.init("rope_s", f32s(&[2, 4, 2], 48));
    k.init("rope_tc", f32s(&[8, 3], 49));
    k.init("rope_ts", f32s(&[8, 3], 50));
    k.init("rope_pos", Tensor::new(vec![2, 5], TensorData::I64(vec![0, 1, 2, 7, -1, 3, 3, 5, 6, -8])).unwrap());
    k.init("s_rope3", Tensor::from_i64s(vec![2, 5, 12]));
    k.init("ts_w", Tensor::from_i64s(vec![3, 1]));
    k.init("ts_w0", Tensor::from_i64s(vec![0, 2]));
    k.node("RotaryEmbedding", &["x", "rope_c", "rope_s"], &["rope"], &[("rotary_embedding_dim", Int(4))], f);
    k.hidden("Reshape", &["x", "s_rope3"], &["x_rope3"], &[]);
    let inter = [("interleaved", Int(1)), ("num_heads", Int(2))];
    k.node("RotaryEmbedding", &["x_rope3", "rope_tc", "rope_ts", "rope_pos"], &["rope_i"], &inter, f);
    k.hidden("Slice", &["x", "a0", "a2", "a2"], &["ts_upd"], &[]);
    k.node("TensorScatter", &["x", "ts_upd", "ts_w"], &["ts_c"], &[("mode", Str(b"circular".to_vec()))], f);
    k.node("TensorScatter", &["x", "ts_upd", "ts_w0"], &["ts_l"], &[], f);
    k.node("TensorScatter", &["x", "ts_upd"], &["ts_0"], &[("axis", Int(2))], f);
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
    attention_nodes(&mut k);
    rotary_and_cache_nodes(&mut k);
    for (name, dtype) in &k.outputs {
        k.b.output(name, *dtype, &[]);
    }
    OnnxModel::from_bytes(&k.b.to_bytes(), "llm_and_linalg", &crate::ImportLimits::default()).unwrap()
}

#[test]
fn the_transformer_linalg_and_selection_kinds_match_the_host_when_run_on_the_cpu() {
    matches_the_host(model(), 41);
}
