//! Where each output element of a resize reads: the output extents from `scales` or `sizes` (with
//! `axes` and `keep_aspect_ratio_policy`), and per resized axis the source coordinate of every output
//! coordinate with the taps and weights around it. The host kernels (`host.rs`) and the GPU kernels
//! (`resize_*.cu`, through their `meta` tables) compute these with the same f32 formulas in the same
//! order; the constants of each axis (scale, fractional output width, roi terms) are computed here
//! once and travel to the GPU as f32 bits.

use saggar_shape::DType;

use crate::import::limits::ImportLimits;
use crate::ops::OpError;
use crate::ops::shape_util::normalize_axes;
use crate::tensor::TensorView;

/// `coordinate_transformation_mode`; the discriminant is the kernels' `coord` code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coord {
    HalfPixel = 0,
    HalfPixelSymmetric = 1,
    PytorchHalfPixel = 2,
    AlignCorners = 3,
    Asymmetric = 4,
    TfHalfPixelForNn = 5,
    TfCropAndResize = 6,
}

/// How nearest mode rounds a source coordinate; the discriminant is the nearest kernel's `pick`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nearest {
    RoundPreferFloor = 0,
    RoundPreferCeil = 1,
    Floor = 2,
    Ceil = 3,
    /// Resize-10 and Upsample (no `nearest_mode` yet): floor when upsampling the axis, ceil when
    /// downsampling it, as ONNX Runtime does.
    Simple = 4,
}

/// The interpolation `mode`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Mode {
    Nearest(Nearest),
    Linear,
    /// Cubic convolution with coefficient `a` (`cubic_coeff_a`).
    Cubic(f32),
}

/// `keep_aspect_ratio_policy` (for `sizes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Policy {
    Stretch,
    NotLarger,
    NotSmaller,
}

/// A Resize or Upsample node's attributes, parsed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Params {
    pub(crate) mode: Mode,
    pub(crate) coord: Coord,
    pub(crate) exclude_outside: bool,
    pub(crate) antialias: bool,
    pub(crate) extrapolation: f32,
    pub(crate) policy: Policy,
    /// The axes `roi`, `scales` and `sizes` refer to (all, in order, when `None`).
    pub(crate) axes: Option<Vec<i64>>,
    /// Upsample: every scale must be at least 1.
    pub(crate) upsample: bool,
}

/// An optional input as far as it is known: absent (or empty, which ONNX uses for "absent"), a
/// value, or not known before run time.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Known<'a> {
    Absent,
    Value(TensorView<'a>),
    Unknown,
}

/// What fixes the output extents, per axis of [`Params::axes`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Target {
    Scales(Vec<f32>),
    Sizes(Vec<i64>),
}

/// The largest output a resize makes, in elements: that of any tensor a model may hold.
pub(crate) fn max_output_elements() -> u64 {
    ImportLimits::default().max_tensor_elements
}

/// One axis's target: its scale and output extent where the input extents tell them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AxisTarget {
    pub(crate) axis: usize,
    pub(crate) scale: Option<f64>,
    pub(crate) output: Option<usize>,
}

/// An output extent `v` (already rounded) along `axis`, refused above [`max_output_elements`].
fn extent(v: f64, axis: usize, what: impl FnOnce() -> String) -> Result<usize, OpError> {
    let limit = max_output_elements();
    if !(v >= 0.0 && v <= limit as f64) {
        return Err(OpError::infer(format!(
            "Resize output extent {v} along axis {axis} (from {}) is above the limit of {limit} elements \
             (ImportLimits::max_tensor_elements)",
            what()
        )));
    }
    Ok(v as usize)
}

impl Params {
    /// The axes `roi`, `scales` and `sizes` refer to, made non-negative.
    pub(crate) fn target_axes(&self, rank: usize) -> Result<Vec<usize>, OpError> {
        match &self.axes {
            Some(axes) => normalize_axes(axes, rank),
            None => Ok((0..rank).collect()),
        }
    }

