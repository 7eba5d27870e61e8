//! Col2Im (opset 18): the adjoint of im2col. Input `[N, C * prod(block_shape), L]` holds per image
//! one row per (channel, block tap) and one column per block position; each column element adds
//! onto the image element its tap covers, giving `[N, C, image_shape...]`. `image_shape` and
//! `block_shape` must be constants (they shape the output); `dilations`, `pads` and `strides` are
//! Conv's, and `L` must be the number of block positions they give.

use saggar_shape::{DType, Dim};

use super::gpu::{TRANSPOSE_TAP, axes_meta};
use super::transpose::col2im;
use super::{AutoPad, Axis, Window, bounded_ints, check_len, check_out_dims, fixed};
use crate::ops::data_movement::index_values;
use crate::ops::gpu::{GpuCtx, GpuKernel, GpuLaunch, GpuNode, MAX_SPATIAL, Slot, Work, ext, numel, render};
use crate::ops::{EvalInputs, InferInput, InferInputs, NodeCtx, Op, OpError, ValueType, unknown_dim};
use crate::tensor::TensorMut;

/// `Col2Im`.
#[derive(Debug)]
struct Col2Im {
    strides: Vec<usize>,
    dilations: Vec<usize>,
    pads: Vec<usize>,
}

pub(super) fn build_col2im(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let pads = bounded_ints(ctx, "pads", 0)?;
    if pads.len() % 2 != 0 {
        return Err(OpError::attribute("pads", "must hold a begin and an end value per spatial axis"));
    }
    Ok(Box::new(Col2Im {
        strides: bounded_ints(ctx, "strides", 1)?,
        dilations: bounded_ints(ctx, "dilations", 1)?,
        pads,
    }))
}

/// The values of a 1-D int64 shape input (`image_shape`, `block_shape`), each at least `min`.
fn shape_values(name: &str, values: Vec<i64>, min: i64) -> Result<Vec<usize>, OpError> {
    if values.is_empty() || values.len() > MAX_SPATIAL {
        return Err(OpError::infer(format!("Col2Im {name} must hold 1 to {MAX_SPATIAL} values, found {values:?}")));
    }
    values
        .iter()
        .map(|&v| usize::try_from(v).ok().filter(|&v| v as i64 >= min && v <= 1 << 20))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| OpError::infer(format!("Col2Im {name} values must be in {min}..=2^20, found {values:?}")))
}

/// A constant shape input at inference, or `None` when it is not constant.
fn const_shape(input: &InferInput<'_>, name: &str, min: i64) -> Result<Option<Vec<usize>>, OpError> {
    if !matches!(input.ty.dtype, DType::I64 | DType::I32) || input.ty.rank() != 1 {
        return Err(OpError::infer(format!("Col2Im {name} must be a 1-D int64 tensor, found {}", input.ty)));
    }
    input.const_i64s().map(|v| shape_values(name, v, min)).transpose()
}

impl Col2Im {
    /// The block geometry per image axis, checked against the input `[N, C * taps, L]`; returns the
    /// axes and `C`.
    fn geometry(&self, input: &[usize], image: &[usize], block: &[usize]) -> Result<(Vec<Axis>, usize), OpError> {
        if image.len() != block.len() {
            return Err(OpError::infer(format!(
                "Col2Im image_shape {image:?} and block_shape {block:?} differ in length"
            )));
        }
        let window = Window {
            kernel: block.to_vec(),
            strides: self.strides.clone(),
            dilations: self.dilations.clone(),
            pads: self.pads.clone(),
            auto_pad: AutoPad::NotSet,
            ceil_mode: false,
        };
        let axes = window.resolve(image, block).map_err(|e| OpError::infer(e.to_string()))?;
        let taps: usize = block.iter().product();
        let blocks: usize = axes.iter().map(|a| a.output).product();
        let [_, rows, l] = input[..] else {
            return Err(OpError::infer(format!("Col2Im takes a 3-D input [N, C * taps, L], found {input:?}")));
        };
        if rows % taps != 0 || l != blocks {
            return Err(OpError::infer(format!(
                "Col2Im input {input:?}: expected C * {taps} rows and {blocks} block positions for image {image:?} and \
                 block {block:?}"
            )));
        }
        Ok((axes, rows / taps))
    }

