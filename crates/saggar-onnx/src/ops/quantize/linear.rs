//! QuantizeLinear and DequantizeLinear: per tensor, per axis (opset 13) and blocked (opset 21), with
//! `output_dtype` (QuantizeLinear 21, DequantizeLinear 23) and `precision` (QuantizeLinear 23).

use saggar_shape::DType;

use super::gpu::{LinearKernel, dequantize_expr, quantize_expr};
use super::{Layout, check_quantized, dtype_attr, infer_layout, quant_range, round_to, saturate, wide_values};
use crate::ops::elementwise::{output_mismatch, require_dtype};
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, ext, numel};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType};
use crate::tensor::{DataMut, DataRef, Number, TensorMut, TensorView, each_number_mut, for_each_wide};

/// The attributes both ops share: `axis` (13+), `block_size` (21+).
#[derive(Debug, Clone, Copy)]
struct Granularity {
    axis: i64,
    block: usize,
}

fn granularity(ctx: &NodeCtx<'_>) -> Result<Granularity, OpError> {
    let axis = if ctx.opset() >= 13 { ctx.int_or("axis", 1)? } else { 1 };
    let block = if ctx.opset() >= 21 { super::block_size(ctx)? } else { 0 };
    Ok(Granularity { axis, block })
}

/// `QuantizeLinear`: `saturate(round_half_even(x / y_scale) + y_zero_point)`.
#[derive(Debug)]
struct Quantize {
    at: Granularity,
    output_dtype: Option<DType>,
    precision: Option<DType>,
    opset: u32,
}

pub(super) fn build_quantize(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let opset = ctx.opset();
    if opset >= 19 {
        // Only float8 outputs saturate optionally; integers always do.
        ctx.ignore("saturate");
    }
    let quantized = [DType::I8, DType::U8, DType::I16, DType::U16];
    let output_dtype = match (opset >= 21).then(|| ctx.int_or("output_dtype", 0)).transpose()? {
        None | Some(0) => None,
        Some(code) => Some(dtype_attr(ctx, "output_dtype", code, &quantized)?),
    };
    let floats = [DType::F32, DType::F16, DType::BF16, DType::F64];
    let precision = match (opset >= 23).then(|| ctx.int_or("precision", 0)).transpose()? {
        None | Some(0) => None,
        Some(code) => Some(dtype_attr(ctx, "precision", code, &floats)?),
    };
    Ok(Box::new(Quantize { at: granularity(ctx)?, output_dtype, precision, opset }))
}

/// The type the quotient `x / scale` is computed in: `precision`, else numpy's promotion of the two
/// types (f64 with an int32, the common type of two floats, f32 for two different floats).
fn division_type(x: DType, scale: DType, precision: Option<DType>) -> DType {
    precision.unwrap_or(match (x, scale) {
        (DType::I32, _) | (_, DType::I32) => DType::F64,
        (a, b) if a == b => a,
        _ => DType::F32,
    })
}

/// `x / s` rounded to the precision of `div`: through f32 for f32 and the halves (exact for them).
fn quotient(x: f64, s: f64, div: DType) -> f64 {
    if div == DType::F64 { x / s } else { round_to(div, f64::from(x as f32 / s as f32)) }
}

/// Checks the optional zero point at inference: the scale's dims where both are known.
fn check_zero_point(op: &str, scale: &ValueType, zp: Option<&ValueType>) -> Result<(), OpError> {
    let Some(z) = zp else { return Ok(()) };
    let fixed = |t: &ValueType| t.fixed_dims().map(|d| d.iter().product::<usize>());
    if let (Some(a), Some(b)) = (fixed(scale), fixed(z))
        && a != b
    {
        return Err(OpError::infer(format!("{op}: the zero point {z} must have the scale's shape {scale}")));
    }
    Ok(())
}

