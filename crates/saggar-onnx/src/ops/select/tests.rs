//! TopK's tests: hand-computed selections, ties and NaN, every attribute, the typed errors.

use saggar_shape::DType;

use crate::ops::gpu::{GpuCtx, GpuKernel, Operand};
use crate::ops::testing::{f32s, run_op_outputs, values};
use crate::ops::{Attribute, Attributes, InferInput, InferInputs, NodeCtx, OpError, ValueType, lookup, unknown_dim};
use crate::tensor::{Tensor, TensorData};

fn attrs(pairs: &[(&str, i64)]) -> Attributes {
    Attributes(pairs.iter().map(|(k, v)| (k.to_string(), Attribute::Int(*v))).collect())
}

fn top_k(opset: u32, a: &[(&str, i64)], x: &Tensor, k: Option<i64>) -> Result<Vec<Tensor>, OpError> {
    let k = k.map(|k| Tensor::from_i64s(vec![k]));
    let inputs: Vec<Option<&Tensor>> = if opset < 10 { vec![Some(x)] } else { vec![Some(x), k.as_ref()] };
    run_op_outputs("TopK", opset, &attrs(a), &inputs, 2)
}

fn idx(t: &Tensor) -> &[i64] {
    match t.data() {
        TensorData::I64(v) => v,
        other => panic!("{other:?}"),
    }
}

#[test]
fn largest_first_ties_by_lower_index_and_nan_largest() {
    let nan = f32::NAN;
    let x = f32s(&[2, 4], &[1.0, 3.0, 3.0, 2.0, nan, -1.0, nan, 5.0]);
    let out = top_k(11, &[], &x, Some(3)).unwrap();
    assert_eq!(out[0].dims(), &[2, 3]);
    assert_eq!(idx(&out[1]), &[1, 2, 3, 0, 2, 3]);
    let v = values(&out[0]);
    assert_eq!(&v[..3], &[3.0, 3.0, 2.0]);
    assert!(v[3].is_nan() && v[4].is_nan() && v[5] == 5.0);
    // Smallest: NaN last; sorted=0 still sorts.
    let out = top_k(11, &[("largest", 0), ("sorted", 0)], &x, Some(3)).unwrap();
    assert_eq!(idx(&out[1]), &[0, 3, 1, 1, 3, 0]);
    let v = values(&out[0]);
    assert_eq!(&v[..5], &[1.0, 2.0, 3.0, -1.0, 5.0]);
    assert!(v[5].is_nan());
}

#[test]
fn along_a_middle_axis_and_negative_axes() {
    // [2, 3, 2]: top 2 along axis 1 (length 3).
    let x = f32s(&[2, 3, 2], &[0.0, 5.0, 2.0, 1.0, 1.0, 9.0, 4.0, 4.0, 3.0, 8.0, 4.0, 0.0]);
    for axis in [1, -2] {
        let out = top_k(11, &[("axis", axis)], &x, Some(2)).unwrap();
        assert_eq!(out[0].dims(), &[2, 2, 2]);
        assert_eq!(values(&out[0]), &[2.0, 9.0, 1.0, 5.0, 4.0, 8.0, 4.0, 4.0]);
        assert_eq!(idx(&out[1]), &[1, 2, 2, 0, 0, 1, 2, 0]);
    }
    let out = top_k(11, &[("axis", 0), ("largest", 0)], &x, Some(1)).unwrap();
    assert_eq!(values(&out[0]), &[0.0, 4.0, 2.0, 1.0, 1.0, 0.0]);
    assert_eq!(idx(&out[1]), &[0, 1, 0, 0, 0, 1]);
}

#[test]
fn k_as_an_attribute_before_10_and_integers() {
    let x = f32s(&[4], &[1.0, 4.0, 2.0, 3.0]);
    let out = top_k(1, &[("k", 2)], &x, None).unwrap();
    assert_eq!((values(&out[0]), idx(&out[1])), (&[4.0, 3.0][..], &[1, 3][..]));
    let out = top_k(10, &[], &x, Some(4)).unwrap();
    assert_eq!(idx(&out[1]), &[1, 3, 2, 0]);
    let out = top_k(11, &[], &x, Some(0)).unwrap();
    assert_eq!(out[0].dims(), &[0]);
    let xi = Tensor::from_i64s(vec![7, -2, 7, 9]);
    let out = top_k(24, &[("largest", 0)], &xi, Some(3)).unwrap();
    assert_eq!((out[0].data(), idx(&out[1])), (&TensorData::I64(vec![-2, 7, 7]), &[1, 0, 2][..]));
    let x32 = Tensor::new(vec![3], TensorData::I32(vec![1, 3, 2])).unwrap();
    let out = top_k(24, &[], &x32, Some(2)).unwrap();
    assert_eq!((out[0].data(), idx(&out[1])), (&TensorData::I32(vec![3, 2]), &[1, 2][..]));
}

