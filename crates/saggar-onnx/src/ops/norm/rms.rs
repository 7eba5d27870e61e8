//! `RMSNormalization` (opset 23): each row of the trailing axes from `axis` divided by the root of
//! its mean square plus `epsilon`, then multiplied by `scale`, which broadcasts to the input one
//! way (over the normalised axes, or over leading axes too). Statistics in f32 (`stash_type` 1).

use super::gpu::RmsNormKernel;
use super::{check_len, require_f32};
use crate::ops::elementwise::check_broadcast;
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, broadcast, contiguous, ext, numel};
use crate::ops::shape_util::{broadcast_strides, fmt_dims, for_each_broadcast, normalize_axis};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType};
use crate::tensor::TensorMut;

/// `RMSNormalization`.
#[derive(Debug)]
struct RmsNorm {
    axis: i64,
    epsilon: f32,
}

pub(super) fn build_rms_norm(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let stash = ctx.int_or("stash_type", 1)?;
    if stash != 1 {
        return Err(ctx.unsupported("stash_type", stash, "1 (f32)"));
    }
    Ok(Box::new(RmsNorm { axis: ctx.int_or("axis", -1)?, epsilon: ctx.float_or("epsilon", 1e-5)? }))
}

/// `(rows, cols)` of `dims` normalised from `axis`.
fn rows_cols(axis: i64, dims: &[usize]) -> Result<(usize, usize, usize), OpError> {
    let axis = normalize_axis(axis, dims.len()).map_err(|e| OpError::eval(e.to_string()))?;
    Ok((axis, dims[..axis].iter().product(), dims[axis..].iter().product()))
}

