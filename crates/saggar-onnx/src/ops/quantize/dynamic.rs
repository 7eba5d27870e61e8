//! DynamicQuantizeLinear: uint8 quantization with the scale and zero point taken from the range of
//! the input (widened to hold 0), in f32 as the ONNX reference computes them.

use saggar_shape::DType;

use super::gpu::DynamicQuantizeKernel;
use crate::ops::elementwise::require_dtype;
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, ext};
use crate::ops::{EvalInputs, InferInputs, Op, OpError, ValueType};
use crate::tensor::{DataMut, TensorMut};

/// `DynamicQuantizeLinear(x) -> (y, y_scale, y_zero_point)`.
#[derive(Debug)]
pub(super) struct Dynamic;

/// The scale and zero point of `x`'s range: `(hi - lo) / 255` (1 when every element is 0) and
/// `rint(clamp(-lo / scale, 0, 255))`, with `lo <= 0 <= hi` (NaN elements ignored).
pub(super) fn scale_and_zero_point(x: &[f32]) -> (f32, f32) {
    let (lo, hi) = x.iter().fold((0f32, 0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let scale = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
    let zp = (0.0 - lo / scale).clamp(0.0, 255.0).round_ties_even();
    (scale, zp)
}

impl Op for Dynamic {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        require_dtype("DynamicQuantizeLinear", x.dtype, &[DType::F32])?;
        Ok(vec![
            ValueType::new(DType::U8, x.dims.clone()),
            ValueType::new(DType::F32, Vec::new()),
            ValueType::new(DType::U8, Vec::new()),
        ])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?.f32s()?;
        let (scale, zp) = scale_and_zero_point(x);
        let [y, s, z] = outputs else { return Err(OpError::eval("DynamicQuantizeLinear has three outputs")) };
        match (&mut y.data, &mut s.data, &mut z.data) {
            (DataMut::U8(y), DataMut::F32(s), DataMut::U8(z)) if y.len() == x.len() && s.len() == 1 && z.len() == 1 => {
                for (o, &v) in y.iter_mut().zip(x) {
                    *o = ((v / scale).round_ties_even() + zp).clamp(0.0, 255.0) as u8;
                }
                s[0] = scale;
                z[0] = zp as u8;
                Ok(())
            }
            _ => Err(OpError::eval("DynamicQuantizeLinear writes uint8 y, an f32 scale and a uint8 zero point")),
        }
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        let n = match ctx.input(0) {
            Ok(x) => x.dims.iter().product::<usize>(),
            Err(e) => return Some(Err(e)),
        };
        let slots = vec![Slot::In(0), Slot::Out(0), Slot::Out(1), Slot::Out(2)];
        Some(Ok(GpuNode::Launches(vec![GpuLaunch::new(DynamicQuantizeKernel, vec![ext(n)], Work::Rows(1), slots)])))
    }
}
