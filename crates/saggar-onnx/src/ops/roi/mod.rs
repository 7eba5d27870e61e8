//! Pooling over regions of interest: RoiAlign (opsets 10 and 16: average or max of bilinear samples
//! on a regular grid in each output bin) and MaxRoiPool (opset 1: the maximum over the input cells of
//! each bin of a rounded region, Caffe's RoIPool), both on `(N, C, H, W)` f32 inputs.
//!
//! A region's batch index out of range or a non-finite region is an evaluation error on the host;
//! on GPU such a region's output is 0 (kernels cannot fail), as a gather's out-of-range index
//! reads 0. RoiAlign's adaptive sampling grid (`sampling_ratio` 0: `ceil(roi extent / bins)` samples
//! per bin and axis) is refused on the host above [`MAX_ROI_GRID`] and clamped there on GPU.

pub(crate) mod gpu;
#[cfg(test)]
mod tests;

use saggar_shape::{DType, Dim};

use self::gpu::{MaxRoiPoolKernel, RoiAlignKernel};
use crate::ops::conv::{check_len, check_out_dims, fixed, image_dims};
use crate::ops::data_movement::index_at;
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, Slot, Work, ext, numel};
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpEntry, OpError, ValueType};
use crate::tensor::TensorMut;

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "RoiAlign", since: 10, until: 15, build: build_roi_align },
    OpEntry { op_type: "RoiAlign", since: 16, until: 24, build: build_roi_align },
    OpEntry { op_type: "MaxRoiPool", since: 1, until: 24, build: build_max_roi_pool },
];

/// Most samples per bin and axis of RoiAlign (the adaptive grid of a huge region is refused).
pub(crate) const MAX_ROI_GRID: usize = 4096;

/// Largest output extent of a bin grid attribute.
const MAX_BINS: i64 = 1 << 16;

/// `RoiAlign`.
#[derive(Debug)]
struct RoiAlign {
    /// `mode` max (else avg).
    max: bool,
    /// `coordinate_transformation_mode` half_pixel (opset 16's default); opset 10 behaves as
    /// output_half_pixel.
    half_pixel: bool,
    out_h: usize,
    out_w: usize,
    /// 0: adaptive.
    sampling_ratio: usize,
    spatial_scale: f32,
}

/// A bin-count attribute in `1..=2^16`.
fn bins(name: &str, v: i64) -> Result<usize, OpError> {
    if (1..=MAX_BINS).contains(&v) {
        Ok(v as usize)
    } else {
        Err(OpError::attribute(name, format!("values must be in 1..={MAX_BINS}, found {v}")))
    }
}

fn build_roi_align(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let max = match ctx.string_or("mode", "avg")?.as_str() {
        "avg" => false,
        "max" => true,
        other => return Err(ctx.unsupported("mode", other, "avg, max")),
    };
    let half_pixel = if ctx.opset() >= 16 {
        match ctx.string_or("coordinate_transformation_mode", "half_pixel")?.as_str() {
            "half_pixel" => true,
            "output_half_pixel" => false,
            other => {
                return Err(ctx.unsupported("coordinate_transformation_mode", other, "half_pixel, output_half_pixel"));
            }
        }
    } else {
        false
    };
    let out_h = bins("output_height", ctx.int_or("output_height", 1)?)?;
    let out_w = bins("output_width", ctx.int_or("output_width", 1)?)?;
    let ratio = ctx.int_or("sampling_ratio", 0)?;
    let sampling_ratio = usize::try_from(ratio)
        .ok()
        .filter(|&r| r <= MAX_ROI_GRID)
        .ok_or_else(|| OpError::attribute("sampling_ratio", format!("must be in 0..={MAX_ROI_GRID}, found {ratio}")))?;
    let spatial_scale = ctx.float_or("spatial_scale", 1.0)?;
    if !spatial_scale.is_finite() {
        return Err(OpError::attribute("spatial_scale", format!("must be finite, found {spatial_scale}")));
    }
    Ok(Box::new(RoiAlign { max, half_pixel, out_h, out_w, sampling_ratio, spatial_scale }))
}

/// The checked shapes of a region op: `(N, C, H, W)` of `x` and the region count, from `x`,
/// `rois` (`[R, cols]`) and, for RoiAlign, `batch_indices` (`[R]`).
fn region_dims(
    op: &str,
    x: &[usize],
    rois: &[usize],
    cols: usize,
    idx: Option<&[usize]>,
) -> Result<[usize; 5], OpError> {
    let ok = x.len() == 4 && rois.len() == 2 && rois[1] == cols && idx.is_none_or(|i| i == [rois[0]]);
    if !ok {
        return Err(OpError::eval(format!(
            "{op} takes X (N, C, H, W), rois (R, {cols}){}; found {x:?}, {rois:?}{}",
            if idx.is_some() { " and batch_indices (R)" } else { "" },
            idx.map(|i| format!(", {i:?}")).unwrap_or_default()
        )));
    }
    if x[2] == 0 || x[3] == 0 {
        return Err(OpError::eval(format!("{op}: the input {x:?} has an empty spatial axis")));
    }
    Ok([x[0], x[1], x[2], x[3], rois[0]])
}

