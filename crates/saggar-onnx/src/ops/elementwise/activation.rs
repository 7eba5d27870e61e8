//! Activations: the float ones of one input and their attributes (HardSigmoid, HardSwish, LeakyRelu,
//! Elu, Selu, Celu, Softplus, Softsign, Mish, ThresholdedRelu, Swish), Shrink (every numeric type)
//! and PRelu (a slope tensor broadcast to the input's shape). Where numpy's reference propagates
//! NaN, so do these: the clamps are comparisons, not `fmin`/`fmax`.

use saggar_shape::{DType, Dim};

use super::element::{Arith, FLOATS, FloatMath, c_float_to_int, c_lit, c_suffix, c_wrapping, each_float};
use super::{broadcast2, map, output_mismatch, require_dtype};
use crate::ops::gpu::{GpuCtx, GpuNode};
use crate::ops::shape_util::fmt_dims;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType};
use crate::tensor::{NUMERIC_DTYPES, Number, TensorMut, each_number, typed_like, typed_like_mut};

/// A one-input float activation with its attributes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Activation {
    /// `max(0, min(1, alpha * x + beta))`.
    HardSigmoid { alpha: f32, beta: f32 },
    /// `x * HardSigmoid(x)` with alpha 1/6 and beta 0.5.
    HardSwish,
    /// `x` where `x > 0`, else `alpha * x`.
    LeakyRelu { alpha: f32 },
    /// `x` where `x > 0`, else `alpha * (exp(x) - 1)`.
    Elu { alpha: f32 },
    /// `gamma * (x` where `x > 0`, else `alpha * (exp(x) - 1))`.
    Selu { alpha: f32, gamma: f32 },
    /// `max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`; alpha is not 0.
    Celu { alpha: f32 },
    /// `log(1 + exp(x))`, computed as `max(x, 0) + log1p(exp(-|x|))` so that it overflows nowhere.
    Softplus,
    /// `x / (1 + |x|)`.
    Softsign,
    /// `x * tanh(softplus(x))`.
    Mish,
    /// `x` where `x > alpha`, else 0.
    ThresholdedRelu { alpha: f32 },
    /// `x * sigmoid(alpha * x)`.
    Swish { alpha: f32 },
}

/// HardSwish's HardSigmoid (the spec's alpha and beta).
const HARD_SWISH: (f64, f64) = (1.0 / 6.0, 0.5);

#[derive(Debug)]
struct ActivationOp(Activation);

/// Clamps `t` to [0, 1]; NaN stays NaN.
fn unit_clamp<F: FloatMath>(t: F) -> F {
    if t < F::ZERO {
        F::ZERO
    } else if t > F::ONE {
        F::ONE
    } else {
        t
    }
}

fn softplus<F: FloatMath>(x: F) -> F {
    x.max(F::ZERO) + (-x.abs()).exp().ln_1p()
}

/// The C++ of [`softplus`] for functions and literals of suffix `s`.
fn softplus_expr(s: &str) -> String {
    format!("(fmax{s}($0, 0.0{s}) + log1p{s}(exp{s}(-fabs{s}($0))))")
}

/// The C++ of `unit_clamp(alpha * $0 + beta)` for constants `alpha` and `beta` of suffix `s`.
fn hard_sigmoid_expr(s: &str, alpha: String, beta: String) -> String {
    let t = format!("({alpha} * $0 + {beta})");
    format!("({t} < 0.0{s} ? 0.0{s} : ({t} > 1.0{s} ? 1.0{s} : {t}))")
}

impl Activation {
    pub(super) fn boxed(self) -> Result<Box<dyn Op>, OpError> {
        Ok(Box::new(ActivationOp(self)))
    }

    pub(super) fn build_hard_sigmoid(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
        Activation::HardSigmoid { alpha: ctx.float_or("alpha", 0.2)?, beta: ctx.float_or("beta", 0.5)? }.boxed()
    }

    pub(super) fn build_leaky_relu(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
        Activation::LeakyRelu { alpha: ctx.float_or("alpha", 0.01)? }.boxed()
    }

    pub(super) fn build_elu(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
        Activation::Elu { alpha: ctx.float_or("alpha", 1.0)? }.boxed()
    }

