//! ConvTranspose, the adjoint of Conv: each input element spreads over the output through the
//! kernel. On the host, per image and group one product `Wᵀ X` (`matrixmultiply`) gives a patch
//! matrix that [`col2im`] (the adjoint of [`im2col`](super::im2col())) adds into the output; on the
//! GPU a direct kernel gathers, for each output element, the input positions and kernel taps that
//! reach it.
//!
//! The geometry is Conv's [`Axis`] seen from the other side: the transposed convolution's output is
//! the forward convolution's input ([`Axis::input`]) and its input the forward output
//! ([`Axis::output`]), so tap `k` of input position `o` lands on output coordinate
//! [`Axis::coord`]`(o, k)`.

use saggar_shape::{DType, Dim};

use super::gpu::{ConvTransposeKernel, conv_launch};
use super::{
    AutoPad, Axis, COL_SCRATCH, MAX_COL_ELEMENTS, Window, advance, bounded_ints, check_bias, check_kernel, check_len,
    check_out_dims, fixed, image_dims, kernel_extents, parse_group,
};
use crate::ops::gpu::{GpuCtx, GpuNode};
use crate::ops::linalg::Gemm;
use crate::ops::shape_util::strides;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType, unknown_dim};
use crate::tensor::TensorMut;

/// `ConvTranspose`.
#[derive(Debug)]
struct ConvTranspose {
    window: Window,
    group: usize,
    /// Extra output elements at the end of each spatial axis (empty: none).
    output_padding: Vec<usize>,
    /// The spatial output extents (empty: from the pads).
    output_shape: Vec<usize>,
    /// Opset 1 splits an odd total padding the other way round (its extra element at the end
    /// unless SAME_UPPER; from opset 11 at the end only for SAME_UPPER).
    legacy_split: bool,
}

/// Builds ConvTranspose; `legacy_split` before opset 11.
pub(super) fn build_conv_transpose(ctx: &mut NodeCtx<'_>, legacy_split: bool) -> Result<Box<dyn Op>, OpError> {
    let window = Window::parse(ctx, false)?;
    let group = parse_group(ctx)?;
    let output_padding = bounded_ints(ctx, "output_padding", 0)?;
    let output_shape = bounded_ints(ctx, "output_shape", 1)?;
    Ok(Box::new(ConvTranspose { window, group, output_padding, output_shape, legacy_split }))
}

impl ConvTranspose {
    /// Checks that the per-axis attributes have `rank` entries each (when given).
    fn check_rank(&self, rank: usize) -> Result<(), OpError> {
        self.window.check_rank(rank)?;
        for (name, v) in [("output_padding", &self.output_padding), ("output_shape", &self.output_shape)] {
            if !v.is_empty() && v.len() != rank {
                return Err(OpError::infer(format!("`{name}` {v:?} has {} entries for {rank} spatial axes", v.len())));
            }
        }
        Ok(())
    }

    /// The geometry of spatial axis `i`: input extent `input`, kernel extent `kernel` (at least 1).
    fn axis(&self, i: usize, input: usize, kernel: usize) -> Result<Axis, OpError> {
        let w = &self.window;
        let stride = w.strides.get(i).copied().unwrap_or(1);
        let dilation = w.dilations.get(i).copied().unwrap_or(1);
        let extra = self.output_padding.get(i).copied().unwrap_or(0);
        if extra >= stride.max(dilation) {
            return Err(OpError::attribute(
                "output_padding",
                format!("{:?}: each value must be less than its axis's stride or dilation", self.output_padding),
            ));
        }
        // The extent of every output a tap reaches, before padding: stride * (in - 1) + extra + span.
        let (input_i, stride_i) = (input as i128, stride as i128);
        let full = stride_i * (input_i - 1) + extra as i128 + ((kernel as i128 - 1) * dilation as i128 + 1);
        let explicit = |at: usize| w.pads.get(at).copied().unwrap_or(0);
        let rank = w.pads.len() / 2;
        let (output, pad_begin, pad_end) = match (self.output_shape.get(i), w.auto_pad) {
            (Some(&o), _) => self.split(o as i128, full),
            (None, AutoPad::SameUpper | AutoPad::SameLower) => self.split(input_i * stride_i, full),
            (None, AutoPad::Valid) => (full, 0, 0),
            (None, AutoPad::NotSet) => {
                let (pb, pe) = (explicit(i), explicit(rank + i));
                (full - pb as i128 - pe as i128, pb, pe)
            }
        };
        if output < 1 {
            return Err(OpError::infer(format!(
                "ConvTranspose spatial axis {i}: pads {:?} leave no output (input {input}, kernel {kernel}, stride \
                 {stride}, dilation {dilation}: extent {output})",
                w.pads
            )));
        }
        let output = usize::try_from(output)
            .ok()
            .filter(|&o| o <= 1 << 40)
            .ok_or_else(|| OpError::infer(format!("ConvTranspose spatial axis {i}: extent {output} is too large")))?;
        Ok(Axis { input: output, output: input, kernel, stride, dilation, pad_begin, pad_end })
    }