/// The scale layout, scale values and zero points of a node's inputs 1 and 2 at evaluation.
fn parameters(
    op: &str,
    x: &TensorView<'_>,
    inputs: &EvalInputs<'_>,
    at: Granularity,
) -> Result<(Layout, Vec<f64>, Vec<f64>), OpError> {
    let scale = inputs.req(1)?;
    let layout = Layout::resolve(x.dims, scale.dims, at.axis, at.block)?;
    let s = wide_values(scale.data);
    let z = match inputs.get(2) {
        Some(z) if z.len() == s.len() => wide_values(z.data),
        Some(z) => {
            return Err(OpError::eval(format!("{op}: zero point {:?} and scale {:?} differ", z.dims, scale.dims)));
        }
        None => vec![0.0; s.len()],
    };
    Ok((layout, s, z))
}

/// Writes `f(i, x[i])` into every element of the numeric `o`, which must hold as many as `x`.
fn write_each<T: Number>(o: &mut [T], x: DataRef<'_>, f: impl Fn(usize, f64) -> f64) -> Result<(), OpError> {
    if o.len() != x.len() {
        return Err(OpError::eval(format!("output of {} elements for {} inputs", o.len(), x.len())));
    }
    for_each_wide(x, |i, w| o[i] = T::from_f64(f(i, w.to_f64())));
    Ok(())
}

/// The node as a fused expression when its scale is one value of a rank the input broadcasts
/// over, else a launch of `linear.cu`.
fn linear_gpu(
    ctx: &GpuCtx<'_>,
    at: Granularity,
    expr: impl Fn(DType, DType, bool) -> String,
) -> Result<GpuNode, OpError> {
    let (x, s, out) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0)?);
    let zp = ctx.inputs.get(2).and_then(Option::as_ref);
    let layout = Layout::resolve(&x.dims, &s.dims, at.axis, at.block)?;
    let expr = expr(x.dtype, s.dtype, zp.is_some());
    let fits = |d: &[usize]| d.len() <= x.dims.len();
    if layout.sa == 0 && layout.so == 0 && fits(&s.dims) && zp.is_none_or(|z| fits(&z.dims)) {
        return Ok(GpuNode::Elementwise(expr));
    }
    let n = numel(&x.dims);
    let mut meta = vec![ext(n as usize)];
    meta.extend(layout.meta());
    let mut slots = vec![Slot::In(0), Slot::In(1)];
    slots.extend(zp.map(|_| Slot::In(2)));
    slots.push(Slot::Out(0));
    let kernel = LinearKernel { x: x.dtype, scale: s.dtype, zp: zp.map(|z| z.dtype), out: out.dtype, expr };
    Ok(GpuNode::Launches(vec![GpuLaunch::new(kernel, meta, Work::Elements(n), slots)]))
}

impl Quantize {
    fn output_type(&self, zp: Option<DType>) -> Result<DType, OpError> {
        let out = match (zp, self.output_dtype) {
            (Some(z), Some(o)) if z != o => {
                return Err(OpError::infer(format!("QuantizeLinear: the zero point is {z} but output_dtype is {o}")));
            }
            (Some(z), _) => z,
            (None, Some(o)) => o,
            (None, None) => DType::U8,
        };
        check_quantized("QuantizeLinear", "the output (zero point) type", out, self.opset)?;
        Ok(out)
    }
}

