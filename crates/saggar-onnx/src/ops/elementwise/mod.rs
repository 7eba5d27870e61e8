//! Elementwise ops with numpy broadcasting: unary math and activations, binary arithmetic,
//! comparisons and logic, the variadic Sum/Max/Min/Mean, IsNaN and Not.

use saggar_shape::DType;

use crate::ops::shape_util::{broadcast_all, broadcast_strides, for_each_broadcast};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpEntry, OpError, SymInt, ValueType};
use crate::tensor::{DataMut, DataRef, TensorMut};

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "Sqrt", since: 6, until: 21, build: |c| unary(c, Unary::Sqrt) },
    OpEntry { op_type: "Erf", since: 9, until: 21, build: |c| unary(c, Unary::Erf) },
    OpEntry { op_type: "Tanh", since: 6, until: 21, build: |c| unary(c, Unary::Tanh) },
    OpEntry { op_type: "Relu", since: 6, until: 21, build: |c| unary(c, Unary::Relu) },
    OpEntry { op_type: "Sigmoid", since: 6, until: 21, build: |c| unary(c, Unary::Sigmoid) },
    OpEntry { op_type: "Neg", since: 6, until: 21, build: |c| unary(c, Unary::Neg) },
    OpEntry { op_type: "Abs", since: 6, until: 21, build: |c| unary(c, Unary::Abs) },
    OpEntry { op_type: "Exp", since: 6, until: 21, build: |c| unary(c, Unary::Exp) },
    OpEntry { op_type: "Log", since: 6, until: 21, build: |c| unary(c, Unary::Log) },
    OpEntry { op_type: "Reciprocal", since: 6, until: 21, build: |c| unary(c, Unary::Reciprocal) },
    OpEntry { op_type: "Gelu", since: 20, until: 21, build: build_gelu },
    OpEntry { op_type: "IsNaN", since: 9, until: 21, build: |_| Ok(Box::new(IsNan)) },
    OpEntry { op_type: "Not", since: 1, until: 21, build: |_| Ok(Box::new(Not)) },
    OpEntry { op_type: "Add", since: 7, until: 21, build: |_| Ok(Box::new(Binary(BinaryKind::Add))) },
    OpEntry { op_type: "Sub", since: 7, until: 21, build: |_| Ok(Box::new(Binary(BinaryKind::Sub))) },
    OpEntry { op_type: "Mul", since: 7, until: 21, build: |_| Ok(Box::new(Binary(BinaryKind::Mul))) },
    OpEntry { op_type: "Div", since: 7, until: 21, build: |_| Ok(Box::new(Binary(BinaryKind::Div))) },
    OpEntry { op_type: "Pow", since: 7, until: 21, build: |_| Ok(Box::new(Binary(BinaryKind::Pow))) },
    OpEntry { op_type: "Equal", since: 7, until: 21, build: |_| Ok(Box::new(Binary(BinaryKind::Equal))) },
    OpEntry { op_type: "Greater", since: 7, until: 21, build: |_| Ok(Box::new(Binary(BinaryKind::Greater))) },
    OpEntry { op_type: "Less", since: 7, until: 21, build: |_| Ok(Box::new(Binary(BinaryKind::Less))) },
    OpEntry { op_type: "GreaterOrEqual", since: 12, until: 21, build: |_| Ok(Box::new(Binary(BinaryKind::GreaterEq))) },
    OpEntry { op_type: "LessOrEqual", since: 12, until: 21, build: |_| Ok(Box::new(Binary(BinaryKind::LessEq))) },
    OpEntry { op_type: "And", since: 7, until: 21, build: |_| Ok(Box::new(Binary(BinaryKind::And))) },
    OpEntry { op_type: "Or", since: 7, until: 21, build: |_| Ok(Box::new(Binary(BinaryKind::Or))) },
    OpEntry { op_type: "Xor", since: 7, until: 21, build: |_| Ok(Box::new(Binary(BinaryKind::Xor))) },
    OpEntry { op_type: "Sum", since: 8, until: 21, build: |_| Ok(Box::new(Variadic(VariadicKind::Sum))) },
    OpEntry { op_type: "Mean", since: 8, until: 21, build: |_| Ok(Box::new(Variadic(VariadicKind::Mean))) },
    OpEntry { op_type: "Max", since: 8, until: 21, build: |_| Ok(Box::new(Variadic(VariadicKind::Max))) },
    OpEntry { op_type: "Min", since: 8, until: 21, build: |_| Ok(Box::new(Variadic(VariadicKind::Min))) },
];

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

