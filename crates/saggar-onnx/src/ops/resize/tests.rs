//! Tests of the resize family: hand-computed values for every mode, coordinate transformation and
//! input form, the errors, inference on symbolic shapes, and the GPU kernels' texts and launches.

use saggar_shape::{DType, Dim};

use super::gpu::{AXIS_RECORD, HEADER, MAX_RESIZED_AXES, ResizeKernel};
use crate::ops::gpu::{GpuCtx, GpuKernel, GpuNode, Operand, kernel_definition};
use crate::ops::testing::{f32s, ints, run_op, values};
use crate::ops::{
    Attribute, Attributes, InferInput, InferInputs, NodeCtx, OpError, SymInt, ValueType, lookup, unknown_dim,
};
use crate::tensor::{Tensor, TensorData};

fn s(v: &str) -> Attribute {
    Attribute::String(v.as_bytes().to_vec())
}

fn attrs(list: &[(&str, Attribute)]) -> Attributes {
    Attributes(list.iter().map(|(n, a)| (n.to_string(), a.clone())).collect())
}

fn empty() -> Tensor {
    f32s(&[0], &[])
}

fn sizes(v: &[i64]) -> Tensor {
    Tensor::from_i64s(v.to_vec())
}

/// Resize at opset 19 of `x` to `scales` (empty for none) or `sizes`.
fn resize(a: &[(&str, Attribute)], x: &Tensor, roi: Option<&Tensor>, scales: &[f32], size: Option<&[i64]>) -> Tensor {
    try_resize(19, a, x, roi, scales, size).unwrap()
}

fn try_resize(
    opset: u32,
    a: &[(&str, Attribute)],
    x: &Tensor,
    roi: Option<&Tensor>,
    scales: &[f32],
    size: Option<&[i64]>,
) -> Result<Tensor, OpError> {
    let sc = f32s(&[scales.len()], scales);
    let sz = size.map(sizes);
    let inputs = [Some(x), roi, (!scales.is_empty()).then_some(&sc), sz.as_ref()];
    // Resize-10 takes `X, scales`.
    let inputs = if opset <= 10 { &[Some(x), Some(&sc)][..] } else { &inputs[..] };
    Ok(run_op("Resize", opset, &attrs(a), inputs)?.remove(0))
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{got:?} vs {want:?}");
    }
}

#[test]
fn nearest_modes_round_ties_as_named() {
    // Asymmetric coordinates of 4 -> 8: 0, 0.5, 1, 1.5, ... so every other one is a tie.
    let x = f32s(&[4], &[10.0, 11.0, 12.0, 13.0]);
    let run = |mode: &str| {
        let a = [("coordinate_transformation_mode", s("asymmetric")), ("nearest_mode", s(mode))];
        values(&resize(&a, &x, None, &[2.0], None)).to_vec()
    };
    assert_eq!(run("round_prefer_floor"), [10.0, 10.0, 11.0, 11.0, 12.0, 12.0, 13.0, 13.0]);
    assert_eq!(run("floor"), [10.0, 10.0, 11.0, 11.0, 12.0, 12.0, 13.0, 13.0]);
    assert_eq!(run("round_prefer_ceil"), [10.0, 11.0, 11.0, 12.0, 12.0, 13.0, 13.0, 13.0]);
    assert_eq!(run("ceil"), [10.0, 11.0, 11.0, 12.0, 12.0, 13.0, 13.0, 13.0]);
    // Half-pixel 4 -> 3 (scale 0.75): 0.1667, 1.5, 2.8333; the tie goes to 1 (floor) or 2 (ceil).
    let a = [("nearest_mode", s("round_prefer_floor"))];
    assert_eq!(values(&resize(&a, &x, None, &[], Some(&[3]))), [10.0, 11.0, 13.0]);
    let a = [("nearest_mode", s("round_prefer_ceil"))];
    assert_eq!(values(&resize(&a, &x, None, &[], Some(&[3]))), [10.0, 12.0, 13.0]);
}

