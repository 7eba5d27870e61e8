//! Resizing: Resize (opsets 10, 11, 13, 18, 19) and Upsample (7, 9; deprecated since 10).
//!
//! Every output element is a weighted sum of input elements around its source coordinate, axis by
//! axis: `nearest` (rounded per `nearest_mode`), `linear` (n-linear over every resized axis) or
//! `cubic` (`cubic_coeff_a`, `exclude_outside`), the source coordinate given by the
//! `coordinate_transformation_mode` (`tf_crop_and_resize` reading `roi` and writing
//! `extrapolation_value` outside the input). Output extents are `floor(input * scale)` from
//! `scales`, or `sizes` (opset 18 adds `axes`, `keep_aspect_ratio_policy` and `antialias`, which
//! widens linear and cubic filters when downsampling as the reference implementation does).
//! Resize-10 and Upsample have no coordinate attributes: asymmetric coordinates, nearest rounding
//! down when upsampling an axis and up when downsampling it (ONNX Runtime's behaviour).
//!
//! Nearest mode moves elements of any type; linear and cubic compute in f32. The geometry
//! (`geometry.rs`) is shared by the host kernels (`host.rs`) and the GPU kernels (`gpu.rs`), which
//! compute with the same f32 formulas in the same order.

mod geometry;
pub(crate) mod gpu;
mod host;
#[cfg(test)]
mod tests;

use saggar_shape::{DType, Dim};

use self::geometry::{Coord, Geometry, Known, Mode, Nearest, Params, Policy, fill_bits, max_output_elements};
use crate::ops::conv::check_len;
use crate::ops::gpu::{GpuCtx, GpuNode};
use crate::ops::{EvalInputs, InferInput, InferInputs, NodeCtx, Op, OpEntry, OpError, ValueType, unknown_dim};
use crate::tensor::{Tensor, TensorData, TensorMut, TensorView, same_type};

/// The ops of this family (one entry per signature; the builders read the opset).
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "Upsample", since: 7, until: 8, build: build_upsample },
    OpEntry { op_type: "Upsample", since: 9, until: 9, build: build_upsample },
    OpEntry { op_type: "Resize", since: 10, until: 10, build: build_resize },
    OpEntry { op_type: "Resize", since: 11, until: 12, build: build_resize },
    OpEntry { op_type: "Resize", since: 13, until: 17, build: build_resize },
    OpEntry { op_type: "Resize", since: 18, until: 18, build: build_resize },
    OpEntry { op_type: "Resize", since: 19, until: 24, build: build_resize },
];

/// Where the optional inputs are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slots {
    roi: Option<usize>,
    scales: Option<usize>,
    sizes: Option<usize>,
}

/// `Resize` / `Upsample`.
#[derive(Debug)]
struct Resize {
    params: Params,
    slots: Slots,
    /// Upsample-7's `scales` attribute.
    attr_scales: Option<Tensor>,
}

/// An attribute that must be 0 or 1.
fn flag(ctx: &NodeCtx<'_>, name: &str) -> Result<bool, OpError> {
    match ctx.int_or(name, 0)? {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(OpError::attribute(name, format!("must be 0 or 1, found {other}"))),
    }
}

/// `mode`: nearest and linear, and cubic from opset 11.
fn parse_mode(ctx: &NodeCtx<'_>, cubic: bool, nearest: Nearest) -> Result<Mode, OpError> {
    match ctx.string_or("mode", "nearest")?.as_str() {
        "nearest" => Ok(Mode::Nearest(nearest)),
        "linear" => Ok(Mode::Linear),
        "cubic" if cubic => Ok(Mode::Cubic(ctx.float_or("cubic_coeff_a", -0.75)?)),
        other => Err(ctx.unsupported("mode", other, if cubic { "nearest, linear, cubic" } else { "nearest, linear" })),
    }
}

/// The attributes of Resize-10 and Upsample: asymmetric coordinates, legacy nearest rounding.
fn legacy_params(mode: Mode, upsample: bool) -> Params {
    Params {
        mode,
        coord: Coord::Asymmetric,
        exclude_outside: false,
        antialias: false,
        extrapolation: 0.0,
        policy: Policy::Stretch,
        axes: None,
        upsample,
    }
}

fn build_upsample(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let params = legacy_params(parse_mode(ctx, false, Nearest::Simple)?, true);
    if ctx.opset() >= 9 {
        let slots = Slots { roi: None, scales: Some(1), sizes: None };
        return Ok(Box::new(Resize { params, slots, attr_scales: None }));
    }
    let scales = ctx.floats("scales")?.ok_or_else(|| OpError::attribute("scales", "is required"))?;
    let tensor = Tensor::new(vec![scales.len()], TensorData::F32(scales))?;
    Ok(Box::new(Resize { params, slots: Slots { roi: None, scales: None, sizes: None }, attr_scales: Some(tensor) }))
}

