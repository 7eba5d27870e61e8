//! The GPU kernels of the convolution family: the direct convolution (`conv.cu`; over two spatial
//! axes in 32-bit indices, `conv2d.cu`), the im2col patch
//! matrix of the conv-to-GEMM rewrite (`im2col.cu` and its bodies), the direct transposed
//! convolution (`conv_transpose.cu`) and inference BatchNormalization (`batch_norm.cu`).

use super::Axis;
use crate::ops::OpError;
use saggar_shape::DType;

use crate::ops::gpu::{
    GpuCtx, GpuKernel, GpuLaunch, GpuNode, MAX_SPATIAL, Slot, Work, bits_type, ctype, ext, float_literal, load_f32,
    numel, render, strip_header,
};

/// The spatial part of a convolution's or im2col's `meta` table: per axis the input and output
/// extents, then kernel, stride, leading pad and dilation, each field for every axis in turn.
pub(crate) fn axes_meta(axes: &[Axis]) -> Vec<i64> {
    let fields: [fn(&Axis) -> usize; 6] =
        [|a| a.input, |a| a.output, |a| a.kernel, |a| a.stride, |a| a.pad_begin, |a| a.dilation];
    fields.iter().flat_map(|field| axes.iter().map(|a| ext(field(a)))).collect()
}

/// Whether a window kernel's indices and coordinates over `planes` (image, channel) planes through
/// `axes` fit 32-bit signed integers: the counts of planes, of a plane's input elements, output
/// positions and kernel taps, and of all the planes' input elements and output positions (with
/// `patches`, also of every position's taps: an im2col patch matrix); every axis attribute, the end
/// of each axis's padding `input + pad_end`, and each axis's farthest tap
/// `(output - 1) * stride + (kernel - 1) * dilation`.
pub(crate) fn fits_i32(axes: &[Axis], planes: Option<u64>, patches: bool) -> bool {
    let product = |field: fn(&Axis) -> usize| axes.iter().try_fold(1u64, |p, a| p.checked_mul(field(a) as u64));
    let (in_plane, plane, taps) = (product(|a| a.input), product(|a| a.output), product(|a| a.kernel));
    let times = |a: Option<u64>, b: Option<u64>| a?.checked_mul(b?);
    let counts = [planes, in_plane, plane, taps, times(planes, in_plane), times(planes, plane)];
    let every_tap = if patches { times(times(planes, plane), taps) } else { Some(0) };
    let farthest = axes.iter().map(|a| {
        let taps = (a.kernel.saturating_sub(1) as u64).checked_mul(a.dilation as u64)?;
        (a.output.saturating_sub(1) as u64).checked_mul(a.stride as u64)?.checked_add(taps)
    });
    let ends = axes.iter().map(|a| (a.input as u64).checked_add(a.pad_end as u64));
    let attributes = axes.iter().flat_map(|a| {
        [a.input, a.output, a.kernel, a.stride, a.pad_begin, a.pad_end, a.dilation].map(|v| Some(v as u64))
    });
    let fits = |v: Option<u64>| v.is_some_and(|v| v <= i32::MAX as u64);
    counts.into_iter().chain([every_tap]).chain(farthest).chain(ends).chain(attributes).all(fits)
}

/// The launch of a direct convolution kernel (`kernel(bias)`: Conv's or ConvTranspose's) over
/// `axes` for the node's x, w and optional bias: meta `s, N, C, M, group` then [`axes_meta`].
pub(crate) fn conv_launch<K: GpuKernel>(
    ctx: &GpuCtx<'_>,
    kernel: impl Fn(bool) -> K,
    [n, c, m, group]: [usize; 4],
    axes: &[Axis],
) -> Result<GpuNode, OpError> {
    if axes.len() > MAX_SPATIAL {
        return Err(OpError::eval(format!("convolutions take at most {MAX_SPATIAL} spatial axes on GPU")));
    }
    let bias = ctx.inputs.get(2).and_then(Option::as_ref).is_some();
    let mut meta = vec![ext(axes.len()), ext(n), ext(c), ext(m), ext(group)];
    meta.extend(axes_meta(axes));
    let mut slots = vec![Slot::In(0), Slot::In(1)];
    if bias {
        slots.push(Slot::In(2));
    }
    slots.push(Slot::Out(0));
    let work = Work::Elements(numel(&ctx.output(0)?.dims));
    Ok(GpuNode::Launches(vec![GpuLaunch::new(kernel(bias), meta, work, slots)]))
}