    pub(super) fn build_selu(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
        // The spec's defaults 1.67326319217681884765625 and 1.05070102214813232421875 (f32 values).
        let alpha = ctx.float_or("alpha", 1.673_263_2)?;
        let gamma = ctx.float_or("gamma", 1.050_701)?;
        Activation::Selu { alpha, gamma }.boxed()
    }

    pub(super) fn build_thresholded_relu(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
        Activation::ThresholdedRelu { alpha: ctx.float_or("alpha", 1.0)? }.boxed()
    }

    pub(super) fn build_swish(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
        Activation::Swish { alpha: ctx.float_or("alpha", 1.0)? }.boxed()
    }

    fn name(self) -> &'static str {
        match self {
            Activation::HardSigmoid { .. } => "HardSigmoid",
            Activation::HardSwish => "HardSwish",
            Activation::LeakyRelu { .. } => "LeakyRelu",
            Activation::Elu { .. } => "Elu",
            Activation::Selu { .. } => "Selu",
            Activation::Celu { .. } => "Celu",
            Activation::Softplus => "Softplus",
            Activation::Softsign => "Softsign",
            Activation::Mish => "Mish",
            Activation::ThresholdedRelu { .. } => "ThresholdedRelu",
            Activation::Swish { .. } => "Swish",
        }
    }

    fn apply<F: FloatMath>(self, x: F) -> F {
        let (zero, one) = (F::ZERO, F::ONE);
        match self {
            Activation::HardSigmoid { alpha, beta } => unit_clamp(F::of(alpha) * x + F::of(beta)),
            Activation::HardSwish => x * unit_clamp(F::from_f64(HARD_SWISH.0) * x + F::from_f64(HARD_SWISH.1)),
            Activation::LeakyRelu { alpha } => {
                if x > zero {
                    x
                } else {
                    F::of(alpha) * x
                }
            }
            Activation::Elu { alpha } => {
                if x > zero {
                    x
                } else {
                    F::of(alpha) * x.exp_m1()
                }
            }
            Activation::Selu { alpha, gamma } => F::of(gamma) * if x > zero { x } else { F::of(alpha) * x.exp_m1() },
            // For x > 0 the second term of the definition is 0 and for x <= 0 the first is, whatever
            // alpha's sign.
            Activation::Celu { alpha } => {
                if x > zero {
                    x
                } else {
                    F::of(alpha) * (x / F::of(alpha)).exp_m1()
                }
            }
            Activation::Softplus => softplus(x),
            Activation::Softsign => x / (one + x.abs()),
            Activation::Mish => x * softplus(x).tanh(),
            Activation::ThresholdedRelu { alpha } => {
                if x > F::of(alpha) {
                    x
                } else {
                    zero
                }
            }
            Activation::Swish { alpha } => x * (one / (one + (-(F::of(alpha) * x)).exp())),
        }
    }

    /// The C++ expression of `$0` of float type `dtype`, computing what [`Activation::apply`] does.
    fn c_expr(self, dtype: DType) -> String {
        let s = c_suffix(dtype);
        let k = |v: f32| c_lit(dtype, f64::from(v));
        match self {
            Activation::HardSigmoid { alpha, beta } => hard_sigmoid_expr(s, k(alpha), k(beta)),
            Activation::HardSwish => {
                let (alpha, beta) = (c_lit(dtype, HARD_SWISH.0), c_lit(dtype, HARD_SWISH.1));
                format!("($0 * {})", hard_sigmoid_expr(s, alpha, beta))
            }
            Activation::LeakyRelu { alpha } => format!("($0 > 0.0{s} ? $0 : {} * $0)", k(alpha)),
            Activation::Elu { alpha } => format!("($0 > 0.0{s} ? $0 : {} * expm1{s}($0))", k(alpha)),
            Activation::Selu { alpha, gamma } => {
                format!("({} * ($0 > 0.0{s} ? $0 : {} * expm1{s}($0)))", k(gamma), k(alpha))
            }
            Activation::Celu { alpha } => format!("($0 > 0.0{s} ? $0 : {a} * expm1{s}($0 / {a}))", a = k(alpha)),
            Activation::Softplus => softplus_expr(s),
            Activation::Softsign => format!("($0 / (1.0{s} + fabs{s}($0)))"),
            Activation::Mish => format!("($0 * tanh{s}{})", softplus_expr(s)),
            Activation::ThresholdedRelu { alpha } => format!("($0 > {} ? $0 : 0.0{s})", k(alpha)),
            Activation::Swish { alpha } => format!("($0 * (1.0{s} / (1.0{s} + exp{s}(-({} * $0)))))", k(alpha)),
        }
    }
}

