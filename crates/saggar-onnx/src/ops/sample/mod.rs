//! Sampling at computed coordinates: GridSample (opset 16 on 4-D inputs, opset 20 on any number of
//! spatial axes) reads an input at the normalised coordinates of a grid, nearest, N-linear or
//! N-cubic, with zeros, border or reflection padding; AffineGrid (opset 20) makes such a grid from
//! affine matrices (`affine.rs`).
//!
//! The per-axis sampling (`Sampling::axis_taps`) follows the ONNX reference implementation in f32:
//! the coordinate is denormalised (`align_corners`), rounded half to even in nearest mode, brought
//! inside the padded extent by border clamping or reflection, and split into taps (1, 2 or 4 input
//! indices and weights; index -1 reads zero). An output element is the sum over every combination
//! of one tap per axis of the weights' product times the input. The GPU kernel
//! (`grid_sample.cu`) computes the same in the same order.

mod affine;
pub(crate) mod gpu;
#[cfg(test)]
mod tests;

use saggar_shape::DType;

use self::gpu::GridSampleKernel;
use crate::ops::conv::{check_len, check_out_dims, fixed, image_dims};
use crate::ops::gpu::{GpuCtx, GpuLaunch, GpuNode, MAX_SPATIAL, Slot, Work, ext, numel};
use crate::ops::shape_util::strides;
use crate::ops::{EvalInputs, InferInputs, NodeCtx, Op, OpEntry, OpError, ValueType};
use crate::tensor::TensorMut;

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "GridSample", since: 16, until: 19, build: build_grid_sample },
    OpEntry { op_type: "GridSample", since: 20, until: 24, build: build_grid_sample },
    OpEntry { op_type: "AffineGrid", since: 20, until: 24, build: affine::build_affine_grid },
];

/// Keys' cubic convolution constant of GridSample's cubic mode (PyTorch's).
const CUBIC_A: f32 = -0.75;

/// Coordinates are held within +-2^30 before becoming indices (NaN goes to the top), so a
/// hostile grid never makes an index conversion overflow; such coordinates are far outside anyway.
const COORD_LIMIT: f32 = 1_073_741_824.0;

/// How GridSample interpolates (the values are the GPU kernel's `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interp {
    Nearest = 0,
    Linear = 1,
    Cubic = 2,
}

/// How GridSample reads outside the input (the values are the GPU kernel's `padding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Padding {
    Zeros = 0,
    Border = 1,
    Reflection = 2,
}

/// GridSample's attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sampling {
    pub(crate) interp: Interp,
    pub(crate) padding: Padding,
    pub(crate) align_corners: bool,
}

/// A 0/1 attribute.
pub(crate) fn flag(ctx: &NodeCtx<'_>, name: &str, default: i64) -> Result<bool, OpError> {
    match ctx.int_or(name, default)? {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(OpError::attribute(name, format!("must be 0 or 1, found {other}"))),
    }
}

/// `GridSample`; `nd` from opset 20 (any number of spatial axes, the modes renamed).
#[derive(Debug)]
struct GridSample {
    sampling: Sampling,
    nd: bool,
}

fn build_grid_sample(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let nd = ctx.opset() >= 20;
    let (default, supported) =
        if nd { ("linear", "linear, nearest, cubic") } else { ("bilinear", "bilinear, nearest, bicubic") };
    let interp = match (ctx.string_or("mode", default)?.as_str(), nd) {
        ("nearest", _) => Interp::Nearest,
        ("linear", true) | ("bilinear", false) => Interp::Linear,
        ("cubic", true) | ("bicubic", false) => Interp::Cubic,
        (other, _) => return Err(ctx.unsupported("mode", other, supported)),
    };
    let padding = match ctx.string_or("padding_mode", "zeros")?.as_str() {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        other => return Err(ctx.unsupported("padding_mode", other, "zeros, border, reflection")),
    };
    let align_corners = flag(ctx, "align_corners", 0)?;
    Ok(Box::new(GridSample { sampling: Sampling { interp, padding, align_corners }, nd }))
}

/// `x` reflected into `[lo, hi]` by its nearer bound until inside (the reference's `_gs_reflect`).
fn reflect(x: f32, lo: f32, hi: f32) -> f32 {
    let range = hi - lo;
    if range <= 0.0 {
        return lo;
    }
    let (dx, near, far) = if x < lo {
        (lo - x, lo, hi)
    } else if x > hi {
        (x - hi, hi, lo)
    } else {
        return x;
    };
    let n = (dx / range).floor();
    let r = dx - n * range;
    // Toward the inside from the bound crossed an even number of times, else from the other.
    let inward = if near < far { 1.0 } else { -1.0 };
    if n % 2.0 == 0.0 { near + inward * r } else { far - inward * r }
}

