//! Constants, generated tensors and pass-throughs: Range, ConstantOfShape, Constant, EyeLike
//! ([`eye_like`]), OneHot ([`one_hot`]), Identity, Dropout (inference).

mod eye_like;
pub(crate) mod gpu;
mod one_hot;

use saggar_shape::{DType, Dim};

use crate::ops::shapes::{MAX_RANK, copy_through};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpEntry, OpError, SymInt, ValueType, unknown_dim};
use crate::tensor::{DataMut, DataRef, Tensor, TensorData, TensorMut};

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "Range", since: 11, until: 24, build: |_| Ok(Box::new(Range)) },
    OpEntry { op_type: "ConstantOfShape", since: 9, until: 24, build: build_constant_of_shape },
    OpEntry { op_type: "Constant", since: 1, until: 24, build: build_constant },
    OpEntry { op_type: "Identity", since: 1, until: 24, build: |_| Ok(Box::new(Identity)) },
    OpEntry { op_type: "Dropout", since: 7, until: 11, build: build_dropout_attrs },
    OpEntry { op_type: "Dropout", since: 12, until: 24, build: build_dropout },
    OpEntry { op_type: "EyeLike", since: 9, until: 24, build: eye_like::build_eye_like },
    OpEntry { op_type: "OneHot", since: 9, until: 10, build: |c| one_hot::build_one_hot(c, false) },
    OpEntry { op_type: "OneHot", since: 11, until: 24, build: |c| one_hot::build_one_hot(c, true) },
];

/// `Range(start, limit, delta)`.
#[derive(Debug)]
struct Range;

/// Elements of a range, or an error for a zero step or a count above `i32::MAX`.
fn range_len(start: f64, limit: f64, delta: f64) -> Result<usize, OpError> {
    if delta == 0.0 || !delta.is_finite() || !start.is_finite() || !limit.is_finite() {
        return Err(OpError::infer("Range needs a finite, non-zero delta and finite bounds"));
    }
    let n = ((limit - start) / delta).ceil().max(0.0);
    if n > f64::from(i32::MAX) {
        return Err(OpError::infer(format!("Range of {n} elements is too long")));
    }
    Ok(n as usize)
}

/// The first element of numeric elements, as f64.
fn first_number(data: DataRef<'_>) -> Option<f64> {
    if data.dtype() == DType::Bool {
        return None;
    }
    crate::tensor::first_wide(data).map(crate::tensor::Wide::to_f64)
}

impl Op for Range {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (s, l, d) = (inputs.req(0)?, inputs.req(1)?, inputs.req(2)?);
        let dtype = s.ty.dtype;
        if ![DType::F32, DType::I64, DType::I32].contains(&dtype) || l.ty.dtype != dtype || d.ty.dtype != dtype {
            return Err(OpError::infer("Range inputs must be scalars of one type: f32, i64 or i32"));
        }
        let len = match (s.scalar_f64(), l.scalar_f64(), d.scalar_f64()) {
            (Some(s), Some(l), Some(d)) => Dim::Fixed(range_len(s, l, d)? as u64),
            _ => match (s.sym_ints(), l.sym_ints(), d.const_i64s()) {
                // `Range(0, seq, 1)` over a symbolic extent is that extent long.
                (Some(sv), Some(lv), Some(dv)) if sv == [SymInt::Int(0)] && dv == [1] && lv.len() == 1 => {
                    lv[0].to_dim().unwrap_or_else(unknown_dim)
                }
                _ => unknown_dim(),
            },
        };
        Ok(vec![ValueType::new(dtype, vec![len])])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (s, d) = (inputs.req(0)?, inputs.req(2)?);
        match &mut outputs[0].data {
            DataMut::F32(o) => {
                let (s, d) = (s.f32s()?[0], d.f32s()?[0]);
                o.iter_mut().enumerate().for_each(|(i, o)| *o = s + i as f32 * d);
            }
            DataMut::I64(o) => {
                let (s, d) = (s.i64s()?[0], d.i64s()?[0]);
                o.iter_mut().enumerate().for_each(|(i, o)| *o = s.wrapping_add((i as i64).wrapping_mul(d)));
            }
            DataMut::I32(o) => {
                let (s, d) = (s.i32s()?[0], d.i32s()?[0]);
                o.iter_mut().enumerate().for_each(|(i, o)| *o = s.wrapping_add((i as i32).wrapping_mul(d)));
            }
            other => return Err(OpError::eval(format!("Range cannot make {}", other.dtype()))),
        }
        Ok(())
    }
}

