//! Indexed writes: ScatterND, ScatterElements and the deprecated Scatter (opsets 9 and 10, which is
//! ScatterElements without a reduction), and TensorScatter's KV-cache update (`tensor_scatter.rs`). The output is the data with the updates written at the
//! indices, combined with what is there by the `reduction` the opset allows: `none` (replace) up to
//! 15, `add` and `mul` from 16, `max` and `min` from 18 (an attribute the opset lacks is refused as
//! unread).
//!
//! On the host a negative index counts from the end of its axis; one still out of range is an
//! evaluation error naming it. Updates apply in the row-major order of the indices, so with
//! duplicate indices and `none` the last one wins (ONNX leaves that case undefined); with a
//! reduction every duplicate is combined, in that order. The GPU forms ([`gpu`]) skip an
//! out-of-range index instead of writing out of bounds, and are deterministic and equal to the host
//! wherever ONNX defines the result.

pub(crate) mod gpu;
mod tensor_scatter;

use saggar_shape::{DType, Dim};

use crate::ops::data_movement::{index_at, wrap_index};
use crate::ops::shape_util::{for_each_broadcast, normalize_axis, strides};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpEntry, OpError, ValueType};
use crate::tensor::{DataMut, DataRef, TensorMut, TensorView};

use Reduction::{Add, Max, Min, Mul};

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "Scatter", since: 9, until: 10, build: |c| build_elements(c, &[]) },
    OpEntry { op_type: "ScatterElements", since: 11, until: 15, build: |c| build_elements(c, &[]) },
    OpEntry { op_type: "ScatterElements", since: 16, until: 17, build: |c| build_elements(c, &[Add, Mul]) },
    OpEntry { op_type: "ScatterElements", since: 18, until: 24, build: |c| build_elements(c, &[Add, Mul, Max, Min]) },
    OpEntry { op_type: "ScatterND", since: 11, until: 15, build: |c| build_nd(c, &[]) },
    OpEntry { op_type: "ScatterND", since: 16, until: 17, build: |c| build_nd(c, &[Add, Mul]) },
    OpEntry { op_type: "ScatterND", since: 18, until: 24, build: |c| build_nd(c, &[Add, Mul, Max, Min]) },
    OpEntry { op_type: "TensorScatter", since: 24, until: 24, build: tensor_scatter::build_tensor_scatter },
];

/// How an update combines with the element it lands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Reduction {
    /// Replace it.
    None,
    Add,
    Mul,
    /// The larger (NaN wins, as numpy's `maximum`).
    Max,
    /// The smaller (NaN wins).
    Min,
}

/// The `reduction` attribute, when the opset has one (`allowed` non-empty).
fn reduction(ctx: &NodeCtx<'_>, allowed: &[Reduction]) -> Result<Reduction, OpError> {
    if allowed.is_empty() {
        return Ok(Reduction::None);
    }
    let r = match ctx.string_or("reduction", "none")?.as_str() {
        "none" => Reduction::None,
        "add" => Add,
        "mul" => Mul,
        "max" => Max,
        "min" => Min,
        other => return Err(ctx.unsupported("reduction", other, &supported(allowed))),
    };
    if r != Reduction::None && !allowed.contains(&r) {
        return Err(ctx.unsupported("reduction", format!("{r:?}").to_lowercase(), &supported(allowed)));
    }
    Ok(r)
}

fn supported(allowed: &[Reduction]) -> String {
    let names: Vec<String> = allowed.iter().map(|r| format!("{r:?}").to_lowercase()).collect();
    format!("none, {} at this opset", names.join(", "))
}

fn build_elements(ctx: &mut NodeCtx<'_>, allowed: &[Reduction]) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(ScatterElements { axis: ctx.int_or("axis", 0)?, reduction: reduction(ctx, allowed)? }))
}

fn build_nd(ctx: &mut NodeCtx<'_>, allowed: &[Reduction]) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(ScatterNd { reduction: reduction(ctx, allowed)? }))
}

/// Element types a reduction takes: any with `none`, numbers otherwise.
fn check_types(r: Reduction, data: DType, updates: DType) -> Result<(), OpError> {
    if data != updates {
        return Err(OpError::infer(format!("updates of {updates} do not match data of {data}")));
    }
    if r != Reduction::None && !matches!(data, DType::F32 | DType::I64 | DType::I32) {
        return Err(OpError::infer(format!("reduction {r:?} takes f32, i64 or i32 data, not {data}")));
    }
    Ok(())
}

