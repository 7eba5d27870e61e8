//! Indexed reads: Gather, GatherElements, GatherND.
//!
//! Indices are checked against their axis at evaluation (negative indices count from the end, as
//! ONNX says); an index out of range is an evaluation error, never an out-of-bounds read.

pub(crate) mod gpu;

use saggar_shape::DType;

use self::gpu::{GatherForm, GatherKernel};
use crate::ops::data_movement::{index_at, wrap_index};
use crate::ops::shape_util::{normalize_axis, strides};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpEntry, OpError, SymInt, ValueType};
use crate::tensor::{DataRef, TensorMut, same_type};

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "Gather", since: 1, until: 24, build: build_gather },
    OpEntry { op_type: "GatherElements", since: 11, until: 24, build: build_gather_elements },
    OpEntry { op_type: "GatherND", since: 11, until: 24, build: build_gather_nd },
];

/// `Gather`.
#[derive(Debug)]
struct Gather {
    axis: i64,
}

fn build_gather(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Gather { axis: ctx.int_or("axis", 0)? }))
}

fn require_indices(dtype: DType) -> Result<(), OpError> {
    if matches!(dtype, DType::I64 | DType::I32) {
        Ok(())
    } else {
        Err(OpError::infer(format!("indices must be int64 or int32, not {dtype}")))
    }
}

impl Op for Gather {
    fn extents_from_shapes(&self) -> bool {
        true
    }

    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, ext, numel};
        Some((|| {
            let (data, idx, out) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0)?);
            let axis = normalize_axis(self.axis, data.dims.len())?;
            let outer = numel(&data.dims[..axis]) as i64;
            let inner = numel(&data.dims[axis + 1..]) as i64;
            let n_idx = numel(&idx.dims) as i64;
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                GatherKernel { form: GatherForm::Axis, elem_bytes: data.dtype.size_bytes() as u8, index: idx.dtype },
                vec![outer, ext(data.dims[axis]), inner, n_idx],
                Work::Elements(numel(&out.dims)),
                vec![Slot::In(0), Slot::In(1), Slot::Out(0)],
            )]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (data, idx) = (inputs.req(0)?, inputs.req(1)?);
        require_indices(idx.ty.dtype)?;
        let axis = normalize_axis(self.axis, data.ty.rank())?;
        let mut dims = data.ty.dims[..axis].to_vec();
        dims.extend(idx.ty.dims.iter().cloned());
        dims.extend(data.ty.dims[axis + 1..].iter().cloned());
        Ok(vec![ValueType::new(data.ty.dtype, dims)])
    }

    fn dims_value(&self, inputs: &InferInputs<'_>) -> Option<Vec<SymInt>> {
        let (data, idx) = (inputs.req(0).ok()?, inputs.req(1).ok()?);
        if data.ty.rank() != 1 {
            return None;
        }
        let values = data.sym_ints()?;
        idx.const_i64s()?.iter().map(|&i| wrap_index(i, values.len()).ok().map(|j| values[j].clone())).collect()
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (data, idx) = (inputs.req(0)?, inputs.req(1)?);
        let axis = normalize_axis(self.axis, data.dims.len()).map_err(|e| OpError::eval(e.to_string()))?;
        let outer: usize = data.dims[..axis].iter().product();
        let n = data.dims[axis];
        let inner: usize = data.dims[axis + 1..].iter().product();
        let out = &mut outputs[0];
        let count = idx.len();
        if !matches!(idx.data, DataRef::I64(_) | DataRef::I32(_)) {
            return Err(OpError::eval("indices must be int64 or int32"));
        }
        same_type!(data.data, &mut out.data, |s, d| {
            if d.len() != outer * count * inner {
                return Err(OpError::eval("Gather output size differs from inference"));
            }
            for o in 0..outer {
                for k in 0..count {
                    let r = wrap_index(index_at(idx, k)?, n)?;
                    let src = (o * n + r) * inner;
                    let dst = (o * count + k) * inner;
                    d[dst..dst + inner].copy_from_slice(&s[src..src + inner]);
                }
            }
            Ok(())
        })
    }
}

