//! Pooling: MaxPool (with the optional Indices output, row- or column-major), AveragePool, LpPool,
//! GlobalAveragePool, GlobalMaxPool, GlobalLpPool, MaxUnpool (`unpool.rs`) and LRN (local response
//! normalization across channels).

mod channels_last;
pub(crate) mod gpu;
mod unpool;

pub(crate) use channels_last::channels_last_pool;

use saggar_shape::{DType, Dim};

use self::gpu::{GlobalMode, LrnKernel, PoolMode, global_pool_launch, pool_launch};
use crate::ops::conv::{Axis, Window, check_len, check_out_dims, image_dims, typed_image_dims};
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, ext, numel};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpEntry, OpError, ValueType};
use crate::tensor::{DataRef, TensorMut};

/// The ops of this family. LpPool has dilations and ceil_mode from opset 18.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "MaxPool", since: 8, until: 24, build: build_max_pool },
    OpEntry { op_type: "AveragePool", since: 7, until: 24, build: build_average_pool },
    OpEntry { op_type: "LpPool", since: 2, until: 17, build: |c| build_lp_pool(c, false) },
    OpEntry { op_type: "LpPool", since: 18, until: 24, build: |c| build_lp_pool(c, true) },
    OpEntry { op_type: "GlobalAveragePool", since: 1, until: 24, build: |_| Ok(Box::new(GlobalPool(Global::Average))) },
    OpEntry { op_type: "GlobalMaxPool", since: 1, until: 24, build: |_| Ok(Box::new(GlobalPool(Global::Max))) },
    OpEntry { op_type: "GlobalLpPool", since: 2, until: 24, build: build_global_lp_pool },
    OpEntry { op_type: "MaxUnpool", since: 9, until: 24, build: unpool::build_max_unpool },
    OpEntry { op_type: "LRN", since: 1, until: 24, build: build_lrn },
];

/// What a pooling window computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reduce {
    /// The largest element (and, with `indices`, its flat position in the input).
    Max { indices: bool },
    /// The mean, dividing by the taps inside the input or, with `count_pad`, also those in the
    /// padding.
    Average { count_pad: bool },
    /// The `p`-norm of the taps inside the input (the padding adds zeros).
    Lp { p: u32 },
}

/// `MaxPool` / `AveragePool` / `LpPool`.
#[derive(Debug)]
struct Pool {
    window: Window,
    reduce: Reduce,
    /// MaxPool's `storage_order` 1: Indices count the spatial axes column-major (first axis
    /// fastest) within each (image, channel) plane.
    column_major: bool,
}

fn parse_window(ctx: &NodeCtx<'_>, with_ceil_mode: bool) -> Result<Window, OpError> {
    let window = Window::parse(ctx, with_ceil_mode)?;
    if window.kernel.is_empty() {
        return Err(OpError::attribute("kernel_shape", "is required"));
    }
    Ok(window)
}

/// MaxPool's (`max`) or AveragePool's op.
fn build_pool(ctx: &mut NodeCtx<'_>, max: bool) -> Result<Pool, OpError> {
    if max { max_pool(ctx) } else { average_pool(ctx) }
}

fn build_max_pool(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(max_pool(ctx)?))
}

fn build_average_pool(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(average_pool(ctx)?))
}

fn max_pool(ctx: &mut NodeCtx<'_>) -> Result<Pool, OpError> {
    let window = parse_window(ctx, true)?;
    let indices = ctx.num_outputs() > 1;
    let column_major = match ctx.int_or("storage_order", 0)? {
        0 => false,
        1 => true,
        other => return Err(ctx.unsupported("storage_order", other, "0 (row-major), 1 (column-major)")),
    };
    Ok(Pool { window, reduce: Reduce::Max { indices }, column_major })
}

fn average_pool(ctx: &mut NodeCtx<'_>) -> Result<Pool, OpError> {
    let window = parse_window(ctx, true)?;
    let count_pad = match ctx.int_or("count_include_pad", 0)? {
        0 => false,
        1 => true,
        other => return Err(OpError::attribute("count_include_pad", format!("must be 0 or 1, found {other}"))),
    };
    Ok(Pool { window, reduce: Reduce::Average { count_pad }, column_major: false })
}

