//! DeformConv (opset 19): a convolution whose every kernel tap reads the input at its regular
//! position plus a learned offset (`offset` `[N, offset_group * taps * r, out...]`, per tap the
//! displacement along each spatial axis in order), by N-linear interpolation with zeros outside,
//! optionally scaled by `mask` (`[N, offset_group * taps, out...]`). Input channels split into
//! `offset_group` groups sharing offsets, and into `group` convolution groups as Conv's. The
//! output extents are Conv's for the same kernel, strides, dilations and pads (the offsets' spatial
//! extents must equal them). The host and the GPU kernel (`deform_conv.cu`) sum in the same order.

use saggar_shape::{DType, Dim};

use super::gpu::axes_meta;
use super::{
    AutoPad, Axis, Window, bounded_ints, check_kernel, check_len, check_out_dims, fixed, image_dims, parse_group,
};
use crate::ops::gpu::{GpuCtx, GpuKernel, GpuLaunch, GpuNode, MAX_SPATIAL, Slot, Work, ext, numel, render};
use crate::ops::shape_util::strides;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpError, ValueType};
use crate::tensor::TensorMut;

/// Sampling coordinates are held within +-2^30 (NaN goes to the top, outside) before becoming
/// indices.
const COORD_LIMIT: f32 = 1_073_741_824.0;

/// `DeformConv`.
#[derive(Debug)]
struct DeformConv {
    window: Window,
    group: usize,
    offset_group: usize,
}

pub(super) fn build_deform_conv(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let pads = bounded_ints(ctx, "pads", 0)?;
    if pads.len() % 2 != 0 {
        return Err(OpError::attribute("pads", "must hold a begin and an end value per spatial axis"));
    }
    let window = Window {
        kernel: bounded_ints(ctx, "kernel_shape", 1)?,
        strides: bounded_ints(ctx, "strides", 1)?,
        dilations: bounded_ints(ctx, "dilations", 1)?,
        pads,
        auto_pad: AutoPad::NotSet,
        ceil_mode: false,
    };
    let offset_group = ctx.int_or("offset_group", 1)?;
    let offset_group = usize::try_from(offset_group)
        .ok()
        .filter(|&g| g >= 1)
        .ok_or_else(|| OpError::attribute("offset_group", format!("must be at least 1, found {offset_group}")))?;
    Ok(Box::new(DeformConv { window, group: parse_group(ctx)?, offset_group }))
}

/// The checked geometry of one DeformConv.
#[derive(Debug)]
struct Geometry {
    /// N, C, M (output channels).
    n: usize,
    c: usize,
    m: usize,
    axes: Vec<Axis>,
}

impl DeformConv {
    /// The geometry of inputs x, w, offset, bias and mask of these dims.
    fn geometry(&self, dims: [Option<&[usize]>; 5]) -> Result<Geometry, OpError> {
        let [Some(x), Some(w), Some(offset), bias, mask] = dims else {
            return Err(OpError::eval("DeformConv needs X, W and offset"));
        };
        let err = |what: String| Err(OpError::eval(format!("DeformConv: {what}")));
        if x.len() < 3 || w.len() != x.len() || x.len() - 2 > MAX_SPATIAL {
            return err(format!("input {x:?} and weights {w:?} must share a rank of 3 to {}", MAX_SPATIAL + 2));
        }
        let (n, c, m, r) = (x[0], x[1], w[0], x.len() - 2);
        let (g, og) = (self.group, self.offset_group);
        if w[1].checked_mul(g) != Some(c) || m % g != 0 || c % og != 0 {
            return err(format!("input {x:?}, weights {w:?}, group {g} and offset_group {og} disagree"));
        }
        check_kernel("DeformConv", &self.window, &w[2..])?;
        let axes = self.window.resolve(&x[2..], &w[2..])?;
        let taps: usize = w[2..].iter().product();
        let out = axes.iter().map(|a| a.output);
        if offset.iter().copied().ne([n, og * taps * r].into_iter().chain(out.clone())) {
            return err(format!("offset {offset:?} must be [{n}, {}, output extents]", og * taps * r));
        }
        if mask.is_some_and(|k| k.iter().copied().ne([n, og * taps].into_iter().chain(out))) {
            return err(format!("mask {mask:?} must be [{n}, {}, output extents]", og * taps));
        }
        if bias.is_some_and(|b| b != [m]) {
            return err(format!("bias {bias:?} must be [{m}]"));
        }
        Ok(Geometry { n, c, m, axes })
    }
}

