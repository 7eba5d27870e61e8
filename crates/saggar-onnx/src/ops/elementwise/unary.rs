//! One-input elementwise ops without attributes (roots, exponentials, trigonometry, rounding, Sign,
//! BitwiseNot; Relu, Sigmoid, Tanh, Gelu), and the predicates IsNaN, IsInf and Not.

use saggar_shape::DType;

use super::{NUMBERS, c_float, output_mismatch, require_dtype};
use crate::ops::gpu::{GpuCtx, GpuNode, ctype};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType};
use crate::tensor::{DataMut, DataRef, TensorMut};

/// A one-input op on f32 (and the signed integers where [`Unary::dtypes`] says).
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
    /// To the nearest integer, halves to even (`rintf` in the default rounding mode).
    Round,
    /// -1, 0 or 1; NaN stays NaN and a zero keeps its sign.
    Sign,
    /// Integers only.
    BitwiseNot,
}

#[derive(Debug)]
struct UnaryOp(Unary);

pub(super) fn unary(_: &mut NodeCtx<'_>, kind: Unary) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(UnaryOp(kind)))
}

pub(super) fn build_gelu(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    match ctx.string_or("approximate", "none")?.as_str() {
        "none" => Ok(Box::new(UnaryOp(Unary::Gelu))),
        "tanh" => Ok(Box::new(UnaryOp(Unary::GeluTanh))),
        other => Err(ctx.unsupported("approximate", other, "\"none\", \"tanh\"")),
    }
}

impl Unary {
    fn f32(self, x: f32) -> f32 {
        match self {
            Unary::Sqrt => x.sqrt(),
            Unary::Erf => libm::erff(x),
            Unary::Tanh => x.tanh(),
            Unary::Relu => x.max(0.0),
            Unary::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Unary::Neg => -x,
            Unary::Abs => x.abs(),
            Unary::Exp => x.exp(),
            Unary::Log => x.ln(),
            Unary::Reciprocal => 1.0 / x,
            Unary::Gelu => 0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2)),
            Unary::GeluTanh => {
                let c = (2.0f32 / std::f32::consts::PI).sqrt();
                0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
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
            Unary::Sign => {
                if x > 0.0 {
                    1.0
                } else if x < 0.0 {
                    -1.0
                } else {
                    x
                }
            }
            // Refused by `infer`; the identity keeps this total.
            Unary::BitwiseNot => x,
        }
    }

    /// The C++ expression of `$0` of element type `dtype` (see [`crate::ops::gpu::GpuNode`]).
    fn c_expr(self, dtype: DType) -> Result<String, OpError> {
        if dtype != DType::F32 {
            let t = ctype(dtype).ok_or_else(|| OpError::eval(format!("{dtype} is not supported on GPU")))?;
            return Ok(match self {
                Unary::Relu => "($0 > 0 ? $0 : ($0 - $0))".into(),
                Unary::Neg => "(-$0)".into(),
                Unary::Sign => format!("(({t})($0 > 0) - ({t})($0 < 0))"),
                Unary::BitwiseNot => "(~$0)".into(),
                Unary::Abs => "($0 < 0 ? -$0 : $0)".into(),
                _ => return Err(OpError::eval(format!("{self:?} takes f32 inputs, not {dtype}"))),
            });
        }
        Ok(match self {
            Unary::Sqrt => "sqrtf($0)",
            Unary::Erf => "erff($0)",
            Unary::Tanh => "tanhf($0)",
            Unary::Relu => "fmaxf($0, 0.0f)",
            Unary::Sigmoid => "(1.0f / (1.0f + expf(-$0)))",
            Unary::Neg => "(-$0)",
            Unary::Abs => "fabsf($0)",
            Unary::Exp => "expf($0)",
            Unary::Log => "logf($0)",
            Unary::Reciprocal => "(1.0f / $0)",
            Unary::Gelu => "(0.5f * $0 * (1.0f + erff($0 * 0.7071067811865476f)))",
            Unary::GeluTanh => "(0.5f * $0 * (1.0f + tanhf(0.7978845608028654f * ($0 + 0.044715f * $0 * $0 * $0))))",
            Unary::Sin => "sinf($0)",
            Unary::Cos => "cosf($0)",
            Unary::Tan => "tanf($0)",
            Unary::Asin => "asinf($0)",
            Unary::Acos => "acosf($0)",
            Unary::Atan => "atanf($0)",
            Unary::Sinh => "sinhf($0)",
            Unary::Cosh => "coshf($0)",
            Unary::Asinh => "asinhf($0)",
            Unary::Acosh => "acoshf($0)",
            Unary::Atanh => "atanhf($0)",
            Unary::Floor => "floorf($0)",
            Unary::Ceil => "ceilf($0)",
            Unary::Round => "rintf($0)",
            Unary::Sign => "($0 > 0.0f ? 1.0f : ($0 < 0.0f ? -1.0f : $0))",
            Unary::BitwiseNot => return Err(OpError::eval("BitwiseNot takes integer inputs, not f32")),
        }
        .into())
    }

    /// The element types the op takes (and gives).
    fn dtypes(self) -> &'static [DType] {
        match self {
            Unary::Relu | Unary::Neg | Unary::Abs | Unary::Sign => NUMBERS,
            Unary::BitwiseNot => &[DType::I64, DType::I32],
            _ => &[DType::F32],
        }
    }
}

