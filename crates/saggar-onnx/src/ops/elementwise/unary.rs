//! One-input elementwise ops without attributes (roots, exponentials, trigonometry, rounding, Sign,
//! BitwiseNot; Relu, Sigmoid, Tanh, Gelu), and the predicates IsNaN, IsInf and Not.

use saggar_shape::DType;

use super::element::{
    FLOATS, FloatMath, INTS, Int, SIGNED, UNSIGNED, c_lit, c_negate, c_suffix, c_type, each_float, each_int,
};
use super::{map, output_mismatch, require_dtype};
use crate::ops::gpu::{GpuCtx, GpuNode};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType};
use crate::tensor::{DataRef, NUMERIC_DTYPES, Number, TensorMut};

/// A one-input op on floats (and integers where [`Unary::dtypes`] says).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Unary {
    Sqrt,
    Erf,
    Tanh,
    Relu,
    Sigmoid,
    Neg,
    Abs,
    Exp,
    Log,
    Reciprocal,
    Gelu,
    GeluTanh,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    Floor,
    Ceil,
    /// To the nearest integer, halves to even (`rint` in the default rounding mode).
    Round,
    /// -1, 0 or 1; NaN stays NaN and a zero keeps its sign.
    Sign,
    /// Integers only.
    BitwiseNot,
}

/// A one-input op with the element types its signature takes at the model's opset.
#[derive(Debug)]
struct UnaryOp {
    kind: Unary,
    dtypes: Vec<DType>,
}

pub(super) fn unary(ctx: &mut NodeCtx<'_>, kind: Unary) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(UnaryOp { kind, dtypes: kind.dtypes(ctx.opset()) }))
}

pub(super) fn build_gelu(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    match ctx.string_or("approximate", "none")?.as_str() {
        "none" => unary(ctx, Unary::Gelu),
        "tanh" => unary(ctx, Unary::GeluTanh),
        other => Err(ctx.unsupported("approximate", other, "\"none\", \"tanh\"")),
    }
}

impl Unary {
    fn float<F: FloatMath>(self, x: F) -> F {
        let half = F::of(0.5);
        match self {
            Unary::Sqrt => x.sqrt(),
            Unary::Erf => x.erf(),
            Unary::Tanh => x.tanh(),
            Unary::Relu => x.max(F::ZERO),
            Unary::Sigmoid => F::ONE / (F::ONE + (-x).exp()),
            Unary::Neg => -x,
            Unary::Abs => x.abs(),
            Unary::Exp => x.exp(),
            Unary::Log => x.ln(),
            Unary::Reciprocal => F::ONE / x,
            Unary::Gelu => half * x * (F::ONE + (x * F::from_f64(std::f64::consts::FRAC_1_SQRT_2)).erf()),
            Unary::GeluTanh => {
                let c = F::from_f64(std::f64::consts::FRAC_2_PI.sqrt());
                half * x * (F::ONE + (c * (x + F::from_f64(0.044715) * x * x * x)).tanh())
            }
            Unary::Sin => x.sin(),
            Unary::Cos => x.cos(),
            Unary::Tan => x.tan(),
            Unary::Asin => x.asin(),
            Unary::Acos => x.acos(),
            Unary::Atan => x.atan(),
            Unary::Sinh => x.sinh(),
            Unary::Cosh => x.cosh(),
            Unary::Asinh => x.asinh(),
            Unary::Acosh => x.acosh(),
            Unary::Atanh => x.atanh(),
            Unary::Floor => x.floor(),
            Unary::Ceil => x.ceil(),
            Unary::Round => x.round_ties_even(),
            Unary::Sign => x.sign(),
            // Refused by `infer`; the identity keeps this total.
            Unary::BitwiseNot => x,
        }
    }

    fn int<T: Int>(self, x: T) -> T {
        match self {
            Unary::Relu => {
                if x > T::ZERO {
                    x
                } else {
                    T::ZERO
                }
            }
            Unary::Neg => x.neg(),
            Unary::Abs => x.abs(),
            Unary::Sign => x.sign(),
            Unary::BitwiseNot => !x,
            // Integers in Erf's opsets 9 to 12: through f64 (within [-1, 1], truncated).
            Unary::Erf => T::from_f64(libm::erf(x.to_f64())),
            // Refused by `infer`; the identity keeps this total.
            _ => x,
        }
    }