impl Op for RmsNorm {
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let (x, scale) = (ctx.input(0)?, ctx.input(1)?);
            check_broadcast(&scale.dims, &x.dims)?;
            let (axis, rows, cols) = rows_cols(self.axis, &x.dims)?;
            let strides = broadcast(&scale.dims, &x.dims);
            // The scale read at the column: it is exactly the normalised axes, contiguous.
            let exact = strides[..axis].iter().all(|&s| s == 0) && strides[axis..] == contiguous(&x.dims[axis..])[..];
            let mut meta = vec![ext(rows), ext(cols), i64::from(exact), ext(axis), ext(x.dims.len() - axis)];
            meta.extend(x.dims[..axis].iter().map(|&d| ext(d)));
            meta.extend(&strides[..axis]);
            meta.extend(x.dims[axis..].iter().map(|&d| ext(d)));
            meta.extend(&strides[axis..]);
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                RmsNormKernel { epsilon_bits: self.epsilon.to_bits() },
                meta,
                Work::RowGroups { rows: rows as u64, cols: numel(&x.dims[axis..]) },
                vec![Slot::In(0), Slot::In(1), Slot::Out(0)],
            )]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (x, scale) = (inputs.req(0)?.ty, inputs.req(1)?.ty);
        require_f32("RMSNormalization", x)?;
        require_f32("RMSNormalization", scale)?;
        normalize_axis(self.axis, x.rank())?;
        let lead = x.rank().checked_sub(scale.rank());
        let clash = lead.is_none_or(|lead| {
            scale
                .dims
                .iter()
                .zip(&x.dims[lead..])
                .any(|(s, d)| matches!((s.as_fixed(), d.as_fixed()), (Some(p), Some(q)) if p != 1 && p != q))
        });
        if clash {
            return Err(OpError::infer(format!(
                "RMSNormalization's scale {} does not broadcast to the input {}",
                fmt_dims(&scale.dims),
                fmt_dims(&x.dims)
            )));
        }
        Ok(vec![x.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (xv, sv) = (inputs.req(0)?, inputs.req(1)?);
        check_len("RMSNormalization", xv)?;
        check_len("RMSNormalization", sv)?;
        check_broadcast(sv.dims, xv.dims)?;
        let dims = xv.dims;
        let (axis, _, cols) = rows_cols(self.axis, dims)?;
        let strides = broadcast_strides(sv.dims, dims.len());
        let (lead_strides, norm_strides) = strides.split_at(axis);
        let lead_pitch = crate::ops::shape_util::strides(&dims[..axis]);
        let exact = crate::ops::shape_util::strides(&dims[axis..]);
        let (x, scale, y) = (xv.f32s()?, sv.f32s()?, outputs[0].f32s()?);
        if y.len() != x.len() {
            return Err(OpError::eval("RMSNormalization: output does not match the input"));
        }
        if cols == 0 {
            return Ok(());
        }
        for (r, (xr, yr)) in x.chunks_exact(cols).zip(y.chunks_exact_mut(cols)).enumerate() {
            let mean = xr.iter().map(|v| v * v).sum::<f32>() / cols as f32;
            let inv = 1.0 / (mean + self.epsilon).sqrt();
            // The scale's offset of this row: its coordinates along the leading axes.
            let base: usize =
                lead_pitch.iter().zip(&dims[..axis]).zip(lead_strides).map(|((&p, &d), &s)| (r / p) % d * s).sum();
            if norm_strides == exact.as_slice() {
                let w = &scale[base..base + cols];
                yr.iter_mut().zip(xr).zip(w).for_each(|((y, &x), &w)| *y = x * inv * w);
            } else {
                for_each_broadcast(&dims[axis..], [norm_strides], |j, [o]| yr[j] = xr[j] * inv * scale[base + o]);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::close;
    use crate::ops::gpu::GpuKernel;
    use crate::ops::testing::{f32s, iota, run_op, values};
    use crate::ops::{Attribute, Attributes, OpError};

    fn attrs(axis: i64, epsilon: f32) -> Attributes {
        Attributes(vec![("axis".into(), Attribute::Int(axis)), ("epsilon".into(), Attribute::Float(epsilon))])
    }

    #[test]
    fn rows_are_divided_by_their_root_mean_square_and_scaled() {
        // Rows (3, 4) and (0, 0): mean squares 12.5 and 0.
        let x = f32s(&[2, 2], &[3.0, 4.0, 0.0, 0.0]);
        let scale = f32s(&[2], &[1.0, 2.0]);
        let out = run_op("RMSNormalization", 23, &attrs(-1, 0.0), &[Some(&x), Some(&scale)]).unwrap();
        let r = 12.5f32.sqrt();
        assert_eq!(&values(&out[0])[..2], &[3.0 / r, 8.0 / r]);
        assert!(values(&out[0])[2].is_nan(), "0 / 0 with epsilon 0");
        let out = run_op("RMSNormalization", 24, &attrs(-1, 1.0), &[Some(&x), Some(&scale)]).unwrap();
        close(values(&out[0]), &[3.0 / 13.5f32.sqrt(), 8.0 / 13.5f32.sqrt(), 0.0, 0.0]);
    }

    #[test]
    fn axis_zero_normalises_everything_and_the_scale_broadcasts() {
        let x = iota(&[2, 3]);
        // Mean square of 0..6: 55 / 6.
        let inv = 1.0 / (55.0f32 / 6.0).sqrt();
        let one = f32s(&[1], &[2.0]);
        let out = run_op("RMSNormalization", 23, &attrs(0, 0.0), &[Some(&x), Some(&one)]).unwrap();
        close(values(&out[0]), &(0..6).map(|v| 2.0 * v as f32 * inv).collect::<Vec<_>>());
        // A column scale [2, 1] over axis 1 (the leading axis is not normalised): rows of 3.
        let col = f32s(&[2, 1], &[1.0, 10.0]);
        let out = run_op("RMSNormalization", 23, &attrs(1, 0.0), &[Some(&x), Some(&col)]).unwrap();
        let (a, b) = (1.0 / (5.0f32 / 3.0).sqrt(), 1.0 / (50.0f32 / 3.0).sqrt());
        close(values(&out[0]), &[0.0, a, 2.0 * a, 30.0 * b, 40.0 * b, 50.0 * b]);
    }

    #[test]
    fn bad_scales_axes_and_stash_types_are_typed_errors() {
        let x = iota(&[2, 3]);
        let wrong = f32s(&[2], &[1.0, 1.0]);
        assert!(matches!(
            run_op("RMSNormalization", 23, &attrs(-1, 0.0), &[Some(&x), Some(&wrong)]),
            Err(OpError::Infer(_))
        ));
        let big = f32s(&[1, 2, 3], &[1.0; 6]);
        assert!(run_op("RMSNormalization", 23, &attrs(-1, 0.0), &[Some(&x), Some(&big)]).is_err());
        let s = f32s(&[3], &[1.0; 3]);
        assert!(matches!(
            run_op("RMSNormalization", 23, &attrs(2, 0.0), &[Some(&x), Some(&s)]),
            Err(OpError::Infer(_))
        ));
        let stash = Attributes(vec![("stash_type".into(), Attribute::Int(10))]);
        assert!(matches!(
            run_op("RMSNormalization", 23, &stash, &[Some(&x), Some(&s)]),
            Err(OpError::Unsupported { .. })
        ));
        assert!(run_op("RMSNormalization", 22, &Attributes::default(), &[Some(&x), Some(&s)]).is_err());
        let body = super::RmsNormKernel { epsilon_bits: 1 }.source();
        assert!(!body.contains('@') && body.starts_with("(const onnx_i64* meta"));
    }
}
