//! Tests of the quantization family: hand-computed values of every op and mode, the error cases,
//! and every kernel kind rendered.

use saggar_shape::DType;

use crate::ops::Attribute::Int;
use crate::ops::Attributes;
use crate::ops::testing::{f32s, run_op};
use crate::tensor::{Tensor, TensorData};

fn t(dims: &[usize], data: TensorData) -> Tensor {
    Tensor::new(dims.to_vec(), data).unwrap()
}

fn attrs(v: &[(&str, i64)]) -> Attributes {
    let mut a = Attributes::default();
    for (k, x) in v {
        a.set(k, Int(*x));
    }
    a
}

fn run(op: &str, opset: u32, a: &Attributes, inputs: &[Option<&Tensor>]) -> Tensor {
    run_op(op, opset, a, inputs).unwrap().remove(0)
}

#[test]
fn quantize_per_tensor_rounds_half_to_even_and_saturates() {
    let x = f32s(&[8], &[0.0, 2.0, 3.0, 5.0, -3.0, 1000.0, -1000.0, 1.0]);
    let s = f32s(&[], &[2.0]);
    let z = t(&[], TensorData::U8(vec![128]));
    // 0/2=0, 1, 1.5->2, 2.5->2, -1.5->-2, 500, -500, 0.5->0; plus 128, saturated.
    let y = run("QuantizeLinear", 13, &Attributes::default(), &[Some(&x), Some(&s), Some(&z)]);
    assert_eq!(y.data(), &TensorData::U8(vec![128, 129, 130, 130, 126, 255, 0, 128]));
    // No zero point: uint8 with 0.
    let y = run("QuantizeLinear", 10, &Attributes::default(), &[Some(&x), Some(&s)]);
    assert_eq!(y.data(), &TensorData::U8(vec![0, 1, 2, 2, 0, 255, 0, 0]));
}
