//! The GPU forms of the quantization family: QuantizeLinear and DequantizeLinear as elementwise
//! expressions (per tensor, fused) or launches of `linear.cu` (per axis, blocked); the integer
//! products (`qmatmul.cu`) and convolutions (`qconv.cu`), one thread per output element, accumulating
//! in 32 bits; DynamicQuantizeLinear in one block (`dynamic_quantize.cu`).

use saggar_shape::DType;

use super::quant_range;
use crate::ops::gpu::{BLOCK, GpuKernel, MAX_SPATIAL, ctype, load_f32, render, store_f32};

/// A C++ `double` literal of an integral bound.
fn bound(v: f64) -> String {
    format!("{v:.1}")
}

/// `e` (an f32 expression) rounded to the precision of `dtype` and back to f32.
fn round_f32(dtype: DType, e: &str) -> String {
    match dtype {
        DType::F16 | DType::BF16 => load_f32(dtype, &store_f32(dtype, e)),
        _ => e.to_string(),
    }
}

/// `e`, an element of type `dtype`, as f32 (integers converted).
fn as_f32(dtype: DType, e: &str) -> String {
    match dtype {
        DType::F16 | DType::BF16 => load_f32(dtype, e),
        _ => format!("(float)({e})"),
    }
}

/// QuantizeLinear's expression of `$0` (x of type `x`), `$1` (its scale of type `scale`) and, with
/// `zp`, `$2` (the zero point): the quotient in the precision of `div` (f64, f32 or a half, rounded
/// to it from f32, as the host does), rounded half to even, plus the zero point, saturated to `out`.
/// A quotient in f32 or half is rounded, offset and saturated in f32: exact, since the zero points
/// (16 bits at most) and every integer the saturation keeps are f32 integers, and a quotient of
/// 2^24 or more saturates either way; f64 there cost the int8 chains conversions on every element.
pub(crate) fn quantize_expr(x: DType, scale: DType, div: DType, out: DType, zp: bool) -> String {
    let (lo, hi) = quant_range(out).unwrap_or((0.0, 0.0));
    let t = ctype(out).unwrap_or("unsigned char");
    if div == DType::F64 {
        let q = format!("(double)({}) / (double)({})", as_f32_exact(x, "$0"), as_f32_exact(scale, "$1"));
        let z = if zp { "(double)($2)" } else { "0.0" };
        return format!("({t})fmin(fmax(rint({q}) + {z}, {}), {})", bound(lo), bound(hi));
    }
    let q = round_f32(div, &format!("{} / {}", as_f32(x, "$0"), as_f32(scale, "$1")));
    let z = if zp { "(float)($2)" } else { "0.0f" };
    format!("({t})fminf(fmaxf(rintf({q}) + {z}, {}f), {}f)", bound(lo), bound(hi))
}

/// `e` widened exactly toward f64: integers as they are, halves through f32.
fn as_f32_exact(dtype: DType, e: &str) -> String {
    match dtype {
        DType::F16 | DType::BF16 => load_f32(dtype, e),
        _ => e.to_string(),
    }
}

/// DequantizeLinear's expression of `$0` (x of type `x`), `$1` (the scale) and, with `zp`, `$2`:
/// `(x - zp) * scale` in f32 for 8- and 16-bit x, in f64 from x rounded to f32 for int32 x (as the
/// reference's numpy promotion computes), written as `out`.
pub(crate) fn dequantize_expr(x: DType, scale: DType, out: DType, zp: bool) -> String {
    let z = if zp { "$2" } else { "0" };
    let s = as_f32(scale, "$1");
    let v = if x == DType::I32 {
        format!("(float)(((double)(float)($0) - (double)({z})) * (double)({s}))")
    } else {
        format!("((float)($0) - (float)({z})) * {s}")
    };
    store_f32(out, &v)
}

/// The requantisation of a 32-bit sum `acc` as QLinearMatMul and QLinearConv do: times the
/// multiplier `a_scale * b_scale / y_scale` (computed in the scales' type `scale`), plus the output
/// zero point, in f64, rounded half to even and saturated to `out`.
fn requantize_expr(scale: DType, out: DType, a_scale: &str, b_scale: &str) -> String {
    let product = round_f32(scale, &format!("{} * {}", as_f32(scale, a_scale), as_f32(scale, b_scale)));
    let multiplier = round_f32(scale, &format!("({product}) / {}", as_f32(scale, "ys[0]")));
    let (lo, hi) = quant_range(out).unwrap_or((0.0, 0.0));
    let t = ctype(out).unwrap_or("unsigned char");
    format!(
        "({t})fmin(fmax(rint((double)(int)acc * (double)({multiplier}) + (double)yzp[0]), {}), {})",
        bound(lo),
        bound(hi)
    )
}

/// QuantizeLinear or DequantizeLinear per axis or blocked (`linear.cu`): `expr` of `$0`, `$1` and
/// (with a zero point of type `zp`) `$2`, as [`quantize_expr`] or [`dequantize_expr`] give it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LinearKernel {
    pub(crate) x: DType,
    pub(crate) scale: DType,
    pub(crate) zp: Option<DType>,
    pub(crate) out: DType,
    pub(crate) expr: String,
}