    /// The C++ expression of `$0` of element type `dtype` (see [`crate::ops::gpu::GpuNode`]).
    fn c_expr(self, dtype: DType) -> Result<String, OpError> {
        if !FLOATS.contains(&dtype) {
            let t = c_type(dtype)?;
            let unsigned = UNSIGNED.contains(&dtype);
            return Ok(match self {
                Unary::Relu => format!("($0 > 0 ? $0 : ({t})0)"),
                Unary::Neg => c_negate(dtype)?,
                Unary::Sign if unsigned => format!("({t})($0 > 0)"),
                Unary::Sign => format!("(({t})($0 > 0) - ({t})($0 < 0))"),
                Unary::BitwiseNot => "(~$0)".into(),
                Unary::Abs if unsigned => "$0".into(),
                Unary::Abs => format!("($0 < 0 ? {} : $0)", c_negate(dtype)?),
                Unary::Erf => format!("({t})erf((double)$0)"),
                _ => return Err(OpError::eval(format!("{self:?} takes float inputs, not {dtype}"))),
            });
        }
        let s = c_suffix(dtype);
        let function = match self {
            Unary::Sqrt => "sqrt",
            Unary::Erf => "erf",
            Unary::Tanh => "tanh",
            Unary::Abs => "fabs",
            Unary::Exp => "exp",
            Unary::Log => "log",
            Unary::Sin => "sin",
            Unary::Cos => "cos",
            Unary::Tan => "tan",
            Unary::Asin => "asin",
            Unary::Acos => "acos",
            Unary::Atan => "atan",
            Unary::Sinh => "sinh",
            Unary::Cosh => "cosh",
            Unary::Asinh => "asinh",
            Unary::Acosh => "acosh",
            Unary::Atanh => "atanh",
            Unary::Floor => "floor",
            Unary::Ceil => "ceil",
            Unary::Round => "rint",
            _ => "",
        };
        if !function.is_empty() {
            return Ok(format!("{function}{s}($0)"));
        }
        let (rsqrt2, c) = (std::f64::consts::FRAC_1_SQRT_2, std::f64::consts::FRAC_2_PI.sqrt());
        Ok(match self {
            Unary::Relu => format!("fmax{s}($0, 0.0{s})"),
            Unary::Sigmoid => format!("(1.0{s} / (1.0{s} + exp{s}(-$0)))"),
            Unary::Neg => "(-$0)".into(),
            Unary::Reciprocal => format!("(1.0{s} / $0)"),
            Unary::Gelu => format!("(0.5{s} * $0 * (1.0{s} + erf{s}($0 * {})))", c_lit(dtype, rsqrt2)),
            Unary::GeluTanh => format!(
                "(0.5{s} * $0 * (1.0{s} + tanh{s}({} * ($0 + {} * $0 * $0 * $0))))",
                c_lit(dtype, c),
                c_lit(dtype, 0.044715)
            ),
            Unary::Sign => format!("($0 > 0.0{s} ? 1.0{s} : ($0 < 0.0{s} ? -1.0{s} : $0))"),
            _ => return Err(OpError::eval(format!("{self:?} takes integer inputs, not {dtype}"))),
        })
    }

    /// The element types the op takes (and gives) at `opset`.
    fn dtypes(self, opset: u32) -> Vec<DType> {
        match self {
            // Signed integers from opset 14.
            Unary::Relu if opset >= 14 => [FLOATS, SIGNED].concat(),
            Unary::Neg => [FLOATS, SIGNED].concat(),
            Unary::Abs | Unary::Sign => NUMERIC_DTYPES.to_vec(),
            Unary::BitwiseNot => INTS.to_vec(),
            // Every numeric type in opsets 9 to 12.
            Unary::Erf if opset < 13 => NUMERIC_DTYPES.to_vec(),
            _ => FLOATS.to_vec(),
        }
    }
}

impl Op for UnaryOp {
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some(ctx.input(0).and_then(|x| self.kind.c_expr(x.dtype)).map(GpuNode::Elementwise))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        require_dtype(&format!("{:?}", self.kind), x.ty.dtype, &self.dtypes)?;
        Ok(vec![x.ty.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let (kind, out) = (self.kind, &mut outputs[0].data);
        each_float!(x.data, |v| map(v, out, |x| kind.float(x)), ints => {
            each_int!(ints, |v| map(v, out, |x| kind.int(x)), _ => Err(output_mismatch()))
        })
    }
}

/// A predicate of each element: a float (or bool, for `Not`) to bool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Predicate {
    IsNan,
    /// `IsInf`, true at the infinities of the signs asked for.
    IsInf {
        negative: bool,
        positive: bool,
    },
    Not,
}

#[derive(Debug)]
struct PredicateOp(Predicate);

pub(super) fn is_nan(_: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(PredicateOp(Predicate::IsNan)))
}

pub(super) fn not(_: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(PredicateOp(Predicate::Not)))
}

pub(super) fn build_is_inf(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let flag = |name: &str| match ctx.int_or(name, 1)? {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(ctx.unsupported(name, other, "0, 1")),
    };
    let (negative, positive) = (flag("detect_negative")?, flag("detect_positive")?);
    Ok(Box::new(PredicateOp(Predicate::IsInf { negative, positive })))
}

