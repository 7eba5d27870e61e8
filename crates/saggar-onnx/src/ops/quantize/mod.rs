//! Linear quantization: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear ([`linear`],
//! [`dynamic`]), the integer products MatMulInteger and QLinearMatMul ([`matmul`]) and the integer
//! convolutions ConvInteger and QLinearConv ([`conv`]), computed as the ONNX reference does: integer
//! accumulation in 32 bits (wrapping), rounding half to even, saturation to the output type.
//!
//! Quantized values are int8, uint8, int16 and uint16; float8, int4, uint4 and float4 are refused
//! naming the type. A quotient out of range saturates (`x / 0` is an infinity, so a zero scale gives
//! the type's bounds) and NaN becomes the type's lowest value, on host and GPU alike.

mod conv;
mod dynamic;
pub(crate) mod gpu;
mod linear;
mod matmul;
#[cfg(test)]
mod tests;

use saggar_shape::{DType, Dim};

use crate::ops::shape_util::normalize_axis;
use crate::ops::{NodeCtx, OpEntry, OpError};
use crate::tensor::{DataRef, for_each_wide};

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "QuantizeLinear", since: 10, until: 12, build: linear::build_quantize },
    OpEntry { op_type: "QuantizeLinear", since: 13, until: 18, build: linear::build_quantize },
    OpEntry { op_type: "QuantizeLinear", since: 19, until: 20, build: linear::build_quantize },
    OpEntry { op_type: "QuantizeLinear", since: 21, until: 22, build: linear::build_quantize },
    OpEntry { op_type: "QuantizeLinear", since: 23, until: 24, build: linear::build_quantize },
    OpEntry { op_type: "DequantizeLinear", since: 10, until: 12, build: linear::build_dequantize },
    OpEntry { op_type: "DequantizeLinear", since: 13, until: 18, build: linear::build_dequantize },
    OpEntry { op_type: "DequantizeLinear", since: 19, until: 20, build: linear::build_dequantize },
    OpEntry { op_type: "DequantizeLinear", since: 21, until: 22, build: linear::build_dequantize },
    OpEntry { op_type: "DequantizeLinear", since: 23, until: 24, build: linear::build_dequantize },
    OpEntry { op_type: "DynamicQuantizeLinear", since: 11, until: 24, build: |_| Ok(Box::new(dynamic::Dynamic)) },
    OpEntry { op_type: "MatMulInteger", since: 10, until: 24, build: matmul::build_matmul_integer },
    OpEntry { op_type: "QLinearMatMul", since: 10, until: 20, build: matmul::build_qlinear_matmul },
    OpEntry { op_type: "QLinearMatMul", since: 21, until: 24, build: matmul::build_qlinear_matmul },
    OpEntry { op_type: "ConvInteger", since: 10, until: 24, build: conv::build_conv_integer },
    OpEntry { op_type: "QLinearConv", since: 10, until: 24, build: conv::build_qlinear_conv },
];

/// The quantized element types and their ranges.
pub(crate) fn quant_range(dtype: DType) -> Option<(f64, f64)> {
    Some(match dtype {
        DType::I8 => (-128.0, 127.0),
        DType::U8 => (0.0, 255.0),
        DType::I16 => (-32768.0, 32767.0),
        DType::U16 => (0.0, 65535.0),
        _ => return None,
    })
}

/// Checks that `dtype` is a quantized type `op` takes at `opset` (16-bit types from opset 21).
fn check_quantized(op: &str, what: &str, dtype: DType, opset: u32) -> Result<(), OpError> {
    let wide = matches!(dtype, DType::I16 | DType::U16);
    if quant_range(dtype).is_none() || (wide && opset < 21) {
        let allowed = if opset < 21 { "int8 or uint8" } else { "int8, uint8, int16 or uint16" };
        return Err(OpError::infer(format!("{op}: {what} must be {allowed} at opset {opset}, found {dtype}")));
    }
    Ok(())
}

/// Checks that `dtype` is int8 or uint8 (the integer products' operands).
fn check_8bit(op: &str, what: &str, dtype: DType) -> Result<(), OpError> {
    if matches!(dtype, DType::I8 | DType::U8) {
        Ok(())
    } else {
        Err(OpError::infer(format!("{op}: {what} must be int8 or uint8, found {dtype}")))
    }
}

