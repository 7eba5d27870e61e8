//! Convolution (Conv as im2col plus one `matrixmultiply` product per image and group), its adjoint
//! ConvTranspose (`transpose.rs`) and inference-mode BatchNormalization, with the sliding-window
//! geometry (kernel, strides, dilations, pads, `auto_pad`, `ceil_mode`) that pooling shares.

mod col2im;
mod deform;
pub(crate) mod gpu;
pub(crate) mod im2col;
pub(crate) mod im2col_nhwc;
mod transpose;

use std::cell::RefCell;
use std::sync::Arc;

use saggar_shape::{DType, Dim};

use self::gpu::{BatchNormKernel, ConvKernel};
use crate::ops::linalg::Gemm;
use crate::ops::shape_util::strides;
use crate::ops::{Attributes, EvalInputs, InferInputs, NodeCtx, Op, OpEntry, OpError, ValueType, unknown_dim};
use crate::tensor::{TensorMut, TensorView};

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "Conv", since: 1, until: 24, build: build_conv },
    OpEntry { op_type: "ConvTranspose", since: 1, until: 10, build: |c| transpose::build_conv_transpose(c, true) },
    OpEntry { op_type: "ConvTranspose", since: 11, until: 24, build: |c| transpose::build_conv_transpose(c, false) },
    OpEntry { op_type: "BatchNormalization", since: 9, until: 24, build: build_batch_norm },
    OpEntry { op_type: "Col2Im", since: 18, until: 24, build: col2im::build_col2im },
    OpEntry { op_type: "DeformConv", since: 19, until: 24, build: deform::build_deform_conv },
];

/// The largest im2col buffer a convolution builds, in elements (1 GiB of f32).
const MAX_COL_ELEMENTS: usize = 1 << 28;

/// How a window op pads its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AutoPad {
    /// Explicit `pads`.
    NotSet,
    /// Output extent `ceil(in / stride)`, odd padding at the end.
    SameUpper,
    /// Output extent `ceil(in / stride)`, odd padding at the start.
    SameLower,
    /// No padding.
    Valid,
}

/// The sliding-window attributes of Conv and the pooling ops, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Window {
    /// `kernel_shape` (empty when Conv takes it from its weights).
    pub kernel: Vec<usize>,
    /// Per-axis strides (empty: all 1).
    pub strides: Vec<usize>,
    /// Per-axis dilations (empty: all 1).
    pub dilations: Vec<usize>,
    /// Begin pads then end pads (empty: all 0).
    pub pads: Vec<usize>,
    /// Padding mode.
    pub auto_pad: AutoPad,
    /// Round output extents up rather than down (pooling).
    pub ceil_mode: bool,
}

/// The concrete geometry of one spatial axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Axis {
    /// Input extent.
    pub input: usize,
    /// Kernel extent.
    pub kernel: usize,
    /// Stride.
    pub stride: usize,
    /// Dilation.
    pub dilation: usize,
    /// Padding before the first element.
    pub pad_begin: usize,
    /// Padding after the last element.
    pub pad_end: usize,
    /// Output extent.
    pub output: usize,
}

impl Axis {
    /// An axis of extent 1 and a one-tap kernel: what leads a one-axis window run as two.
    pub(crate) const UNIT: Axis =
        Axis { input: 1, kernel: 1, stride: 1, dilation: 1, pad_begin: 0, pad_end: 0, output: 1 };

    /// `axes` as the GPU kernels take them: one axis as two, the first [`Axis::UNIT`].
    pub(crate) fn at_least_two(axes: &[Axis]) -> Vec<Axis> {
        if axes.len() == 1 { vec![Axis::UNIT, axes[0]] } else { axes.to_vec() }
    }

    /// The input coordinate of output position `o` and kernel tap `k` (negative or past the end in
    /// the padding).
    pub fn coord(&self, o: usize, k: usize) -> isize {
        (o * self.stride + k * self.dilation) as isize - self.pad_begin as isize
    }
}

/// The values of the `name` attribute (empty when absent), each in `min..=2^20`.
pub(crate) fn bounded_ints(ctx: &NodeCtx<'_>, name: &str, min: usize) -> Result<Vec<usize>, OpError> {
    let v = ctx.ints(name)?.unwrap_or_default();
    v.iter()
        .map(|&x| {
            usize::try_from(x)
                .ok()
                .filter(|x| (min..=1 << 20).contains(x))
                .ok_or_else(|| OpError::attribute(name, format!("values must be in {min}..=2^20, found {v:?}")))
        })
        .collect()
}

