//! Unique: the spec's examples, both orders, an axis (negative too), signed zeros and NaN, fewer
//! outputs, the bounded form's extents and the typed errors.

use saggar_shape::{DType, Dim};

use super::{attrs, build, fixed, infer_types, ints, run, tensor};
use crate::ops::testing::{f32s, run_op_outputs};
use crate::ops::{OpError, ValueType, unknown_dim};
use crate::tensor::{Tensor, TensorData};

fn unique(a: &[(&str, i64)], x: &Tensor) -> Vec<Tensor> {
    run("Unique", 11, &attrs(a), &[Some(x)], 4)
}

fn all_i64(out: &[Tensor]) -> [Vec<i64>; 3] {
    [ints(&out[1]).to_vec(), ints(&out[2]).to_vec(), ints(&out[3]).to_vec()]
}

#[test]
fn unique_in_first_occurrence_order() {
    let x = f32s(&[6], &[2.0, 1.0, 1.0, 3.0, 4.0, 3.0]);
    let out = unique(&[("sorted", 0)], &x);
    assert_eq!(out[0].to_f32s().unwrap(), vec![2.0, 1.0, 3.0, 4.0]);
    assert_eq!(all_i64(&out), [vec![0, 1, 3, 4], vec![0, 1, 1, 2, 3, 2], vec![1, 2, 2, 1]]);
}

#[test]
fn unique_sorted_over_the_flattened_input() {
    let x = f32s(&[2, 2], &[1.0, 3.0, 2.0, 3.0]);
    let out = unique(&[], &x);
    assert_eq!((out[0].dims(), out[0].to_f32s().unwrap()), (&[3][..], vec![1.0, 2.0, 3.0]));
    assert_eq!(all_i64(&out), [vec![0, 2, 1], vec![0, 2, 1, 2], vec![1, 1, 2]]);
    let x = tensor(&[5], TensorData::I8(vec![-1, 5, -128, 5, 0]));
    let out = unique(&[], &x);
    assert_eq!(out[0], tensor(&[4], TensorData::I8(vec![-128, -1, 0, 5])));
    assert_eq!(all_i64(&out), [vec![2, 0, 4, 1], vec![1, 3, 0, 3, 2], vec![1, 1, 1, 2]]);
}

#[test]
fn unique_slices_along_an_axis() {
    let x = f32s(&[3, 3], &[1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 2.0, 3.0, 4.0]);
    let out = unique(&[("axis", 0)], &x);
    assert_eq!((out[0].dims(), out[0].to_f32s().unwrap()), (&[2, 3][..], vec![1.0, 0.0, 0.0, 2.0, 3.0, 4.0]));
    assert_eq!(all_i64(&out), [vec![0, 2], vec![0, 0, 1], vec![2, 1]]);
    // [2, 4, 2] along axis 1: slices [1, 1], [0, 1], [2, 1], [0, 1] in both halves.
    let v = [1.0, 1.0, 0.0, 1.0, 2.0, 1.0, 0.0, 1.0];
    let x = f32s(&[2, 4, 2], &[v, v].concat());
    for axis in [1, -2] {
        let out = unique(&[("axis", axis)], &x);
        let y = [0.0, 1.0, 1.0, 1.0, 2.0, 1.0];
        assert_eq!((out[0].dims(), out[0].to_f32s().unwrap()), (&[2, 3, 2][..], [y, y].concat()));
        assert_eq!(all_i64(&out), [vec![1, 0, 2], vec![1, 0, 2, 0], vec![2, 1, 1]]);
        let out = unique(&[("axis", axis), ("sorted", 0)], &x);
        let y = [1.0, 1.0, 0.0, 1.0, 2.0, 1.0];
        assert_eq!(out[0].to_f32s().unwrap(), [y, y].concat());
        assert_eq!(all_i64(&out), [vec![0, 1, 2], vec![0, 1, 2, 1], vec![1, 2, 1]]);
    }
}