/// Keys' cubic weights of the taps at -1, 0, 1, 2 from the floor, for fraction `t`.
fn cubic_weights(t: f32) -> [f32; 4] {
    let a = CUBIC_A;
    let (t1, t2, s) = (t + 1.0, 2.0 - t, 1.0 - t);
    [
        ((a * t1 - 5.0 * a) * t1 + 8.0 * a) * t1 - 4.0 * a,
        ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0,
        ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0,
        ((a * t2 - 5.0 * a) * t2 + 8.0 * a) * t2 - 4.0 * a,
    ]
}

impl Sampling {
    /// Taps per axis.
    pub(crate) fn taps(self) -> usize {
        match self.interp {
            Interp::Nearest => 1,
            Interp::Linear => 2,
            Interp::Cubic => 4,
        }
    }

    /// The extent coordinates are brought inside: `[-0.5, len - 0.5]`, or `[0, len - 1]` with
    /// align_corners.
    fn bounds(self, len: f32) -> (f32, f32) {
        if self.align_corners { (0.0, len - 1.0) } else { (-0.5, len - 0.5) }
    }

    /// The input index an integer tap `i` reads along an axis of `len` (`-1`: zero).
    fn pixel(self, i: i64, len: usize) -> i64 {
        let last = len as i64 - 1;
        match self.padding {
            Padding::Zeros if (0..=last).contains(&i) => i,
            Padding::Zeros => -1,
            Padding::Border => i.clamp(0, last),
            Padding::Reflection => {
                let (lo, hi) = self.bounds(len as f32);
                (reflect(i as f32, lo, hi) as i64).clamp(0, last)
            }
        }
    }

    /// The taps along an axis of `len` (at least 1) for normalised coordinate `g`: input indices
    /// (-1 reads zero) and weights; the first [`Sampling::taps`] are used.
    pub(crate) fn axis_taps(self, len: usize, g: f32) -> ([i64; 4], [f32; 4]) {
        let l = len as f32;
        let mut x = if self.align_corners { (g + 1.0) / 2.0 * (l - 1.0) } else { ((g + 1.0) * l - 1.0) / 2.0 };
        if self.interp == Interp::Nearest {
            x = x.round_ties_even();
        }
        let (lo, hi) = self.bounds(l);
        if x < lo || x > hi {
            match self.padding {
                Padding::Zeros => {}
                Padding::Border => x = x.max(0.0).min(l - 1.0),
                Padding::Reflection => x = reflect(x, lo, hi),
            }
        }
        let x = if x.is_nan() { COORD_LIMIT } else { x.clamp(-COORD_LIMIT, COORD_LIMIT) };
        let f = x.floor();
        let (i0, t) = (f as i64, x - f);
        match self.interp {
            Interp::Nearest => ([self.pixel(x as i64, len), -1, -1, -1], [1.0, 0.0, 0.0, 0.0]),
            Interp::Linear => ([self.pixel(i0, len), self.pixel(i0 + 1, len), -1, -1], [1.0 - t, t, 0.0, 0.0]),
            Interp::Cubic => {
                let idx = [-1, 0, 1, 2].map(|k| self.pixel(i0 + k, len));
                (idx, cubic_weights(t))
            }
        }
    }

    /// One output position of every channel of an image: `taps` holds each axis's taps, `planes`
    /// the image's channel planes of `in_plane` (at least 1) elements with `in_strides`; `out(c, v)`
    /// stores channel `c`'s value.
    fn sample(
        self,
        taps: &[([i64; 4], [f32; 4])],
        planes: &[f32],
        (in_plane, in_strides): (usize, &[usize]),
        mut out: impl FnMut(usize, f32),
    ) {
        let (per, r) = (self.taps(), taps.len());
        let combos = per.pow(r as u32);
        for (c, xp) in planes.chunks_exact(in_plane).enumerate() {
            let mut acc = 0.0f32;
            for t in 0..combos {
                let (mut rest, mut off, mut w, mut zero) = (t, 0i64, 1.0f32, false);
                for d in (0..r).rev() {
                    let k = rest % per;
                    rest /= per;
                    let i = taps[d].0[k];
                    zero |= i < 0;
                    off += i * in_strides[d] as i64;
                    w *= taps[d].1[k];
                }
                if !zero {
                    acc += w * xp[off as usize];
                }
            }
            out(c, acc);
        }
    }
}