/// A one-input op on f32 (and the signed integers for Relu, Neg, Abs).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Unary {
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
}

#[derive(Debug)]
struct UnaryOp(Unary);

fn unary(_: &mut NodeCtx<'_>, kind: Unary) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(UnaryOp(kind)))
}

fn build_gelu(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
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
        }
    }

    /// The C++ expression of `$0` of element type `dtype` (see [`crate::ops::gpu::GpuNode`]).
    fn c_expr(self, dtype: DType) -> String {
        if dtype != DType::F32 {
            return match self {
                Unary::Relu => "($0 > 0 ? $0 : ($0 - $0))",
                Unary::Neg => "(-$0)",
                _ => "($0 < 0 ? -$0 : $0)",
            }
            .into();
        }
        match self {
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
        }
        .into()
    }

    fn takes_integers(self) -> bool {
        matches!(self, Unary::Relu | Unary::Neg | Unary::Abs)
    }
}

macro_rules! int_unary {
    ($kind:expr, $x:expr) => {
        match $kind {
            Unary::Relu => $x.max(0),
            Unary::Neg => $x.wrapping_neg(),
            _ => $x.wrapping_abs(),
        }
    };
}

impl Op for UnaryOp {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        Some(ctx.input(0).map(|x| crate::ops::gpu::GpuNode::Elementwise(self.0.c_expr(x.dtype))))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        let allowed: &[DType] =
            if self.0.takes_integers() { &[DType::F32, DType::I64, DType::I32] } else { &[DType::F32] };
        require_dtype(&format!("{:?}", self.0), x.ty.dtype, allowed)?;
        Ok(vec![x.ty.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let kind = self.0;
        match (x.data, &mut outputs[0].data) {
            (DataRef::F32(x), DataMut::F32(o)) => o.iter_mut().zip(x).for_each(|(o, &x)| *o = kind.f32(x)),
            (DataRef::I64(x), DataMut::I64(o)) if kind.takes_integers() => {
                o.iter_mut().zip(x).for_each(|(o, &x)| *o = int_unary!(kind, x))
            }
            (DataRef::I32(x), DataMut::I32(o)) if kind.takes_integers() => {
                o.iter_mut().zip(x).for_each(|(o, &x)| *o = int_unary!(kind, x))
            }
            _ => return Err(output_mismatch()),
        }
        Ok(())
    }
}

/// `IsNaN`: f32 to bool.
#[derive(Debug)]
struct IsNan;

impl Op for IsNan {
    fn gpu(&self, _: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        Some(Ok(crate::ops::gpu::GpuNode::Elementwise("(unsigned char)($0 != $0)".into())))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        require_dtype("IsNaN", x.ty.dtype, &[DType::F32])?;
        Ok(vec![ValueType::new(DType::Bool, x.ty.dims.clone())])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?.f32s()?;
        let o = outputs[0].bools()?;
        o.iter_mut().zip(x).for_each(|(o, x)| *o = u8::from(x.is_nan()));
        Ok(())
    }
}

/// `Not`: bool to bool.
#[derive(Debug)]
struct Not;

impl Op for Not {
    fn gpu(&self, _: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        Some(Ok(crate::ops::gpu::GpuNode::Elementwise("(unsigned char)($0 == 0)".into())))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        require_dtype("Not", x.ty.dtype, &[DType::Bool])?;
        Ok(vec![x.ty.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?.bools()?;
        outputs[0].bools()?.iter_mut().zip(x).for_each(|(o, &x)| *o = u8::from(x == 0));
        Ok(())
    }
}

/// Whether a shape-vector element is a symbol inference invented (never equal to anything known).
fn is_unnamed_sym(v: &SymInt) -> bool {
    matches!(v, SymInt::Sym(s) if crate::ops::shape_util::is_unnamed(&saggar_shape::Dim::Symbolic(s.clone())))
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

/// Fails unless `dims` broadcasts to exactly `out_dims`.
pub(crate) fn check_broadcast(dims: &[usize], out_dims: &[usize]) -> Result<(), OpError> {
    let pad = out_dims.len() - dims.len();
    for (i, &d) in dims.iter().enumerate() {
        if d != 1 && d != out_dims[pad + i] {
            return Err(OpError::eval(format!("input shape {dims:?} does not broadcast to {out_dims:?}")));
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BinaryKind {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Equal,
    Greater,
    Less,
    GreaterEq,
    LessEq,
    And,
    Or,
    Xor,
}

impl BinaryKind {
    fn is_comparison(self) -> bool {
        matches!(self, Self::Equal | Self::Greater | Self::Less | Self::GreaterEq | Self::LessEq)
    }

    fn is_logic(self) -> bool {
        matches!(self, Self::And | Self::Or | Self::Xor)
    }

    /// The C++ expression of `$0 op $1` for operands of these element types, as `eval` computes it.
    fn c_expr(self, a: DType, b: DType) -> Result<String, OpError> {
        let t = crate::ops::gpu::ctype(a).ok_or_else(|| OpError::eval(format!("{a} is not supported on GPU")))?;
        let cmp = |op: &str| format!("(unsigned char)($0 {op} $1)");
        Ok(match (self, a, b) {
            (Self::Equal, DType::Bool, _) => "(unsigned char)(($0 != 0) == ($1 != 0))".into(),
            (Self::Equal, ..) => cmp("=="),
            (Self::Greater, ..) => cmp(">"),
            (Self::Less, ..) => cmp("<"),
            (Self::GreaterEq, ..) => cmp(">="),
            (Self::LessEq, ..) => cmp("<="),
            (Self::And, ..) => "(unsigned char)(($0 != 0) && ($1 != 0))".into(),
            (Self::Or, ..) => "(unsigned char)(($0 != 0) || ($1 != 0))".into(),
            (Self::Xor, ..) => "(unsigned char)(($0 != 0) != ($1 != 0))".into(),
            (Self::Pow, DType::F32, _) => "powf($0, (float)$1)".into(),
            (Self::Pow, _, _) if a == b => format!("($1 < 0 ? ({t})0 : ({t})pow((double)$0, (double)$1))"),
            (Self::Pow, _, _) => format!("({t})pow((double)$0, (double)$1)"),
            (Self::Add, ..) => "($0 + $1)".into(),
            (Self::Sub, ..) => "($0 - $1)".into(),
            (Self::Mul, ..) => "($0 * $1)".into(),
            (Self::Div, DType::F32, _) => "($0 / $1)".into(),
            (Self::Div, ..) => format!("($1 == 0 ? ({t})0 : ({t})($0 / $1))"),
        })
    }
}

#[derive(Debug)]
struct Binary(BinaryKind);

macro_rules! int_arith {
    ($kind:expr, $x:expr, $y:expr) => {
        match $kind {
            BinaryKind::Add => $x.wrapping_add($y),
            BinaryKind::Sub => $x.wrapping_sub($y),
            BinaryKind::Mul => $x.wrapping_mul($y),
            // Integer division truncates like C; division by zero gives 0 rather than a fault.
            BinaryKind::Div => $x.checked_div($y).unwrap_or(0),
            _ => {
                let e = $y;
                if e < 0 { 0 } else { $x.wrapping_pow(u32::try_from(e).unwrap_or(u32::MAX)) }
            }
        }
    };
}

macro_rules! compare {
    ($kind:expr, $x:expr, $y:expr) => {
        u8::from(match $kind {
            BinaryKind::Equal => $x == $y,
            BinaryKind::Greater => $x > $y,
            BinaryKind::Less => $x < $y,
            BinaryKind::GreaterEq => $x >= $y,
            _ => $x <= $y,
        })
    };
}

impl Op for Binary {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        Some((|| Ok(crate::ops::gpu::GpuNode::Elementwise(self.0.c_expr(ctx.input(0)?.dtype, ctx.input(1)?.dtype)?)))())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (a, b) = (inputs.req(0)?, inputs.req(1)?);
        let kind = self.0;
        let name = format!("{kind:?}");
        if kind.is_logic() {
            require_dtype(&name, a.ty.dtype, &[DType::Bool])?;
            require_dtype(&name, b.ty.dtype, &[DType::Bool])?;
        } else if kind == BinaryKind::Pow {
            require_dtype(&name, a.ty.dtype, &[DType::F32, DType::I64, DType::I32])?;
            require_dtype(&name, b.ty.dtype, &[DType::F32, DType::I64, DType::I32])?;
        } else {
            let allowed: &[DType] = if kind == BinaryKind::Equal {
                &[DType::F32, DType::I64, DType::I32, DType::Bool]
            } else {
                &[DType::F32, DType::I64, DType::I32]
            };
            require_dtype(&name, a.ty.dtype, allowed)?;
            if a.ty.dtype != b.ty.dtype {
                return Err(OpError::infer(format!("{name} inputs differ in type: {} and {}", a.ty.dtype, b.ty.dtype)));
            }
        }
        let dims = broadcast_all([a.ty.dims.as_slice(), b.ty.dims.as_slice()])?;
        let dtype = if kind.is_comparison() { DType::Bool } else { a.ty.dtype };
        Ok(vec![ValueType::new(dtype, dims)])
    }

    fn dims_value(&self, inputs: &InferInputs<'_>) -> Option<Vec<SymInt>> {
        // Shape arithmetic (`seq * heads`, `hidden / heads`), elementwise or with a scalar: known
        // where both sides are known, the symbol itself where the other side is neutral.
        if !matches!(self.0, BinaryKind::Add | BinaryKind::Sub | BinaryKind::Mul | BinaryKind::Div | BinaryKind::Equal)
        {
            return None;
        }
        let (a, b) = (inputs.req(0).ok()?.sym_ints()?, inputs.req(1).ok()?.sym_ints()?);
        let n = a.len().max(b.len());
        if (a.len() != n && a.len() != 1) || (b.len() != n && b.len() != 1) {
            return None;
        }
        let unknown = || SymInt::Sym(crate::ops::UNKNOWN_DIM.into());
        (0..n)
            .map(|i| {
                let (x, y) = (&a[if a.len() == 1 { 0 } else { i }], &b[if b.len() == 1 { 0 } else { i }]);
                Some(match (x.as_int(), y.as_int(), self.0) {
                    (Some(p), Some(q), BinaryKind::Add) => SymInt::Int(p.checked_add(q)?),
                    (Some(p), Some(q), BinaryKind::Sub) => SymInt::Int(p.checked_sub(q)?),
                    (Some(p), Some(q), BinaryKind::Mul) => SymInt::Int(p.checked_mul(q)?),
                    (Some(p), Some(q), BinaryKind::Div) => SymInt::Int(p.checked_div(q)?),
                    (None, Some(1), BinaryKind::Mul | BinaryKind::Div) => x.clone(),
                    (Some(1), None, BinaryKind::Mul) => y.clone(),
                    (None, Some(0), BinaryKind::Add | BinaryKind::Sub) => x.clone(),
                    // Comparisons of shape vectors (exporters test for -1): decided where extents are
                    // known, where a symbol meets a negative value, or where one symbol meets itself.
                    (Some(p), Some(q), BinaryKind::Equal) => SymInt::Int(i64::from(p == q)),
                    (None, Some(q), BinaryKind::Equal) | (Some(q), None, BinaryKind::Equal) if q < 0 => SymInt::Int(0),
                    (None, None, BinaryKind::Equal) if x == y && !is_unnamed_sym(x) => SymInt::Int(1),
                    _ => unknown(),
                })
            })
            .collect()
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (a, b) = (inputs.req(0)?, inputs.req(1)?);
        let kind = self.0;
        let out = &mut outputs[0];
        let od = out.dims;
        let (ad, bd) = (a.dims, b.dims);
        match (a.data, b.data, &mut out.data) {
            (DataRef::F32(x), DataRef::F32(y), DataMut::F32(o)) => broadcast2(x, ad, y, bd, o, od, |x, y| match kind {
                BinaryKind::Add => x + y,
                BinaryKind::Sub => x - y,
                BinaryKind::Mul => x * y,
                BinaryKind::Div => x / y,
                _ => x.powf(y),
            }),
            (DataRef::F32(x), DataRef::I64(y), DataMut::F32(o)) => {
                broadcast2(x, ad, y, bd, o, od, |x, y| x.powf(y as f32))
            }
            (DataRef::F32(x), DataRef::I32(y), DataMut::F32(o)) => {
                broadcast2(x, ad, y, bd, o, od, |x, y| x.powf(y as f32))
            }
            (DataRef::I64(x), DataRef::I64(y), DataMut::I64(o)) => {
                broadcast2(x, ad, y, bd, o, od, |x, y| int_arith!(kind, x, y))
            }
            // Pow with an integer base and an exponent of another type, computed as numpy does
            // (in double precision, then converted back to the base's type).
            (DataRef::I64(x), DataRef::I32(y), DataMut::I64(o)) => {
                broadcast2(x, ad, y, bd, o, od, |x, y| (x as f64).powf(f64::from(y)) as i64)
            }
            (DataRef::I64(x), DataRef::F32(y), DataMut::I64(o)) => {
                broadcast2(x, ad, y, bd, o, od, |x, y| (x as f64).powf(f64::from(y)) as i64)
            }
            (DataRef::I32(x), DataRef::I64(y), DataMut::I32(o)) => {
                broadcast2(x, ad, y, bd, o, od, |x, y| f64::from(x).powf(y as f64) as i32)
            }
            (DataRef::I32(x), DataRef::F32(y), DataMut::I32(o)) => {
                broadcast2(x, ad, y, bd, o, od, |x, y| f64::from(x).powf(f64::from(y)) as i32)
            }
            (DataRef::I32(x), DataRef::I32(y), DataMut::I32(o)) => {
                broadcast2(x, ad, y, bd, o, od, |x, y| int_arith!(kind, x, y))
            }
            (DataRef::F32(x), DataRef::F32(y), DataMut::Bool(o)) => {
                broadcast2(x, ad, y, bd, o, od, |x, y| compare!(kind, x, y))
            }
            (DataRef::I64(x), DataRef::I64(y), DataMut::Bool(o)) => {
                broadcast2(x, ad, y, bd, o, od, |x, y| compare!(kind, x, y))
            }
            (DataRef::I32(x), DataRef::I32(y), DataMut::Bool(o)) => {
                broadcast2(x, ad, y, bd, o, od, |x, y| compare!(kind, x, y))
            }
            (DataRef::Bool(x), DataRef::Bool(y), DataMut::Bool(o)) => {
                broadcast2(x, ad, y, bd, o, od, |x, y| match kind {
                    BinaryKind::And => u8::from(x != 0 && y != 0),
                    BinaryKind::Or => u8::from(x != 0 || y != 0),
                    BinaryKind::Xor => u8::from((x != 0) != (y != 0)),
                    _ => u8::from((x != 0) == (y != 0)),
                })
            }
            _ => Err(output_mismatch()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VariadicKind {
    Sum,
    Mean,
    Max,
    Min,
}

/// `Sum`, `Mean`, `Max`, `Min` over any number of broadcast inputs.
#[derive(Debug)]
struct Variadic(VariadicKind);

macro_rules! fold_into {
    ($kind:expr, $acc:expr, $x:expr) => {
        match $kind {
            VariadicKind::Sum | VariadicKind::Mean => $acc + $x,
            VariadicKind::Max => {
                if $x > $acc {
                    $x
                } else {
                    $acc
                }
            }
            VariadicKind::Min => {
                if $x < $acc {
                    $x
                } else {
                    $acc
                }
            }
        }
    };
}

impl Op for Variadic {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        let n = ctx.inputs.iter().flatten().count();
        if n == 0 || ctx.inputs.iter().any(Option::is_none) {
            return Some(Err(OpError::eval("every input must be present")));
        }
        let mut expr = "$0".to_string();
        for i in 1..n {
            expr = match self.0 {
                VariadicKind::Sum | VariadicKind::Mean => format!("({expr} + ${i})"),
                VariadicKind::Max => format!("gpu_max({expr}, ${i})"),
                VariadicKind::Min => format!("gpu_min({expr}, ${i})"),
            };
        }
        if self.0 == VariadicKind::Mean {
            expr = format!("({expr} / {n}.0f)");
        }
        Some(Ok(crate::ops::gpu::GpuNode::Elementwise(expr)))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let first = inputs.req(0)?;
        let allowed: &[DType] = match self.0 {
            VariadicKind::Max | VariadicKind::Min => &[DType::F32, DType::I64, DType::I32],
            _ => &[DType::F32],
        };
        require_dtype(&format!("{:?}", self.0), first.ty.dtype, allowed)?;
        if inputs.present().any(|i| i.ty.dtype != first.ty.dtype) {
            return Err(OpError::infer("inputs differ in element type"));
        }
        let dims = broadcast_all(inputs.present().map(|i| i.ty.dims.as_slice()))?;
        Ok(vec![ValueType::new(first.ty.dtype, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let kind = self.0;
        let out = &mut outputs[0];
        let od = out.dims;
        let count = inputs.len();
        for i in 0..count {
            let x = inputs.req(i)?;
            // The first input is copied (broadcast) into the output; later ones fold into it. The
            // output has the broadcast shape, so it is its own first operand.
            match (x.data, &mut out.data) {
                (DataRef::F32(x_data), DataMut::F32(o)) => {
                    fold_step(i, x_data, x.dims, o, od, |a, b| fold_into!(kind, a, b))?
                }
                (DataRef::I64(x_data), DataMut::I64(o)) => {
                    fold_step(i, x_data, x.dims, o, od, |a, b| fold_into!(kind, a, b))?
                }
                (DataRef::I32(x_data), DataMut::I32(o)) => {
                    fold_step(i, x_data, x.dims, o, od, |a, b| fold_into!(kind, a, b))?
                }
                _ => return Err(output_mismatch()),
            }
        }
        if kind == VariadicKind::Mean {
            let o = out.f32s()?;
            let n = count as f32;
            o.iter_mut().for_each(|v| *v /= n);
        }
        Ok(())
    }
}

fn fold_step<T: Copy>(
    index: usize,
    x: &[T],
    x_dims: &[usize],
    out: &mut [T],
    out_dims: &[usize],
    f: impl Fn(T, T) -> T,
) -> Result<(), OpError> {
    if x_dims.len() > out_dims.len() {
        return Err(OpError::eval("input rank exceeds the output rank"));
    }
    check_broadcast(x_dims, out_dims)?;
    let sx = broadcast_strides(x_dims, out_dims.len());
    if index == 0 {
        for_each_broadcast(out_dims, [&sx], |i, [ox]| out[i] = x[ox]);
    } else {
        for_each_broadcast(out_dims, [&sx], |i, [ox]| out[i] = f(out[i], x[ox]));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::ops::Attributes;
    use crate::ops::testing::{f32s, run_op};
    use crate::tensor::{Tensor, TensorData};

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
        let bad = Attributes(vec![("to".into(), crate::ops::Attribute::Int(11))]);
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