/// Direct convolution, one thread per output element, with a bias input when `bias`: input and
/// weights of type `inputs` (f32, or a half precision read as f32), accumulated and written in f32.
/// With `plane`, two spatial axes in 32-bit indices (`conv2d.cu`; see [`plane_fits`]), else any
/// number in 64-bit ones (`conv.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConvKernel {
    pub(crate) bias: bool,
    pub(crate) inputs: DType,
    pub(crate) plane: bool,
}

/// Whether a convolution of `[n, c, m, group]` over `axes` may take the 2-D kernel: two spatial axes
/// whose every index (of the input, the output and the weights) fits 32 bits.
pub(crate) fn plane_fits([n, c, m, group]: [usize; 4], axes: &[Axis]) -> bool {
    let planes = (n as u64).checked_mul(c.max(m) as u64);
    let taps = axes.iter().try_fold(1u64, |t, a| t.checked_mul(a.kernel as u64));
    let weights = taps.and_then(|t| t.checked_mul(m as u64)?.checked_mul((c / group.max(1)) as u64));
    axes.len() == 2 && fits_i32(axes, planes, false) && weights.is_some_and(|w| w <= i32::MAX as u64)
}

impl GpuKernel for ConvKernel {
    fn prefix(&self) -> &'static str {
        "conv"
    }

    fn source(&self) -> String {
        let (bias_param, init) = if self.bias { (", const float* __restrict__ bias", "bias[m]") } else { ("", "0.0f") };
        let template = if self.plane { include_str!("conv2d.cu") } else { include_str!("conv.cu") };
        render(
            template,
            &[
                ("T", ctype(self.inputs).unwrap_or("float")),
                ("X", &load_f32(self.inputs, "xp[at]")),
                ("W", &load_f32(self.inputs, "wp[t]")),
                ("BIAS_PARAM", bias_param),
                ("INIT", init),
                ("MAX_SPATIAL", &MAX_SPATIAL.to_string()),
            ],
        )
    }
}

/// The tap test of the transposed-convolution gathers (`transpose_tap.cuh`).
pub(crate) const TRANSPOSE_TAP: &str = strip_header(include_str!("transpose_tap.cuh"));

/// Direct transposed convolution, one thread per output element, with a bias input when `bias`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConvTransposeKernel {
    pub(crate) bias: bool,
}

impl GpuKernel for ConvTransposeKernel {
    fn prefix(&self) -> &'static str {
        "conv_transpose"
    }

    fn source(&self) -> String {
        let (bias_param, init) = if self.bias { (", const float* __restrict__ bias", "bias[m]") } else { ("", "0.0f") };
        render(
            include_str!("conv_transpose.cu"),
            &[
                ("BIAS_PARAM", bias_param),
                ("INIT", init),
                ("MAX_SPATIAL", &MAX_SPATIAL.to_string()),
                ("TAP", TRANSPOSE_TAP),
            ],
        )
    }
}

/// The im2col patch matrix of a convolution's input, moving elements of `bytes` bytes (zero bits
/// are 0 in every float type), over two spatial axes (`planar`) or any number: `im2col.cu` around
/// the form's body (`im2col_planar.cuh`, `im2col_rank.cuh`) in 32-bit and in 64-bit indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Im2colKernel {
    pub(crate) bytes: u8,
    pub(crate) planar: bool,
}

impl GpuKernel for Im2colKernel {
    fn prefix(&self) -> &'static str {
        "im2col"
    }

    fn source(&self) -> String {
        let body = if self.planar { include_str!("im2col_planar.cuh") } else { include_str!("im2col_rank.cuh") };
        let (t, spatial) = (bits_type(self.bytes), MAX_SPATIAL.to_string());
        let indexed = |i: &str| render(body, &[("T", t), ("I", i), ("MAX_SPATIAL", &spatial)]);
        render(include_str!("im2col.cu"), &[("T", t), ("NARROW", &indexed("int")), ("WIDE", &indexed("onnx_i64"))])
    }
}

/// Inference BatchNormalization with epsilon `epsilon_bits` (inputs x, scale, bias, mean, var).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchNormKernel {
    pub(crate) epsilon_bits: u32,
}

impl GpuKernel for BatchNormKernel {
    fn prefix(&self) -> &'static str {
        "batch_norm"
    }

    fn source(&self) -> String {
        render(include_str!("batch_norm.cu"), &[("EPS", &float_literal(self.epsilon_bits))])
    }
}
