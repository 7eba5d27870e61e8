//! Tests of the signal family: window values, MelWeightMatrix's bands, DFT and STFT against hand
//! transforms (forward, inverse, onesided, padded and truncated lengths, both axis forms), the errors,
//! and the GPU kernels.

use saggar_shape::DType;

use super::gpu::{DftKernel, StftKernel};
use crate::ops::gpu::{GpuCtx, GpuKernel, GpuNode, Operand};
use crate::ops::testing::{assert_kernels_render, f32s, run_op, values};
use crate::ops::{Attribute, Attributes, InferInput, InferInputs, OpError, ValueType, lookup, unknown_dim};
use crate::tensor::{Tensor, TensorData};

fn attrs(list: &[(&str, Attribute)]) -> Attributes {
    Attributes(list.iter().map(|(n, a)| (n.to_string(), a.clone())).collect())
}

fn scalar(v: i64) -> Tensor {
    Tensor::new(vec![], TensorData::I64(vec![v])).unwrap()
}

fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{got:?} vs {want:?}");
    }
}

fn window(op: &str, a: &[(&str, Attribute)], size: i64) -> Result<Tensor, OpError> {
    Ok(run_op(op, 17, &attrs(a), &[Some(&scalar(size))])?.remove(0))
}

#[test]
fn windows_are_periodic_or_symmetric() {
    assert_close(values(&window("HannWindow", &[], 4).unwrap()), &[0.0, 0.5, 1.0, 0.5]);
    let symmetric = [("periodic", Attribute::Int(0))];
    assert_close(values(&window("HannWindow", &symmetric, 5).unwrap()), &[0.0, 0.5, 1.0, 0.5, 0.0]);
    let a0 = 25.0 / 46.0;
    assert_close(values(&window("HammingWindow", &[], 4).unwrap()), &[2.0 * a0 - 1.0, a0, 1.0, a0]);
    assert_close(values(&window("BlackmanWindow", &[], 4).unwrap()), &[0.0, 0.34, 1.0, 0.34]);
    let long = [("output_datatype", Attribute::Int(7))];
    assert_eq!(window("HannWindow", &long, 4).unwrap().data(), &TensorData::I64(vec![0, 0, 1, 0]));
    let half = [("output_datatype", Attribute::Int(10))];
    assert_eq!(window("HannWindow", &half, 4).unwrap().dtype(), DType::F16);
    assert!(window("HannWindow", &[], 0).unwrap().is_empty());
}

#[test]
fn window_errors_name_the_value() {
    assert!(matches!(window("HannWindow", &[], -1), Err(OpError::Infer(m)) if m.contains("negative")));
    assert!(matches!(
        window("HannWindow", &[("output_datatype", Attribute::Int(11))], 4),
        Err(OpError::Unsupported { .. })
    ));
    assert!(matches!(window("BlackmanWindow", &[("periodic", Attribute::Int(2))], 4), Err(OpError::Attribute { .. })));
    let two = Tensor::from_i64s(vec![2, 3]);
    assert!(run_op("HannWindow", 17, &attrs(&[]), &[Some(&two)]).is_err(), "size holds one value");
    assert!(run_op("HannWindow", 17, &attrs(&[]), &[Some(&f32s(&[], &[4.0]))]).is_err(), "size is an integer");
}

fn mel(bands: i64, dft: i64, rate: i64, low: f32, high: f32) -> Result<Tensor, OpError> {
    let (b, d, r) = (scalar(bands), scalar(dft), scalar(rate));
    let (l, h) = (f32s(&[], &[low]), f32s(&[], &[high]));
    Ok(run_op("MelWeightMatrix", 17, &attrs(&[]), &[Some(&b), Some(&d), Some(&r), Some(&l), Some(&h)])?.remove(0))
}

