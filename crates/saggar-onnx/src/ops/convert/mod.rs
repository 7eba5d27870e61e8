//! Selection and conversion: Where (broadcast select), Clip, Cast and CastLike ([`cast_like`]).

mod cast_like;
pub(crate) mod gpu;

use saggar_shape::DType;

use crate::ops::elementwise::{c_float, c_float_to_int, check_broadcast, output_mismatch, require_dtype};
use crate::ops::shape_util::{broadcast_all, broadcast_strides, for_each_broadcast};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpEntry, OpError, SymInt, ValueType};
use crate::tensor::{
    DataMut, NUMERIC_DTYPES, Number, TensorMut, TensorView, Wide, each_ref, first_wide, same_number, typed_like,
    typed_like_mut,
};

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "Where", since: 9, until: 24, build: |_| Ok(Box::new(Where)) },
    OpEntry { op_type: "Clip", since: 6, until: 10, build: build_clip_attrs },
    OpEntry { op_type: "Clip", since: 11, until: 24, build: |_| Ok(Box::new(Clip { min: None, max: None })) },
    OpEntry { op_type: "Cast", since: 6, until: 24, build: build_cast },
    OpEntry { op_type: "CastLike", since: 15, until: 24, build: cast_like::build_cast_like },
];

/// `Where(condition, x, y)`.
#[derive(Debug)]
struct Where;

fn where_typed<T: Copy>(
    (c, cd): (&[u8], &[usize]),
    (x, xd): (&[T], &[usize]),
    (y, yd): (&[T], &[usize]),
    (o, od): (&mut [T], &[usize]),
) -> Result<(), OpError> {
    let rank = od.len();
    for d in [cd, xd, yd] {
        if d.len() > rank {
            return Err(OpError::eval("input rank exceeds the output rank"));
        }
        check_broadcast(d, od)?;
    }
    let (sc, sx, sy) = (broadcast_strides(cd, rank), broadcast_strides(xd, rank), broadcast_strides(yd, rank));
    for_each_broadcast(od, [&sc, &sx, &sy], |i, [oc, ox, oy]| o[i] = if c[oc] != 0 { x[ox] } else { y[oy] });
    Ok(())
}

impl Op for Where {
    fn extents_from_shapes(&self) -> bool {
        true
    }

    fn gpu(&self, _: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        Some(Ok(crate::ops::gpu::GpuNode::Elementwise("($0 ? $1 : $2)".into())))
    }

