//! The elementwise family on the element types beyond f32, i64, i32 and bool: arithmetic,
//! comparisons, Mod, BitShift, the bitwise ops, Max/Min, Pow of every base and exponent kind and the
//! float math in f64, with operands at the edges C leaves undefined (a zero or -1 divisor, `MIN / -1`,
//! products past the width, shifts by the width), through the emulation against the host backend.

use saggar_shape::{DType, Dim};

use super::element_types::{TYPES, name};
use super::{Kinds, matches_the_host};
use crate::OnnxModel;
use crate::builder::ModelBuilder;
use crate::import::proto::dtype_to_onnx;
use crate::ops::Attribute::{Float, Int, String as Str};
use crate::tensor::{Tensor, TensorData};

fn cast(k: &mut Kinds, from: &str, to: DType, out: &'static str) -> &'static str {
    k.hidden("Cast", &[from], &[out], &[("to", Int(i64::from(dtype_to_onnx(to))))]);
    out
}

/// An initializer of type `t` from i64 values (converted as Rust's `as`: negative ones wrap into
/// unsigned types).
fn typed_init(k: &mut Kinds, n: &'static str, t: DType, v: &[i64]) -> &'static str {
    let i64s = Tensor::from_i64s(v.to_vec());
    let mut data = TensorData::zeros(t, v.len()).unwrap();
    crate::tensor::cast_into(i64s.view().data, &mut data.as_mut()).unwrap();
    k.init(n, Tensor::new(vec![v.len()], data).unwrap());
    n
}

/// The nodes of element type `t` over `x` (the input times 10, floored, through i64: unsigned
/// types see negative values wrapped to large ones).
fn typed_nodes(k: &mut Kinds, t: DType, s: &str) {
    let x = cast(k, "x10l", t, name(&["x", s]));
    let float = t == DType::F64;
    let unsigned = matches!(t, DType::U8 | DType::U16 | DType::U32 | DType::U64);
    // Divisors: 0, -1 (the largest value when unsigned), and values of both signs.
    let d = typed_init(k, name(&["d", s]), t, &[3, -4, 0, -1, 7]);
    for op in ["Add", "Sub", "Mul", "Div"] {
        k.node(op, &[x, d], &[name(&[op, s])], &[], t);
    }
    k.node("Mul", &[x, x], &[name(&["square", s])], &[], t);
    for op in ["Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"] {
        k.node(op, &[x, d], &[name(&[op, s])], &[], DType::Bool);
    }
    k.node("Mod", &[x, d], &[name(&["fmod", s])], &[("fmod", Int(1))], t);
    k.node("Max", &[x, d, x], &[name(&["max", s])], &[], t);
    k.node("Min", &[d, x], &[name(&["min", s])], &[], t);
    k.node("Abs", &[x], &[name(&["abs", s])], &[], t);
    k.node("Sign", &[x], &[name(&["sign", s])], &[], t);
    k.node("Shrink", &[x], &[name(&["shrink", s])], &[("lambd", Float(2.0)), ("bias", Float(0.5))], t);
    if !unsigned {
        k.node("Neg", &[x], &[name(&["neg", s])], &[], t);
        k.node("Relu", &[x], &[name(&["relu", s])], &[], t);
    }
    if float {
        return;
    }
    k.node("Mod", &[x, d], &[name(&["mod", s])], &[], t);
    let b = typed_init(k, name(&["b", s]), t, &[0x0f, -1, 0, 0x55, -16]);
    for op in ["BitwiseAnd", "BitwiseOr", "BitwiseXor"] {
        k.node(op, &[x, b], &[name(&[op, s])], &[], t);
    }
    k.node("BitwiseNot", &[x], &[name(&["not", s])], &[], t);
    if unsigned {
        let w = 8 * t.size_bytes() as i64;
        let sh = typed_init(k, name(&["sh", s]), t, &[0, 1, w - 1, w, w + 3]);
        for (dir, out) in [("LEFT", "shl"), ("RIGHT", "shr")] {
            k.node("BitShift", &[x, sh], &[name(&[out, s])], &[("direction", Str(dir.as_bytes().to_vec()))], t);
        }
    }
}

/// Pow of each base type (f64, i32, i64) by exponents of integer and float types, and the float
/// math, activations and predicates in f64.
fn pow_and_f64_nodes(k: &mut Kinds) {
    let (f, xf) = (DType::F64, "x_f64");
    let xi = cast(k, "x10l", DType::I32, "x_i32");
    let e_u8 = typed_init(k, "e_u8", DType::U8, &[0, 1, 2, 3, 15]);
    let e_i8 = typed_init(k, "e_i8", DType::I8, &[-1, 0, 1, 2, 3]);
    k.init("e_f64", Tensor::new(vec![5], TensorData::F64(vec![0.5, 2.0, -1.0, 1.5, 40.0])).unwrap());
    k.node("Pow", &[xi, "e_u8"], &["pow_i32_u8"], &[], DType::I32);
    k.node("Pow", &["x10l", e_i8], &["pow_i64_i8"], &[], DType::I64);
    k.node("Pow", &[xi, "e_f64"], &["pow_i32_f64"], &[], DType::I32);
    k.node("Pow", &[xf, e_u8], &["pow_f64_u8"], &[], f);
    k.node("Pow", &["x", "e_f64"], &["pow_f32_f64"], &[], DType::F32);
    // A constant cube: products on the GPU, `powf` on the host.
    k.init("e_three", Tensor::new(vec![], TensorData::F32(vec![3.0])).unwrap());
    k.node("Pow", &["x", "e_three"], &["pow_f32_cube"], &[], DType::F32);
    let xs = "x_scaled_f64";
    k.hidden("Cast", &["x"], &[xs], &[("to", Int(11))]);
    for op in [
        "Exp",
        "Log",
        "Sqrt",
        "Sin",
        "Cos",
        "Tanh",
        "Atan",
        "Erf",
        "Sigmoid",
        "Reciprocal",
        "Floor",
        "Ceil",
        "Round",
        "Softplus",
        "Softsign",
        "Mish",
        "HardSwish",
        "Gelu",
        "Selu",
    ] {
        k.node(op, &[xs], &[name(&[op, "f64"])], &[], f);
    }
    k.node("LeakyRelu", &[xs], &["leaky_f64"], &[("alpha", Float(0.1))], f);
    k.node("Elu", &[xs], &["elu_f64"], &[("alpha", Float(0.7))], f);
    k.node("HardSigmoid", &[xs], &["hsig_f64"], &[("alpha", Float(0.3))], f);
    k.node("ThresholdedRelu", &[xs], &["trelu_f64"], &[("alpha", Float(0.2))], f);
    k.node("Gelu", &[xs], &["gelu_tanh_f64"], &[("approximate", Str(b"tanh".to_vec()))], f);
    k.node("Sum", &[xs, xf, xs], &["sum_f64"], &[], f);
    k.node("Mean", &[xs, xf], &["mean_f64"], &[], f);
    k.node("PRelu", &[xs, "d_f64"], &["prelu_f64"], &[], f);
    k.init("zero_f64", Tensor::new(vec![], TensorData::F64(vec![0.0])).unwrap());
    k.hidden("Div", &[xf, "zero_f64"], &["inf_f64"], &[]);
    k.node("IsInf", &["inf_f64"], &["isinf_f64"], &[], DType::Bool);
    k.node("IsInf", &["inf_f64"], &["isneginf_f64"], &[("detect_positive", Int(0))], DType::Bool);
    k.node("IsNaN", &["inf_f64"], &["isnan_f64"], &[], DType::Bool);
    for t in [DType::U32, DType::U64] {
        let s = if t == DType::U32 { "u32" } else { "u64" };
        k.node("PRelu", &[name(&["x", s]), name(&["d", s])], &[name(&["prelu", s])], &[], t);
    }
}

fn model() -> OnnxModel {
    let mut k = Kinds { b: ModelBuilder::new(21), outputs: Vec::new() };
    k.b.input("x", DType::F32, &[2, 3, 4, 5].map(Dim::Fixed));
    k.init("ten", Tensor::new(vec![], TensorData::F32(vec![10.0])).unwrap());
    k.hidden("Mul", &["x", "ten"], &["x10f"], &[]);
    k.hidden("Floor", &["x10f"], &["x10"], &[]);
    cast(&mut k, "x10", DType::I64, "x10l");
    for (t, s) in TYPES {
        typed_nodes(&mut k, t, s);
    }
    pow_and_f64_nodes(&mut k);
    for (name, dtype) in &k.outputs {
        k.b.output(name, *dtype, &[]);
    }
    OnnxModel::from_bytes(&k.b.to_bytes(), "elementwise_types", &crate::ImportLimits::default()).unwrap()
}

#[test]
fn the_elementwise_ops_of_every_element_type_match_the_host_when_run_on_the_cpu() {
    matches_the_host(model(), 7 * 15 + 60);
}

/// Erf takes integers in opsets 9 to 12 (computed in double, truncated); Clip's bounds are
/// attributes up to opset 10 (of f64 inputs too).
#[test]
fn erf_of_integers_and_clip_of_f64_at_opset_10_match_the_host_when_run_on_the_cpu() {
    let mut k = Kinds { b: ModelBuilder::new(10), outputs: Vec::new() };
    k.b.input("x", DType::F32, &[2, 3, 4, 5].map(Dim::Fixed));
    for (t, s) in [(DType::I8, "i8"), (DType::U16, "u16"), (DType::I64, "i64")] {
        let x = cast(&mut k, "x", t, name(&["x", s]));
        k.node("Erf", &[x], &[name(&["erf", s])], &[], t);
    }
    let x = cast(&mut k, "x", DType::F64, "x_f64");
    k.node("Clip", &[x], &["clip_f64"], &[("min", Float(-0.5)), ("max", Float(0.75))], DType::F64);
    for (name, dtype) in &k.outputs {
        k.b.output(name, *dtype, &[]);
    }
    matches_the_host(OnnxModel::from_bytes(&k.b.to_bytes(), "opset10", &crate::ImportLimits::default()).unwrap(), 4);
}