/// The element type an `output_dtype` / `precision` attribute code names, among `allowed`; float8,
/// int4, uint4 and float4 codes are refused naming the type.
fn dtype_attr(ctx: &NodeCtx<'_>, name: &str, code: i64, allowed: &[DType]) -> Result<DType, OpError> {
    let small = match code {
        17 => Some("float8e4m3fn"),
        18 => Some("float8e4m3fnuz"),
        19 => Some("float8e5m2"),
        20 => Some("float8e5m2fnuz"),
        21 => Some("uint4"),
        22 => Some("int4"),
        23 => Some("float4e2m1"),
        24 => Some("float8e8m0"),
        _ => None,
    };
    let names: Vec<String> = allowed.iter().map(ToString::to_string).collect();
    let supported = names.join(", ");
    if let Some(ty) = small {
        return Err(ctx.unsupported(
            name,
            format!("{code} ({ty}: 4- and 8-bit floats and 4-bit integers are not supported)"),
            &supported,
        ));
    }
    crate::import::proto::dtype_from_onnx(code)
        .filter(|d| allowed.contains(d))
        .ok_or_else(|| ctx.unsupported(name, code, &supported))
}

/// How the elements of an input index its scale and zero point: element `(o, l, k)` of the input
/// viewed `[outer, len, inner]` around the axis reads `o * so + (l / block) * sa + k * sk`.
/// Per tensor all steps are 0; per axis `sa` is 1; blocked, the scale is the input's shape with
/// `ceil(len / block)` along the axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    pub len: usize,
    pub inner: usize,
    pub so: usize,
    pub block: usize,
    pub sa: usize,
    pub sk: usize,
}

impl Layout {
    /// The layout of a scale of `scale` dims against an input of `x` dims with `axis` and
    /// `block_size` (0: per axis), as the spec says: one element is per tensor, a vector the axis's
    /// length per axis, and with a block size the input's shape blocked along the axis.
    pub(crate) fn resolve(x: &[usize], scale: &[usize], axis: i64, block: usize) -> Result<Layout, OpError> {
        let count: usize = scale.iter().product();
        if count == 1 {
            return Ok(Layout { len: 1, inner: 1, so: 0, block: 1, sa: 0, sk: 0 });
        }
        let a = normalize_axis(axis, x.len()).map_err(|e| OpError::eval(e.to_string()))?;
        let (len, inner) = (x[a], x[a + 1..].iter().product::<usize>());
        if block == 0 {
            if scale.len() != 1 || scale[0] != len {
                return Err(OpError::eval(format!(
                    "a per-axis scale must be a vector of the length of axis {a} of {x:?} ({len}), found {scale:?}"
                )));
            }
            return Ok(Layout { len, inner, so: 0, block: 1, sa: 1, sk: 0 });
        }
        let blocks = len.div_ceil(block);
        let same = scale.len() == x.len() && (0..x.len()).all(|d| scale[d] == if d == a { blocks } else { x[d] });
        if !same {
            return Err(OpError::eval(format!(
                "a blocked scale for {x:?} with block_size {block} along axis {a} must have shape {:?}, found {scale:?}",
                (0..x.len()).map(|d| if d == a { blocks } else { x[d] }).collect::<Vec<_>>()
            )));
        }
        Ok(Layout { len, inner, so: blocks * inner, block, sa: inner, sk: 1 })
    }

    /// The scale index of input element `i`.
    pub(crate) fn index(&self, i: usize) -> usize {
        let (k, r) = (i % self.inner, i / self.inner);
        let (l, o) = (r % self.len, r / self.len);
        o * self.so + (l / self.block) * self.sa + k * self.sk
    }

    /// The GPU kernels' `meta` table after the element count: `len, inner, so, block, sa, sk`.
    pub(crate) fn meta(&self) -> [i64; 6] {
        [self.len, self.inner, self.so, self.block, self.sa, self.sk].map(crate::ops::gpu::ext)
    }
}

/// Checks at inference that a scale (or zero point) of `scale` dims can serve an input of `x` dims
/// with `axis` and `block_size`, where the extents are known.
fn infer_layout(x: &[Dim], scale: &[Dim], axis: i64, block: usize) -> Result<(), OpError> {
    let fixed = |d: &[Dim]| d.iter().map(|v| v.as_fixed().map(|v| v as usize)).collect::<Option<Vec<_>>>();
    if let (Some(x), Some(s)) = (fixed(x), fixed(scale)) {
        Layout::resolve(&x, &s, axis, block).map_err(|e| OpError::infer(e.to_string()))?;
    } else if scale.len() > 1 && block == 0 {
        return Err(OpError::infer(format!("a per-axis scale must be a vector, found rank {}", scale.len())));
    }
    Ok(())
}

/// The values of a small numeric input (scales, zero points) as f64, exactly for every type but
/// 64-bit integers.
fn wide_values(data: DataRef<'_>) -> Vec<f64> {
    let mut v = vec![0.0; data.len()];
    for_each_wide(data, |i, w| v[i] = w.to_f64());
    v
}

/// `v` rounded to the precision of `dtype` (f32, f16, bf16; f64 as it is).
fn round_to(dtype: DType, v: f64) -> f64 {
    match dtype {
        DType::F16 => half::f16::from_f32(v as f32).to_f64(),
        DType::BF16 => half::bf16::from_f32(v as f32).to_f64(),
        DType::F64 => v,
        _ => f64::from(v as f32),
    }
}