fn build_resize(ctx: &mut NodeCtx<'_>) -> Result<Box<dyn Op>, OpError> {
    let opset = ctx.opset();
    if opset <= 10 {
        let params = legacy_params(parse_mode(ctx, false, Nearest::Simple)?, false);
        let slots = Slots { roi: None, scales: Some(1), sizes: None };
        return Ok(Box::new(Resize { params, slots, attr_scales: None }));
    }
    let nearest = match ctx.string_or("nearest_mode", "round_prefer_floor")?.as_str() {
        "round_prefer_floor" => Nearest::RoundPreferFloor,
        "round_prefer_ceil" => Nearest::RoundPreferCeil,
        "floor" => Nearest::Floor,
        "ceil" => Nearest::Ceil,
        other => {
            return Err(ctx.unsupported("nearest_mode", other, "round_prefer_floor, round_prefer_ceil, floor, ceil"));
        }
    };
    let mode = parse_mode(ctx, true, nearest)?;
    ctx.ignore("cubic_coeff_a"); // Read in cubic mode; the spec lets other modes carry it.
    let coord = match ctx.string_or("coordinate_transformation_mode", "half_pixel")?.as_str() {
        "half_pixel" => Coord::HalfPixel,
        "half_pixel_symmetric" if opset >= 19 => Coord::HalfPixelSymmetric,
        "pytorch_half_pixel" => Coord::PytorchHalfPixel,
        "align_corners" => Coord::AlignCorners,
        "asymmetric" => Coord::Asymmetric,
        "tf_half_pixel_for_nn" if opset < 13 => Coord::TfHalfPixelForNn,
        "tf_crop_and_resize" => Coord::TfCropAndResize,
        other => {
            let supported = match opset {
                ..13 => {
                    "half_pixel, pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nn, tf_crop_and_resize"
                }
                13..19 => "half_pixel, pytorch_half_pixel, align_corners, asymmetric, tf_crop_and_resize",
                _ => {
                    "half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric, tf_crop_and_resize"
                }
            };
            return Err(ctx.unsupported("coordinate_transformation_mode", other, supported));
        }
    };
    let (mut antialias, mut axes, mut policy) = (false, None, Policy::Stretch);
    if opset >= 18 {
        antialias = flag(ctx, "antialias")?;
        if antialias && matches!(mode, Mode::Nearest(_)) {
            return Err(ctx.unsupported("antialias", 1, "0 in nearest mode (antialiasing filters linear and cubic)"));
        }
        axes = ctx.ints("axes")?;
        policy = match ctx.string_or("keep_aspect_ratio_policy", "stretch")?.as_str() {
            "stretch" => Policy::Stretch,
            "not_larger" => Policy::NotLarger,
            "not_smaller" => Policy::NotSmaller,
            other => {
                return Err(ctx.unsupported("keep_aspect_ratio_policy", other, "stretch, not_larger, not_smaller"));
            }
        };
    }
    let params = Params {
        mode,
        coord,
        exclude_outside: flag(ctx, "exclude_outside")?,
        antialias,
        extrapolation: ctx.float_or("extrapolation_value", 0.0)?,
        policy,
        axes,
        upsample: false,
    };
    let slots = Slots { roi: Some(1), scales: Some(2), sizes: Some(3) };
    Ok(Box::new(Resize { params, slots, attr_scales: None }))
}

/// An optional input at inference: absent, empty (ONNX's other spelling of absent), constant or not.
fn known_infer<'a>(input: Option<&InferInput<'a>>) -> Known<'a> {
    match input {
        None => Known::Absent,
        Some(i) => match i.value {
            Some(t) if t.is_empty() => Known::Absent,
            Some(t) => Known::Value(t.view()),
            None if i.ty.dims.contains(&Dim::Fixed(0)) => Known::Absent,
            None => Known::Unknown,
        },
    }
}

/// An optional input at evaluation.
fn known_eval<'a>(input: Option<&TensorView<'a>>) -> Known<'a> {
    match input {
        Some(v) if !v.is_empty() => Known::Value(*v),
        _ => Known::Absent,
    }
}

impl Resize {
    /// The input in slot `slot`, as `known` reads the node's inputs.
    fn slot<'a>(&'a self, slot: Option<usize>, known: &impl Fn(usize) -> Known<'a>) -> Known<'a> {
        slot.map_or(Known::Absent, known)
    }