/// The `p` attribute of LpPool and GlobalLpPool (default 2).
fn parse_p(ctx: &NodeCtx<'_>) -> Result<u32, OpError> {
    let p = ctx.int_or("p", 2)?;
    u32::try_from(p)
        .ok()
        .filter(|&p| p >= 1)
        .ok_or_else(|| OpError::attribute("p", format!("must be at least 1, found {p}")))
}

/// LpPool; `opset18` adds `dilations` and `ceil_mode`.
fn build_lp_pool(ctx: &mut NodeCtx<'_>, opset18: bool) -> Result<Box<dyn Op>, OpError> {
    let window = parse_window(ctx, opset18)?;
    if !opset18 && !window.dilations.is_empty() {
        return Err(ctx.unsupported("dilations", format!("{:?}", window.dilations), "none before opset 18"));
    }
    Ok(Box::new(Pool { window, reduce: Reduce::Lp { p: parse_p(ctx)? }, column_major: false }))
}

/// `|v|^p`, one tap's share of a `p`-norm.
fn lp_term(v: f32, p: u32) -> f32 {
    match p {
        1 => v.abs(),
        2 => v * v,
        _ => v.abs().powf(p as f32),
    }
}

/// The `p`-norm from the sum of its terms.
fn lp_root(sum: f32, p: u32) -> f32 {
    match p {
        1 => sum,
        2 => sum.sqrt(),
        _ => sum.powf(1.0 / p as f32),
    }
}