/// Inference of a region op: f32 `(N, C, H, W)` and `[R, cols]` regions give `[R, C, bins...]`.
fn infer_regions(op: &str, inputs: &InferInputs<'_>, cols: usize, bins: [usize; 2]) -> Result<Vec<ValueType>, OpError> {
    let x = image_dims(op, inputs.req(0)?.ty)?;
    let rois = inputs.req(1)?.ty;
    if x.len() != 4 {
        return Err(OpError::infer(format!("{op} takes a 4-D input (N, C, H, W), found rank {}", x.len())));
    }
    if rois.dtype != DType::F32 || rois.rank() != 2 || fixed(&rois.dims[1]).is_some_and(|c| c != cols) {
        return Err(OpError::infer(format!("{op} rois must be f32 [R, {cols}], found {rois}")));
    }
    let mut regions = rois.dims[0].clone();
    if let Some(idx) = inputs.get(2) {
        let ty = idx.ty;
        if !matches!(ty.dtype, DType::I64 | DType::I32) || ty.rank() != 1 {
            return Err(OpError::infer(format!("{op} batch_indices must be a 1-D int64 tensor, found {ty}")));
        }
        match (fixed(&regions), fixed(&ty.dims[0])) {
            (Some(a), Some(b)) if a != b => {
                return Err(OpError::infer(format!("{op}: {a} rois but {b} batch indices")));
            }
            (None, Some(_)) => regions = ty.dims[0].clone(),
            _ => {}
        }
    }
    let dims = vec![regions, x[1].clone(), Dim::Fixed(bins[0] as u64), Dim::Fixed(bins[1] as u64)];
    Ok(vec![ValueType::new(DType::F32, dims)])
}

/// The head of both kernels' `meta`: output elements, N, C, H, W, regions.
fn meta_head(out: &[usize], dims: [usize; 5]) -> Vec<i64> {
    [numel(out) as i64].into_iter().chain(dims.map(ext)).collect()
}

/// A batch index of a region, checked against the batch `n`.
fn batch_of(op: &str, b: i64, n: usize) -> Result<usize, OpError> {
    usize::try_from(b)
        .ok()
        .filter(|&b| b < n)
        .ok_or_else(|| OpError::eval(format!("{op}: batch index {b} is out of range for a batch of {n}")))
}

/// One RoiAlign region's geometry: the start and bin size per axis and the samples per bin.
#[derive(Debug, Clone, Copy)]
struct AlignRegion {
    start: [f32; 2],
    bin: [f32; 2],
    grid: [usize; 2],
}

impl RoiAlign {
    /// The geometry of region `roi` (`x1, y1, x2, y2`), as the reference computes it in f32.
    fn region(&self, roi: &[f32]) -> Result<AlignRegion, OpError> {
        if roi.iter().any(|v| !v.is_finite()) {
            return Err(OpError::eval(format!("RoiAlign region {roi:?} is not finite")));
        }
        let offset = if self.half_pixel { 0.5 } else { 0.0 };
        let s = self.spatial_scale;
        let (start_w, start_h) = (roi[0] * s - offset, roi[1] * s - offset);
        let (end_w, end_h) = (roi[2] * s - offset, roi[3] * s - offset);
        let (mut h, mut w) = (end_h - start_h, end_w - start_w);
        if !self.half_pixel {
            // Malformed regions are forced to 1x1.
            h = h.max(1.0);
            w = w.max(1.0);
        }
        let bin = [h / self.out_h as f32, w / self.out_w as f32];
        let grid = |extent: f32, n: usize| -> Result<usize, OpError> {
            if self.sampling_ratio > 0 {
                return Ok(self.sampling_ratio);
            }
            let g = (extent / n as f32).ceil().max(0.0);
            if g > MAX_ROI_GRID as f32 {
                return Err(OpError::eval(format!(
                    "RoiAlign region {roi:?} needs {g} samples per bin and axis, above {MAX_ROI_GRID}; set sampling_ratio"
                )));
            }
            Ok(g as usize)
        };
        Ok(AlignRegion { start: [start_h, start_w], bin, grid: [grid(h, self.out_h)?, grid(w, self.out_w)?] })
    }
}

