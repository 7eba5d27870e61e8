//! `Im2col`: the patch matrix of a convolution, an internal op the conv-to-GEMM rewrite
//! ([`crate::graph::passes::conv_gemm`]) places before the BLAS product; never read from model files.
//!
//! Input `x` is `[N, C, spatial...]`; the output is `[N, C * taps, plane]`: per image one row per
//! (channel, kernel tap) and one column per output position, taps in the padding reading 0. The
//! geometry is resolved for one input shape (the rewrite runs on specialised graphs).

use saggar_shape::DType;

use crate::ops::conv::gpu::{Im2colKernel, axes_meta};
use crate::ops::conv::{Axis, check_len, im2col};
use crate::ops::{EvalInputs, InferInputs, Op, OpError, ValueType};
use crate::tensor::{DataMut, DataRef, TensorMut};

/// The patch matrix of a convolution with the resolved `axes` (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Im2col {
    /// The spatial axes, resolved for the input extents.
    pub(crate) axes: Vec<Axis>,
}

impl Im2col {
    /// `[N, C * taps, plane]` for input `[N, C, ...]`, or `None` when the input does not fit the axes.
    pub(crate) fn output_dims(&self, x: &[usize]) -> Option<[usize; 3]> {
        let spatial = x.get(2..)?;
        if spatial.len() != self.axes.len() || spatial.iter().zip(&self.axes).any(|(&d, a)| d != a.input) {
            return None;
        }
        let taps: usize = self.axes.iter().map(|a| a.kernel).product();
        let plane: usize = self.axes.iter().map(|a| a.output).product();
        Some([x[0], x[1].checked_mul(taps)?, plane])
    }
}

impl Im2col {
    /// The patch matrices (`patches` elements each) of the `n` images of `x` (`channels` channels
    /// each) into `col`.
    fn images<T: Copy + Default>(
        &self,
        x: &[T],
        [n, channels, patches]: [usize; 3],
        col: &mut [T],
    ) -> Result<(), OpError> {
        let image = x.len() / n.max(1);
        for (xi, ci) in x.chunks_exact(image.max(1)).zip(col.chunks_exact_mut(patches)) {
            im2col(xi, channels, &self.axes, ci);
        }
        Ok(())
    }
}

impl Op for Im2col {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        let dims = x.fixed_dims().and_then(|d| self.output_dims(&d));
        match (x.dtype, dims) {
            (DType::F32 | DType::F16 | DType::BF16, Some(dims)) => Ok(vec![ValueType::fixed(x.dtype, &dims)]),
            _ => Err(OpError::infer(format!("Im2col needs a float input of extents {:?}, found {x}", self.axes))),
        }
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let xv = inputs.req(0)?;
        check_len("Im2col", xv)?;
        let [n, rows, plane] = self
            .output_dims(xv.dims)
            .ok_or_else(|| OpError::eval(format!("Im2col: input {:?} does not fit {:?}", xv.dims, self.axes)))?;
        if outputs[0].dims != [n, rows, plane] {
            return Err(OpError::eval(format!(
                "Im2col: output {:?}, expected {:?}",
                outputs[0].dims,
                [n, rows, plane]
            )));
        }
        if rows == 0 || plane == 0 {
            return Ok(());
        }
        let sizes = [n, xv.dims[1], rows * plane];
        match (xv.data, &mut outputs[0].data) {
            (DataRef::F32(x), DataMut::F32(col)) => self.images(x, sizes, col),
            (DataRef::F16(x), DataMut::F16(col)) | (DataRef::BF16(x), DataMut::BF16(col)) => self.images(x, sizes, col),
            (x, col) => Err(OpError::eval(format!("Im2col: {} input, {} output", x.dtype(), col.dtype()))),
        }
    }

    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, ext, numel};
        Some((|| {
            let x = &ctx.input(0)?.dims;
            let dims = self.output_dims(x).ok_or_else(|| OpError::eval("Im2col: input does not fit the axes"))?;
            let mut meta = vec![ext(self.axes.len()), ext(x[0]), ext(x[1])];
            meta.extend(axes_meta(&self.axes));
            let bytes = ctx.input(0)?.dtype.size_bytes() as u8;
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                Im2colKernel { bytes },
                meta,
                Work::Elements(numel(&dims)),
                vec![Slot::In(0), Slot::Out(0)],
            )]))
        })())
    }
}