impl Window {
    /// Reads the window attributes; `ceil_mode` only where the op has it.
    pub fn parse(ctx: &NodeCtx<'_>, with_ceil_mode: bool) -> Result<Window, OpError> {
        let kernel = bounded_ints(ctx, "kernel_shape", 1)?;
        let strides = bounded_ints(ctx, "strides", 1)?;
        let dilations = bounded_ints(ctx, "dilations", 1)?;
        let pads = bounded_ints(ctx, "pads", 0)?;
        let auto_pad = match ctx.string_or("auto_pad", "NOTSET")?.as_str() {
            "NOTSET" => AutoPad::NotSet,
            "SAME_UPPER" => AutoPad::SameUpper,
            "SAME_LOWER" => AutoPad::SameLower,
            "VALID" => AutoPad::Valid,
            other => return Err(ctx.unsupported("auto_pad", other, "NOTSET, SAME_UPPER, SAME_LOWER, VALID")),
        };
        let ceil_mode = if with_ceil_mode {
            match ctx.int_or("ceil_mode", 0)? {
                0 => false,
                1 => true,
                other => return Err(OpError::attribute("ceil_mode", format!("must be 0 or 1, found {other}"))),
            }
        } else {
            false
        };
        if pads.len() % 2 != 0 {
            return Err(OpError::attribute("pads", "must hold a begin and an end value per spatial axis"));
        }
        Ok(Window { kernel, strides, dilations, pads, auto_pad, ceil_mode })
    }

    /// Checks that the per-axis attributes have `rank` entries each (when given).
    fn check_rank(&self, rank: usize) -> Result<(), OpError> {
        for (name, len) in [
            ("kernel_shape", self.kernel.len()),
            ("strides", self.strides.len()),
            ("dilations", self.dilations.len()),
            ("pads", self.pads.len() / 2),
        ] {
            if len != 0 && len != rank {
                return Err(OpError::infer(format!("`{name}` has {len} entries for {rank} spatial axes")));
            }
        }
        Ok(())
    }

    /// The geometry of spatial axis `i` of extent `input` with kernel extent `kernel`.
    pub fn axis(&self, i: usize, input: usize, kernel: usize) -> Result<Axis, OpError> {
        let stride = self.strides.get(i).copied().unwrap_or(1);
        let dilation = self.dilations.get(i).copied().unwrap_or(1);
        let span = (kernel.max(1) - 1) * dilation + 1;
        let (pad_begin, pad_end, output) = match self.auto_pad {
            AutoPad::NotSet | AutoPad::Valid => {
                let (pb, pe) = if self.auto_pad == AutoPad::Valid {
                    (0, 0)
                } else {
                    let rank = self.pads.len() / 2;
                    (self.pads.get(i).copied().unwrap_or(0), self.pads.get(rank + i).copied().unwrap_or(0))
                };
                let total = input + pb + pe;
                if total < span {
                    return Err(OpError::infer(format!(
                        "spatial axis {i}: the window ({span}) is larger than the padded input ({total})"
                    )));
                }
                let mut out =
                    if self.ceil_mode { (total - span).div_ceil(stride) + 1 } else { (total - span) / stride + 1 };
                // A last window that would start in the end padding is dropped (as PyTorch and the
                // ONNX reference do).
                if self.ceil_mode && out > 1 && (out - 1) * stride >= input + pb {
                    out -= 1;
                }
                (pb, pe, out)
            }
            AutoPad::SameUpper | AutoPad::SameLower => {
                let out = input.div_ceil(stride);
                let total = ((out.max(1) - 1) * stride + span).saturating_sub(input);
                let small = total / 2;
                if self.auto_pad == AutoPad::SameUpper {
                    (small, total - small, out)
                } else {
                    (total - small, small, out)
                }
            }
        };
        Ok(Axis { input, kernel, stride, dilation, pad_begin, pad_end, output })
    }

    /// Output spatial dimensions for symbolic input extents and kernel extents (`None` where the
    /// kernel is not known): unknown wherever an extent is symbolic.
    pub fn infer_spatial(&self, input: &[Dim], kernel: &[Option<usize>]) -> Result<Vec<Dim>, OpError> {
        self.check_rank(input.len())?;
        input
            .iter()
            .zip(kernel)
            .enumerate()
            .map(|(i, (d, k))| match (d.as_fixed().and_then(|v| usize::try_from(v).ok()), k) {
                (Some(d), Some(k)) => Ok(Dim::Fixed(self.axis(i, d, *k)?.output as u64)),
                _ => Ok(unknown_dim()),
            })
            .collect()
    }