    /// `(output extent, pad_begin, pad_end)` for a chosen output extent: the total padding
    /// `full - output` split as the spec says; an output longer than every tap reaches is not
    /// padded (its extra elements at the end hold only the bias).
    fn split(&self, output: i128, full: i128) -> (i128, usize, usize) {
        let total = usize::try_from(full - output).unwrap_or(0);
        let odd_at_end = (self.window.auto_pad == AutoPad::SameUpper) != self.legacy_split;
        let (small, large) = (total / 2, total - total / 2);
        if odd_at_end { (output, small, large) } else { (output, large, small) }
    }

    /// The concrete geometry of every spatial axis.
    fn resolve(&self, input: &[usize], kernel: &[usize]) -> Result<Vec<Axis>, OpError> {
        self.check_rank(input.len()).map_err(|e| OpError::eval(e.to_string()))?;
        input.iter().zip(kernel).enumerate().map(|(i, (&d, &k))| self.axis(i, d, k)).collect()
    }

    /// The concrete operands' geometry: `(N, C, M, axes)`.
    fn operands(&self, xd: &[usize], wd: &[usize]) -> Result<(usize, usize, usize, Vec<Axis>), OpError> {
        if xd.len() < 3 || wd.len() != xd.len() {
            return Err(OpError::eval(format!("ConvTranspose: input {xd:?} and weights {wd:?} ranks differ")));
        }
        let (n, c, g) = (xd[0], xd[1], self.group);
        if wd[0] != c || c % g != 0 {
            return Err(OpError::eval(format!("ConvTranspose: input {xd:?}, weights {wd:?} and {g} groups disagree")));
        }
        check_kernel("ConvTranspose", &self.window, &wd[2..])?;
        let m = wd[1].checked_mul(g).ok_or_else(|| OpError::eval("ConvTranspose: too many output channels"))?;
        Ok((n, c, m, self.resolve(&xd[2..], &wd[2..])?))
    }
}

