//! The every-kind model's nodes of the sampling, region, signal and loss families and of Col2Im,
//! DeformConv and CenterCropPad: every mode and padding of GridSample in 2-D and 3-D, AffineGrid,
//! RoiAlign and MaxRoiPool, DFT and STFT (windows from folded window ops), both losses with each
//! reduction. Their inputs come from the model input `x` `[2, 3, 4, 5]` (reshaped and sliced), so
//! none folds at import.

use saggar_shape::DType;

use super::{Kinds, f32s, i64s};
use crate::ops::Attribute::{self, Int, Ints, String as Str};
use crate::{Tensor, TensorData};

fn s(v: &str) -> Attribute {
    Str(v.as_bytes().to_vec())
}

fn scalar(v: i64) -> Tensor {
    Tensor::new(vec![], TensorData::I64(vec![v])).unwrap()
}

/// GridSample over every mode and padding, 2-D and 3-D; AffineGrid in 2-D and 3-D.
fn sampling_nodes(k: &mut Kinds) {
    let f = DType::F32;
    k.init("gs_grid_shape", Tensor::from_i64s(vec![2, 3, 10, 2]));
    k.init("gs_x3_shape", Tensor::from_i64s(vec![1, 2, 3, 4, 5]));
    k.init("gs_g3_shape", Tensor::from_i64s(vec![1, 5, 4, 2, 3]));
    k.hidden("Reshape", &["x", "gs_grid_shape"], &["gs_grid"], &[]);
    k.hidden("Reshape", &["x", "gs_x3_shape"], &["gs_x3"], &[]);
    k.hidden("Reshape", &["x", "gs_g3_shape"], &["gs_g3"], &[]);
    let modes = [
        ("linear", "zeros", 0, "gs_lz"),
        ("linear", "reflection", 1, "gs_lr"),
        ("nearest", "border", 0, "gs_nb"),
        ("nearest", "zeros", 1, "gs_nz"),
        ("nearest", "reflection", 0, "gs_nr"),
        ("cubic", "reflection", 0, "gs_cr"),
        ("cubic", "border", 1, "gs_cb"),
        ("cubic", "zeros", 0, "gs_cz"),
    ];
    for (mode, padding, align, out) in modes {
        let a = [("mode", s(mode)), ("padding_mode", s(padding)), ("align_corners", Int(align))];
        k.node("GridSample", &["x", "gs_grid"], &[out], &a, f);
    }
    k.node("GridSample", &["gs_x3", "gs_g3"], &["gs_3l"], &[("padding_mode", s("border"))], f);
    k.node("GridSample", &["gs_x3", "gs_g3"], &["gs_3n"], &[("mode", s("nearest")), ("align_corners", Int(1))], f);
    k.init("ag_12", Tensor::from_i64s(vec![12]));
    k.init("ag_shape2", Tensor::from_i64s(vec![2, 2, 3]));
    k.init("ag_shape3", Tensor::from_i64s(vec![1, 3, 4]));
    k.init("ag_size2", Tensor::from_i64s(vec![2, 3, 4, 5]));
    k.init("ag_size3", Tensor::from_i64s(vec![1, 1, 2, 3, 4]));
    k.hidden("Slice", &["xflat", "st0", "ag_12"], &["ag_theta"], &[]);
    k.hidden("Reshape", &["ag_theta", "ag_shape2"], &["ag_t2"], &[]);
    k.hidden("Reshape", &["ag_theta", "ag_shape3"], &["ag_t3"], &[]);
    k.node("AffineGrid", &["ag_t2", "ag_size2"], &["ag_2"], &[], f);
    k.node("AffineGrid", &["ag_t3", "ag_size3"], &["ag_3"], &[("align_corners", Int(1))], f);
}

