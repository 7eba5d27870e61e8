//! Losses (opset 12): NegativeLogLikelihoodLoss over log-probabilities `(N, C, d...)` and
//! SoftmaxCrossEntropyLoss over scores (their log-softmax along `C`, also the optional second
//! output `log_prob`), both against class indices `(N, d...)`.
//!
//! Each position's term is `-logp[n, t, d] * w` with `w = weight[t]` (1 without weights) and 0 where
//! `t == ignore_index`; `reduction` `none` keeps the terms, `sum` adds them and `mean` divides the
//! sum by the sum of the `w` (0 / 0 is NaN when every target is ignored, as the reference gives).
//! A target outside `0..C` that is not ignored is an evaluation error on the host and a 0 term of
//! weight 0 on GPU. The host sums in f64, the GPU kernel (`loss.cu`) in double precision too.

pub(crate) mod gpu;
#[cfg(test)]
mod tests;

use saggar_shape::{DType, Dim};

use self::gpu::LossKernel;
use crate::ops::conv::{check_len, check_out_dims, fixed};
use crate::ops::data_movement::index_at;
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, ext, numel};
use crate::ops::norm::gpu::SoftmaxKernel;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpEntry, OpError, ValueType};
use crate::tensor::{TensorMut, TensorView};

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "NegativeLogLikelihoodLoss", since: 12, until: 24, build: |c| build_loss(c, false) },
    OpEntry { op_type: "SoftmaxCrossEntropyLoss", since: 12, until: 24, build: |c| build_loss(c, true) },
];

/// How the terms reduce (the values are the GPU kernel's `reduce`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reduction {
    None = 0,
    Sum = 1,
    Mean = 2,
}

/// `NegativeLogLikelihoodLoss` / `SoftmaxCrossEntropyLoss`.
#[derive(Debug)]
struct Loss {
    /// SoftmaxCrossEntropyLoss: the input holds scores, not log-probabilities.
    softmax: bool,
    reduction: Reduction,
    ignore_index: Option<i64>,
    /// SoftmaxCrossEntropyLoss's second output.
    log_prob: bool,
}

fn build_loss(ctx: &mut NodeCtx<'_>, softmax: bool) -> Result<Box<dyn Op>, OpError> {
    let reduction = match ctx.string_or("reduction", "mean")?.as_str() {
        "none" => Reduction::None,
        "sum" => Reduction::Sum,
        "mean" => Reduction::Mean,
        other => return Err(ctx.unsupported("reduction", other, "none, sum, mean")),
    };
    let max_outputs = if softmax { 2 } else { 1 };
    if ctx.num_outputs() > max_outputs {
        return Err(OpError::infer(format!("the loss has at most {max_outputs} outputs, found {}", ctx.num_outputs())));
    }
    Ok(Box::new(Loss { softmax, reduction, ignore_index: ctx.int("ignore_index")?, log_prob: ctx.num_outputs() > 1 }))
}

/// `(N, C, D)`: the input `(N, C, d...)` seen as three axes, checked against the target
/// `(N, d...)` and the weights `(C)`.
fn loss_dims(op: &str, x: &[usize], target: &[usize], weight: Option<&[usize]>) -> Result<[usize; 3], OpError> {
    let ok = x.len() >= 2
        && target.len() == x.len() - 1
        && target[0] == x[0]
        && target[1..] == x[2..]
        && weight.is_none_or(|w| w == [x[1]]);
    if !ok {
        return Err(OpError::eval(format!(
            "{op} takes input (N, C, d...), target (N, d...) and weight (C); found {x:?}, {target:?}, {weight:?}"
        )));
    }
    Ok([x[0], x[1], x[2..].iter().product()])
}

impl Loss {
    fn name(&self) -> &'static str {
        if self.softmax { "SoftmaxCrossEntropyLoss" } else { "NegativeLogLikelihoodLoss" }
    }

    /// The term and weight of position `(n, d)` with target `t`: `logp(c)` reads the class `c`
    /// log-probability there.
    fn term(
        &self,
        t: i64,
        classes: usize,
        weight: Option<&[f32]>,
        logp: impl Fn(usize) -> f64,
    ) -> Result<(f64, f64), OpError> {
        if self.ignore_index == Some(t) {
            return Ok((0.0, 0.0));
        }
        let c = usize::try_from(t).ok().filter(|&c| c < classes).ok_or_else(|| {
            OpError::eval(format!(
                "{}: target {t} is outside the {classes} classes (and not ignore_index)",
                self.name()
            ))
        })?;
        let w = weight.map_or(1.0, |w| f64::from(w[c]));
        Ok((-logp(c) * w, w))
    }
}

/// `(max, ln(sum(exp(x - max))))` of the `classes` values `at(c)`.
fn log_sum_exp(classes: usize, at: impl Fn(usize) -> f64) -> (f64, f64) {
    let m = (0..classes).map(&at).fold(f64::NEG_INFINITY, f64::max);
    let s: f64 = (0..classes).map(|c| (at(c) - m).exp()).sum();
    (m, s.ln())
}