    fn dims_value(&self, inputs: &InferInputs<'_>) -> Option<Vec<SymInt>> {
        // Selecting between shape vectors (`Where(Equal(shape, -1), ones, shape)`, as exporters
        // write Expand targets): known where the condition is.
        let (c, x, y) =
            (inputs.req(0).ok()?.sym_ints()?, inputs.req(1).ok()?.sym_ints()?, inputs.req(2).ok()?.sym_ints()?);
        let n = c.len().max(x.len()).max(y.len());
        let at = |v: &[SymInt], i: usize| if v.len() == 1 { v.first().cloned() } else { v.get(i).cloned() };
        (0..n)
            .map(|i| match at(&c, i)? {
                SymInt::Int(0) => at(&y, i),
                SymInt::Int(_) => at(&x, i),
                SymInt::Sym(_) => Some(SymInt::Sym(crate::ops::UNKNOWN_DIM.into())),
            })
            .collect()
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (c, x, y) = (inputs.req(0)?, inputs.req(1)?, inputs.req(2)?);
        require_dtype("Where condition", c.ty.dtype, &[DType::Bool])?;
        if x.ty.dtype != y.ty.dtype {
            return Err(OpError::infer(format!("Where branches differ in type: {} and {}", x.ty.dtype, y.ty.dtype)));
        }
        let dims = broadcast_all([c.ty.dims.as_slice(), x.ty.dims.as_slice(), y.ty.dims.as_slice()])?;
        Ok(vec![ValueType::new(x.ty.dtype, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (c, x, y) = (inputs.req(0)?, inputs.req(1)?, inputs.req(2)?);
        let cv = c.bools()?;
        let out = &mut outputs[0];
        let od = out.dims;
        let (xs, ys) = ((x.data, x.dims), (y.data, y.dims));
        match (xs.0, ys.0) {
            (a, b) if a.dtype() != b.dtype() => Err(output_mismatch()),
            (a, _) => each_ref!(a, |a| {
                let b = typed_like(a, ys.0)?;
                let o = typed_like_mut(a, &mut out.data)?;
                where_typed((cv, c.dims), (a, xs.1), (b, ys.1), (o, od))
            }),
        }
    }
}

/// `Clip`: bounds from attributes (opset 6-10) or from optional scalar inputs 1 and 2 (opset 11+).
#[derive(Debug)]
struct Clip {
    min: Option<f32>,
    max: Option<f32>,
}

fn build_clip_attrs(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Clip { min: ctx.float("min")?, max: ctx.float("max")? }))
}

fn scalar_bound(input: Option<&TensorView<'_>>) -> Result<Option<Wide>, OpError> {
    let Some(t) = input else { return Ok(None) };
    if t.len() != 1 || t.dtype() == DType::Bool {
        return Err(OpError::eval(format!("Clip bounds must be numeric scalars, not {} x{}", t.dtype(), t.len())));
    }
    Ok(first_wide(t.data))
}

/// `min(max(x, lo), hi)` elementwise: with lo > hi every element is hi, as ONNX says; NaN stays NaN.
fn clip<T: Number>(x: &[T], o: &mut [T], lo: Option<Wide>, hi: Option<Wide>) {
    let (lo, hi) = (lo.map_or(T::LOWEST, T::narrow), hi.map_or(T::HIGHEST, T::narrow));
    o.iter_mut().zip(x).for_each(|(o, &v)| {
        let t = if v < lo { lo } else { v };
        *o = if t > hi { hi } else { t };
    });
}

impl Op for Clip {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        let Ok(x) = ctx.input(0) else { return Some(Err(OpError::eval("Clip needs an input"))) };
        let f = x.dtype == DType::F32;
        let bound = |slot: usize, attr: Option<f32>| match (ctx.inputs.get(slot).and_then(Option::as_ref), attr) {
            (Some(_), _) => Some(format!("${slot}")),
            // Of the input's type: `gpu_max` deduces one type from both arguments.
            (None, Some(v)) if v.is_finite() && !f => {
                crate::ops::gpu::ctype(x.dtype).map(|t| format!("(({t}){})", c_float(v)))
            }
            (None, Some(v)) if v.is_finite() => Some(c_float(v)),
            _ => None,
        };
        let mut expr = "$0".to_string();
        if let Some(lo) = bound(1, self.min) {
            expr = if f { format!("fmaxf({expr}, {lo})") } else { format!("gpu_max({expr}, {lo})") };
        }
        if let Some(hi) = bound(2, self.max) {
            expr = if f { format!("fminf({expr}, {hi})") } else { format!("gpu_min({expr}, {hi})") };
        }
        Some(Ok(crate::ops::gpu::GpuNode::Elementwise(expr)))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        require_dtype("Clip", x.ty.dtype, &[&NUMERIC_DTYPES[..], &[DType::F16, DType::BF16]].concat())?;
        for i in [1, 2] {
            if let Some(b) = inputs.get(i)
                && (b.ty.dtype != x.ty.dtype || b.ty.dims.iter().any(|d| d.as_fixed() != Some(1)))
            {
                return Err(OpError::infer(format!("Clip bound {i} must be a scalar of the input's type")));
            }
        }
        Ok(vec![x.ty.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let attr = |v: Option<f32>| v.map(|v| Wide::Float(f64::from(v)));
        let lo = scalar_bound(inputs.get(1))?.or(attr(self.min));
        let hi = scalar_bound(inputs.get(2))?.or(attr(self.max));
        let half = |o: &mut [u16], bf: bool| {
            let x = x.floats()?;
            let mut wide = vec![0f32; x.len()];
            clip(&x, &mut wide, lo, hi);
            let round = |v: f32| if bf { half::bf16::from_f32(v).to_bits() } else { half::f16::from_f32(v).to_bits() };
            o.iter_mut().zip(wide).for_each(|(o, v)| *o = round(v));
            Ok(())
        };
        same_number!(x.data, &mut outputs[0].data, |x, o| {
            clip(x, o, lo, hi);
            Ok(())
        }, (_, other) => match other {
            DataMut::F16(o) => half(o, false),
            DataMut::BF16(o) => half(o, true),
            _ => Err(output_mismatch()),
        })
    }
}

/// `Cast` between the supported types. Half-precision values (at a model's inputs and outputs) go
/// through f32: widened exactly, narrowed rounding to nearest even, as `half` and the GPU prelude's
/// `onnx_f32_to_f16` / `onnx_f32_to_bf16` do.
#[derive(Debug)]
struct Cast {
    to: DType,
}

fn build_cast(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let to = ctx.int("to")?.ok_or_else(|| OpError::attribute("to", "required"))?;
    // `saturate` only affects float8 targets, which are not supported anyway.
    ctx.ignore("saturate");
    let dtype = crate::import::proto::dtype_from_onnx(to)
        .filter(|d| crate::tensor::is_supported_dtype(*d))
        .ok_or_else(|| {
            ctx.unsupported(
                "to",
                to,
                "a numeric type or bool (1 to 7, 9 to 13, 16): float8, int4 and strings are not supported",
            )
        })?;
    Ok(Box::new(Cast { to: dtype }))
}

impl Op for Cast {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::GpuNode::Elementwise;
        let from = match ctx.input(0) {
            Ok(x) => x.dtype,
            Err(e) => return Some(Err(e)),
        };
        // Half-precision values are bits in memory (`unsigned short`); the prelude converts.
        let x = match from {
            DType::F16 => "onnx_f16_to_f32($0)",
            DType::BF16 => "onnx_bf16_to_f32($0)",
            _ => "$0",
        };
        let float = matches!(from, DType::F32 | DType::F64 | DType::F16 | DType::BF16);
        Some(match (self.to, crate::ops::gpu::ctype(self.to)) {
            (DType::Bool, _) => Ok(Elementwise(format!("(unsigned char)({x} != 0)"))),
            (to, Some(_))
                if float && crate::tensor::NUMERIC_DTYPES.contains(&to) && !matches!(to, DType::F32 | DType::F64) =>
            {
                // Saturating as the host's `as` does (C leaves out-of-range conversions undefined).
                let f = if from == DType::F64 { "double" } else { "float" };
                c_float_to_int(to, f, x).map(Elementwise)
            }
            (DType::F16, _) => Ok(Elementwise(format!("onnx_f32_to_f16((float){x})"))),
            (DType::BF16, _) => Ok(Elementwise(format!("onnx_f32_to_bf16((float){x})"))),
            (_, Some(t)) => Ok(Elementwise(format!("({t}){x}"))),
            (to, None) => Err(OpError::eval(format!("Cast to {to} is not supported on GPU"))),
        })
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        require_dtype("Cast", x.ty.dtype, &crate::tensor::SUPPORTED_DTYPES)?;
        Ok(vec![ValueType::new(self.to, x.ty.dims.clone())])
    }

    fn dims_value(&self, inputs: &InferInputs<'_>) -> Option<Vec<SymInt>> {
        if matches!(self.to, DType::I64 | DType::I32) {
            inputs.req(0).ok()?.dims_value.map(<[_]>::to_vec)
        } else {
            None
        }
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        crate::tensor::cast_into(inputs.req(0)?.data, &mut outputs[0].data)
    }
}