/// The N-linear interpolation of the plane `xp` (extents `dims`, strides `st`) at `coords`, zero
/// outside.
fn sample(xp: &[f32], dims: &[usize], st: &[usize], coords: &[f32]) -> f32 {
    let r = dims.len();
    let (mut i0, mut frac) = ([0i64; MAX_SPATIAL], [0f32; MAX_SPATIAL]);
    for d in 0..r {
        let p = if coords[d].is_nan() { COORD_LIMIT } else { coords[d].clamp(-COORD_LIMIT, COORD_LIMIT) };
        let f = p.floor();
        (i0[d], frac[d]) = (f as i64, p - f);
    }
    let mut acc = 0.0f32;
    for combo in 0..1usize << r {
        let (mut rest, mut off, mut w, mut inside) = (combo, 0i64, 1.0f32, true);
        for d in (0..r).rev() {
            let k = rest % 2;
            rest /= 2;
            let i = i0[d] + k as i64;
            inside &= i >= 0 && i < dims[d] as i64;
            off += i * st[d] as i64;
            w *= if k == 0 { 1.0 - frac[d] } else { frac[d] };
        }
        if inside {
            acc += w * xp[off as usize];
        }
    }
    acc
}

impl Op for DeformConv {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = image_dims("DeformConv", inputs.req(0)?.ty)?;
        let (w, offset) = (inputs.req(1)?.ty, inputs.req(2)?.ty);
        let others = [Some(w), Some(offset), inputs.get(3).map(|b| b.ty), inputs.get(4).map(|k| k.ty)];
        if others.iter().flatten().any(|t| t.dtype != DType::F32) || w.rank() != x.len() || offset.rank() != x.len() {
            return Err(OpError::infer(format!(
                "DeformConv takes f32 W and offset of the input's rank, found {w} and {offset}"
            )));
        }
        let fixed_all: Option<Vec<Vec<usize>>> =
            [inputs.get(0), inputs.get(1), inputs.get(2)].iter().map(|i| i.and_then(|i| i.ty.fixed_dims())).collect();
        if let Some(d) = fixed_all {
            let extra = [inputs.get(3), inputs.get(4)].map(|i| i.and_then(|i| i.ty.fixed_dims()));
            let g = self
                .geometry([Some(&d[0]), Some(&d[1]), Some(&d[2]), extra[0].as_deref(), extra[1].as_deref()])
                .map_err(|e| OpError::infer(e.to_string()))?;
            let dims: Vec<usize> = [g.n, g.m].into_iter().chain(g.axes.iter().map(|a| a.output)).collect();
            return Ok(vec![ValueType::fixed(DType::F32, &dims)]);
        }
        if fixed(&w.dims[1]).zip(fixed(&x[1])).is_some_and(|(cg, c)| cg * self.group != c) {
            return Err(OpError::infer(format!("DeformConv: weights {w} do not fit input {}", inputs.req(0)?.ty)));
        }
        let mut dims: Vec<Dim> = vec![x[0].clone(), w.dims[0].clone()];
        dims.extend(offset.dims[2..].iter().cloned());
        Ok(vec![ValueType::new(DType::F32, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let views = [0, 1, 2, 3, 4].map(|i| inputs.get(i));
        for v in views.iter().flatten() {
            check_len("DeformConv", v)?;
        }
        let g = self.geometry(views.map(|v| v.map(|v| v.dims)))?;
        let out_dims: Vec<usize> = g.axes.iter().map(|a| a.output).collect();
        check_out_dims("DeformConv", outputs[0].dims, [g.n, g.m].into_iter().chain(out_dims.iter().copied()))?;
        let (x, w, offset) = (inputs.req(0)?.f32s()?, inputs.req(1)?.f32s()?, inputs.req(2)?.f32s()?);
        let bias = inputs.get(3).map(|b| b.f32s()).transpose()?;
        let mask = inputs.get(4).map(|k| k.f32s()).transpose()?;
        let y = outputs[0].f32s()?;
        let in_dims: Vec<usize> = g.axes.iter().map(|a| a.input).collect();
        let kernel: Vec<usize> = g.axes.iter().map(|a| a.kernel).collect();
        let (in_st, r) = (strides(&in_dims), g.axes.len());
        let (in_plane, plane, taps) = (numel(&in_dims) as usize, numel(&out_dims) as usize, numel(&kernel) as usize);
        let (cg, mg, per_og) = (g.c / self.group, g.m / self.group, g.c / self.offset_group);
        let (mut pos, mut k, mut coords) = ([0usize; MAX_SPATIAL], [0usize; MAX_SPATIAL], [0f32; MAX_SPATIAL]);
        for (i, out) in y.iter_mut().enumerate() {
            let (p, mm, b) = (i % plane, (i / plane) % g.m, i / plane / g.m);
            let mut rest = p;
            for d in (0..r).rev() {
                (pos[d], rest) = (rest % out_dims[d], rest / out_dims[d]);
            }
            let mut acc = bias.map_or(0.0, |bv| bv[mm]);
            for cl in 0..cg {
                let ch = (mm / mg) * cg + cl;
                let og = ch / per_og;
                let xp = &x[(b * g.c + ch) * in_plane..(b * g.c + ch + 1) * in_plane];
                for t in 0..taps {
                    let mut rest = t;
                    for d in (0..r).rev() {
                        (k[d], rest) = (rest % kernel[d], rest / kernel[d]);
                    }
                    for (d, a) in g.axes.iter().enumerate() {
                        let chan = (og * taps + t) * r + d;
                        let base = (pos[d] * a.stride + k[d] * a.dilation) as f32 - a.pad_begin as f32;
                        coords[d] = base + offset[(b * self.offset_group * taps * r + chan) * plane + p];
                    }
                    let mk = mask.map_or(1.0, |mv| mv[((b * self.offset_group + og) * taps + t) * plane + p]);
                    let v = sample(xp, &in_dims, &in_st, &coords[..r]);
                    acc += v * w[(mm * cg + cl) * taps + t] * mk;
                }
            }
            *out = acc;
        }
        Ok(())
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let dims = [0, 1, 2, 3, 4].map(|i| ctx.inputs.get(i).and_then(Option::as_ref).map(|o| o.dims.as_slice()));
            let g = self.geometry(dims)?;
            let (bias, mask) = (dims[3].is_some(), dims[4].is_some());
            let mut meta =
                vec![ext(g.axes.len()), ext(g.n), ext(g.c), ext(g.m), ext(self.group), ext(self.offset_group)];
            meta.extend(axes_meta(&g.axes));
            let mut slots = vec![Slot::In(0), Slot::In(1), Slot::In(2)];
            slots.extend(bias.then_some(Slot::In(3)));
            slots.extend(mask.then_some(Slot::In(4)));
            slots.push(Slot::Out(0));
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                DeformConvKernel { bias, mask },
                meta,
                Work::Elements(numel(&ctx.output(0)?.dims)),
                slots,
            )]))
        })())
    }
}