/// `GatherElements`.
#[derive(Debug)]
struct GatherElements {
    axis: i64,
}

fn build_gather_elements(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(GatherElements { axis: ctx.int_or("axis", 0)? }))
}

impl Op for GatherElements {
    fn extents_from_shapes(&self) -> bool {
        true
    }

    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, contiguous, ext, numel};
        Some((|| {
            let (data, idx, out) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0)?);
            let rank = data.dims.len();
            let axis = normalize_axis(self.axis, rank)?;
            let mut meta = vec![ext(rank), numel(&out.dims) as i64, ext(axis), ext(data.dims[axis])];
            meta.extend(out.dims.iter().map(|&d| ext(d)));
            meta.extend(contiguous(&data.dims));
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                GatherKernel {
                    form: GatherForm::Elements,
                    elem_bytes: data.dtype.size_bytes() as u8,
                    index: idx.dtype,
                },
                meta,
                Work::Elements(numel(&out.dims)),
                vec![Slot::In(0), Slot::In(1), Slot::Out(0)],
            )]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (data, idx) = (inputs.req(0)?, inputs.req(1)?);
        require_indices(idx.ty.dtype)?;
        if data.ty.rank() != idx.ty.rank() {
            return Err(OpError::infer("GatherElements data and indices differ in rank"));
        }
        normalize_axis(self.axis, data.ty.rank())?;
        Ok(vec![ValueType::new(data.ty.dtype, idx.ty.dims.clone())])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (data, idx) = (inputs.req(0)?, inputs.req(1)?);
        let rank = data.dims.len();
        let axis = normalize_axis(self.axis, rank).map_err(|e| OpError::eval(e.to_string()))?;
        if idx.dims.len() != rank || idx.dims.iter().zip(data.dims).enumerate().any(|(a, (&i, &d))| a != axis && i > d)
        {
            return Err(OpError::eval("GatherElements indices do not fit the data"));
        }
        let ds = strides(data.dims);
        let mut index = vec![0usize; rank];
        let out = &mut outputs[0];
        same_type!(data.data, &mut out.data, |s, d| {
            for (k, dst) in d.iter_mut().enumerate() {
                let mut offset = 0;
                for a in 0..rank {
                    let i = if a == axis { wrap_index(index_at(idx, k)?, data.dims[axis])? } else { index[a] };
                    offset += i * ds[a];
                }
                *dst = s[offset];
                for a in (0..rank).rev() {
                    index[a] += 1;
                    if index[a] < idx.dims[a] {
                        break;
                    }
                    index[a] = 0;
                }
            }
            Ok(())
        })
    }
}

/// `GatherND`.
#[derive(Debug)]
struct GatherNd {
    batch_dims: usize,
}

fn build_gather_nd(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let b = ctx.int_or("batch_dims", 0)?;
    let batch_dims = usize::try_from(b).map_err(|_| OpError::attribute("batch_dims", "must not be negative"))?;
    Ok(Box::new(GatherNd { batch_dims }))
}