    /// The concrete geometry of every spatial axis.
    pub fn resolve(&self, input: &[usize], kernel: &[usize]) -> Result<Vec<Axis>, OpError> {
        self.check_rank(input.len()).map_err(|e| OpError::eval(e.to_string()))?;
        input.iter().zip(kernel).enumerate().map(|(i, (&d, &k))| self.axis(i, d, k)).collect()
    }
}

/// The dims of a window op's input `(N, C, spatial...)`, which must be f32 of rank ≥ 3.
pub(crate) fn image_dims<'a>(op: &str, ty: &'a ValueType) -> Result<&'a [Dim], OpError> {
    typed_image_dims(op, ty, DType::F32)
}

/// As [`image_dims`] for an input of element type `element`.
pub(crate) fn typed_image_dims<'a>(op: &str, ty: &'a ValueType, element: DType) -> Result<&'a [Dim], OpError> {
    if ty.dtype != element {
        return Err(OpError::infer(format!("{op} takes {element} inputs, not {}", ty.dtype)));
    }
    if ty.rank() < 3 {
        return Err(OpError::infer(format!("{op} takes an (N, C, spatial...) input of rank 3 or more, found {ty}")));
    }
    Ok(&ty.dims)
}

/// Checks that `out` (as inference shaped it) holds `expected` dims.
pub(crate) fn check_out_dims(
    op: &str,
    out: &[usize],
    expected: impl IntoIterator<Item = usize>,
) -> Result<(), OpError> {
    if out.iter().copied().ne(expected) {
        return Err(OpError::eval(format!("{op}: output shape {out:?} does not match the inputs")));
    }
    Ok(())
}

/// Checks that a view's element count matches its dims.
pub(crate) fn check_len(op: &str, v: &TensorView<'_>) -> Result<(), OpError> {
    if v.dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) != Some(v.len()) {
        return Err(OpError::eval(format!("{op}: an input's data does not match its shape {:?}", v.dims)));
    }
    Ok(())
}

/// `Conv`. With `half`, the form the precision pass gives one-group convolutions: input and
/// weights of that half type, accumulated and written in f32 (the bias f32).
#[derive(Debug)]
struct Conv {
    window: Window,
    group: usize,
    half: Option<DType>,
}

/// Conv of `attrs` reading half (`half`) input and weights and writing f32: see [`Conv`].
pub(crate) fn half_conv_writing_f32(attrs: &Attributes, opset: u32, half: DType) -> Result<Arc<dyn Op>, OpError> {
    let ctx = NodeCtx::new(attrs, opset, 3, 1);
    Ok(Arc::new(Conv { window: Window::parse(&ctx, false)?, group: parse_group(&ctx)?, half: Some(half) }))
}

/// The `group` attribute of Conv and ConvTranspose.
pub(crate) fn parse_group(ctx: &NodeCtx<'_>) -> Result<usize, OpError> {
    let group = ctx.int_or("group", 1)?;
    usize::try_from(group)
        .ok()
        .filter(|&g| g >= 1)
        .ok_or_else(|| OpError::attribute("group", format!("must be at least 1, found {group}")))
}

fn build_conv(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let window = Window::parse(ctx, false)?;
    Ok(Box::new(Conv { window, group: parse_group(ctx)?, half: None }))
}

/// A fixed extent as `usize`.
pub(crate) fn fixed(d: &Dim) -> Option<usize> {
    d.as_fixed().and_then(|v| usize::try_from(v).ok())
}

/// The kernel extents of a convolution with weights `w` (`None` where unknown), checked against
/// `kernel_shape`; a zero extent is refused.
fn kernel_extents(op: &str, window: &Window, w: &ValueType) -> Result<Vec<Option<usize>>, OpError> {
    let mut kernel: Vec<Option<usize>> = w.dims[2..].iter().map(fixed).collect();
    if !window.kernel.is_empty() {
        for (k, &attr) in kernel.iter_mut().zip(&window.kernel) {
            if k.is_some_and(|k| k != attr) {
                return Err(OpError::infer(format!(
                    "{op}: kernel_shape {:?} differs from the weights {w}",
                    window.kernel
                )));
            }
            *k = Some(attr);
        }
    }
    if kernel.contains(&Some(0)) {
        return Err(OpError::infer(format!("{op}: the weights {w} have an empty kernel axis")));
    }
    Ok(kernel)
}

