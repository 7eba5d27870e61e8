//! Selection: TopK, the `k` largest or smallest elements along an axis with their int64 indices,
//! sorted (also where `sorted` is 0, whose order the spec leaves open), equal values in index order
//! and a NaN counted as the largest value (numpy's sort order, as the reference's `lexsort`).
//! `k` is an attribute before opset 10 and an input from 10; the output shape depends on it, so it
//! must be a constant (an initializer or a folded value): a `k` fed at run time leaves the extent
//! unknown at import and the compile asks for it to be bound as a constant.

pub(crate) mod gpu;

use std::cmp::Ordering;

use saggar_shape::{DType, Dim};

use self::gpu::TopKKernel;
use crate::ops::elementwise::require_dtype;
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, ext};
use crate::ops::shape_util::normalize_axis;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpEntry, OpError, ValueType, unknown_dim};
use crate::tensor::TensorMut;

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "TopK", since: 1, until: 9, build: |c| build_top_k(c, false) },
    OpEntry { op_type: "TopK", since: 10, until: 10, build: |c| build_top_k(c, true) },
    OpEntry { op_type: "TopK", since: 11, until: 24, build: |c| build_top_k(c, true) },
];

/// `TopK`.
#[derive(Debug)]
struct TopK {
    /// The `k` attribute (opsets before 10); from 10 `k` is input 1.
    attr_k: Option<i64>,
    axis: i64,
    largest: bool,
}

fn build_top_k(ctx: &mut NodeCtx<'_>, k_input: bool) -> Result<Box<dyn Op>, OpError> {
    let attr_k = if k_input {
        None
    } else {
        Some(ctx.int("k")?.ok_or_else(|| OpError::attribute("k", "is required before opset 10"))?)
    };
    let flag = |name: &str| -> Result<bool, OpError> {
        match ctx.int_or(name, 1)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(OpError::attribute(name, format!("must be 0 or 1, found {other}"))),
        }
    };
    let (largest, _sorted) = if ctx.opset() >= 11 { (flag("largest")?, flag("sorted")?) } else { (true, true) };
    Ok(Box::new(TopK { attr_k, axis: ctx.int_or("axis", -1)?, largest }))
}

/// `k` from its input's elements: exactly one, not negative.
fn k_of(values: &[i64]) -> Result<usize, OpError> {
    match values {
        [k] => usize::try_from(*k).map_err(|_| OpError::infer(format!("TopK's k must not be negative, found {k}"))),
        other => Err(OpError::infer(format!("TopK's K input must hold one value, found {}", other.len()))),
    }
}

/// Fails unless `k` fits the axis of `len` elements.
fn check_k(k: usize, len: usize) -> Result<(), OpError> {
    if k > len {
        return Err(OpError::infer(format!("TopK's k = {k} exceeds the axis length {len}")));
    }
    Ok(())
}

/// The total order of one element type: ascending, a NaN above everything.
trait Ordered: Copy {
    fn order(a: Self, b: Self) -> Ordering;
}

#[allow(clippy::eq_op)] // `a != a` is NaN's test, generic over floats and integers
impl<T: crate::tensor::Number> Ordered for T {
    fn order(a: T, b: T) -> Ordering {
        a.partial_cmp(&b).unwrap_or_else(|| (a != a).cmp(&(b != b)))
    }
}

/// `(outer, len, inner)` of a row along `axis` of `dims`.
fn layout(axis: usize, dims: &[usize]) -> (usize, usize, usize) {
    (dims[..axis].iter().product(), dims[axis], dims[axis + 1..].iter().product())
}

impl TopK {
    /// The constant `k`, when it is known at import.
    fn const_k(&self, inputs: &InferInputs<'_>) -> Result<Option<usize>, OpError> {
        match self.attr_k {
            Some(k) => k_of(&[k]).map(Some),
            None => inputs.req(1)?.const_i64s().map(|v| k_of(&v)).transpose(),
        }
    }

