//! Tests of the region family: RoiAlign's modes, coordinate modes, sampling grids and batch indices,
//! MaxRoiPool's bins, the errors, and the GPU launches.

use super::gpu::{MaxRoiPoolKernel, RoiAlignKernel};
use crate::ops::gpu::{GpuCtx, GpuNode, Operand};
use crate::ops::testing::{assert_kernels_render, f32s, ints, iota, run_op, values};
use crate::ops::{Attribute, Attributes, InferInput, InferInputs, OpError, lookup};
use crate::tensor::Tensor;

fn attrs(list: &[(&str, Attribute)]) -> Attributes {
    Attributes(list.iter().map(|(n, a)| (n.to_string(), a.clone())).collect())
}

fn s(v: &str) -> Attribute {
    Attribute::String(v.as_bytes().to_vec())
}

/// RoiAlign of the 4x4 ramp `4y + x` (two images: the second 16 more) over one region.
fn align(opset: u32, a: &[(&str, Attribute)], roi: &[f32], batch: i64) -> Result<Vec<f32>, OpError> {
    let x = iota(&[2, 1, 4, 4]);
    let rois = f32s(&[1, 4], roi);
    let idx = Tensor::from_i64s(vec![batch]);
    Ok(values(&run_op("RoiAlign", opset, &attrs(a), &[Some(&x), Some(&rois), Some(&idx)])?[0]).to_vec())
}

fn ratio(r: i64) -> (&'static str, Attribute) {
    ("sampling_ratio", Attribute::Int(r))
}

#[test]
fn roi_align_averages_bilinear_samples_of_each_bin() {
    // Samples of a ramp average to the ramp at their mean position.
    assert_eq!(align(10, &[ratio(2)], &[0.0, 0.0, 2.0, 2.0], 0).unwrap(), [5.0]);
    assert_eq!(align(16, &[ratio(2)], &[0.0, 0.0, 2.0, 2.0], 0).unwrap(), [2.5], "half_pixel shifts by half a cell");
    let out_half = ("coordinate_transformation_mode", s("output_half_pixel"));
    assert_eq!(align(16, &[ratio(2), out_half.clone()], &[0.0, 0.0, 2.0, 2.0], 0).unwrap(), [5.0]);
    assert_eq!(align(10, &[], &[0.0, 0.0, 3.0, 3.0], 0).unwrap(), [7.5], "adaptive: 3 samples per axis");
    let two = [("output_height", Attribute::Int(2)), ("output_width", Attribute::Int(2)), ratio(1)];
    assert_eq!(align(10, &two, &[0.0, 0.0, 2.0, 2.0], 0).unwrap(), [2.5, 3.5, 6.5, 7.5]);
    let half = [ratio(2), ("spatial_scale", Attribute::Float(0.5))];
    assert_eq!(align(10, &half, &[0.0, 0.0, 4.0, 4.0], 0).unwrap(), [5.0]);
    assert_eq!(align(10, &[ratio(2)], &[0.0, 0.0, 2.0, 2.0], 1).unwrap(), [21.0], "the second image");
    assert_eq!(align(10, &[ratio(1)], &[10.0, 10.0, 12.0, 12.0], 0).unwrap(), [0.0], "outside reads 0");
    assert_eq!(align(10, &[ratio(1)], &[3.0, 3.0, 4.0, 4.0], 0).unwrap(), [15.0], "the last cell clamps");
}

#[test]
fn roi_align_max_takes_the_largest_weighted_cell() {
    let max = ("mode", s("max"));
    assert_eq!(align(10, &[max, ratio(2)], &[0.0, 0.0, 2.0, 2.0], 0).unwrap(), [2.5]);
}

#[test]
fn roi_align_refuses_bad_regions_and_attributes() {
    let err = align(16, &[], &[0.0, 0.0, 2.0, 2.0], 2).unwrap_err();
    assert!(matches!(&err, OpError::Eval(m) if m.contains("batch index 2")), "{err}");
    assert!(align(16, &[], &[0.0, 0.0, 2.0, 2.0], -1).is_err());
    assert!(matches!(align(16, &[], &[0.0, f32::NAN, 2.0, 2.0], 0), Err(OpError::Eval(m)) if m.contains("finite")));
    let err = align(16, &[], &[0.0, 0.0, 1e7, 1e7], 0).unwrap_err();
    assert!(matches!(&err, OpError::Eval(m) if m.contains("sampling_ratio")), "{err}");
    for bad in [("output_height", Attribute::Int(0)), ("output_width", Attribute::Int(-3)), ratio(-1)] {
        assert!(
            matches!(align(16, std::slice::from_ref(&bad), &[0.0; 4], 0), Err(OpError::Attribute { .. })),
            "{bad:?}"
        );
    }
    assert!(matches!(align(16, &[("mode", s("sum"))], &[0.0; 4], 0), Err(OpError::Unsupported { .. })));
    let ctm = ("coordinate_transformation_mode", s("half_pixel"));
    assert!(align(10, &[ctm], &[0.0; 4], 0).is_err(), "opset 10 has no coordinate_transformation_mode");
    let x = iota(&[1, 1, 4, 4]);
    let (rois, idx) = (f32s(&[1, 5], &[0.0; 5]), Tensor::from_i64s(vec![0]));
    assert!(run_op("RoiAlign", 16, &attrs(&[]), &[Some(&x), Some(&rois), Some(&idx)]).is_err(), "rois [1, 5]");
    let (rois, idx2) = (f32s(&[1, 4], &[0.0; 4]), Tensor::from_i64s(vec![0, 0]));
    assert!(run_op("RoiAlign", 16, &attrs(&[]), &[Some(&x), Some(&rois), Some(&idx2)]).is_err(), "2 indices");
}