/// DeformConv, with a bias input and a mask input when named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeformConvKernel {
    pub(crate) bias: bool,
    pub(crate) mask: bool,
}

impl GpuKernel for DeformConvKernel {
    fn prefix(&self) -> &'static str {
        "deform_conv"
    }

    fn source(&self) -> String {
        let (bias_param, init) = if self.bias { (", const float* __restrict__ bias", "bias[m]") } else { ("", "0.0f") };
        let (mask_param, mask) = if self.mask {
            (", const float* __restrict__ mask", "mask[((n * OG + og) * taps + t) * out_plane + p]")
        } else {
            ("", "1.0f")
        };
        render(
            include_str!("deform_conv.cu"),
            &[
                ("BIAS_PARAM", bias_param),
                ("INIT", init),
                ("MASK_PARAM", mask_param),
                ("MASK", mask),
                ("MAX_SPATIAL", &MAX_SPATIAL.to_string()),
                ("LIMIT", &format!("{COORD_LIMIT:.1}f")),
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::DeformConvKernel;
    use crate::ops::conv::tests::pseudo_random;
    use crate::ops::gpu::GpuKernel;
    use crate::ops::testing::{assert_kernels_render, f32s, ints, run_op, values};
    use crate::ops::{Attribute, Attributes, OpError};
    use crate::tensor::Tensor;

    fn attrs(a: &[(&str, Attribute)]) -> Attributes {
        Attributes(a.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
    }

    fn deform(a: &[(&str, Attribute)], inputs: &[Option<&Tensor>]) -> Result<Tensor, OpError> {
        Ok(run_op("DeformConv", 19, &attrs(a), inputs)?.remove(0))
    }

    #[test]
    fn zero_offsets_make_a_plain_convolution() {
        let x = f32s(&[2, 4, 5, 6], &pseudo_random(240, 1));
        let w = f32s(&[6, 2, 2, 3], &pseudo_random(72, 2));
        let b = f32s(&[6], &pseudo_random(6, 3));
        let a = [
            ("group", Attribute::Int(2)),
            ("pads", ints(&[1, 0, 0, 1])),
            ("strides", ints(&[2, 1])),
            ("dilations", ints(&[1, 2])),
        ];
        let conv = run_op("Conv", 19, &attrs(&a), &[Some(&x), Some(&w), Some(&b)]).unwrap().remove(0);
        let [_, _, oh, ow] = conv.dims()[..] else { panic!() };
        let offset = f32s(&[2, 2 * 6 * 2, oh, ow], &vec![0.0; 2 * 24 * oh * ow]);
        let mut da = a.to_vec();
        da.push(("offset_group", Attribute::Int(2)));
        let got = deform(&da, &[Some(&x), Some(&w), Some(&offset), Some(&b)]).unwrap();
        assert_eq!(got.dims(), conv.dims());
        for (g, c) in values(&got).iter().zip(values(&conv)) {
            assert!((g - c).abs() < 1e-5, "{g} vs {c}");
        }
    }

    #[test]
    fn offsets_move_each_tap_and_interpolate() {
        let x = f32s(&[1, 1, 1, 4], &[1.0, 2.0, 3.0, 4.0]);
        let w = f32s(&[1, 1, 1, 1], &[1.0]);
        let shift = |dx: f32| f32s(&[1, 2, 1, 4], &[0.0, 0.0, 0.0, 0.0, dx, dx, dx, dx]);
        assert_eq!(values(&deform(&[], &[Some(&x), Some(&w), Some(&shift(1.0))]).unwrap()), [2.0, 3.0, 4.0, 0.0]);
        assert_eq!(values(&deform(&[], &[Some(&x), Some(&w), Some(&shift(0.5))]).unwrap()), [1.5, 2.5, 3.5, 2.0]);
        let mask = f32s(&[1, 1, 1, 4], &[0.5, 1.0, 2.0, 0.0]);
        let b = f32s(&[1], &[10.0]);
        let got = deform(&[], &[Some(&x), Some(&w), Some(&shift(0.0)), Some(&b), Some(&mask)]).unwrap();
        assert_eq!(values(&got), [10.5, 12.0, 16.0, 10.0]);
        // Mask without bias; a 1-D convolution of kernel 2.
        let x1 = f32s(&[1, 1, 4], &[1.0, 2.0, 3.0, 4.0]);
        let w1 = f32s(&[1, 1, 2], &[1.0, -1.0]);
        let off = f32s(&[1, 2, 3], &[0.0, 0.0, 0.0, -1.0, -1.0, -1.0]);
        let m1 = f32s(&[1, 2, 3], &[1.0; 6]);
        assert_eq!(values(&deform(&[], &[Some(&x1), Some(&w1), Some(&off), None, Some(&m1)]).unwrap()), [0.0; 3]);
        // Offset groups: channel 1 shifted, channel 0 not.
        let x2 = f32s(&[1, 2, 1, 2], &[1.0, 2.0, 10.0, 20.0]);
        let w2 = f32s(&[1, 2, 1, 1], &[1.0, 1.0]);
        let off2 = f32s(&[1, 4, 1, 2], &[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]);
        let got = deform(&[("offset_group", Attribute::Int(2))], &[Some(&x2), Some(&w2), Some(&off2)]).unwrap();
        assert_eq!(values(&got), [21.0, 2.0]);
    }

    #[test]
    fn mismatched_offsets_masks_and_groups_are_refused() {
        let x = f32s(&[1, 2, 1, 4], &[0.0; 8]);
        let w = f32s(&[1, 2, 1, 1], &[1.0, 1.0]);
        let off = f32s(&[1, 2, 1, 4], &[0.0; 8]);
        assert!(deform(&[], &[Some(&x), Some(&w), Some(&f32s(&[1, 3, 1, 4], &[0.0; 12]))]).is_err());
        assert!(deform(&[], &[Some(&x), Some(&w), Some(&f32s(&[1, 2, 1, 3], &[0.0; 6]))]).is_err());
        let bad_mask = f32s(&[1, 2, 1, 4], &[0.0; 8]);
        assert!(deform(&[], &[Some(&x), Some(&w), Some(&off), None, Some(&bad_mask)]).is_err());
        assert!(deform(&[], &[Some(&x), Some(&w), Some(&off), Some(&f32s(&[2], &[0.0; 2]))]).is_err());
        let og3 = [("offset_group", Attribute::Int(3))];
        assert!(deform(&og3, &[Some(&x), Some(&w), Some(&f32s(&[1, 6, 1, 4], &[0.0; 24]))]).is_err());
        assert!(deform(&[("offset_group", Attribute::Int(0))], &[Some(&x), Some(&w), Some(&off)]).is_err());
        assert!(deform(&[("kernel_shape", ints(&[2, 2]))], &[Some(&x), Some(&w), Some(&off)]).is_err());
        let nan = f32s(&[1, 2, 1, 4], &[f32::NAN, 0.0, 0.0, 0.0, f32::INFINITY, -1e30, 0.0, 0.0]);
        assert!(deform(&[], &[Some(&x), Some(&w), Some(&nan)]).is_ok(), "hostile offsets read zeros");
    }

    #[test]
    fn kernel_variants_render() {
        let kinds: Vec<Box<dyn GpuKernel>> = [(false, false), (true, false), (false, true), (true, true)]
            .into_iter()
            .map(|(bias, mask)| Box::new(DeformConvKernel { bias, mask }) as Box<dyn GpuKernel>)
            .collect();
        assert_kernels_render(&kinds);
    }
}