#[test]
fn mel_weight_matrix_maps_spectrogram_bins_to_bands() {
    // Band edges (4 for 2 bands) at spectrogram bins 0, 0, 1, 2 of 5.
    let m = mel(2, 8, 8000, 0.0, 4000.0).unwrap();
    assert_eq!(m.dims(), [5, 2]);
    assert_eq!(values(&m), [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(values(&mel(2, 8, 8000, 0.0, 8000.0).unwrap())[5], 2.0 / 3.0, "edges 0, 0, 1, 4");
    let err = mel(2, 8, 8000, 0.0, 20000.0).unwrap_err();
    assert!(matches!(&err, OpError::Eval(m) if m.contains("spectrogram bin 9")), "{err}");
    assert!(mel(-2, 8, 8000, 0.0, 4000.0).is_err());
    assert!(mel(2, 8, 0, 0.0, 4000.0).is_err());
}

fn dft(
    opset: u32,
    a: &[(&str, Attribute)],
    x: &Tensor,
    len: Option<i64>,
    axis: Option<i64>,
) -> Result<Vec<f32>, OpError> {
    let (l, ax) = (len.map(scalar), axis.map(scalar));
    Ok(values(&run_op("DFT", opset, &attrs(a), &[Some(x), l.as_ref(), ax.as_ref()])?[0]).to_vec())
}

#[test]
fn dft_transforms_forward_inverse_and_onesided() {
    let x = f32s(&[1, 4, 1], &[1.0, 2.0, 3.0, 4.0]);
    let full = [10.0, 0.0, -2.0, 2.0, -2.0, 0.0, -2.0, -2.0];
    assert_close(&dft(17, &[], &x, None, None).unwrap(), &full);
    assert_close(&dft(17, &[("onesided", Attribute::Int(1))], &x, None, None).unwrap(), &full[..6]);
    let spectrum = f32s(&[1, 4, 2], &full);
    let back = dft(17, &[("inverse", Attribute::Int(1))], &spectrum, None, None).unwrap();
    assert_close(&back, &[1.0, 0.0, 2.0, 0.0, 3.0, 0.0, 4.0, 0.0]);
    // Longer than the signal: zero-padded; shorter: truncated.
    let padded = dft(17, &[], &x, Some(8), None).unwrap();
    assert_eq!(padded.len(), 16);
    assert_close(&padded[..4], &[10.0, 0.0, 1.0 - 2f32.sqrt(), -3.0 - 3.0 * 2f32.sqrt()]);
    assert_close(&dft(17, &[], &x, Some(2), None).unwrap(), &[3.0, 0.0, -1.0, 0.0]);
    // Opset 20 reads the axis from its input, -2 by default.
    let m = f32s(&[2, 2, 1], &[1.0, 2.0, 3.0, 4.0]);
    assert_close(&dft(20, &[], &m, None, Some(0)).unwrap(), &[4.0, 0.0, 6.0, 0.0, -2.0, 0.0, -2.0, 0.0]);
    assert_close(&dft(20, &[], &m, None, None).unwrap(), &[3.0, 0.0, -1.0, 0.0, 7.0, 0.0, -1.0, 0.0]);
    assert_close(
        &dft(17, &[("axis", Attribute::Int(-3))], &m, None, None).unwrap(),
        &[4.0, 0.0, 6.0, 0.0, -2.0, 0.0, -2.0, 0.0],
    );
}

#[test]
fn dft_refuses_bad_axes_lengths_and_signals() {
    let x = f32s(&[1, 4, 1], &[1.0, 2.0, 3.0, 4.0]);
    assert!(
        matches!(dft(17, &[("axis", Attribute::Int(2))], &x, None, None), Err(OpError::Infer(m)) if m.contains("axis"))
    );
    assert!(dft(20, &[], &x, None, Some(-1)).is_err(), "the last axis holds the parts");
    assert!(dft(20, &[], &x, None, Some(3)).is_err());
    assert!(matches!(dft(17, &[], &x, Some(0), None), Err(OpError::Infer(m)) if m.contains("dft_length")));
    assert!(dft(17, &[], &x, Some(-4), None).is_err());
    assert!(dft(17, &[], &x, Some(1 << 40), None).is_err(), "absurd lengths are refused");
    assert!(dft(17, &[], &f32s(&[1, 2, 3], &[0.0; 6]), None, None).is_err(), "three parts");
    assert!(dft(17, &[], &Tensor::from_i64s(vec![1, 2]).reshaped(vec![1, 2, 1]).unwrap(), None, None).is_err());
    // A dft_length known only at run time: that extent is unknown at import.
    let op = (lookup("DFT", 17).unwrap().build)(&mut crate::ops::NodeCtx::for_test(&attrs(&[]), 17, 2)).unwrap();
    let (xt, lt) = (ValueType::fixed(DType::F32, &[1, 4, 1]), ValueType::fixed(DType::I64, &[]));
    let ins = [
        Some(InferInput { ty: &xt, value: None, dims_value: None }),
        Some(InferInput { ty: &lt, value: None, dims_value: None }),
    ];
    assert_eq!(op.infer(&InferInputs::new(&ins)).unwrap()[0].dims[1], unknown_dim());
    // An axis known only at run time (opset 20): every extent but the parts is unknown.
    let op = (lookup("DFT", 20).unwrap().build)(&mut crate::ops::NodeCtx::for_test(&attrs(&[]), 20, 3)).unwrap();
    let ins = [ins[0], None, Some(InferInput { ty: &lt, value: None, dims_value: None })];
    let dims = op.infer(&InferInputs::new(&ins)).unwrap().remove(0).dims;
    assert_eq!(dims, vec![unknown_dim(), unknown_dim(), saggar_shape::Dim::Fixed(2)]);
}

fn stft(
    a: &[(&str, Attribute)],
    x: &Tensor,
    step: i64,
    window: Option<&Tensor>,
    len: Option<i64>,
) -> Result<Tensor, OpError> {
    let (s, l) = (scalar(step), len.map(scalar));
    Ok(run_op("STFT", 17, &attrs(a), &[Some(x), Some(&s), window, l.as_ref()])?.remove(0))
}

#[test]
fn stft_transforms_each_windowed_frame() {
    let x = f32s(&[1, 6, 1], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let y = stft(&[], &x, 2, None, Some(4)).unwrap();
    assert_eq!(y.dims(), [1, 2, 3, 2]);
    assert_close(values(&y), &[10.0, 0.0, -2.0, 2.0, -2.0, 0.0, 18.0, 0.0, -2.0, 2.0, -2.0, 0.0]);
    let w = f32s(&[4], &[0.0, 1.0, 1.0, 0.0]);
    let y = stft(&[], &x, 2, Some(&w), None).unwrap();
    assert_close(&values(&y)[..6], &[5.0, 0.0, -3.0, -2.0, 1.0, 0.0]);
    let both = stft(&[("onesided", Attribute::Int(0))], &x, 2, Some(&w), Some(4)).unwrap();
    assert_eq!(both.dims(), [1, 2, 4, 2]);
    assert_close(&values(&both)[6..8], &[-3.0, 2.0]);
}

#[test]
fn stft_refuses_bad_frames() {
    let x = f32s(&[1, 6, 1], &[0.0; 6]);
    assert!(matches!(stft(&[], &x, 2, None, Some(8)), Err(OpError::Infer(m)) if m.contains("longer than the signal")));
    let w = f32s(&[3], &[1.0; 3]);
    assert!(matches!(stft(&[], &x, 2, Some(&w), Some(4)), Err(OpError::Infer(m)) if m.contains("differs")));
    assert!(stft(&[], &x, 0, None, Some(4)).is_err(), "frame_step 0");
    assert!(stft(&[], &f32s(&[6, 1], &[0.0; 6]), 1, None, Some(4)).is_err(), "rank 2");
}

#[test]
fn kernels_render_and_launch_per_output_bin() {
    assert_kernels_render(&[
        Box::new(DftKernel),
        Box::new(StftKernel { window: false }),
        Box::new(StftKernel { window: true }),
    ]);
    let a = attrs(&[("onesided", Attribute::Int(1)), ("inverse", Attribute::Int(1))]);
    let op = (lookup("DFT", 20).unwrap().build)(&mut crate::ops::NodeCtx::for_test(&a, 20, 3)).unwrap();
    let f = |d: &[usize]| Operand { dtype: DType::F32, dims: d.to_vec() };
    let (lt, at) = (ValueType::fixed(DType::I64, &[]), ValueType::fixed(DType::I64, &[]));
    let (l, ax) = (scalar(10), scalar(1));
    let xt = ValueType::fixed(DType::F32, &[3, 7, 5, 2]);
    let infer_in = [
        Some(InferInput { ty: &xt, value: None, dims_value: None }),
        Some(InferInput { ty: &lt, value: Some(&l), dims_value: None }),
        Some(InferInput { ty: &at, value: Some(&ax), dims_value: None }),
    ];
    let infer = InferInputs::new(&infer_in);
    let inputs = [Some(f(&[3, 7, 5, 2])), Some(Operand { dtype: DType::I64, dims: vec![] }), None];
    let outputs = [f(&[3, 6, 5, 2])];
    let ctx = GpuCtx { inputs: &inputs, outputs: &outputs, infer: &infer };
    let Some(Ok(GpuNode::Launches(l))) = op.gpu(&ctx) else { panic!("DFT has a GPU form") };
    assert_eq!(l[0].meta, vec![90, 7, 5, 2, 10, 6, 1]);
    assert!(l[0].kernel.source().contains("sin("));
    let _: &dyn GpuKernel = &DftKernel;
}
