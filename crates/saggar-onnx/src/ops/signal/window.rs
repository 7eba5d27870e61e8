//! The window functions (Hann, Hamming, Blackman: `size` samples, periodic or symmetric) and
//! MelWeightMatrix (triangular filters mapping `dft_length / 2 + 1` spectrogram bins to
//! `num_mel_bins` mel bands), computed in f64 as the ONNX reference does and stored in
//! `output_datatype`. Their sizes must be constants; they have no device code (folded at import).

use std::f64::consts::PI;

use saggar_shape::{DType, Dim};

use super::{const_scalar, eval_number, eval_scalar, output_datatype, store};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType, unknown_dim};
use crate::tensor::TensorMut;

/// Which window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Hann,
    Hamming,
    Blackman,
}

/// `HannWindow` / `HammingWindow` / `BlackmanWindow`.
#[derive(Debug)]
struct Window {
    kind: Kind,
    periodic: bool,
    dtype: DType,
}

pub(super) fn build_window(ctx: &mut NodeCtx<'_>, kind: Kind) -> Result<Box<dyn Op>, OpError> {
    let periodic = crate::ops::sample::flag(ctx, "periodic", 1)?;
    Ok(Box::new(Window { kind, periodic, dtype: output_datatype(ctx)? }))
}

/// A size input's value as an extent (`None` while not constant).
fn extent(value: Option<i64>, name: &str) -> Result<Option<usize>, OpError> {
    value
        .map(|v| usize::try_from(v).map_err(|_| OpError::infer(format!("{name} must not be negative, found {v}"))))
        .transpose()
}

impl Window {
    /// Sample `n` of a window of `size`.
    fn value(&self, n: usize, size: usize) -> f64 {
        let denom = if self.periodic { size as f64 } else { size as f64 - 1.0 };
        let n = n as f64;
        match self.kind {
            Kind::Hann => (n * PI / denom).sin().powi(2),
            Kind::Hamming => {
                let alpha = 25.0 / 46.0;
                alpha - (n * PI * 2.0 / denom).cos() * (1.0 - alpha)
            }
            Kind::Blackman => (n * (PI * 2.0) / denom).cos() * -0.5 + (n * (PI * 4.0) / denom).cos() * 0.08 + 0.42,
        }
    }
}

impl Op for Window {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let size = extent(const_scalar(inputs.req(0)?, "size")?, "size")?;
        Ok(vec![ValueType::new(self.dtype, vec![size.map_or_else(unknown_dim, |s| Dim::Fixed(s as u64))])])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let size = usize::try_from(eval_scalar(inputs.req(0)?, "size")?)
            .map_err(|_| OpError::eval("size must not be negative"))?;
        store(&mut outputs[0], (0..size).map(|n| self.value(n, size)))
    }
}

/// `MelWeightMatrix`.
#[derive(Debug)]
struct MelWeightMatrix {
    dtype: DType,
}

pub(super) fn build_mel_weight_matrix(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(MelWeightMatrix { dtype: output_datatype(ctx)? }))
}

/// `a // b` on floats, as Python computes it.
fn floor_div(a: f64, b: f64) -> f64 {
    let m = a % b;
    let mut div = (a - m) / b;
    if m != 0.0 && ((b < 0.0) != (m < 0.0)) {
        div -= 1.0;
    }
    let f = div.floor();
    if div - f > 0.5 { f + 1.0 } else { f }
}

/// The mel filter bank `[dft_length / 2 + 1, bands]` (row-major), as the ONNX reference computes
/// it: band edges evenly spaced in mel (low and high in f32), mapped to spectrogram bins.
fn mel_weights(bands: usize, dft_length: usize, sample_rate: f64, low: f32, high: f32) -> Result<Vec<f64>, OpError> {
    let bins = dft_length / 2 + 1;
    let mel = |hz: f32| 2595.0f32 * (1.0 + hz / 700.0).log10();
    let (low_mel, high_mel) = (mel(low), mel(high));
    let step = (high_mel - low_mel) / (bands + 2) as f32;
    let edges: Vec<i64> = (0..bands + 2)
        .map(|i| {
            let m = i as f64 * f64::from(step) + f64::from(low_mel);
            let hz = 700.0 * (10f64.powf(m / 2595.0) - 1.0);
            floor_div((dft_length + 1) as f64 * hz, sample_rate) as i64
        })
        .collect();
    if let Some(bad) = edges.iter().find(|&&e| e < 0 || e >= bins as i64) {
        return Err(OpError::eval(format!(
            "MelWeightMatrix: the band edges {lo}..{hi} Hz at sample rate {sample_rate} reach spectrogram bin {bad}, outside \
             0..{bins}",
            lo = low,
            hi = high
        )));
    }
    let mut out = vec![0.0f64; bins * bands];
    for i in 0..bands {
        let (lo, center, hi) = (edges[i] as usize, edges[i + 1] as usize, edges[i + 2] as usize);
        if center == lo {
            out[center * bands + i] = 1.0;
        } else {
            for j in lo..=center {
                out[j * bands + i] = (j - lo) as f64 / (center as f64 - lo as f64);
            }
        }
        for j in center..hi {
            out[j * bands + i] = (hi - j) as f64 / (hi - center) as f64;
        }
    }
    Ok(out)
}

impl Op for MelWeightMatrix {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let bands = extent(const_scalar(inputs.req(0)?, "num_mel_bins")?, "num_mel_bins")?;
        let dft_length = extent(const_scalar(inputs.req(1)?, "dft_length")?, "dft_length")?;
        const_scalar(inputs.req(2)?, "sample_rate")?;
        for (i, name) in [(3, "lower_edge_hertz"), (4, "upper_edge_hertz")] {
            let ty = inputs.req(i)?.ty;
            if ty.dtype != DType::F32 || ty.rank() > 1 {
                return Err(OpError::infer(format!("{name} must be an f32 scalar, found {ty}")));
            }
        }
        let dim = |v: Option<usize>| v.map_or_else(unknown_dim, |v| Dim::Fixed(v as u64));
        Ok(vec![ValueType::new(self.dtype, vec![dim(dft_length.map(|l| l / 2 + 1)), dim(bands)])])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let positive = |i: usize, name: &str| -> Result<usize, OpError> {
            let v = eval_scalar(inputs.req(i)?, name)?;
            usize::try_from(v).map_err(|_| OpError::eval(format!("{name} must not be negative, found {v}")))
        };
        let (bands, dft_length, rate) =
            (positive(0, "num_mel_bins")?, positive(1, "dft_length")?, positive(2, "sample_rate")?);
        if rate == 0 {
            return Err(OpError::eval("MelWeightMatrix sample_rate must be positive"));
        }
        let low = eval_number(inputs.req(3)?, "lower_edge_hertz")? as f32;
        let high = eval_number(inputs.req(4)?, "upper_edge_hertz")? as f32;
        let weights = mel_weights(bands, dft_length, rate as f64, low, high)?;
        store(&mut outputs[0], weights.into_iter())
    }
}