/// The bilinear sample of a `height x width` plane at `(y, x)`: four cell offsets and weights, or
/// `None` outside `[-1, height] x [-1, width]` (the reference's `pre_calc_for_bilinear_interpolate`).
fn bilinear(y: f32, x: f32, height: usize, width: usize) -> Option<[(usize, f32); 4]> {
    let (hf, wf) = (height as f32, width as f32);
    if y < -1.0 || y > hf || x < -1.0 || x > wf {
        return None;
    }
    let (y, y_low, y_high) = axis_cells(y, height);
    let (x, x_low, x_high) = axis_cells(x, width);
    let (ly, lx) = (y - y_low as f32, x - x_low as f32);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    Some([
        (y_low * width + x_low, hy * hx),
        (y_low * width + x_high, hy * lx),
        (y_high * width + x_low, ly * hx),
        (y_high * width + x_high, ly * lx),
    ])
}

/// One axis of [`bilinear`]: the coordinate clamped to `[0, len - 1]` with its low and high cells
/// (the same cell at the far edge).
fn axis_cells(v: f32, len: usize) -> (f32, usize, usize) {
    let v = v.max(0.0);
    let low = v as usize;
    if low >= len - 1 { ((len - 1) as f32, len - 1, len - 1) } else { (v, low, low + 1) }
}

impl Op for RoiAlign {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        inputs.req(2)?;
        infer_regions("RoiAlign", inputs, 4, [self.out_h, self.out_w])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (xv, rv, iv) = (inputs.req(0)?, inputs.req(1)?, inputs.req(2)?);
        check_len("RoiAlign", xv)?;
        check_len("RoiAlign", rv)?;
        let [n, c, height, width, regions] = region_dims("RoiAlign", xv.dims, rv.dims, 4, Some(iv.dims))?;
        check_out_dims("RoiAlign", outputs[0].dims, [regions, c, self.out_h, self.out_w])?;
        let (x, rois, y) = (xv.f32s()?, rv.f32s()?, outputs[0].f32s()?);
        let plane = height * width;
        let bins = self.out_h * self.out_w;
        for r in 0..regions {
            let b = batch_of("RoiAlign", index_at(iv, r)?, n)?;
            let geo = self.region(&rois[r * 4..r * 4 + 4])?;
            let count = (geo.grid[0] * geo.grid[1]).max(1) as f32;
            for ch in 0..c {
                let xp = &x[(b * c + ch) * plane..(b * c + ch + 1) * plane];
                for bin in 0..bins {
                    let (ph, pw) = ((bin / self.out_w) as f32, (bin % self.out_w) as f32);
                    let mut acc: Option<f32> = None;
                    for iy in 0..geo.grid[0] {
                        let yy = geo.start[0] + ph * geo.bin[0] + (iy as f32 + 0.5) * geo.bin[0] / geo.grid[0] as f32;
                        for ix in 0..geo.grid[1] {
                            let xx =
                                geo.start[1] + pw * geo.bin[1] + (ix as f32 + 0.5) * geo.bin[1] / geo.grid[1] as f32;
                            let taps = bilinear(yy, xx, height, width);
                            let v = if self.max {
                                taps.map_or(0.0, |t| {
                                    t.iter().map(|&(o, w)| w * xp[o]).fold(f32::NEG_INFINITY, f32::max)
                                })
                            } else {
                                taps.map_or(0.0, |t| t.iter().map(|&(o, w)| w * xp[o]).sum())
                            };
                            acc = Some(match acc {
                                None => v,
                                Some(a) if self.max => a.max(v),
                                Some(a) => a + v,
                            });
                        }
                    }
                    let v = acc.unwrap_or(0.0);
                    y[(r * c + ch) * bins + bin] = if self.max { v } else { v / count };
                }
            }
        }
        Ok(())
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let (x, rois, idx, out) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?, ctx.output(0)?);
            let [n, c, height, width, regions] = region_dims("RoiAlign", &x.dims, &rois.dims, 4, Some(&idx.dims))?;
            let mut meta = meta_head(&out.dims, [n, c, height, width, regions]);
            meta.extend([
                ext(self.out_h),
                ext(self.out_w),
                ext(self.sampling_ratio),
                i64::from(self.spatial_scale.to_bits() as i32),
                i64::from(self.half_pixel),
                i64::from(self.max),
            ]);
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                RoiAlignKernel { index: idx.dtype },
                meta,
                Work::Elements(numel(&out.dims)),
                vec![Slot::In(0), Slot::In(1), Slot::In(2), Slot::Out(0)],
            )]))
        })())
    }
}