/// `ConstantOfShape`.
#[derive(Debug)]
struct ConstantOfShape {
    value: Tensor,
}

fn build_constant_of_shape(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let value = match ctx.tensor("value")? {
        Some(t) if t.len() == 1 => t.clone().reshaped(vec![1])?,
        Some(_) => return Err(OpError::attribute("value", "must hold exactly one element")),
        None => Tensor::new(vec![1], TensorData::F32(vec![0.0]))?,
    };
    Ok(Box::new(ConstantOfShape { value }))
}

impl Op for ConstantOfShape {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let shape = inputs.req(0)?;
        let dims = match shape.as_dims() {
            Some(d) => d,
            None => {
                let n = shape.ty.dims.first().and_then(Dim::as_fixed).filter(|&n| n as usize <= MAX_RANK);
                vec![unknown_dim(); n.ok_or_else(|| OpError::infer("ConstantOfShape's rank is not known"))? as usize]
            }
        };
        Ok(vec![ValueType::new(self.value.dtype(), dims)])
    }

    fn eval(&self, _: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        crate::tensor::same_type!(self.value.data().as_ref(), &mut outputs[0].data, |v, o| {
            o.fill(v[0]);
            Ok(())
        })
    }

    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, numel};
        Some(ctx.output(0).map(|y| {
            let n = numel(&y.dims);
            let mut bits = [0u8; 8];
            let value = self.value.to_le_bytes();
            bits[..value.len().min(8)].copy_from_slice(&value[..value.len().min(8)]);
            let kind = gpu::FillKernel { elem_bytes: y.dtype.size_bytes() as u8, bits: u64::from_le_bytes(bits) };
            GpuNode::Launches(vec![GpuLaunch::new(kind, vec![n as i64], Work::Elements(n), vec![Slot::Out(0)])])
        }))
    }
}

/// `Constant`: the value from one of its attributes.
#[derive(Debug)]
struct Constant {
    value: Tensor,
}

fn build_constant(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    for unsupported in ["sparse_value", "value_string", "value_strings"] {
        if let Some(v) = ctx.raw(unsupported) {
            return Err(ctx.unsupported(unsupported, v.type_name(), "value, value_float(s), value_int(s)"));
        }
    }
    let value = if let Some(t) = ctx.tensor("value")? {
        t.clone()
    } else if let Some(f) = ctx.float("value_float")? {
        Tensor::scalar(TensorData::F32(vec![f]))?
    } else if let Some(v) = ctx.floats("value_floats")? {
        Tensor::new(vec![v.len()], TensorData::F32(v))?
    } else if let Some(i) = ctx.int("value_int")? {
        Tensor::scalar(TensorData::I64(vec![i]))?
    } else if let Some(v) = ctx.ints("value_ints")? {
        Tensor::from_i64s(v)
    } else {
        return Err(OpError::attribute("value", "Constant needs a value attribute"));
    };
    Ok(Box::new(Constant { value }))
}

impl Op for Constant {
    fn infer(&self, _: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        Ok(vec![ValueType::fixed(self.value.dtype(), self.value.dims())])
    }

    fn eval(&self, _: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        outputs[0].copy_from(&self.value.view())
    }

    fn key(&self) -> String {
        // The value can be large; its hash identifies it.
        format!("Constant({})", blake3::hash(&self.value.to_le_bytes()).to_hex())
    }
}

/// `Identity`.
#[derive(Debug)]
struct Identity;

impl Op for Identity {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        Ok(vec![inputs.req(0)?.ty.clone()])
    }

    fn dims_value(&self, inputs: &InferInputs<'_>) -> Option<Vec<SymInt>> {
        inputs.req(0).ok()?.sym_ints()
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        copy_through(inputs, outputs)
    }
}

