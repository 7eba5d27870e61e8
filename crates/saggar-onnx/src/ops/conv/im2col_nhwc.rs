//! `Im2colNhwc`: the channels-last patch matrix of a convolution, an internal op the conv-to-GEMM
//! rewrite ([`crate::graph::passes::conv_gemm`]) places before the product in its channels-last
//! form; never read from model files.
//!
//! Input `x` is `[N, spatial..., C]` (one or two spatial axes); the output is
//! `[N, out..., taps * C]`: one row per output position, and in it per kernel tap (row-major over
//! the kernel axes) the `C` channels of the pixel the tap reads, 0 for a tap in the padding. Times
//! the weights laid out `[taps * C, M]`, a row is the position's `M` output channels, so the whole
//! batch is one tall product and the result is channels-last again.

use saggar_shape::DType;

use crate::ops::conv::Axis;
use crate::ops::conv::gpu::fits_i32;
use crate::ops::gpu::{GpuCtx, GpuKernel, GpuLaunch, GpuNode, Slot, Work, bits_type, ext, numel, render, strip_header};
use crate::ops::{EvalInputs, InferInputs, Op, OpError, ValueType};
use crate::tensor::{DataMut, DataRef, TensorMut};

/// The channels-last patch matrix of a convolution with the resolved `axes` (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Im2colNhwc {
    /// The spatial axes (one or two), resolved for the input extents.
    pub(crate) axes: Vec<Axis>,
}

impl Im2colNhwc {
    /// `[N, out..., taps * C]` for input `[N, in..., C]`, or `None` when the input does not fit.
    pub(crate) fn output_dims(&self, x: &[usize]) -> Option<Vec<usize>> {
        let (&n, rest) = x.split_first()?;
        let (&c, spatial) = rest.split_last()?;
        if !(1..=2).contains(&self.axes.len())
            || spatial.len() != self.axes.len()
            || spatial.iter().zip(&self.axes).any(|(&d, a)| d != a.input)
        {
            return None;
        }
        let taps: usize = self.axes.iter().map(|a| a.kernel).product();
        let mut dims = vec![n];
        dims.extend(self.axes.iter().map(|a| a.output));
        dims.push(c.checked_mul(taps)?);
        Some(dims)
    }

    /// The axes as two (one axis comes after a unit axis of extent 1).
    fn planar(&self) -> [Axis; 2] {
        match self.axes.as_slice() {
            [a] => [Axis::UNIT, *a],
            [a, b] => [*a, *b],
            _ => [Axis::UNIT, Axis::UNIT],
        }
    }

    /// The patch rows of `x` (`n` images of `c` channels) into `col`.
    fn rows<T: Copy + Default>(&self, x: &[T], n: usize, c: usize, col: &mut [T]) {
        let [ya, xa] = self.planar();
        let mut out = col.chunks_exact_mut(c);
        for image in 0..n {
            for oy in 0..ya.output {
                for ox in 0..xa.output {
                    for ky in 0..ya.kernel {
                        for kx in 0..xa.kernel {
                            let iy = (oy * ya.stride + ky * ya.dilation).checked_sub(ya.pad_begin);
                            let ix = (ox * xa.stride + kx * xa.dilation).checked_sub(xa.pad_begin);
                            let dst = out.next().expect("the output fits the taps");
                            match (iy.filter(|&y| y < ya.input), ix.filter(|&x| x < xa.input)) {
                                (Some(iy), Some(ix)) => {
                                    let at = ((image * ya.input + iy) * xa.input + ix) * c;
                                    dst.copy_from_slice(&x[at..at + c]);
                                }
                                _ => dst.fill(T::default()),
                            }
                        }
                    }
                }
            }
        }
    }
}

impl Op for Im2colNhwc {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        let dims = x.fixed_dims().and_then(|d| self.output_dims(&d));
        match (x.dtype, dims) {
            (DType::F32 | DType::F16 | DType::BF16, Some(dims)) => Ok(vec![ValueType::fixed(x.dtype, &dims)]),
            _ => Err(OpError::infer(format!("Im2colNhwc needs a float input of extents {:?}, found {x}", self.axes))),
        }
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let xv = inputs.req(0)?;
        super::check_len("Im2colNhwc", xv)?;
        let dims = self
            .output_dims(xv.dims)
            .ok_or_else(|| OpError::eval(format!("Im2colNhwc: input {:?} does not fit {:?}", xv.dims, self.axes)))?;
        if outputs[0].dims != dims.as_slice() {
            return Err(OpError::eval(format!("Im2colNhwc: output {:?}, expected {dims:?}", outputs[0].dims)));
        }
        let (n, c) = (xv.dims[0], xv.dims[xv.dims.len() - 1]);
        if numel(&dims) == 0 || c == 0 {
            return Ok(());
        }
        match (xv.data, &mut outputs[0].data) {
            (DataRef::F32(x), DataMut::F32(col)) => self.rows(x, n, c, col),
            (DataRef::F16(x), DataMut::F16(col)) | (DataRef::BF16(x), DataMut::BF16(col)) => self.rows(x, n, c, col),
            (x, col) => {
                return Err(OpError::eval(format!("Im2colNhwc: {} input, {} output", x.dtype(), col.dtype())));
            }
        }
        Ok(())
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let input = ctx.input(0)?;
            let x = &input.dims;
            let dims = self.output_dims(x).ok_or_else(|| OpError::eval("Im2colNhwc: input does not fit the axes"))?;
            let pixel_bytes = x[x.len() - 1] * input.dtype.size_bytes();
            let unit = [16u8, 8, 4, 2, 1].into_iter().find(|&u| pixel_bytes % usize::from(u) == 0).unwrap_or(1);
            let units = pixel_bytes / usize::from(unit);
            let axes = self.planar();
            let narrow = fits_i32(&axes, (x[0] as u64).checked_mul(units as u64), true);
            let mut meta = vec![ext(x[0]), ext(units)];
            meta.extend([axes[0].input, axes[1].input, axes[0].output, axes[1].output].map(ext));
            meta.extend([axes[0].kernel, axes[1].kernel, axes[0].stride, axes[1].stride].map(ext));
            meta.extend([axes[0].pad_begin, axes[1].pad_begin, axes[0].dilation, axes[1].dilation].map(ext));
            meta.push(i64::from(narrow));
            let row_units = (axes[0].kernel * axes[1].kernel * units) as u64;
            let work = Work::Elements(numel(&dims[..dims.len() - 1]).saturating_mul(row_units));
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                Im2colNhwcKernel { unit },
                meta,
                work,
                vec![Slot::In(0), Slot::Out(0)],
            )]))
        })())
    }
}

