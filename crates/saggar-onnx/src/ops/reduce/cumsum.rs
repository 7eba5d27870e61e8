//! `CumSum` (opset 11): running sums along one axis (the `axis` input, 0-D or of one element),
//! `exclusive` (each sum leaves out its own element) and `reverse` (from the end). f32, i64 and i32;
//! integers wrap. Host and GPU add in the same order, so f32 results agree bit for bit. The GPU
//! kernel reads the axis from the device, so it need not be a constant; a thread scans each line
//! (`len` steps, the elements once).

use saggar_shape::DType;

use super::gpu::CumSumKernel;
use crate::error::OpError;
use crate::ops::shape_util::normalize_axis;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, ValueType};
use crate::tensor::{Number, TensorMut, TensorView, same_number};

/// `CumSum`.
#[derive(Debug)]
pub(super) struct CumSum {
    exclusive: bool,
    reverse: bool,
}

pub(super) fn build_cumsum(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(CumSum { exclusive: super::flag(ctx, "exclusive", 0)?, reverse: super::flag(ctx, "reverse", 0)? }))
}

/// The axis input's one value.
fn axis_value(values: Option<Vec<i64>>) -> Result<i64, OpError> {
    match values.as_deref() {
        Some(&[a]) => Ok(a),
        _ => Err(OpError::infer("CumSum axis must hold one int64 or int32")),
    }
}

/// `(outer, len, inner)` of `dims` around `axis`.
fn layout(dims: &[usize], axis: usize) -> (usize, usize, usize) {
    (dims[..axis].iter().product(), dims[axis], dims[axis + 1..].iter().product())
}

impl CumSum {
    fn scan<T: Copy + Default>(&self, x: &[T], y: &mut [T], (len, inner): (usize, usize), add: fn(T, T) -> T) {
        for (xb, yb) in x.chunks_exact(len * inner).zip(y.chunks_exact_mut(len * inner)) {
            for i in 0..inner {
                let mut acc = T::default();
                for j in 0..len {
                    let at = if self.reverse { len - 1 - j } else { j } * inner + i;
                    let v = xb[at];
                    if self.exclusive {
                        yb[at] = acc;
                        acc = add(acc, v);
                    } else {
                        acc = add(acc, v);
                        yb[at] = acc;
                    }
                }
            }
        }
    }
}

