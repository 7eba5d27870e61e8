//! DFT (opset 17: `axis` attribute, default 1; opset 20: `axis` input, default -2) and STFT
//! (opset 17), computed directly: output bin `k` of a transform of length `L` sums the signal times
//! `exp(-+2 pi i k n / L)` (the angle from `k * n mod L`, exact), `inverse` scaling by `1 / L`. A
//! signal shorter than `dft_length` is zero-padded, a longer one truncated (the spec's rule);
//! `onesided` keeps bins `0..=L / 2`. STFT frames `[batch, signal, 1 or 2]` by `frame_step` and
//! `frame_length` (constants), weights each frame by `window` and transforms it:
//! `[batch, frames, bins, 2]`.

use std::f64::consts::TAU;

use saggar_shape::{DType, Dim};

use super::gpu::{DftKernel, StftKernel};
use super::{const_scalar, eval_scalar};
use crate::ops::conv::{check_len, check_out_dims, fixed};
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, ext, numel};
use crate::ops::sample::flag;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType, unknown_dim};
use crate::tensor::TensorMut;

/// Longest transform (dft_length, frame_length): the direct sum costs `L` per output bin.
const MAX_LENGTH: i64 = 1 << 24;

/// The constant scalar input `i` (`name`) of a node being lowered, `None` when absent.
fn lowered_scalar(ctx: &GpuCtx<'_>, i: usize, name: &str) -> Result<Option<i64>, OpError> {
    ctx.infer
        .get(i)
        .map(|v| const_scalar(v, name)?.ok_or_else(|| OpError::eval(format!("{name} must be a constant on GPU"))))
        .transpose()
}

/// `DFT`.
#[derive(Debug)]
struct Dft {
    /// Opset 17's `axis` attribute; `None` from opset 20 (the axis is input 2).
    axis_attr: Option<i64>,
    inverse: bool,
    onesided: bool,
}

pub(super) fn build_dft(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let axis_attr = if ctx.opset() < 20 { Some(ctx.int_or("axis", 1)?) } else { None };
    Ok(Box::new(Dft { axis_attr, inverse: flag(ctx, "inverse", 0)?, onesided: flag(ctx, "onesided", 0)? }))
}

/// A transform length in `1..=2^24`.
fn length(v: i64, name: &str) -> Result<usize, OpError> {
    if (1..=MAX_LENGTH).contains(&v) {
        Ok(v as usize)
    } else {
        Err(OpError::infer(format!("{name} must be in 1..={MAX_LENGTH}, found {v}")))
    }
}

/// Bins a transform of `len` gives.
fn bins(len: usize, onesided: bool) -> usize {
    if onesided { len / 2 + 1 } else { len }
}

/// The signal's complex parts (last axis 1 or 2).
fn parts(last: usize) -> Result<usize, OpError> {
    match last {
        1 | 2 => Ok(last),
        other => Err(OpError::infer(format!("a signal's last axis holds 1 (real) or 2 (complex) values, not {other}"))),
    }
}

/// One direct transform: `out[k] = scale * sum_{n < n_in} x[n] exp(sign 2 pi i k n / length)` for
/// `k < bins`, `x` read through `at(n) -> (re, im)`, bin `k` written to `y[put(k)]` and the next.
fn transform(
    (n_in, length, bins): (usize, usize, usize),
    inverse: bool,
    at: impl Fn(usize) -> (f64, f64),
    y: &mut [f32],
    put: impl Fn(usize) -> usize,
) {
    let (sign, scale) = if inverse { (1.0, 1.0 / length as f64) } else { (-1.0, 1.0) };
    let step = TAU / length as f64;
    for k in 0..bins {
        let (mut re, mut im) = (0.0f64, 0.0f64);
        for n in 0..n_in.min(length) {
            let m = (k as u64 * n as u64 % length as u64) as f64;
            let (s, c) = (m * step).sin_cos();
            let (xr, xi) = at(n);
            re += xr * c - sign * xi * s;
            im += xi * c + sign * xr * s;
        }
        let base = put(k);
        y[base] = (re * scale) as f32;
        y[base + 1] = (im * scale) as f32;
    }
}

impl Dft {
    /// The transformed axis of a signal of `rank` from the attribute or `axis` input value.
    fn axis(&self, rank: usize, input: Option<i64>) -> Result<usize, OpError> {
        let axis = self.axis_attr.or(input).unwrap_or(-2);
        let r = rank as i64;
        let a = if axis < 0 { axis + r } else { axis };
        if rank < 2 || !(0..r - 1).contains(&a) {
            return Err(OpError::infer(format!("DFT axis {axis} is out of range for a signal of rank {rank}")));
        }
        Ok(a as usize)
    }