pub(super) fn build_celu(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let alpha = ctx.float_or("alpha", 1.0)?;
    if alpha == 0.0 {
        return Err(ctx.unsupported("alpha", alpha, "a nonzero value (Celu divides by alpha)"));
    }
    Activation::Celu { alpha }.boxed()
}

impl Op for ActivationOp {
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some(ctx.input(0).map(|x| GpuNode::Elementwise(self.0.c_expr(x.dtype))))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        // Celu takes f32 only up to opset 27.
        let dtypes = if matches!(self.0, Activation::Celu { .. }) { &FLOATS[..1] } else { FLOATS };
        require_dtype(self.0.name(), x.ty.dtype, dtypes)?;
        Ok(vec![x.ty.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (kind, out) = (self.0, &mut outputs[0].data);
        each_float!(inputs.req(0)?.data, |x| map(x, out, |x| kind.apply(x)), _ => Err(output_mismatch()))
    }
}

/// `Shrink`: `x + bias` where `x < -lambd`, `x - bias` where `x > lambd`, else 0. Integer inputs
/// are computed in f64 (as numpy's reference does) and converted back truncating toward zero,
/// saturating at the type's bounds (NaN, from a NaN bias, gives 0).
#[derive(Debug)]
struct Shrink {
    bias: f32,
    lambd: f32,
}

pub(super) fn build_shrink(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Shrink { bias: ctx.float_or("bias", 0.0)?, lambd: ctx.float_or("lambd", 0.5)? }))
}

impl Shrink {
    fn apply<T: Arith>(&self, x: T) -> T {
        if !T::FLOAT {
            return T::from_f64(self.apply(x.to_f64()));
        }
        let (bias, lambd) = (T::from_f64(f64::from(self.bias)), T::from_f64(f64::from(self.lambd)));
        if x < lambd.neg() {
            x.add(bias)
        } else if x > lambd {
            x.sub(bias)
        } else {
            T::ZERO
        }
    }

    fn c_expr(&self, dtype: DType) -> Result<String, OpError> {
        let float = FLOATS.contains(&dtype);
        // Integers compute in double.
        let (d, x) = if float { (dtype, "$0") } else { (DType::F64, "(double)$0") };
        let s = c_suffix(d);
        let k = |v: f32| c_lit(d, f64::from(v));
        let (bias, lambd, neg) = (k(self.bias), k(self.lambd), k(-self.lambd));
        let r = format!("({x} < {neg} ? {x} + {bias} : ({x} > {lambd} ? {x} - {bias} : 0.0{s}))");
        if float { Ok(r) } else { c_float_to_int(dtype, "double", &r) }
    }
}

