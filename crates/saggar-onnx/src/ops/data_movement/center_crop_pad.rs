//! CenterCropPad (opset 18): each axis of `axes` (all when absent) cropped or padded with zeros to
//! the extent `shape` names, centred (an odd difference puts the extra element at the end), as a
//! [`Pad`] of constant mode whose pads are negative where it crops. `shape` must be a constant.

use saggar_shape::{DType, Dim};

use super::{Pad, PadMode, index_values};
use crate::ops::gpu::{GpuCtx, GpuNode};
use crate::ops::shape_util::normalize_axes;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType, unknown_dim};
use crate::tensor::TensorMut;

/// `CenterCropPad`.
#[derive(Debug)]
struct CenterCropPad {
    axes: Option<Vec<i64>>,
}

pub(super) fn build_center_crop_pad(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(CenterCropPad { axes: ctx.ints("axes")? }))
}

impl CenterCropPad {
    /// The axes `shape` refers to, for an input of `rank`.
    fn axes(&self, rank: usize) -> Result<Vec<usize>, OpError> {
        match &self.axes {
            Some(a) => normalize_axes(a, rank),
            None => Ok((0..rank).collect()),
        }
    }

    /// The Pad doing this crop and pad of an input of `dims` to `shape`.
    fn pad(&self, dims: &[usize], shape: &[i64]) -> Result<Pad, OpError> {
        let axes = self.axes(dims.len())?;
        if shape.len() != axes.len() {
            return Err(OpError::infer(format!("CenterCropPad shape {shape:?} does not fit {} axes", axes.len())));
        }
        let rank = dims.len();
        let mut pads = vec![0i64; 2 * rank];
        for (&a, &s) in axes.iter().zip(shape) {
            if s < 0 {
                return Err(OpError::infer(format!("CenterCropPad shape {shape:?} holds a negative extent")));
            }
            let d = i64::try_from(dims[a]).map_err(|_| OpError::infer("CenterCropPad input extent overflows"))?;
            let (diff, sign) = if s < d { (d - s, -1) } else { (s - d, 1) };
            pads[a] = sign * (diff / 2);
            pads[rank + a] = sign * (diff - diff / 2);
        }
        Ok(Pad { mode: PadMode::Constant, attrs: Some((pads, 0.0)) })
    }
}

impl Op for CenterCropPad {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (x, shape) = (inputs.req(0)?.ty, inputs.req(1)?);
        if !matches!(shape.ty.dtype, DType::I64 | DType::I32) || shape.ty.rank() != 1 {
            return Err(OpError::infer(format!("CenterCropPad shape must be a 1-D int64 tensor, found {}", shape.ty)));
        }
        let axes = self.axes(x.rank())?;
        let mut dims = x.dims.clone();
        match shape.const_i64s() {
            Some(values) => {
                if values.len() != axes.len() || values.iter().any(|&v| v < 0) {
                    return Err(OpError::infer(format!("CenterCropPad shape {values:?} does not fit axes {axes:?}")));
                }
                for (&a, &v) in axes.iter().zip(&values) {
                    dims[a] = Dim::Fixed(v as u64);
                }
            }
            None => axes.iter().for_each(|&a| dims[a] = unknown_dim()),
        }
        Ok(vec![ValueType::new(x.dtype, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let pad = self.pad(x.dims, &index_values(inputs.req(1)?)?).map_err(|e| OpError::eval(e.to_string()))?;
        pad.eval(&EvalInputs::new(std::slice::from_ref(&Some(*x))), outputs)
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let shape =
                ctx.infer.req(1)?.const_i64s().ok_or_else(|| OpError::eval("CenterCropPad needs a constant shape"))?;
            let pad = self.pad(&ctx.input(0)?.dims, &shape)?;
            super::gpu::pad(&pad, ctx)
        })())
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{ints, iota, run_op, values};
    use crate::ops::{Attribute, Attributes, OpError};
    use crate::tensor::{Tensor, TensorData};

    fn ccp(axes: Option<&[i64]>, x: &Tensor, shape: &[i64]) -> Result<Tensor, OpError> {
        let mut a = Attributes::default();
        if let Some(axes) = axes {
            a.set("axes", ints(axes));
        }
        Ok(run_op("CenterCropPad", 18, &a, &[Some(x), Some(&Tensor::from_i64s(shape.to_vec()))])?.remove(0))
    }

    #[test]
    fn crops_and_pads_around_the_centre() {
        // 5 -> 2 crops 1 before, 2 after; 2 -> 5 pads 1 before, 2 after.
        let x = iota(&[5, 2]);
        let y = ccp(None, &x, &[2, 5]).unwrap();
        assert_eq!(y.dims(), [2, 5]);
        assert_eq!(values(&y), [0.0, 2.0, 3.0, 0.0, 0.0, 0.0, 4.0, 5.0, 0.0, 0.0]);
        let y = ccp(Some(&[-1]), &iota(&[2, 4]), &[2]).unwrap();
        assert_eq!(values(&y), [1.0, 2.0, 5.0, 6.0]);
        assert_eq!(ccp(Some(&[0]), &iota(&[2, 2]), &[2]).unwrap(), iota(&[2, 2]), "same extent");
        // Bits of any type move.
        let b = Tensor::new(vec![3], TensorData::Bool(vec![1, 0, 1])).unwrap();
        let y = ccp(None, &b, &[4]).unwrap();
        assert_eq!(y.data(), &TensorData::Bool(vec![1, 0, 1, 0]), "an odd difference pads at the end");
    }

    #[test]
    fn bad_shapes_and_axes_are_refused() {
        let x = iota(&[2, 3]);
        assert!(matches!(ccp(None, &x, &[2]), Err(OpError::Infer(_))), "one value for two axes");
        assert!(ccp(None, &x, &[2, -1]).is_err(), "negative extent");
        assert!(ccp(Some(&[0, 0]), &x, &[1, 1]).is_err(), "repeated axis");
        assert!(ccp(Some(&[2]), &x, &[1]).is_err(), "axis out of range");
        assert!(ccp(None, &x, &[1 << 40, 1 << 30]).is_err(), "absurd extents are refused before allocating");
        let attrs = Attributes(vec![("axes".into(), Attribute::Ints(vec![0]))]);
        let f = crate::ops::testing::f32s(&[1], &[1.0]);
        assert!(run_op("CenterCropPad", 18, &attrs, &[Some(&x), Some(&f)]).is_err(), "f32 shape");
    }
}