    /// The image and block shapes from the values of inputs 1 and 2, checked.
    fn shapes(values: [Vec<i64>; 2]) -> Result<[Vec<usize>; 2], OpError> {
        let [image, block] = values;
        Ok([shape_values("image_shape", image, 1)?, shape_values("block_shape", block, 1)?])
    }
}

impl Op for Col2Im {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        if x.dtype != DType::F32 || x.rank() != 3 {
            return Err(OpError::infer(format!("Col2Im takes an f32 input [N, C * taps, L], found {x}")));
        }
        let image = const_shape(inputs.req(1)?, "image_shape", 1)?;
        let block = const_shape(inputs.req(2)?, "block_shape", 1)?;
        let (Some(image), Some(block)) = (image, block) else {
            let rank = fixed(&inputs.req(1)?.ty.dims[0])
                .ok_or_else(|| OpError::infer("Col2Im needs image_shape of a known length"))?;
            let mut dims = vec![x.dims[0].clone(), unknown_dim()];
            dims.extend((0..rank).map(|_| unknown_dim()));
            return Ok(vec![ValueType::new(DType::F32, dims)]);
        };
        let channels = match x.fixed_dims() {
            Some(d) => Dim::Fixed(self.geometry(&d, &image, &block)?.1 as u64),
            None => unknown_dim(),
        };
        let mut dims = vec![x.dims[0].clone(), channels];
        dims.extend(image.iter().map(|&d| Dim::Fixed(d as u64)));
        Ok(vec![ValueType::new(DType::F32, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let xv = inputs.req(0)?;
        check_len("Col2Im", xv)?;
        let [image, block] = Col2Im::shapes([index_values(inputs.req(1)?)?, index_values(inputs.req(2)?)?])?;
        let (axes, c) = self.geometry(xv.dims, &image, &block).map_err(|e| OpError::eval(e.to_string()))?;
        let n = xv.dims[0];
        check_out_dims("Col2Im", outputs[0].dims, [n, c].into_iter().chain(image.iter().copied()))?;
        let (x, y) = (xv.f32s()?, outputs[0].f32s()?);
        y.fill(0.0);
        let (image_len, plane) = (x.len() / n.max(1), y.len() / n.max(1));
        if image_len == 0 || plane == 0 {
            return Ok(());
        }
        for (xi, yi) in x.chunks_exact(image_len).zip(y.chunks_exact_mut(plane)) {
            col2im(xi, c, &axes, yi);
        }
        Ok(())
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let (x, out) = (ctx.input(0)?, ctx.output(0)?);
            let values = |i: usize| {
                ctx.infer
                    .req(i)?
                    .const_i64s()
                    .ok_or_else(|| OpError::eval("Col2Im needs constant image and block shapes"))
            };
            let [image, block] = Col2Im::shapes([values(1)?, values(2)?])?;
            let (axes, c) = self.geometry(&x.dims, &image, &block)?;
            let mut meta = vec![ext(axes.len()), ext(x.dims[0]), ext(c)];
            meta.extend(axes_meta(&axes));
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                Col2ImKernel,
                meta,
                Work::Elements(numel(&out.dims)),
                vec![Slot::In(0), Slot::Out(0)],
            )]))
        })())
    }
}

/// Col2Im's gather of columns onto the image (`col2im.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Col2ImKernel;

impl GpuKernel for Col2ImKernel {
    fn prefix(&self) -> &'static str {
        "col2im"
    }

    fn source(&self) -> String {
        render(include_str!("col2im.cu"), &[("MAX_SPATIAL", &MAX_SPATIAL.to_string()), ("TAP", TRANSPOSE_TAP)])
    }
}