    /// The target from the `scales` and `sizes` inputs (or Upsample-7's attribute as `scales`),
    /// `None` while one of them is not known; `n` values each, one per target axis.
    pub(crate) fn target(&self, scales: Known<'_>, sizes: Known<'_>, n: usize) -> Result<Option<Target>, OpError> {
        match (scales, sizes) {
            (Known::Unknown, _) | (_, Known::Unknown) => Ok(None),
            (Known::Value(_), Known::Value(_)) => {
                Err(OpError::infer("Resize takes `scales` or `sizes`, not both: make the other an empty input"))
            }
            (Known::Absent, Known::Absent) => Err(OpError::infer("Resize needs a `scales` or a `sizes` input")),
            (Known::Value(s), Known::Absent) => {
                let v = s
                    .data
                    .to_f32s()
                    .ok_or_else(|| OpError::infer(format!("Resize scales must be float, found {}", s.data.dtype())))?;
                self.check_scales(&v, n)?;
                Ok(Some(Target::Scales(v)))
            }
            (Known::Absent, Known::Value(s)) => {
                let v = s
                    .to_i64s()
                    .ok_or_else(|| OpError::infer(format!("Resize sizes must be int64, found {}", s.data.dtype())))?;
                if v.len() != n {
                    return Err(OpError::infer(format!("Resize sizes {v:?} have {} values for {n} axes", v.len())));
                }
                if v.iter().any(|&s| s < 0) {
                    return Err(OpError::infer(format!("Resize sizes must not be negative, found {v:?}")));
                }
                Ok(Some(Target::Sizes(v)))
            }
        }
    }

