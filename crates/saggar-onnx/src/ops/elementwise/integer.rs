//! The binary ops of integer arithmetic, with numpy broadcasting and one element type for both
//! inputs: Mod (integers, and f32 with `fmod=1`), BitShift and BitwiseAnd/Or/Xor.
//!
//! Where C would trap or leave the result undefined, host and GPU define it alike: a remainder by 0
//! is 0 (what numpy gives, and what integer `Div` gives here), a remainder by -1 is 0 without
//! computing `MIN % -1`, and a shift by the type's width or more is 0.
//!
//! BitShift is defined for unsigned types only, which the tensor model does not have: it takes
//! `i32` and `i64` and shifts their bits as the unsigned type of their width would be shifted. A
//! right shift fills with zeros (logical, not arithmetic), and the shift amount is read as unsigned
//! too, so a negative amount is past the width and gives 0.

use saggar_shape::DType;

use super::{NUMBERS, broadcast2, output_mismatch, require_dtype, sym_pairs};
use crate::ops::gpu::{GpuCtx, GpuNode, ctype};
use crate::ops::shape_util::broadcast_all;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, SymInt, ValueType};
use crate::tensor::{DataMut, DataRef, TensorMut};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IntegerKind {
    /// Mod with `fmod=0`: the remainder of floor division, of the divisor's sign (Python's `%`).
    /// Integers only.
    Mod,
    /// Mod with `fmod=1`: the remainder of truncating division, of the dividend's sign (C's `%`
    /// and `fmod`).
    Fmod,
    ShiftLeft,
    ShiftRight,
    And,
    Or,
    Xor,
}

#[derive(Debug)]
struct IntegerOp(IntegerKind);

pub(super) fn bitwise(kind: IntegerKind) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(IntegerOp(kind)))
}

pub(super) fn build_mod(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    match ctx.int_or("fmod", 0)? {
        0 => bitwise(IntegerKind::Mod),
        1 => bitwise(IntegerKind::Fmod),
        other => Err(ctx.unsupported("fmod", other, "0, 1")),
    }
}

pub(super) fn build_bitshift(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let direction = ctx.string("direction")?.ok_or_else(|| OpError::attribute("direction", "required"))?;
    match direction.as_str() {
        "LEFT" => bitwise(IntegerKind::ShiftLeft),
        "RIGHT" => bitwise(IntegerKind::ShiftRight),
        other => Err(ctx.unsupported("direction", other, "\"LEFT\", \"RIGHT\"")),
    }
}

impl IntegerKind {
    fn name(self) -> &'static str {
        match self {
            IntegerKind::Mod | IntegerKind::Fmod => "Mod",
            IntegerKind::ShiftLeft | IntegerKind::ShiftRight => "BitShift",
            IntegerKind::And => "BitwiseAnd",
            IntegerKind::Or => "BitwiseOr",
            IntegerKind::Xor => "BitwiseXor",
        }
    }

    /// The C++ expression of `$0 op $1`, both of element type `dtype`, as `eval` computes it.
    fn c_expr(self, dtype: DType) -> Result<String, OpError> {
        if dtype == DType::F32 {
            return match self {
                IntegerKind::Fmod => Ok("fmodf($0, $1)".into()),
                _ => Err(OpError::eval(format!("{} takes integers", self.name()))),
            };
        }
        let t = ctype(dtype).ok_or_else(|| OpError::eval(format!("{dtype} is not supported on GPU")))?;
        let (u, width) = if dtype == DType::I32 { ("unsigned", 32) } else { ("unsigned long long", 64) };
        let zero_or = |rest: String| format!("(($1 == 0 || $1 == -1) ? ({t})0 : {rest})");
        Ok(match self {
            IntegerKind::Fmod => zero_or(format!("({t})($0 % $1)")),
            IntegerKind::Mod => {
                zero_or(format!("(($0 % $1 != 0 && ($0 % $1 < 0) != ($1 < 0)) ? ({t})($0 % $1 + $1) : ({t})($0 % $1))"))
            }
            IntegerKind::ShiftLeft => format!("(({u})$1 >= {width}u ? ({t})0 : ({t})(({u})$0 << ({u})$1))"),
            IntegerKind::ShiftRight => format!("(({u})$1 >= {width}u ? ({t})0 : ({t})(({u})$0 >> ({u})$1))"),
            IntegerKind::And => "($0 & $1)".into(),
            IntegerKind::Or => "($0 | $1)".into(),
            IntegerKind::Xor => "($0 ^ $1)".into(),
        })
    }
}

