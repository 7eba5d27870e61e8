//! Elementwise ops with numpy broadcasting, each one fused C++ expression on GPU: unary math
//! ([`unary`]: roots, exponentials, trigonometry, rounding, Sign, IsNaN, IsInf, Not, BitwiseNot),
//! the activations ([`activation`]: Relu's relatives with their attributes, Swish, PRelu), binary
//! arithmetic, comparisons and logic ([`binary`]), the integer-minded binary ops Mod, BitShift and
//! BitwiseAnd/Or/Xor ([`integer`]), and the variadic Sum/Max/Min/Mean ([`variadic`]).
//!
//! Each op takes the element types its ONNX signature lists at the model's opset (f16 and bf16
//! reach it as f32). Host and GPU compute the same function: the host kernel of each op is one
//! generic function over its element ([`element`]'s traits) next to its C++ expression, and where C
//! would trap or leave a result undefined (integer overflow, division or remainder by zero, shifts by
//! the width or more, out-of-range float to integer conversions) both define the result the same
//! way: integers wrap, a zero divisor gives 0, a shift past the width 0, a conversion saturates.

mod activation;
mod binary;
mod element;
mod integer;
mod unary;
mod variadic;

use saggar_shape::DType;

use crate::ops::shape_util::{broadcast_strides, for_each_broadcast};
use crate::ops::{InferInputs, OpEntry, OpError, SymInt};
use crate::tensor::{DataMut, Storage, typed_like_mut};
use activation::{Activation, build_celu, build_prelu, build_shrink};
use binary::{Binary, BinaryKind};
use integer::{IntegerKind, bitwise, build_bitshift, build_mod};
use unary::{Unary, build_gelu, build_is_inf, is_nan, not, unary};
use variadic::{Variadic, VariadicKind};