/// Checks concrete kernel extents (from the weights) against `kernel_shape`; none may be zero.
pub(crate) fn check_kernel(op: &str, window: &Window, kernel: &[usize]) -> Result<(), OpError> {
    if !window.kernel.is_empty() && window.kernel != kernel {
        return Err(OpError::eval(format!(
            "{op}: kernel_shape {:?} differs from the weights {kernel:?}",
            window.kernel
        )));
    }
    if kernel.contains(&0) {
        return Err(OpError::eval(format!("{op}: the weights have an empty kernel axis {kernel:?}")));
    }
    Ok(())
}

/// Checks a convolution's optional bias input: f32 `[channels]`.
fn check_bias(op: &str, bias: Option<&crate::ops::InferInput<'_>>, channels: &Dim) -> Result<(), OpError> {
    let Some(b) = bias else { return Ok(()) };
    let ok = b.ty.dtype == DType::F32
        && b.ty.rank() == 1
        && !matches!((fixed(&b.ty.dims[0]), fixed(channels)), (Some(p), Some(q)) if p != q);
    if ok { Ok(()) } else { Err(OpError::infer(format!("{op} bias must be f32 [{channels}], found {}", b.ty))) }
}

impl Op for Conv {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        Some((|| {
            let (x, w) = (ctx.input(0)?, ctx.input(1)?);
            let (xd, wd) = (&x.dims, &w.dims);
            if xd.len() < 3 || wd.len() != xd.len() {
                return Err(OpError::eval("Conv: input and weight ranks differ"));
            }
            let (n, c, m, g) = (xd[0], xd[1], wd[0], self.group);
            if wd[1].checked_mul(g) != Some(c) || m % g != 0 {
                return Err(OpError::eval("Conv: channels and groups disagree"));
            }
            let axes = self.window.resolve(&xd[2..], &wd[2..])?;
            let inputs = self.half.unwrap_or(DType::F32);
            let plane = gpu::plane_fits([n, c, m, g], &axes);
            gpu::conv_launch(ctx, |bias| ConvKernel { bias, inputs, plane }, [n, c, m, g], &axes)
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let element = self.half.unwrap_or(DType::F32);
        let x = typed_image_dims("Conv", inputs.req(0)?.ty, element)?;
        let w = inputs.req(1)?.ty;
        if w.dtype != element || w.rank() != x.len() {
            return Err(OpError::infer(format!("Conv weights must be {element} of the input's rank, found {w}")));
        }
        let g = self.group;
        if let (Some(c), Some(cg)) = (fixed(&x[1]), fixed(&w.dims[1]))
            && cg.checked_mul(g) != Some(c)
        {
            return Err(OpError::infer(format!("Conv: {c} input channels, weights take {cg} x {g} groups")));
        }
        if let Some(m) = fixed(&w.dims[0])
            && m % g != 0
        {
            return Err(OpError::infer(format!("Conv: {m} output channels do not split into {g} groups")));
        }
        let kernel = kernel_extents("Conv", &self.window, w)?;
        check_bias("Conv", inputs.get(2), &w.dims[0])?;
        let mut dims = vec![x[0].clone(), w.dims[0].clone()];
        dims.extend(self.window.infer_spatial(&x[2..], &kernel)?);
        Ok(vec![ValueType::new(DType::F32, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (xv, wv) = (inputs.req(0)?, inputs.req(1)?);
        check_len("Conv", xv)?;
        check_len("Conv", wv)?;
        let (xd, wd) = (xv.dims, wv.dims);
        if xd.len() < 3 || wd.len() != xd.len() {
            return Err(OpError::eval(format!("Conv: input {xd:?} and weights {wd:?} ranks differ")));
        }
        let (n, c, m, cg, g) = (xd[0], xd[1], wd[0], wd[1], self.group);
        if cg.checked_mul(g) != Some(c) || m % g != 0 {
            return Err(OpError::eval(format!("Conv: input {xd:?}, weights {wd:?} and {g} groups disagree")));
        }
        let kernel = &wd[2..];
        check_kernel("Conv", &self.window, kernel)?;
        let axes = self.window.resolve(&xd[2..], kernel)?;
        check_out_dims("Conv", outputs[0].dims, [n, m].into_iter().chain(axes.iter().map(|a| a.output)))?;
        let bias = match inputs.get(2) {
            Some(b) if b.len() == m => Some(b.f32s()?),
            Some(_) => return Err(OpError::eval(format!("Conv bias must hold {m} values"))),
            None => None,
        };
        let (x, w) = (xv.floats()?, wv.floats()?);
        let (x, w) = (&x[..], &w[..]);
        let y = outputs[0].f32s()?;
        let d_in: usize = xd[2..].iter().product();
        let k_taps: usize = kernel.iter().product();
        let plane: usize = axes.iter().map(|a| a.output).product();
        let (mg, rows) = (m / g, cg * k_taps);
        let pointwise = axes.iter().all(|a| a.kernel == 1 && a.stride == 1 && a.pad_begin == 0 && a.output == a.input);
        let col_len = rows.checked_mul(plane).filter(|&l| l <= MAX_COL_ELEMENTS).ok_or_else(|| {
            OpError::eval(format!("Conv: the im2col buffer ({rows} x {plane}) exceeds {MAX_COL_ELEMENTS} elements"))
        })?;
        COL_SCRATCH.with_borrow_mut(|col| -> Result<(), OpError> {
            if !pointwise && col.len() < col_len {
                col.resize(col_len, 0.0);
            }
            for image in 0..n {
                for group in 0..g {
                    let x_off = (image * c + group * cg) * d_in;
                    let b = if pointwise {
                        (x, x_off, plane, 1)
                    } else {
                        im2col(&x[x_off..x_off + cg * d_in], cg, &axes, &mut col[..col_len]);
                        (&col[..], 0, plane, 1)
                    };
                    let gemm = Gemm { m: mg, k: rows, n: plane, a: (w, group * mg * rows, rows, 1), b };
                    gemm.run(1.0, 0.0, y, (image * m + group * mg) * plane, plane)?;
                }
            }
            Ok(())
        })?;
        if let Some(bias) = bias
            && plane > 0
        {
            for (channel_plane, &b) in y.chunks_exact_mut(plane).zip(bias.iter().cycle()) {
                channel_plane.iter_mut().for_each(|v| *v += b);
            }
        }
        Ok(())
    }
}

thread_local! {
    /// The im2col buffer of this thread, grown to the largest convolution it ran.
    static COL_SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Advances a row-major multi-index over `extents`; false once it wraps to all zeros.
fn advance(index: &mut [usize], extents: impl Fn(usize) -> usize) -> bool {
    for a in (0..index.len()).rev() {
        index[a] += 1;
        if index[a] < extents(a) {
            return true;
        }
        index[a] = 0;
    }
    false
}

/// Lays out the `channels` planes of `x` as an im2col matrix: one row per (channel, kernel tap),
/// one column per output position; taps in the padding read 0.
pub(crate) fn im2col<T: Copy + Default>(x: &[T], channels: usize, axes: &[Axis], col: &mut [T]) {
    let rank = axes.len();
    let last = axes[rank - 1];
    if axes.iter().any(|a| a.input == 0) {
        // Every tap reads padding.
        col.fill(T::default());
        return;
    }
    let in_dims: Vec<usize> = axes.iter().map(|a| a.input).collect();
    let in_strides = strides(&in_dims);
    let d_in: usize = in_dims.iter().product();
    let plane: usize = axes.iter().map(|a| a.output).product();
    let mut tap = vec![0usize; rank];
    let mut outer = vec![0usize; rank - 1];
    // The output positions `o` of the last axis whose tap `k` reads inside the input.
    let valid_range = |k: usize| {
        let first = (0..last.output).find(|&o| last.coord(o, k) >= 0).unwrap_or(last.output);
        let end = (first..last.output).find(|&o| last.coord(o, k) >= last.input as isize).unwrap_or(last.output);
        (first, end)
    };
    let mut rows = col.chunks_exact_mut(plane.max(1));
    for xc in x.chunks_exact(d_in.max(1)).take(channels) {
        tap.fill(0);
        loop {
            let Some(row) = rows.next() else { return };
            let (lo, hi) = valid_range(tap[rank - 1]);
            outer.fill(0);
            for run in row.chunks_exact_mut(last.output.max(1)) {
                let mut base = 0usize;
                let mut inside = true;
                for a in 0..rank - 1 {
                    let i = axes[a].coord(outer[a], tap[a]);
                    if i < 0 || i >= axes[a].input as isize {
                        inside = false;
                        break;
                    }
                    base += i as usize * in_strides[a];
                }
                if !inside || lo >= hi {
                    run.fill(T::default());
                } else {
                    run[..lo].fill(T::default());
                    run[hi..].fill(T::default());
                    let start = base + last.coord(lo, tap[rank - 1]) as usize;
                    if last.stride == 1 {
                        run[lo..hi].copy_from_slice(&xc[start..start + (hi - lo)]);
                    } else {
                        for (v, &s) in run[lo..hi].iter_mut().zip(xc[start..].iter().step_by(last.stride)) {
                            *v = s;
                        }
                    }
                }
                advance(&mut outer, |a| axes[a].output);
            }
            if !advance(&mut tap, |a| axes[a].kernel) {
                break;
            }
        }
    }
}

/// `BatchNormalization` in inference mode: `y = (x - mean) / sqrt(var + epsilon) * scale + bias`
/// per channel (axis 1).
#[derive(Debug)]
struct BatchNorm {
    epsilon: f32,
}

fn build_batch_norm(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let epsilon = ctx.float_or("epsilon", 1e-5)?;
    ctx.ignore("momentum");
    let training = ctx.int_or("training_mode", 0)?;
    if training != 0 {
        return Err(ctx.unsupported("training_mode", training, "0 (inference)"));
    }
    if ctx.num_outputs() > 1 {
        return Err(ctx.unsupported(
            "outputs",
            ctx.num_outputs(),
            "1 (inference mode; running statistics are training)",
        ));
    }
    Ok(Box::new(BatchNorm { epsilon }))
}

impl Op for BatchNorm {
    fn gpu(&self, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Option<Result<crate::ops::gpu::GpuNode, OpError>> {
        use crate::ops::gpu::{GpuLaunch, GpuNode, Slot, Work, ext, numel};
        Some((|| {
            let x = ctx.input(0)?;
            if x.dims.len() < 2 || (1..5).any(|i| ctx.input(i).map(|p| numel(&p.dims)).ok() != Some(x.dims[1] as u64)) {
                return Err(OpError::eval("BatchNormalization takes (N, C, ...) and four parameters of C values"));
            }
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                BatchNormKernel { epsilon_bits: self.epsilon.to_bits() },
                vec![ext(x.dims[0]), ext(x.dims[1]), numel(&x.dims[2..]) as i64, 0, 0],
                Work::Elements(numel(&x.dims)),
                vec![Slot::In(0), Slot::In(1), Slot::In(2), Slot::In(3), Slot::In(4), Slot::Out(0)],
            )]))
        })())
    }
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        if x.dtype != DType::F32 || x.rank() < 2 {
            return Err(OpError::infer(format!("BatchNormalization takes an f32 (N, C, ...) input, found {x}")));
        }
        for i in 1..5 {
            let p = inputs.req(i)?.ty;
            let ok = p.dtype == DType::F32
                && p.rank() == 1
                && !matches!((p.dims[0].as_fixed(), x.dims[1].as_fixed()), (Some(a), Some(b)) if a != b);
            if !ok {
                return Err(OpError::infer(format!("BatchNormalization input {i} must be f32 [C], found {p}")));
            }
        }
        Ok(vec![x.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let xv = inputs.req(0)?;
        check_len("BatchNormalization", xv)?;
        if xv.dims.len() < 2 {
            return Err(OpError::eval("BatchNormalization takes an (N, C, ...) input"));
        }
        let c = xv.dims[1];
        let [scale, bias, mean, var] = [1, 2, 3, 4].map(|i| inputs.req(i).and_then(TensorView::f32s));
        let (scale, bias, mean, var) = (scale?, bias?, mean?, var?);
        if [scale, bias, mean, var].iter().any(|p| p.len() != c) {
            return Err(OpError::eval(format!("BatchNormalization parameters must hold {c} values")));
        }
        let x = xv.f32s()?;
        let y = outputs[0].f32s()?;
        if y.len() != x.len() {
            return Err(OpError::eval("BatchNormalization output does not match the input"));
        }
        let plane: usize = xv.dims[2..].iter().product();
        if plane == 0 {
            return Ok(());
        }
        for (i, (yp, xp)) in y.chunks_exact_mut(plane).zip(x.chunks_exact(plane)).enumerate() {
            let ch = i % c;
            let s = scale[ch] / (var[ch] + self.epsilon).sqrt();
            let shift = bias[ch] - mean[ch] * s;
            yp.iter_mut().zip(xp).for_each(|(y, &x)| *y = x * s + shift);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{f32s, ints, run_op, run_op_outputs, values};
    use crate::ops::{Attribute, Attributes, OpError};
    use crate::tensor::{Tensor, TensorData};

    /// A direct 2-D convolution, the oracle for the im2col path.
    #[allow(clippy::too_many_arguments)]
    fn direct_conv2d(
        x: &[f32],
        xd: [usize; 4],
        w: &[f32],
        wd: [usize; 4],
        group: usize,
        stride: [usize; 2],
        dil: [usize; 2],
        pads: [usize; 4],
    ) -> (Vec<usize>, Vec<f32>) {
        let [n, c, h, wi] = xd;
        let [m, cg, kh, kw] = wd;
        let oh = (h + pads[0] + pads[2] - ((kh - 1) * dil[0] + 1)) / stride[0] + 1;
        let ow = (wi + pads[1] + pads[3] - ((kw - 1) * dil[1] + 1)) / stride[1] + 1;
        let mg = m / group;
        let mut out = vec![0.0; n * m * oh * ow];
        for b in 0..n {
            for oc in 0..m {
                let g = oc / mg;
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut acc = 0.0;
                        for ic in 0..cg {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let iy = (oy * stride[0] + ky * dil[0]) as isize - pads[0] as isize;
                                    let ix = (ox * stride[1] + kx * dil[1]) as isize - pads[1] as isize;
                                    if iy < 0 || ix < 0 || iy >= h as isize || ix >= wi as isize {
                                        continue;
                                    }
                                    let xi = ((b * c + g * cg + ic) * h + iy as usize) * wi + ix as usize;
                                    acc += x[xi] * w[((oc * cg + ic) * kh + ky) * kw + kx];
                                }
                            }
                        }
                        out[((b * m + oc) * oh + oy) * ow + ox] = acc;
                    }
                }
            }
        }
        (vec![n, m, oh, ow], out)
    }

    pub(super) fn pseudo_random(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
            })
            .collect()
    }