/// The channels-last im2col kernel, moving elements in units of `unit` bytes (16, 8, 4, 2 or 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Im2colNhwcKernel {
    pub(crate) unit: u8,
}

impl GpuKernel for Im2colNhwcKernel {
    fn prefix(&self) -> &'static str {
        "im2col_nhwc"
    }

    fn source(&self) -> String {
        let t = if self.unit == 16 { "uint4" } else { bits_type(self.unit) };
        let body = strip_header(include_str!("im2col_nhwc_body.cuh"));
        let indexed = |i: &str| render(body, &[("T", t), ("I", i)]);
        render(include_str!("im2col_nhwc.cu"), &[("T", t), ("NARROW", &indexed("int")), ("WIDE", &indexed("onnx_i64"))])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gpu::Operand;

    fn axis(input: usize, kernel: usize, stride: usize, pad: usize) -> Axis {
        let output = (input + 2 * pad - kernel) / stride + 1;
        Axis { input, kernel, stride, dilation: 1, pad_begin: pad, pad_end: pad, output }
    }

    #[test]
    fn rows_hold_each_taps_channels_and_zeros_in_the_padding() {
        // One image 2 x 2 of 2 channels, a 2 x 2 kernel, padding 1 at each end: 3 x 3 positions.
        let op = Im2colNhwc { axes: vec![axis(2, 2, 1, 1), axis(2, 2, 1, 1)] };
        let x: Vec<f32> = (1..=8).map(|v| v as f32).collect(); // pixel (y, x) holds [c0, c1]
        assert_eq!(op.output_dims(&[1, 2, 2, 2]), Some(vec![1, 3, 3, 8]));
        let mut col = vec![-1f32; 9 * 8];
        op.rows(&x, 1, 2, &mut col);
        // Position (0, 0): taps (-1,-1) (-1,0) (0,-1) pad, tap (0,0) reads pixel (0,0) = [1, 2].
        assert_eq!(&col[..8], &[0., 0., 0., 0., 0., 0., 1., 2.]);
        // Position (1, 1): taps read pixels (0,0) (0,1) (1,0) (1,1).
        assert_eq!(&col[4 * 8..5 * 8], &[1., 2., 3., 4., 5., 6., 7., 8.]);
        // A one-axis convolution: [N, L, C].
        let line = Im2colNhwc { axes: vec![axis(3, 3, 2, 1)] };
        assert_eq!(line.output_dims(&[2, 3, 4]), Some(vec![2, 2, 12]));
        assert_eq!(line.output_dims(&[2, 4, 4]), None, "the extent the axes were resolved for");
    }

    #[test]
    fn the_launch_moves_the_widest_unit_a_pixel_divides_into() {
        let op = Im2colNhwc { axes: vec![axis(5, 3, 1, 1), axis(5, 3, 1, 1)] };
        for (dtype, c, unit) in [(DType::F16, 64, 16), (DType::F16, 4, 8), (DType::F32, 3, 4), (DType::F16, 3, 2)] {
            let inputs = [Some(Operand { dtype, dims: vec![2, 5, 5, c] })];
            let ctx = GpuCtx { inputs: &inputs, outputs: &[], infer: &InferInputs::new(&[]) };
            let Some(Ok(GpuNode::Launches(launches))) = op.gpu(&ctx) else { panic!("Im2colNhwc lowers") };
            let launch = &launches[0];
            assert_eq!(launch.kernel_as::<Im2colNhwcKernel>(), Some(&Im2colNhwcKernel { unit }));
            let units = (c * dtype.size_bytes()) as i64 / i64::from(unit);
            assert_eq!(launch.meta[..2], [2, units]);
            assert_eq!(launch.work, Work::Elements(2 * 25 * 9 * units as u64), "a thread per unit of the matrix");
            assert_eq!(launch.meta[14], 1, "narrow indices");
        }
    }
}
