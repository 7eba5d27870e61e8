//! `--check-outputs`: outputs compared with expected tensors, element by element, and the JSON
//! field `check` that reports it.

use saggar_onnx::{Tensor, TensorData};
use saggar_shape::DType;
use serde::Serialize;

/// One output compared by `--check-outputs`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CheckedOutput {
    /// The model output.
    pub name: String,
    /// Elements compared.
    pub elements: u64,
    /// Elements outside the tolerance (a shape or type difference counts every element).
    pub mismatches: u64,
    /// Largest |actual - expected|.
    pub max_abs_error: f64,
    /// Largest |actual - expected| / |expected| (over elements with a non-zero expected value).
    pub max_rel_error: f64,
    /// What differs besides values (shape, element type), if anything.
    pub problem: Option<String>,
}

/// The JSON field `check` of `saggar perf --check-outputs`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Check {
    /// The folder of expected outputs.
    pub dir: String,
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance: an element matches when |actual - expected| <= atol + rtol * |expected|.
    pub atol: f64,
    /// Each output compared.
    pub outputs: Vec<CheckedOutput>,
    /// Largest absolute error over every output.
    pub max_abs_error: f64,
    /// Largest relative error over every output.
    pub max_rel_error: f64,
    /// Whether every element of every output matched.
    pub passed: bool,
}

/// Compares `got` with `want` (binding order): floats within `atol + rtol * |want|` (NaN equals
/// NaN), integers and booleans exactly.
pub fn compare(names: &[&str], got: &[Tensor], want: &[Tensor], rtol: f64, atol: f64) -> Vec<CheckedOutput> {
    compare_with(names, got, want, &|expected: f64| atol + rtol * expected.abs())
}

/// [`compare`] with the float tolerance a function of the expected value.
pub fn compare_with(
    names: &[&str],
    got: &[Tensor],
    want: &[Tensor],
    tolerance: &dyn Fn(f64) -> f64,
) -> Vec<CheckedOutput> {
    names
        .iter()
        .zip(got.iter().zip(want))
        .map(|(name, (g, w))| {
            let mut out = CheckedOutput {
                name: name.to_string(),
                elements: w.len() as u64,
                mismatches: 0,
                max_abs_error: 0.0,
                max_rel_error: 0.0,
                problem: None,
            };
            if g.dtype() != w.dtype() || g.dims() != w.dims() {
                out.mismatches = out.elements;
                out.problem = Some(format!("got {} {:?}, expected {} {:?}", g.dtype(), g.dims(), w.dtype(), w.dims()));
                return out;
            }
            let pairs: Vec<(f64, f64)> = match (g.data(), w.data()) {
                (TensorData::F32(a), TensorData::F32(b)) => {
                    a.iter().zip(b).map(|(&x, &y)| (f64::from(x), f64::from(y))).collect()
                }
                (TensorData::I64(a), TensorData::I64(b)) => {
                    a.iter().zip(b).map(|(&x, &y)| (x as f64, y as f64)).collect()
                }
                (TensorData::I32(a), TensorData::I32(b)) => {
                    a.iter().zip(b).map(|(&x, &y)| (f64::from(x), f64::from(y))).collect()
                }
                (TensorData::Bool(a), TensorData::Bool(b)) => {
                    a.iter().zip(b).map(|(&x, &y)| (f64::from(x), f64::from(y))).collect()
                }
                // Half precisions compare as their f32 values.
                _ => match (g.to_f32s(), w.to_f32s()) {
                    (Some(a), Some(b)) => a.iter().zip(&b).map(|(&x, &y)| (f64::from(x), f64::from(y))).collect(),
                    _ => Vec::new(),
                },
            };
            let float = matches!(g.dtype(), DType::F32 | DType::F16 | DType::BF16);
            for (x, y) in pairs {
                if x.is_nan() && y.is_nan() {
                    continue;
                }
                let abs = if x == y { 0.0 } else { (x - y).abs() };
                out.max_abs_error = out.max_abs_error.max(abs);
                if y != 0.0 {
                    out.max_rel_error = out.max_rel_error.max(abs / y.abs());
                }
                let ok = if float { abs <= tolerance(y) } else { abs == 0.0 };
                out.mismatches += u64::from(!ok);
            }
            out
        })
        .collect()
}