impl GpuKernel for LinearKernel {
    fn prefix(&self) -> &'static str {
        "quant_linear"
    }

    fn source(&self) -> String {
        let c = |d: DType| ctype(d).unwrap_or("float");
        let zp = self.zp.map(|z| format!(", const {}* __restrict__ z", c(z))).unwrap_or_default();
        let expr = self.expr.replace("$0", "x[i]").replace("$1", "s[j]").replace("$2", "z[j]");
        render(
            include_str!("linear.cu"),
            &[("TX", c(self.x)), ("TS", c(self.scale)), ("ZP_PARAM", &zp), ("TY", c(self.out)), ("EXPR", &expr)],
        )
    }
}

/// What an integer product or convolution writes: the int32 sum, or (QLinear*) the sum requantised
/// through scales of type `scale` into `out`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Epilogue {
    Sum,
    Requantize { scale: DType, out: DType },
}

impl Epilogue {
    fn out(self) -> DType {
        match self {
            Epilogue::Sum => DType::I32,
            Epilogue::Requantize { out, .. } => out,
        }
    }

    /// The scale and zero point parameters, and the result expression given the two scales' reads.
    fn render(self, a_scale: &str, b_scale: &str, a_name: &str, b_name: &str) -> (String, String) {
        match self {
            Epilogue::Sum => (String::new(), "(int)acc".into()),
            Epilogue::Requantize { scale, out } => {
                let (s, t) = (ctype(scale).unwrap_or("float"), ctype(out).unwrap_or("unsigned char"));
                let params = format!(
                    ", const {s}* __restrict__ {a_name}, const {s}* __restrict__ {b_name}, const {s}* __restrict__ ys, const {t}* __restrict__ yzp"
                );
                (params, requantize_expr(scale, out, a_scale, b_scale))
            }
        }
    }
}

/// A C++ parameter `, const T* __restrict__ name` when `present`.
fn param(present: Option<DType>, name: &str) -> String {
    present.map(|d| format!(", const {}* __restrict__ {name}", ctype(d).unwrap_or("int"))).unwrap_or_default()
}

/// MatMulInteger and QLinearMatMul (`qmatmul.cu`): a of type `a`, b of type `b`, zero points of
/// those types when `a_zp` / `b_zp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QMatMulKernel {
    pub(crate) a: DType,
    pub(crate) b: DType,
    pub(crate) a_zp: bool,
    pub(crate) b_zp: bool,
    pub(crate) epilogue: Epilogue,
}

impl GpuKernel for QMatMulKernel {
    fn prefix(&self) -> &'static str {
        "qmatmul"
    }

    fn source(&self) -> String {
        let (scales, result) = self.epilogue.render("as[row * ass]", "bs[col * bss]", "as", "bs");
        let params = format!(
            "{}{}{scales}",
            param(self.a_zp.then_some(self.a), "azp"),
            param(self.b_zp.then_some(self.b), "bzp")
        );
        let zp = |on: bool, e: &str| if on { e.to_string() } else { "0".into() };
        render(
            include_str!("qmatmul.cu"),
            &[
                ("TA", ctype(self.a).unwrap_or("signed char")),
                ("TB", ctype(self.b).unwrap_or("signed char")),
                ("TY", ctype(self.epilogue.out()).unwrap_or("int")),
                ("PARAMS", &params),
                ("AZP", &zp(self.a_zp, "(int)azp[row * azs]")),
                ("BZP", &zp(self.b_zp, "(int)bzp[col * bzs]")),
                ("RESULT", &result),
            ],
        )
    }
}

/// ConvInteger and QLinearConv (`qconv.cu`): x of type `x`, w of type `w`, zero points when `x_zp`
/// / `w_zp`, an int32 bias when `bias`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QConvKernel {
    pub(crate) x: DType,
    pub(crate) w: DType,
    pub(crate) x_zp: bool,
    pub(crate) w_zp: bool,
    pub(crate) bias: bool,
    pub(crate) epilogue: Epilogue,
}

impl GpuKernel for QConvKernel {
    fn prefix(&self) -> &'static str {
        "qconv"
    }

    fn source(&self) -> String {
        let (scales, result) = self.epilogue.render("xs[0]", "ws[m * wss]", "xs", "ws");
        let params = format!(
            "{}{}{}{scales}",
            param(self.x_zp.then_some(self.x), "xzp"),
            param(self.w_zp.then_some(self.w), "wzp"),
            param(self.bias.then_some(DType::I32), "bias")
        );
        let zp = |on: bool, e: &str| if on { e.to_string() } else { "0".into() };
        render(
            include_str!("qconv.cu"),
            &[
                ("TX", ctype(self.x).unwrap_or("signed char")),
                ("TW", ctype(self.w).unwrap_or("signed char")),
                ("TY", ctype(self.epilogue.out()).unwrap_or("int")),
                ("PARAMS", &params),
                ("XZP", &zp(self.x_zp, "(int)xzp[0]")),
                ("WZP", &zp(self.w_zp, "(int)wzp[m * wzs]")),
                ("INIT", if self.bias { "(unsigned)bias[m]" } else { "0u" }),
                ("RESULT", &result),
                ("MAX_SPATIAL", &MAX_SPATIAL.to_string()),
            ],
        )
    }
}

/// DynamicQuantizeLinear in one block (`dynamic_quantize.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DynamicQuantizeKernel;

impl GpuKernel for DynamicQuantizeKernel {
    fn prefix(&self) -> &'static str {
        "dynamic_quantize"
    }

    fn source(&self) -> String {
        render(include_str!("dynamic_quantize.cu"), &[("BLOCK", &BLOCK.to_string())])
    }
}
