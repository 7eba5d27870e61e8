//! Binary arithmetic (Add, Sub, Mul, Div, Pow), comparisons (Equal, Greater, Less, GreaterOrEqual,
//! LessOrEqual) and logic (And, Or, Xor), with numpy broadcasting; Add, Sub, Mul, Div and Equal also
//! compute shape vectors at import ([`Op::dims_value`]).

use saggar_shape::DType;

use super::element::{Arith, FLOATS, SIGNED, c_float_to_int, c_int_pow, c_type, c_wrapping};
use super::{broadcast2, output_mismatch, require_dtype, sym_pairs};
use crate::ops::gpu::{GpuCtx, GpuNode};
use crate::ops::shape_util::broadcast_all;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, SymInt, ValueType};
use crate::tensor::{
    DataRef, NUMERIC_DTYPES, Number, Storage, TensorMut, TensorView, Wide, each_number, for_each_wide, typed_like,
    typed_like_mut,
};

/// Whether a shape-vector element is a symbol inference invented (never equal to anything known).
fn is_unnamed_sym(v: &SymInt) -> bool {
    matches!(v, SymInt::Sym(s) if crate::ops::shape_util::is_unnamed(&saggar_shape::Dim::Symbolic(s.clone())))
}

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

    /// The element types of the first input at `opset` (the second's too, but for Pow's exponent).
    fn dtypes(self, opset: u32) -> Vec<DType> {
        let numeric = NUMERIC_DTYPES.to_vec();
        let wide_ints = [FLOATS, &[DType::I32, DType::I64, DType::U32, DType::U64]].concat();
        match self {
            // 8- and 16-bit integers from opset 14.
            Self::Add | Self::Sub | Self::Mul | Self::Div if opset < 14 => wide_ints,
            Self::Pow if opset < 12 => FLOATS.to_vec(),
            Self::Pow => [FLOATS, &[DType::I32, DType::I64]].concat(),
            Self::Equal if opset < 11 => vec![DType::Bool, DType::I32, DType::I64],
            Self::Equal => [&numeric[..], &[DType::Bool]].concat(),
            Self::Greater | Self::Less if opset < 9 => FLOATS.to_vec(),
            Self::And | Self::Or | Self::Xor => vec![DType::Bool],
            _ => numeric,
        }
    }

    /// The C++ expression of `$0 op $1` for operands of these element types, as `eval` computes it.
    fn c_expr(self, a: DType, b: DType) -> Result<String, OpError> {
        let t = c_type(a)?;
        let cmp = |op: &str| format!("(unsigned char)($0 {op} $1)");
        let float = FLOATS.contains(&a);
        Ok(match self {
            Self::Equal if a == DType::Bool => "(unsigned char)(($0 != 0) == ($1 != 0))".into(),
            Self::Equal => cmp("=="),
            Self::Greater => cmp(">"),
            Self::Less => cmp("<"),
            Self::GreaterEq => cmp(">="),
            Self::LessEq => cmp("<="),
            Self::And => "(unsigned char)(($0 != 0) && ($1 != 0))".into(),
            Self::Or => "(unsigned char)(($0 != 0) || ($1 != 0))".into(),
            Self::Xor => "(unsigned char)(($0 != 0) != ($1 != 0))".into(),
            Self::Pow if float => format!("pow{}($0, ({t})$1)", super::element::c_suffix(a)),
            Self::Pow if FLOATS.contains(&b) => c_float_to_int(a, "double", "pow((double)$0, (double)$1)")?,
            Self::Pow => c_int_pow(a, b)?,
            Self::Add => c_wrapping(a, "+")?,
            Self::Sub => c_wrapping(a, "-")?,
            Self::Mul => c_wrapping(a, "*")?,
            Self::Div if float => "($0 / $1)".into(),
            // The quotient by -1 is the wrapping negation (C traps on `MIN / -1`).
            Self::Div if SIGNED.contains(&a) => {
                format!("($1 == 0 ? ({t})0 : ($1 == -1 ? {} : ({t})($0 / $1)))", super::element::c_negate(a)?)
            }
            Self::Div => format!("($1 == 0 ? ({t})0 : ({t})($0 / $1))"),
        })
    }
}

/// A binary op with the element types its signature takes at the model's opset.
#[derive(Debug)]
pub(super) struct Binary {
    kind: BinaryKind,
    dtypes: Vec<DType>,
}

impl Binary {
    pub(super) fn boxed(ctx: &mut NodeCtx<'_>, kind: BinaryKind) -> Result<Box<dyn Op>, OpError> {
        Ok(Box::new(Binary { kind, dtypes: kind.dtypes(ctx.opset()) }))
    }

    /// A floating-point `Pow` by a constant exponent of 2 or 3 (GELU's tanh form cubes its input) as
    /// products: `powf` costs dozens of instructions an element, enough to make a memory-bound
    /// chain compute-bound. The same value to within a unit of the last place (infinities, NaN and
    /// signed zeros alike).
    fn small_power(&self, ctx: &GpuCtx<'_>, base: DType) -> Option<String> {
        if self.kind != BinaryKind::Pow || !FLOATS.contains(&base) {
            return None;
        }
        match ctx.infer.get(1)?.scalar_f64()? {
            2.0 => Some("($0 * $0)".into()),
            3.0 => Some("($0 * $0 * $0)".into()),
            _ => None,
        }
    }
}

