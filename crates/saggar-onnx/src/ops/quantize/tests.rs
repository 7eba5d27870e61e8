//! Tests of the quantization family: hand-computed values of every op and mode, the error cases,
//! and every kernel kind rendered.

use saggar_shape::DType;

use crate::ops::Attribute::{Int, Ints};
use crate::ops::Attributes;
use crate::ops::testing::{assert_kernels_render, f32s, run_op, run_op_outputs};
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

fn run(op: &str, opset: u32, a: &[(&str, i64)], inputs: &[&Tensor]) -> Tensor {
    let inputs: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    run_op(op, opset, &attrs(a), &inputs).unwrap().remove(0)
}

fn fails(op: &str, opset: u32, a: &[(&str, i64)], inputs: &[&Tensor]) -> String {
    let inputs: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    run_op(op, opset, &attrs(a), &inputs).unwrap_err().to_string()
}

#[test]
fn quantize_per_tensor_rounds_half_to_even_and_saturates() {
    let x = f32s(&[8], &[0.0, 2.0, 3.0, 5.0, -3.0, 1000.0, -1000.0, 1.0]);
    let s = f32s(&[], &[2.0]);
    let z = t(&[], TensorData::U8(vec![128]));
    // 0, 1, 1.5 -> 2, 2.5 -> 2, -1.5 -> -2, 500, -500, 0.5 -> 0; plus 128, saturated.
    let y = run("QuantizeLinear", 13, &[], &[&x, &s, &z]);
    assert_eq!(y.data(), &TensorData::U8(vec![128, 129, 130, 130, 126, 255, 0, 128]));
    // No zero point: uint8 with 0.
    let y = run("QuantizeLinear", 10, &[], &[&x, &s]);
    assert_eq!(y.data(), &TensorData::U8(vec![0, 1, 2, 2, 0, 255, 0, 0]));
    // int32 input: the quotient in f64; 3.5 -> 4, -3.5 -> -4.
    let xi = t(&[2], TensorData::I32(vec![7, -7]));
    let y = run("QuantizeLinear", 13, &[], &[&xi, &s, &t(&[], TensorData::I8(vec![0]))]);
    assert_eq!(y.data(), &TensorData::I8(vec![4, -4]));
}

#[test]
fn quantize_by_zero_saturates_and_nan_gives_the_lowest_value() {
    let x = f32s(&[3], &[1.0, -1.0, 0.0]);
    let zero = f32s(&[], &[0.0]);
    assert_eq!(run("QuantizeLinear", 13, &[], &[&x, &zero]).data(), &TensorData::U8(vec![255, 0, 0]));
    let z = t(&[], TensorData::I8(vec![0]));
    assert_eq!(run("QuantizeLinear", 13, &[], &[&x, &zero, &z]).data(), &TensorData::I8(vec![127, -128, -128]));
}

