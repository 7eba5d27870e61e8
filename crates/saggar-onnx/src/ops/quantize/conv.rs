//! ConvInteger and QLinearConv: Conv's geometry (the conv family's [`Window`]) over int8/uint8
//! input and weights less their zero points (the input's per tensor, the weights' per tensor or per
//! output channel), summed in 32 bits with QLinearConv's int32 bias; QLinearConv requantises the
//! sums through its scales (the weights' per tensor or per output channel).

use saggar_shape::{DType, Dim};

use super::gpu::{Epilogue, QConvKernel};
use super::{
    centred, check_8bit, check_product_inputs, multiplier, quant_range, requantize, single, step, wide_values,
    write_numbers,
};
use crate::ops::conv::gpu::axes_meta;
use crate::ops::conv::{Axis, Window, check_kernel, fixed, parse_group};
use crate::ops::elementwise::output_mismatch;
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, MAX_SPATIAL, Slot, Work, ext, numel};
use crate::ops::shape_util::strides;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType};
use crate::tensor::{TensorMut, each_number_mut};

/// ConvInteger (`qlinear` false: inputs x, w, x_zero_point, w_zero_point) or QLinearConv (inputs
/// x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B).
#[derive(Debug)]
struct QConv {
    window: Window,
    group: usize,
    qlinear: bool,
}

fn build(ctx: &mut NodeCtx<'_>, qlinear: bool) -> Result<Box<dyn Op>, OpError> {
    let window = Window::parse(ctx, false)?;
    Ok(Box::new(QConv { window, group: parse_group(ctx)?, qlinear }))
}

pub(super) fn build_conv_integer(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    build(ctx, false)
}

pub(super) fn build_qlinear_conv(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    build(ctx, true)
}

/// The concrete geometry: `[N, C, M]`, the axes and the counts of kernel taps and of a group's
/// input channels.
struct Shape {
    ncm: [usize; 3],
    axes: Vec<Axis>,
    taps: usize,
    cg: usize,
}

impl QConv {
    fn name(&self) -> &'static str {
        if self.qlinear { "QLinearConv" } else { "ConvInteger" }
    }

    /// Input slots of x, w, x_zero_point, w_zero_point.
    fn slots(&self) -> [usize; 4] {
        if self.qlinear { [0, 3, 2, 5] } else { [0, 1, 2, 3] }
    }

    fn shape(&self, x: &[usize], w: &[usize]) -> Result<Shape, OpError> {
        let op = self.name();
        if x.len() < 3 || w.len() != x.len() {
            return Err(OpError::eval(format!(
                "{op}: input {x:?} and weights {w:?} must be (N, C, spatial...) of one rank"
            )));
        }
        let (c, m, cg, g) = (x[1], w[0], w[1], self.group);
        if cg.checked_mul(g) != Some(c) || m % g != 0 {
            return Err(OpError::eval(format!("{op}: input {x:?}, weights {w:?} and {g} groups disagree")));
        }
        let kernel = &w[2..];
        check_kernel(op, &self.window, kernel)?;
        let axes = self.window.resolve(&x[2..], kernel)?;
        Ok(Shape { ncm: [x[0], c, m], axes, taps: kernel.iter().product(), cg })
    }
}