impl Op for ConvTranspose {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = image_dims("ConvTranspose", inputs.req(0)?.ty)?;
        let w = inputs.req(1)?.ty;
        if w.dtype != DType::F32 || w.rank() != x.len() {
            return Err(OpError::infer(format!("ConvTranspose weights must be f32 of the input's rank, found {w}")));
        }
        let g = self.group;
        if let (Some(c), Some(wc)) = (fixed(&x[1]), fixed(&w.dims[0]))
            && (c != wc || c % g != 0)
        {
            return Err(OpError::infer(format!("ConvTranspose: {c} input channels, weights {w}, {g} groups disagree")));
        }
        self.check_rank(x.len() - 2)?;
        let kernel = kernel_extents("ConvTranspose", &self.window, w)?;
        let m = match fixed(&w.dims[1]) {
            Some(mg) => Dim::Fixed(mg.checked_mul(g).ok_or_else(|| OpError::infer("too many output channels"))? as u64),
            None if g == 1 => w.dims[1].clone(),
            None => unknown_dim(),
        };
        check_bias("ConvTranspose", inputs.get(2), &m)?;
        let mut dims = vec![x[0].clone(), m];
        for (i, (d, k)) in x[2..].iter().zip(&kernel).enumerate() {
            dims.push(match (fixed(d), k) {
                (Some(d), Some(k)) => Dim::Fixed(self.axis(i, d, *k)?.input as u64),
                _ => self.output_shape.get(i).map_or_else(unknown_dim, |&o| Dim::Fixed(o as u64)),
            });
        }
        Ok(vec![ValueType::new(DType::F32, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (xv, wv) = (inputs.req(0)?, inputs.req(1)?);
        check_len("ConvTranspose", xv)?;
        check_len("ConvTranspose", wv)?;
        let (n, c, m, axes) = self.operands(xv.dims, wv.dims)?;
        check_out_dims("ConvTranspose", outputs[0].dims, [n, m].into_iter().chain(axes.iter().map(|a| a.input)))?;
        let bias = match inputs.get(2) {
            Some(b) if b.len() == m => Some(b.f32s()?),
            Some(_) => return Err(OpError::eval(format!("ConvTranspose bias must hold {m} values"))),
            None => None,
        };
        let (x, w) = (xv.f32s()?, wv.f32s()?);
        let y = outputs[0].f32s()?;
        let g = self.group;
        let (cg, mg) = (c / g, m / g);
        let x_plane: usize = axes.iter().map(|a| a.output).product();
        let y_plane: usize = axes.iter().map(|a| a.input).product();
        let rows = mg * axes.iter().map(|a| a.kernel).product::<usize>();
        let col_len = rows.checked_mul(x_plane).filter(|&l| l <= MAX_COL_ELEMENTS).ok_or_else(|| {
            OpError::eval(format!(
                "ConvTranspose: the patch matrix ({rows} x {x_plane}) exceeds {MAX_COL_ELEMENTS} elements"
            ))
        })?;
        for (plane, channel) in y.chunks_exact_mut(y_plane).zip((0..m).cycle()) {
            plane.fill(bias.map_or(0.0, |b| b[channel]));
        }
        if col_len == 0 {
            return Ok(());
        }
        COL_SCRATCH.with_borrow_mut(|col| -> Result<(), OpError> {
            if col.len() < col_len {
                col.resize(col_len, 0.0);
            }
            let col = &mut col[..col_len];
            for image in 0..n {
                for group in 0..g {
                    // col[r][o] = sum over the group's input channels c of W[c][r] * X[c][o], where
                    // r runs over (output channel, kernel tap).
                    let gemm = Gemm {
                        m: rows,
                        k: cg,
                        n: x_plane,
                        a: (w, group * cg * rows, 1, rows),
                        b: (x, (image * c + group * cg) * x_plane, x_plane, 1),
                    };
                    gemm.run(1.0, 0.0, col, 0, x_plane)?;
                    let start = (image * m + group * mg) * y_plane;
                    col2im(col, mg, &axes, &mut y[start..start + mg * y_plane]);
                }
            }
            Ok(())
        })
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let (n, c, m, axes) = self.operands(&ctx.input(0)?.dims, &ctx.input(1)?.dims)?;
            conv_launch(ctx, |bias| ConvTransposeKernel { bias }, [n, c, m, self.group], &axes)
        })())
    }
}