macro_rules! int_unary {
    ($kind:expr, $x:expr) => {
        match $kind {
            Unary::Relu => $x.max(0),
            Unary::Neg => $x.wrapping_neg(),
            Unary::Sign => $x.signum(),
            Unary::BitwiseNot => !$x,
            _ => $x.wrapping_abs(),
        }
    };
}

impl Op for UnaryOp {
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some(ctx.input(0).and_then(|x| self.0.c_expr(x.dtype)).map(GpuNode::Elementwise))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        require_dtype(&format!("{:?}", self.0), x.ty.dtype, self.0.dtypes())?;
        Ok(vec![x.ty.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let kind = self.0;
        let ints = kind.dtypes() != [DType::F32];
        match (x.data, &mut outputs[0].data) {
            (DataRef::F32(x), DataMut::F32(o)) if kind.dtypes().contains(&DType::F32) => {
                o.iter_mut().zip(x).for_each(|(o, &x)| *o = kind.f32(x))
            }
            (DataRef::I64(x), DataMut::I64(o)) if ints => {
                o.iter_mut().zip(x).for_each(|(o, &x)| *o = int_unary!(kind, x))
            }
            (DataRef::I32(x), DataMut::I32(o)) if ints => {
                o.iter_mut().zip(x).for_each(|(o, &x)| *o = int_unary!(kind, x))
            }
            _ => return Err(output_mismatch()),
        }
        Ok(())
    }
}

/// A predicate of each element: f32 (or bool, for `Not`) to bool.
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
    fn f32(self, x: f32) -> bool {
        match self {
            Predicate::IsNan => x.is_nan(),
            Predicate::IsInf { negative, positive } => {
                (negative && x == f32::NEG_INFINITY) || (positive && x == f32::INFINITY)
            }
            Predicate::Not => false,
        }
    }

    fn c_expr(self) -> String {
        let test = match self {
            Predicate::IsNan => "$0 != $0".into(),
            Predicate::IsInf { negative: true, positive: true } => {
                format!("$0 == {} || $0 == {}", c_float(f32::INFINITY), c_float(f32::NEG_INFINITY))
            }
            Predicate::IsInf { negative: false, positive: true } => format!("$0 == {}", c_float(f32::INFINITY)),
            Predicate::IsInf { negative: true, positive: false } => format!("$0 == {}", c_float(f32::NEG_INFINITY)),
            Predicate::IsInf { negative: false, positive: false } => "0".into(),
            Predicate::Not => "$0 == 0".into(),
        };
        format!("(unsigned char)({test})")
    }
}

impl Op for PredicateOp {
    fn gpu(&self, _: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some(Ok(GpuNode::Elementwise(self.0.c_expr())))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        let (name, dtype) = match self.0 {
            Predicate::IsNan => ("IsNaN", DType::F32),
            Predicate::IsInf { .. } => ("IsInf", DType::F32),
            Predicate::Not => ("Not", DType::Bool),
        };
        require_dtype(name, x.ty.dtype, &[dtype])?;
        Ok(vec![ValueType::new(DType::Bool, x.ty.dims.clone())])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let o = outputs[0].bools()?;
        match (self.0, x.data) {
            (Predicate::Not, DataRef::Bool(x)) => o.iter_mut().zip(x).for_each(|(o, &x)| *o = u8::from(x == 0)),
            (p, DataRef::F32(x)) if p != Predicate::Not => {
                o.iter_mut().zip(x).for_each(|(o, &x)| *o = u8::from(p.f32(x)))
            }
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
        assert_eq!(
            Predicate::IsInf { negative: false, positive: true }.c_expr(),
            "(unsigned char)($0 == __int_as_float(2139095040))"
        );
    }
}