    #[test]
    fn padded_strided_conv_with_bias_by_hand() {
        let x = f32s(&[1, 1, 3, 3], &(0..9).map(|v| v as f32).collect::<Vec<_>>());
        let w = f32s(&[1, 1, 2, 2], &[1.0; 4]);
        let b = f32s(&[1], &[1.0]);
        let attrs = Attributes(vec![("pads".into(), ints(&[1, 1, 1, 1])), ("strides".into(), ints(&[2, 2]))]);
        let out = run_op("Conv", 11, &attrs, &[Some(&x), Some(&w), Some(&b)]).unwrap();
        assert_eq!(out[0].dims(), &[1, 1, 2, 2]);
        assert_eq!(values(&out[0]), &[1.0, 4.0, 10.0, 25.0]);
    }

    #[test]
    fn grouped_dilated_padded_conv_matches_direct_convolution() {
        // (group, stride, dilation, pads, channels in, channels out, kernel)
        let cases = [
            (2, [1, 1], [2, 2], [2, 1, 2, 1], 4, 6, [3, 3]),
            (1, [2, 1], [1, 2], [0, 1, 1, 0], 3, 2, [2, 3]),
            (3, [1, 2], [1, 1], [1, 1, 1, 1], 3, 3, [3, 3]), // depthwise
            (1, [1, 1], [1, 1], [0, 0, 0, 0], 5, 4, [1, 1]), // pointwise
        ];
        for (i, (group, stride, dil, pads, c, m, k)) in cases.into_iter().enumerate() {
            let xd = [2, c, 5, 6];
            let wd = [m, c / group, k[0], k[1]];
            let x = pseudo_random(xd.iter().product(), 1 + i as u32);
            let w = pseudo_random(wd.iter().product(), 100 + i as u32);
            let (dims, want) = direct_conv2d(&x, xd, &w, wd, group, stride, dil, pads);
            let attrs = Attributes(vec![
                ("group".into(), Attribute::Int(group as i64)),
                ("strides".into(), ints(&stride.map(|v| v as i64))),
                ("dilations".into(), ints(&dil.map(|v| v as i64))),
                ("pads".into(), ints(&pads.map(|v| v as i64))),
                ("kernel_shape".into(), ints(&k.map(|v| v as i64))),
            ]);
            let out = run_op("Conv", 11, &attrs, &[Some(&f32s(&xd, &x)), Some(&f32s(&wd, &w))]).unwrap();
            assert_eq!(out[0].dims(), dims.as_slice(), "case {i}");
            for (got, want) in values(&out[0]).iter().zip(&want) {
                assert!((got - want).abs() < 1e-5, "case {i}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn auto_pad_same_and_valid_and_1d() {
        // 1-D, length 5, kernel 2, stride 2: SAME gives 3 outputs with the odd pad at the end
        // (SAME_UPPER) or at the start (SAME_LOWER).
        let x = f32s(&[1, 1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
        let w = f32s(&[1, 1, 2], &[1.0, 10.0]);
        let run = |mode: &str| {
            let attrs = Attributes(vec![
                ("auto_pad".into(), Attribute::String(mode.as_bytes().to_vec())),
                ("strides".into(), ints(&[2])),
            ]);
            run_op("Conv", 11, &attrs, &[Some(&x), Some(&w)]).unwrap().remove(0)
        };
        assert_eq!(values(&run("SAME_UPPER")), &[21.0, 43.0, 5.0]);
        assert_eq!(values(&run("SAME_LOWER")), &[10.0, 32.0, 54.0]);
        assert_eq!(values(&run("VALID")), &[21.0, 43.0]);
        let bad = Attributes(vec![("auto_pad".into(), Attribute::String(b"SAME".to_vec()))]);
        assert!(matches!(run_op("Conv", 11, &bad, &[Some(&x), Some(&w)]), Err(OpError::Unsupported { .. })));
        let wrong_groups = Attributes(vec![("group".into(), Attribute::Int(2))]);
        assert!(matches!(run_op("Conv", 11, &wrong_groups, &[Some(&x), Some(&w)]), Err(OpError::Infer(_))));
    }

    #[test]
    fn conv_3d_matches_a_sum_of_taps() {
        let x = f32s(&[1, 1, 2, 2, 2], &(0..8).map(|v| v as f32).collect::<Vec<_>>());
        let w = f32s(&[1, 1, 2, 2, 2], &[1.0; 8]);
        let out = run_op("Conv", 11, &Attributes::default(), &[Some(&x), Some(&w)]).unwrap();
        assert_eq!(out[0].dims(), &[1, 1, 1, 1, 1]);
        assert_eq!(values(&out[0]), &[28.0]);
    }

    #[test]
    fn eval_refuses_outputs_and_weights_that_do_not_match() {
        use crate::ops::{EvalInputs, NodeCtx, lookup};
        let attrs = Attributes::default();
        let conv = (lookup("Conv", 11).unwrap().build)(&mut NodeCtx::for_test(&attrs, 11, 2)).unwrap();
        let x = f32s(&[1, 2, 3, 3], &[1.0; 18]);
        let w = f32s(&[1, 2, 2, 2], &[1.0; 8]);
        let mut small = Tensor::zeros(saggar_shape::DType::F32, vec![1, 1, 1, 1]).unwrap();
        let ins = [Some(x.view()), Some(w.view())];
        let res = conv.eval(&EvalInputs::new(&ins), &mut [small.view_mut()]);
        assert!(matches!(res, Err(OpError::Eval(_))));
        // Weights whose channels do not divide into the input's.
        let w3 = f32s(&[1, 3, 2, 2], &[1.0; 12]);
        let mut out = Tensor::zeros(saggar_shape::DType::F32, vec![1, 1, 2, 2]).unwrap();
        let ins = [Some(x.view()), Some(w3.view())];
        assert!(conv.eval(&EvalInputs::new(&ins), &mut [out.view_mut()]).is_err());
        // An integer input where f32 is required.
        let xi = Tensor::new(vec![1, 2, 3, 3], TensorData::I64(vec![1; 18])).unwrap();
        let ins = [Some(xi.view()), Some(w.view())];
        assert!(conv.eval(&EvalInputs::new(&ins), &mut [out.view_mut()]).is_err());
    }

    #[test]
    fn batch_norm_inference_and_training_refused() {
        let x = f32s(&[1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let scale = f32s(&[2], &[1.0, 2.0]);
        let bias = f32s(&[2], &[0.0, 1.0]);
        let mean = f32s(&[2], &[1.0, 3.0]);
        let var = f32s(&[2], &[4.0, 1.0]);
        let attrs = Attributes(vec![("epsilon".into(), Attribute::Float(0.0))]);
        let ins = [Some(&x), Some(&scale), Some(&bias), Some(&mean), Some(&var)];
        let out = run_op("BatchNormalization", 15, &attrs, &ins).unwrap();
        assert_eq!(values(&out[0]), &[0.0, 0.5, 1.0, 3.0]);
        let training = Attributes(vec![("training_mode".into(), Attribute::Int(1))]);
        assert!(matches!(run_op("BatchNormalization", 15, &training, &ins), Err(OpError::Unsupported { .. })));
        assert!(matches!(
            run_op_outputs("BatchNormalization", 9, &Attributes::default(), &ins, 5),
            Err(OpError::Unsupported { .. })
        ));
    }
}
