//! Compress: the slices of the input along `axis` (or the elements of the flattened input, without
//! an axis) whose entry in the rank-1 bool `condition` is true, in order. Slices past the
//! condition's length are dropped, and so are condition entries past the axis's length. Any element
//! type (moved as bits). Negative axes from opset 11.

use saggar_shape::{DType, Dim};

use super::gpu::CompressKernel;
use super::{bounded, bounded_type, copy_slices, count_type, fixed, fixed_numel, gpu_of_standard};
use crate::ops::elementwise::require_dtype;
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, ext};
use crate::ops::shape_util::normalize_axis;
use crate::ops::{Bounded, EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType, unknown_dim};
use crate::tensor::{SUPPORTED_DTYPES, TensorMut, TensorView};

/// `Compress`.
#[derive(Debug, Clone)]
struct Compress {
    axis: Option<i64>,
}

/// `Compress.bounded`: the output with `min(len(condition), extent)` slices along the axis (the
/// selected first, zeros after), then the count.
#[derive(Debug)]
struct CompressBounded(Compress);

pub(super) fn build(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let axis = ctx.int("axis")?;
    if let Some(a) = axis.filter(|&a| a < 0 && ctx.opset() < 11) {
        return Err(OpError::attribute("axis", format!("must not be negative before opset 11, found {a}")));
    }
    Ok(Box::new(Compress { axis }))
}

/// What inference knows of one Compress node: the output's dims with the compressed axis (at
/// `axis_at`) still to fill, and how many condition entries are read (`None`: unknown).
struct Layout {
    dims: Vec<Dim>,
    axis_at: usize,
    read: Option<usize>,
}

impl Compress {
    fn layout(&self, inputs: &InferInputs<'_>) -> Result<Layout, OpError> {
        let x = inputs.req(0)?.ty;
        let cond = inputs.req(1)?.ty;
        require_dtype("Compress", x.dtype, &SUPPORTED_DTYPES)?;
        require_dtype("Compress's condition", cond.dtype, &[DType::Bool])?;
        if cond.rank() != 1 {
            return Err(OpError::infer(format!("Compress's condition must have rank 1, found {cond}")));
        }
        let (dims, axis_at, extent) = match self.axis {
            Some(a) => {
                let axis = normalize_axis(a, x.rank())?;
                (x.dims.clone(), axis, x.dims[axis].as_fixed().map(|d| d as usize))
            }
            None => (vec![unknown_dim()], 0, fixed_numel(&x.dims)),
        };
        let len = cond.dims[0].as_fixed().map(|d| d as usize);
        let read = match (len, extent) {
            (Some(l), Some(e)) => Some(l.min(e)),
            (Some(0), _) | (_, Some(0)) => Some(0),
            _ => None,
        };
        Ok(Layout { dims, axis_at, read })
    }

    /// `(outer, len, inner)` of the input around the compressed axis.
    fn split(&self, x: &TensorView<'_>) -> Result<(usize, usize, usize), OpError> {
        super::around_axis(self.axis, x.dims).map_err(|e| OpError::eval(e.to_string()))
    }

    /// The selected slices of an input of `len` slices.
    fn selected(cond: &TensorView<'_>, len: usize) -> Result<Vec<usize>, OpError> {
        let c = cond.bools()?;
        Ok(c.iter().take(len).enumerate().filter(|&(_, &b)| b != 0).map(|(i, _)| i).collect())
    }

    /// Writes the selected slices into `y` (`m` slices along the axis); returns their number.
    fn write(&self, inputs: &EvalInputs<'_>, y: &mut TensorMut<'_>, m: Option<usize>) -> Result<usize, OpError> {
        let (x, cond) = (inputs.req(0)?, inputs.req(1)?);
        let (outer, len, inner) = self.split(x)?;
        let sources = Self::selected(cond, len)?;
        let m = m.unwrap_or(sources.len());
        copy_slices(x.data, &mut y.data, (outer, len, inner), m, &sources)?;
        Ok(sources.len())
    }
}

impl Op for Compress {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let Layout { mut dims, axis_at, read } = self.layout(inputs)?;
        let cond = inputs.req(1)?;
        dims[axis_at] = match (cond.value, read) {
            (_, Some(0)) => fixed(0),
            (Some(c), Some(read)) => fixed(Self::selected(&c.view(), read)?.len()),
            _ => unknown_dim(),
        };
        Ok(vec![ValueType::new(inputs.req(0)?.ty.dtype, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let [y] = outputs else { return Err(OpError::eval("Compress has one output")) };
        let want = y.data.len();
        let x = inputs.req(0)?;
        let (outer, _, inner) = self.split(x)?;
        let count = self.write(inputs, y, None)?;
        if count * outer * inner != want {
            return Err(OpError::eval(format!("Compress selected {count} slices, the output has another shape")));
        }
        Ok(())
    }

    /// With a constant condition the output's shape is known: the bounded kernel writes it
    /// exactly (no count).
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        if ctx.infer.get(1).and_then(|c| c.value).is_none() {
            return Some(gpu_of_standard("Compress", ctx));
        }
        Some(self.launch(ctx, false))
    }

    fn bounded(&self) -> Option<Bounded> {
        let ((axis, from_end), _) = super::cut_of(self.axis);
        bounded(CompressBounded(self.clone()), "Compress.bounded", vec![Some(axis)], from_end)
    }
}

impl Compress {
    /// The kernel writing the selected slices into output 0 (of its own extent along the axis),
    /// and the count into output 1 when `count`.
    fn launch(&self, ctx: &GpuCtx<'_>, count: bool) -> Result<GpuNode, OpError> {
        let (x, cond, y) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0)?);
        let (outer, len, inner) = super::around_axis(self.axis, &x.dims)?;
        let at = self.axis.map_or(Ok(0), |a| normalize_axis(a, x.dims.len()))?;
        let m = y.dims.get(at).copied().ok_or_else(|| OpError::eval("Compress's output has too few axes"))?;
        let read = cond.dims.first().copied().unwrap_or(0).min(len);
        let kernel = CompressKernel { elem_bytes: x.dtype.size_bytes() as u8 };
        let count_slot = if count { Slot::Out(1) } else { Slot::Out(0) };
        Ok(GpuNode::Launches(vec![GpuLaunch::new(
            kernel,
            vec![ext(outer), ext(len), ext(inner), ext(m), ext(read), i64::from(count)],
            Work::Rows(1),
            vec![Slot::In(0), Slot::In(1), Slot::Out(0), count_slot],
        )]))
    }
}

impl Op for CompressBounded {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let Layout { mut dims, axis_at, read } = self.0.layout(inputs)?;
        dims[axis_at] = read.map_or_else(unknown_dim, fixed);
        Ok(vec![bounded_type("Compress", inputs.req(0)?.ty.dtype, dims)?, count_type()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let [y, count] = outputs else { return Err(OpError::eval("Compress.bounded has two outputs")) };
        let x = inputs.req(0)?;
        let (_, len, _) = self.0.split(x)?;
        let m = inputs.req(1)?.len().min(len);
        let n = self.0.write(inputs, y, Some(m))?;
        super::write_count(count, n)
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some(self.0.launch(ctx, true))
    }
}