#[test]
fn unique_takes_signed_zeros_as_one_and_nans_as_one_last() {
    let x = f32s(&[5], &[0.0, -0.0, f32::NAN, 1.0, f32::NAN]);
    let out = unique(&[], &x);
    let y = out[0].to_f32s().unwrap();
    assert_eq!((y[0].to_bits(), y[1]), (0, 1.0));
    assert!(y[2].is_nan() && y.len() == 3);
    assert_eq!(all_i64(&out), [vec![0, 3, 2], vec![0, 0, 2, 1, 2], vec![2, 1, 2]]);
    let out = unique(&[], &f32s(&[2], &[-0.0, 0.0]));
    assert_eq!(out[0].to_f32s().unwrap()[0].to_bits(), (-0.0f32).to_bits(), "the first occurrence's bits");
}

#[test]
fn unique_with_fewer_outputs_and_empty_inputs() {
    let x = tensor(&[4], TensorData::U16(vec![9, 9, 1, 9]));
    let out = run("Unique", 11, &attrs(&[("sorted", 0)]), &[Some(&x)], 1);
    assert_eq!(out, vec![tensor(&[2], TensorData::U16(vec![9, 1]))]);
    let out = run("Unique", 11, &attrs(&[]), &[Some(&x)], 2);
    assert_eq!(ints(&out[1]), &[2, 0]);
    let empty = f32s(&[0, 3], &[]);
    let out = unique(&[], &empty);
    assert_eq!(out.iter().map(|t| t.dims().to_vec()).collect::<Vec<_>>(), vec![vec![0]; 4]);
    let out = unique(&[("axis", 1)], &empty);
    assert_eq!(out[0].dims(), &[0, 1], "three empty slices are one");
}

#[test]
fn unique_bounded_extents_and_cuts() {
    let op = build("Unique", 11, &attrs(&[("axis", -1)]), 1, 3);
    assert_eq!(infer_types(&*op, &[fixed(DType::I32, &[2, 5])]).unwrap()[0].dims, vec![Dim::Fixed(2), unknown_dim()]);
    let bounded = op.bounded().unwrap();
    assert_eq!((bounded.cuts.clone(), bounded.cuts_from_end), (vec![Some(1), Some(1), None], true));
    assert_eq!([0, 1, 2].map(|i| bounded.cut_axis(i, if i == 0 { 2 } else { 1 })), [Some(1), Some(0), None]);
    let types = infer_types(&*bounded.op, &[fixed(DType::I32, &[2, 5])]).unwrap();
    let i64s = |n: usize| ValueType::fixed(DType::I64, &[n]);
    assert_eq!(types, vec![ValueType::fixed(DType::I32, &[2, 5]), i64s(5), i64s(5), i64s(1), i64s(5)]);
    let flat = build("Unique", 11, &attrs(&[]), 1, 1).bounded().unwrap();
    let types = infer_types(&*flat.op, &[fixed(DType::F32, &[2, 5])]).unwrap();
    assert_eq!(types, vec![ValueType::fixed(DType::F32, &[10]), i64s(1), i64s(10), i64s(10), i64s(10)]);
    assert_eq!((flat.cuts, flat.cuts_from_end), (vec![Some(0)], false));
    // 3 x 2^26 f32 elements fit the limit; as many int64 indices do not.
    let err = infer_types(&*flat.op, &[fixed(DType::F32, &[3 << 26])]).unwrap_err();
    assert!(matches!(&err, OpError::Infer(m) if m.contains("int64[201326592]") || m.contains("limit")), "{err}");
}

#[test]
fn unique_refuses_malformed_attributes() {
    let x = f32s(&[2, 2], &[0.0; 4]);
    let err = run_op_outputs("Unique", 11, &attrs(&[("sorted", 2)]), &[Some(&x)], 4).unwrap_err();
    assert!(matches!(&err, OpError::Attribute { name, .. } if name == "sorted"), "{err}");
    let err = run_op_outputs("Unique", 11, &attrs(&[("axis", -3)]), &[Some(&x)], 4).unwrap_err();
    assert!(matches!(&err, OpError::Infer(m) if m.contains("axis -3")), "{err}");
}