fn max_pool(a: &[(&str, Attribute)], roi: &[f32]) -> Result<Vec<f32>, OpError> {
    let x = iota(&[1, 1, 4, 4]);
    let rois = f32s(&[roi.len() / 5, 5], roi);
    Ok(values(&run_op("MaxRoiPool", 1, &attrs(a), &[Some(&x), Some(&rois)])?[0]).to_vec())
}

#[test]
fn max_roi_pool_takes_the_maximum_of_each_bin() {
    let p = ("pooled_shape", ints(&[2, 2]));
    assert_eq!(max_pool(std::slice::from_ref(&p), &[0.0, 0.0, 0.0, 3.0, 3.0]).unwrap(), [5.0, 7.0, 13.0, 15.0]);
    let scaled = [p.clone(), ("spatial_scale", Attribute::Float(0.5))];
    assert_eq!(max_pool(&scaled, &[0.0, 0.0, 0.0, 6.0, 6.0]).unwrap(), [5.0, 7.0, 13.0, 15.0]);
    assert_eq!(max_pool(std::slice::from_ref(&p), &[0.0, 1.0, 1.0, 1.0, 1.0]).unwrap(), [5.0; 4], "a one-cell region");
    assert_eq!(
        max_pool(std::slice::from_ref(&p), &[0.0, 10.0, 10.0, 12.0, 12.0]).unwrap(),
        [0.0; 4],
        "empty bins are 0"
    );
    let two = [0.0, 0.0, 0.0, 3.0, 3.0, 0.0, 0.0, 0.0, 1.0, 1.0];
    assert_eq!(max_pool(std::slice::from_ref(&p), &two).unwrap(), [5.0, 7.0, 13.0, 15.0, 0.0, 1.0, 4.0, 5.0]);
    assert!(
        matches!(max_pool(std::slice::from_ref(&p), &[1.0, 0.0, 0.0, 3.0, 3.0]), Err(OpError::Eval(m)) if m.contains("batch"))
    );
    assert!(max_pool(std::slice::from_ref(&p), &[0.0, f32::INFINITY, 0.0, 3.0, 3.0]).is_err());
    assert!(max_pool(&[], &[0.0; 5]).is_err(), "pooled_shape is required");
    assert!(max_pool(&[("pooled_shape", ints(&[2]))], &[0.0; 5]).is_err());
    assert!(max_pool(&[("pooled_shape", ints(&[2, -1]))], &[0.0; 5]).is_err());
    let x = iota(&[1, 1, 4, 4]);
    let rois = f32s(&[1, 4], &[0.0; 4]);
    assert!(run_op("MaxRoiPool", 1, &attrs(&[p]), &[Some(&x), Some(&rois)]).is_err(), "rois [1, 4]");
}

#[test]
fn kernels_render_and_launch() {
    let kinds: Vec<Box<dyn crate::ops::gpu::GpuKernel>> = vec![
        Box::new(RoiAlignKernel { index: saggar_shape::DType::I64 }),
        Box::new(RoiAlignKernel { index: saggar_shape::DType::I32 }),
        Box::new(MaxRoiPoolKernel),
    ];
    assert_kernels_render(&kinds);
    let a = attrs(&[("output_height", Attribute::Int(3))]);
    let op = (lookup("RoiAlign", 16).unwrap().build)(&mut crate::ops::NodeCtx::for_test(&a, 16, 3)).unwrap();
    let t = |d: saggar_shape::DType, dims: &[usize]| Operand { dtype: d, dims: dims.to_vec() };
    let f = saggar_shape::DType::F32;
    let inputs = [Some(t(f, &[2, 3, 8, 9])), Some(t(f, &[5, 4])), Some(t(saggar_shape::DType::I64, &[5]))];
    let empty: [Option<InferInput<'_>>; 0] = [];
    let infer = InferInputs::new(&empty);
    let outputs = [t(f, &[5, 3, 3, 1])];
    let ctx = GpuCtx { inputs: &inputs, outputs: &outputs, infer: &infer };
    let Some(Ok(GpuNode::Launches(l))) = op.gpu(&ctx) else { panic!("RoiAlign has a GPU form") };
    assert_eq!(l[0].meta[..9], [45, 2, 3, 8, 9, 5, 3, 1, 0]);
}