/// `Dropout` in inference mode: the input unchanged, and an all-true mask if asked for.
#[derive(Debug)]
struct Dropout;

fn build_dropout_attrs(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    ctx.ignore("ratio");
    if ctx.int_or("is_test", 1)? == 0 {
        return Err(ctx.unsupported("is_test", 0, "1 (inference)"));
    }
    Ok(Box::new(Dropout))
}

fn build_dropout(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    ctx.ignore("seed");
    Ok(Box::new(Dropout))
}

impl Op for Dropout {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?;
        if let Some(mode) = inputs.get(2) {
            match mode.const_i64s().or_else(|| {
                mode.value.and_then(|t| match t.data() {
                    TensorData::Bool(b) => Some(b.iter().map(|&v| i64::from(v)).collect()),
                    _ => None,
                })
            }) {
                Some(v) if v.iter().all(|&m| m == 0) => {}
                _ => {
                    return Err(OpError::infer(
                        "Dropout in training mode is not supported (training_mode must be a constant false)",
                    ));
                }
            }
        }
        Ok(vec![x.ty.clone(), ValueType::new(DType::Bool, x.ty.dims.clone())])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        copy_through(inputs, outputs)?;
        if let Some(mask) = outputs.get_mut(1) {
            mask.bools()?.fill(1);
        }
        Ok(())
    }

    /// The graph passes remove a Dropout whose mask nobody reads; one whose mask is read copies its
    /// input and fills the mask with true.
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, numel};
        let node = || {
            let GpuNode::Launches(mut launches) = crate::ops::data_movement::gpu::contiguous_copy(ctx)? else {
                return Err(OpError::eval("Dropout's copy is a launch"));
            };
            if ctx.outputs.len() > 1 {
                let n = numel(&ctx.output(1)?.dims);
                let fill = gpu::FillKernel { elem_bytes: 1, bits: 1 };
                launches.push(GpuLaunch::new(fill, vec![n as i64], Work::Elements(n), vec![Slot::Out(1)]));
            }
            Ok(GpuNode::Launches(launches))
        };
        Some(node())
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{iota, run_op};
    use crate::ops::{Attribute, Attributes};
    use crate::tensor::{Tensor, TensorData};

    #[test]
    fn range_constant_of_shape_constant_dropout() {
        let (s, l, d) = (Tensor::from_i64s(vec![1]), Tensor::from_i64s(vec![10]), Tensor::from_i64s(vec![3]));
        let (s, l, d) = (s.reshaped(vec![]).unwrap(), l.reshaped(vec![]).unwrap(), d.reshaped(vec![]).unwrap());
        let r = run_op("Range", 11, &Attributes::default(), &[Some(&s), Some(&l), Some(&d)]).unwrap();
        assert_eq!(r[0].data(), &TensorData::I64(vec![1, 4, 7]));
        let zero = Tensor::from_i64s(vec![0]).reshaped(vec![]).unwrap();
        assert!(run_op("Range", 11, &Attributes::default(), &[Some(&s), Some(&l), Some(&zero)]).is_err());

        let value = Tensor::new(vec![1], TensorData::I64(vec![7])).unwrap();
        let attrs = Attributes(vec![("value".into(), Attribute::Tensor(value))]);
        let c = run_op("ConstantOfShape", 9, &attrs, &[Some(&Tensor::from_i64s(vec![2, 2]))]).unwrap();
        assert_eq!(c[0].data(), &TensorData::I64(vec![7; 4]));

        let attrs = Attributes(vec![("value_ints".into(), Attribute::Ints(vec![3, 4]))]);
        let k = run_op("Constant", 13, &attrs, &[]).unwrap();
        assert_eq!(k[0], Tensor::from_i64s(vec![3, 4]));

        let x = iota(&[3]);
        let dr = run_op("Dropout", 13, &Attributes(vec![("seed".into(), Attribute::Int(1))]), &[Some(&x)]).unwrap();
        assert_eq!(dr[0], x);
        let train = Tensor::new(vec![], TensorData::Bool(vec![1])).unwrap();
        assert!(run_op("Dropout", 13, &Attributes::default(), &[Some(&x), None, Some(&train)]).is_err());
    }
}