#[cfg(test)]
mod tests {
    use super::Col2ImKernel;
    use crate::ops::testing::{assert_kernels_render, f32s, ints, iota, run_op, values};
    use crate::ops::{Attribute, Attributes, OpError};
    use crate::tensor::Tensor;

    fn col2im(a: &[(&str, Attribute)], x: &Tensor, image: &[i64], block: &[i64]) -> Result<Tensor, OpError> {
        let attrs = Attributes(a.iter().map(|(k, v)| (k.to_string(), v.clone())).collect());
        let (i, b) = (Tensor::from_i64s(image.to_vec()), Tensor::from_i64s(block.to_vec()));
        Ok(run_op("Col2Im", 18, &attrs, &[Some(x), Some(&i), Some(&b)])?.remove(0))
    }

    #[test]
    fn columns_add_onto_the_image_positions_their_taps_cover() {
        // The operator documentation's example: a [1, 5] block over a 5x5 image transposes.
        let x = iota(&[1, 5, 5]);
        let y = col2im(&[], &x, &[5, 5], &[1, 5]).unwrap();
        assert_eq!(y.dims(), [1, 1, 5, 5]);
        let want: Vec<f32> = (0..25).map(|i| ((i % 5) * 5 + i / 5) as f32).collect();
        assert_eq!(values(&y), want);
        // Overlapping taps add.
        let x = f32s(&[1, 2, 3], &[1.0, 2.0, 3.0, 10.0, 20.0, 30.0]);
        assert_eq!(values(&col2im(&[], &x, &[4], &[2]).unwrap()), [1.0, 12.0, 23.0, 30.0]);
        let x = f32s(&[1, 2, 5], &[1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0]);
        let padded = col2im(&[("pads", ints(&[1, 1]))], &x, &[4], &[2]).unwrap();
        assert_eq!(values(&padded), [12.0, 23.0, 34.0, 45.0]);
        let x = f32s(&[1, 2, 2], &[1.0, 2.0, 10.0, 20.0]);
        let strided = [("strides", ints(&[2])), ("dilations", ints(&[2]))];
        assert_eq!(values(&col2im(&strided, &x, &[5], &[2]).unwrap()), [1.0, 0.0, 12.0, 0.0, 20.0]);
        // Two images of two channels: each (image, channel) on its own.
        let x = iota(&[2, 4, 3]);
        let y = col2im(&[], &x, &[4], &[2]).unwrap();
        assert_eq!(y.dims(), [2, 2, 4]);
        assert_eq!(values(&y)[4..8], [6.0, 16.0, 18.0, 11.0]);
    }

    #[test]
    fn mismatched_columns_and_shapes_are_refused() {
        let x = iota(&[1, 2, 3]);
        let err = col2im(&[], &x, &[5], &[2]).unwrap_err();
        assert!(matches!(&err, OpError::Infer(m) if m.contains("block positions")), "{err}");
        assert!(col2im(&[], &iota(&[1, 3, 3]), &[4], &[2]).is_err(), "3 rows for 2 taps");
        assert!(col2im(&[], &x, &[-4], &[2]).is_err(), "negative image extent");
        assert!(col2im(&[], &x, &[4], &[0]).is_err(), "empty block");
        assert!(col2im(&[], &x, &[4, 1], &[2]).is_err(), "lengths differ");
        assert!(col2im(&[], &x, &[1], &[2]).is_err(), "block larger than the image");
        assert!(col2im(&[("pads", ints(&[1]))], &x, &[4], &[2]).is_err(), "odd pads");
        assert!(col2im(&[("strides", ints(&[0]))], &x, &[4], &[2]).is_err(), "zero stride");
        assert_kernels_render(&[Box::new(Col2ImKernel)]);
    }
}