/// Adds a patch matrix onto `channels` planes, the adjoint of [`im2col`](super::im2col()): row
/// (channel, kernel tap), column `o` (a position of the forward convolution's output) adds to the
/// element that tap of `o` reads; taps in the padding add nothing.
pub(crate) fn col2im(col: &[f32], channels: usize, axes: &[Axis], y: &mut [f32]) {
    let rank = axes.len();
    let y_dims: Vec<usize> = axes.iter().map(|a| a.input).collect();
    let y_strides = strides(&y_dims);
    let y_plane: usize = y_dims.iter().product();
    let plane: usize = axes.iter().map(|a| a.output).product();
    let (mut tap, mut pos) = (vec![0usize; rank], vec![0usize; rank]);
    let mut rows = col.chunks_exact(plane.max(1));
    for yc in y.chunks_exact_mut(y_plane.max(1)).take(channels) {
        tap.fill(0);
        loop {
            let Some(row) = rows.next() else { return };
            pos.fill(0);
            for &v in row {
                let mut at = Some(0usize);
                for (a, axis) in axes.iter().enumerate() {
                    let i = axis.coord(pos[a], tap[a]);
                    at = at.filter(|_| i >= 0 && i < axis.input as isize).map(|at| at + i as usize * y_strides[a]);
                }
                if let Some(at) = at {
                    yc[at] += v;
                }
                advance(&mut pos, |a| axes[a].output);
            }
            if !advance(&mut tap, |a| axes[a].kernel) {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::conv::tests::pseudo_random;
    use crate::ops::shape_util::strides;
    use crate::ops::testing::{f32s, ints, iota, run_op, values};
    use crate::ops::{Attribute, Attributes, OpError};

    fn attrs(list: &[(&str, Attribute)]) -> Attributes {
        Attributes(list.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
    }

    fn string(s: &str) -> Attribute {
        Attribute::String(s.as_bytes().to_vec())
    }

    /// The ONNX examples' input: a 3x3 ramp, and two output channels of ones.
    fn ramp_and_ones() -> (crate::tensor::Tensor, crate::tensor::Tensor) {
        (iota(&[1, 1, 3, 3]), f32s(&[1, 2, 3, 3], &[1.0; 18]))
    }

    #[test]
    fn the_spec_examples_by_hand() {
        let (x, w) = ramp_and_ones();
        let out = run_op("ConvTranspose", 11, &Attributes::default(), &[Some(&x), Some(&w)]).unwrap();
        assert_eq!(out[0].dims(), &[1, 2, 5, 5]);
        #[rustfmt::skip]
        let plane = [
            0.0, 1.0, 3.0, 3.0, 2.0, 3.0, 8.0, 15.0, 12.0, 7.0, 9.0, 21.0, 36.0, 27.0, 15.0,
            9.0, 20.0, 33.0, 24.0, 13.0, 6.0, 13.0, 21.0, 15.0, 8.0,
        ];
        assert_eq!(&values(&out[0])[..25], &plane);
        assert_eq!(&values(&out[0])[25..], &plane);
        // Strides 3, 2 with pads 1, 2 on each side: a 7x3 crop of the 9x7 result.
        let pads = attrs(&[("strides", ints(&[3, 2])), ("pads", ints(&[1, 2, 1, 2]))]);
        let out = run_op("ConvTranspose", 11, &pads, &[Some(&x), Some(&w)]).unwrap();
        assert_eq!(out[0].dims(), &[1, 2, 7, 3]);
        let rows = [[1.0, 1.0, 3.0], [1.0, 1.0, 3.0], [7.0, 4.0, 9.0], [7.0, 4.0, 9.0]];
        assert_eq!(&values(&out[0])[..12], rows.concat().as_slice());
        // An output_padding of 1, 1 and an output_shape of 10x8 both add a last row and column of
        // zeros to the 9x7 result.
        let padded = attrs(&[("strides", ints(&[3, 2])), ("output_padding", ints(&[1, 1]))]);
        let shaped = attrs(&[("strides", ints(&[3, 2])), ("output_shape", ints(&[10, 8]))]);
        let a = run_op("ConvTranspose", 11, &padded, &[Some(&x), Some(&w)]).unwrap();
        let b = run_op("ConvTranspose", 11, &shaped, &[Some(&x), Some(&w)]).unwrap();
        assert_eq!(a[0].dims(), &[1, 2, 10, 8]);
        assert_eq!(values(&a[0]), values(&b[0]));
        assert_eq!(&values(&a[0])[..8], &[0.0, 0.0, 1.0, 1.0, 3.0, 2.0, 2.0, 0.0]);
        assert!(values(&a[0])[72..80].iter().all(|&v| v == 0.0), "the last row is padding");
    }

    #[test]
    fn auto_pad_splits_the_odd_padding_by_opset() {
        // 1-D, input 1 2 3, kernel 1 10 100, stride 2: every tap reaches 7 outputs
        // 1 10 102 20 203 30 300; SAME keeps 3 * 2 = 6 of them.
        let x = f32s(&[1, 1, 3], &[1.0, 2.0, 3.0]);
        let w = f32s(&[1, 1, 3], &[1.0, 10.0, 100.0]);
        let b = f32s(&[1], &[0.5]);
        let run = |opset: u32, mode: &str| {
            let a = attrs(&[("auto_pad", string(mode)), ("strides", ints(&[2]))]);
            values(&run_op("ConvTranspose", opset, &a, &[Some(&x), Some(&w)]).unwrap()[0]).to_vec()
        };
        let head = vec![1.0, 10.0, 102.0, 20.0, 203.0, 30.0];
        let tail = vec![10.0, 102.0, 20.0, 203.0, 30.0, 300.0];
        assert_eq!(run(11, "SAME_UPPER"), head);
        assert_eq!(run(11, "SAME_LOWER"), tail);
        assert_eq!(run(9, "SAME_UPPER"), tail, "opset 1 puts the odd pad at the start for SAME_UPPER");
        assert_eq!(run(9, "SAME_LOWER"), head);
        assert_eq!(run(11, "VALID"), vec![1.0, 10.0, 102.0, 20.0, 203.0, 30.0, 300.0]);
        // An explicit output_shape splits its padding (7 - 4) the same way, NOTSET as SAME_LOWER;
        // the bias reaches every output.
        let a = attrs(&[("output_shape", ints(&[4])), ("strides", ints(&[2]))]);
        let out = run_op("ConvTranspose", 11, &a, &[Some(&x), Some(&w), Some(&b)]).unwrap();
        assert_eq!(values(&out[0]), &[102.5, 20.5, 203.5, 30.5]);
    }

    /// Scatters every input element through every tap: the oracle for the patch-matrix path.
    #[allow(clippy::too_many_arguments)]
    fn scatter(
        x: &[f32],
        xd: &[usize],
        w: &[f32],
        wd: &[usize],
        group: usize,
        stride: &[usize],
        dil: &[usize],
        pad: &[usize],
        yd: &[usize],
    ) -> Vec<f32> {
        let s = xd.len() - 2;
        let (c, mg) = (xd[1], wd[1]);
        let (cg, m) = (c / group, mg * group);
        let (xs, ys, ws) = (strides(xd), strides(yd), strides(wd));
        let mut y = vec![0.0; yd.iter().product()];
        for (xi, &xv) in x.iter().enumerate() {
            let at = |d: usize| xi / xs[d] % xd[d];
            let (n, ci) = (at(0), at(1));
            for t in 0..wd[2..].iter().product::<usize>() {
                let mut off = 0isize;
                let mut w_off = 0;
                let mut rem = t;
                for d in (0..s).rev() {
                    let k = rem % wd[2 + d];
                    rem /= wd[2 + d];
                    let coord = (at(2 + d) * stride[d] + k * dil[d]) as isize - pad[d] as isize;
                    off = if (0..yd[2 + d] as isize).contains(&coord) && off >= 0 {
                        off + coord * ys[2 + d] as isize
                    } else {
                        -1
                    };
                    w_off += k * ws[2 + d];
                }
                if off < 0 {
                    continue;
                }
                for mm in 0..mg {
                    let oc = ci / cg * mg + mm;
                    y[n * ys[0] + oc * ys[1] + off as usize] += xv * w[ci * ws[0] + mm * ws[1] + w_off];
                }
            }
        }
        assert_eq!(y.len(), xd[0] * m * yd[2..].iter().product::<usize>());
        y
    }

    #[test]
    fn grouped_dilated_strided_1d_2d_3d_match_the_scatter() {
        // (x dims, weight dims, group, strides, dilations, pads, output_padding)
        type Case = (Vec<usize>, Vec<usize>, usize, Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>);
        let cases: Vec<Case> = vec![
            (vec![2, 4, 5], vec![4, 3, 3], 2, vec![2], vec![1], vec![1, 0], vec![1]),
            (vec![2, 4, 3, 4], vec![4, 1, 2, 3], 2, vec![2, 1], vec![2, 1], vec![0, 1, 1, 0], vec![1, 0]),
            (vec![1, 3, 4, 3], vec![3, 2, 3, 3], 3, vec![1, 3], vec![1, 1], vec![1, 1, 1, 1], vec![0, 2]),
            (vec![1, 2, 2, 3, 2], vec![2, 2, 2, 2, 3], 1, vec![2, 1, 2], vec![1, 2, 1], vec![0; 6], vec![1, 0, 0]),
        ];
        for (i, (xd, wd, group, stride, dil, pads, op)) in cases.into_iter().enumerate() {
            let s = xd.len() - 2;
            let x = pseudo_random(xd.iter().product(), 1 + i as u32);
            let w = pseudo_random(wd.iter().product(), 50 + i as u32);
            let mut yd = vec![xd[0], wd[1] * group];
            for d in 0..s {
                let span = (wd[2 + d] - 1) * dil[d] + 1;
                yd.push(stride[d] * (xd[2 + d] - 1) + op[d] + span - pads[d] - pads[s + d]);
            }
            let want = scatter(&x, &xd, &w, &wd, group, &stride, &dil, &pads[..s], &yd);
            let to_i64 = |v: &[usize]| ints(&v.iter().map(|&v| v as i64).collect::<Vec<_>>());
            let a = attrs(&[
                ("group", Attribute::Int(group as i64)),
                ("strides", to_i64(&stride)),
                ("dilations", to_i64(&dil)),
                ("pads", to_i64(&pads)),
                ("output_padding", to_i64(&op)),
                ("kernel_shape", to_i64(&wd[2..])),
            ]);
            let out = run_op("ConvTranspose", 11, &a, &[Some(&f32s(&xd, &x)), Some(&f32s(&wd, &w))]).unwrap();
            assert_eq!(out[0].dims(), yd.as_slice(), "case {i}");
            for (got, want) in values(&out[0]).iter().zip(&want) {
                assert!((got - want).abs() < 1e-5, "case {i}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn bad_attributes_and_operands_are_typed_errors() {
        let (x, w) = ramp_and_ones();
        let run = |list: &[(&str, Attribute)]| run_op("ConvTranspose", 11, &attrs(list), &[Some(&x), Some(&w)]);
        assert!(matches!(run(&[("strides", ints(&[0, 1]))]), Err(OpError::Attribute { .. })));
        assert!(matches!(run(&[("strides", ints(&[-2, 1]))]), Err(OpError::Attribute { .. })));
        assert!(matches!(run(&[("dilations", ints(&[1, 0]))]), Err(OpError::Attribute { .. })));
        assert!(matches!(run(&[("pads", ints(&[-1, 0, 0, 0]))]), Err(OpError::Attribute { .. })));
        assert!(matches!(run(&[("output_shape", ints(&[0, 5]))]), Err(OpError::Attribute { .. })));
        // output_padding must stay below the stride (or dilation).
        let e = run(&[("strides", ints(&[2, 2])), ("output_padding", ints(&[2, 0]))]).unwrap_err();
        assert!(matches!(&e, OpError::Attribute { .. }) && e.to_string().contains("[2, 0]"), "{e}");
        // Pads that leave nothing: the 5-wide result less 3 + 3.
        let e = run(&[("pads", ints(&[3, 0, 3, 0]))]).unwrap_err();
        assert!(matches!(&e, OpError::Infer(_)) && e.to_string().contains("[3, 0, 3, 0]"), "{e}");
        assert!(matches!(run(&[("output_shape", ints(&[5]))]), Err(OpError::Infer(_))));
        assert!(matches!(run(&[("kernel_shape", ints(&[2, 2]))]), Err(OpError::Infer(_))));
        assert!(matches!(run(&[("group", Attribute::Int(2))]), Err(OpError::Infer(_))));
        let empty_kernel = f32s(&[1, 2, 0, 3], &[]);
        let res = run_op("ConvTranspose", 11, &Attributes::default(), &[Some(&x), Some(&empty_kernel)]);
        assert!(matches!(res, Err(OpError::Infer(_))));
        let short_bias = f32s(&[1], &[1.0]);
        let res = run_op("ConvTranspose", 11, &Attributes::default(), &[Some(&x), Some(&w), Some(&short_bias)]);
        assert!(matches!(res, Err(OpError::Infer(_))));
    }
}