impl Predicate {
    fn test<T: Number>(self, x: T) -> bool {
        match self {
            #[allow(clippy::eq_op)] // NaN is the one value unequal to itself
            Predicate::IsNan => x != x,
            Predicate::IsInf { negative, positive } => (negative && x == T::LOWEST) || (positive && x == T::HIGHEST),
            Predicate::Not => false,
        }
    }

    /// The C++ expression for `$0` of float type `dtype`: the infinities are the values beyond the
    /// type's largest finite one.
    fn c_expr(self, dtype: DType) -> String {
        let max = c_lit(dtype, if dtype == DType::F64 { f64::MAX } else { f64::from(f32::MAX) });
        let test = match self {
            Predicate::IsNan => "$0 != $0".into(),
            Predicate::IsInf { negative: true, positive: true } => format!("$0 > {max} || $0 < -{max}"),
            Predicate::IsInf { negative: false, positive: true } => format!("$0 > {max}"),
            Predicate::IsInf { negative: true, positive: false } => format!("$0 < -{max}"),
            Predicate::IsInf { negative: false, positive: false } => "0".into(),
            Predicate::Not => "$0 == 0".into(),
        };
        format!("(unsigned char)({test})")
    }
}

impl Op for PredicateOp {
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some(ctx.input(0).map(|x| GpuNode::Elementwise(self.0.c_expr(x.dtype))))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        let (name, dtypes) = match self.0 {
            Predicate::IsNan => ("IsNaN", FLOATS),
            Predicate::IsInf { .. } => ("IsInf", FLOATS),
            Predicate::Not => ("Not", &[DType::Bool][..]),
        };
        require_dtype(name, x.ty.dtype, dtypes)?;
        Ok(vec![ValueType::new(DType::Bool, x.ty.dims.clone())])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let o = outputs[0].bools()?;
        let p = self.0;
        match x.data {
            DataRef::Bool(x) if p == Predicate::Not => o.iter_mut().zip(x).for_each(|(o, &x)| *o = u8::from(x == 0)),
            data if p != Predicate::Not => each_float!(data, |x| {
                o.iter_mut().zip(x).for_each(|(o, &x)| *o = u8::from(p.test(x)))
            }, _ => return Err(output_mismatch())),
            _ => return Err(output_mismatch()),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{f32s, run_op, values};
    use crate::ops::{Attribute, Attributes};
    use crate::tensor::{Tensor, TensorData};

    fn run1(op: &str, opset: u32, x: &Tensor) -> Tensor {
        run_op(op, opset, &Attributes::default(), &[Some(x)]).unwrap().remove(0)
    }

    #[test]
    fn trigonometry_and_hyperbolics_match_their_definitions() {
        let x = f32s(&[3], &[-0.5, 0.0, 0.5]);
        for (op, f) in [
            ("Sin", f32::sin as fn(f32) -> f32),
            ("Cos", f32::cos),
            ("Tan", f32::tan),
            ("Asin", f32::asin),
            ("Acos", f32::acos),
            ("Atan", f32::atan),
            ("Sinh", f32::sinh),
            ("Cosh", f32::cosh),
            ("Asinh", f32::asinh),
            ("Atanh", f32::atanh),
        ] {
            let got = run1(op, 9, &x);
            let want: Vec<f32> = values(&x).iter().map(|&v| f(v)).collect();
            assert_eq!(values(&got), want.as_slice(), "{op}");
        }
        assert!((values(&run1("Sin", 7, &f32s(&[1], &[std::f32::consts::FRAC_PI_2])))[0] - 1.0).abs() < 1e-7);
        assert!((values(&run1("Acos", 7, &f32s(&[1], &[0.5])))[0] - std::f32::consts::FRAC_PI_3).abs() < 1e-6);
        let acosh = run1("Acosh", 9, &f32s(&[3], &[1.0, 2.0, 0.5]));
        assert_eq!(values(&acosh)[0], 0.0);
        assert!((values(&acosh)[1] - 1.316_958).abs() < 1e-6);
        assert!(values(&acosh)[2].is_nan(), "outside the domain: NaN");
        assert!(run_op("Sinh", 8, &Attributes::default(), &[Some(&x)]).is_err(), "Sinh is from opset 9");
    }

    #[test]
    fn rounding_goes_half_to_even_and_floor_ceil_keep_the_sign() {
        let x = f32s(&[10], &[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, -2.6, 0.1, f32::NAN]);
        let round = run1("Round", 11, &x);
        assert_eq!(&values(&round)[..9], &[0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 2.0, -3.0, 0.0]);
        assert!(values(&round)[9].is_nan());
        assert_eq!(&values(&run1("Floor", 13, &x))[..9], &[0.0, 1.0, 2.0, -1.0, -2.0, -3.0, 2.0, -3.0, 0.0]);
        assert_eq!(&values(&run1("Ceil", 13, &x))[..9], &[1.0, 2.0, 3.0, -0.0, -1.0, -2.0, 3.0, -2.0, 1.0]);
        assert!(run_op("Round", 10, &Attributes::default(), &[Some(&x)]).is_err(), "Round is from opset 11");
    }

    #[test]
    fn sign_of_floats_and_integers() {
        let s = run1("Sign", 13, &f32s(&[5], &[-3.5, 0.0, 2.0, f32::NEG_INFINITY, f32::NAN]));
        assert_eq!(&values(&s)[..4], &[-1.0, 0.0, 1.0, -1.0]);
        assert!(values(&s)[4].is_nan());
        let i = run1("Sign", 13, &Tensor::from_i64s(vec![-7, 0, 9, i64::MIN]));
        assert_eq!(i.data(), &TensorData::I64(vec![-1, 0, 1, -1]));
        let i32s = Tensor::new(vec![3], TensorData::I32(vec![i32::MAX, 0, -1])).unwrap();
        assert_eq!(run1("Sign", 9, &i32s).data(), &TensorData::I32(vec![1, 0, -1]));
    }

    #[test]
    fn bitwise_not_flips_every_bit_of_integers_only() {
        let i = run1("BitwiseNot", 18, &Tensor::from_i64s(vec![0, -1, 5]));
        assert_eq!(i.data(), &TensorData::I64(vec![-1, 0, -6]));
        let i32s = Tensor::new(vec![1], TensorData::I32(vec![0x0f0f])).unwrap();
        assert_eq!(run1("BitwiseNot", 18, &i32s).data(), &TensorData::I32(vec![!0x0f0f]));
        assert!(run_op("BitwiseNot", 18, &Attributes::default(), &[Some(&f32s(&[1], &[1.0]))]).is_err());
        assert!(run_op("Sin", 18, &Attributes::default(), &[Some(&Tensor::from_i64s(vec![1]))]).is_err());
    }

    #[test]
    fn is_inf_detects_the_signs_asked_for() {
        let x = f32s(&[4], &[f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e38]);
        let attrs = |n: i64, p: i64| {
            Attributes(vec![
                ("detect_negative".into(), Attribute::Int(n)),
                ("detect_positive".into(), Attribute::Int(p)),
            ])
        };
        for ((n, p), want) in [((1, 1), [1, 1, 0, 0]), ((0, 1), [1, 0, 0, 0]), ((1, 0), [0, 1, 0, 0]), ((0, 0), [0; 4])]
        {
            let got = run_op("IsInf", 10, &attrs(n, p), &[Some(&x)]).unwrap();
            assert_eq!(got[0].data(), &TensorData::Bool(want.to_vec()), "detect_negative={n} detect_positive={p}");
        }
        let both = run1("IsInf", 20, &x);
        assert_eq!(both.data(), &TensorData::Bool(vec![1, 1, 0, 0]), "both by default");
        assert!(matches!(
            run_op("IsInf", 10, &attrs(2, 1), &[Some(&x)]),
            Err(crate::error::OpError::Unsupported { .. })
        ));
        assert!(run1_err("IsInf", &Tensor::from_i64s(vec![1])));
    }

    fn run1_err(op: &str, x: &Tensor) -> bool {
        run_op(op, 18, &Attributes::default(), &[Some(x)]).is_err()
    }

    #[test]
    fn expressions_name_the_c_functions_of_each_type() {
        use super::{Predicate, Unary};
        use saggar_shape::DType;
        assert_eq!(Unary::Round.c_expr(DType::F32).unwrap(), "rintf($0)");
        assert_eq!(Unary::Sign.c_expr(DType::I32).unwrap(), "((int)($0 > 0) - (int)($0 < 0))");
        assert_eq!(Unary::BitwiseNot.c_expr(DType::I64).unwrap(), "(~$0)");
        assert_eq!(Unary::Round.c_expr(DType::F64).unwrap(), "rint($0)");
        assert_eq!(Unary::Sign.c_expr(DType::U8).unwrap(), "(unsigned char)($0 > 0)");
        assert_eq!(Unary::Abs.c_expr(DType::U32).unwrap(), "$0");
        assert_eq!(Unary::Neg.c_expr(DType::I32).unwrap(), "(int)(0u - (unsigned)$0)");
        assert!(Unary::Exp.c_expr(DType::I8).is_err());
        assert_eq!(
            Predicate::IsInf { negative: false, positive: true }.c_expr(DType::F32),
            "(unsigned char)($0 > 3.4028235e38f)"
        );
        assert_eq!(
            Predicate::IsInf { negative: true, positive: false }.c_expr(DType::F64),
            "(unsigned char)($0 < -1.7976931348623157e308)"
        );
    }
}
