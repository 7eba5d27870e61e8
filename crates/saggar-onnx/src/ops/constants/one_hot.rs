//! `OneHot`: for each index, a vector of `depth` elements inserted at `axis`, `values[1]` at the
//! index's class and `values[0]` elsewhere. Indices are f32 (truncated toward zero), i32 or i64; a
//! negative index counts from `depth` from opset 11 (before, it is out of range); an index out of
//! range (and a NaN) gives a vector of `values[0]` only. The depth is a one-element number, read
//! at import when constant (else the axis' extent is unknown until the per-shape compile).

use saggar_shape::{DType, Dim};

use super::first_number;
use super::gpu::OneHotKernel;
use crate::error::OpError;
use crate::ops::shape_util::normalize_axis;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, ValueType, unknown_dim};
use crate::tensor::{DataRef, TensorMut, TensorView, same_type};

/// `OneHot`; `negative` indices count from the end (opset 11 on).
#[derive(Debug)]
pub(super) struct OneHot {
    axis: i64,
    negative: bool,
}

pub(super) fn build_one_hot(ctx: &mut NodeCtx<'_>, negative: bool) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(OneHot { axis: ctx.int_or("axis", -1)?, negative }))
}

/// A depth value as a count (truncated toward zero), or why it is not one.
fn depth_count(v: f64) -> Result<u64, OpError> {
    let t = v.trunc();
    if !(0.0..=(i64::MAX as f64)).contains(&t) {
        return Err(OpError::infer(format!("OneHot depth {v} must be a non-negative count")));
    }
    Ok(t as u64)
}

impl OneHot {
    /// The class of index element `k` among `depth` (an f32 truncated toward zero), or `None` when
    /// out of range.
    fn class_at(&self, idx: &TensorView<'_>, k: usize, depth: i64) -> Option<i64> {
        let lo = if self.negative { -depth } else { 0 };
        let c = match idx.data {
            DataRef::F32(v) => {
                let t = f64::from(*v.get(k)?).trunc();
                // NaN and values beyond i64 fail here, before the conversion.
                if !(t >= lo as f64 && t < depth as f64) {
                    return None;
                }
                t as i64
            }
            DataRef::I64(v) => *v.get(k)?,
            DataRef::I32(v) => i64::from(*v.get(k)?),
            _ => return None,
        };
        (lo..depth).contains(&c).then_some(if c < 0 { c + depth } else { c })
    }
}