/// RoiAlign (both modes and coordinate modes, fixed and adaptive grids), MaxRoiPool, Col2Im,
/// DeformConv (mask, bias, groups, offset groups), CenterCropPad.
fn region_and_conv_nodes(k: &mut Kinds) {
    let f = DType::F32;
    let rois = [0.5, 0.2, 3.7, 2.9, -1.0, -0.5, 2.0, 5.5, 1.0, 1.0, 1.2, 1.1];
    k.init("ra_rois", Tensor::new(vec![3, 4], TensorData::F32(rois.to_vec())).unwrap());
    k.init("ra_idx", Tensor::from_i64s(vec![0, 1, 1]));
    let ratio = |r: i64| ("sampling_ratio", Int(r));
    let bins = [("output_height", Int(3)), ("output_width", Int(2))];
    k.node("RoiAlign", &["x", "ra_rois", "ra_idx"], &["ra_avg"], &[bins[0].clone(), bins[1].clone(), ratio(2)], f);
    let max = [
        ("mode", s("max")),
        ("coordinate_transformation_mode", s("output_half_pixel")),
        ("spatial_scale", Attribute::Float(0.8)),
    ];
    k.node("RoiAlign", &["x", "ra_rois", "ra_idx"], &["ra_max"], &max, f);
    k.node("RoiAlign", &["x", "ra_rois", "ra_idx"], &["ra_adapt"], &bins, f);
    let pool_rois = [0.0, 0.0, 0.0, 4.0, 3.0, 1.0, 1.0, 0.4, 2.6, 3.0, 1.0, 6.0, 6.0, 8.0, 8.0];
    k.init("mrp_rois", Tensor::new(vec![3, 5], TensorData::F32(pool_rois.to_vec())).unwrap());
    k.node("MaxRoiPool", &["x", "mrp_rois"], &["mrp"], &[("pooled_shape", Ints(vec![2, 3]))], f);
    k.init("c2i_in", Tensor::from_i64s(vec![2, 4, 15]));
    k.init("c2i_image", Tensor::from_i64s(vec![2, 7]));
    k.init("c2i_block", Tensor::from_i64s(vec![2, 2]));
    k.hidden("Reshape", &["x", "c2i_in"], &["c2i_cols"], &[]);
    let c2i = [("pads", Ints(vec![1, 0, 1, 0])), ("dilations", Ints(vec![1, 2]))];
    k.node("Col2Im", &["c2i_cols", "c2i_image", "c2i_block"], &["c2i"], &c2i, f);
    k.init("dc_w", f32s(&[4, 3, 2, 2], 40));
    k.init("dc_b", f32s(&[4], 41));
    k.init("dc_off", f32s(&[2, 8, 3, 4], 42));
    k.init("dc_mask", f32s(&[2, 4, 3, 4], 43));
    k.node("DeformConv", &["x", "dc_w", "dc_off", "dc_b", "dc_mask"], &["dc"], &[], f);
    k.init("dcg_w", f32s(&[6, 1, 2, 2], 44));
    k.init("dcg_off", f32s(&[2, 24, 3, 3], 45));
    let grouped =
        [("group", Int(3)), ("offset_group", Int(3)), ("strides", Ints(vec![2, 2])), ("pads", Ints(vec![1, 1, 1, 1]))];
    k.node("DeformConv", &["x", "dcg_w", "dcg_off"], &["dcg"], &grouped, f);
    k.init("ccp_shape", Tensor::from_i64s(vec![2, 7, 3]));
    k.node("CenterCropPad", &["x", "ccp_shape"], &["ccp"], &[("axes", Ints(vec![1, -2, 3]))], f);
    k.node("CenterCropPad", &["xl", "ccp_shape"], &["ccpi"], &[("axes", Ints(vec![0, 2, 3]))], DType::I64);
}

/// DFT (forward, inverse, onesided, padded and truncated) and STFT (with a folded Hann window and
/// without one, real and complex).
fn signal_nodes(k: &mut Kinds) {
    let f = DType::F32;
    k.init("sig_c", Tensor::from_i64s(vec![2, 30, 2]));
    k.init("sig_r", Tensor::from_i64s(vec![4, 30, 1]));
    k.init("sig_long", Tensor::from_i64s(vec![2, 60, 1]));
    k.hidden("Reshape", &["x", "sig_c"], &["sig_complex"], &[]);
    k.hidden("Reshape", &["x", "sig_r"], &["sig_real"], &[]);
    k.hidden("Reshape", &["x", "sig_long"], &["sig_60"], &[]);
    for (name, v) in [("len16", 16), ("len40", 40), ("ax1", 1), ("ax0", 0), ("step7", 7), ("step5", 5), ("len8", 8)] {
        k.init(name, scalar(v));
    }
    k.node("DFT", &["sig_complex", "len16", "ax1"], &["dft_c"], &[], f);
    k.node("DFT", &["sig_complex", "", "ax0"], &["dft_inv"], &[("inverse", Int(1))], f);
    k.node("DFT", &["sig_real", "len40"], &["dft_r"], &[("onesided", Int(1))], f);
    k.hidden("HannWindow", &["len16"], &["hann16"], &[]);
    k.node("STFT", &["sig_60", "step7", "hann16"], &["stft_w"], &[], f);
    k.node("STFT", &["sig_complex", "step5", "", "len8"], &["stft_c"], &[("onesided", Int(0))], f);
}

/// Both losses, every reduction, weights and ignore_index, log_prob.
fn loss_nodes(k: &mut Kinds) {
    let f = DType::F32;
    let targets: Vec<i64> = (0..40).map(|i| (i * 7 % 4) as i64 - 1).collect();
    k.init("loss_t", i64s(&[2, 4, 5], targets));
    k.init("loss_w", Tensor::new(vec![3], TensorData::F32(vec![0.5, 2.0, 1.0])).unwrap());
    k.hidden("LogSoftmax", &["x"], &["loss_lp"], &[("axis", Int(1))]);
    let ii = ("ignore_index", Int(-1));
    let r = |v: &str| ("reduction", s(v));
    k.node("NegativeLogLikelihoodLoss", &["loss_lp", "loss_t"], &["nll_none"], &[ii.clone(), r("none")], f);
    k.node("NegativeLogLikelihoodLoss", &["loss_lp", "loss_t", "loss_w"], &["nll_mean"], std::slice::from_ref(&ii), f);
    k.node("NegativeLogLikelihoodLoss", &["loss_lp", "loss_t", "loss_w"], &["nll_sum"], &[ii.clone(), r("sum")], f);
    k.b.node("SoftmaxCrossEntropyLoss", &["x", "loss_t", "loss_w"], &["sce", "sce_lp"], &[ii.clone(), r("none")]);
    k.outputs.extend([("sce", f), ("sce_lp", f)]);
    k.node("SoftmaxCrossEntropyLoss", &["x", "loss_t"], &["sce_mean"], &[ii], f);
}

/// Every node of these families.
pub(super) fn sampling_signal_and_loss_nodes(k: &mut Kinds) {
    sampling_nodes(k);
    region_and_conv_nodes(k);
    signal_nodes(k);
    loss_nodes(k);
}