impl Op for Pool {
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let x = ctx.input(0)?;
            if x.dims.len() < 3 || self.window.kernel.len() != x.dims.len() - 2 {
                return Err(OpError::eval("pooling takes an (N, C, spatial...) input"));
            }
            let axes = self.window.resolve(&x.dims[2..], &self.window.kernel)?;
            let (mode, param) = match self.reduce {
                Reduce::Max { indices: true } => (PoolMode::MaxWithIndices, i64::from(self.column_major)),
                Reduce::Max { indices: false } => (PoolMode::Max, 0),
                Reduce::Average { count_pad } => (PoolMode::Average, i64::from(count_pad)),
                Reduce::Lp { p } => (PoolMode::Lp, i64::from(p)),
            };
            pool_launch(&axes, x.dims[0] * x.dims[1], mode, param, x.dtype, None)
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let ty = inputs.req(0)?.ty;
        // Max pooling also takes i8 and u8 (their values compare exactly as f32).
        let dtype = if matches!(self.reduce, Reduce::Max { .. }) && matches!(ty.dtype, DType::I8 | DType::U8) {
            ty.dtype
        } else {
            DType::F32
        };
        let x = typed_image_dims("pooling", ty, dtype)?;
        let kernel: Vec<Option<usize>> = self.window.kernel.iter().map(|&k| Some(k)).collect();
        if kernel.len() != x.len() - 2 {
            return Err(OpError::infer(format!(
                "kernel_shape {:?} does not match {} spatial axes",
                self.window.kernel,
                x.len() - 2
            )));
        }
        let mut dims = x[..2].to_vec();
        dims.extend(self.window.infer_spatial(&x[2..], &kernel)?);
        let mut out = vec![ValueType::new(dtype, dims.clone())];
        if self.reduce == (Reduce::Max { indices: true }) {
            out.push(ValueType::new(DType::I64, dims));
        }
        Ok(out)
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let xv = inputs.req(0)?;
        check_len("pooling", xv)?;
        let xd = xv.dims;
        if xd.len() < 3 || self.window.kernel.len() != xd.len() - 2 {
            return Err(OpError::eval(format!("pooling: input {xd:?} does not match the kernel")));
        }
        let axes = self.window.resolve(&xd[2..], &self.window.kernel)?;
        let expected = || xd[..2].iter().copied().chain(axes.iter().map(|a| a.output));
        for out in outputs.iter() {
            check_out_dims("pooling", out.dims, expected())?;
        }
        let x: std::borrow::Cow<'_, [f32]> = match xv.data {
            DataRef::I8(v) => v.iter().map(|&b| f32::from(b)).collect(),
            DataRef::U8(v) => v.iter().map(|&b| f32::from(b)).collect(),
            _ => xv.floats()?,
        };
        let (first, rest) = outputs.split_first_mut().ok_or_else(|| OpError::eval("pooling needs an output"))?;
        // i8 and u8 inputs (max pooling) are pooled as their exact f32 values and stored back.
        let mut widened = Vec::new();
        let y: &mut [f32] = match &mut first.data {
            crate::tensor::DataMut::F32(y) => y,
            other => {
                widened.resize(other.len(), 0.0);
                &mut widened
            }
        };
        let mut indices = match (self.reduce, rest.first_mut()) {
            (Reduce::Max { indices: true }, Some(i)) => Some(i.i64s()?),
            (Reduce::Max { indices: true }, None) => return Err(OpError::eval("MaxPool: missing Indices output")),
            _ => None,
        };
        let d_in: usize = xd[2..].iter().product();
        let plane: usize = axes.iter().map(|a| a.output).product();
        let rank = axes.len();
        let (mut pos, mut tap) = (vec![0usize; rank], vec![0usize; rank]);
        let taps: usize = axes.iter().map(|a| a.kernel).product();
        let in_strides = crate::ops::shape_util::strides(&xd[2..]);
        let lp = if let Reduce::Lp { p } = self.reduce { Some(p) } else { None };
        for (plane_at, yp) in y.chunks_exact_mut(plane.max(1)).enumerate().take(xd[0] * xd[1]) {
            let xp = &x[plane_at * d_in..(plane_at + 1) * d_in];
            pos.fill(0);
            for (o, yv) in yp.iter_mut().enumerate() {
                let (mut best, mut best_at, mut sum, mut inside, mut padded) =
                    (f32::NEG_INFINITY, 0usize, 0.0f32, 0, 0);
                tap.fill(0);
                for _ in 0..taps {
                    match tap_offset(&axes, &pos, &tap, &in_strides) {
                        TapAt::Input(at) => {
                            let v = xp[at];
                            if v > best || (inside == 0 && v.is_nan()) {
                                (best, best_at) = (v, at);
                            }
                            sum += lp.map_or(v, |p| lp_term(v, p));
                            inside += 1;
                        }
                        TapAt::Padding => padded += 1,
                        TapAt::Beyond => {}
                    }
                    advance(&mut tap, |a| axes[a].kernel);
                }
                *yv = match self.reduce {
                    Reduce::Max { .. } => best,
                    Reduce::Average { count_pad } => {
                        let n = if count_pad { inside + padded } else { inside };
                        if n == 0 { 0.0 } else { sum / n as f32 }
                    }
                    Reduce::Lp { p } => lp_root(sum, p),
                };
                if let Some(ix) = indices.as_deref_mut()
                    && let Some(slot) = ix.get_mut(plane_at * plane + o)
                {
                    let at = if self.column_major { column_major(best_at, &xd[2..], &in_strides) } else { best_at };
                    *slot = (plane_at * d_in + at) as i64;
                }
                advance(&mut pos, |a| axes[a].output);
            }
        }
        if !widened.is_empty() {
            crate::tensor::cast_into(DataRef::F32(&widened), &mut first.data)?;
        }
        Ok(())
    }
}

/// A row-major offset within a plane of `dims` (row-major `strides`) as a column-major offset.
fn column_major(row_major: usize, dims: &[usize], strides: &[usize]) -> usize {
    let (mut offset, mut stride) = (0, 1);
    for (&d, &s) in dims.iter().zip(strides) {
        offset += (row_major / s) % d * stride;
        stride *= d;
    }
    offset
}

/// Where one kernel tap of one output position reads.
enum TapAt {
    /// Inside the input, at this offset of the plane.
    Input(usize),
    /// In the explicit or automatic padding.
    Padding,
    /// Past the padded input (a ceil-mode window).
    Beyond,
}

fn tap_offset(axes: &[Axis], pos: &[usize], tap: &[usize], in_strides: &[usize]) -> TapAt {
    let mut at = 0;
    let mut padding = false;
    for (a, axis) in axes.iter().enumerate() {
        let i = axis.coord(pos[a], tap[a]);
        if i < -(axis.pad_begin as isize) || i >= (axis.input + axis.pad_end) as isize {
            return TapAt::Beyond;
        }
        if i < 0 || i >= axis.input as isize {
            padding = true;
        } else {
            at += i as usize * in_strides[a];
        }
    }
    if padding { TapAt::Padding } else { TapAt::Input(at) }
}