/// `$x op $y` for one integer type whose unsigned type of the same width is `$u`.
macro_rules! int_op {
    ($kind:expr, $x:expr, $y:expr, $u:ty) => {{
        let (x, y) = ($x, $y);
        // The amount read as unsigned: a negative one (and any past u32) is past the width.
        let amount = u32::try_from(y).ok();
        match $kind {
            IntegerKind::Fmod => x.checked_rem(y).unwrap_or(0),
            IntegerKind::Mod => {
                let r = x.checked_rem(y).unwrap_or(0);
                // r and y of opposite signs: r + y is between them.
                if r != 0 && (r < 0) != (y < 0) { r + y } else { r }
            }
            IntegerKind::ShiftLeft => amount.and_then(|s| x.checked_shl(s)).unwrap_or(0),
            IntegerKind::ShiftRight => amount.and_then(|s| (x as $u).checked_shr(s)).map_or(0, |v| v as _),
            IntegerKind::And => x & y,
            IntegerKind::Or => x | y,
            IntegerKind::Xor => x ^ y,
        }
    }};
}

impl Op for IntegerOp {
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some(ctx.input(0).and_then(|a| self.0.c_expr(a.dtype)).map(GpuNode::Elementwise))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (a, b) = (inputs.req(0)?, inputs.req(1)?);
        let name = self.0.name();
        match self.0 {
            IntegerKind::Mod if a.ty.dtype == DType::F32 => {
                return Err(OpError::infer("Mod of f32 inputs needs fmod=1 (the spec requires it for floats)"));
            }
            IntegerKind::Fmod | IntegerKind::Mod => require_dtype(name, a.ty.dtype, NUMBERS)?,
            _ => require_dtype(name, a.ty.dtype, &[DType::I64, DType::I32])?,
        }
        if a.ty.dtype != b.ty.dtype {
            return Err(OpError::infer(format!("{name} inputs differ in type: {} and {}", a.ty.dtype, b.ty.dtype)));
        }
        let dims = broadcast_all([a.ty.dims.as_slice(), b.ty.dims.as_slice()])?;
        Ok(vec![ValueType::new(a.ty.dtype, dims)])
    }

    fn dims_value(&self, inputs: &InferInputs<'_>) -> Option<Vec<SymInt>> {
        // Shape arithmetic (`(window - width % window) % window`, as Swin pads): known where both
        // sides are.
        let kind = self.0;
        sym_pairs(inputs, |x, y| {
            Some(match (x.as_int(), y.as_int()) {
                (Some(p), Some(q)) => SymInt::Int(int_op!(kind, p, q, u64)),
                _ => SymInt::Sym(crate::ops::UNKNOWN_DIM.into()),
            })
        })
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (a, b) = (inputs.req(0)?, inputs.req(1)?);
        let kind = self.0;
        let out = &mut outputs[0];
        let od = out.dims;
        match (a.data, b.data, &mut out.data) {
            (DataRef::F32(x), DataRef::F32(y), DataMut::F32(o)) if kind == IntegerKind::Fmod => {
                broadcast2(x, a.dims, y, b.dims, o, od, |x, y| x % y)
            }
            (DataRef::I64(x), DataRef::I64(y), DataMut::I64(o)) => {
                broadcast2(x, a.dims, y, b.dims, o, od, |x, y| int_op!(kind, x, y, u64))
            }
            (DataRef::I32(x), DataRef::I32(y), DataMut::I32(o)) => {
                broadcast2(x, a.dims, y, b.dims, o, od, |x, y| int_op!(kind, x, y, u32))
            }
            _ => Err(output_mismatch()),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{f32s, run_op, values};
    use crate::ops::{Attribute, Attributes};
    use crate::tensor::{Tensor, TensorData};

    fn i32s(v: &[i32]) -> Tensor {
        Tensor::new(vec![v.len()], TensorData::I32(v.to_vec())).unwrap()
    }

    fn fmod(v: i64) -> Attributes {
        Attributes(vec![("fmod".into(), Attribute::Int(v))])
    }

    fn shift(direction: &str) -> Attributes {
        Attributes(vec![("direction".into(), Attribute::String(direction.as_bytes().to_vec()))])
    }

    #[test]
    fn integer_mod_takes_the_divisors_sign_and_fmod_the_dividends() {
        let a = Tensor::from_i64s(vec![-4, 7, 5, -5, 3, i64::MIN, 9]);
        let b = Tensor::from_i64s(vec![3, -3, 2, -2, 0, -1, 3]);
        let m = run_op("Mod", 13, &fmod(0), &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(m[0].data(), &TensorData::I64(vec![2, -2, 1, -1, 0, 0, 0]), "by 0 and MIN by -1: 0");
        let f = run_op("Mod", 10, &fmod(1), &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(f[0].data(), &TensorData::I64(vec![-1, 1, 1, -1, 0, 0, 0]));
        let m32 = run_op("Mod", 13, &Attributes::default(), &[Some(&i32s(&[-7, i32::MIN])), Some(&i32s(&[5, -1]))]);
        assert_eq!(m32.unwrap()[0].data(), &TensorData::I32(vec![3, 0]));
    }

    #[test]
    fn float_mod_needs_fmod_and_broadcasts() {
        let a = f32s(&[2, 2], &[-4.3, 7.2, 5.0, -5.5]);
        let b = f32s(&[2], &[2.1, -3.4]);
        let f = run_op("Mod", 13, &fmod(1), &[Some(&a), Some(&b)]).unwrap();
        let want = [-4.3f32 % 2.1, 7.2 % -3.4, 5.0 % 2.1, -5.5 % -3.4];
        assert_eq!(values(&f[0]), &want);
        assert!(want[0] < 0.0 && want[1] > 0.0, "the dividend's sign");
        assert!(values(&run_op("Mod", 13, &fmod(1), &[Some(&a), Some(&f32s(&[1], &[0.0]))]).unwrap()[0])[0].is_nan());
        assert!(run_op("Mod", 13, &fmod(0), &[Some(&a), Some(&b)]).is_err(), "floats need fmod=1");
        assert!(matches!(
            run_op("Mod", 13, &fmod(2), &[Some(&a), Some(&b)]),
            Err(crate::error::OpError::Unsupported { .. })
        ));
        assert!(run_op("Mod", 9, &fmod(1), &[Some(&a), Some(&b)]).is_err(), "Mod is from opset 10");
        let ints = Tensor::from_i64s(vec![1]);
        assert!(run_op("Mod", 13, &fmod(1), &[Some(&ints), Some(&i32s(&[1]))]).is_err(), "one type");
    }

    #[test]
    fn bitshift_moves_unsigned_bits_and_gives_zero_past_the_width() {
        let x = Tensor::from_i64s(vec![1, -1, 16, 5, -8]);
        let s = Tensor::from_i64s(vec![63, 60, 2, 64, -1]);
        let l = run_op("BitShift", 11, &shift("LEFT"), &[Some(&x), Some(&s)]).unwrap();
        assert_eq!(l[0].data(), &TensorData::I64(vec![i64::MIN, -(1 << 60), 64, 0, 0]));
        let r = run_op("BitShift", 11, &shift("RIGHT"), &[Some(&x), Some(&s)]).unwrap();
        assert_eq!(r[0].data(), &TensorData::I64(vec![0, 15, 4, 0, 0]), "logical: -1 >> 60 is 15");
        let r32 = run_op("BitShift", 11, &shift("RIGHT"), &[Some(&i32s(&[-1, 7])), Some(&i32s(&[28, 1]))]);
        assert_eq!(r32.unwrap()[0].data(), &TensorData::I32(vec![15, 3]));
        assert!(run_op("BitShift", 11, &shift("UP"), &[Some(&x), Some(&s)]).is_err());
        assert!(
            run_op("BitShift", 11, &Attributes::default(), &[Some(&x), Some(&s)]).is_err(),
            "direction is required"
        );
        let f = f32s(&[1], &[1.0]);
        assert!(run_op("BitShift", 11, &shift("LEFT"), &[Some(&f), Some(&f)]).is_err());
    }

    #[test]
    fn bitwise_and_or_xor_broadcast_over_integers() {
        let a = Tensor::new(vec![2, 2], TensorData::I32(vec![0b1100, 0b1010, -1, 0])).unwrap();
        let b = i32s(&[0b1010, 0b0110]);
        for (op, want) in [
            ("BitwiseAnd", vec![0b1000, 0b0010, 0b1010, 0]),
            ("BitwiseOr", vec![0b1110, 0b1110, -1, 0b0110]),
            ("BitwiseXor", vec![0b0110, 0b1100, !0b1010, 0b0110]),
        ] {
            let got = run_op(op, 18, &Attributes::default(), &[Some(&a), Some(&b)]).unwrap();
            assert_eq!(got[0].data(), &TensorData::I32(want), "{op}");
        }
        let f = f32s(&[1], &[1.0]);
        assert!(run_op("BitwiseAnd", 18, &Attributes::default(), &[Some(&f), Some(&f)]).is_err());
        assert!(run_op("BitwiseOr", 17, &Attributes::default(), &[Some(&a), Some(&b)]).is_err(), "from opset 18");
    }

    #[test]
    fn mod_of_shape_vectors_is_known_where_both_sides_are() {
        use crate::ops::{InferInput, InferInputs, NodeCtx, SymInt, ValueType, lookup};
        use saggar_shape::DType;
        let attrs = Attributes::default();
        let op = (lookup("Mod", 13).unwrap().build)(&mut NodeCtx::for_test(&attrs, 13, 2)).unwrap();
        let (ta, tb) = (ValueType::fixed(DType::I64, &[2]), ValueType::fixed(DType::I64, &[1]));
        let (a, b) = ([SymInt::Int(-7), SymInt::Sym("w".into())], [SymInt::Int(4)]);
        let inputs = [
            Some(InferInput { ty: &ta, value: None, dims_value: Some(&a) }),
            Some(InferInput { ty: &tb, value: None, dims_value: Some(&b) }),
        ];
        let got = op.dims_value(&InferInputs::new(&inputs)).unwrap();
        assert_eq!(got, vec![SymInt::Int(1), SymInt::Sym(crate::ops::UNKNOWN_DIM.into())]);
    }

    #[test]
    fn expressions_guard_what_c_leaves_undefined() {
        use super::IntegerKind;
        use saggar_shape::DType;
        let m = IntegerKind::Fmod.c_expr(DType::I64).unwrap();
        assert!(m.starts_with("(($1 == 0 || $1 == -1) ? (long long)0 :"), "{m}");
        assert_eq!(IntegerKind::Fmod.c_expr(DType::F32).unwrap(), "fmodf($0, $1)");
        assert_eq!(
            IntegerKind::ShiftLeft.c_expr(DType::I32).unwrap(),
            "((unsigned)$1 >= 32u ? (int)0 : (int)((unsigned)$0 << (unsigned)$1))"
        );
        assert!(IntegerKind::Xor.c_expr(DType::F32).is_err());
    }
}