/// One element type's combination of an element `a` with an update `u`.
trait Combine: Copy {
    fn combine(r: Reduction, a: Self, u: Self) -> Self;
}

impl Combine for f32 {
    fn combine(r: Reduction, a: f32, u: f32) -> f32 {
        match r {
            Reduction::None => u,
            Add => a + u,
            Mul => a * u,
            Max => {
                if u > a || u.is_nan() {
                    u
                } else {
                    a
                }
            }
            Min => {
                if u < a || u.is_nan() {
                    u
                } else {
                    a
                }
            }
        }
    }
}

macro_rules! combine_int {
    ($($t:ty),*) => {$(
        impl Combine for $t {
            fn combine(r: Reduction, a: $t, u: $t) -> $t {
                match r {
                    Reduction::None => u,
                    Add => a.wrapping_add(u),
                    Mul => a.wrapping_mul(u),
                    Max => a.max(u),
                    Min => a.min(u),
                }
            }
        }
    )*};
}
combine_int!(i64, i32, u8);

/// Copies `data` into `out` and applies `updates` where `places` puts them: it calls its visitor
/// with `(k, offset)` for every update element `k`, in order, and stops at an index out of range
/// with its error.
fn scatter(
    r: Reduction,
    data: &TensorView<'_>,
    updates: &TensorView<'_>,
    out: &mut TensorMut<'_>,
    places: impl FnOnce(&mut dyn FnMut(usize, usize)) -> Result<(), OpError>,
) -> Result<(), OpError> {
    fn run<T: Combine>(
        r: Reduction,
        (s, u, d): (&[T], &[T], &mut [T]),
        places: impl FnOnce(&mut dyn FnMut(usize, usize)) -> Result<(), OpError>,
    ) -> Result<(), OpError> {
        if s.len() != d.len() {
            return Err(OpError::eval("scatter output size differs from the data's"));
        }
        d.copy_from_slice(s);
        let mut outside = false;
        places(&mut |k, at| match (d.get_mut(at), u.get(k)) {
            (Some(slot), Some(&v)) => *slot = T::combine(r, *slot, v),
            _ => outside = true,
        })?;
        if outside { Err(OpError::eval("scatter offset outside the output or the updates")) } else { Ok(()) }
    }
    match (data.data, updates.data, &mut out.data) {
        (DataRef::F32(s), DataRef::F32(u), DataMut::F32(d)) => run(r, (s, u, d), places),
        (DataRef::I64(s), DataRef::I64(u), DataMut::I64(d)) => run(r, (s, u, d), places),
        (DataRef::I32(s), DataRef::I32(u), DataMut::I32(d)) => run(r, (s, u, d), places),
        (DataRef::Bool(s), DataRef::Bool(u), DataMut::Bool(d)) if r == Reduction::None => run(r, (s, u, d), places),
        _ => Err(OpError::eval("scatter data, updates and output differ in type, or the reduction takes no bool")),
    }
}

/// `ScatterElements` (and `Scatter`): `out[.., idx[i..], ..] = updates[i..]` with the index replacing
/// the coordinate along `axis`.
#[derive(Debug)]
pub(crate) struct ScatterElements {
    axis: i64,
    pub(crate) reduction: Reduction,
}

