//! The binary ops of integer arithmetic, with numpy broadcasting and one element type for both
//! inputs: Mod (every numeric type; floats only with `fmod=1`), BitShift (unsigned types) and
//! BitwiseAnd/Or/Xor (integer types).
//!
//! Where C would trap or leave the result undefined, host and GPU define it alike: a remainder by 0
//! is 0 (what numpy gives, and what integer `Div` gives here), a remainder by -1 is 0 without
//! computing `MIN % -1`, and a shift by the type's width or more is 0.

use saggar_shape::DType;

use super::element::{Arith, FLOATS, INTS, Int, SIGNED, UNSIGNED, c_suffix, c_type, each_float, each_int};
use super::{broadcast2, output_mismatch, require_dtype, sym_pairs};
use crate::ops::gpu::{GpuCtx, GpuNode};
use crate::ops::shape_util::broadcast_all;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, SymInt, ValueType};
use crate::tensor::{NUMERIC_DTYPES, TensorMut, typed_like, typed_like_mut};

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

/// The remainder of `x / y` of the divisor's sign: `r + y` where `r` and `y` have opposite signs.
fn floor_rem<T: Arith>(x: T, y: T) -> T {
    let r = x.rem(y);
    if r != T::ZERO && (r < T::ZERO) != (y < T::ZERO) { r.add(y) } else { r }
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

    fn dtypes(self) -> &'static [DType] {
        match self {
            IntegerKind::Mod | IntegerKind::Fmod => &NUMERIC_DTYPES,
            IntegerKind::ShiftLeft | IntegerKind::ShiftRight => UNSIGNED,
            _ => INTS,
        }
    }

    /// `x op y` on integers.
    fn int<T: Int>(self, x: T, y: T) -> T {
        match self {
            IntegerKind::Fmod => x.rem(y),
            IntegerKind::Mod => floor_rem(x, y),
            IntegerKind::ShiftLeft => x.shift(y, true),
            IntegerKind::ShiftRight => x.shift(y, false),
            IntegerKind::And => x & y,
            IntegerKind::Or => x | y,
            IntegerKind::Xor => x ^ y,
        }
    }

    /// The C++ expression of `$0 op $1` for operands of `dtype`, as `eval` computes it.
    fn c_expr(self, dtype: DType) -> Result<String, OpError> {
        if FLOATS.contains(&dtype) {
            return match self {
                IntegerKind::Fmod => Ok(format!("fmod{}($0, $1)", c_suffix(dtype))),
                _ => Err(OpError::eval(format!("{} takes integers", self.name()))),
            };
        }
        let t = c_type(dtype)?;
        // An unsigned `$1 == -1` would compare with the type's largest value.
        let zero_or = |rest: String| {
            let minus_one = if SIGNED.contains(&dtype) { " || $1 == -1" } else { "" };
            format!("(($1 == 0{minus_one}) ? ({t})0 : {rest})")
        };
        let width = 8 * dtype.size_bytes();
        Ok(match self {
            IntegerKind::Fmod => zero_or(format!("({t})($0 % $1)")),
            IntegerKind::Mod => {
                zero_or(format!("(($0 % $1 != 0 && ($0 % $1 < 0) != ($1 < 0)) ? ({t})($0 % $1 + $1) : ({t})($0 % $1))"))
            }
            IntegerKind::ShiftLeft => format!("($1 >= {width} ? ({t})0 : ({t})($0 << $1))"),
            IntegerKind::ShiftRight => format!("($1 >= {width} ? ({t})0 : ({t})($0 >> $1))"),
            IntegerKind::And => "($0 & $1)".into(),
            IntegerKind::Or => "($0 | $1)".into(),
            IntegerKind::Xor => "($0 ^ $1)".into(),
        })
    }
}