impl Op for QConv {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let op = self.name();
        let [xi, wi, xzi, wzi] = self.slots();
        let (x, w) = (inputs.req(xi)?.ty, inputs.req(wi)?.ty);
        check_8bit(op, "x", x.dtype)?;
        check_8bit(op, "w", w.dtype)?;
        if x.rank() < 3 || w.rank() != x.rank() {
            return Err(OpError::infer(format!(
                "{op}: input {x} and weights {w} must be (N, C, spatial...) of one rank"
            )));
        }
        let zero_points = [(xzi, x.dtype, "x_zero_point"), (wzi, w.dtype, "w_zero_point")];
        let out = check_product_inputs(op, inputs, zero_points, self.qlinear)?;
        if let Some(b) = inputs.get(8).filter(|_| self.qlinear)
            && (b.ty.dtype != DType::I32 || b.ty.rank() != 1)
        {
            return Err(OpError::infer(format!("{op}: the bias must be an int32 vector, found {}", b.ty)));
        }
        let mut kernel: Vec<Option<usize>> = w.dims[2..].iter().map(fixed).collect();
        for (k, &attr) in kernel.iter_mut().zip(&self.window.kernel) {
            *k = Some(attr);
        }
        let mut dims: Vec<Dim> = vec![x.dims[0].clone(), w.dims[0].clone()];
        dims.extend(self.window.infer_spatial(&x.dims[2..], &kernel)?);
        Ok(vec![ValueType::new(out, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let op = self.name();
        let [xi, wi, xzi, wzi] = self.slots();
        let (x, w) = (inputs.req(xi)?, inputs.req(wi)?);
        let sh = self.shape(x.dims, w.dims)?;
        let [n, c, m] = sh.ncm;
        let zp = |i: usize| inputs.get(i).map(|z| z.data);
        single(op, "x_zero_point", zp(xzi).map_or(1, |z| z.len()))?;
        step(op, "w_zero_point", zp(wzi).map_or(1, |z| z.len()), m)?;
        let (xv, wv) = (centred(op, x.data, zp(xzi), 1)?, centred(op, w.data, zp(wzi), sh.cg * sh.taps)?);
        let bias = match inputs.get(8).filter(|_| self.qlinear) {
            Some(b) if b.len() == m => Some(b.i32s()?),
            Some(b) => return Err(OpError::eval(format!("{op}: the bias must hold {m} values, found {}", b.len()))),
            None => None,
        };
        let plane: usize = sh.axes.iter().map(|a| a.output).product();
        if n.checked_mul(m).and_then(|v| v.checked_mul(plane)) != Some(outputs[0].data.len()) {
            return Err(OpError::eval(format!("{op}: the output does not match {:?} and {:?}", x.dims, w.dims)));
        }
        let sums = conv_sums(&xv, &wv, bias, &sh, c, plane);
        if !self.qlinear {
            outputs[0].i32s()?.copy_from_slice(&sums);
            return Ok(());
        }
        let (x_s, w_s, y_s) = (inputs.req(1)?, inputs.req(4)?, inputs.req(6)?);
        single(op, "x_scale", x_s.len())?;
        let wss = step(op, "w_scale", w_s.len(), m)?;
        single(op, "y_scale", y_s.len())?;
        let y_zp = wide_values(inputs.req(7)?.data);
        single(op, "y_zero_point", y_zp.len())?;
        let ty = x_s.dtype();
        let (x_s, w_s, y_s) = (wide_values(x_s.data)[0], wide_values(w_s.data), wide_values(y_s.data)[0]);
        let range = quant_range(outputs[0].dtype()).ok_or_else(output_mismatch)?;
        let value = |i: usize| {
            let channel = i / plane.max(1) % m;
            requantize(sums[i], multiplier(x_s, w_s[channel * wss], y_s, ty), y_zp[0], range)
        };
        each_number_mut!(&mut outputs[0].data, |o| write_numbers(o, value), _ => Err(output_mismatch()))
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some(self.launch(ctx))
    }
}

/// The 32-bit (wrapping) sums of the centred input `x` and weights `w` with the optional bias, one
/// per output element, taps in the padding adding nothing.
fn conv_sums(x: &[i32], w: &[i32], bias: Option<&[i32]>, sh: &Shape, c: usize, plane: usize) -> Vec<i32> {
    let ([n, _, m], axes, taps, cg) = (sh.ncm, &sh.axes, sh.taps, sh.cg);
    let in_dims: Vec<usize> = axes.iter().map(|a| a.input).collect();
    let kernel: Vec<usize> = axes.iter().map(|a| a.kernel).collect();
    let out_dims: Vec<usize> = axes.iter().map(|a| a.output).collect();
    let (in_strides, in_plane) = (strides(&in_dims), in_dims.iter().product::<usize>());
    let mg = m / (c / cg.max(1)).max(1);
    let mut sums = vec![0i32; n * m * plane];
    let index = |v: usize, dims: &[usize], out: &mut [usize]| {
        let mut r = v;
        for d in (0..dims.len()).rev() {
            out[d] = r % dims[d];
            r /= dims[d];
        }
    };
    let (mut pos, mut tap) = (vec![0; axes.len()], vec![0; axes.len()]);
    for (i, sum) in sums.iter_mut().enumerate() {
        let (p, mm, image) = (i % plane, i / plane % m, i / plane / m);
        index(p, &out_dims, &mut pos);
        let g = mm / mg.max(1);
        let mut acc = bias.map_or(0, |b| b[mm]);
        for ci in 0..cg {
            let (xo, wo) = ((image * c + g * cg + ci) * in_plane, (mm * cg + ci) * taps);
            for t in 0..taps {
                index(t, &kernel, &mut tap);
                let mut off = Some(0usize);
                for (d, a) in axes.iter().enumerate() {
                    let q = a.coord(pos[d], tap[d]);
                    off = off.filter(|_| q >= 0 && (q as usize) < a.input).map(|o| o + q as usize * in_strides[d]);
                }
                if let Some(o) = off {
                    acc = acc.wrapping_add(x[xo + o].wrapping_mul(w[wo + t]));
                }
            }
        }
        *sum = acc;
    }
    sums
}

impl QConv {
    fn launch(&self, ctx: &GpuCtx<'_>) -> Result<GpuNode, OpError> {
        let op = self.name();
        let [xi, wi, xzi, wzi] = self.slots();
        let (x, w) = (ctx.input(xi)?, ctx.input(wi)?);
        let sh = self.shape(&x.dims, &w.dims)?;
        if sh.axes.len() > MAX_SPATIAL {
            return Err(OpError::eval(format!("{op} takes at most {MAX_SPATIAL} spatial axes on GPU")));
        }
        let [n, c, m] = sh.ncm;
        let input = |i: usize| ctx.inputs.get(i).and_then(Option::as_ref);
        let count = |i: usize| input(i).map_or(1, |o| o.dims.iter().product::<usize>());
        single(op, "x_zero_point", count(xzi))?;
        let wzs = step(op, "w_zero_point", count(wzi), m)?;
        let mut wss = 0;
        let mut slots = vec![Slot::In(xi), Slot::In(wi)];
        slots.extend([xzi, wzi].into_iter().filter(|&i| input(i).is_some()).map(Slot::In));
        let bias = self.qlinear && input(8).is_some();
        if bias {
            if count(8) != m {
                return Err(OpError::eval(format!("{op}: the bias must hold {m} values")));
            }
            slots.push(Slot::In(8));
        }
        let epilogue = if self.qlinear {
            wss = step(op, "w_scale", count(4), m)?;
            for (slot, what) in [(1, "x_scale"), (6, "y_scale"), (7, "y_zero_point")] {
                single(op, what, count(slot))?;
            }
            slots.extend([1, 4, 6, 7].map(Slot::In));
            Epilogue::Requantize { scale: ctx.input(1)?.dtype, out: ctx.output(0)?.dtype }
        } else {
            Epilogue::Sum
        };
        slots.push(Slot::Out(0));
        let mut meta = vec![ext(sh.axes.len()), ext(n), ext(c), ext(m), ext(self.group), ext(wzs), ext(wss)];
        meta.extend(axes_meta(&sh.axes));
        let kernel = QConvKernel {
            x: x.dtype,
            w: w.dtype,
            x_zp: input(xzi).is_some(),
            w_zp: input(wzi).is_some(),
            bias,
            epilogue,
        };
        let work = Work::Elements(numel(&ctx.output(0)?.dims));
        Ok(GpuNode::Launches(vec![GpuLaunch::new(kernel, meta, work, slots)]))
    }
}