impl Op for Loss {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (x, t) = (inputs.req(0)?.ty, inputs.req(1)?.ty);
        let name = self.name();
        if x.dtype != DType::F32 || x.rank() < 2 {
            return Err(OpError::infer(format!("{name} takes an f32 input (N, C, d...), found {x}")));
        }
        if !matches!(t.dtype, DType::I64 | DType::I32) || t.rank() != x.rank() - 1 {
            return Err(OpError::infer(format!("{name} takes an integer target (N, d...) for input {x}, found {t}")));
        }
        let agree = |a: &Dim, b: &Dim| !matches!((fixed(a), fixed(b)), (Some(p), Some(q)) if p != q);
        if !agree(&t.dims[0], &x.dims[0]) || t.dims[1..].iter().zip(&x.dims[2..]).any(|(a, b)| !agree(a, b)) {
            return Err(OpError::infer(format!("{name}: target {t} does not fit input {x}")));
        }
        if let Some(w) = inputs.get(2).map(|w| w.ty)
            && (w.dtype != DType::F32 || w.rank() != 1 || !agree(&w.dims[0], &x.dims[1]))
        {
            return Err(OpError::infer(format!("{name} weight must be f32 [C] for input {x}, found {w}")));
        }
        let loss = match self.reduction {
            Reduction::None => ValueType::new(DType::F32, t.dims.clone()),
            _ => ValueType::new(DType::F32, vec![]),
        };
        let mut out = vec![loss];
        if self.log_prob {
            out.push(x.clone());
        }
        Ok(out)
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (xv, tv) = (inputs.req(0)?, inputs.req(1)?);
        check_len(self.name(), xv)?;
        let weight = inputs.get(2).map(TensorView::f32s).transpose()?;
        let [n, c, d] = loss_dims(self.name(), xv.dims, tv.dims, inputs.get(2).map(|w| w.dims))?;
        let x = xv.f32s()?;
        let (first, rest) = outputs.split_first_mut().ok_or_else(|| OpError::eval("the loss needs an output"))?;
        let want: &[usize] = if self.reduction == Reduction::None { tv.dims } else { &[] };
        check_out_dims(self.name(), first.dims, want.iter().copied())?;
        let mut log_prob = match rest.first_mut() {
            Some(lp) if self.log_prob => {
                check_out_dims(self.name(), lp.dims, xv.dims.iter().copied())?;
                Some(lp.f32s()?)
            }
            _ => None,
        };
        let y = first.f32s()?;
        let (mut sum, mut weights) = (0.0f64, 0.0f64);
        for p in 0..n * d {
            let at = |k: usize| f64::from(x[((p / d) * c + k) * d + p % d]);
            let (m, lse) = if self.softmax { log_sum_exp(c, at) } else { (0.0, 0.0) };
            let logp = |k: usize| if self.softmax { at(k) - m - lse } else { at(k) };
            if let Some(lp) = log_prob.as_deref_mut() {
                (0..c).for_each(|k| lp[((p / d) * c + k) * d + p % d] = logp(k) as f32);
            }
            let (term, w) = self.term(index_at(tv, p)?, c, weight, logp)?;
            if self.reduction == Reduction::None {
                y[p] = term as f32;
            }
            sum += term;
            weights += w;
        }
        match self.reduction {
            Reduction::None => {}
            Reduction::Sum => y[0] = sum as f32,
            Reduction::Mean => y[0] = (sum / weights) as f32,
        }
        Ok(())
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let (x, t) = (ctx.input(0)?, ctx.input(1)?);
            let weight = ctx.inputs.get(2).and_then(Option::as_ref);
            let [n, c, d] = loss_dims(self.name(), &x.dims, &t.dims, weight.map(|w| w.dims.as_slice()))?;
            let meta = vec![
                ext(n * d),
                ext(c),
                ext(d),
                i64::from(self.ignore_index.is_some()),
                self.ignore_index.unwrap_or(0),
                self.reduction as i64,
            ];
            let kernel = LossKernel {
                softmax: self.softmax,
                weight: weight.is_some(),
                index: t.dtype,
                reduce: self.reduction != Reduction::None,
            };
            let mut slots = vec![Slot::In(0), Slot::In(1)];
            slots.extend(weight.map(|_| Slot::In(2)));
            slots.push(Slot::Out(0));
            let work = if kernel.reduce { Work::Rows(1) } else { Work::Elements(numel(&t.dims)) };
            let mut launches = vec![GpuLaunch::new(kernel, meta, work, slots)];
            if self.log_prob && ctx.outputs.len() > 1 {
                launches.push(GpuLaunch::new(
                    SoftmaxKernel { log: true },
                    vec![ext(n), ext(c), ext(d)],
                    Work::Rows((n * d) as u64),
                    vec![Slot::In(0), Slot::Out(1)],
                ));
            }
            Ok(GpuNode::Launches(launches))
        })())
    }
}