pub(crate) use element::c_float_to_int;

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "Sqrt", since: 6, until: 24, build: |c| unary(c, Unary::Sqrt) },
    OpEntry { op_type: "Erf", since: 9, until: 24, build: |c| unary(c, Unary::Erf) },
    OpEntry { op_type: "Tanh", since: 6, until: 24, build: |c| unary(c, Unary::Tanh) },
    OpEntry { op_type: "Relu", since: 6, until: 24, build: |c| unary(c, Unary::Relu) },
    OpEntry { op_type: "Sigmoid", since: 6, until: 24, build: |c| unary(c, Unary::Sigmoid) },
    OpEntry { op_type: "Neg", since: 6, until: 24, build: |c| unary(c, Unary::Neg) },
    OpEntry { op_type: "Abs", since: 6, until: 24, build: |c| unary(c, Unary::Abs) },
    OpEntry { op_type: "Exp", since: 6, until: 24, build: |c| unary(c, Unary::Exp) },
    OpEntry { op_type: "Log", since: 6, until: 24, build: |c| unary(c, Unary::Log) },
    OpEntry { op_type: "Reciprocal", since: 6, until: 24, build: |c| unary(c, Unary::Reciprocal) },
    OpEntry { op_type: "Sin", since: 7, until: 24, build: |c| unary(c, Unary::Sin) },
    OpEntry { op_type: "Cos", since: 7, until: 24, build: |c| unary(c, Unary::Cos) },
    OpEntry { op_type: "Tan", since: 7, until: 24, build: |c| unary(c, Unary::Tan) },
    OpEntry { op_type: "Asin", since: 7, until: 24, build: |c| unary(c, Unary::Asin) },
    OpEntry { op_type: "Acos", since: 7, until: 24, build: |c| unary(c, Unary::Acos) },
    OpEntry { op_type: "Atan", since: 7, until: 24, build: |c| unary(c, Unary::Atan) },
    OpEntry { op_type: "Sinh", since: 9, until: 24, build: |c| unary(c, Unary::Sinh) },
    OpEntry { op_type: "Cosh", since: 9, until: 24, build: |c| unary(c, Unary::Cosh) },
    OpEntry { op_type: "Asinh", since: 9, until: 24, build: |c| unary(c, Unary::Asinh) },
    OpEntry { op_type: "Acosh", since: 9, until: 24, build: |c| unary(c, Unary::Acosh) },
    OpEntry { op_type: "Atanh", since: 9, until: 24, build: |c| unary(c, Unary::Atanh) },
    OpEntry { op_type: "Floor", since: 6, until: 24, build: |c| unary(c, Unary::Floor) },
    OpEntry { op_type: "Ceil", since: 6, until: 24, build: |c| unary(c, Unary::Ceil) },
    OpEntry { op_type: "Round", since: 11, until: 24, build: |c| unary(c, Unary::Round) },
    OpEntry { op_type: "Sign", since: 9, until: 24, build: |c| unary(c, Unary::Sign) },
    OpEntry { op_type: "BitwiseNot", since: 18, until: 24, build: |c| unary(c, Unary::BitwiseNot) },
    OpEntry { op_type: "Gelu", since: 20, until: 24, build: build_gelu },
    OpEntry { op_type: "IsNaN", since: 9, until: 24, build: is_nan },
    OpEntry { op_type: "IsInf", since: 10, until: 24, build: build_is_inf },
    OpEntry { op_type: "Not", since: 1, until: 24, build: not },
    OpEntry { op_type: "HardSigmoid", since: 6, until: 24, build: Activation::build_hard_sigmoid },
    OpEntry { op_type: "HardSwish", since: 14, until: 24, build: |_| Activation::HardSwish.boxed() },
    OpEntry { op_type: "LeakyRelu", since: 6, until: 24, build: Activation::build_leaky_relu },
    OpEntry { op_type: "Elu", since: 6, until: 24, build: Activation::build_elu },
    OpEntry { op_type: "Selu", since: 6, until: 24, build: Activation::build_selu },
    OpEntry { op_type: "Celu", since: 12, until: 24, build: build_celu },
    OpEntry { op_type: "Softplus", since: 1, until: 24, build: |_| Activation::Softplus.boxed() },
    OpEntry { op_type: "Softsign", since: 1, until: 24, build: |_| Activation::Softsign.boxed() },
    OpEntry { op_type: "Mish", since: 18, until: 24, build: |_| Activation::Mish.boxed() },
    OpEntry { op_type: "ThresholdedRelu", since: 10, until: 24, build: Activation::build_thresholded_relu },
    OpEntry { op_type: "Swish", since: 24, until: 24, build: Activation::build_swish },
    OpEntry { op_type: "Shrink", since: 9, until: 24, build: build_shrink },
    // Unidirectional broadcasting of the slope from 7, integer types from 9.
    OpEntry { op_type: "PRelu", since: 7, until: 8, build: |c| build_prelu(c, false) },
    OpEntry { op_type: "PRelu", since: 9, until: 24, build: |c| build_prelu(c, true) },
    OpEntry { op_type: "Add", since: 7, until: 24, build: |c| Binary::boxed(c, BinaryKind::Add) },
    OpEntry { op_type: "Sub", since: 7, until: 24, build: |c| Binary::boxed(c, BinaryKind::Sub) },
    OpEntry { op_type: "Mul", since: 7, until: 24, build: |c| Binary::boxed(c, BinaryKind::Mul) },
    OpEntry { op_type: "Div", since: 7, until: 24, build: |c| Binary::boxed(c, BinaryKind::Div) },
    OpEntry { op_type: "Pow", since: 7, until: 24, build: |c| Binary::boxed(c, BinaryKind::Pow) },
    OpEntry { op_type: "Equal", since: 7, until: 24, build: |c| Binary::boxed(c, BinaryKind::Equal) },
    OpEntry { op_type: "Greater", since: 7, until: 24, build: |c| Binary::boxed(c, BinaryKind::Greater) },
    OpEntry { op_type: "Less", since: 7, until: 24, build: |c| Binary::boxed(c, BinaryKind::Less) },
    OpEntry { op_type: "GreaterOrEqual", since: 12, until: 24, build: |c| Binary::boxed(c, BinaryKind::GreaterEq) },
    OpEntry { op_type: "LessOrEqual", since: 12, until: 24, build: |c| Binary::boxed(c, BinaryKind::LessEq) },
    OpEntry { op_type: "And", since: 7, until: 24, build: |c| Binary::boxed(c, BinaryKind::And) },
    OpEntry { op_type: "Or", since: 7, until: 24, build: |c| Binary::boxed(c, BinaryKind::Or) },
    OpEntry { op_type: "Xor", since: 7, until: 24, build: |c| Binary::boxed(c, BinaryKind::Xor) },
    OpEntry { op_type: "Mod", since: 10, until: 24, build: build_mod },
    OpEntry { op_type: "BitShift", since: 11, until: 24, build: build_bitshift },
    OpEntry { op_type: "BitwiseAnd", since: 18, until: 24, build: |_| bitwise(IntegerKind::And) },
    OpEntry { op_type: "BitwiseOr", since: 18, until: 24, build: |_| bitwise(IntegerKind::Or) },
    OpEntry { op_type: "BitwiseXor", since: 18, until: 24, build: |_| bitwise(IntegerKind::Xor) },
    OpEntry { op_type: "Sum", since: 8, until: 24, build: |c| Variadic::boxed(c, VariadicKind::Sum) },
    OpEntry { op_type: "Mean", since: 8, until: 24, build: |c| Variadic::boxed(c, VariadicKind::Mean) },
    OpEntry { op_type: "Max", since: 8, until: 24, build: |c| Variadic::boxed(c, VariadicKind::Max) },
    OpEntry { op_type: "Min", since: 8, until: 24, build: |c| Variadic::boxed(c, VariadicKind::Min) },
];