impl Op for OneHot {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, ext, numel};
        Some((|| {
            let (idx, values, out) = (ctx.input(0)?, ctx.input(2)?, ctx.output(0)?);
            let axis = normalize_axis(self.axis, idx.dims.len() + 1)?;
            let (outer, inner) = (numel(&idx.dims[..axis]), numel(&idx.dims[axis..]));
            let kind =
                OneHotKernel { elem_bytes: values.dtype.size_bytes() as u8, index: idx.dtype, negative: self.negative };
            let slots = vec![Slot::In(0), Slot::In(2), Slot::Out(0)];
            let meta = vec![outer as i64, ext(out.dims[axis]), inner as i64];
            Ok(GpuNode::Launches(vec![GpuLaunch::new(kind, meta, Work::Elements(numel(&out.dims)), slots)]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (idx, depth, values) = (inputs.req(0)?, inputs.req(1)?, inputs.req(2)?);
        let numeric = |d: DType| matches!(d, DType::F32 | DType::I64 | DType::I32);
        if !numeric(idx.ty.dtype) || !numeric(depth.ty.dtype) {
            return Err(OpError::infer(format!(
                "OneHot indices {} and depth {} must be f32, i64 or i32",
                idx.ty, depth.ty
            )));
        }
        let one = |t: &ValueType, n: u64| t.rank() <= 1 && t.dims.iter().all(|d| d.as_fixed().is_none_or(|v| v == n));
        if !one(depth.ty, 1) || values.ty.rank() != 1 || !one(values.ty, 2) {
            return Err(OpError::infer(format!(
                "OneHot depth {} must hold one value and values {} two",
                depth.ty, values.ty
            )));
        }
        let axis = normalize_axis(self.axis, idx.ty.rank() + 1)?;
        let extent = match depth.scalar_f64() {
            Some(v) => Dim::Fixed(depth_count(v)?),
            None => unknown_dim(),
        };
        let mut dims = idx.ty.dims.clone();
        dims.insert(axis, extent);
        let total = dims.iter().filter_map(Dim::as_fixed).try_fold(1u64, |n, d| n.checked_mul(d));
        if total.is_none_or(|n| i64::try_from(n).is_err()) {
            return Err(OpError::infer(format!(
                "OneHot of {} by depth {} has more elements than an i64 counts",
                idx.ty, dims[axis]
            )));
        }
        Ok(vec![ValueType::new(values.ty.dtype, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (idx, depth, values) = (inputs.req(0)?, inputs.req(1)?, inputs.req(2)?);
        let axis = normalize_axis(self.axis, idx.dims.len() + 1).map_err(|e| OpError::eval(e.to_string()))?;
        let out = &mut outputs[0];
        let want = first_number(depth.data).ok_or_else(|| OpError::eval("OneHot depth must hold a number"))?;
        let want = depth_count(want).map_err(|e| OpError::eval(e.to_string()))?;
        let (outer, inner): (usize, usize) = (idx.dims[..axis].iter().product(), idx.dims[axis..].iter().product());
        let depth = *out.dims.get(axis).ok_or_else(|| OpError::eval("OneHot output rank differs"))?;
        if depth as u64 != want || idx.len() != outer * inner {
            return Err(OpError::eval(format!(
                "OneHot output {:?} does not fit depth {want} and indices {:?}",
                out.dims, idx.dims
            )));
        }
        let depth = depth as i64;
        same_type!(values.data, &mut out.data, |v, o| {
            if v.len() != 2 || o.len() != outer * depth as usize * inner {
                return Err(OpError::eval("OneHot values must be [off, on] and the output must fit the indices"));
            }
            for (i, o) in o.iter_mut().enumerate() {
                let (at, class, block) = (i % inner, (i / inner) as i64 % depth, i / inner / depth as usize);
                *o = if self.class_at(idx, block * inner + at, depth) == Some(class) { v[1] } else { v[0] };
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::error::OpError;
    use crate::ops::testing::{f32s, run_op, values};
    use crate::ops::{Attribute, Attributes};
    use crate::tensor::{Tensor, TensorData};

    fn one_hot(opset: u32, axis: i64, idx: &Tensor, depth: &Tensor, values: &Tensor) -> Result<Vec<Tensor>, OpError> {
        let a = Attributes(vec![("axis".into(), Attribute::Int(axis))]);
        run_op("OneHot", opset, &a, &[Some(idx), Some(depth), Some(values)])
    }

    fn scalar(v: i64) -> Tensor {
        Tensor::from_i64s(vec![v]).reshaped(vec![]).unwrap()
    }

    #[test]
    fn classes_along_the_last_or_first_axis() {
        let idx = Tensor::from_i64s(vec![1, -1, 5, 3]);
        let off_on = f32s(&[2], &[0.0, 1.0]);
        let out = one_hot(11, -1, &idx, &scalar(4), &off_on).unwrap();
        assert_eq!(out[0].dims(), &[4, 4]);
        #[rustfmt::skip]
        assert_eq!(values(&out[0]), [0., 1., 0., 0., 0., 0., 0., 1., 0., 0., 0., 0., 0., 0., 0., 1.]);
        // Before opset 11 a negative index is out of range.
        let out = one_hot(10, -1, &idx, &scalar(4), &off_on).unwrap();
        assert_eq!(&values(&out[0])[4..8], [0.0; 4]);
        let out = one_hot(11, 0, &Tensor::from_i64s(vec![0, 2]), &scalar(3), &off_on).unwrap();
        assert_eq!(out[0].dims(), &[3, 2]);
        assert_eq!(values(&out[0]), [1., 0., 0., 0., 0., 1.]);
    }

    #[test]
    fn float_indices_and_depth_truncate_and_values_set_the_type() {
        let idx = f32s(&[3], &[1.7, -1.2, f32::NAN]);
        let depth = f32s(&[1], &[3.9]);
        let values = Tensor::new(vec![2], TensorData::I64(vec![-1, 9])).unwrap();
        let out = one_hot(11, 1, &idx, &depth, &values).unwrap();
        assert_eq!(out[0].data(), &TensorData::I64(vec![-1, 9, -1, -1, -1, 9, -1, -1, -1]));
        let idx32 = Tensor::new(vec![1, 1], TensorData::I32(vec![2])).unwrap();
        let flags = Tensor::new(vec![2], TensorData::Bool(vec![0, 1])).unwrap();
        let out = one_hot(11, 1, &idx32, &Tensor::new(vec![1], TensorData::I32(vec![3])).unwrap(), &flags).unwrap();
        assert_eq!(out[0].dims(), &[1, 3, 1]);
        assert_eq!(out[0].data(), &TensorData::Bool(vec![0, 0, 1]));
    }

    #[test]
    fn bad_depths_values_and_huge_outputs_are_typed_errors() {
        let idx = Tensor::from_i64s(vec![0; 4]);
        let off_on = f32s(&[2], &[0.0, 1.0]);
        assert!(matches!(one_hot(11, -1, &idx, &scalar(-1), &off_on), Err(OpError::Infer(_))));
        assert!(one_hot(11, -1, &idx, &f32s(&[1], &[f32::NAN]), &off_on).is_err());
        assert!(one_hot(11, -1, &idx, &Tensor::from_i64s(vec![2, 2]), &off_on).is_err());
        assert!(one_hot(11, -1, &idx, &scalar(2), &f32s(&[3], &[0.0; 3])).is_err());
        assert!(one_hot(11, 2, &idx, &scalar(2), &off_on).is_err());
        // More elements than an i64 counts, then more than the evaluation allows: typed errors
        // before anything is allocated.
        assert!(
            matches!(one_hot(11, -1, &idx, &scalar(1 << 62), &off_on), Err(OpError::Infer(m)) if m.contains("elements"))
        );
        assert!(
            matches!(one_hot(11, -1, &idx, &scalar(1 << 40), &off_on), Err(OpError::Eval(m)) if m.contains("limit"))
        );
    }

    #[test]
    fn every_constants_kernel_renders_completely_with_a_name_of_its_own() {
        use crate::ops::gpu::GpuKernel;
        use saggar_shape::DType;
        let mut kinds: Vec<Box<dyn GpuKernel>> = vec![
            Box::new(crate::ops::constants::gpu::EyeLikeKernel { elem_bytes: 4, one_bits: 0x3f80_0000 }),
            Box::new(crate::ops::constants::gpu::EyeLikeKernel { elem_bytes: 1, one_bits: 1 }),
        ];
        for index in [DType::F32, DType::I32, DType::I64] {
            for negative in [false, true] {
                kinds.push(Box::new(super::OneHotKernel { elem_bytes: 4, index, negative }));
            }
        }
        crate::ops::testing::assert_kernels_render(&kinds);
    }
}