impl Op for IntegerOp {
    fn extents_from_shapes(&self) -> bool {
        true
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some(ctx.input(0).and_then(|a| self.0.c_expr(a.dtype)).map(GpuNode::Elementwise))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (a, b) = (inputs.req(0)?, inputs.req(1)?);
        let name = self.0.name();
        if self.0 == IntegerKind::Mod && FLOATS.contains(&a.ty.dtype) {
            return Err(OpError::infer(format!(
                "Mod of {} inputs needs fmod=1 (the spec requires it for floats)",
                a.ty.dtype
            )));
        }
        require_dtype(name, a.ty.dtype, self.0.dtypes())?;
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
                (Some(p), Some(q)) => SymInt::Int(kind.int(p, q)),
                _ => SymInt::Sym(crate::ops::UNKNOWN_DIM.into()),
            })
        })
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (a, b) = (inputs.req(0)?, inputs.req(1)?);
        let kind = self.0;
        let out = &mut outputs[0];
        let od = out.dims;
        each_int!(a.data, |x| {
            let y = typed_like(x, b.data)?;
            broadcast2(x, a.dims, y, b.dims, typed_like_mut(x, &mut out.data)?, od, |x, y| kind.int(x, y))
        }, floats => each_float!(floats, |x| {
            let y = typed_like(x, b.data)?;
            if kind != IntegerKind::Fmod {
                return Err(output_mismatch());
            }
            broadcast2(x, a.dims, y, b.dims, typed_like_mut(x, &mut out.data)?, od, Arith::rem)
        }, _ => Err(output_mismatch())))
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
    fn bitshift_of_unsigned_types_gives_zero_past_the_width() {
        let t = |d: TensorData| Tensor::new(vec![d.len()], d).unwrap();
        let (x, s) = (t(TensorData::U64(vec![1, u64::MAX, 16, 5])), t(TensorData::U64(vec![63, 60, 2, 64])));
        let l = run_op("BitShift", 11, &shift("LEFT"), &[Some(&x), Some(&s)]).unwrap();
        assert_eq!(l[0].data(), &TensorData::U64(vec![1 << 63, u64::MAX << 60, 64, 0]));
        let r = run_op("BitShift", 11, &shift("RIGHT"), &[Some(&x), Some(&s)]).unwrap();
        assert_eq!(r[0].data(), &TensorData::U64(vec![0, 15, 4, 0]));
        let (x, s) = (t(TensorData::U8(vec![0x81, 0x81, 3])), t(TensorData::U8(vec![1, 8, 7])));
        let l = run_op("BitShift", 11, &shift("LEFT"), &[Some(&x), Some(&s)]).unwrap();
        assert_eq!(l[0].data(), &TensorData::U8(vec![2, 0, 0x80]), "bits past the width are dropped");
        let r = run_op(
            "BitShift",
            11,
            &shift("RIGHT"),
            &[Some(&t(TensorData::U16(vec![0x8000]))), Some(&t(TensorData::U16(vec![15])))],
        );
        assert_eq!(r.unwrap()[0].data(), &TensorData::U16(vec![1]));
        assert!(run_op("BitShift", 11, &shift("UP"), &[Some(&x), Some(&s)]).is_err());
        assert!(
            run_op("BitShift", 11, &Attributes::default(), &[Some(&x), Some(&s)]).is_err(),
            "direction is required"
        );
        let i = Tensor::from_i64s(vec![1]);
        assert!(run_op("BitShift", 11, &shift("LEFT"), &[Some(&i), Some(&i)]).is_err(), "unsigned types only");
    }

    #[test]
    fn mod_of_narrow_and_unsigned_types() {
        let t = |d: TensorData| Tensor::new(vec![d.len()], d).unwrap();
        let (a, b) = (t(TensorData::I8(vec![-128, -7, 7, 5])), t(TensorData::I8(vec![-1, 3, -3, 0])));
        let m = run_op("Mod", 13, &Attributes::default(), &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(m[0].data(), &TensorData::I8(vec![0, 2, -2, 0]));
        let (a, b) = (t(TensorData::U32(vec![7, u32::MAX, 9])), t(TensorData::U32(vec![3, u32::MAX, 0])));
        for f in [0, 1] {
            let m = run_op("Mod", 13, &fmod(f), &[Some(&a), Some(&b)]).unwrap();
            assert_eq!(m[0].data(), &TensorData::U32(vec![1, 0, 0]), "fmod={f}: no sign, so one result");
        }
        let (a, b) = (t(TensorData::F64(vec![-7.5, 7.5])), t(TensorData::F64(vec![2.0, -2.0])));
        let m = run_op("Mod", 13, &fmod(1), &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(m[0].data(), &TensorData::F64(vec![-1.5, 1.5]));
        assert!(run_op("Mod", 13, &fmod(0), &[Some(&a), Some(&b)]).is_err(), "f64 needs fmod=1 too");
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
        let u = Tensor::new(vec![2], TensorData::U8(vec![0xf0, 0x3c])).unwrap();
        let x = run_op("BitwiseXor", 18, &Attributes::default(), &[Some(&u), Some(&u)]).unwrap();
        assert_eq!(x[0].data(), &TensorData::U8(vec![0, 0]));
        let o = run_op(
            "BitwiseOr",
            18,
            &Attributes::default(),
            &[Some(&u), Some(&u.clone().reshaped(vec![2, 1]).unwrap())],
        );
        assert_eq!(o.unwrap()[0].data(), &TensorData::U8(vec![0xf0, 0xfc, 0xfc, 0x3c]));
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
            IntegerKind::ShiftLeft.c_expr(DType::U32).unwrap(),
            "($1 >= 32 ? (unsigned int)0 : (unsigned int)($0 << $1))"
        );
        let u = IntegerKind::Mod.c_expr(DType::U64).unwrap();
        assert!(u.starts_with("(($1 == 0) ? (unsigned long long)0 :"), "no -1 for unsigned types: {u}");
        assert_eq!(IntegerKind::Fmod.c_expr(DType::F64).unwrap(), "fmod($0, $1)");
        assert!(IntegerKind::Xor.c_expr(DType::F32).is_err());
    }
}
