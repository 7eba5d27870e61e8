//! `TensorScatter` (opset 24): a KV cache `past` of shape `[batch, ..., max_seq, ...]` with `update`
//! (`seq <= max_seq` along the sequence axis `axis`, the same elsewhere) written from each batch's
//! write index (`write_indices`, 0 when absent) along that axis; `circular` mode wraps the positions
//! modulo `max_seq` (the batch and other axes are not wrapped). Elements move as bits, any type.
//! The host refuses a linear write past `max_seq` or a negative index; the GPU kernel drops the rows
//! that fall outside instead.

use saggar_shape::DType;

use super::gpu::TensorScatterKernel;
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, ext};
use crate::ops::shape_util::{fmt_dims, normalize_axis};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType};
use crate::tensor::{DataMut, DataRef, TensorMut};

/// `TensorScatter`.
#[derive(Debug)]
struct TensorScatter {
    axis: i64,
    circular: bool,
}

pub(super) fn build_tensor_scatter(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let circular = match ctx.string_or("mode", "linear")?.as_str() {
        "linear" => false,
        "circular" => true,
        other => return Err(ctx.unsupported("mode", other, "linear, circular")),
    };
    Ok(Box::new(TensorScatter { axis: ctx.int_or("axis", -2)?, circular }))
}

/// `[batch, pre, max_seq, seq, inner]` of a cache and an update of these shapes.
fn layout(axis: i64, past: &[usize], update: &[usize]) -> Result<[usize; 5], OpError> {
    let axis = normalize_axis(axis, past.len())?;
    if axis == 0 {
        return Err(OpError::infer("TensorScatter's axis cannot be the batch axis 0"));
    }
    let fits = update.len() == past.len()
        && (0..past.len()).all(|a| if a == axis { update[a] <= past[a] } else { update[a] == past[a] });
    if !fits {
        return Err(OpError::infer(format!(
            "TensorScatter's update {update:?} must match the cache {past:?} except along axis {axis}, where it \
             may be shorter"
        )));
    }
    let pre = past[1..axis].iter().product();
    Ok([past[0], pre, past[axis], update[axis], past[axis + 1..].iter().product()])
}

impl TensorScatter {
    /// Writes `past` with `update` into `out`, all of one element type.
    fn scatter<T: Copy>(
        &self,
        shape: [usize; 5],
        past: &[T],
        update: &[T],
        w: &[i64],
        out: &mut [T],
    ) -> Result<(), OpError> {
        let [batch, pre, max_seq, seq, inner] = shape;
        if out.len() != past.len()
            || past.len() != batch * pre * max_seq * inner
            || update.len() != batch * pre * seq * inner
        {
            return Err(OpError::eval("TensorScatter: the tensors do not match their shapes"));
        }
        out.copy_from_slice(past);
        for (b, &start) in w.iter().enumerate().take(batch) {
            if !self.circular && (start < 0 || start as u64 + seq as u64 > max_seq as u64) {
                return Err(OpError::eval(format!(
                    "TensorScatter: write index {start} of batch {b} puts {seq} rows outside 0..{max_seq} (linear mode)"
                )));
            }
            for q in b * pre..(b + 1) * pre {
                for s in 0..seq {
                    let wrap = max_seq.max(1) as i64;
                    let p = (start.rem_euclid(wrap) + s as i64).rem_euclid(wrap) as usize;
                    let (to, from) = ((q * max_seq + p) * inner, (q * seq + s) * inner);
                    out[to..to + inner].copy_from_slice(&update[from..from + inner]);
                }
            }
        }
        Ok(())
    }
}