    /// Scales must be one per target axis, finite and positive (at least 1 for Upsample).
    pub(crate) fn check_scales(&self, v: &[f32], n: usize) -> Result<(), OpError> {
        if v.len() != n {
            return Err(OpError::infer(format!("Resize scales {v:?} have {} values for {n} axes", v.len())));
        }
        if v.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(OpError::infer(format!("Resize scales must be positive and finite, found {v:?}")));
        }
        if self.upsample && v.iter().any(|&s| s < 1.0) {
            return Err(OpError::infer(format!("Upsample scales must be at least 1, found {v:?}")));
        }
        Ok(())
    }

    /// Each target axis's scale and output extent; `input` holds the input extents, `None` where not
    /// known (inference on symbolic shapes).
    pub(crate) fn axis_targets(
        &self,
        target: &Target,
        axes: &[usize],
        input: &[Option<usize>],
    ) -> Result<Vec<AxisTarget>, OpError> {
        match (target, self.policy) {
            (Target::Scales(v), _) => axes
                .iter()
                .zip(v)
                .map(|(&axis, &s)| {
                    let output =
                        input[axis].map(|n| extent((n as f64 * f64::from(s)).floor(), axis, || format!("scale {s}")));
                    Ok(AxisTarget { axis, scale: Some(f64::from(s)), output: output.transpose()? })
                })
                .collect(),
            (Target::Sizes(v), Policy::Stretch) => axes
                .iter()
                .zip(v)
                .map(|(&axis, &size)| {
                    let output = extent(size as f64, axis, || format!("size {size}"))?;
                    let scale = input[axis].map(|n| if n == 0 { 1.0 } else { output as f64 / n as f64 });
                    Ok(AxisTarget { axis, scale, output: Some(output) })
                })
                .collect(),
            (Target::Sizes(v), policy) => {
                let Some(extents) = axes.iter().map(|&a| input[a]).collect::<Option<Vec<usize>>>() else {
                    return Ok(axes.iter().map(|&axis| AxisTarget { axis, scale: None, output: None }).collect());
                };
                if extents.contains(&0) {
                    return Err(OpError::infer(format!(
                        "keep_aspect_ratio_policy cannot keep the aspect of an empty input (extents {extents:?})"
                    )));
                }
                let ratios = v.iter().zip(&extents).map(|(&s, &n)| s as f64 / n as f64);
                let scale = if policy == Policy::NotLarger {
                    ratios.fold(f64::INFINITY, f64::min)
                } else {
                    ratios.fold(0.0, f64::max)
                };
                axes.iter()
                    .zip(&extents)
                    .map(|(&axis, &n)| {
                        let output =
                            extent((scale * n as f64 + 0.5).floor(), axis, || format!("aspect scale {scale}"))?;
                        Ok(AxisTarget { axis, scale: Some(scale), output: Some(output) })
                    })
                    .collect()
            }
        }
    }

    /// The output extents and the resized axes for concrete input extents `dims`. `roi` is read
    /// only by `tf_crop_and_resize`.
    pub(crate) fn geometry(&self, dims: &[usize], target: &Target, roi: Known<'_>) -> Result<Geometry, OpError> {
        let axes = self.target_axes(dims.len())?;
        let input: Vec<Option<usize>> = dims.iter().map(|&d| Some(d)).collect();
        let targets = self.axis_targets(target, &axes, &input)?;
        let mut out_dims = dims.to_vec();
        for t in &targets {
            out_dims[t.axis] = t.output.unwrap_or(0);
        }
        let total = out_dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
        if total.is_none_or(|n| n > max_output_elements()) {
            return Err(OpError::infer(format!(
                "Resize output {out_dims:?} is above the limit of {} elements (ImportLimits::max_tensor_elements)",
                max_output_elements()
            )));
        }
        if total == Some(0) {
            return Ok(Geometry { out_dims, axes: Vec::new() });
        }
        let roi = if self.coord == Coord::TfCropAndResize { Some(self.roi(roi, axes.len())?) } else { None };
        let mut plans = Vec::new();
        for (i, t) in targets.iter().enumerate() {
            let (input, output, scale) = (dims[t.axis], t.output.unwrap_or(0), t.scale.unwrap_or(1.0));
            let window = roi.as_ref().map(|r| (r[i], r[axes.len() + i]));
            if scale == 1.0 && output == input && window.is_none_or(|w| w == (0.0, 1.0)) {
                continue;
            }
            plans.push(self.axis_plan(t.axis, input, output, scale, window)?);
        }
        plans.sort_by_key(|p| p.axis);
        Ok(Geometry { out_dims, axes: plans })
    }

    /// `tf_crop_and_resize`'s roi: starts then ends, one of each per target axis, finite.
    pub(crate) fn roi(&self, roi: Known<'_>, n: usize) -> Result<Vec<f32>, OpError> {
        let v = match roi {
            Known::Value(r) => r
                .data
                .to_f32s()
                .ok_or_else(|| OpError::infer(format!("Resize roi must be float, found {}", r.data.dtype())))?,
            Known::Absent => return Err(OpError::infer("tf_crop_and_resize needs the `roi` input")),
            Known::Unknown => return Err(OpError::infer("tf_crop_and_resize needs a constant `roi` input here")),
        };
        if v.len() != 2 * n || v.iter().any(|r| !r.is_finite()) {
            return Err(OpError::infer(format!("Resize roi {v:?} must be {} finite values (starts, ends)", 2 * n)));
        }
        Ok(v)
    }

    /// The plan of one resized axis.
    fn axis_plan(
        &self,
        axis: usize,
        input: usize,
        output: usize,
        scale: f64,
        window: Option<(f32, f32)>,
    ) -> Result<AxisPlan, OpError> {
        if input == 0 {
            return Err(OpError::infer(format!("Resize cannot fill {output} elements along axis {axis} from none")));
        }
        let inm1 = (input - 1) as f32;
        let out_w = scale * input as f64;
        let (p, q, c) = match (self.coord, window) {
            (Coord::HalfPixelSymmetric, _) => {
                let adjustment = output as f64 / out_w;
                ((input as f64 / 2.0 * (1.0 - adjustment)) as f32, 0.0, 0.0)
            }
            (Coord::TfCropAndResize, Some((start, end))) => {
                let (span, base) = (end - start, start * inm1);
                (span, base, span * inm1 / 2.0 + base)
            }
            _ => (0.0, 0.0, 0.0),
        };
        // Non-antialiased filters span 2 (linear) or 4 (cubic) taps; antialiasing stretches them by
        // 1 / scale when downsampling, as the reference implementation does.
        let (support, fixed_t0) = match self.mode {
            Mode::Nearest(_) => (0.0, 0),
            Mode::Linear => (1.0, 0),
            Mode::Cubic(_) => (2.0, -1),
        };
        let stretch = if self.antialias { scale.min(1.0) } else { 1.0 };
        let (taps, t0) = if support == 0.0 {
            (1, 0)
        } else if self.antialias {
            let start = (-support / stretch).floor() + 1.0;
            let taps = 2.0 - 2.0 * start;
            if taps > 4.0 * input as f64 + 8.0 {
                return Err(OpError::infer(format!(
                    "Resize antialias filter of {taps} taps along axis {axis} (scale {scale}) is wider than the input"
                )));
            }
            (taps as usize, start as i64)
        } else {
            (2 * support as usize, fixed_t0)
        };
        Ok(AxisPlan {
            axis,
            input,
            output,
            scale: scale as f32,
            out_w: out_w as f32,
            p,
            q,
            c,
            taps,
            t0,
            stretch: stretch as f32,
        })
    }
}