impl Op for CumSum {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, ext, numel};
        Some((|| {
            let (x, axis) = (ctx.input(0)?, ctx.input(1)?);
            let n = numel(&x.dims);
            // The kernel reads the axis; a constant one also sizes the launch to its lines.
            let constant = ctx.infer.get(1).and_then(|a| axis_value(a.const_i64s()).ok());
            let lines = constant.and_then(|a| normalize_axis(a, x.dims.len()).ok()).map(|a| {
                let (outer, _, inner) = layout(&x.dims, a);
                (outer * inner) as u64
            });
            let kind = CumSumKernel {
                dtype: x.dtype,
                axis_index: axis.dtype,
                exclusive: self.exclusive,
                reverse: self.reverse,
            };
            let mut meta = vec![ext(x.dims.len()), n as i64];
            meta.extend(x.dims.iter().map(|&d| ext(d)));
            let slots = vec![Slot::In(0), Slot::In(1), Slot::Out(0)];
            Ok(GpuNode::Launches(vec![GpuLaunch::new(kind, meta, Work::Elements(lines.unwrap_or(n)), slots)]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (x, axis) = (inputs.req(0)?.ty, inputs.req(1)?);
        if !matches!(x.dtype, DType::F32 | DType::F64 | DType::I32 | DType::U32 | DType::I64 | DType::U64) {
            return Err(OpError::infer(format!("CumSum takes f32, f64 or 32- or 64-bit integers, not {}", x.dtype)));
        }
        let one = axis.ty.rank() <= 1 && axis.ty.dims.iter().all(|d| d.as_fixed().is_none_or(|n| n == 1));
        if !matches!(axis.ty.dtype, DType::I64 | DType::I32) || !one {
            return Err(OpError::infer(format!("CumSum axis must be one int64 or int32, not {}", axis.ty)));
        }
        if let Some(a) = axis.const_i64s() {
            normalize_axis(axis_value(Some(a))?, x.rank())?;
        }
        Ok(vec![x.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x: &TensorView<'_> = inputs.req(0)?;
        let axis = axis_value(inputs.req(1)?.to_i64s()).map_err(|e| OpError::eval(e.to_string()))?;
        let axis = normalize_axis(axis, x.dims.len()).map_err(|e| OpError::eval(e.to_string()))?;
        let (_, len, inner) = layout(x.dims, axis);
        if len * inner == 0 {
            return Ok(());
        }
        same_number!(x.data, &mut outputs[0].data, |s, d| {
            if s.len() != d.len() {
                return Err(OpError::eval("CumSum output size differs from its input's"));
            }
            self.scan(s, d, (len, inner), Number::add);
            Ok(())
        }, _ => Err(OpError::eval("CumSum output does not match its numeric input")))
    }
}

#[cfg(test)]
mod tests {
    use crate::error::OpError;
    use crate::ops::testing::{f32s, run_op, values};
    use crate::ops::{Attribute, Attributes};
    use crate::tensor::{Tensor, TensorData};

    fn cumsum(x: &Tensor, axis: i64, exclusive: i64, reverse: i64) -> Result<Vec<Tensor>, OpError> {
        let a = Attributes(vec![
            ("exclusive".into(), Attribute::Int(exclusive)),
            ("reverse".into(), Attribute::Int(reverse)),
        ]);
        let axis = Tensor::new(vec![], TensorData::I32(vec![axis as i32])).unwrap();
        run_op("CumSum", 14, &a, &[Some(x), Some(&axis)])
    }

    #[test]
    fn every_mode_by_hand() {
        let x = f32s(&[5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
        for (exclusive, reverse, want) in [
            (0, 0, [1.0, 3.0, 6.0, 10.0, 15.0]),
            (1, 0, [0.0, 1.0, 3.0, 6.0, 10.0]),
            (0, 1, [15.0, 14.0, 12.0, 9.0, 5.0]),
            (1, 1, [14.0, 12.0, 9.0, 5.0, 0.0]),
        ] {
            assert_eq!(values(&cumsum(&x, 0, exclusive, reverse).unwrap()[0]), want, "{exclusive} {reverse}");
        }
    }

    #[test]
    fn along_either_axis_of_a_matrix_and_in_integers() {
        let x = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(values(&cumsum(&x, 0, 0, 0).unwrap()[0]), [1.0, 2.0, 3.0, 5.0, 7.0, 9.0]);
        assert_eq!(values(&cumsum(&x, -1, 0, 0).unwrap()[0]), [1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);
        let ids = Tensor::new(vec![2, 3], TensorData::I64(vec![1, 1, 0, i64::MAX, 1, 1])).unwrap();
        assert_eq!(
            cumsum(&ids, 1, 0, 0).unwrap()[0].data(),
            &TensorData::I64(vec![1, 2, 2, i64::MAX, i64::MIN, i64::MIN + 1])
        );
        let small = Tensor::new(vec![3], TensorData::I32(vec![1, 2, 3])).unwrap();
        assert_eq!(cumsum(&small, 0, 1, 0).unwrap()[0].data(), &TensorData::I32(vec![0, 1, 3]));
    }

    #[test]
    fn bad_axes_types_and_flags_are_errors() {
        let x = f32s(&[2], &[1.0, 2.0]);
        assert!(matches!(cumsum(&x, 1, 0, 0), Err(OpError::Infer(_))));
        assert!(cumsum(&x, 0, 2, 0).is_err());
        let two = Tensor::from_i64s(vec![0, 0]);
        assert!(run_op("CumSum", 11, &Attributes::default(), &[Some(&x), Some(&two)]).is_err());
        let b = Tensor::new(vec![1], TensorData::Bool(vec![1])).unwrap();
        assert!(run_op("CumSum", 11, &Attributes::default(), &[Some(&b), Some(&Tensor::from_i64s(vec![0]))]).is_err());
    }

    #[test]
    fn every_cumsum_kernel_renders_completely_with_a_name_of_its_own() {
        use crate::ops::gpu::GpuKernel;
        use saggar_shape::DType;
        let mut kinds: Vec<Box<dyn GpuKernel>> = Vec::new();
        for (dtype, axis_index) in
            [(DType::F32, DType::I64), (DType::I64, DType::I32), (DType::I32, DType::I64), (DType::F64, DType::I64)]
        {
            for (exclusive, reverse) in [(false, false), (true, false), (false, true), (true, true)] {
                kinds.push(Box::new(super::CumSumKernel { dtype, axis_index, exclusive, reverse }));
            }
        }
        assert_eq!(kinds.len(), 16);
        crate::ops::testing::assert_kernels_render(&kinds);
    }
}