impl Op for Quantize {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (x, s) = (inputs.req(0)?.ty, inputs.req(1)?.ty);
        let floats: &[DType] = if self.opset >= 19 { &[DType::F32, DType::F16, DType::BF16] } else { &[DType::F32] };
        require_dtype("QuantizeLinear", x.dtype, &[floats, &[DType::I32]].concat())?;
        let scales: &[DType] = if self.opset >= 23 { &[floats, &[DType::I32]].concat() } else { floats };
        require_dtype("QuantizeLinear scale", s.dtype, scales)?;
        let zp = inputs.get(2).map(|z| z.ty);
        check_zero_point("QuantizeLinear", s, zp)?;
        infer_layout(&x.dims, &s.dims, self.at.axis, self.at.block)?;
        Ok(vec![ValueType::new(self.output_type(zp.map(|z| z.dtype))?, x.dims.clone())])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let (layout, s, z) = parameters("QuantizeLinear", x, inputs, self.at)?;
        let div = division_type(x.dtype(), inputs.req(1)?.dtype(), self.precision);
        let range = quant_range(outputs[0].dtype()).ok_or_else(output_mismatch)?;
        let f = |i: usize, v: f64| {
            let j = layout.index(i);
            saturate(quotient(v, s[j], div), z[j], range)
        };
        each_number_mut!(&mut outputs[0].data, |o| write_each(o, x.data, f), _ => Err(output_mismatch()))
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        let out = match ctx.output(0) {
            Ok(o) => o.dtype,
            Err(e) => return Some(Err(e)),
        };
        let precision = self.precision;
        Some(linear_gpu(ctx, self.at, |x, s, zp| quantize_expr(x, s, division_type(x, s, precision), out, zp)))
    }
}

/// `DequantizeLinear`: `(x - x_zero_point) * x_scale`.
#[derive(Debug)]
struct Dequantize {
    at: Granularity,
    output_dtype: Option<DType>,
    opset: u32,
}

pub(super) fn build_dequantize(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let floats = [DType::F32, DType::F16, DType::BF16];
    let output_dtype = match (ctx.opset() >= 23).then(|| ctx.int_or("output_dtype", 0)).transpose()? {
        None | Some(0) => None,
        Some(code) => Some(dtype_attr(ctx, "output_dtype", code, &floats)?),
    };
    Ok(Box::new(Dequantize { at: granularity(ctx)?, output_dtype, opset: ctx.opset() }))
}

impl Op for Dequantize {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (x, s) = (inputs.req(0)?.ty, inputs.req(1)?.ty);
        if x.dtype != DType::I32 {
            check_quantized("DequantizeLinear", "x", x.dtype, self.opset)?;
        }
        let floats: &[DType] = if self.opset >= 19 { &[DType::F32, DType::F16, DType::BF16] } else { &[DType::F32] };
        require_dtype("DequantizeLinear scale", s.dtype, floats)?;
        let zp = inputs.get(2).map(|z| z.ty);
        if let Some(z) = zp
            && z.dtype != x.dtype
        {
            return Err(OpError::infer(format!(
                "DequantizeLinear: the zero point is {} but x is {}",
                z.dtype, x.dtype
            )));
        }
        check_zero_point("DequantizeLinear", s, zp)?;
        infer_layout(&x.dims, &s.dims, self.at.axis, self.at.block)?;
        Ok(vec![ValueType::new(self.output_dtype.unwrap_or(s.dtype), x.dims.clone())])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let (layout, s, z) = parameters("DequantizeLinear", x, inputs, self.at)?;
        let wide = x.dtype() == DType::I32;
        let value = |i: usize, v: f64| -> f32 {
            let j = layout.index(i);
            if wide { ((f64::from(v as f32) - z[j]) * s[j]) as f32 } else { (v as f32 - z[j] as f32) * s[j] as f32 }
        };
        let out = &mut outputs[0].data;
        if out.len() != x.len() {
            return Err(OpError::eval("DequantizeLinear: the output does not match the input"));
        }
        match out {
            DataMut::F32(o) => for_each_wide(x.data, |i, w| o[i] = value(i, w.to_f64())),
            DataMut::F16(o) => for_each_wide(x.data, |i, w| o[i] = half::f16::from_f32(value(i, w.to_f64())).to_bits()),
            DataMut::BF16(o) => {
                for_each_wide(x.data, |i, w| o[i] = half::bf16::from_f32(value(i, w.to_f64())).to_bits())
            }
            _ => return Err(output_mismatch()),
        }
        Ok(())
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        let out = match ctx.output(0) {
            Ok(o) => o.dtype,
            Err(e) => return Some(Err(e)),
        };
        Some(linear_gpu(ctx, self.at, |x, s, zp| dequantize_expr(x, s, out, zp)))
    }
}