impl Op for GatherNd {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, contiguous, ext, numel};
        Some((|| {
            let (data, idx, out) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0)?);
            let (b, q) = (self.batch_dims, idx.dims.len());
            let k = *idx.dims.last().ok_or_else(|| OpError::eval("GatherND indices are 0-D"))?;
            if b + k > data.dims.len() || b >= q {
                return Err(OpError::eval("GatherND ranks do not fit batch_dims"));
            }
            let batch = numel(&data.dims[..b]) as i64;
            let m = numel(&idx.dims[b..q - 1]) as i64;
            let slice = numel(&data.dims[b + k..]) as i64;
            let strides = contiguous(&data.dims);
            let batch_stride = numel(&data.dims[b..]) as i64;
            let mut meta = vec![batch, m, ext(k), slice, batch_stride];
            meta.extend(data.dims[b..b + k].iter().map(|&d| ext(d)));
            meta.extend_from_slice(&strides[b..b + k]);
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                GatherKernel { form: GatherForm::Nd, elem_bytes: data.dtype.size_bytes() as u8, index: idx.dtype },
                meta,
                Work::Elements(numel(&out.dims)),
                vec![Slot::In(0), Slot::In(1), Slot::Out(0)],
            )]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (data, idx) = (inputs.req(0)?, inputs.req(1)?);
        if idx.ty.dtype != DType::I64 {
            return Err(OpError::infer("GatherND indices must be int64"));
        }
        let (r, q, b) = (data.ty.rank(), idx.ty.rank(), self.batch_dims);
        if q == 0 || b >= q || b >= r {
            return Err(OpError::infer("GatherND ranks do not fit batch_dims"));
        }
        let last = idx.ty.dims[q - 1]
            .as_fixed()
            .ok_or_else(|| OpError::infer("GatherND index depth (last axis of indices) must be known"))?
            as usize;
        if b + last > r {
            return Err(OpError::infer(format!("GatherND index depth {last} exceeds the data rank {r}")));
        }
        let mut dims = idx.ty.dims[..q - 1].to_vec();
        dims.extend(data.ty.dims[b + last..].iter().cloned());
        Ok(vec![ValueType::new(data.ty.dtype, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (data, idx) = (inputs.req(0)?, inputs.req(1)?);
        let indices = idx.i64s()?;
        let (q, b) = (idx.dims.len(), self.batch_dims);
        let depth = *idx.dims.last().ok_or_else(|| OpError::eval("GatherND indices are 0-D"))?;
        if b + depth > data.dims.len() || idx.dims[..b] != data.dims[..b] {
            return Err(OpError::eval("GatherND indices do not fit the data"));
        }
        let batch: usize = data.dims[..b].iter().product();
        let per_batch_lookups: usize = idx.dims[b..q - 1].iter().product();
        let slice: usize = data.dims[b + depth..].iter().product();
        let batch_stride: usize = data.dims[b..].iter().product();
        let ds = strides(&data.dims[b..b + depth]);
        let out = &mut outputs[0];
        same_type!(data.data, &mut out.data, |s, d| {
            if d.len() != batch * per_batch_lookups * slice {
                return Err(OpError::eval("GatherND output size differs from inference"));
            }
            for bi in 0..batch {
                for l in 0..per_batch_lookups {
                    let lookup = bi * per_batch_lookups + l;
                    let mut offset = bi * batch_stride;
                    for k in 0..depth {
                        offset += wrap_index(indices[lookup * depth + k], data.dims[b + k])? * ds[k] * slice;
                    }
                    d[lookup * slice..(lookup + 1) * slice].copy_from_slice(&s[offset..offset + slice]);
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{iota, run_op, values};
    use crate::ops::{Attribute, Attributes};
    use crate::tensor::{Tensor, TensorData};

    #[test]
    fn gather_elements_and_gather_nd() {
        let x = iota(&[2, 2]);
        let idx = Tensor::new(vec![2, 2], TensorData::I64(vec![1, 0, 0, 0])).unwrap();
        let attrs = Attributes(vec![("axis".into(), Attribute::Int(1))]);
        let g = run_op("GatherElements", 13, &attrs, &[Some(&x), Some(&idx)]).unwrap();
        assert_eq!(values(&g[0]), vec![1.0, 0.0, 2.0, 2.0]);

        let nd_idx = Tensor::new(vec![2, 1], TensorData::I64(vec![1, 0])).unwrap();
        let nd = run_op("GatherND", 13, &Attributes::default(), &[Some(&x), Some(&nd_idx)]).unwrap();
        assert_eq!(nd[0].dims(), &[2, 2]);
        assert_eq!(values(&nd[0]), vec![2.0, 3.0, 0.0, 1.0]);
    }
}
