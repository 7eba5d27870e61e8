//! Tests of the sampling family: hand-computed GridSample values for every mode, padding and
//! align_corners in 1-D, 2-D and 3-D, AffineGrid in 2-D and 3-D, the errors, and the GPU launches.

use super::gpu::{AffineGridKernel, GridSampleKernel};
use crate::ops::gpu::{GpuCtx, GpuNode, Operand};
use crate::ops::testing::{assert_kernels_render, f32s, iota, run_op, values};
use crate::ops::{Attribute, Attributes, InferInput, InferInputs, OpError, ValueType, lookup, unknown_dim};
use crate::tensor::Tensor;

fn s(v: &str) -> Attribute {
    Attribute::String(v.as_bytes().to_vec())
}

fn attrs(list: &[(&str, Attribute)]) -> Attributes {
    Attributes(list.iter().map(|(n, a)| (n.to_string(), a.clone())).collect())
}

fn grid_sample(opset: u32, a: &[(&str, Attribute)], x: &Tensor, grid: &Tensor) -> Result<Vec<f32>, OpError> {
    Ok(values(&run_op("GridSample", opset, &attrs(a), &[Some(x), Some(grid)])?[0]).to_vec())
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{got:?} vs {want:?}");
    }
}

/// 2x2 image [[1, 2], [3, 4]] sampled at (0, 0), (-1, -1) and (1, -1) as (x, y).
fn image_and_points() -> (Tensor, Tensor) {
    (f32s(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]), f32s(&[1, 1, 3, 2], &[0.0, 0.0, -1.0, -1.0, 1.0, -1.0]))
}

#[test]
fn bilinear_sampling_pads_as_named_and_aligns_corners() {
    let (x, g) = image_and_points();
    let pad = |p: &str| ("padding_mode", s(p));
    assert_close(&grid_sample(16, &[], &x, &g).unwrap(), &[2.5, 0.25, 0.5]);
    assert_close(&grid_sample(16, &[pad("border")], &x, &g).unwrap(), &[2.5, 1.0, 2.0]);
    assert_close(&grid_sample(16, &[pad("reflection")], &x, &g).unwrap(), &[2.5, 1.0, 2.0]);
    assert_close(&grid_sample(16, &[("align_corners", Attribute::Int(1))], &x, &g).unwrap(), &[2.5, 1.0, 2.0]);
    // Opset 20 names the mode `linear` and gives the same.
    assert_close(&grid_sample(20, &[("mode", s("linear"))], &x, &g).unwrap(), &[2.5, 0.25, 0.5]);
}

#[test]
fn reflection_folds_far_coordinates_back_inside() {
    // [10, 20] at x = 3 (3.5 before reflection: back to -0.5) and x = 2 (2.5: back to 0.5).
    let x = f32s(&[1, 1, 2], &[10.0, 20.0]);
    let g = f32s(&[1, 2, 1], &[3.0, 2.0]);
    assert_close(&grid_sample(20, &[("padding_mode", s("reflection"))], &x, &g).unwrap(), &[10.0, 15.0]);
    assert!(grid_sample(16, &[], &x, &g).is_err(), "GridSample-16 takes 4-D inputs only");
}