/// Advances a row-major multi-index over `extents`, wrapping to zeros after the last.
fn advance(index: &mut [usize], extents: impl Fn(usize) -> usize) {
    for a in (0..index.len()).rev() {
        index[a] += 1;
        if index[a] < extents(a) {
            return;
        }
        index[a] = 0;
    }
}

/// What a global pooling computes over each (image, channel) plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Global {
    Average,
    Max,
    /// The `p`-norm.
    Lp(u32),
}

/// `GlobalAveragePool` / `GlobalMaxPool` / `GlobalLpPool`: one value per (image, channel).
#[derive(Debug)]
struct GlobalPool(Global);

fn build_global_lp_pool(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(GlobalPool(Global::Lp(parse_p(ctx)?))))
}

impl Op for GlobalPool {
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let x = ctx.input(0)?;
            if x.dims.len() < 3 {
                return Err(OpError::eval("global pooling takes an (N, C, spatial...) input"));
            }
            let (mode, p) = match self.0 {
                Global::Average => (GlobalMode::Average, 0),
                Global::Max => (GlobalMode::Max, 0),
                Global::Lp(p) => (GlobalMode::Lp, p),
            };
            Ok(global_pool_launch(mode, x.dims[0] * x.dims[1], x.dims[2..].iter().product(), p))
        })())
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = image_dims("global pooling", inputs.req(0)?.ty)?;
        let mut dims = x[..2].to_vec();
        dims.resize(x.len(), Dim::Fixed(1));
        Ok(vec![ValueType::new(DType::F32, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let xv = inputs.req(0)?;
        check_len("global pooling", xv)?;
        if xv.dims.len() < 3 {
            return Err(OpError::eval("global pooling takes an (N, C, spatial...) input"));
        }
        let planes = xv.dims[0] * xv.dims[1];
        let d_in: usize = xv.dims[2..].iter().product();
        let x = xv.f32s()?;
        let y = outputs[0].f32s()?;
        if y.len() != planes {
            return Err(OpError::eval("global pooling: output does not match the input"));
        }
        if d_in == 0 {
            y.fill(match self.0 {
                Global::Average => f32::NAN,
                Global::Max => f32::NEG_INFINITY,
                Global::Lp(_) => 0.0,
            });
            return Ok(());
        }
        for (yv, xp) in y.iter_mut().zip(x.chunks_exact(d_in)) {
            *yv = match self.0 {
                Global::Average => xp.iter().sum::<f32>() / d_in as f32,
                Global::Max => xp.iter().copied().fold(f32::NEG_INFINITY, f32::max),
                Global::Lp(p) => lp_root(xp.iter().map(|&v| lp_term(v, p)).sum(), p),
            };
        }
        Ok(())
    }
}

/// `LRN`: `y = x / (bias + alpha / size * sum of x² over nearby channels) ^ beta`.
#[derive(Debug)]
struct Lrn {
    alpha: f32,
    beta: f32,
    bias: f32,
    size: usize,
}

fn build_lrn(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let size = ctx.int("size")?.ok_or_else(|| OpError::attribute("size", "is required"))?;
    let size = usize::try_from(size)
        .ok()
        .filter(|s| (1..=1 << 20).contains(s))
        .ok_or_else(|| OpError::attribute("size", format!("must be in 1..=2^20, found {size}")))?;
    Ok(Box::new(Lrn {
        alpha: ctx.float_or("alpha", 1e-4)?,
        beta: ctx.float_or("beta", 0.75)?,
        bias: ctx.float_or("bias", 1.0)?,
        size,
    }))
}

impl Op for Lrn {
    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let x = ctx.input(0)?;
            if x.dims.len() < 2 {
                return Err(OpError::eval("LRN takes an (N, C, ...) input"));
            }
            let (before, after) = ((self.size - 1) / 2, (self.size - 1).div_ceil(2));
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                LrnKernel {
                    scale_bits: (self.alpha / self.size as f32).to_bits(),
                    beta_bits: self.beta.to_bits(),
                    bias_bits: self.bias.to_bits(),
                },
                vec![ext(x.dims[0]), ext(x.dims[1]), numel(&x.dims[2..]) as i64, ext(before), ext(after)],
                Work::Elements(numel(&x.dims)),
                vec![Slot::In(0), Slot::Out(0)],
            )]))
        })())
    }
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        if x.dtype != DType::F32 || x.rank() < 2 {
            return Err(OpError::infer(format!("LRN takes an f32 (N, C, ...) input, found {x}")));
        }
        Ok(vec![x.clone()])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let xv = inputs.req(0)?;
        check_len("LRN", xv)?;
        if xv.dims.len() < 2 {
            return Err(OpError::eval("LRN takes an (N, C, ...) input"));
        }
        let c = xv.dims[1];
        let plane: usize = xv.dims[2..].iter().product();
        let x = xv.f32s()?;
        let y = outputs[0].f32s()?;
        if y.len() != x.len() {
            return Err(OpError::eval("LRN: output does not match the input"));
        }
        let (before, after) = ((self.size - 1) / 2, (self.size - 1).div_ceil(2));
        let scale = self.alpha / self.size as f32;
        let image = c * plane;
        if image == 0 {
            return Ok(());
        }
        for (yi, xi) in y.chunks_exact_mut(image).zip(x.chunks_exact(image)) {
            for ch in 0..c {
                let (lo, hi) = (ch.saturating_sub(before), (ch + after).min(c - 1));
                for s in 0..plane {
                    let sq: f32 = (lo..=hi).map(|k| xi[k * plane + s] * xi[k * plane + s]).sum();
                    let v = xi[ch * plane + s];
                    yi[ch * plane + s] = v / (self.bias + scale * sq).powf(self.beta);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{f32s, ints, run_op, run_op_outputs, values};
    use crate::ops::{Attribute, Attributes, OpError};
    use crate::tensor::{Tensor, TensorData};

    fn grid4() -> Tensor {
        f32s(&[1, 1, 4, 4], &(1..=16).map(|v| v as f32).collect::<Vec<_>>())
    }

    #[test]
    fn max_pool_ceil_mode_and_indices() {
        // 4x4, kernel 3, stride 2: floor gives 1x1, ceil gives 2x2 (last windows clipped).
        let x = grid4();
        let floor = Attributes(vec![("kernel_shape".into(), ints(&[3, 3])), ("strides".into(), ints(&[2, 2]))]);
        let out = run_op("MaxPool", 12, &floor, &[Some(&x)]).unwrap();
        assert_eq!(out[0].dims(), &[1, 1, 1, 1]);
        assert_eq!(values(&out[0]), &[11.0]);
        let mut ceil = floor.clone();
        ceil.set("ceil_mode", Attribute::Int(1));
        let out = run_op_outputs("MaxPool", 12, &ceil, &[Some(&x)], 2).unwrap();
        assert_eq!(out[0].dims(), &[1, 1, 2, 2]);
        assert_eq!(values(&out[0]), &[11.0, 12.0, 15.0, 16.0]);
        assert_eq!(out[1].data(), &TensorData::I64(vec![10, 11, 14, 15]));
        // A window that would start past the input is dropped: 2 wide, kernel 1, stride 2 gives
        // ceil(1 / 2) + 1 = 2 windows, the second starting at 2, so only 1 output.
        let x2 = f32s(&[1, 1, 2], &[3.0, 7.0]);
        let attrs = Attributes(vec![
            ("kernel_shape".into(), ints(&[1])),
            ("strides".into(), ints(&[2])),
            ("ceil_mode".into(), Attribute::Int(1)),
        ]);
        let out = run_op("MaxPool", 12, &attrs, &[Some(&x2)]).unwrap();
        assert_eq!(values(&out[0]), &[3.0]);
        // Column-major indices count rows fastest: (2, 2) -> 10, (2, 3) -> 14, (3, 2) -> 11, (3, 3) -> 15.
        let mut col_major = ceil.clone();
        col_major.set("storage_order", Attribute::Int(1));
        let out = run_op_outputs("MaxPool", 12, &col_major, &[Some(&x)], 2).unwrap();
        assert_eq!(out[1].data(), &TensorData::I64(vec![10, 14, 11, 15]));
        col_major.set("storage_order", Attribute::Int(2));
        assert!(matches!(run_op_outputs("MaxPool", 12, &col_major, &[Some(&x)], 2), Err(OpError::Unsupported { .. })));
        assert!(run_op("MaxPool", 12, &Attributes::default(), &[Some(&x)]).is_err());
    }

    #[test]
    fn max_pool_dilated_and_same_upper() {
        let x = grid4();
        let attrs = Attributes(vec![("kernel_shape".into(), ints(&[2, 2])), ("dilations".into(), ints(&[2, 2]))]);
        let out = run_op("MaxPool", 12, &attrs, &[Some(&x)]).unwrap();
        assert_eq!(values(&out[0]), &[11.0, 12.0, 15.0, 16.0]);
        let same = Attributes(vec![
            ("kernel_shape".into(), ints(&[2, 2])),
            ("auto_pad".into(), Attribute::String(b"SAME_UPPER".to_vec())),
        ]);
        let out = run_op("MaxPool", 12, &same, &[Some(&x)]).unwrap();
        assert_eq!(out[0].dims(), &[1, 1, 4, 4]);
        assert_eq!(&values(&out[0])[12..], &[14.0, 15.0, 16.0, 16.0]);
    }

    #[test]
    fn average_pool_counts_padding_only_when_asked() {
        let x = f32s(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let mut attrs = Attributes(vec![("kernel_shape".into(), ints(&[2, 2])), ("pads".into(), ints(&[1, 1, 1, 1]))]);
        let out = run_op("AveragePool", 11, &attrs, &[Some(&x)]).unwrap();
        assert_eq!(out[0].dims(), &[1, 1, 3, 3]);
        assert_eq!(values(&out[0]), &[1.0, 1.5, 2.0, 2.0, 2.5, 3.0, 3.0, 3.5, 4.0]);
        attrs.set("count_include_pad", Attribute::Int(1));
        let out = run_op("AveragePool", 11, &attrs, &[Some(&x)]).unwrap();
        assert_eq!(values(&out[0]), &[0.25, 0.75, 0.5, 1.0, 2.5, 1.5, 0.75, 1.75, 1.0]);
        // Ceil mode: a 3-wide input, kernel 2, stride 2 gives a last window of one element.
        let row = f32s(&[1, 1, 3], &[2.0, 4.0, 9.0]);
        let ceil = Attributes(vec![
            ("kernel_shape".into(), ints(&[2])),
            ("strides".into(), ints(&[2])),
            ("ceil_mode".into(), Attribute::Int(1)),
        ]);
        assert_eq!(values(&run_op("AveragePool", 11, &ceil, &[Some(&row)]).unwrap()[0]), &[3.0, 9.0]);
    }

    fn close(got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn lp_pool_norms_pads_and_ceil_mode_from_18() {
        let x = f32s(&[1, 1, 4], &[1.0, -2.0, 3.0, -4.0]);
        let run = |opset: u32, list: Vec<(&str, Attribute)>, x: &Tensor| {
            let attrs = Attributes(list.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
            run_op("LpPool", opset, &attrs, &[Some(x)]).map(|o| values(&o[0]).to_vec())
        };
        let window = |p: i64| vec![("kernel_shape", ints(&[2])), ("strides", ints(&[2])), ("p", Attribute::Int(p))];
        close(&run(11, window(1), &x).unwrap(), &[3.0, 7.0]);
        close(&run(11, window(2), &x).unwrap(), &[5f32.sqrt(), 5.0]);
        close(&run(18, window(3), &x).unwrap(), &[9f32.cbrt(), 91f32.cbrt()]);
        // p defaults to 2; the padding adds zeros.
        let default_p = vec![("kernel_shape", ints(&[2])), ("strides", ints(&[2])), ("pads", ints(&[1, 1]))];
        close(&run(2, default_p, &x).unwrap(), &[1.0, 13f32.sqrt(), 4.0]);
        // Ceil mode (opset 18): a 5-wide input gives a last window of one element.
        let x5 = f32s(&[1, 1, 5], &[1.0, -2.0, 3.0, -4.0, 5.0]);
        let mut ceil = window(1);
        ceil.push(("ceil_mode", Attribute::Int(1)));
        close(&run(18, ceil.clone(), &x5).unwrap(), &[3.0, 7.0, 5.0]);
        assert!(matches!(run(11, ceil, &x5), Err(OpError::Unsupported { .. })), "no ceil_mode before 18");
        let mut dilated = window(1);
        dilated.push(("dilations", ints(&[2])));
        close(&run(18, dilated.clone(), &x5).unwrap(), &[4.0, 8.0]);
        assert!(matches!(run(11, dilated, &x5), Err(OpError::Unsupported { .. })), "no dilations before 18");
        assert!(matches!(run(18, window(0), &x), Err(OpError::Attribute { .. })));
        assert!(matches!(run(18, vec![("kernel_shape", ints(&[0]))], &x), Err(OpError::Attribute { .. })));
        assert!(matches!(
            run(18, vec![("kernel_shape", ints(&[2])), ("strides", ints(&[0]))], &x),
            Err(OpError::Attribute { .. })
        ));
        // Pads leaving no window: kernel 7 over 4 + 1 + 1.
        assert!(matches!(
            run(18, vec![("kernel_shape", ints(&[7])), ("pads", ints(&[1, 1]))], &x),
            Err(OpError::Infer(_))
        ));
        // 2-D.
        let grid = f32s(&[1, 1, 2, 2], &[3.0, 4.0, 0.0, 0.0]);
        close(&run(18, vec![("kernel_shape", ints(&[2, 2]))], &grid).unwrap(), &[5.0]);
    }

    #[test]
    fn global_lp_pool_per_plane() {
        let x = f32s(&[1, 2, 2], &[3.0, 4.0, 1.0, -2.0]);
        let run = |p: i64| {
            let attrs = Attributes(vec![("p".into(), Attribute::Int(p))]);
            let out = run_op("GlobalLpPool", 2, &attrs, &[Some(&x)]).unwrap();
            assert_eq!(out[0].dims(), &[1, 2, 1]);
            values(&out[0]).to_vec()
        };
        close(&run(1), &[7.0, 3.0]);
        close(&run(2), &[5.0, 5f32.sqrt()]);
        close(&run(3), &[91f32.cbrt(), 9f32.cbrt()]);
        let out = run_op("GlobalLpPool", 2, &Attributes::default(), &[Some(&x)]).unwrap();
        close(values(&out[0]), &[5.0, 5f32.sqrt()]);
        let bad = Attributes(vec![("p".into(), Attribute::Int(-1))]);
        assert!(matches!(run_op("GlobalLpPool", 2, &bad, &[Some(&x)]), Err(OpError::Attribute { .. })));
    }

    #[test]
    fn global_pools_and_lrn() {
        let x = f32s(&[1, 2, 2], &[1.0, 3.0, -1.0, -5.0]);
        let avg = run_op("GlobalAveragePool", 1, &Attributes::default(), &[Some(&x)]).unwrap();
        assert_eq!(avg[0].dims(), &[1, 2, 1]);
        assert_eq!(values(&avg[0]), &[2.0, -3.0]);
        let max = run_op("GlobalMaxPool", 1, &Attributes::default(), &[Some(&x)]).unwrap();
        assert_eq!(values(&max[0]), &[3.0, -1.0]);

        // LRN over 3 channels with size 2: each channel sums itself and the one after it.
        let x = f32s(&[1, 3, 1], &[1.0, 2.0, 3.0]);
        let attrs = Attributes(vec![
            ("size".into(), Attribute::Int(2)),
            ("alpha".into(), Attribute::Float(2.0)),
            ("beta".into(), Attribute::Float(1.0)),
            ("bias".into(), Attribute::Float(1.0)),
        ]);
        let out = run_op("LRN", 13, &attrs, &[Some(&x)]).unwrap();
        // size 2: window [c - 0, c + 1]; scale alpha / size = 1.
        let want = [1.0 / (1.0 + 1.0 + 4.0), 2.0 / (1.0 + 4.0 + 9.0), 3.0 / (1.0 + 9.0)];
        for (g, w) in values(&out[0]).iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{g} vs {w}");
        }
        assert!(matches!(run_op("LRN", 13, &Attributes::default(), &[Some(&x)]), Err(OpError::Attribute { .. })));
    }
}