impl Op for ScatterElements {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        Some(gpu::scatter_elements(self, ctx))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (data, idx, upd) = (inputs.req(0)?.ty, inputs.req(1)?.ty, inputs.req(2)?.ty);
        check_types(self.reduction, data.dtype, upd.dtype)?;
        if !matches!(idx.dtype, DType::I64 | DType::I32) {
            return Err(OpError::infer(format!("ScatterElements indices must be int64 or int32, not {}", idx.dtype)));
        }
        let axis = normalize_axis(self.axis, data.rank())?;
        if idx.rank() != data.rank() || upd.rank() != data.rank() {
            return Err(OpError::infer(format!(
                "ScatterElements data {data}, indices {idx} and updates {upd} differ in rank"
            )));
        }
        for a in 0..data.rank() {
            let (i, u, d) = (idx.dims[a].as_fixed(), upd.dims[a].as_fixed(), data.dims[a].as_fixed());
            if matches!((i, u), (Some(i), Some(u)) if i != u) {
                return Err(OpError::infer(format!("ScatterElements indices {idx} and updates {upd} differ in shape")));
            }
            if a != axis && matches!((i, d), (Some(i), Some(d)) if i > d) {
                return Err(OpError::infer(format!("ScatterElements indices {idx} exceed data {data} on axis {a}")));
            }
        }
        Ok(vec![data.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (data, idx, upd) = (inputs.req(0)?, inputs.req(1)?, inputs.req(2)?);
        let rank = data.dims.len();
        let axis = normalize_axis(self.axis, rank).map_err(|e| OpError::eval(e.to_string()))?;
        let fits = |a: usize| a == axis || idx.dims[a] <= data.dims[a];
        if idx.dims != upd.dims || idx.dims.len() != rank || !(0..rank).all(fits) {
            return Err(OpError::eval(format!(
                "ScatterElements indices {:?} and updates {:?} do not fit data {:?}",
                idx.dims, upd.dims, data.dims
            )));
        }
        // An update's offset is its own coordinates' off the axis, plus its index's along it.
        let mut off_axis = strides(data.dims);
        let step = std::mem::replace(&mut off_axis[axis], 0);
        let n = data.dims[axis];
        scatter(self.reduction, data, upd, &mut outputs[0], |visit| {
            let mut walked = Ok(());
            for_each_broadcast(idx.dims, [off_axis.as_slice()], |k, [base]| {
                if walked.is_ok() {
                    match index_at(idx, k).and_then(|i| wrap_index(i, n)) {
                        Ok(c) => visit(k, base + c * step),
                        Err(e) => walked = Err(e),
                    }
                }
            });
            walked
        })
    }
}

/// `ScatterND`: each row of `k` coordinates of the indices (their last axis) picks a slice of the
/// data, `data.shape[k..]`, which the matching slice of the updates replaces or combines with.
#[derive(Debug)]
pub(crate) struct ScatterNd {
    pub(crate) reduction: Reduction,
}

impl Op for ScatterNd {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        Some(gpu::scatter_nd(self, ctx))
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let (data, idx, upd) = (inputs.req(0)?.ty, inputs.req(1)?.ty, inputs.req(2)?.ty);
        check_types(self.reduction, data.dtype, upd.dtype)?;
        if idx.dtype != DType::I64 {
            return Err(OpError::infer(format!("ScatterND indices must be int64, not {}", idx.dtype)));
        }
        let q = idx.rank();
        let Some(last) = idx.dims.last() else { return Err(OpError::infer("ScatterND indices must not be 0-D")) };
        let k = last
            .as_fixed()
            .ok_or_else(|| OpError::infer("ScatterND index depth (last axis of indices) must be known"))?;
        let k = usize::try_from(k).ok().filter(|&k| k <= data.rank()).ok_or_else(|| {
            OpError::infer(format!("ScatterND index depth {k} exceeds the data rank {}", data.rank()))
        })?;
        let want: Vec<&Dim> = idx.dims[..q - 1].iter().chain(&data.dims[k..]).collect();
        let clash = want.len() != upd.rank()
            || want
                .iter()
                .zip(&upd.dims)
                .any(|(w, u)| matches!((w.as_fixed(), u.as_fixed()), (Some(a), Some(b)) if a != b));
        if clash {
            return Err(OpError::infer(format!(
                "ScatterND updates {upd} must be indices.shape[:-1] + data.shape[{k}:] (indices {idx}, data {data})"
            )));
        }
        Ok(vec![data.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (data, idx, upd) = (inputs.req(0)?, inputs.req(1)?, inputs.req(2)?);
        let indices = idx.i64s()?;
        let k = *idx.dims.last().ok_or_else(|| OpError::eval("ScatterND indices are 0-D"))?;
        let rows = &idx.dims[..idx.dims.len() - 1];
        if k > data.dims.len()
            || upd.dims.len() != rows.len() + data.dims.len() - k
            || upd.dims[..rows.len()] != *rows
            || upd.dims[rows.len()..] != data.dims[k..]
        {
            return Err(OpError::eval(format!(
                "ScatterND indices {:?} and updates {:?} do not fit data {:?}",
                idx.dims, upd.dims, data.dims
            )));
        }
        let (rows, slice): (usize, usize) = (rows.iter().product(), data.dims[k..].iter().product());
        let ds = strides(data.dims);
        scatter(self.reduction, data, upd, &mut outputs[0], |visit| {
            for row in 0..rows {
                let coords =
                    indices.get(row * k..(row + 1) * k).ok_or_else(|| OpError::eval("ScatterND indices end early"))?;
                let mut base = 0;
                for (t, &x) in coords.iter().enumerate() {
                    base += wrap_index(x, data.dims[t])? * ds[t];
                }
                (0..slice).for_each(|s| visit(row * slice + s, base + s));
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests;