/// Fails unless `got` is one of `allowed`, naming them.
pub(crate) fn require_dtype(op: &str, got: DType, allowed: &[DType]) -> Result<(), OpError> {
    if allowed.contains(&got) {
        Ok(())
    } else {
        let names: Vec<String> = allowed.iter().map(ToString::to_string).collect();
        Err(OpError::infer(format!("{op} takes {} inputs, not {got}", names.join(" or "))))
    }
}

pub(crate) fn output_mismatch() -> OpError {
    OpError::eval("output element type differs from what inference gave")
}

/// An `f32` constant as a C++ expression that reads back as exactly `v`: the shortest decimal that
/// round-trips (Rust's `{:?}`: `2.0f`, `1e-5f`, `0.16666667f`), parenthesised when negative so
/// that it can follow any operator, and the bits for an infinity or NaN (no decimal spells those).
pub(crate) fn c_float(v: f32) -> String {
    if !v.is_finite() {
        crate::ops::gpu::float_literal(v.to_bits())
    } else if v.is_sign_negative() {
        format!("({v:?}f)")
    } else {
        format!("{v:?}f")
    }
}

/// `f` of each element of `x` into `out` (of `x`'s storage type and length).
fn map<T: Storage>(x: &[T], out: &mut DataMut<'_>, f: impl Fn(T) -> T) -> Result<(), OpError> {
    typed_like_mut(x, out)?.iter_mut().zip(x).for_each(|(o, &x)| *o = f(x));
    Ok(())
}

