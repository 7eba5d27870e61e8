//! Binary arithmetic (Add, Sub, Mul, Div, Pow), comparisons (Equal, Greater, Less, GreaterOrEqual,
//! LessOrEqual) and logic (And, Or, Xor), with numpy broadcasting; Add, Sub, Mul, Div and Equal also
//! compute shape vectors at import ([`Op::dims_value`]).

use saggar_shape::DType;

use super::{NUMBERS, broadcast2, output_mismatch, require_dtype, sym_pairs};
use crate::ops::gpu::{GpuCtx, GpuNode, ctype};
use crate::ops::shape_util::broadcast_all;
use crate::ops::{EvalInputs, InferInputs, Op, OpError, SymInt, ValueType};
use crate::tensor::{DataMut, DataRef, TensorMut};

/// Whether a shape-vector element is a symbol inference invented (never equal to anything known).
fn is_unnamed_sym(v: &SymInt) -> bool {
    matches!(v, SymInt::Sym(s) if crate::ops::shape_util::is_unnamed(&saggar_shape::Dim::Symbolic(s.clone())))
}

/// Applies `f` over the broadcast of `a` and `b` into `out` (shaped as the broadcast).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BinaryKind {
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
        let t = ctype(a).ok_or_else(|| OpError::eval(format!("{a} is not supported on GPU")))?;
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
pub(super) struct Binary(BinaryKind);

impl Binary {
    pub(super) fn boxed(kind: BinaryKind) -> Result<Box<dyn Op>, OpError> {
        Ok(Box::new(Binary(kind)))
    }
}

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
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| Ok(GpuNode::Elementwise(self.0.c_expr(ctx.input(0)?.dtype, ctx.input(1)?.dtype)?)))())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (a, b) = (inputs.req(0)?, inputs.req(1)?);
        let kind = self.0;
        let name = format!("{kind:?}");
        if kind.is_logic() {
            require_dtype(&name, a.ty.dtype, &[DType::Bool])?;
            require_dtype(&name, b.ty.dtype, &[DType::Bool])?;
        } else if kind == BinaryKind::Pow {
            require_dtype(&name, a.ty.dtype, NUMBERS)?;
            require_dtype(&name, b.ty.dtype, NUMBERS)?;
        } else {
            let allowed: &[DType] =
                if kind == BinaryKind::Equal { &[DType::F32, DType::I64, DType::I32, DType::Bool] } else { NUMBERS };
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
        let unknown = || SymInt::Sym(crate::ops::UNKNOWN_DIM.into());
        sym_pairs(inputs, |x, y| {
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