impl GridSample {
    /// The output dims for input `x` and `grid` (checked against each other).
    fn check(&self, x: &[usize], grid: &[usize]) -> Result<Vec<usize>, OpError> {
        let r = x.len().saturating_sub(2);
        if x.len() < 3 || (!self.nd && x.len() != 4) {
            return Err(OpError::eval(format!("GridSample input {x:?} has the wrong rank")));
        }
        if grid.len() != x.len() || grid[0] != x[0] || grid[x.len() - 1] != r {
            return Err(OpError::eval(format!("GridSample grid {grid:?} does not fit input {x:?}")));
        }
        if x[2..].contains(&0) {
            return Err(OpError::eval(format!("GridSample input {x:?} has an empty spatial axis")));
        }
        Ok([x[0], x[1]].into_iter().chain(grid[1..r + 1].iter().copied()).collect())
    }
}

impl Op for GridSample {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = image_dims("GridSample", inputs.req(0)?.ty)?;
        let grid = inputs.req(1)?.ty;
        let r = x.len() - 2;
        if !self.nd && x.len() != 4 {
            return Err(OpError::infer(format!("GridSample-16 takes a 4-D input, found rank {}", x.len())));
        }
        if grid.dtype != DType::F32 || grid.rank() != x.len() {
            return Err(OpError::infer(format!(
                "GridSample grid must be f32 of the input's rank {}, found {grid}",
                x.len()
            )));
        }
        if fixed(&grid.dims[r + 1]).is_some_and(|d| d != r) {
            return Err(OpError::infer(format!(
                "GridSample grid {grid}: its last axis must hold {r} coordinates, one per spatial axis"
            )));
        }
        if let (Some(a), Some(b)) = (fixed(&x[0]), fixed(&grid.dims[0]))
            && a != b
        {
            return Err(OpError::infer(format!("GridSample: batch {a} of the input, {b} of the grid")));
        }
        if r > MAX_SPATIAL {
            return Err(OpError::infer(format!("GridSample takes at most {MAX_SPATIAL} spatial axes, found {r}")));
        }
        let mut dims = vec![x[0].clone(), x[1].clone()];
        dims.extend(grid.dims[1..=r].iter().cloned());
        Ok(vec![ValueType::new(DType::F32, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let (xv, gv) = (inputs.req(0)?, inputs.req(1)?);
        check_len("GridSample", xv)?;
        check_len("GridSample", gv)?;
        let out_dims = self.check(xv.dims, gv.dims)?;
        check_out_dims("GridSample", outputs[0].dims, out_dims.iter().copied())?;
        let (x, grid, y) = (xv.f32s()?, gv.f32s()?, outputs[0].f32s()?);
        let (n, c, spatial) = (xv.dims[0], xv.dims[1], &xv.dims[2..]);
        let (r, in_plane, out_plane) = (spatial.len(), numel(spatial) as usize, numel(&out_dims[2..]) as usize);
        let in_strides = strides(spatial);
        let mut taps = vec![([0i64; 4], [0f32; 4]); r];
        for b in 0..n {
            let planes = &x[b * c * in_plane..(b + 1) * c * in_plane];
            for p in 0..out_plane {
                let g = &grid[(b * out_plane + p) * r..(b * out_plane + p + 1) * r];
                for (d, t) in taps.iter_mut().enumerate() {
                    *t = self.sampling.axis_taps(spatial[d], g[r - 1 - d]);
                }
                self.sampling.sample(&taps, planes, (in_plane, &in_strides), |ch, v| {
                    y[(b * c + ch) * out_plane + p] = v;
                });
            }
        }
        Ok(())
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let (x, grid, out) = (ctx.input(0)?, ctx.input(1)?, ctx.output(0)?);
            self.check(&x.dims, &grid.dims)?;
            let s = self.sampling;
            let mut meta = vec![
                ext(x.dims.len() - 2),
                numel(&out.dims) as i64,
                ext(x.dims[1]),
                s.interp as i64,
                s.padding as i64,
                i64::from(s.align_corners),
            ];
            meta.extend(x.dims[2..].iter().map(|&d| ext(d)));
            meta.extend(out.dims[2..].iter().map(|&d| ext(d)));
            Ok(GpuNode::Launches(vec![GpuLaunch::new(
                GridSampleKernel,
                meta,
                Work::Elements(numel(&out.dims)),
                vec![Slot::In(0), Slot::In(1), Slot::Out(0)],
            )]))
        })())
    }
}
