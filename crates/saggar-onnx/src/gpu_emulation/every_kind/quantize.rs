//! The every-kind model's quantization nodes: QuantizeLinear and DequantizeLinear per tensor (fused
//! expressions), per axis and blocked (launches), of 8- and 16-bit types; DynamicQuantizeLinear;
//! MatMulInteger and QLinearMatMul with per-tensor and per-row/column zero points and scales, batched;
//! ConvInteger and QLinearConv with per-channel weight zero points, groups, padding and a bias. Their
//! inputs are quantized from the model input `x` `[2, 3, 4, 5]`, so none folds at import.

use saggar_shape::DType;

use super::{Kinds, f32s};
use crate::ops::Attribute::{Int, Ints};
use crate::{Tensor, TensorData};

fn tensor(dims: &[usize], data: TensorData) -> Tensor {
    Tensor::new(dims.to_vec(), data).unwrap()
}

/// QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear of every granularity.
fn linear_nodes(k: &mut Kinds) {
    k.init("q_s", Tensor::new(vec![], TensorData::F32(vec![0.0125])).unwrap());
    k.init("q_zu", tensor(&[], TensorData::U8(vec![120])));
    k.init("q_axis_s", f32s(&[3], 40));
    k.init("q_axis_z", tensor(&[3], TensorData::I8(vec![-3, 0, 7])));
    k.init(
        "q_blk_s",
        tensor(&[2, 3, 2, 5], TensorData::F32((0..60).map(|i| 0.004 + (i % 7) as f32 * 0.003).collect())),
    );
    k.init("q_blk_z", tensor(&[2, 3, 2, 5], TensorData::I16((0..60).map(|i| (i * 37 % 200) as i16 - 100).collect())));
    k.node("QuantizeLinear", &["x", "q_s", "q_zu"], &["q_u8"], &[], DType::U8);
    k.node("QuantizeLinear", &["x", "q_s"], &["q_u8nz"], &[], DType::U8);
    k.node("QuantizeLinear", &["x", "q_axis_s", "q_axis_z"], &["q_axis"], &[], DType::I8);
    k.node(
        "QuantizeLinear",
        &["x", "q_blk_s", "q_blk_z"],
        &["q_blk"],
        &[("axis", Int(2)), ("block_size", Int(2))],
        DType::I16,
    );
    k.node("QuantizeLinear", &["x", "q_s"], &["q_u16"], &[("output_dtype", Int(4))], DType::U16);
    k.node("DequantizeLinear", &["q_u8", "q_s", "q_zu"], &["dq_u8"], &[], DType::F32);
    k.node("DequantizeLinear", &["q_axis", "q_axis_s", "q_axis_z"], &["dq_axis"], &[], DType::F32);
    k.node(
        "DequantizeLinear",
        &["q_blk", "q_blk_s", "q_blk_z"],
        &["dq_blk"],
        &[("axis", Int(-2)), ("block_size", Int(2))],
        DType::F32,
    );
    k.hidden("Cast", &["q_blk"], &["q_i32"], &[("to", Int(6))]);
    k.node("DequantizeLinear", &["q_i32", "q_s"], &["dq_i32"], &[], DType::F32);
    k.b.node("DynamicQuantizeLinear", &["x"], &["dyn_y", "dyn_s", "dyn_z"], &[]);
    k.outputs.extend([("dyn_y", DType::U8), ("dyn_s", DType::F32), ("dyn_z", DType::U8)]);
}

/// The integer products and convolutions.
fn product_nodes(k: &mut Kinds) {
    k.init("mi_shape", Tensor::from_i64s(vec![2, 3, 4, 5]));
    k.init("mi_b", tensor(&[5, 6], TensorData::I8((0..30).map(|i| (i * 53 % 255) as i8).collect())));
    k.init("mi_bz", tensor(&[6], TensorData::I8(vec![3, -2, 0, 1, 9, -7])));
    k.init("mi_az", tensor(&[4], TensorData::U8(vec![100, 120, 140, 7])));
    k.init("ql_as", f32s(&[4], 41));
    k.init(
        "ql_bs",
        Tensor::new(vec![6], TensorData::F32((0..6).map(|i| 0.002 + i as f32 * 0.0007).collect())).unwrap(),
    );
    k.init("ql_ys", Tensor::new(vec![], TensorData::F32(vec![0.37])).unwrap());
    k.init("ql_yz", tensor(&[], TensorData::I8(vec![-5])));
    k.init("ql_s", Tensor::new(vec![], TensorData::F32(vec![0.02])).unwrap());
    k.init("ql_az", tensor(&[], TensorData::U8(vec![118])));
    k.init("ql_yu", tensor(&[], TensorData::U8(vec![128])));
    // Quantized [2, 3, 4, 5] uint8 activations.
    k.hidden("Reshape", &["q_u8", "mi_shape"], &["mi_a"], &[]);
    k.node("MatMulInteger", &["mi_a", "mi_b"], &["mi"], &[], DType::I32);
    k.node("MatMulInteger", &["mi_a", "mi_b", "mi_az", "mi_bz"], &["mi_z"], &[], DType::I32);
    k.node(
        "QLinearMatMul",
        &["mi_a", "ql_as", "mi_az", "mi_b", "ql_bs", "mi_bz", "ql_ys", "ql_yz"],
        &["qlm"],
        &[],
        DType::I8,
    );
    k.node(
        "QLinearMatMul",
        &["mi_a", "ql_s", "ql_az", "mi_b", "ql_s", "mi_bz", "ql_ys", "ql_yu"],
        &["qlm_t"],
        &[],
        DType::U8,
    );
    k.init("ci_w", tensor(&[4, 1, 2, 3], TensorData::I8((0..24).map(|i| (i * 29 % 31) as i8 - 15).collect())));
    k.init("ci_wz", tensor(&[4], TensorData::I8(vec![1, -1, 0, 2])));
    k.init("ci_ws", Tensor::new(vec![4], TensorData::F32(vec![0.01, 0.02, 0.015, 0.03])).unwrap());
    k.init("ci_b", tensor(&[4], TensorData::I32(vec![-300, 0, 1200, 77])));
    k.hidden("Slice", &["q_u8", "st_c0", "en_c2", "ax_c"], &["ci_x"], &[]);
    k.init("st_c0", Tensor::from_i64s(vec![0]));
    k.init("en_c2", Tensor::from_i64s(vec![2]));
    k.init("ax_c", Tensor::from_i64s(vec![1]));
    let window = [("pads", Ints(vec![1, 0, 0, 2])), ("strides", Ints(vec![1, 2])), ("group", Int(2))];
    k.node("ConvInteger", &["ci_x", "ci_w", "q_zu", "ci_wz"], &["ci"], &window, DType::I32);
    k.node("ConvInteger", &["ci_x", "ci_w"], &["ci_nz"], &[("group", Int(2))], DType::I32);
    k.node(
        "QLinearConv",
        &["ci_x", "q_s", "q_zu", "ci_w", "ci_ws", "ci_wz", "ql_ys", "ql_yz", "ci_b"],
        &["qlc"],
        &window,
        DType::I8,
    );
}

/// Every quantization node.
pub(super) fn quantize_nodes(k: &mut Kinds) {
    linear_nodes(k);
    product_nodes(k);
}