#[test]
fn nearest_moves_integers_and_bools_and_repeats_the_upsample_example() {
    let x = Tensor::new(vec![1, 1, 2, 2], TensorData::I64(vec![1, 2, 3, 4])).unwrap();
    let scales = f32s(&[4], &[1.0, 1.0, 2.0, 3.0]);
    let out = run_op("Upsample", 9, &attrs(&[("mode", s("nearest"))]), &[Some(&x), Some(&scales)]).unwrap();
    assert_eq!(out[0].dims(), &[1, 1, 4, 6]);
    let row = |a: i64, b: i64| [a, a, a, b, b, b];
    let want: Vec<i64> = [row(1, 2), row(1, 2), row(3, 4), row(3, 4)].concat();
    assert_eq!(out[0].data(), &TensorData::I64(want.clone()));
    // Upsample-7 takes its scales as an attribute.
    let a = attrs(&[("scales", Attribute::Floats(vec![1.0, 1.0, 2.0, 3.0]))]);
    assert_eq!(run_op("Upsample", 7, &a, &[Some(&x)]).unwrap()[0].data(), &TensorData::I64(want));
    // Bools, extrapolated as `extrapolation_value != 0`.
    let b = Tensor::new(vec![2], TensorData::Bool(vec![1, 0])).unwrap();
    let roi = f32s(&[2], &[0.0, 2.0]);
    let a =
        [("coordinate_transformation_mode", s("tf_crop_and_resize")), ("extrapolation_value", Attribute::Float(1.0))];
    let out = resize(&a, &b, Some(&roi), &[], Some(&[3]));
    assert_eq!(out.data(), &TensorData::Bool(vec![1, 0, 1]), "source coordinates 0, 1, 2 (outside)");
}