#[test]
fn bad_k_axis_and_flags_are_typed_errors() {
    let x = f32s(&[4], &[1.0, 4.0, 2.0, 3.0]);
    for k in [5, -1] {
        let e = top_k(11, &[], &x, Some(k)).unwrap_err();
        assert!(matches!(&e, OpError::Infer(m) if m.contains(&k.to_string())), "{e}");
    }
    assert!(matches!(top_k(1, &[("k", 5)], &x, None), Err(OpError::Infer(_))));
    assert!(matches!(top_k(1, &[], &x, None), Err(OpError::Attribute { .. })), "k is required before 10");
    assert!(matches!(top_k(11, &[("axis", 1)], &x, Some(1)), Err(OpError::Infer(_))));
    assert!(matches!(top_k(11, &[("largest", 2)], &x, Some(1)), Err(OpError::Attribute { .. })));
    let two = Tensor::from_i64s(vec![1, 2]);
    assert!(run_op_outputs("TopK", 11, &Attributes::default(), &[Some(&x), Some(&two)], 2).is_err());
    let bools = Tensor::new(vec![1], TensorData::Bool(vec![1])).unwrap();
    assert!(top_k(11, &[], &bools, Some(1)).is_err());
}

/// A K fed at run time: the extent is unknown at import and the GPU form refuses it by name.
#[test]
fn a_k_fed_at_run_time_is_refused_on_gpu_with_a_typed_error() {
    let op = (lookup("TopK", 11).unwrap().build)(&mut NodeCtx::new(&Attributes::default(), 11, 2, 2)).unwrap();
    let (xt, kt) = (ValueType::fixed(DType::F32, &[2, 5]), ValueType::fixed(DType::I64, &[1]));
    let ins = [
        Some(InferInput { ty: &xt, value: None, dims_value: None }),
        Some(InferInput { ty: &kt, value: None, dims_value: None }),
    ];
    let infer = InferInputs::new(&ins);
    let out = op.infer(&infer).unwrap();
    assert_eq!(out[0].dims[1], unknown_dim());
    assert_eq!(out[1].dtype, DType::I64);
    let operand = |dtype, dims: &[usize]| Operand { dtype, dims: dims.to_vec() };
    let inputs = [Some(operand(DType::F32, &[2, 5])), Some(operand(DType::I64, &[1]))];
    let outputs = [operand(DType::F32, &[2, 3]), operand(DType::I64, &[2, 3])];
    let ctx = GpuCtx { inputs: &inputs, outputs: &outputs, infer: &infer };
    let e = op.gpu(&ctx).unwrap().unwrap_err();
    assert!(e.to_string().contains("constant k"), "{e}");
    // With K constant the node is one launch.
    let k = Tensor::from_i64s(vec![3]);
    let ins = [
        Some(InferInput { ty: &xt, value: None, dims_value: None }),
        Some(InferInput { ty: &kt, value: Some(&k), dims_value: None }),
    ];
    let infer = InferInputs::new(&ins);
    assert_eq!(op.infer(&infer).unwrap()[0].dims[1], saggar_shape::Dim::Fixed(3));
    let ctx = GpuCtx { inputs: &inputs, outputs: &outputs, infer: &infer };
    assert!(op.gpu(&ctx).unwrap().is_ok());
}

#[test]
fn kernels_render() {
    use super::gpu::TopKKernel;
    let mut kinds: Vec<Box<dyn GpuKernel>> = Vec::new();
    for dtype in [DType::F32, DType::I64, DType::I32] {
        for largest in [false, true] {
            kinds.push(Box::new(TopKKernel { dtype, largest }));
        }
    }
    crate::ops::testing::assert_kernels_render(&kinds);
}