    /// The target (`None` while not known) for an input of rank `rank`, and its axes.
    fn target<'a>(
        &'a self,
        rank: usize,
        known: &impl Fn(usize) -> Known<'a>,
    ) -> Result<(Option<geometry::Target>, Vec<usize>), OpError> {
        if rank == 0 {
            return Err(OpError::infer("Resize takes an input of rank 1 or more"));
        }
        let axes = self.params.target_axes(rank)?;
        let scales = match &self.attr_scales {
            Some(t) => Known::Value(t.view()),
            None => self.slot(self.slots.scales, known),
        };
        let target = self.params.target(scales, self.slot(self.slots.sizes, known), axes.len())?;
        Ok((target, axes))
    }

    /// The geometry for concrete input extents `dims`, every input read through `known`.
    fn resolve<'a>(&'a self, dims: &[usize], known: &impl Fn(usize) -> Known<'a>) -> Result<Geometry, OpError> {
        let (target, _) = self.target(dims.len(), known)?;
        let target =
            target.ok_or_else(|| OpError::eval("Resize needs its `scales` or `sizes` input as a constant here"))?;
        self.params.geometry(dims, &target, self.slot(self.slots.roi, known))
    }

    /// Whether this mode takes `dtype` elements.
    fn check_dtype(&self, dtype: DType) -> Result<(), OpError> {
        match self.params.mode {
            Mode::Nearest(_) => fill_bits(dtype, 0.0).map(|_| ()),
            _ if dtype == DType::F32 => Ok(()),
            _ => Err(OpError::infer(format!("linear and cubic Resize compute f32 only, not {dtype}"))),
        }
    }
}

impl Op for Resize {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<ValueType>, OpError> {
        let x = inputs.req(0)?.ty;
        self.check_dtype(x.dtype)?;
        let known = |i: usize| known_infer(inputs.get(i));
        let (target, axes) = self.target(x.rank(), &known)?;
        if self.params.coord == Coord::TfCropAndResize {
            let roi = self.slot(self.slots.roi, &known);
            if !matches!(roi, Known::Unknown) {
                self.params.roi(roi, axes.len())?;
            }
        }
        let mut dims = x.dims.clone();
        if let Some(target) = target {
            let input: Vec<Option<usize>> =
                x.dims.iter().map(|d| d.as_fixed().and_then(|v| usize::try_from(v).ok())).collect();
            for t in self.params.axis_targets(&target, &axes, &input)? {
                dims[t.axis] = match t.output {
                    Some(n) => Dim::Fixed(n as u64),
                    // A scale of 1 keeps even a symbolic extent.
                    None if t.scale == Some(1.0) => x.dims[t.axis].clone(),
                    None => unknown_dim(),
                };
            }
        } else {
            // `sizes` from a shape chain (`Shape` of another tensor, sliced and concatenated) gives
            // its extents, symbolic ones too; otherwise the extents wait for the per-shape fold.
            let from_chain = self.slots.sizes.and_then(|i| inputs.get(i)).and_then(|s| s.as_dims());
            let no_scales = self.attr_scales.is_none() && matches!(self.slot(self.slots.scales, &known), Known::Absent);
            let stretch = self.params.policy == Policy::Stretch;
            let chain = from_chain.filter(|d| no_scales && stretch && d.len() == axes.len());
            for (i, &a) in axes.iter().enumerate() {
                dims[a] = chain.as_ref().map_or_else(unknown_dim, |d| d[i].clone());
            }
        }
        let fixed: Option<Vec<u64>> = dims.iter().map(Dim::as_fixed).collect();
        if let Some(fixed) = fixed
            && fixed.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).is_none_or(|n| n > max_output_elements())
        {
            return Err(OpError::infer(format!(
                "Resize output {fixed:?} is above the limit of {} elements (ImportLimits::max_tensor_elements)",
                max_output_elements()
            )));
        }
        Ok(vec![ValueType::new(x.dtype, dims)])
    }

    fn eval(&self, inputs: &EvalInputs<'_>, outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
        let x = inputs.req(0)?;
        check_len("Resize", x)?;
        let geo = self.resolve(x.dims, &|i| known_eval(inputs.get(i)))?;
        let out = outputs.first_mut().ok_or_else(|| OpError::eval("Resize needs an output"))?;
        if out.dims != geo.out_dims.as_slice() {
            return Err(OpError::eval(format!("Resize output {:?} differs from {:?}", out.dims, geo.out_dims)));
        }
        match self.params.mode {
            Mode::Nearest(rounding) => {
                let fill = fill_bits(x.dtype(), self.params.extrapolation)?;
                same_type!(x.data, &mut out.data, |s, d| host::nearest(
                    &self.params,
                    rounding,
                    &geo,
                    x.dims,
                    s,
                    d,
                    fill
                ))
            }
            _ => host::filter(&self.params, &geo, x.dims, x.f32s()?, out.f32s()?),
        }
    }

    fn gpu(&self, ctx: &GpuCtx<'_>) -> Option<Result<GpuNode, OpError>> {
        Some((|| {
            let (x, out) = (ctx.input(0)?, ctx.output(0)?);
            let geo = self.resolve(&x.dims, &|i| known_infer(ctx.infer.get(i)))?;
            if geo.out_dims != out.dims {
                return Err(OpError::eval(format!("Resize output {:?} differs from {:?}", out.dims, geo.out_dims)));
            }
            gpu::launch(&self.params, &geo, x)
        })())
    }
}