impl Op for TensorScatter {
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let (past, update) = (ctx.input(0)?, ctx.input(1)?);
            let [batch, pre, max_seq, seq, inner] = layout(self.axis, &past.dims, &update.dims)?;
            let write_indices = ctx.inputs.get(2).is_some_and(Option::is_some);
            let mut slots = vec![Slot::In(0), Slot::In(1)];
            slots.extend(write_indices.then_some(Slot::In(2)));
            slots.push(Slot::Out(0));
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                TensorScatterKernel { elem_bytes: past.dtype.size_bytes() as u8, write_indices },
                vec![ext(batch), ext(pre), ext(max_seq), ext(seq), ext(inner), i64::from(self.circular)],
                Work::Elements((batch * pre * max_seq * inner) as u64),
                slots,
            )]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (past, update) = (inputs.req(0)?.ty, inputs.req(1)?.ty);
        if update.dtype != past.dtype || update.rank() != past.rank() {
            return Err(OpError::infer(format!("TensorScatter's update {update} does not match the cache {past}")));
        }
        let axis = normalize_axis(self.axis, past.rank())?;
        if axis == 0 {
            return Err(OpError::infer("TensorScatter's axis cannot be the batch axis 0"));
        }
        for (a, (u, p)) in update.dims.iter().zip(&past.dims).enumerate() {
            if let (Some(u), Some(p)) = (u.as_fixed(), p.as_fixed())
                && (u > p || (a != axis && u != p))
            {
                return Err(OpError::infer(format!(
                    "TensorScatter's update {} must match the cache {} except along axis {axis}, where it may be shorter",
                    fmt_dims(&update.dims),
                    fmt_dims(&past.dims)
                )));
            }
        }
        if let Some(w) = inputs.get(2) {
            let batch_ok = w.ty.rank() == 1
                && !matches!((w.ty.dims[0].as_fixed(), past.dims[0].as_fixed()), (Some(a), Some(b)) if a != b);
            if w.ty.dtype != DType::I64 || !batch_ok {
                return Err(OpError::infer(format!(
                    "TensorScatter's write_indices must be int64 [batch], found {}",
                    w.ty
                )));
            }
        }
        Ok(vec![past.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (past, update) = (inputs.req(0)?, inputs.req(1)?);
        let shape = layout(self.axis, past.dims, update.dims).map_err(|e| OpError::eval(e.to_string()))?;
        let w = match inputs.get(2) {
            Some(w) if w.len() == shape[0] => w.i64s()?.to_vec(),
            Some(w) => {
                return Err(OpError::eval(format!(
                    "TensorScatter's write_indices hold {}, not the batch {}",
                    w.len(),
                    shape[0]
                )));
            }
            None => vec![0; shape[0]],
        };
        match (past.data, update.data, &mut outputs[0].data) {
            (DataRef::F32(p), DataRef::F32(u), DataMut::F32(o)) => self.scatter(shape, p, u, &w, o),
            (DataRef::I64(p), DataRef::I64(u), DataMut::I64(o)) => self.scatter(shape, p, u, &w, o),
            (DataRef::I32(p), DataRef::I32(u), DataMut::I32(o)) => self.scatter(shape, p, u, &w, o),
            (DataRef::Bool(p), DataRef::Bool(u), DataMut::Bool(o)) => self.scatter(shape, p, u, &w, o),
            _ => Err(OpError::eval("TensorScatter: the cache, update and output differ in type")),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::gpu::GpuKernel;
    use crate::ops::scatter::gpu::TensorScatterKernel;
    use crate::ops::testing::{f32s, iota, run_op, values};
    use crate::ops::{Attribute, Attributes, OpError};
    use crate::tensor::{Tensor, TensorData};

    fn scatter(
        attrs: &[(&str, Attribute)],
        past: &Tensor,
        update: &Tensor,
        w: Option<&[i64]>,
    ) -> Result<Vec<f32>, OpError> {
        let attrs = Attributes(attrs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect());
        let w = w.map(|w| Tensor::from_i64s(w.to_vec()));
        run_op("TensorScatter", 24, &attrs, &[Some(past), Some(update), w.as_ref()]).map(|o| values(&o[0]).to_vec())
    }

    #[test]
    fn updates_land_at_each_batch_write_index() {
        // past [2, 4, 1] (axis -2 is the 4), update [2, 2, 1].
        let past = f32s(&[2, 4, 1], &[0.0; 8]);
        let update = f32s(&[2, 2, 1], &[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(scatter(&[], &past, &update, None).unwrap(), [1.0, 2.0, 0.0, 0.0, 3.0, 4.0, 0.0, 0.0]);
        assert_eq!(scatter(&[], &past, &update, Some(&[2, 1])).unwrap(), [0.0, 0.0, 1.0, 2.0, 0.0, 3.0, 4.0, 0.0]);
        let circular = [("mode", Attribute::String(b"circular".to_vec()))];
        assert_eq!(
            scatter(&circular, &past, &update, Some(&[3, -1])).unwrap(),
            [2.0, 0.0, 0.0, 1.0, 4.0, 0.0, 0.0, 3.0]
        );
        assert_eq!(
            scatter(&circular, &past, &update, Some(&[i64::MAX, i64::MIN])).unwrap(),
            [2.0, 0.0, 0.0, 1.0, 3.0, 4.0, 0.0, 0.0],
            "the extreme indices wrap without overflowing"
        );
        // Axis 1 of a [1, 3, 2] cache: rows of 2 elements (the axes after the sequence move together).
        let past = iota(&[1, 3, 2]);
        let update = f32s(&[1, 1, 2], &[9.0, 8.0]);
        let axis1 = [("axis", Attribute::Int(1))];
        assert_eq!(scatter(&axis1, &past, &update, Some(&[1])).unwrap(), [0.0, 1.0, 9.0, 8.0, 4.0, 5.0]);
        let bools = Tensor::new(vec![1, 2, 1], TensorData::Bool(vec![0, 0])).unwrap();
        let one = Tensor::new(vec![1, 1, 1], TensorData::Bool(vec![1])).unwrap();
        let out = run_op("TensorScatter", 24, &Attributes::default(), &[Some(&bools), Some(&one)]).unwrap();
        assert_eq!(out[0].data(), &TensorData::Bool(vec![1, 0]));
    }

    #[test]
    fn bad_shapes_indices_and_modes_are_typed_errors() {
        let past = f32s(&[2, 4, 1], &[0.0; 8]);
        let update = f32s(&[2, 2, 1], &[1.0; 4]);
        let e = scatter(&[], &past, &update, Some(&[3, 0])).unwrap_err();
        assert!(matches!(&e, OpError::Eval(m) if m.contains("write index 3")), "{e}");
        assert!(scatter(&[], &past, &update, Some(&[-1, 0])).is_err());
        assert!(scatter(&[], &past, &update, Some(&[0])).is_err(), "one index per batch");
        assert!(matches!(scatter(&[], &past, &f32s(&[2, 5, 1], &[0.0; 10]), None), Err(OpError::Infer(_))));
        assert!(matches!(scatter(&[], &past, &f32s(&[2, 2, 2], &[0.0; 8]), None), Err(OpError::Infer(_))));
        assert!(matches!(scatter(&[("axis", Attribute::Int(0))], &past, &update, None), Err(OpError::Infer(_))));
        let wrap = [("mode", Attribute::String(b"wrap".to_vec()))];
        assert!(matches!(scatter(&wrap, &past, &update, None), Err(OpError::Unsupported { .. })));
        let ints = Tensor::from_i64s(vec![1, 2]).reshaped(vec![2, 1, 1]).unwrap();
        assert!(run_op("TensorScatter", 24, &Attributes::default(), &[Some(&past), Some(&ints)]).is_err());
        assert!(run_op("TensorScatter", 23, &Attributes::default(), &[Some(&past), Some(&update)]).is_err());
        let kinds: Vec<Box<dyn GpuKernel>> = [(4, false), (4, true), (1, true), (8, false)]
            .map(|(b, w)| Box::new(TensorScatterKernel { elem_bytes: b, write_indices: w }) as Box<dyn GpuKernel>)
            .into();
        crate::ops::testing::assert_kernels_render(&kinds);
    }
}
