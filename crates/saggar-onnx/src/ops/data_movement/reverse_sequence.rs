//! `ReverseSequence` (opset 10): for each batch entry `b`, the first `sequence_lens[b]` steps along
//! the time axis reversed, the rest copied. The host refuses a length outside `0..=T`; the GPU
//! clamps it into that range (so it never reads or writes outside the tensor).

use saggar_shape::DType;

use super::gpu::ReverseSequenceKernel;
use crate::error::OpError;
use crate::ops::shape_util::strides;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, ValueType};
use crate::tensor::{TensorMut, same_type};

/// `ReverseSequence` over `time_axis` per entry of `batch_axis` (0 and 1, in either order).
#[derive(Debug)]
pub(super) struct ReverseSequence {
    batch_axis: usize,
    time_axis: usize,
}

pub(super) fn build_reverse_sequence(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let (batch, time) = (ctx.int_or("batch_axis", 1)?, ctx.int_or("time_axis", 0)?);
    match (batch, time) {
        (0, 1) => Ok(Box::new(ReverseSequence { batch_axis: 0, time_axis: 1 })),
        (1, 0) => Ok(Box::new(ReverseSequence { batch_axis: 1, time_axis: 0 })),
        _ => Err(OpError::attribute("batch_axis", format!("batch_axis {batch} and time_axis {time} must be 0 and 1"))),
    }
}

impl Op for ReverseSequence {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, contiguous, ext, numel};
        Some(ctx.input(0).map(|x| {
            let own = contiguous(&x.dims);
            let (t, b) = (self.time_axis, self.batch_axis);
            let meta = vec![numel(&x.dims) as i64, ext(x.dims[t]), ext(x.dims[b]), own[t], own[b]];
            let kind = ReverseSequenceKernel { elem_bytes: x.dtype.size_bytes() as u8 };
            let slots = vec![Slot::In(0), Slot::In(1), Slot::Out(0)];
            GpuNode::Launches(vec![GpuLaunch::new(kind, meta, Work::Elements(numel(&x.dims)), slots)])
        }))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (x, lens) = (inputs.req(0)?.ty, inputs.req(1)?.ty);
        if x.rank() < 2 {
            return Err(OpError::infer(format!("ReverseSequence takes rank 2 or more, not {x}")));
        }
        let batch = x.dims[self.batch_axis].as_fixed();
        if lens.dtype != DType::I64
            || lens.rank() != 1
            || matches!((lens.dims[0].as_fixed(), batch), (Some(l), Some(b)) if l != b)
        {
            return Err(OpError::infer(format!(
                "sequence_lens must be int64 of one length per batch entry of {x}, not {lens}"
            )));
        }
        Ok(vec![x.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (x, lens) = (inputs.req(0)?, inputs.req(1)?.i64s()?);
        let (Some(&steps), Some(&batch)) = (x.dims.get(self.time_axis), x.dims.get(self.batch_axis)) else {
            return Err(OpError::eval(format!("ReverseSequence takes rank 2 or more, not {:?}", x.dims)));
        };
        if lens.len() != batch {
            return Err(OpError::eval(format!("{} sequence lengths for a batch of {batch}", lens.len())));
        }
        if let Some((b, l)) = lens.iter().enumerate().find(|&(_, &l)| !(0..=steps as i64).contains(&l)) {
            return Err(OpError::eval(format!("sequence length {l} of batch entry {b} is outside 0..={steps}")));
        }
        let own = strides(x.dims);
        let (ts, bs) = (own[self.time_axis], own[self.batch_axis]);
        same_type!(x.data, &mut outputs[0].data, |s, d| {
            if s.len() != d.len() {
                return Err(OpError::eval("ReverseSequence output size differs from the input's"));
            }
            for (i, d) in d.iter_mut().enumerate() {
                let (t, b) = (i / ts % steps, i / bs % batch);
                let len = lens[b] as usize;
                *d = if t < len { s[i - t * ts + (len - 1 - t) * ts] } else { s[i] };
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{f32s, iota, run_op, values};
    use crate::ops::{Attribute, Attributes};
    use crate::tensor::Tensor;

    fn axes(batch: i64, time: i64) -> Attributes {
        Attributes(vec![("batch_axis".into(), Attribute::Int(batch)), ("time_axis".into(), Attribute::Int(time))])
    }

    #[test]
    fn reverses_each_batch_entry_along_time() {
        // The ONNX docs' examples: time along axis 0, then along axis 1.
        let x = f32s(&[4, 4], &[0., 4., 8., 12., 1., 5., 9., 13., 2., 6., 10., 14., 3., 7., 11., 15.]);
        let lens = Tensor::from_i64s(vec![4, 3, 2, 1]);
        let out = run_op("ReverseSequence", 10, &axes(1, 0), &[Some(&x), Some(&lens)]).unwrap();
        assert_eq!(values(&out[0]), [3., 6., 9., 12., 2., 5., 8., 13., 1., 4., 10., 14., 0., 7., 11., 15.]);
        let x = iota(&[4, 4]);
        let lens = Tensor::from_i64s(vec![1, 2, 3, 0]);
        let out = run_op("ReverseSequence", 10, &axes(0, 1), &[Some(&x), Some(&lens)]).unwrap();
        assert_eq!(values(&out[0]), [0., 1., 2., 3., 5., 4., 6., 7., 10., 9., 8., 11., 12., 13., 14., 15.]);
        // Trailing axes move with their time step.
        let x = iota(&[3, 1, 2]);
        let out = run_op("ReverseSequence", 10, &Attributes::default(), &[Some(&x), Some(&Tensor::from_i64s(vec![3]))]);
        assert_eq!(values(&out.unwrap()[0]), [4., 5., 2., 3., 0., 1.]);
    }

    #[test]
    fn lengths_outside_the_time_axis_and_bad_axes_are_errors() {
        let x = iota(&[2, 2]);
        for lens in [vec![3, 1], vec![-1, 1], vec![1]] {
            let out = run_op(
                "ReverseSequence",
                10,
                &Attributes::default(),
                &[Some(&x), Some(&Tensor::from_i64s(lens.clone()))],
            );
            assert!(out.is_err(), "{lens:?}");
        }
        let lens = Tensor::from_i64s(vec![1, 1]);
        for (b, t) in [(0, 0), (1, 2), (-1, 0)] {
            assert!(run_op("ReverseSequence", 10, &axes(b, t), &[Some(&x), Some(&lens)]).is_err(), "{b} {t}");
        }
        assert!(run_op("ReverseSequence", 10, &Attributes::default(), &[Some(&iota(&[2])), Some(&lens)]).is_err());
    }
}