/// Applies `f` over the broadcast of `a` and `b` into `out` (shaped as the broadcast).
fn broadcast2<A: Copy, B: Copy, O>(
    a: &[A],
    a_dims: &[usize],
    b: &[B],
    b_dims: &[usize],
    out: &mut [O],
    out_dims: &[usize],
    f: impl Fn(A, B) -> O,
) -> Result<(), OpError> {
    let n = out.len();
    if a.len() == n && b.len() == n && a_dims == b_dims {
        out.iter_mut().zip(a.iter().zip(b)).for_each(|(o, (&x, &y))| *o = f(x, y));
    } else if a.len() == n && b.len() == 1 {
        let y = b[0];
        out.iter_mut().zip(a).for_each(|(o, &x)| *o = f(x, y));
    } else if b.len() == n && a.len() == 1 {
        let x = a[0];
        out.iter_mut().zip(b).for_each(|(o, &y)| *o = f(x, y));
    } else {
        let rank = out_dims.len();
        if a_dims.len() > rank || b_dims.len() > rank {
            return Err(OpError::eval("input rank exceeds the output rank"));
        }
        let (sa, sb) = (broadcast_strides(a_dims, rank), broadcast_strides(b_dims, rank));
        // Offsets are within the inputs as long as their shapes broadcast to `out_dims`.
        check_broadcast(a_dims, out_dims)?;
        check_broadcast(b_dims, out_dims)?;
        for_each_broadcast(out_dims, [&sa, &sb], |i, [oa, ob]| out[i] = f(a[oa], b[ob]));
    }
    Ok(())
}

/// The shape-vector elements ([`crate::ops::Op::dims_value`]) of a binary op over two known vectors,
/// elementwise or with a scalar: `f` of each pair (`None` from `f` gives none at all).
fn sym_pairs(inputs: &InferInputs<'_>, f: impl Fn(&SymInt, &SymInt) -> Option<SymInt>) -> Option<Vec<SymInt>> {
    let (a, b) = (inputs.req(0).ok()?.sym_ints()?, inputs.req(1).ok()?.sym_ints()?);
    let n = a.len().max(b.len());
    if (a.len() != n && a.len() != 1) || (b.len() != n && b.len() != 1) {
        return None;
    }
    (0..n).map(|i| f(&a[if a.len() == 1 { 0 } else { i }], &b[if b.len() == 1 { 0 } else { i }])).collect()
}

