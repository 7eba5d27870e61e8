//! The GPU forms of the scatter family: a copy of the data into the output
//! ([`crate::ops::data_movement::gpu::copy_launch`]), then one launch writing the updates.
//!
//! Deterministic where ONNX defines the result, without atomics:
//! - ScatterElements (`scatter_elements.cu`) runs a thread per line of the updates along the axis
//!   (every coordinate but the axis'), applying the line's updates in order. Two lines never reach
//!   the same output element, so every reduction, and `none` with duplicate indices too, gives the
//!   host's result bit for bit. Cost: the updates' elements once, in `updates.shape[axis]` steps a
//!   thread.
//! - ScatterND (`scatter_nd.cu`) with a reduction runs a thread per position within a slice
//!   (`data.shape[k:]`), applying the `m` index rows in order: the host's result bit for bit,
//!   duplicates included, the updates once, in `m` steps a thread (one thread when `k` is the data's
//!   rank). With `none` it runs a thread per update element; duplicate rows then race, and one of
//!   their values is left (which one is unspecified; ONNX leaves the case undefined and the host
//!   keeps the last).
//!
//! An index out of range after wrapping is skipped (its update is dropped) rather than written out
//! of bounds; the host refuses it with an error.

use saggar_shape::DType;

use super::{Reduction, ScatterElements, ScatterNd};
use crate::error::OpError;
use crate::ops::data_movement::gpu::copy_launch;
use crate::ops::gpu::{
    GpuCtx, GpuKernel, GpuLaunch, GpuNode, Operand, Slot, Work, bits_type, contiguous, ctype, ext, index_type, numel,
    render,
};
use crate::ops::shape_util::normalize_axis;

/// Which scatter a [`ScatterKernel`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScatterForm {
    Elements,
    Nd,
}

/// The update launch of a scatter of `dtype` elements with `index` typed indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScatterKernel {
    pub(crate) form: ScatterForm,
    pub(crate) reduction: Reduction,
    pub(crate) dtype: DType,
    pub(crate) index: DType,
}

impl GpuKernel for ScatterKernel {
    fn prefix(&self) -> &'static str {
        match self.form {
            ScatterForm::Elements => "scatter_elements",
            ScatterForm::Nd => "scatter_nd",
        }
    }

    fn source(&self) -> String {
        // `none` moves bits; a reduction computes in the element type.
        let t = match self.reduction {
            Reduction::None => bits_type(self.dtype.size_bytes() as u8),
            _ => ctype(self.dtype).unwrap_or("float"),
        };
        let combine = match self.reduction {
            Reduction::None => "u",
            Reduction::Add => "a + u",
            Reduction::Mul => "a * u",
            Reduction::Max => "(u > a || u != u) ? u : a",
            Reduction::Min => "(u < a || u != u) ? u : a",
        };
        let parallel = if self.reduction == Reduction::None { "1" } else { "0" };
        let template = match self.form {
            ScatterForm::Elements => include_str!("scatter_elements.cu"),
            ScatterForm::Nd => include_str!("scatter_nd.cu"),
        };
        render(template, &[("T", t), ("IX", index_type(self.index)), ("COMBINE", combine), ("PARALLEL", parallel)])
    }
}

/// The kernel kind for `data` and `idx`, refusing element types a reduction cannot compute in.
fn kernel(form: ScatterForm, reduction: Reduction, data: &Operand, idx: &Operand) -> Result<ScatterKernel, OpError> {
    if reduction != Reduction::None && !matches!(data.dtype, DType::F32 | DType::I64 | DType::I32) {
        return Err(OpError::eval(format!(
            "scatter reduction {reduction:?} of {} is not supported on GPU",
            data.dtype
        )));
    }
    Ok(ScatterKernel { form, reduction, dtype: data.dtype, index: idx.dtype })
}

/// The copy of input 0 (the data) into output 0.
fn copy_data(data: &Operand) -> GpuLaunch {
    let n = [numel(&data.dims) as usize];
    copy_launch(data.dtype.size_bytes(), &n, (Slot::In(0), 0, &[1]), (Slot::Out(0), 0, &[1]))
}

/// ScatterElements (and Scatter) on the GPU.
pub(super) fn scatter_elements(op: &ScatterElements, ctx: &GpuCtx<'_>) -> Result<GpuNode, OpError> {
    let (data, idx, upd) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    let rank = data.dims.len();
    let axis = normalize_axis(op.axis, rank)?;
    let kind = kernel(ScatterForm::Elements, op.reduction, data, idx)?;
    let mut launches = vec![copy_data(data)];
    let count = numel(&upd.dims);
    if count > 0 {
        let lines = count / upd.dims[axis] as u64;
        let mut meta = vec![ext(rank), lines as i64, ext(axis), ext(upd.dims[axis]), ext(data.dims[axis])];
        meta.extend(upd.dims.iter().map(|&d| ext(d)));
        meta.extend(contiguous(&data.dims));
        launches.push(GpuLaunch::new(kind, meta, Work::Elements(lines), vec![Slot::In(1), Slot::In(2), Slot::Out(0)]));
    }
    Ok(GpuNode::Launches(launches))
}

/// ScatterND on the GPU.
pub(super) fn scatter_nd(op: &ScatterNd, ctx: &GpuCtx<'_>) -> Result<GpuNode, OpError> {
    let (data, idx, upd) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    let kind = kernel(ScatterForm::Nd, op.reduction, data, idx)?;
    let k = *idx.dims.last().ok_or_else(|| OpError::eval("ScatterND indices are 0-D"))?;
    if k > data.dims.len() {
        return Err(OpError::eval(format!("ScatterND index depth {k} exceeds the data rank {}", data.dims.len())));
    }
    let mut launches = vec![copy_data(data)];
    let (m, slice) = (numel(&idx.dims[..idx.dims.len() - 1]), numel(&data.dims[k..]));
    if numel(&upd.dims) > 0 {
        let mut meta = vec![m as i64, ext(k), slice as i64];
        meta.extend(data.dims[..k].iter().map(|&d| ext(d)));
        meta.extend_from_slice(&contiguous(&data.dims)[..k]);
        let threads = if op.reduction == Reduction::None { m * slice } else { slice };
        launches.push(GpuLaunch::new(
            kind,
            meta,
            Work::Elements(threads),
            vec![Slot::In(1), Slot::In(2), Slot::Out(0)],
        ));
    }
    Ok(GpuNode::Launches(launches))
}

/// TensorScatter of `elem_bytes`-byte elements (moved as bits), with or without `write_indices`
/// (`tensor_scatter.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TensorScatterKernel {
    pub(crate) elem_bytes: u8,
    pub(crate) write_indices: bool,
}

impl GpuKernel for TensorScatterKernel {
    fn prefix(&self) -> &'static str {
        "tensor_scatter"
    }

    fn source(&self) -> String {
        let (param, index) = if self.write_indices {
            (", const long long* __restrict__ write_indices", "write_indices[row / pre]")
        } else {
            ("", "0")
        };
        render(
            include_str!("tensor_scatter.cu"),
            &[("T", bits_type(self.elem_bytes)), ("WI_PARAM", param), ("WRITE_INDEX", index)],
        )
    }
}
