//! `Hardmax`: 1 at the first largest element of each row, 0 elsewhere (a NaN counts as the largest,
//! as numpy's `argmax` has it). Before opset 13 a row is everything from `axis` on (default 1); from
//! 13 it is the one axis `axis` (default -1). f32.

use super::gpu::HardmaxKernel;
use super::{check_len, require_f32, row_layout};
use crate::error::OpError;
use crate::ops::shape_util::normalize_axis;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, ValueType};
use crate::tensor::TensorMut;

/// `Hardmax`.
#[derive(Debug)]
pub(super) struct Hardmax {
    axis: i64,
    /// Opset < 13: rows are the trailing axes from `axis`, flattened.
    flatten: bool,
}

pub(super) fn build_hardmax(ctx: &mut NodeCtx<'_>, flatten: bool) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Hardmax { axis: ctx.int_or("axis", if flatten { 1 } else { -1 })?, flatten }))
}

/// Whether `v` replaces `best` as a row's largest: larger, or the first NaN.
fn beats(v: f32, best: f32) -> bool {
    v > best || (v.is_nan() && !best.is_nan())
}

impl Op for Hardmax {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, ext};
        Some((|| {
            let (outer, len, inner) = row_layout(self.axis, self.flatten, &ctx.input(0)?.dims)?;
            let rows = outer * inner;
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                HardmaxKernel,
                vec![ext(rows), ext(len), ext(inner)],
                Work::Elements(rows as u64),
                vec![Slot::In(0), Slot::Out(0)],
            )]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        require_f32("Hardmax", x)?;
        normalize_axis(self.axis, x.rank())?;
        Ok(vec![x.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let xv = inputs.req(0)?;
        check_len("Hardmax", xv)?;
        let (_, len, inner) = row_layout(self.axis, self.flatten, xv.dims)?;
        let (x, y) = (xv.f32s()?, outputs[0].f32s()?);
        if y.len() != x.len() {
            return Err(OpError::eval("Hardmax: output does not match the input"));
        }
        if len * inner == 0 {
            return Ok(());
        }
        for (xb, yb) in x.chunks_exact(len * inner).zip(y.chunks_exact_mut(len * inner)) {
            for i in 0..inner {
                let at = (1..len).fold(0, |at, j| if beats(xb[j * inner + i], xb[at * inner + i]) { j } else { at });
                (0..len).for_each(|j| yb[j * inner + i] = if j == at { 1.0 } else { 0.0 });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{f32s, run_op, values};
    use crate::ops::{Attribute, Attributes};

    fn axis(a: i64) -> Attributes {
        Attributes(vec![("axis".into(), Attribute::Int(a))])
    }

    #[test]
    fn one_at_the_first_largest_of_each_row() {
        let x = f32s(&[2, 3], &[3.0, 1.0, 3.0, -1.0, f32::NAN, 2.0]);
        let out = run_op("Hardmax", 13, &Attributes::default(), &[Some(&x)]).unwrap();
        assert_eq!(values(&out[0]), [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
        let out = run_op("Hardmax", 13, &axis(0), &[Some(&x)]).unwrap();
        assert_eq!(values(&out[0]), [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]);
    }

    #[test]
    fn before_opset_13_rows_are_flattened_from_the_axis() {
        // [2, 2, 2]: with axis 1 a row is the last 4 elements of each batch (opset 11); from 13 the
        // middle axis alone.
        let x = f32s(&[2, 2, 2], &[0.0, 5.0, 1.0, 2.0, 7.0, 6.0, 8.0, 0.0]);
        let out = run_op("Hardmax", 11, &axis(1), &[Some(&x)]).unwrap();
        assert_eq!(values(&out[0]), [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
        let out = run_op("Hardmax", 13, &axis(1), &[Some(&x)]).unwrap();
        assert_eq!(values(&out[0]), [0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0]);
        // The default axis is 1 before 13 and -1 from 13.
        let out = run_op("Hardmax", 1, &Attributes::default(), &[Some(&x)]).unwrap();
        assert_eq!(values(&out[0]), [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
        let empty = f32s(&[2, 0], &[]);
        assert_eq!(run_op("Hardmax", 13, &Attributes::default(), &[Some(&empty)]).unwrap()[0].dims(), &[2, 0]);
        assert!(run_op("Hardmax", 13, &axis(3), &[Some(&x)]).is_err());
    }

    #[test]
    fn the_hardmax_kernel_renders_completely() {
        use crate::ops::gpu::GpuKernel;
        let body = super::HardmaxKernel.source();
        assert!(!body.contains('@') && body.starts_with("(const onnx_i64* meta"), "{body}");
    }
}