/// The bits of the extrapolation value `v` as a `dtype` element (what tf_crop_and_resize writes
/// outside the input): integers round half to even, saturating; bool is `v != 0`.
pub(crate) fn fill_bits(dtype: DType, v: f32) -> Result<u64, OpError> {
    let int = f64::from(v.round_ties_even());
    Ok(match dtype {
        DType::F32 => u64::from(v.to_bits()),
        DType::F64 => f64::from(v).to_bits(),
        DType::F16 => u64::from(half::f16::from_f32(v).to_bits()),
        DType::BF16 => u64::from(half::bf16::from_f32(v).to_bits()),
        DType::I64 => int as i64 as u64,
        DType::U64 => int as u64,
        DType::I32 => u64::from(int as i32 as u32),
        DType::U32 => u64::from(int as u32),
        DType::I16 => u64::from(int as i16 as u16),
        DType::U16 => u64::from(int as u16),
        DType::I8 => u64::from(int as i8 as u8),
        DType::U8 => u64::from(int as u8),
        DType::Bool => u64::from(v != 0.0),
        other => return Err(OpError::infer(format!("Resize does not take {other} inputs"))),
    })
}

/// The output extents and the axes a resize changes, for concrete input extents.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Geometry {
    pub(crate) out_dims: Vec<usize>,
    /// The resized axes in ascending order; an axis whose output coordinates are its input
    /// coordinates (scale 1, same extent, whole roi) is left out and read in place.
    pub(crate) axes: Vec<AxisPlan>,
}

/// One resized axis: extents and the f32 constants its coordinates are computed from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AxisPlan {
    pub(crate) axis: usize,
    pub(crate) input: usize,
    pub(crate) output: usize,
    pub(crate) scale: f32,
    /// `scale * input`: the output extent before flooring.
    pub(crate) out_w: f32,
    /// half_pixel_symmetric: the offset; tf_crop_and_resize: `end - start`.
    pub(crate) p: f32,
    /// tf_crop_and_resize: `start * (input - 1)`.
    pub(crate) q: f32,
    /// tf_crop_and_resize: the source coordinate when the output width is 1.
    pub(crate) c: f32,
    /// Filter taps per output coordinate (1 in nearest mode).
    pub(crate) taps: usize,
    /// The first tap relative to the source coordinate's floor.
    pub(crate) t0: i64,
    /// The factor tap distances are multiplied by: `min(scale, 1)` with antialias, else 1.
    pub(crate) stretch: f32,
}

/// The cubic kernel's constants: `a`, `a + 2`, `a + 3`, `5a`, `8a`, `4a`.
pub(crate) fn cubic_constants(a: f32) -> [f32; 6] {
    [a, a + 2.0, a + 3.0, 5.0 * a, 8.0 * a, 4.0 * a]
}

/// One output coordinate's taps along an axis: the first input index (before clamping to the axis)
/// and whether the source coordinate lies outside the input (tf_crop_and_resize extrapolates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Taps {
    pub(crate) lo: i64,
    pub(crate) outside: bool,
}

impl AxisPlan {
    /// The source coordinate of output coordinate `o` (`resize_coord.cuh` computes the same).
    pub(crate) fn source(&self, coord: Coord, o: usize) -> f32 {
        let (xr, scale, out_w, inm1) = (o as f32, self.scale, self.out_w, (self.input - 1) as f32);
        match coord {
            Coord::HalfPixel => (xr + 0.5) / scale - 0.5,
            Coord::HalfPixelSymmetric => self.p + (xr + 0.5) / scale - 0.5,
            Coord::PytorchHalfPixel if out_w > 1.0 => (xr + 0.5) / scale - 0.5,
            Coord::PytorchHalfPixel => 0.0,
            Coord::AlignCorners if out_w == 1.0 => 0.0,
            Coord::AlignCorners => xr * inm1 / (out_w - 1.0),
            Coord::Asymmetric => xr / scale,
            Coord::TfHalfPixelForNn => (xr + 0.5) / scale,
            Coord::TfCropAndResize if out_w == 1.0 => self.c,
            Coord::TfCropAndResize => xr * self.p * inm1 / (out_w - 1.0) + self.q,
        }
    }

