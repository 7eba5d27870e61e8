//! The GPU kernels of the resize family, one thread per output element: nearest mode moving
//! elements as bits (`resize_nearest.cu`) and linear or cubic filtering in f32
//! (`resize_filter.cu`), both mapping output coordinates to source coordinates with
//! `resize_coord.cuh`. Modes, extents and per-axis constants travel in `meta`, so one text serves
//! every shape and coordinate mode.

use super::geometry::{AxisPlan, Geometry, Mode, Params, cubic_constants, fill_bits};
use crate::ops::OpError;
use crate::ops::gpu::{
    GpuKernel, GpuLaunch, GpuNode, Operand, Slot, Work, bits_type, contiguous, ext, numel, render, strip_header,
};

/// Most resized axes of one node on GPU (the kernels keep per-axis state in registers).
pub(crate) const MAX_RESIZED_AXES: usize = 8;

/// Values of each resized axis's record in `meta`.
pub(crate) const AXIS_RECORD: usize = 10;

/// Values of the `meta` header before the output extents.
pub(crate) const HEADER: usize = 13;

/// A resize kernel: nearest mode on `elem_bytes`-byte elements, or the f32 filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResizeKernel {
    Nearest { elem_bytes: u8 },
    Filter,
}

impl GpuKernel for ResizeKernel {
    fn prefix(&self) -> &'static str {
        match self {
            ResizeKernel::Nearest { .. } => "resize_nearest",
            ResizeKernel::Filter => "resize_filter",
        }
    }

    fn source(&self) -> String {
        let coord = strip_header(include_str!("resize_coord.cuh"));
        let (max, header, record) = (MAX_RESIZED_AXES.to_string(), HEADER.to_string(), AXIS_RECORD.to_string());
        let common = [("COORD", coord), ("HEADER", header.as_str()), ("RECORD", record.as_str())];
        match self {
            ResizeKernel::Nearest { elem_bytes } => {
                render(include_str!("resize_nearest.cu"), &[&common[..], &[("T", bits_type(*elem_bytes))]].concat())
            }
            ResizeKernel::Filter => {
                render(include_str!("resize_filter.cu"), &[&common[..], &[("MAX_AXES", max.as_str())]].concat())
            }
        }
    }
}

/// An f32 as `meta` carries it: its bits, sign-extended (`__int_as_float((int)m)` reads it back).
fn bits(v: f32) -> i64 {
    i64::from(v.to_bits() as i32)
}

/// One axis's record: axis, input extent, taps, first tap, then scale, output width, p, q, c and
/// stretch as f32 bits.
fn record(a: &AxisPlan) -> [i64; AXIS_RECORD] {
    [
        ext(a.axis),
        ext(a.input),
        ext(a.taps),
        a.t0,
        bits(a.scale),
        bits(a.out_w),
        bits(a.p),
        bits(a.q),
        bits(a.c),
        bits(a.stretch),
    ]
}

/// The `meta` table of a resize of `x` (the kernels' header documents it).
pub(crate) fn meta(params: &Params, geo: &Geometry, x: &Operand) -> Result<Vec<i64>, OpError> {
    let (pick, cubic) = match params.mode {
        Mode::Nearest(rounding) => (rounding as i64, [0.0; 6]),
        Mode::Linear => (0, [0.0; 6]),
        Mode::Cubic(a) => (1, cubic_constants(a)),
    };
    let fill = match params.mode {
        Mode::Nearest(_) => fill_bits(x.dtype, params.extrapolation)? as i64,
        _ => bits(params.extrapolation),
    };
    let flags = i64::from(params.antialias) | i64::from(params.exclude_outside) << 1;
    let mut meta = vec![
        ext(x.dims.len()),
        numel(&geo.out_dims) as i64,
        ext(geo.axes.len()),
        params.coord as i64,
        pick,
        flags,
        fill,
    ];
    meta.extend(cubic.map(bits));
    debug_assert_eq!(meta.len(), HEADER);
    meta.extend(geo.out_dims.iter().map(|&d| ext(d)));
    meta.extend(contiguous(&x.dims));
    meta.extend(geo.axes.iter().flat_map(record));
    Ok(meta)
}

/// The launch resizing `x` as `geo` says.
pub(crate) fn launch(params: &Params, geo: &Geometry, x: &Operand) -> Result<GpuNode, OpError> {
    if geo.axes.len() > MAX_RESIZED_AXES {
        return Err(OpError::eval(format!(
            "Resize of {} axes at once is not supported on GPU (at most {MAX_RESIZED_AXES})",
            geo.axes.len()
        )));
    }
    let kernel = match params.mode {
        Mode::Nearest(_) => ResizeKernel::Nearest { elem_bytes: x.dtype.size_bytes() as u8 },
        _ if x.dtype == saggar_shape::DType::F32 => ResizeKernel::Filter,
        _ => return Err(OpError::eval(format!("linear and cubic Resize compute f32 only, not {}", x.dtype))),
    };
    Ok(GpuNode::Launches(vec![GpuLaunch::new(
        kernel,
        meta(params, geo, x)?,
        Work::Elements(numel(&geo.out_dims)),
        vec![Slot::In(0), Slot::Out(0)],
    )]))
}