impl Op for Shrink {
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some(ctx.input(0).and_then(|x| self.c_expr(x.dtype)).map(GpuNode::Elementwise))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        require_dtype("Shrink", x.ty.dtype, &NUMERIC_DTYPES)?;
        Ok(vec![x.ty.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let out = &mut outputs[0].data;
        each_number!(inputs.req(0)?.data, |x| map(x, out, |x| self.apply(x)), _ => Err(output_mismatch()))
    }
}

/// `PRelu(x, slope)`: `x` where `x > 0`, else `x * slope`, the slope broadcast to `x`'s shape
/// (unidirectionally). Floats; from opset 9 also i32, i64, u32 and u64 (products wrap).
#[derive(Debug)]
struct PRelu {
    integers: bool,
}

pub(super) fn build_prelu(_: &mut NodeCtx<'_>, integers: bool) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(PRelu { integers }))
}

fn prelu<T: Number>(x: T, slope: T) -> T {
    if x > T::ZERO { x } else { x.mul(slope) }
}

/// Fails where `slope` certainly does not broadcast to `x` (a symbolic extent is checked at run time).
fn check_unidirectional(x: &[Dim], slope: &[Dim]) -> Result<(), OpError> {
    let clash = slope
        .iter()
        .rev()
        .zip(x.iter().rev())
        .any(|(s, d)| matches!((s.as_fixed(), d.as_fixed()), (Some(p), Some(q)) if p != 1 && p != q));
    if slope.len() > x.len() || clash {
        return Err(OpError::infer(format!(
            "PRelu's slope of shape {} does not broadcast to the input's shape {}",
            fmt_dims(slope),
            fmt_dims(x)
        )));
    }
    Ok(())
}

impl Op for PRelu {
    fn extents_from_shapes(&self) -> bool {
        true
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        let expr = |d: DType| Ok(format!("($0 > 0 ? $0 : {})", c_wrapping(d, "*")?));
        Some(ctx.input(0).and_then(|x| expr(x.dtype)).map(GpuNode::Elementwise))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (x, slope) = (inputs.req(0)?, inputs.req(1)?);
        let ints: &[DType] = if self.integers { &[DType::I32, DType::I64, DType::U32, DType::U64] } else { &[] };
        require_dtype("PRelu", x.ty.dtype, &[FLOATS, ints].concat())?;
        if slope.ty.dtype != x.ty.dtype {
            return Err(OpError::infer(format!("PRelu's slope is {}, its input {}", slope.ty.dtype, x.ty.dtype)));
        }
        check_unidirectional(&x.ty.dims, &slope.ty.dims)?;
        Ok(vec![x.ty.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (x, s) = (inputs.req(0)?, inputs.req(1)?);
        let out = &mut outputs[0];
        let od = out.dims;
        if x.dims != od {
            return Err(OpError::eval(format!("PRelu's input {:?} differs from its output {od:?}", x.dims)));
        }
        each_number!(x.data, |a| {
            let b = typed_like(a, s.data)?;
            broadcast2(a, x.dims, b, s.dims, typed_like_mut(a, &mut out.data)?, od, prelu)
        }, _ => Err(output_mismatch()))
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{f32s, run_op, values};
    use crate::ops::{Attribute, Attributes};
    use crate::tensor::{Tensor, TensorData};

    fn floats(pairs: &[(&str, f32)]) -> Attributes {
        Attributes(pairs.iter().map(|(k, v)| (k.to_string(), Attribute::Float(*v))).collect())
    }

    /// `op` at `opset` on `x` with `attrs`, against `want` within 1e-6 (NaN against NaN).
    fn check(op: &str, opset: u32, attrs: &[(&str, f32)], x: &[f32], want: &[f32]) {
        let out = run_op(op, opset, &floats(attrs), &[Some(&f32s(&[x.len()], x))]).unwrap();
        for (k, (&g, &w)) in values(&out[0]).iter().zip(want).enumerate() {
            assert!((g.is_nan() && w.is_nan()) || (g - w).abs() <= 1e-6, "{op} {attrs:?} element {k}: {g} vs {w}");
        }
    }

    #[test]
    fn hard_sigmoid_and_hard_swish_clamp_and_keep_nan() {
        let nan = f32::NAN;
        check("HardSigmoid", 6, &[], &[-3.0, 0.0, 1.0, 3.0, nan], &[0.0, 0.5, 0.7, 1.0, nan]);
        check("HardSigmoid", 6, &[("alpha", 0.5), ("beta", 0.25)], &[-1.0, 1.0, 2.0], &[0.0, 0.75, 1.0]);
        let third = -1.0 / 3.0;
        check(
            "HardSwish",
            14,
            &[],
            &[-4.0, -1.0, 0.0, 1.0, 3.0, 4.0, nan],
            &[0.0, third, 0.0, 2.0 / 3.0, 3.0, 4.0, nan],
        );
        assert!(run_op("HardSwish", 13, &Attributes::default(), &[Some(&f32s(&[1], &[1.0]))]).is_err());
    }

    #[test]
    fn relu_relatives_take_their_attributes() {
        check("LeakyRelu", 16, &[], &[-2.0, 0.0, 3.0], &[-0.02, 0.0, 3.0]);
        check("LeakyRelu", 6, &[("alpha", 0.1)], &[-2.0, 3.0], &[-0.2, 3.0]);
        let e = (-1.0f32).exp() - 1.0;
        check("Elu", 6, &[], &[-1.0, 0.0, 2.0], &[e, 0.0, 2.0]);
        check("Elu", 6, &[("alpha", 2.0)], &[-1.0], &[2.0 * e]);
        let (alpha, gamma) = (1.673_263_2f32, 1.050_701f32);
        assert_eq!(Ok(alpha), "1.67326319217681884765625".parse(), "the spec's default, exactly");
        assert_eq!(Ok(gamma), "1.05070102214813232421875".parse(), "the spec's default, exactly");
        check("Selu", 6, &[], &[-1.0, 2.0], &[gamma * alpha * e, gamma * 2.0]);
        check("Selu", 6, &[("alpha", 2.0), ("gamma", 3.0)], &[-1.0, 2.0], &[6.0 * e, 6.0]);
        check("Celu", 12, &[], &[-1.0, 0.0, 3.0], &[e, 0.0, 3.0]);
        check("Celu", 12, &[("alpha", 2.0)], &[-2.0, 3.0], &[2.0 * e, 3.0]);
        check("ThresholdedRelu", 10, &[], &[0.5, 1.0, 2.0], &[0.0, 0.0, 2.0]);
        check("ThresholdedRelu", 10, &[("alpha", 0.2)], &[0.1, 0.5, -1.0], &[0.0, 0.5, 0.0]);
        let celu0 = run_op("Celu", 12, &floats(&[("alpha", 0.0)]), &[Some(&f32s(&[1], &[1.0]))]);
        assert!(matches!(celu0, Err(crate::error::OpError::Unsupported { .. })), "Celu divides by alpha");
        let ints = Tensor::from_i64s(vec![1]);
        assert!(run_op("Elu", 6, &Attributes::default(), &[Some(&ints)]).is_err(), "f32 only");
    }

    #[test]
    fn softplus_softsign_and_mish_stay_finite_where_the_naive_forms_overflow() {
        let ln2 = std::f32::consts::LN_2;
        check("Softplus", 1, &[], &[0.0, 100.0, -20.0, 1.0], &[ln2, 100.0, 2.061_153_6e-9, 1.313_261_7]);
        check("Softsign", 1, &[], &[-1.0, 0.0, 3.0], &[-0.5, 0.0, 0.75]);
        check("Mish", 18, &[], &[1.0, -1.0, 0.0, 100.0], &[0.865_098_4, -0.303_401_4, 0.0, 100.0]);
        assert!(run_op("Mish", 17, &Attributes::default(), &[Some(&f32s(&[1], &[1.0]))]).is_err());
    }

    #[test]
    fn swish_is_x_times_the_sigmoid_of_alpha_x() {
        let s = |v: f32| 1.0 / (1.0 + (-v).exp());
        check("Swish", 24, &[], &[-2.0, 0.0, 1.5, 100.0, -100.0], &[-2.0 * s(-2.0), 0.0, 1.5 * s(1.5), 100.0, 0.0]);
        check("Swish", 24, &[("alpha", 0.5)], &[-2.0, 3.0], &[-2.0 * s(-1.0), 3.0 * s(1.5)]);
        check("Swish", 24, &[], &[f32::NAN], &[f32::NAN]);
        assert!(run_op("Swish", 23, &Attributes::default(), &[Some(&f32s(&[1], &[1.0]))]).is_err(), "from 24");
        let ints = Tensor::from_i64s(vec![1]);
        assert!(run_op("Swish", 24, &Attributes::default(), &[Some(&ints)]).is_err(), "f32 only");
        let e = super::Activation::Swish { alpha: -0.5 }.c_expr(saggar_shape::DType::F32);
        assert_eq!(e, "($0 * (1.0f / (1.0f + expf(-((-0.5f) * $0)))))");
        let e = super::Activation::Swish { alpha: -0.5 }.c_expr(saggar_shape::DType::F64);
        assert_eq!(e, "($0 * (1.0 / (1.0 + exp(-((-0.5) * $0)))))");
    }

    #[test]
    fn shrink_of_floats_and_of_integers_through_f64() {
        check("Shrink", 9, &[("lambd", 1.5), ("bias", 1.5)], &[-2.0, -1.0, 0.0, 1.0, 2.0], &[-0.5, 0.0, 0.0, 0.0, 0.5]);
        check("Shrink", 9, &[], &[-2.0, 0.5, 0.75], &[-2.0, 0.0, 0.75]);
        let attrs = floats(&[("lambd", 1.0), ("bias", 0.5)]);
        let i = run_op("Shrink", 9, &attrs, &[Some(&Tensor::from_i64s(vec![-5, -1, 0, 1, 5]))]).unwrap();
        assert_eq!(i[0].data(), &TensorData::I64(vec![-4, 0, 0, 0, 4]), "-4.5 and 4.5 truncate");
        let x32 = Tensor::new(vec![2], TensorData::I32(vec![-5, 5])).unwrap();
        let big = run_op("Shrink", 9, &floats(&[("bias", 1e30)]), &[Some(&x32)]).unwrap();
        assert_eq!(big[0].data(), &TensorData::I32(vec![i32::MAX, i32::MIN]), "saturates");
        let nan = run_op("Shrink", 9, &floats(&[("bias", f32::NAN)]), &[Some(&x32)]).unwrap();
        assert_eq!(nan[0].data(), &TensorData::I32(vec![0, 0]));
    }

    #[test]
    fn prelu_broadcasts_the_slope_to_the_input_only() {
        let x = f32s(&[2, 3], &[-1.0, 2.0, -3.0, 4.0, -5.0, 0.0]);
        let slope = f32s(&[3], &[0.1, 0.2, 0.3]);
        let out = run_op("PRelu", 16, &Attributes::default(), &[Some(&x), Some(&slope)]).unwrap();
        assert_eq!(out[0].dims(), &[2, 3]);
        assert_eq!(values(&out[0]), &[-0.1, 2.0, -0.90000004, 4.0, -1.0, 0.0]);
        let one = f32s(&[1], &[0.5]);
        let out = run_op("PRelu", 7, &Attributes::default(), &[Some(&x), Some(&one)]).unwrap();
        assert_eq!(values(&out[0]), &[-0.5, 2.0, -1.5, 4.0, -2.5, 0.0]);
        for bad in [f32s(&[2], &[1.0, 2.0]), f32s(&[2, 2, 3], &[0.0; 12]), f32s(&[2, 6], &[0.0; 12])] {
            assert!(run_op("PRelu", 16, &Attributes::default(), &[Some(&x), Some(&bad)]).is_err(), "{:?}", bad.dims());
        }
        let xi = Tensor::new(vec![3], TensorData::I32(vec![-2, 3, -4])).unwrap();
        let si = Tensor::new(vec![1], TensorData::I32(vec![3])).unwrap();
        let out = run_op("PRelu", 9, &Attributes::default(), &[Some(&xi), Some(&si)]).unwrap();
        assert_eq!(out[0].data(), &TensorData::I32(vec![-6, 3, -12]));
        assert!(run_op("PRelu", 8, &Attributes::default(), &[Some(&xi), Some(&si)]).is_err(), "integers from 9");
        assert!(run_op("PRelu", 9, &Attributes::default(), &[Some(&x), Some(&si)]).is_err(), "one type");
    }

    #[test]
    fn expressions_embed_the_attributes_exactly() {
        use super::{Activation, Shrink};
        use saggar_shape::DType;
        let e = Activation::HardSigmoid { alpha: -0.5, beta: 1e-5 }.c_expr(DType::F32);
        assert!(e.contains("((-0.5f) * $0 + 1e-5f)"), "{e}");
        let e = Activation::HardSigmoid { alpha: 0.2, beta: 0.5 }.c_expr(DType::F64);
        assert!(e.contains("(0.20000000298023224 * $0 + 0.5)"), "the f32 attribute, widened: {e}");
        assert!(Activation::HardSwish.c_expr(DType::F32).contains("(0.16666667f * $0 + 0.5f)"));
        assert!(Activation::HardSwish.c_expr(DType::F64).contains("(0.16666666666666666 * $0 + 0.5)"));
        assert_eq!(Activation::LeakyRelu { alpha: 2.0 }.c_expr(DType::F32), "($0 > 0.0f ? $0 : 2.0f * $0)");
        assert_eq!(Activation::Elu { alpha: 2.0 }.c_expr(DType::F64), "($0 > 0.0 ? $0 : 2.0 * expm1($0))");
        let s = Shrink { bias: 0.5, lambd: 1.0 };
        assert_eq!(s.c_expr(DType::F32).unwrap(), "($0 < (-1.0f) ? $0 + 0.5f : ($0 > 1.0f ? $0 - 0.5f : 0.0f))");
        let i = s.c_expr(DType::I8).unwrap();
        assert!(i.starts_with("onnx_float_to_int<signed char, double>((double)(((double)$0 < (-1.0) ?"), "{i}");
    }
}