    /// Whether source coordinate `x` lies outside the input under `coord` (only
    /// tf_crop_and_resize extrapolates; a NaN coordinate is outside).
    pub(crate) fn outside(&self, coord: Coord, x: f32) -> bool {
        coord == Coord::TfCropAndResize && !(x >= 0.0 && x <= (self.input - 1) as f32)
    }

    /// The input index nearest mode reads for output coordinate `o`, `None` when extrapolated.
    pub(crate) fn nearest(&self, params: &Params, rounding: Nearest, o: usize) -> Option<usize> {
        let x = self.source(params.coord, o);
        if self.outside(params.coord, x) {
            return None;
        }
        let fl = x.floor();
        let v = match rounding {
            Nearest::RoundPreferFloor if x - fl <= 0.5 => fl,
            Nearest::RoundPreferCeil if x - fl < 0.5 => fl,
            Nearest::RoundPreferFloor | Nearest::RoundPreferCeil => fl + 1.0,
            Nearest::Floor => fl,
            Nearest::Ceil => x.ceil(),
            Nearest::Simple if self.scale < 1.0 => x.ceil(),
            Nearest::Simple => fl,
        };
        Some((v as i64).clamp(0, self.input as i64 - 1) as usize)
    }

    /// The unnormalised weight of tap `t` (relative to the floor `q'` of the source coordinate) at
    /// fraction `r = x - q'` in `(0, 1]`: the triangle (linear) or the cubic convolution kernel
    /// (`cubic` holds [`cubic_constants`]) at the stretched distance.
    pub(crate) fn raw_weight(&self, cubic: Option<&[f32; 6]>, t: i64, r: f32) -> f32 {
        let d = ((t as f32 - r) * self.stretch).abs();
        match cubic {
            None => (1.0 - d).max(0.0),
            Some(&[a, a2, a3, a5, a8, a4]) => {
                if d <= 1.0 {
                    (a2 * d - a3) * d * d + 1.0
                } else if d < 2.0 {
                    ((a * d - a5) * d + a8) * d - a4
                } else {
                    0.0
                }
            }
        }
    }

    /// The taps of output coordinate `o` in linear or cubic mode, their final weights written to
    /// `w` (`taps` of them): normalised to sum 1 with antialias, then with `exclude_outside` the
    /// taps outside the input zeroed and the rest renormalised. `resize_filter.cu` computes the same.
    pub(crate) fn filter(&self, params: &Params, cubic: Option<&[f32; 6]>, o: usize, w: &mut [f32]) -> Taps {
        let x = self.source(params.coord, o);
        if self.outside(params.coord, x) {
            w.fill(0.0);
            return Taps { lo: 0, outside: true };
        }
        // The fraction is in (0, 1]: an integral coordinate takes the tap on its left as its floor.
        let fl = x.floor();
        let (q, r) = if x - fl == 0.0 { (fl - 1.0, 1.0) } else { (fl, x - fl) };
        let lo = q as i64 + self.t0;
        let mut n1 = 1.0f32;
        if params.antialias {
            n1 = 0.0;
            for k in 0..self.taps {
                n1 += self.raw_weight(cubic, self.t0 + k as i64, r);
            }
        }
        for (k, wk) in w.iter_mut().enumerate() {
            let raw = self.raw_weight(cubic, self.t0 + k as i64, r);
            *wk = if params.antialias { raw / n1 } else { raw };
        }
        if params.exclude_outside {
            let inside = |k: usize| (0..self.input as i64).contains(&(lo + k as i64));
            let mut n2 = 0.0f32;
            for (k, wk) in w.iter().enumerate() {
                if inside(k) {
                    n2 += *wk;
                }
            }
            let n2 = if n2 == 0.0 { 1.0 } else { n2 };
            for (k, wk) in w.iter_mut().enumerate() {
                *wk = if inside(k) { *wk / n2 } else { 0.0 };
            }
        }
        Taps { lo, outside: false }
    }
}