/// Fails unless `dims` broadcasts to exactly `out_dims`.
pub(crate) fn check_broadcast(dims: &[usize], out_dims: &[usize]) -> Result<(), OpError> {
    let Some(pad) = out_dims.len().checked_sub(dims.len()) else {
        return Err(OpError::eval(format!("input shape {dims:?} has a higher rank than {out_dims:?}")));
    };
    for (i, &d) in dims.iter().enumerate() {
        if d != 1 && d != out_dims[pad + i] {
            return Err(OpError::eval(format!("input shape {dims:?} does not broadcast to {out_dims:?}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::ops::Attributes;
    use crate::ops::testing::{f32s, run_op};
    use crate::tensor::{Tensor, TensorData};

    #[test]
    fn float_constants_in_expressions_read_back_exactly() {
        use super::c_float;
        assert_eq!(c_float(2.0), "2.0f");
        assert_eq!(c_float(1e-5), "1e-5f");
        assert_eq!(c_float(0.2), "0.2f");
        assert_eq!(c_float(1.0 / 6.0), "0.16666667f");
        assert_eq!(c_float(-0.5), "(-0.5f)", "negative: safe after a minus sign");
        assert_eq!(c_float(1e20), "1e20f");
        assert_eq!(c_float(f32::INFINITY), "__int_as_float(2139095040)");
        assert!(c_float(f32::NAN).starts_with("__int_as_float("));
        // The decimal parses back to the same bits (as a C++ `f` literal is rounded: to nearest).
        for v in [0.1f32, 1.0 / 3.0, 1.673_263_2, 1.050_701, f32::MIN_POSITIVE, 1e-45, f32::MAX, 16_777_217.0] {
            let text = c_float(v);
            let back: f32 = text.trim_end_matches('f').parse().unwrap();
            assert_eq!(back.to_bits(), v.to_bits(), "{text}");
        }
    }

    #[test]
    fn add_broadcasts_rows_and_columns() {
        let a = f32s(&[2, 1], &[1.0, 2.0]);
        let b = f32s(&[3], &[10.0, 20.0, 30.0]);
        let out = run_op("Add", 17, &Attributes::default(), &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(out[0].dims(), &[2, 3]);
        assert_eq!(out[0].data(), &TensorData::F32(vec![11.0, 21.0, 31.0, 12.0, 22.0, 32.0]));
    }

    #[test]
    fn comparisons_give_bool_and_mismatched_types_are_refused() {
        let a = Tensor::from_i64s(vec![1, 5, 3]);
        let b = Tensor::from_i64s(vec![3]);
        let out = run_op("GreaterOrEqual", 17, &Attributes::default(), &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(out[0].data(), &TensorData::Bool(vec![0, 1, 1]));
        let f = f32s(&[1], &[1.0]);
        assert!(run_op("Equal", 17, &Attributes::default(), &[Some(&a), Some(&f)]).is_err());
    }

    #[test]
    fn integer_division_by_zero_is_zero_not_a_panic() {
        let a = Tensor::from_i64s(vec![7, -7]);
        let b = Tensor::from_i64s(vec![0, 2]);
        let out = run_op("Div", 14, &Attributes::default(), &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(out[0].data(), &TensorData::I64(vec![0, -3]));
    }

    fn typed(d: TensorData) -> Tensor {
        Tensor::new(vec![d.len()], d).unwrap()
    }

    fn run2(op: &str, opset: u32, a: TensorData, b: TensorData) -> Result<TensorData, crate::error::OpError> {
        let out = run_op(op, opset, &Attributes::default(), &[Some(&typed(a)), Some(&typed(b))])?;
        Ok(out[0].data().clone())
    }

    #[test]
    fn integer_arithmetic_of_every_width_wraps() {
        let (a, b) = (TensorData::U8(vec![200, 3, 7]), TensorData::U8(vec![100, 5, 0]));
        assert_eq!(run2("Add", 14, a.clone(), b.clone()).unwrap(), TensorData::U8(vec![44, 8, 7]));
        assert_eq!(run2("Sub", 14, a.clone(), b.clone()).unwrap(), TensorData::U8(vec![100, 254, 7]));
        assert_eq!(run2("Div", 14, a, b).unwrap(), TensorData::U8(vec![2, 0, 0]), "by zero: 0");
        let u16s = TensorData::U16(vec![65535, 300]);
        assert_eq!(run2("Mul", 14, u16s.clone(), u16s).unwrap(), TensorData::U16(vec![1, 24464]));
        let (a, b) = (TensorData::I8(vec![-128, -7, 100]), TensorData::I8(vec![-1, 2, 2]));
        assert_eq!(
            run2("Div", 14, a.clone(), b.clone()).unwrap(),
            TensorData::I8(vec![-128, -3, 50]),
            "MIN / -1 wraps"
        );
        assert_eq!(run2("Mul", 14, a, b).unwrap(), TensorData::I8(vec![-128, -14, -56]));
        let (a, b) = (TensorData::F64(vec![1.0, -3.0]), TensorData::F64(vec![0.0, 2.0]));
        assert_eq!(run2("Div", 14, a, b).unwrap(), TensorData::F64(vec![f64::INFINITY, -1.5]));
        assert_eq!(
            run2("Add", 7, TensorData::U64(vec![u64::MAX]), TensorData::U64(vec![2])).unwrap(),
            TensorData::U64(vec![1])
        );
    }

    #[test]
    fn comparisons_of_unsigned_and_f64_values() {
        let (a, b) = (TensorData::U64(vec![u64::MAX, 0, 5]), TensorData::U64(vec![1, 1, 5]));
        assert_eq!(run2("Greater", 13, a.clone(), b.clone()).unwrap(), TensorData::Bool(vec![1, 0, 0]));
        assert_eq!(run2("LessOrEqual", 16, a.clone(), b.clone()).unwrap(), TensorData::Bool(vec![0, 1, 1]));
        assert_eq!(run2("Equal", 13, a, b).unwrap(), TensorData::Bool(vec![0, 0, 1]));
        let (a, b) = (TensorData::F64(vec![f64::NAN, 1.0]), TensorData::F64(vec![f64::NAN, 1.0]));
        assert_eq!(run2("Equal", 13, a.clone(), b.clone()).unwrap(), TensorData::Bool(vec![0, 1]));
        assert_eq!(run2("GreaterOrEqual", 13, a, b).unwrap(), TensorData::Bool(vec![0, 1]));
    }

    #[test]
    fn pow_of_every_base_and_exponent_kind() {
        let base = TensorData::I32(vec![3, -2, 2, 7]);
        let p = run2("Pow", 15, base.clone(), TensorData::U8(vec![4, 3, 31, 0])).unwrap();
        assert_eq!(p, TensorData::I32(vec![81, -8, i32::MIN, 1]), "wrapping integer powers");
        let p = run2("Pow", 15, base.clone(), TensorData::I64(vec![-1, 2, 40, 1])).unwrap();
        assert_eq!(p, TensorData::I32(vec![0, 4, 0, 7]), "a negative exponent gives 0, 2^40 wraps to 0");
        let p = run2("Pow", 15, base, TensorData::F64(vec![0.5, 0.5, 40.0, -1.0])).unwrap();
        assert_eq!(p, TensorData::I32(vec![1, 0, i32::MAX, 0]), "f64 pow converted as `as`: NaN 0, saturated");
        let p = run2("Pow", 15, TensorData::F64(vec![2.0, 9.0]), TensorData::U16(vec![10, 0])).unwrap();
        assert_eq!(p, TensorData::F64(vec![1024.0, 1.0]));
        assert!(run2("Pow", 15, TensorData::U8(vec![2]), TensorData::U8(vec![2])).is_err(), "bases: floats, i32, i64");
        assert!(run2("Pow", 11, TensorData::I32(vec![2]), TensorData::I32(vec![2])).is_err(), "integers from 12");
    }

    #[test]
    fn each_opset_takes_the_types_its_signature_lists() {
        let (i8s, f32s1) = (TensorData::I8(vec![1]), TensorData::F32(vec![1.0]));
        assert!(run2("Add", 13, i8s.clone(), i8s.clone()).is_err(), "8-bit integers from 14");
        assert!(run2("Add", 14, i8s.clone(), i8s.clone()).is_ok());
        assert!(run2("Equal", 10, f32s1.clone(), f32s1.clone()).is_err(), "floats from 11");
        assert!(run2("Equal", 11, f32s1.clone(), f32s1.clone()).is_ok());
        assert!(run2("Greater", 8, i8s.clone(), i8s.clone()).is_err(), "integers from 9");
        assert!(run2("Max", 11, i8s.clone(), i8s.clone()).is_err(), "integers from 12");
        assert_eq!(run2("Max", 12, i8s.clone(), TensorData::I8(vec![-3])).unwrap(), TensorData::I8(vec![1]));
        assert!(run2("Sum", 13, i8s.clone(), i8s.clone()).is_err(), "floats only");
        let relu = |opset| run_op("Relu", opset, &Attributes::default(), &[Some(&typed(TensorData::I8(vec![-3, 4])))]);
        assert!(relu(13).is_err(), "signed integers from 14");
        assert_eq!(relu(14).unwrap()[0].data(), &TensorData::I8(vec![0, 4]));
        let erf = |opset| run_op("Erf", opset, &Attributes::default(), &[Some(&typed(TensorData::U8(vec![0, 9])))]);
        assert_eq!(erf(12).unwrap()[0].data(), &TensorData::U8(vec![0, 1]), "integers in opsets 9 to 12");
        assert!(erf(13).is_err());
        let neg = run_op("Neg", 13, &Attributes::default(), &[Some(&typed(TensorData::U8(vec![1])))]);
        assert!(neg.is_err(), "no unsigned Neg");
    }

    #[test]
    fn unary_math_and_variadics_of_f64_and_narrow_integers() {
        let one = |op: &str, d: TensorData| run_op(op, 18, &Attributes::default(), &[Some(&typed(d))]).unwrap();
        let x = TensorData::F64(vec![0.5, -2.0]);
        assert_eq!(one("Exp", x.clone())[0].data(), &TensorData::F64(vec![0.5f64.exp(), (-2f64).exp()]));
        assert_eq!(one("Round", TensorData::F64(vec![2.5, -0.5]))[0].data(), &TensorData::F64(vec![2.0, -0.0]));
        assert_eq!(one("IsNaN", TensorData::F64(vec![f64::NAN, 1.0]))[0].data(), &TensorData::Bool(vec![1, 0]));
        assert_eq!(one("Abs", TensorData::I16(vec![i16::MIN, -3]))[0].data(), &TensorData::I16(vec![i16::MIN, 3]));
        assert_eq!(one("Sign", TensorData::U32(vec![0, 9]))[0].data(), &TensorData::U32(vec![0, 1]));
        assert_eq!(one("BitwiseNot", TensorData::U8(vec![5]))[0].data(), &TensorData::U8(vec![250]));
        let e = one("Elu", x.clone());
        assert_eq!(e[0].data(), &TensorData::F64(vec![0.5, (-2f64).exp_m1()]), "computed in f64");
        let (a, b) = (typed(TensorData::F64(vec![1.0, 4.0])), typed(TensorData::F64(vec![3.0, 3.0, 3.0])));
        assert!(run_op("Mean", 13, &Attributes::default(), &[Some(&a), Some(&b)]).is_err(), "shapes 2 and 3");
        let b = Tensor::new(vec![1], TensorData::F64(vec![2.0])).unwrap();
        let m = run_op("Mean", 13, &Attributes::default(), &[Some(&a), Some(&b), Some(&b)]).unwrap();
        assert_eq!(m[0].data(), &TensorData::F64(vec![5.0 / 3.0, 8.0 / 3.0]));
        let (u, v) = (typed(TensorData::U8(vec![200, 3])), Tensor::new(vec![1], TensorData::U8(vec![100])).unwrap());
        let m = run_op("Min", 13, &Attributes::default(), &[Some(&u), Some(&v)]).unwrap();
        assert_eq!(m[0].data(), &TensorData::U8(vec![100, 3]));
        assert!(run_op("Celu", 12, &Attributes::default(), &[Some(&typed(x))]).is_err(), "Celu: f32 only");
    }

    #[test]
    fn variadic_mean_and_max_broadcast() {
        let a = f32s(&[2], &[1.0, 4.0]);
        let b = f32s(&[1], &[3.0]);
        let mean = run_op("Mean", 13, &Attributes::default(), &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(mean[0].data(), &TensorData::F32(vec![2.0, 3.5]));
        let max = run_op("Max", 13, &Attributes::default(), &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(max[0].data(), &TensorData::F32(vec![3.0, 4.0]));
    }

    #[test]
    fn where_clip_cast_and_activations() {
        let c = Tensor::new(vec![2], TensorData::Bool(vec![1, 0])).unwrap();
        let x = f32s(&[2], &[1.0, 2.0]);
        let y = f32s(&[], &[-1.0]);
        let w = run_op("Where", 16, &Attributes::default(), &[Some(&c), Some(&x), Some(&y)]).unwrap();
        assert_eq!(w[0].data(), &TensorData::F32(vec![1.0, -1.0]));

        let lo = f32s(&[], &[0.0]);
        let v = f32s(&[3], &[-1.0, 0.5, 9.0]);
        let hi = f32s(&[], &[6.0]);
        let clip = run_op("Clip", 13, &Attributes::default(), &[Some(&v), Some(&lo), Some(&hi)]).unwrap();
        assert_eq!(clip[0].data(), &TensorData::F32(vec![0.0, 0.5, 6.0]));

        let attrs = Attributes(vec![("to".into(), crate::ops::Attribute::Int(7))]);
        let cast = run_op("Cast", 13, &attrs, &[Some(&v)]).unwrap();
        assert_eq!(cast[0].data(), &TensorData::I64(vec![-1, 0, 9]));
        let half = Attributes(vec![("to".into(), crate::ops::Attribute::Int(10))]);
        let cast = run_op("Cast", 13, &half, &[Some(&v)]).unwrap();
        assert_eq!(cast[0].data(), &TensorData::F16(vec![0xbc00, 0x3800, 0x4880]), "-1, 0.5 and 9 in f16");
        let double = Attributes(vec![("to".into(), crate::ops::Attribute::Int(11))]);
        let cast = run_op("Cast", 13, &double, &[Some(&v)]).unwrap();
        assert_eq!(cast[0].data(), &TensorData::F64(vec![-1.0, 0.5, 9.0]));
        let bytes = Attributes(vec![("to".into(), crate::ops::Attribute::Int(2))]);
        let cast = run_op("Cast", 13, &bytes, &[Some(&v)]).unwrap();
        assert_eq!(cast[0].data(), &TensorData::U8(vec![0, 0, 9]), "saturating, as Rust's `as`");
        let bad = Attributes(vec![("to".into(), crate::ops::Attribute::Int(17))]);
        assert!(matches!(run_op("Cast", 13, &bad, &[Some(&v)]), Err(crate::error::OpError::Unsupported { .. })));

        let erf = run_op("Erf", 13, &Attributes::default(), &[Some(&f32s(&[2], &[0.0, 1.0]))]).unwrap();
        let TensorData::F32(e) = erf[0].data() else { panic!("f32") };
        assert!((e[1] - 0.842_700_8).abs() < 1e-6 && e[0] == 0.0);
        let gelu = run_op("Gelu", 20, &Attributes::default(), &[Some(&f32s(&[1], &[1.0]))]).unwrap();
        let TensorData::F32(g) = gelu[0].data() else { panic!("f32") };
        assert!((g[0] - 0.841_344_7).abs() < 1e-6);
        let nan = run_op("IsNaN", 13, &Attributes::default(), &[Some(&f32s(&[2], &[f32::NAN, 1.0]))]).unwrap();
        assert_eq!(nan[0].data(), &TensorData::Bool(vec![1, 0]));
    }

    #[test]
    fn clip_with_min_above_max_gives_max_and_integer_bases_pow() {
        let v = f32s(&[3], &[-1.0, f32::NAN, 9.0]);
        let (lo, hi) = (f32s(&[], &[2.0]), f32s(&[], &[1.0]));
        let clip = run_op("Clip", 13, &Attributes::default(), &[Some(&v), Some(&lo), Some(&hi)]).unwrap();
        let TensorData::F32(c) = clip[0].data() else { panic!("f32") };
        assert_eq!((c[0], c[2]), (1.0, 1.0));
        assert!(c[1].is_nan());
        let base = Tensor::from_i64s(vec![2, 3, -2]);
        let exp = Tensor::new(vec![3], TensorData::I32(vec![3, 2, 3])).unwrap();
        let p = run_op("Pow", 15, &Attributes::default(), &[Some(&base), Some(&exp)]).unwrap();
        assert_eq!(p[0].data(), &TensorData::I64(vec![8, 9, -8]));
        let fexp = f32s(&[1], &[2.0]);
        let p = run_op("Pow", 15, &Attributes::default(), &[Some(&base), Some(&fexp)]).unwrap();
        assert_eq!(p[0].data(), &TensorData::I64(vec![4, 9, 4]));
    }
}