/// `MaxRoiPool`.
#[derive(Debug)]
struct MaxRoiPool {
    pooled: [usize; 2],
    spatial_scale: f32,
}

fn build_max_roi_pool(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let shape = ctx.ints("pooled_shape")?.ok_or_else(|| OpError::attribute("pooled_shape", "is required"))?;
    let [h, w] = shape[..] else {
        return Err(OpError::attribute("pooled_shape", format!("must hold 2 values, found {shape:?}")));
    };
    let spatial_scale = ctx.float_or("spatial_scale", 1.0)?;
    if !spatial_scale.is_finite() {
        return Err(OpError::attribute("spatial_scale", format!("must be finite, found {spatial_scale}")));
    }
    let pooled = [bins("pooled_shape", h)?, bins("pooled_shape", w)?];
    Ok(Box::new(MaxRoiPool { pooled, spatial_scale }))
}

/// Region coordinates are held within +-2^30 before rounding to cells.
const CELL_LIMIT: f32 = 1_073_741_824.0;

impl MaxRoiPool {
    /// The batch index and the rounded region `[start_h, start_w, end_h, end_w]` of `roi`
    /// (`batch, x1, y1, x2, y2`).
    fn region(&self, roi: &[f32], n: usize) -> Result<(usize, [i64; 4]), OpError> {
        if roi.iter().any(|v| !v.is_finite()) {
            return Err(OpError::eval(format!("MaxRoiPool region {roi:?} is not finite")));
        }
        let batch = batch_of("MaxRoiPool", roi[0] as i64, n)?;
        let cell = |v: f32| (v * self.spatial_scale).round().clamp(-CELL_LIMIT, CELL_LIMIT) as i64;
        Ok((batch, [cell(roi[2]), cell(roi[1]), cell(roi[4]), cell(roi[3])]))
    }

    /// The cells `[start, end)` of bin `p` along an axis of `len` for a region from `lo` to `hi`.
    fn bin_cells(&self, p: usize, axis: usize, (lo, hi): (i64, i64), len: usize) -> (usize, usize) {
        let extent = (hi - lo + 1).max(1) as f32;
        let size = extent / self.pooled[axis] as f32;
        let start = (p as f32 * size).floor() as i64 + lo;
        let end = ((p + 1) as f32 * size).ceil() as i64 + lo;
        (start.clamp(0, len as i64) as usize, end.clamp(0, len as i64) as usize)
    }
}

impl Op for MaxRoiPool {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        infer_regions("MaxRoiPool", inputs, 5, self.pooled)
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (xv, rv) = (inputs.req(0)?, inputs.req(1)?);
        check_len("MaxRoiPool", xv)?;
        check_len("MaxRoiPool", rv)?;
        let [n, c, height, width, regions] = region_dims("MaxRoiPool", xv.dims, rv.dims, 5, None)?;
        let [ph_n, pw_n] = self.pooled;
        check_out_dims("MaxRoiPool", outputs[0].dims, [regions, c, ph_n, pw_n])?;
        let (x, rois, y) = (xv.f32s()?, rv.f32s()?, outputs[0].f32s()?);
        for r in 0..regions {
            let (b, [sh, sw, eh, ew]) = self.region(&rois[r * 5..r * 5 + 5], n)?;
            for ch in 0..c {
                let xp = &x[(b * c + ch) * height * width..(b * c + ch + 1) * height * width];
                for ph in 0..ph_n {
                    let (h0, h1) = self.bin_cells(ph, 0, (sh, eh), height);
                    for pw in 0..pw_n {
                        let (w0, w1) = self.bin_cells(pw, 1, (sw, ew), width);
                        let mut v = if h1 <= h0 || w1 <= w0 { 0.0 } else { f32::MIN };
                        for row in xp.chunks_exact(width.max(1)).take(h1).skip(h0) {
                            v = row[w0..w1].iter().fold(v, |m, &e| if e > m { e } else { m });
                        }
                        y[((r * c + ch) * ph_n + ph) * pw_n + pw] = v;
                    }
                }
            }
        }
        Ok(())
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let (x, rois, out) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0)?);
            let [n, c, height, width, regions] = region_dims("MaxRoiPool", &x.dims, &rois.dims, 5, None)?;
            let mut meta = meta_head(&out.dims, [n, c, height, width, regions]);
            meta.extend([ext(self.pooled[0]), ext(self.pooled[1]), i64::from(self.spatial_scale.to_bits() as i32)]);
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                MaxRoiPoolKernel,
                meta,
                Work::Elements(numel(&out.dims)),
                vec![Slot::In(0), Slot::In(1), Slot::Out(0)],
            )]))
        })())
    }
}