#[test]
fn legacy_nearest_rounds_down_when_upsampling_and_up_when_downsampling() {
    let x = f32s(&[1, 1, 2, 4], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let down = try_resize(10, &[], &x, None, &[1.0, 1.0, 0.6, 0.6], None).unwrap();
    assert_eq!(down.dims(), &[1, 1, 1, 2]);
    assert_eq!(values(&down), [1.0, 3.0], "asymmetric 0 and 1.667, rounded up");
    let up = try_resize(10, &[], &x, None, &[1.0, 1.0, 1.0, 1.5], None).unwrap();
    assert_eq!(values(&up)[..6], [1.0, 1.0, 2.0, 3.0, 3.0, 4.0], "0, 0.67, 1.33, 2, 2.67, 3.33 rounded down");
    let linear = try_resize(10, &[("mode", s("linear"))], &x, None, &[1.0, 1.0, 1.0, 2.0], None).unwrap();
    assert_eq!(values(&linear)[..8], [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.0]);
    let scales = f32s(&[4], &[1.0, 1.0, 0.5, 1.0]);
    let err = run_op("Upsample", 9, &Attributes::default(), &[Some(&x), Some(&scales)]).unwrap_err();
    assert!(err.to_string().contains("at least 1"), "{err}");
}

#[test]
fn linear_matches_the_onnx_examples_for_each_coordinate_mode() {
    let x = f32s(&[1, 1, 2, 4], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let linear = |coord: &str| [("mode", s("linear")), ("coordinate_transformation_mode", s(coord))];
    let out = resize(&linear("half_pixel"), &x, None, &[1.0, 1.0, 0.6, 0.6], None);
    assert_eq!(out.dims(), &[1, 1, 1, 2]);
    assert_close(values(&out), &[2.6666667, 4.3333335]);
    // align_corners divides by the fractional output width: 2.4 - 1.
    let out = resize(&linear("align_corners"), &x, None, &[1.0, 1.0, 0.6, 0.6], None);
    assert_close(values(&out), &[1.0, 3.142857]);
    // half_pixel_symmetric centres the 2.4-wide output: offset 2 * (1 - 2 / 2.4).
    let row = f32s(&[1, 1, 1, 4], &[1.0, 2.0, 3.0, 4.0]);
    let out = resize(&linear("half_pixel_symmetric"), &row, None, &[1.0, 1.0, 1.0, 0.6], None);
    assert_close(values(&out), &[1.6666666, 3.3333333]);
    // pytorch_half_pixel reads coordinate 0 for a one-wide output; half_pixel the centre.
    let line = f32s(&[4], &[1.0, 2.0, 3.0, 4.0]);
    assert_eq!(values(&resize(&linear("pytorch_half_pixel"), &line, None, &[], Some(&[1]))), [1.0]);
    assert_eq!(values(&resize(&linear("half_pixel"), &line, None, &[], Some(&[1]))), [2.5]);
    // asymmetric x / 2 and tf_half_pixel_for_nn (x + 0.5) / 2 (opset 11).
    assert_close(
        values(&resize(&linear("asymmetric"), &line, None, &[2.0], None)),
        &[1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.0],
    );
    let empty = empty();
    let out = try_resize(11, &linear("tf_half_pixel_for_nn"), &line, Some(&empty), &[2.0], None).unwrap();
    assert_close(values(&out), &[1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4.0, 4.0]);
}

#[test]
fn tf_crop_and_resize_reads_the_roi_and_extrapolates_outside() {
    let line = f32s(&[4], &[1.0, 2.0, 3.0, 4.0]);
    let a = [
        ("mode", s("linear")),
        ("coordinate_transformation_mode", s("tf_crop_and_resize")),
        ("extrapolation_value", Attribute::Float(10.0)),
    ];
    // roi [0, 0.5]: x * 0.5 * 3 / 2 = 0, 0.75, 1.5.
    let out = resize(&a, &line, Some(&f32s(&[2], &[0.0, 0.5])), &[], Some(&[3]));
    assert_close(values(&out), &[1.0, 1.75, 2.5]);
    // roi [0.5, 1.5]: 1.5, 3, 4.5 (outside).
    let out = resize(&a, &line, Some(&f32s(&[2], &[0.5, 1.5])), &[], Some(&[3]));
    assert_close(values(&out), &[2.5, 4.0, 10.0]);
    // A one-wide output reads the roi's centre: (0.25 + 0.75) / 2 * 3.
    let out = resize(&a, &line, Some(&f32s(&[2], &[0.25, 0.75])), &[], Some(&[1]));
    assert_close(values(&out), &[2.5]);
    // With axes the roi has a start and an end per listed axis; any axis outside extrapolates.
    let grid = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let mut with_axes = a.to_vec();
    with_axes.push(("axes", ints(&[1])));
    let out = resize(&with_axes, &grid, Some(&f32s(&[2], &[0.0, 2.0])), &[], Some(&[3]));
    assert_close(values(&out), &[1.0, 2.0, 10.0, 3.0, 4.0, 10.0]);
    let err = try_resize(19, &a, &line, None, &[], Some(&[3])).unwrap_err();
    assert!(err.to_string().contains("roi"), "{err}");
    let err = try_resize(19, &a, &line, Some(&f32s(&[2], &[0.0, f32::NAN])), &[], Some(&[3])).unwrap_err();
    assert!(err.to_string().contains("finite"), "{err}");
}

#[test]
fn cubic_weights_exclude_outside_and_cubic_coeff_a() {
    // Asymmetric 4 -> 8: odd outputs sit half way, with weights W(1.5), W(0.5), W(0.5), W(1.5) =
    // -0.09375, 0.59375, 0.59375, -0.09375 for a = -0.75; the tap left of the input clamps to it.
    let line = f32s(&[4], &[1.0, 2.0, 3.0, 4.0]);
    let a = [("mode", s("cubic")), ("coordinate_transformation_mode", s("asymmetric"))];
    let out = resize(&a, &line, None, &[2.0], None);
    assert_close(&values(&out)[..3], &[1.0, -0.09375 + 0.59375 + 0.59375 * 2.0 - 0.09375 * 3.0, 2.0]);
    // exclude_outside drops the tap left of the input and renormalises the rest.
    let mut ex = a.to_vec();
    ex.push(("exclude_outside", Attribute::Int(1)));
    let out = resize(&ex, &line, None, &[2.0], None);
    assert_close(&values(&out)[..2], &[1.0, (0.59375 + 0.59375 * 2.0 - 0.09375 * 3.0) / 1.09375]);
    // a = -0.5: W(0.5) = 0.5625, W(1.5) = -0.0625, at x = 1.5 (taps 0..3).
    let mut half = a.to_vec();
    half.push(("cubic_coeff_a", Attribute::Float(-0.5)));
    let out = resize(&half, &line, None, &[2.0], None);
    assert_close(&values(&out)[3..4], &[-0.0625 + 0.5625 * 2.0 + 0.5625 * 3.0 - 0.0625 * 4.0]);
}

#[test]
fn antialias_widens_the_filter_when_downsampling() {
    // 8 -> 4 half-pixel: centres 0.5, 2.5, 4.5, 6.5; the triangle stretched by 2 gives taps at
    // distances 0.75, 0.25, 0.25, 0.75: weights 1, 3, 3, 1 eighths.
    let line = f32s(&[8], &(0..8).map(|v| v as f32).collect::<Vec<_>>());
    let a = [("mode", s("linear")), ("antialias", Attribute::Int(1))];
    let out = resize(&a, &line, None, &[], Some(&[4]));
    assert_close(values(&out), &[0.625, 2.5, 4.5, 6.375]);
    // Upsampling with antialias is plain linear (normalised).
    let up = resize(&a, &f32s(&[2], &[0.0, 4.0]), None, &[2.0], None);
    assert_close(values(&up), &[0.0, 1.0, 3.0, 4.0]);
    // Cubic antialias keeps a constant constant.
    let flat = f32s(&[9], &[3.0; 9]);
    let a = [("mode", s("cubic")), ("antialias", Attribute::Int(1))];
    assert_close(values(&resize(&a, &flat, None, &[], Some(&[2]))), &[3.0, 3.0]);
    let err = try_resize(19, &[("antialias", Attribute::Int(1))], &flat, None, &[0.5], None).unwrap_err();
    assert!(matches!(err, OpError::Unsupported { .. }), "{err}");
}

#[test]
fn n_linear_over_three_axes_and_axes_and_aspect_policies() {
    // Trilinear 2x2x2 -> 3x3x3 with align_corners: the centre is the mean of all eight.
    let cube = f32s(&[2, 2, 2], &(0..8).map(|v| v as f32).collect::<Vec<_>>());
    let a = [("mode", s("linear")), ("coordinate_transformation_mode", s("align_corners"))];
    let out = resize(&a, &cube, None, &[], Some(&[3, 3, 3]));
    assert_close(&values(&out)[13..14], &[3.5]);
    assert_close(&values(&out)[..3], &[0.0, 0.5, 1.0]);
    // Scales for listed axes only.
    let x = f32s(&[1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let out = resize(&[("axes", ints(&[-1]))], &x, None, &[2.0], None);
    assert_eq!(out.dims(), &[1, 2, 4]);
    assert_eq!(values(&out), [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]);
    // keep_aspect_ratio_policy on a 4x4 image asked for 3x2.
    let img = f32s(&[1, 1, 4, 4], &[0.0; 16]);
    let policy = |p: &str| [("axes", ints(&[2, 3])), ("keep_aspect_ratio_policy", s(p))];
    assert_eq!(resize(&policy("stretch"), &img, None, &[], Some(&[3, 2])).dims(), &[1, 1, 3, 2]);
    assert_eq!(resize(&policy("not_larger"), &img, None, &[], Some(&[3, 2])).dims(), &[1, 1, 2, 2]);
    assert_eq!(resize(&policy("not_smaller"), &img, None, &[], Some(&[3, 2])).dims(), &[1, 1, 3, 3]);
}

#[test]
fn bad_targets_are_errors_naming_the_value() {
    let x = f32s(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let err = |r: Result<Tensor, OpError>| r.unwrap_err().to_string();
    let e = err(try_resize(19, &[], &x, None, &[], Some(&[1, 1, 1 << 20, 1 << 20])));
    assert!(e.contains("above the limit"), "{e}");
    let e = err(try_resize(19, &[], &x, None, &[], Some(&[1, 1, 1 << 40, 2])));
    assert!(e.contains("1099511627776") && e.contains("max_tensor_elements"), "{e}");
    let e = err(try_resize(19, &[], &x, None, &[1.0, 1.0, 1e30, 1.0], None));
    assert!(e.contains("above the limit"), "{e}");
    for bad in [0.0, -2.0, f32::NAN, f32::INFINITY] {
        let e = err(try_resize(19, &[], &x, None, &[1.0, 1.0, bad, 1.0], None));
        assert!(e.contains("positive and finite") && e.contains(&format!("{bad}")), "{e}");
    }
    let e = err(try_resize(19, &[], &x, None, &[2.0, 2.0], None));
    assert!(e.contains("2 values for 4 axes"), "{e}");
    let e = err(try_resize(19, &[], &x, None, &[], Some(&[1, 2, 3])));
    assert!(e.contains("[1, 2, 3]") && e.contains("3 values for 4 axes"), "{e}");
    let e = err(try_resize(19, &[], &x, None, &[], Some(&[1, 1, -1, 2])));
    assert!(e.contains("negative") && e.contains("-1"), "{e}");
    let e = err(try_resize(19, &[], &x, None, &[1.0; 4], Some(&[1, 1, 2, 2])));
    assert!(e.contains("not both"), "{e}");
    let e = err(try_resize(19, &[], &x, None, &[], None));
    assert!(e.contains("needs a `scales` or a `sizes`"), "{e}");
    let ix = Tensor::new(vec![2], TensorData::I64(vec![1, 2])).unwrap();
    let e = err(try_resize(19, &[("mode", s("linear"))], &ix, None, &[2.0], None));
    assert!(e.contains("f32 only"), "{e}");
    let e = err(try_resize(19, &[("axes", ints(&[1, 1]))], &x, None, &[2.0, 2.0], None));
    assert!(e.contains("repeated"), "{e}");
    // Attribute values outside an opset's set.
    for (opset, name, value) in [
        (18, "coordinate_transformation_mode", "half_pixel_symmetric"),
        (13, "coordinate_transformation_mode", "tf_half_pixel_for_nn"),
        (19, "nearest_mode", "round"),
        (19, "mode", "area"),
        (10, "mode", "cubic"),
        (19, "keep_aspect_ratio_policy", "fit"),
    ] {
        let r = try_resize(opset, &[(name, s(value))], &x, Some(&empty()), &[1.0; 4], None);
        assert!(matches!(r, Err(OpError::Unsupported { .. })), "{name}={value} at {opset}: {r:?}");
    }
    // Attributes of later opsets are not read earlier, so they are reported.
    let r = try_resize(13, &[("antialias", Attribute::Int(0))], &x, None, &[1.0; 4], None);
    assert!(matches!(r, Err(OpError::Unsupported { .. })), "{r:?}");
}

/// Infers a Resize-19 of `x` with `scales` or `sizes` given as constants or as run-time values.
fn infer(x: &ValueType, scales: Option<&Tensor>, size: Option<(&ValueType, Option<&Tensor>)>) -> Vec<Dim> {
    infer_chain(x, scales, size, None)
}

/// [`infer`] with `sizes` known as the elements of a shape chain.
fn infer_chain(
    x: &ValueType,
    scales: Option<&Tensor>,
    size: Option<(&ValueType, Option<&Tensor>)>,
    chain: Option<&[SymInt]>,
) -> Vec<Dim> {
    let a = Attributes::default();
    let op = (lookup("Resize", 19).unwrap().build)(&mut NodeCtx::for_test(&a, 19, 4)).unwrap();
    let sty = scales.map(|t| ValueType::fixed(DType::F32, t.dims()));
    let slots = [
        Some(InferInput { ty: x, value: None, dims_value: None }),
        None,
        sty.as_ref().map(|ty| InferInput { ty, value: scales, dims_value: None }),
        size.map(|(ty, value)| InferInput { ty, value, dims_value: chain }),
    ];
    op.infer(&InferInputs::new(&slots)).unwrap().remove(0).dims
}

#[test]
fn inference_keeps_symbols_a_scale_of_one_keeps_and_waits_for_unknown_targets() {
    let x = ValueType::new(DType::F32, vec![Dim::symbolic("n"), Dim::Fixed(3), Dim::Fixed(5), Dim::symbolic("w")]);
    let scales = f32s(&[4], &[1.0, 1.0, 2.0, 2.0]);
    let dims = infer(&x, Some(&scales), None);
    assert_eq!(dims[..3], [Dim::symbolic("n"), Dim::Fixed(3), Dim::Fixed(10)]);
    assert_eq!(dims[3], unknown_dim());
    let sty = ValueType::fixed(DType::I64, &[4]);
    let t = sizes(&[1, 3, 7, 9]);
    let dims = infer(&x, None, Some((&sty, Some(&t))));
    assert_eq!(dims, [Dim::Fixed(1), Dim::Fixed(3), Dim::Fixed(7), Dim::Fixed(9)]);
    assert_eq!(infer(&x, None, Some((&sty, None))), vec![unknown_dim(); 4], "sizes known at run time only");
    // Sizes from a shape chain (another tensor's Shape, sliced and concatenated) keep its symbols.
    let chain = [SymInt::Int(1), SymInt::Int(3), SymInt::Sym("h".into()), SymInt::Sym("w2".into())];
    let dims = infer_chain(&x, None, Some((&sty, None)), Some(&chain));
    assert_eq!(dims, [Dim::Fixed(1), Dim::Fixed(3), Dim::symbolic("h"), Dim::symbolic("w2")]);
}

/// The GPU form of a Resize at `opset`.
fn gpu_node(opset: u32, a: &[(&str, Attribute)], inputs: &[Option<&Tensor>]) -> Result<GpuNode, OpError> {
    let a = attrs(a);
    let op = (lookup("Resize", opset).unwrap().build)(&mut NodeCtx::for_test(&a, opset, inputs.len()))?;
    let types: Vec<Option<ValueType>> =
        inputs.iter().map(|t| t.map(|t| ValueType::fixed(t.dtype(), t.dims()))).collect();
    let slots: Vec<Option<InferInput<'_>>> = inputs
        .iter()
        .zip(&types)
        .map(|(t, ty)| ty.as_ref().map(|ty| InferInput { ty, value: *t, dims_value: None }))
        .collect();
    let infer = InferInputs::new(&slots);
    let out = op.infer(&infer)?.remove(0);
    let operands: Vec<Option<Operand>> =
        inputs.iter().map(|t| t.map(|t| Operand { dtype: t.dtype(), dims: t.dims().to_vec() })).collect();
    let outputs = [Operand { dtype: out.dtype, dims: out.fixed_dims().unwrap() }];
    op.gpu(&GpuCtx { inputs: &operands, outputs: &outputs, infer: &infer }).unwrap()
}

#[test]
fn gpu_launches_carry_every_extent_and_constant_in_meta() {
    let x = f32s(&[1, 2, 3, 4], &[0.0; 24]);
    let scales = f32s(&[4], &[1.0, 1.0, 2.0, 0.5]);
    let a = [("mode", s("cubic")), ("cubic_coeff_a", Attribute::Float(-0.5)), ("exclude_outside", Attribute::Int(1))];
    let GpuNode::Launches(l) = gpu_node(19, &a, &[Some(&x), None, Some(&scales)]).unwrap() else { panic!() };
    assert_eq!(l[0].kernel_as::<ResizeKernel>(), Some(&ResizeKernel::Filter));
    let m = &l[0].meta;
    assert_eq!(m[..6], [4, 24, 2, 0, 1, 2], "rank, n, two resized axes, half_pixel, cubic, exclude_outside");
    assert_eq!(f32::from_bits(m[7] as u32), -0.5);
    assert_eq!(m[HEADER..HEADER + 8], [1, 2, 6, 2, 24, 12, 4, 1], "output extents, input strides");
    let first = &m[HEADER + 8..HEADER + 8 + AXIS_RECORD];
    assert_eq!(first[..4], [2, 3, 4, -1], "axis 2 of 3, four taps from -1");
    assert_eq!(f32::from_bits(first[4] as u32), 2.0);
    assert_eq!(m.len(), HEADER + 8 + 2 * AXIS_RECORD);
    // The same text for another shape; nearest moves bits of the element's width.
    let y = f32s(&[2, 5], &[0.0; 10]);
    let GpuNode::Launches(l2) = gpu_node(19, &a, &[Some(&y), None, Some(&f32s(&[2], &[1.0, 3.0]))]).unwrap() else {
        panic!()
    };
    assert_eq!(l2[0].kernel.source(), l[0].kernel.source());
    let i = Tensor::new(vec![3], TensorData::I64(vec![1, 2, 3])).unwrap();
    let GpuNode::Launches(l3) = gpu_node(19, &[], &[Some(&i), None, Some(&f32s(&[1], &[2.0]))]).unwrap() else {
        panic!()
    };
    assert_eq!(l3[0].kernel_as::<ResizeKernel>(), Some(&ResizeKernel::Nearest { elem_bytes: 8 }));
    // tf_crop_and_resize reads its constant roi into the table.
    let tf = [("coordinate_transformation_mode", s("tf_crop_and_resize"))];
    let roi = f32s(&[2], &[0.0, 1.0]);
    assert!(gpu_node(19, &tf, &[Some(&i), Some(&roi), Some(&f32s(&[1], &[2.0]))]).is_ok());
}

#[test]
fn every_resize_kernel_renders_completely_with_a_name_of_its_own() {
    let mut kinds = vec![ResizeKernel::Filter];
    kinds.extend([1, 2, 4, 8].map(|b| ResizeKernel::Nearest { elem_bytes: b }));
    let mut names = std::collections::HashSet::new();
    for kind in kinds {
        let (name, definition) = kernel_definition(&kind);
        let body = kind.source();
        assert!(!body.contains('@'), "{kind:?} leaves a placeholder: {body}");
        assert!(body.starts_with("(const onnx_i64* meta"), "{kind:?}: {body}");
        assert!(definition.contains(&format!("[{MAX_RESIZED_AXES}]")) || kind != ResizeKernel::Filter);
        assert!(names.insert(name), "{kind:?}");
    }
}