#[test]
fn nearest_rounds_half_to_even_and_pads() {
    let x = f32s(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let g = f32s(&[1, 1, 3, 2], &[0.0, 0.0, 0.2, 0.0, 1.0, 1.0]);
    let nearest = ("mode", s("nearest"));
    assert_close(&grid_sample(16, std::slice::from_ref(&nearest), &x, &g).unwrap(), &[1.0, 2.0, 0.0]);
    assert_close(&grid_sample(20, &[nearest, ("padding_mode", s("border"))], &x, &g).unwrap(), &[1.0, 2.0, 4.0]);
}

#[test]
fn cubic_sampling_reproduces_a_ramp_with_keys_weights() {
    // Keys' weights at t = 0.5 are symmetric and sum to 1: a ramp comes back exactly.
    let x = f32s(&[1, 1, 4], &[0.0, 1.0, 2.0, 3.0]);
    assert_close(&grid_sample(20, &[("mode", s("cubic"))], &x, &f32s(&[1, 1, 1], &[0.0])).unwrap(), &[1.5]);
    // At x = 0.25 with zeros padding the tap at -1 reads 0: 0 * w(0) + 1 * w(1) + 2 * w(2), t = 0.25.
    let w = super::cubic_weights(0.25);
    let got = grid_sample(20, &[("mode", s("cubic"))], &x, &f32s(&[1, 1, 1], &[-0.625])).unwrap();
    assert_close(&got, &[w[2] + 2.0 * w[3]]);
    // Bicubic in 2-D at opset 16: a row image, y on the row exactly.
    let x2 = f32s(&[1, 1, 1, 4], &[0.0, 1.0, 2.0, 3.0]);
    let got = grid_sample(16, &[("mode", s("bicubic"))], &x2, &f32s(&[1, 1, 1, 2], &[0.0, 0.0])).unwrap();
    assert_close(&got, &[1.5]);
}

#[test]
fn volumetric_sampling_reads_x_along_the_last_axis() {
    let x = iota(&[1, 2, 2, 2, 2]);
    let g = f32s(&[1, 1, 1, 2, 3], &[0.0, 0.0, 0.0, 1.0, -1.0, -1.0]);
    let got = grid_sample(20, &[("align_corners", Attribute::Int(1))], &x, &g).unwrap();
    // Channel 0 then channel 1 (8 more).
    assert_close(&got, &[3.5, 1.0, 11.5, 9.0]);
}

#[test]
fn hostile_grids_read_zeros_or_edges_without_panicking() {
    let x = f32s(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let g = f32s(&[1, 1, 3, 2], &[f32::NAN, 0.0, f32::INFINITY, f32::NEG_INFINITY, 1e30, -1e30]);
    for mode in ["bilinear", "nearest", "bicubic"] {
        for pad in ["zeros", "border", "reflection"] {
            let got = grid_sample(16, &[("mode", s(mode)), ("padding_mode", s(pad))], &x, &g).unwrap();
            assert!(got.iter().all(|v| v.is_finite()), "{mode} {pad}: {got:?}");
        }
    }
}

#[test]
fn grid_sample_refuses_mismatched_grids_and_unknown_modes() {
    let x = iota(&[1, 1, 2, 2]);
    let err = grid_sample(16, &[], &x, &iota(&[1, 2, 2, 3])).unwrap_err();
    assert!(matches!(&err, OpError::Infer(m) if m.contains("last axis must hold 2")), "{err}");
    assert!(matches!(grid_sample(16, &[], &x, &iota(&[2, 2, 2, 2])), Err(OpError::Infer(m)) if m.contains("batch")));
    assert!(grid_sample(16, &[], &x, &iota(&[1, 2, 2])).is_err(), "rank differs");
    let bad = [
        (16, ("mode", s("linear"))),
        (20, ("mode", s("bilinear"))),
        (20, ("padding_mode", s("wrap"))),
        (20, ("align_corners", Attribute::Int(2))),
    ];
    for (opset, a) in bad {
        let err = grid_sample(opset, std::slice::from_ref(&a), &x, &iota(&[1, 2, 2, 2])).unwrap_err();
        assert!(matches!(err, OpError::Unsupported { .. } | OpError::Attribute { .. }), "{a:?}: {err}");
    }
    let ints = Tensor::from_i64s(vec![1, 2, 3, 4]).reshaped(vec![1, 1, 2, 2]).unwrap();
    assert!(grid_sample(16, &[], &ints, &iota(&[1, 2, 2, 2])).is_err(), "f32 only");
}

fn affine(a: &[(&str, Attribute)], theta: &Tensor, size: &[i64]) -> Result<Tensor, OpError> {
    Ok(run_op("AffineGrid", 20, &attrs(a), &[Some(theta), Some(&Tensor::from_i64s(size.to_vec()))])?.remove(0))
}

#[test]
fn affine_grids_transform_the_base_coordinates() {
    let id = f32s(&[1, 2, 3], &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
    let t = affine(&[], &id, &[1, 1, 2, 3]).unwrap();
    assert_eq!(t.dims(), [1, 2, 3, 2]);
    let third = 2.0 / 3.0;
    assert_close(values(&t), &[-third, -0.5, 0.0, -0.5, third, -0.5, -third, 0.5, 0.0, 0.5, third, 0.5]);
    let aligned = affine(&[("align_corners", Attribute::Int(1))], &id, &[1, 1, 2, 3]).unwrap();
    assert_close(values(&aligned), &[-1.0, -1.0, 0.0, -1.0, 1.0, -1.0, -1.0, 1.0, 0.0, 1.0, 1.0, 1.0]);
    let moved = f32s(&[1, 2, 3], &[2.0, 0.0, 0.5, 0.0, 1.0, -1.0]);
    let t = affine(&[("align_corners", Attribute::Int(1))], &moved, &[1, 3, 1, 2]).unwrap();
    assert_close(values(&t), &[-1.5, -2.0, 2.5, -2.0]);
    let id3 = f32s(&[1, 3, 4], &[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
    let t = affine(&[("align_corners", Attribute::Int(1))], &id3, &[1, 1, 2, 1, 2]).unwrap();
    assert_eq!(t.dims(), [1, 2, 1, 2, 3]);
    assert_close(values(&t), &[-1.0, -1.0, -1.0, 1.0, -1.0, -1.0, -1.0, -1.0, 1.0, 1.0, -1.0, 1.0]);
}

#[test]
fn affine_grid_refuses_bad_shapes_and_sizes() {
    let id = f32s(&[1, 2, 3], &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
    assert!(affine(&[], &iota(&[1, 2, 4]), &[1, 1, 2, 3]).is_err(), "theta [1, 2, 4]");
    assert!(affine(&[], &id, &[1, 1, 2]).is_err(), "three size values");
    assert!(matches!(affine(&[], &id, &[1, 1, -2, 3]), Err(OpError::Infer(m)) if m.contains("negative")));
    assert!(matches!(affine(&[], &id, &[2, 1, 2, 3]), Err(OpError::Infer(m)) if m.contains("batch")));
    // Too large to allocate: refused before allocating.
    assert!(affine(&[], &id, &[1, 1, 1 << 40, 1 << 20]).is_err());
    // A size known only at run time: the spatial extents are unknown, the rank is not.
    let entry = lookup("AffineGrid", 20).unwrap();
    let a = Attributes::default();
    let op = (entry.build)(&mut crate::ops::NodeCtx::for_test(&a, 20, 2)).unwrap();
    let (tt, st) =
        (ValueType::fixed(saggar_shape::DType::F32, &[1, 2, 3]), ValueType::fixed(saggar_shape::DType::I64, &[4]));
    let ins = [
        Some(InferInput { ty: &tt, value: None, dims_value: None }),
        Some(InferInput { ty: &st, value: None, dims_value: None }),
    ];
    let out = op.infer(&InferInputs::new(&ins)).unwrap();
    assert_eq!(out[0].dims.len(), 4);
    assert_eq!(out[0].dims[1], unknown_dim());
}

#[test]
fn kernels_render_and_launch_over_every_output_element() {
    assert_kernels_render(&[Box::new(GridSampleKernel), Box::new(AffineGridKernel)]);
    let a = attrs(&[("mode", s("bicubic")), ("padding_mode", s("reflection"))]);
    let op = (lookup("GridSample", 16).unwrap().build)(&mut crate::ops::NodeCtx::for_test(&a, 16, 2)).unwrap();
    let f = |d: &[usize]| Operand { dtype: saggar_shape::DType::F32, dims: d.to_vec() };
    let inputs = [Some(f(&[2, 3, 4, 5])), Some(f(&[2, 6, 7, 2]))];
    let empty: [Option<InferInput<'_>>; 0] = [];
    let infer = InferInputs::new(&empty);
    let outputs = [f(&[2, 3, 6, 7])];
    let ctx = GpuCtx { inputs: &inputs, outputs: &outputs, infer: &infer };
    let Some(Ok(GpuNode::Launches(l))) = op.gpu(&ctx) else { panic!("GridSample has a GPU form") };
    assert_eq!(l[0].meta, vec![2, 2 * 3 * 6 * 7, 3, 2, 2, 0, 4, 5, 6, 7]);
    assert!(l[0].kernel.source().contains("rintf"));
    let bad = [Some(f(&[2, 3, 4, 5])), Some(f(&[2, 6, 7, 3]))];
    let ctx = GpuCtx { inputs: &bad, outputs: &outputs, infer: &infer };
    assert!(matches!(op.gpu(&ctx), Some(Err(_))));
}