#[test]
fn quantize_per_axis_blocked_and_16_bit() {
    let x = f32s(&[1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let (s, z) = (f32s(&[2], &[1.0, 2.0]), t(&[2], TensorData::I8(vec![0, -10])));
    assert_eq!(run("QuantizeLinear", 13, &[], &[&x, &s, &z]).data(), &TensorData::I8(vec![1, 2, -8, -8]));
    let x = f32s(&[2, 4], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
    let s = f32s(&[2, 2], &[1.0, 2.0, 4.0, 0.5]);
    let y = run("QuantizeLinear", 21, &[("axis", 1), ("block_size", 2)], &[&x, &s]);
    assert_eq!(y.data(), &TensorData::U8(vec![0, 1, 1, 2, 1, 1, 12, 14]));
    // A last block shorter than the others: 5 columns in blocks of 2.
    let x = f32s(&[1, 5], &[2.0, 4.0, 6.0, 8.0, 10.0]);
    let s = f32s(&[1, 3], &[1.0, 2.0, 10.0]);
    let y = run("QuantizeLinear", 21, &[("axis", -1), ("block_size", 2)], &[&x, &s]);
    assert_eq!(y.data(), &TensorData::U8(vec![2, 4, 3, 4, 1]));
    let x = f32s(&[3], &[70000.0, -70000.0, 1.5]);
    let one = f32s(&[], &[1.0]);
    let y = run("QuantizeLinear", 21, &[], &[&x, &one, &t(&[], TensorData::I16(vec![0]))]);
    assert_eq!(y.data(), &TensorData::I16(vec![32767, -32768, 2]));
    let y = run("QuantizeLinear", 21, &[("output_dtype", 4)], &[&x, &one]);
    assert_eq!(y.data(), &TensorData::U16(vec![65535, 0, 2]));
}

#[test]
fn quantize_refuses_bad_types_and_shapes() {
    let x = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let one = f32s(&[], &[1.0]);
    let u8zp = t(&[], TensorData::U8(vec![0]));
    let e = fails("QuantizeLinear", 21, &[("output_dtype", 3)], &[&x, &one, &u8zp]);
    assert!(e.contains("output_dtype"), "{e}");
    let e = fails("QuantizeLinear", 21, &[("output_dtype", 17)], &[&x, &one]);
    assert!(e.contains("float8e4m3fn"), "{e}");
    let e = fails("QuantizeLinear", 13, &[], &[&x, &one, &t(&[], TensorData::I16(vec![0]))]);
    assert!(e.contains("int8 or uint8"), "{e}");
    let s3 = f32s(&[3], &[1.0, 2.0, 3.0]);
    assert!(fails("QuantizeLinear", 13, &[], &[&x, &s3]).contains("per-axis"));
    let s2 = f32s(&[2], &[1.0, 2.0]);
    assert!(fails("QuantizeLinear", 13, &[("axis", 2)], &[&x, &s2]).contains("axis"));
    let e = fails("QuantizeLinear", 21, &[("axis", 1), ("block_size", 3)], &[&x, &f32s(&[2, 2], &[1.0; 4])]);
    assert!(e.contains("blocked"), "{e}");
    assert!(fails("QuantizeLinear", 21, &[("block_size", -1)], &[&x, &one]).contains("block_size"));
    let z2 = t(&[1], TensorData::U8(vec![0]));
    assert!(fails("QuantizeLinear", 13, &[], &[&x, &s2, &z2]).contains("zero point"));
    assert!(fails("QuantizeLinear", 10, &[("axis", 0)], &[&x, &one]).contains("axis"));
}

#[test]
fn dequantize_every_granularity_and_type() {
    let x = t(&[3], TensorData::U8(vec![0, 128, 255]));
    let (s, z) = (f32s(&[], &[0.5]), t(&[], TensorData::U8(vec![128])));
    assert_eq!(run("DequantizeLinear", 10, &[], &[&x, &s, &z]).data(), &TensorData::F32(vec![-64.0, 0.0, 63.5]));
    let x = t(&[1, 2, 2], TensorData::I8(vec![1, 2, 3, 4]));
    let (s, z) = (f32s(&[2], &[1.0, 0.5]), t(&[2], TensorData::I8(vec![0, 2])));
    assert_eq!(run("DequantizeLinear", 13, &[], &[&x, &s, &z]).data(), &TensorData::F32(vec![1.0, 2.0, 0.5, 1.0]));
    let x = t(&[1, 4], TensorData::U16(vec![10, 20, 30, 40]));
    let (s, z) = (f32s(&[1, 2], &[0.1, 1.0]), t(&[1, 2], TensorData::U16(vec![0, 10])));
    let y = run("DequantizeLinear", 21, &[("axis", 1), ("block_size", 2)], &[&x, &s, &z]);
    assert_eq!(y.data(), &TensorData::F32(vec![1.0, 2.0, 20.0, 30.0]));
    let x = t(&[2], TensorData::I32(vec![1000, -3]));
    assert_eq!(run("DequantizeLinear", 13, &[], &[&x, &f32s(&[], &[0.5])]).data(), &TensorData::F32(vec![500.0, -1.5]));
    let y = run("DequantizeLinear", 23, &[("output_dtype", 10)], &[&x, &f32s(&[], &[0.5])]);
    let halves = [500.0f32, -1.5].map(|v| half::f16::from_f32(v).to_bits()).to_vec();
    assert_eq!(y.data(), &TensorData::F16(halves));
    let e = fails("DequantizeLinear", 13, &[], &[&x, &f32s(&[], &[0.5]), &t(&[], TensorData::I8(vec![0]))]);
    assert!(e.contains("zero point"), "{e}");
    let e = fails("DequantizeLinear", 13, &[], &[&t(&[1], TensorData::F32(vec![1.0])), &f32s(&[], &[0.5])]);
    assert!(e.contains("int8 or uint8"), "{e}");
}

#[test]
fn dynamic_quantize_takes_the_range_with_zero() {
    let x = f32s(&[6], &[0.0, 2.0, -3.0, -2.5, 1.34, 0.5]);
    let out = run_op_outputs("DynamicQuantizeLinear", 11, &Attributes::default(), &[Some(&x)], 3).unwrap();
    assert_eq!(out[0].data(), &TensorData::U8(vec![153, 255, 0, 26, 221, 179]));
    assert_eq!(out[1].data(), &TensorData::F32(vec![5.0 / 255.0]));
    assert_eq!(out[2].data(), &TensorData::U8(vec![153]));
    let zeros = f32s(&[2], &[0.0, 0.0]);
    let out = run_op_outputs("DynamicQuantizeLinear", 11, &Attributes::default(), &[Some(&zeros)], 3).unwrap();
    assert_eq!((out[0].data(), out[1].data()), (&TensorData::U8(vec![0, 0]), &TensorData::F32(vec![1.0])));
}

#[test]
fn matmul_integer_with_zero_points_and_batches() {
    let a = t(&[4, 3], TensorData::U8(vec![11, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0]));
    let b = t(&[3, 2], TensorData::U8(vec![1, 4, 2, 5, 3, 6]));
    let (az, bz) = (t(&[1], TensorData::U8(vec![12])), t(&[1], TensorData::U8(vec![0])));
    let y = run("MatMulInteger", 10, &[], &[&a, &b, &az, &bz]);
    assert_eq!(y.data(), &TensorData::I32(vec![-38, -83, -44, -98, -50, -113, -56, -128]));
    // Per row of a, per column of b.
    let a = t(&[2, 2], TensorData::I8(vec![1, 2, 3, 4]));
    let b = t(&[2, 2], TensorData::I8(vec![2, 3, 4, 5]));
    let (az, bz) = (t(&[2], TensorData::I8(vec![1, 2])), t(&[2], TensorData::I8(vec![0, 1])));
    assert_eq!(run("MatMulInteger", 10, &[], &[&a, &b, &az, &bz]).data(), &TensorData::I32(vec![4, 4, 10, 10]));
    // A batch of vectors against one matrix: [2, 1, 2] x [2, 1].
    let a = t(&[2, 1, 2], TensorData::I8(vec![1, 2, 3, 4]));
    let b = t(&[2, 1], TensorData::U8(vec![1, 1]));
    let y = run("MatMulInteger", 10, &[], &[&a, &b]);
    assert_eq!((y.dims(), y.data()), (&[2, 1, 1][..], &TensorData::I32(vec![3, 7])));
    assert!(fails("MatMulInteger", 10, &[], &[&t(&[2, 3], TensorData::U8(vec![0; 6])), &a]).contains("inner"));
    let e = fails(
        "MatMulInteger",
        10,
        &[],
        &[&t(&[2, 2], TensorData::U8(vec![0; 4])), &b, &t(&[3], TensorData::U8(vec![0; 3]))],
    );
    assert!(e.contains("a_zero_point"), "{e}");
}

#[test]
fn qlinear_matmul_requantizes_as_the_reference() {
    let a = t(&[2, 4], TensorData::U8(vec![208, 236, 0, 238, 3, 214, 255, 29]));
    let b = t(&[4, 3], TensorData::U8(vec![152, 51, 244, 60, 26, 255, 0, 127, 246, 127, 254, 247]));
    let (a_s, b_s, y_s) = (f32s(&[1], &[0.0066]), f32s(&[1], &[0.00705]), f32s(&[1], &[0.0107]));
    let (az, bz, yz) =
        (t(&[1], TensorData::U8(vec![113])), t(&[1], TensorData::U8(vec![114])), t(&[1], TensorData::U8(vec![118])));
    let y = run("QLinearMatMul", 10, &[], &[&a, &a_s, &az, &b, &b_s, &bz, &y_s, &yz]);
    assert_eq!(y.data(), &TensorData::U8(vec![168, 115, 255, 1, 66, 151]));
    // Per-row scales of a: row 1 at twice the scale.
    let a_s2 = f32s(&[2], &[0.0066, 0.0132]);
    let y = run("QLinearMatMul", 21, &[], &[&a, &a_s2, &az, &b, &b_s, &bz, &y_s, &yz]);
    let TensorData::U8(v) = y.data() else { panic!() };
    assert_eq!(&v[..3], &[168, 115, 255]);
    assert_eq!(v[3], 0, "row 1 doubled: (1 - 118) * 2 + 118 saturates at 0");
}

#[test]
fn conv_integer_matches_the_reference_cases() {
    let x = t(&[1, 1, 3, 3], TensorData::U8((2..11).collect()));
    let xz = t(&[], TensorData::U8(vec![1]));
    let w = t(&[1, 1, 2, 2], TensorData::U8(vec![1; 4]));
    assert_eq!(run("ConvInteger", 10, &[], &[&x, &w, &xz]).data(), &TensorData::I32(vec![12, 16, 24, 28]));
    let w2 = t(&[2, 1, 2, 2], TensorData::U8(vec![1; 8]));
    let wz = t(&[2], TensorData::U8(vec![0, 1]));
    let mut a = Attributes::default();
    a.set("pads", Ints(vec![1, 1, 1, 1]));
    let y = run_op("ConvInteger", 10, &a, &[Some(&x), Some(&w2), Some(&xz), Some(&wz)]).unwrap().remove(0);
    let mut want = vec![1, 3, 5, 3, 5, 12, 16, 9, 11, 24, 28, 15, 7, 15, 17, 9];
    want.extend([0; 16]);
    assert_eq!((y.dims(), y.data()), (&[1, 2, 4, 4][..], &TensorData::I32(want)));
    let e = fails("ConvInteger", 10, &[], &[&x, &w, &t(&[2], TensorData::U8(vec![1, 1]))]);
    assert!(e.contains("x_zero_point"), "{e}");
    assert!(fails("ConvInteger", 10, &[("group", 2)], &[&x, &w]).contains("groups"));
}

#[test]
fn qlinear_conv_adds_the_bias_and_requantizes() {
    let x = t(&[1, 1, 2, 2], TensorData::U8(vec![10, 20, 30, 40]));
    let w = t(&[1, 1, 1, 1], TensorData::U8(vec![3]));
    let (xs, xz, ws, wz) =
        (f32s(&[], &[0.5]), t(&[], TensorData::U8(vec![10])), f32s(&[1], &[2.0]), t(&[1], TensorData::U8(vec![1])));
    let (yz, bias) = (t(&[], TensorData::U8(vec![5])), t(&[1], TensorData::I32(vec![7])));
    // (x - 10) * 2 + 7 = 7, 27, 47, 67; times 0.5 * 2 / y_scale, plus 5.
    let y = run("QLinearConv", 10, &[], &[&x, &xs, &xz, &w, &ws, &wz, &f32s(&[], &[1.0]), &yz, &bias]);
    assert_eq!(y.data(), &TensorData::U8(vec![12, 32, 52, 72]));
    // 1.75, 6.75, 11.75, 16.75 plus 5, rounded.
    let y = run("QLinearConv", 10, &[], &[&x, &xs, &xz, &w, &ws, &wz, &f32s(&[], &[4.0]), &yz, &bias]);
    assert_eq!(y.data(), &TensorData::U8(vec![7, 12, 17, 22]));
}

#[test]
fn every_kernel_kind_renders() {
    use super::gpu::{
        DynamicQuantizeKernel, Epilogue, LinearKernel, QConvKernel, QMatMulKernel, dequantize_expr, quantize_expr,
    };
    let mut kinds: Vec<Box<dyn crate::ops::gpu::GpuKernel>> = vec![Box::new(DynamicQuantizeKernel)];
    for (x, div) in
        [(DType::F32, DType::F32), (DType::I32, DType::F64), (DType::F16, DType::F16), (DType::BF16, DType::BF16)]
    {
        for zp in [None, Some(DType::I8)] {
            let expr = quantize_expr(x, x, div, DType::I8, zp.is_some());
            kinds.push(Box::new(LinearKernel { x, scale: x, zp, out: DType::I8, expr }));
        }
    }
    for (x, out) in [(DType::U8, DType::F32), (DType::I32, DType::F16), (DType::I16, DType::BF16)] {
        let expr = dequantize_expr(x, DType::F32, out, true);
        kinds.push(Box::new(LinearKernel { x, scale: DType::F32, zp: Some(x), out, expr }));
    }
    let epilogues = [
        Epilogue::Sum,
        Epilogue::Requantize { scale: DType::F32, out: DType::U8 },
        Epilogue::Requantize { scale: DType::F16, out: DType::I8 },
    ];
    for epilogue in epilogues {
        for zp in [false, true] {
            kinds.push(Box::new(QMatMulKernel { a: DType::U8, b: DType::I8, a_zp: zp, b_zp: !zp, epilogue }));
            let bias = epilogue != Epilogue::Sum;
            kinds.push(Box::new(QConvKernel { x: DType::U8, w: DType::I8, x_zp: zp, w_zp: zp, bias, epilogue }));
        }
    }
    assert_kernels_render(&kinds);
}
