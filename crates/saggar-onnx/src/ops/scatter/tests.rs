//! Tests of the scatter family: hand-computed results of every reduction, negative and duplicate
//! indices, each opset's reductions, the errors, and the rendered kernels.

use saggar_shape::DType;

use super::Reduction;
use super::gpu::{ScatterForm, ScatterKernel};
use crate::error::OpError;
use crate::ops::gpu::{GpuKernel, kernel_definition};
use crate::ops::testing::{f32s, run_op, values};
use crate::ops::{Attribute, Attributes};
use crate::tensor::{Tensor, TensorData};

fn attrs(pairs: &[(&str, Attribute)]) -> Attributes {
    Attributes(pairs.iter().map(|(n, a)| (n.to_string(), a.clone())).collect())
}

fn reduce(r: &str) -> Attributes {
    attrs(&[("reduction", Attribute::String(r.as_bytes().to_vec()))])
}

fn i64s(dims: &[usize], v: &[i64]) -> Tensor {
    Tensor::new(dims.to_vec(), TensorData::I64(v.to_vec())).unwrap()
}

#[test]
fn scatter_elements_along_an_axis_with_negative_indices() {
    let data = f32s(&[1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
    let upd = f32s(&[1, 2], &[1.1, 2.1]);
    let axis1 = attrs(&[("axis", Attribute::Int(1))]);
    let idx = i64s(&[1, 2], &[1, 3]);
    let out = run_op("ScatterElements", 13, &axis1, &[Some(&data), Some(&idx), Some(&upd)]).unwrap();
    assert_eq!(values(&out[0]), [1.0, 1.1, 3.0, 2.1, 5.0]);
    let idx = Tensor::new(vec![1, 2], TensorData::I32(vec![1, -3])).unwrap();
    let out = run_op("ScatterElements", 13, &axis1, &[Some(&data), Some(&idx), Some(&upd)]).unwrap();
    assert_eq!(values(&out[0]), [1.0, 1.1, 2.1, 4.0, 5.0]);
}

#[test]
fn scatter_opset_9_is_scatter_elements_on_axis_0() {
    let data = f32s(&[3, 3], &[0.0; 9]);
    let idx = i64s(&[2, 3], &[1, 0, 2, 0, 2, 1]);
    let upd = f32s(&[2, 3], &[1.0, 1.1, 1.2, 2.0, 2.1, 2.2]);
    let out = run_op("Scatter", 9, &Attributes::default(), &[Some(&data), Some(&idx), Some(&upd)]).unwrap();
    assert_eq!(values(&out[0]), [2.0, 1.1, 0.0, 1.0, 0.0, 2.2, 0.0, 2.1, 1.2]);
    assert!(run_op("Scatter", 11, &Attributes::default(), &[Some(&data), Some(&idx), Some(&upd)]).is_err());
}

#[test]
fn scatter_elements_reductions_combine_duplicates_in_order() {
    let data = f32s(&[1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
    let idx = i64s(&[1, 3], &[1, 1, 3]);
    let upd = f32s(&[1, 3], &[1.5, 2.5, -7.0]);
    for (r, opset, want) in [
        ("none", 18, [1.0, 2.5, 3.0, -7.0, 5.0]),
        ("add", 16, [1.0, 6.0, 3.0, -3.0, 5.0]),
        ("mul", 16, [1.0, 7.5, 3.0, -28.0, 5.0]),
        ("max", 18, [1.0, 2.5, 3.0, 4.0, 5.0]),
        ("min", 18, [1.0, 1.5, 3.0, -7.0, 5.0]),
    ] {
        let mut a = reduce(r);
        a.set("axis", Attribute::Int(-1));
        let out = run_op("ScatterElements", opset, &a, &[Some(&data), Some(&idx), Some(&upd)]).unwrap();
        assert_eq!(values(&out[0]), want, "{r}");
    }
    // Integers wrap; NaN wins max and min, as numpy's maximum and minimum.
    let d = Tensor::new(vec![2], TensorData::I32(vec![i32::MAX, 0])).unwrap();
    let (i, u) = (i64s(&[1], &[0]), Tensor::new(vec![1], TensorData::I32(vec![1])).unwrap());
    let out = run_op("ScatterElements", 16, &reduce("add"), &[Some(&d), Some(&i), Some(&u)]).unwrap();
    assert_eq!(out[0].data(), &TensorData::I32(vec![i32::MIN, 0]));
    let nan = f32s(&[1], &[f32::NAN]);
    let out = run_op("ScatterElements", 18, &reduce("max"), &[Some(&f32s(&[2], &[1.0, 2.0])), Some(&i), Some(&nan)]);
    assert!(values(&out.unwrap()[0])[0].is_nan());
}

#[test]
fn each_opset_takes_its_reductions_only() {
    let data = f32s(&[2], &[1.0, 2.0]);
    let (idx, upd) = (i64s(&[1], &[0]), f32s(&[1], &[5.0]));
    let nd_idx = i64s(&[1, 1], &[0]);
    for (op, i) in [("ScatterElements", &idx), ("ScatterND", &nd_idx)] {
        let ins = [Some(&data), Some(i), Some(&upd)];
        // No reduction attribute before 16: it is unread, so refused.
        assert!(matches!(run_op(op, 13, &reduce("add"), &ins), Err(OpError::Unsupported { .. })), "{op}");
        assert!(run_op(op, 13, &reduce("none"), &ins).is_err(), "{op}");
        assert!(matches!(run_op(op, 16, &reduce("max"), &ins), Err(OpError::Unsupported { .. })), "{op}");
        assert!(matches!(run_op(op, 18, &reduce("sub"), &ins), Err(OpError::Unsupported { .. })), "{op}");
        assert!(run_op(op, 16, &reduce("mul"), &ins).is_ok(), "{op}");
        assert!(run_op(op, 18, &reduce("min"), &ins).is_ok(), "{op}");
    }
}

#[test]
fn scatter_nd_rows_slices_and_reductions() {
    let data = f32s(&[8], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let idx = i64s(&[4, 1], &[4, 3, 1, 7]);
    let upd = f32s(&[4], &[9.0, 10.0, 11.0, 12.0]);
    let out = run_op("ScatterND", 11, &Attributes::default(), &[Some(&data), Some(&idx), Some(&upd)]).unwrap();
    assert_eq!(values(&out[0]), [1.0, 11.0, 3.0, 10.0, 9.0, 6.0, 7.0, 12.0]);
    // Rows of a 2x2x2 tensor: index rows of depth 1 pick [2, 2] slices, of depth 2 rows of 2.
    let cube = f32s(&[2, 2, 2], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
    let (i1, u1) = (i64s(&[1, 1], &[-1]), f32s(&[1, 2, 2], &[9.0; 4]));
    let out = run_op("ScatterND", 13, &Attributes::default(), &[Some(&cube), Some(&i1), Some(&u1)]).unwrap();
    assert_eq!(values(&out[0]), [0.0, 1.0, 2.0, 3.0, 9.0, 9.0, 9.0, 9.0]);
    let (i2, u2) = (i64s(&[2, 2], &[0, 1, 1, 0]), f32s(&[2, 2], &[-1.0, -2.0, -3.0, -4.0]));
    let out = run_op("ScatterND", 13, &Attributes::default(), &[Some(&cube), Some(&i2), Some(&u2)]).unwrap();
    assert_eq!(values(&out[0]), [0.0, 1.0, -1.0, -2.0, -3.0, -4.0, 6.0, 7.0]);
    // Duplicate rows combine in order.
    let row = f32s(&[4], &[1.0, 2.0, 3.0, 4.0]);
    let (dup, du) = (i64s(&[3, 1], &[0, 0, -1]), f32s(&[3], &[1.0, 2.0, 3.0]));
    for (r, opset, want) in [
        ("none", 16, [2.0, 2.0, 3.0, 3.0]),
        ("add", 16, [4.0, 2.0, 3.0, 7.0]),
        ("mul", 16, [2.0, 2.0, 3.0, 12.0]),
        ("max", 18, [2.0, 2.0, 3.0, 4.0]),
        ("min", 18, [1.0, 2.0, 3.0, 3.0]),
    ] {
        let out = run_op("ScatterND", opset, &reduce(r), &[Some(&row), Some(&dup), Some(&du)]).unwrap();
        assert_eq!(values(&out[0]), want, "{r}");
    }
}

#[test]
fn indices_out_of_range_and_misshapen_inputs_are_errors() {
    let data = f32s(&[2, 2], &[0.0; 4]);
    let upd = f32s(&[1, 1], &[1.0]);
    for bad in [2, -3, i64::MIN, i64::MAX] {
        let idx = i64s(&[1, 1], &[bad]);
        let err = run_op("ScatterElements", 13, &Attributes::default(), &[Some(&data), Some(&idx), Some(&upd)]);
        assert!(matches!(&err, Err(OpError::Eval(m)) if m.contains(&bad.to_string())), "{bad}: {err:?}");
        let nd = run_op(
            "ScatterND",
            13,
            &Attributes::default(),
            &[Some(&data), Some(&idx), Some(&f32s(&[1, 2], &[1.0, 1.0]))],
        );
        assert!(matches!(&nd, Err(OpError::Eval(m)) if m.contains(&bad.to_string())), "{bad}: {nd:?}");
    }
    let none = Attributes::default();
    // ScatterND: updates of the wrong shape, depth above the rank, int32 indices.
    let idx = i64s(&[1, 1], &[0]);
    assert!(matches!(run_op("ScatterND", 13, &none, &[Some(&data), Some(&idx), Some(&upd)]), Err(OpError::Infer(_))));
    let deep = i64s(&[1, 3], &[0, 0, 0]);
    assert!(run_op("ScatterND", 13, &none, &[Some(&data), Some(&deep), Some(&f32s(&[1], &[1.0]))]).is_err());
    let i32_idx = Tensor::new(vec![1, 1], TensorData::I32(vec![0])).unwrap();
    assert!(run_op("ScatterND", 13, &none, &[Some(&data), Some(&i32_idx), Some(&f32s(&[1, 2], &[1.0, 1.0]))]).is_err());
    // ScatterElements: indices wider than the data off the axis, updates of another shape or type.
    let wide = i64s(&[1, 3], &[0, 0, 0]);
    assert!(
        run_op("ScatterElements", 13, &none, &[Some(&data), Some(&wide), Some(&f32s(&[1, 3], &[0.0; 3]))]).is_err()
    );
    assert!(run_op("ScatterElements", 13, &none, &[Some(&data), Some(&idx), Some(&f32s(&[1, 2], &[0.0; 2]))]).is_err());
    let ints = Tensor::new(vec![1, 1], TensorData::I64(vec![1])).unwrap();
    assert!(run_op("ScatterElements", 13, &none, &[Some(&data), Some(&idx), Some(&ints)]).is_err());
    // Bools scatter, but do not reduce.
    let flags = Tensor::new(vec![2], TensorData::Bool(vec![0, 0])).unwrap();
    let one = Tensor::new(vec![1], TensorData::Bool(vec![1])).unwrap();
    let i = i64s(&[1], &[1]);
    let out = run_op("ScatterElements", 18, &none, &[Some(&flags), Some(&i), Some(&one)]).unwrap();
    assert_eq!(out[0].data(), &TensorData::Bool(vec![0, 1]));
    assert!(run_op("ScatterElements", 18, &reduce("max"), &[Some(&flags), Some(&i), Some(&one)]).is_err());
}

#[test]
fn every_scatter_kernel_renders_completely_with_a_name_of_its_own() {
    let mut names = std::collections::HashMap::new();
    for form in [ScatterForm::Elements, ScatterForm::Nd] {
        for reduction in [Reduction::None, Reduction::Add, Reduction::Mul, Reduction::Max, Reduction::Min] {
            for (dtype, index) in
                [(DType::F32, DType::I64), (DType::F32, DType::I32), (DType::I32, DType::I32), (DType::I64, DType::I64)]
            {
                let kind = ScatterKernel { form, reduction, dtype, index };
                let (name, _) = kernel_definition(&kind);
                let body = kind.source();
                assert!(!body.contains('@') && body.starts_with("(const onnx_i64* meta"), "{kind:?}: {body}");
                if let Some(other) = names.insert(name.clone(), body.clone()) {
                    assert_eq!(other, body, "{name} names two texts");
                }
            }
        }
    }
    // `none` moves bits: f32 and i32 data with i32 indices share a text; every reduction has its own.
    assert_eq!(names.len(), 2 * (3 + 4 * 4));
}
