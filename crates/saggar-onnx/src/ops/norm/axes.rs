//! Normalisations over a set of axes: LpNormalization (along `axis`, dividing by the L1 or L2
//! norm; a zero vector gives NaN, 0 / 0, as the ONNX reference and its backend tests have it)
//! and MeanVarianceNormalization (over `axes`, default N, H and W: `(x - mean) / (std + 1e-9)`).
//! The elements of each kept position along the normalised axes form a row; on the GPU a block
//! per row, with a reduction's meta table.

use std::sync::Arc;

use saggar_shape::DType;

use super::gpu::{AxesNorm, AxesNormKernel};
use super::{check_len, require_f32};
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode};
use crate::ops::reduce::ReduceOp;
use crate::ops::reduce::gpu::reduce_launch;
use crate::ops::shape_util::{broadcast_strides, for_each_broadcast, normalize_axes};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType};
use crate::tensor::TensorMut;

/// `LpNormalization` / `MeanVarianceNormalization`.
#[derive(Debug)]
struct AxesNormOp {
    norm: AxesNorm,
    /// The normalised axes (one for LpNormalization), possibly negative.
    axes: Vec<i64>,
}

pub(super) fn build_lp_norm(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let norm = match ctx.int_or("p", 2)? {
        1 => AxesNorm::L1,
        2 => AxesNorm::L2,
        other => return Err(OpError::attribute("p", format!("must be 1 or 2, found {other}"))),
    };
    Ok(Box::new(AxesNormOp { norm, axes: vec![ctx.int_or("axis", -1)?] }))
}

pub(super) fn build_mvn(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let axes = ctx.ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]);
    Ok(Box::new(AxesNormOp { norm: AxesNorm::MeanVariance, axes }))
}

impl AxesNormOp {
    fn name(&self) -> &'static str {
        if self.norm == AxesNorm::MeanVariance { "MeanVarianceNormalization" } else { "LpNormalization" }
    }
}

impl Op for AxesNormOp {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        require_f32(self.name(), x)?;
        normalize_axes(&self.axes, x.rank())?;
        Ok(vec![x.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let xv = inputs.req(0)?;
        check_len(self.name(), xv)?;
        let dims = xv.dims;
        let reduced = normalize_axes(&self.axes, dims.len()).map_err(|e| OpError::eval(e.to_string()))?;
        let x = xv.f32s()?;
        let y = outputs[0].f32s()?;
        if y.len() != x.len() {
            return Err(OpError::eval(format!("{}: output does not match the input", self.name())));
        }
        // One statistic per kept position, read through strides that skip the normalised axes.
        let kept: Vec<usize> =
            dims.iter().enumerate().map(|(a, &d)| if reduced.contains(&a) { 1 } else { d }).collect();
        let at = broadcast_strides(&kept, dims.len());
        let n = dims.iter().product::<usize>() / kept.iter().product::<usize>().max(1);
        let (mut acc, mut div) = (vec![0.0f32; kept.iter().product()], Vec::new());
        let shift = match self.norm {
            AxesNorm::L1 => {
                for_each_broadcast(dims, [&at], |i, [s]| acc[s] += x[i].abs());
                div = acc;
                None
            }
            AxesNorm::L2 => {
                for_each_broadcast(dims, [&at], |i, [s]| acc[s] += x[i] * x[i]);
                div = acc.iter().map(|v| v.sqrt()).collect();
                None
            }
            AxesNorm::MeanVariance => {
                for_each_broadcast(dims, [&at], |i, [s]| acc[s] += x[i]);
                acc.iter_mut().for_each(|v| *v /= n as f32);
                div.resize(acc.len(), 0.0);
                for_each_broadcast(dims, [&at], |i, [s]| div[s] += (x[i] - acc[s]) * (x[i] - acc[s]));
                div.iter_mut().for_each(|v| *v = (*v / n as f32).sqrt() + 1e-9);
                Some(acc)
            }
        };
        for_each_broadcast(dims, [&at], |i, [s]| {
            let centred = x[i] - shift.as_ref().map_or(0.0, |m| m[s]);
            y[i] = centred / div[s];
        });
        Ok(())
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let x = ctx.input(0)?;
            let reduced = normalize_axes(&self.axes, x.dims.len())?;
            // A reduction's launch (its meta table, a block per kept position, input 0 to output 0)
            // running this normalisation instead.
            let GpuNode::Launches(launches) = reduce_launch(ReduceOp::Sum, DType::F32, &x.dims, &reduced) else {
                return Err(OpError::eval("a reduction is a launch"));
            };
            let kernel = Arc::new(AxesNormKernel { norm: self.norm });
            Ok(GpuNode::Launches(launches.into_iter().map(|l| GpuLaunch { kernel: kernel.clone(), ..l }).collect()))
        })())
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::norm::tests::close;
    use crate::ops::testing::{f32s, ints, run_op, values};
    use crate::ops::{Attribute, Attributes, OpError};

    #[test]
    fn lp_normalization_along_an_axis() {
        let x = f32s(&[2, 2], &[3.0, -4.0, 0.0, 0.0]);
        let run = |list: Vec<(&str, Attribute)>| {
            let attrs = Attributes(list.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
            run_op("LpNormalization", 1, &attrs, &[Some(&x)]).map(|o| values(&o[0]).to_vec())
        };
        // Rows by default (axis -1, p 2); the zero row is 0 / 0, NaN, as the reference has it.
        let rows = run(vec![]).unwrap();
        close(&rows[..2], &[0.6, -0.8]);
        assert!(rows[2].is_nan() && rows[3].is_nan(), "{rows:?}");
        close(&run(vec![("p", Attribute::Int(1))]).unwrap()[..2], &[3.0 / 7.0, -4.0 / 7.0]);
        // Columns: 3 and 0, -4 and 0.
        close(&run(vec![("axis", Attribute::Int(0))]).unwrap(), &[1.0, -1.0, 0.0, 0.0]);
        assert!(matches!(run(vec![("p", Attribute::Int(3))]), Err(OpError::Attribute { .. })));
        assert!(matches!(run(vec![("axis", Attribute::Int(2))]), Err(OpError::Infer(_))));
    }

    #[test]
    fn mean_variance_normalization_over_axes() {
        // [1, 2, 1, 2]: per channel over N, H, W by default.
        let x = f32s(&[1, 2, 1, 2], &[1.0, 3.0, 2.0, 2.0]);
        let out = run_op("MeanVarianceNormalization", 13, &Attributes::default(), &[Some(&x)]).unwrap();
        close(values(&out[0]), &[-1.0, 1.0, 0.0, 0.0]);
        // Over everything: mean 2, standard deviation sqrt(0.5).
        let all = Attributes(vec![("axes".into(), ints(&[0, 1, 2, -1]))]);
        let out = run_op("MeanVarianceNormalization", 9, &all, &[Some(&x)]).unwrap();
        let s = 0.5f32.sqrt() + 1e-9;
        close(values(&out[0]), &[-1.0 / s, 1.0 / s, 0.0, 0.0]);
        let rank3 = f32s(&[1, 2, 2], &[1.0, 3.0, 2.0, 2.0]);
        let res = run_op("MeanVarianceNormalization", 13, &Attributes::default(), &[Some(&rank3)]);
        assert!(matches!(res, Err(OpError::Infer(_))), "the default axes need rank 4");
        let repeated = Attributes(vec![("axes".into(), ints(&[1, 1]))]);
        assert!(run_op("MeanVarianceNormalization", 13, &repeated, &[Some(&x)]).is_err());
    }
}