    /// The output dims, `(outer, n_in, inner, parts)` and the length for input `dims`.
    fn geometry(
        &self,
        dims: &[usize],
        axis: usize,
        dft_length: Option<i64>,
    ) -> Result<(Vec<usize>, [usize; 5]), OpError> {
        let p = parts(dims[dims.len() - 1])?;
        let n_in = dims[axis];
        let len = match dft_length {
            Some(v) => length(v, "dft_length")?,
            None => length(n_in as i64, "the signal length (DFT without dft_length)")?,
        };
        let mut out = dims.to_vec();
        out[axis] = bins(len, self.onesided);
        *out.last_mut().unwrap_or(&mut 0) = 2;
        let outer: usize = dims[..axis].iter().product();
        let inner: usize = dims[axis + 1..dims.len() - 1].iter().product();
        Ok((out, [outer, n_in, inner, p, len]))
    }
}

impl Op for Dft {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        if x.dtype != DType::F32 || x.rank() < 2 {
            return Err(OpError::infer(format!("DFT takes an f32 signal of rank 2 or more, found {x}")));
        }
        if let Some(p) = fixed(&x.dims[x.rank() - 1]) {
            parts(p)?;
        }
        let dft_length = inputs.get(1).map(|i| const_scalar(i, "dft_length")).transpose()?;
        let axis_in = match (self.axis_attr, inputs.get(2)) {
            (None, Some(a)) => match const_scalar(a, "axis")? {
                Some(v) => Some(v),
                // Which extent changes is not known before the axis is: all are unknown.
                None => {
                    let mut dims: Vec<Dim> = (1..x.rank()).map(|_| unknown_dim()).collect();
                    dims.push(Dim::Fixed(2));
                    return Ok(vec![ValueType::new(DType::F32, dims)]);
                }
            },
            _ => None,
        };
        let axis = self.axis(x.rank(), axis_in)?;
        let mut dims = x.dims.clone();
        dims[axis] = match dft_length {
            Some(None) => unknown_dim(),
            Some(Some(v)) => Dim::Fixed(bins(length(v, "dft_length")?, self.onesided) as u64),
            None if self.onesided => fixed(&x.dims[axis]).map_or_else(unknown_dim, |n| Dim::Fixed((n / 2 + 1) as u64)),
            None => x.dims[axis].clone(),
        };
        dims[x.rank() - 1] = Dim::Fixed(2);
        Ok(vec![ValueType::new(DType::F32, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let xv = inputs.req(0)?;
        check_len("DFT", xv)?;
        let dft_length = inputs.get(1).map(|v| eval_scalar(v, "dft_length")).transpose()?;
        let axis_in = match self.axis_attr {
            None => inputs.get(2).map(|v| eval_scalar(v, "axis")).transpose()?,
            Some(_) => None,
        };
        let axis = self.axis(xv.dims.len(), axis_in).map_err(|e| OpError::eval(e.to_string()))?;
        let (out_dims, [outer, n_in, inner, p, len]) = self.geometry(xv.dims, axis, dft_length)?;
        check_out_dims("DFT", outputs[0].dims, out_dims.iter().copied())?;
        let (x, y) = (xv.f32s()?, outputs[0].f32s()?);
        let nb = out_dims[axis];
        for o in 0..outer {
            for i in 0..inner {
                let at = |n: usize| {
                    let base = ((o * n_in + n) * inner + i) * p;
                    (f64::from(x[base]), if p == 2 { f64::from(x[base + 1]) } else { 0.0 })
                };
                transform((n_in, len, nb), self.inverse, at, y, |k| ((o * nb + k) * inner + i) * 2);
            }
        }
        Ok(())
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let x = ctx.input(0)?;
            let dft_length = lowered_scalar(ctx, 1, "dft_length")?;
            let axis_in = if self.axis_attr.is_none() { lowered_scalar(ctx, 2, "axis")? } else { None };
            let axis = self.axis(x.dims.len(), axis_in)?;
            let (out_dims, [outer, n_in, inner, p, len]) = self.geometry(&x.dims, axis, dft_length)?;
            let nb = out_dims[axis];
            let meta = vec![
                ext(outer * nb * inner),
                ext(n_in),
                ext(inner),
                ext(p),
                ext(len),
                ext(nb),
                i64::from(self.inverse),
            ];
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                DftKernel,
                meta,
                Work::Elements((outer * nb * inner) as u64),
                vec![Slot::In(0), Slot::Out(0)],
            )]))
        })())
    }
}

/// `STFT`.
#[derive(Debug)]
struct Stft {
    onesided: bool,
}

pub(super) fn build_stft(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Stft { onesided: flag(ctx, "onesided", 1)? }))
}

/// An STFT's framing: `[batch, signal, parts]`, frame step and length, frames and bins.
#[derive(Debug, Clone, Copy)]
struct Frames {
    batch: usize,
    signal: usize,
    parts: usize,
    step: usize,
    length: usize,
    frames: usize,
    bins: usize,
}