/// Rounds half to even and saturates `v + zero_point` into `[lo, hi]` (NaN gives `lo`), as the GPU
/// expression `fmin(fmax(rint(v) + zp, lo), hi)` does.
fn saturate(v: f64, zero_point: f64, (lo, hi): (f64, f64)) -> f64 {
    (v.round_ties_even() + zero_point).max(lo).min(hi)
}

/// A checked `usize` from an attribute.
fn block_size(ctx: &NodeCtx<'_>) -> Result<usize, OpError> {
    let b = ctx.int_or("block_size", 0)?;
    usize::try_from(b).map_err(|_| OpError::attribute("block_size", format!("must be 0 or positive, found {b}")))
}

/// The requantisation of QLinearMatMul and QLinearConv: `a_scale * b_scale / y_scale` computed in
/// the scales' type `ty`, as numpy does.
fn multiplier(a_scale: f64, b_scale: f64, y_scale: f64, ty: DType) -> f64 {
    round_to(ty, round_to(ty, a_scale * b_scale) / y_scale)
}

/// `acc * multiplier + zero_point` in f64, rounded half to even and saturated into `range` (NaN
/// gives the lowest value), as the GPU epilogue computes it.
fn requantize(acc: i32, multiplier: f64, zero_point: f64, (lo, hi): (f64, f64)) -> f64 {
    (f64::from(acc) * multiplier + zero_point).round_ties_even().max(lo).min(hi)
}

/// 0 for a per-tensor parameter of `count` elements, 1 for one per row or column (`extent` of
/// them); an evaluation error otherwise.
fn step(op: &str, what: &str, count: usize, extent: usize) -> Result<usize, OpError> {
    match count {
        1 => Ok(0),
        c if c == extent => Ok(1),
        c => Err(OpError::eval(format!("{op}: {what} must hold 1 or {extent} values, found {c}"))),
    }
}

/// The elements of an int8 or uint8 input less its zero point (per tensor, or per group of `inner`
/// consecutive elements cycling through the zero point's values, per row or channel): the operand
/// of the integer products.
fn centred(op: &str, x: DataRef<'_>, zp: Option<DataRef<'_>>, inner: usize) -> Result<Vec<i32>, OpError> {
    let z = zp.map(wide_values).unwrap_or_else(|| vec![0.0]);
    if !matches!(x.dtype(), DType::I8 | DType::U8) {
        return Err(OpError::eval(format!("{op} takes int8 or uint8 operands, found {}", x.dtype())));
    }
    let mut v = vec![0i32; x.len()];
    let per = z.len() > 1;
    for_each_wide(x, |i, w| {
        let j = if per { (i / inner.max(1)) % z.len() } else { 0 };
        v[i] = w.to_f64() as i32 - z[j] as i32;
    });
    Ok(v)
}

/// Checks that a per-tensor parameter holds one value.
fn single(op: &str, what: &str, count: usize) -> Result<(), OpError> {
    if count == 1 { Ok(()) } else { Err(OpError::eval(format!("{op}: {what} must hold one value, found {count}"))) }
}

/// The integer products' input checks at inference: the zero points of `zero_points` (slot,
/// operand type, name) of their operand's type (required for the QLinear ops), and for those the
/// scales (inputs 1, 4, 6) floats and the output zero point (input 7) int8 or uint8. The output
/// type: int32, or the output zero point's.
fn check_product_inputs(
    op: &str,
    inputs: &crate::ops::InferInputs<'_>,
    zero_points: [(usize, DType, &str); 2],
    qlinear: bool,
) -> Result<DType, OpError> {
    for (slot, want, what) in zero_points {
        let zp = if qlinear { Some(inputs.req(slot)?) } else { inputs.get(slot) };
        if let Some(z) = zp
            && z.ty.dtype != want
        {
            return Err(OpError::infer(format!("{op}: {what} is {} but its operand is {want}", z.ty.dtype)));
        }
    }
    if !qlinear {
        return Ok(DType::I32);
    }
    for slot in [1, 4, 6] {
        let s = inputs.req(slot)?.ty.dtype;
        if !matches!(s, DType::F32 | DType::F16 | DType::BF16) {
            return Err(OpError::infer(format!("{op}: scales must be f32, f16 or bf16, found {s}")));
        }
    }
    let y = inputs.req(7)?.ty.dtype;
    check_8bit(op, "y_zero_point", y)?;
    Ok(y)
}

/// Writes `f(i)` into every element of `o`.
fn write_numbers<T: crate::tensor::Number>(o: &mut [T], f: impl Fn(usize) -> f64) -> Result<(), OpError> {
    o.iter_mut().enumerate().for_each(|(i, o)| *o = T::from_f64(f(i)));
    Ok(())
}