/// `f` of each pair of the broadcast `x` (of shape `xd`) and `b`, of one element type, into the bool
/// output.
fn to_bools<T: Storage>(
    (x, xd): (&[T], &[usize]),
    b: &TensorView<'_>,
    out: &mut TensorMut<'_>,
    f: impl Fn(T, T) -> bool,
) -> Result<(), OpError> {
    let y = typed_like(x, b.data)?;
    let od = out.dims;
    broadcast2(x, xd, y, b.dims, out.bools()?, od, |x, y| u8::from(f(x, y)))
}

impl Op for Binary {
    fn extents_from_shapes(&self) -> bool {
        true
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let (a, b) = (ctx.input(0)?.dtype, ctx.input(1)?.dtype);
            if let Some(product) = self.small_power(ctx, a) {
                return Ok(GpuNode::Elementwise(product));
            }
            Ok(GpuNode::Elementwise(self.kind.c_expr(a, b)?))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (a, b) = (inputs.req(0)?, inputs.req(1)?);
        let kind = self.kind;
        let name = format!("{kind:?}");
        require_dtype(&name, a.ty.dtype, &self.dtypes)?;
        if kind == BinaryKind::Pow {
            let exponents = if self.dtypes.len() == FLOATS.len() { FLOATS } else { &NUMERIC_DTYPES[..] };
            require_dtype("Pow's exponent", b.ty.dtype, exponents)?;
        } else if a.ty.dtype != b.ty.dtype {
            return Err(OpError::infer(format!("{name} inputs differ in type: {} and {}", a.ty.dtype, b.ty.dtype)));
        }
        let dims = broadcast_all([a.ty.dims.as_slice(), b.ty.dims.as_slice()])?;
        let dtype = if kind.is_comparison() { DType::Bool } else { a.ty.dtype };
        Ok(vec![ValueType::new(dtype, dims)])
    }

    fn dims_value(&self, inputs: &InferInputs<'_>) -> Option<Vec<SymInt>> {
        // Shape arithmetic (`seq * heads`, `hidden / heads`), elementwise or with a scalar: known
        // where both sides are known, the symbol itself where the other side is neutral.
        if !matches!(
            self.kind,
            BinaryKind::Add | BinaryKind::Sub | BinaryKind::Mul | BinaryKind::Div | BinaryKind::Equal
        ) {
            return None;
        }
        let unknown = || SymInt::Sym(crate::ops::UNKNOWN_DIM.into());
        sym_pairs(inputs, |x, y| {
            Some(match (x.as_int(), y.as_int(), self.kind) {
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
        let out = &mut outputs[0];
        match self.kind {
            BinaryKind::Pow => {
                // The exponents as exact wide values: one kernel per base type, whatever the exponent's.
                let mut e = vec![Wide::Int(0); b.data.len()];
                for_each_wide(b.data, |i, w| e[i] = w);
                let od = out.dims;
                each_number!(a.data, |x| {
                    broadcast2(x, a.dims, &e, b.dims, typed_like_mut(x, &mut out.data)?, od, |x, e| x.power(e))
                }, _ => Err(output_mismatch()))
            }
            kind if kind.is_comparison() => each_number!(a.data, |x| {
                let f = comparison(kind);
                to_bools((x, a.dims), b, out, |x, y| f(&x, &y))
            }, other => match other {
                DataRef::Bool(x) => to_bools((x, a.dims), b, out, |x, y| (x != 0) == (y != 0)),
                _ => Err(output_mismatch()),
            }),
            BinaryKind::And | BinaryKind::Or | BinaryKind::Xor => {
                let f: fn(bool, bool) -> bool = match self.kind {
                    BinaryKind::And => |x, y| x && y,
                    BinaryKind::Or => |x, y| x || y,
                    _ => |x, y| x != y,
                };
                to_bools((a.bools()?, a.dims), b, out, |x, y| f(x != 0, y != 0))
            }
            kind => each_number!(a.data, |x| {
                let f = arithmetic(kind);
                let y = typed_like(x, b.data)?;
                let od = out.dims;
                broadcast2(x, a.dims, y, b.dims, typed_like_mut(x, &mut out.data)?, od, f)
            }, _ => Err(output_mismatch())),
        }
    }
}

/// The function of an arithmetic kind on `T`.
fn arithmetic<T: Arith>(kind: BinaryKind) -> fn(T, T) -> T {
    match kind {
        BinaryKind::Add => Number::add,
        BinaryKind::Sub => Arith::sub,
        BinaryKind::Mul => Number::mul,
        _ => Arith::div,
    }
}

/// The predicate of a comparison kind on `T`.
fn comparison<T: PartialOrd>(kind: BinaryKind) -> fn(&T, &T) -> bool {
    match kind {
        BinaryKind::Equal => PartialEq::eq,
        BinaryKind::Greater => PartialOrd::gt,
        BinaryKind::Less => PartialOrd::lt,
        BinaryKind::GreaterEq => PartialOrd::ge,
        _ => PartialOrd::le,
    }
}