impl Stft {
    /// The framing of a signal of `dims` by `step`, `frame_length` and a window of `window` samples.
    fn frames(
        &self,
        dims: &[usize],
        step: i64,
        frame_length: Option<i64>,
        window: Option<usize>,
    ) -> Result<Frames, OpError> {
        let [batch, signal, p] = dims[..] else {
            return Err(OpError::infer(format!("STFT takes a signal [batch, length, 1 or 2], found {dims:?}")));
        };
        let parts = parts(p)?;
        let step = length(step, "frame_step")?;
        let len = match (frame_length, window) {
            (Some(f), Some(w)) if f != w as i64 => {
                return Err(OpError::infer(format!("STFT frame_length {f} differs from the window's {w} samples")));
            }
            (Some(f), _) => length(f, "frame_length")?,
            (None, Some(w)) => length(w as i64, "the window length")?,
            (None, None) => length(signal as i64, "the signal length (STFT without a window or frame_length)")?,
        };
        if signal < len {
            return Err(OpError::infer(format!("STFT frame of {len} samples is longer than the signal ({signal})")));
        }
        let frames = (signal - len) / step + 1;
        Ok(Frames { batch, signal, parts, step, length: len, frames, bins: bins(len, self.onesided) })
    }
}

impl Op for Stft {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        if x.dtype != DType::F32 || x.rank() != 3 {
            return Err(OpError::infer(format!("STFT takes an f32 signal [batch, length, 1 or 2], found {x}")));
        }
        let step = const_scalar(inputs.req(1)?, "frame_step")?;
        let window = match inputs.get(2) {
            Some(w) if w.ty.dtype != DType::F32 || w.ty.rank() != 1 => {
                return Err(OpError::infer(format!("STFT window must be f32 [frame_length], found {}", w.ty)));
            }
            Some(w) => Some(fixed(&w.ty.dims[0])),
            None => None,
        };
        let frame_length = inputs.get(3).map(|f| const_scalar(f, "frame_length")).transpose()?;
        let unknown = ValueType::new(DType::F32, vec![x.dims[0].clone(), unknown_dim(), unknown_dim(), Dim::Fixed(2)]);
        let (Some(dims), Some(step)) = (x.fixed_dims(), step) else { return Ok(vec![unknown]) };
        let (fl, w) = match (frame_length, window) {
            (Some(None), _) | (_, Some(None)) => return Ok(vec![unknown]),
            (fl, w) => (fl.flatten(), w.flatten()),
        };
        let f = self.frames(&dims, step, fl, w)?;
        Ok(vec![ValueType::fixed(DType::F32, &[f.batch, f.frames, f.bins, 2])])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let xv = inputs.req(0)?;
        check_len("STFT", xv)?;
        let step = eval_scalar(inputs.req(1)?, "frame_step")?;
        let window = inputs.get(2).map(|w| w.f32s()).transpose()?;
        let frame_length = inputs.get(3).map(|f| eval_scalar(f, "frame_length")).transpose()?;
        let f = self
            .frames(xv.dims, step, frame_length, window.map(<[f32]>::len))
            .map_err(|e| OpError::eval(e.to_string()))?;
        check_out_dims("STFT", outputs[0].dims, [f.batch, f.frames, f.bins, 2])?;
        let (x, y) = (xv.f32s()?, outputs[0].f32s()?);
        for b in 0..f.batch {
            for fr in 0..f.frames {
                let at = |n: usize| {
                    let base = (b * f.signal + fr * f.step + n) * f.parts;
                    let w = window.map_or(1.0, |w| f64::from(w[n]));
                    let xi = if f.parts == 2 { f64::from(x[base + 1]) } else { 0.0 };
                    (f64::from(x[base]) * w, xi * w)
                };
                transform((f.length, f.length, f.bins), false, at, y, |k| ((b * f.frames + fr) * f.bins + k) * 2);
            }
        }
        Ok(())
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let x = ctx.input(0)?;
            let step = lowered_scalar(ctx, 1, "frame_step")?.ok_or_else(|| OpError::eval("STFT needs frame_step"))?;
            let window = ctx.inputs.get(2).and_then(Option::as_ref).map(|w| numel(&w.dims) as usize);
            let f = self.frames(&x.dims, step, lowered_scalar(ctx, 3, "frame_length")?, window)?;
            let meta = vec![
                ext(f.batch * f.frames * f.bins),
                ext(f.signal),
                ext(f.parts),
                ext(f.step),
                ext(f.length),
                ext(f.frames),
                ext(f.bins),
            ];
            let mut slots = vec![Slot::In(0)];
            slots.extend(window.map(|_| Slot::In(2)));
            slots.push(Slot::Out(0));
            let work = Work::Elements((f.batch * f.frames * f.bins) as u64);
            Ok(GpuNode::Launches(vec![GpuLaunch::new(StftKernel { window: window.is_some() }, meta, work, slots)]))
        })())
    }
}
