//! `Im2col`: the patch matrix of a convolution, an internal op the conv-to-GEMM rewrite
//! ([`crate::graph::passes::conv_gemm`]) places before the BLAS product; never read from model files.
//!
//! Input `x` is `[N, C, spatial...]`; the output is `[N, C * taps, plane]`: per image one row per
//! (channel, kernel tap) and one column per output position, taps in the padding reading 0. The
//! geometry is resolved for one input shape (the rewrite runs on specialised graphs).

use saggar_shape::DType;

use crate::ops::conv::gpu::{Im2colKernel, axes_meta, fits_i32};
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
    /// Whether the GPU kernel's indices and coordinates for `n` images of `c` channels fit 32-bit
    /// signed integers ([`fits_i32`], the patch matrix included).
    pub(crate) fn narrow_indices(&self, n: usize, c: usize) -> bool {
        fits_i32(&self.axes, (n as u64).checked_mul(c as u64), true)
    }

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
        use crate::ops::gpu::{GpuLaunch, GpuNode, MAX_SPATIAL, Slot, Work, ext, numel};
        Some((|| {
            let x = &ctx.input(0)?.dims;
            self.output_dims(x).ok_or_else(|| OpError::eval("Im2col: input does not fit the axes"))?;
            if self.axes.len() > MAX_SPATIAL {
                return Err(OpError::eval(format!("Im2col takes at most {MAX_SPATIAL} spatial axes on GPU")));
            }
            // One axis runs as two, the first of extent 1.
            let axes = Axis::at_least_two(&self.axes);
            let mut meta = vec![ext(axes.len()), ext(x[0]), ext(x[1])];
            meta.extend(axes_meta(&axes));
            meta.push(i64::from(self.narrow_indices(x[0], x[1])));
            let kernel = Im2colKernel { bytes: ctx.input(0)?.dtype.size_bytes() as u8, planar: axes.len() == 2 };
            let plane: Vec<usize> = axes.iter().map(|a| a.output).collect();
            let work = Work::Elements(numel(&[&x[..2], &plane[..]].concat()));
            Ok(GpuNode::Launches(vec![GpuLaunch::new(kernel, meta, work, vec![Slot::In(0), Slot::Out(0)])]))
        })())
    }
}

#[cfg(test)]
mod tests {
    use saggar_shape::DType;

    use super::*;
    use crate::ops::gpu::{GpuCtx, GpuNode, Operand, Work};

    /// An axis of `input` elements read by `kernel` taps with `stride` and padding `pad` at each end.
    fn axis(input: usize, kernel: usize, stride: usize, pad: usize) -> Axis {
        let output = (input + 2 * pad - kernel) / stride + 1;
        Axis { input, kernel, stride, dilation: 1, pad_begin: pad, pad_end: pad, output }
    }

    /// The kernel, meta table and work of the GPU launch for input `x` of f16.
    fn launch(axes: Vec<Axis>, x: &[usize]) -> (Im2colKernel, Vec<i64>, Work) {
        let inputs = [Some(Operand { dtype: DType::F16, dims: x.to_vec() })];
        let ctx = GpuCtx { inputs: &inputs, outputs: &[], infer: &InferInputs::new(&[]) };
        let Some(Ok(GpuNode::Launches(launches))) = Im2col { axes }.gpu(&ctx) else { panic!("Im2col lowers") };
        let l = &launches[0];
        (*l.kernel_as::<Im2colKernel>().unwrap(), l.meta.clone(), l.work)
    }

    #[test]
    fn one_and_two_axes_take_the_planar_kernel_and_32_bit_indices_where_they_fit() {
        let (kernel, meta, work) = launch(vec![axis(7, 3, 2, 1), axis(9, 3, 1, 1)], &[2, 5, 7, 9]);
        assert_eq!(kernel, Im2colKernel { bytes: 2, planar: true });
        assert_eq!(meta, [2, 2, 5, 7, 9, 4, 9, 3, 3, 2, 1, 1, 1, 1, 1, 1], "s, N, C, the axes' fields, narrow");
        assert_eq!(work, Work::Elements(2 * 5 * 4 * 9), "a thread per image, channel and output position");
        // One axis runs as two, the first of extent 1.
        let (kernel, meta, work) = launch(vec![axis(11, 3, 2, 1)], &[2, 3, 11]);
        assert_eq!(kernel, Im2colKernel { bytes: 2, planar: true });
        assert_eq!(meta, [2, 2, 3, 1, 11, 1, 6, 1, 3, 1, 2, 0, 1, 1, 1, 1]);
        assert_eq!(work, Work::Elements(2 * 3 * 6));
        let (kernel, meta, _) = launch(vec![axis(4, 2, 1, 0); 3], &[1, 2, 4, 4, 4]);
        assert_eq!(kernel, Im2colKernel { bytes: 2, planar: false });
        assert_eq!((meta[0], meta.len(), meta[21]), (3, 22, 1));
        // 50000 x 50000 positions: the patch matrix has more elements than 32-bit indices reach; the
        // same kernel takes its 64-bit body.
        let (kernel, meta, _) = launch(vec![axis(50_000, 1, 1, 0), axis(50_000, 1, 1, 0)], &[1, 1, 50_000, 50_000]);
        assert_eq!((kernel, meta[15]), (Im2colKernel { bytes: 2, planar: true }, 0));
    }

    #[test]
    fn indices_are_narrow_up_to_the_largest_32_bit_value_of_every_count_and_coordinate() {
        let max = i32::MAX as usize;
        let line = |input: usize| Im2col { axes: vec![axis(input, 1, 1, 0)] };
        assert!(line(max).narrow_indices(1, 1));
        assert!(!line(max + 1).narrow_indices(1, 1), "the input's extent");
        assert!(!line(max / 2 + 1).narrow_indices(2, 1), "the patch matrix of two images");
        assert!(!line(max / 3 + 1).narrow_indices(1, 3), "three channels");
        // Taps multiply the patch matrix only.
        let taps = Im2col { axes: vec![Axis { kernel: 3, pad_begin: 1, pad_end: 1, ..axis(max / 3, 1, 1, 0) }] };
        assert!(taps.narrow_indices(1, 1));
        let taps = Im2col { axes: vec![Axis { kernel: 3, pad_begin: 1, pad_end: 1, ..axis(max / 3 + 1, 1, 1, 0) }] };
        assert!(!taps.narrow_indices(1, 1));
        // The farthest tap's coordinate, even where every count fits.
        let far = |output: usize| Axis { input: 1 << 30, kernel: 1, stride: 1 << 20, output, ..axis(1, 1, 1, 0) };
        assert!(Im2col { axes: vec![far(1 << 11)] }.narrow_indices(1, 1));
        assert!(!Im2col { axes: vec![far((1 << 11) + 1)] }.narrow_indices(1, 1));
    }
}