    /// Writes the top `k` of every row of `x` (shaped `dims`) into `values` and `indices`.
    fn select<T: Ordered>(
        &self,
        x: &[T],
        dims: &[usize],
        k: usize,
        values: &mut [T],
        indices: &mut [i64],
    ) -> Result<(), OpError> {
        let axis = normalize_axis(self.axis, dims.len()).map_err(|e| OpError::eval(e.to_string()))?;
        let (outer, len, inner) = layout(axis, dims);
        check_k(k, len).map_err(|e| OpError::eval(e.to_string()))?;
        if values.len() != outer * k * inner || indices.len() != values.len() || x.len() != outer * len * inner {
            return Err(OpError::eval("TopK: outputs do not match the input and k"));
        }
        let largest = self.largest;
        let mut order: Vec<usize> = Vec::with_capacity(len);
        for o in 0..outer {
            for i in 0..inner {
                let at = |j: usize| x[(o * len + j) * inner + i];
                let cmp = |&a: &usize, &b: &usize| {
                    let by_value = if largest { T::order(at(b), at(a)) } else { T::order(at(a), at(b)) };
                    by_value.then(a.cmp(&b))
                };
                order.clear();
                order.extend(0..len);
                if k > 0 && k < len {
                    order.select_nth_unstable_by(k - 1, cmp);
                }
                order[..k].sort_unstable_by(cmp);
                for (t, &j) in order[..k].iter().enumerate() {
                    values[(o * k + t) * inner + i] = at(j);
                    indices[(o * k + t) * inner + i] = j as i64;
                }
            }
        }
        Ok(())
    }
}

impl Op for TopK {
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            if self.attr_k.is_none() && ctx.infer.get(1).and_then(|k| k.value).is_none() {
                return Err(OpError::eval(
                    "TopK needs a constant k for now (an initializer or a value folded at import); bind a K fed as \
                     a graph input with OnnxModel::with_constant_inputs",
                ));
            }
            let x = ctx.input(0)?;
            let axis = normalize_axis(self.axis, x.dims.len())?;
            let (outer, len, inner) = layout(axis, &x.dims);
            let k = ctx.output(0)?.dims[axis];
            check_k(k, len)?;
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                TopKKernel { dtype: x.dtype, largest: self.largest },
                vec![ext(outer), ext(len), ext(inner), ext(k)],
                Work::Rows((outer * inner) as u64),
                vec![Slot::In(0), Slot::Out(0), Slot::Out(1)],
            )]))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        require_dtype("TopK", x.dtype, &crate::tensor::NUMERIC_DTYPES)?;
        if let Some(k) = inputs.get(1).filter(|_| self.attr_k.is_none()) {
            require_dtype("TopK's K", k.ty.dtype, &[DType::I64])?;
        }
        let axis = normalize_axis(self.axis, x.rank())?;
        let mut dims = x.dims.clone();
        dims[axis] = match self.const_k(inputs)? {
            Some(k) => {
                if let Some(len) = x.dims[axis].as_fixed() {
                    check_k(k, len as usize)?;
                }
                Dim::Fixed(k as u64)
            }
            None => unknown_dim(),
        };
        Ok(vec![ValueType::new(x.dtype, dims.clone()), ValueType::new(DType::I64, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        let k = match self.attr_k {
            Some(k) => k_of(&[k]),
            None => k_of(&inputs.req(1)?.to_i64s().ok_or_else(|| OpError::eval("TopK's K must be int64"))?),
        }
        .map_err(|e| OpError::eval(e.to_string()))?;
        let [values, indices] = outputs else { return Err(OpError::eval("TopK has two outputs")) };
        let axis = normalize_axis(self.axis, x.dims.len()).map_err(|e| OpError::eval(e.to_string()))?;
        if values.dims.get(axis) != Some(&k) {
            return Err(OpError::eval(format!("TopK's k = {k} differs from the output shape {:?}", values.dims)));
        }
        let (indices, dims) = (indices.i64s()?, x.dims);
        crate::tensor::same_number!(x.data, &mut values.data, |x, v| self.select(x, dims, k, v, indices), _ => {
            Err(OpError::eval("TopK: the values output's type differs from the input's"))
        })
    }
}

#[cfg(test)]
mod tests;
