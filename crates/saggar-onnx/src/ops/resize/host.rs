//! The host kernels of the resize family: nearest mode moves elements of any type, linear and
//! cubic modes filter f32 elements. Each output element is computed as the GPU kernels compute it:
//! the same per-axis taps and weights (`geometry.rs`), multiplied from the last resized axis to the
//! first and summed over the taps in row-major order.

use super::geometry::{Geometry, Mode, Nearest, Params, Taps, cubic_constants};
use crate::ops::OpError;
use crate::ops::shape_util::strides;

/// An element type nearest mode moves, made from the bits of its extrapolation value
/// ([`super::geometry::fill_bits`]).
pub(crate) trait FromBits: Copy {
    fn from_bits(bits: u64) -> Self;
}

impl FromBits for f32 {
    fn from_bits(bits: u64) -> f32 {
        f32::from_bits(bits as u32)
    }
}

impl FromBits for f64 {
    fn from_bits(bits: u64) -> f64 {
        f64::from_bits(bits)
    }
}

/// Integers (and the bits of bool, f16 and bf16) are the low bits.
macro_rules! int_from_bits {
    ($($ty:ty),*) => {$(
        impl FromBits for $ty {
            fn from_bits(bits: u64) -> $ty {
                bits as $ty
            }
        }
    )*};
}
int_from_bits!(i8, u8, i16, u16, i32, u32, i64, u64);

/// Checks that `x` and `y` hold the input and output extents' elements.
fn check_lens(geo: &Geometry, in_dims: &[usize], x: usize, y: usize) -> Result<(), OpError> {
    if x != in_dims.iter().product::<usize>() || y != geo.out_dims.iter().product::<usize>() {
        return Err(OpError::eval(format!(
            "Resize: {x} input and {y} output elements do not match {in_dims:?} and {:?}",
            geo.out_dims
        )));
    }
    Ok(())
}

/// Nearest mode: each output element copies the input element its axes round to, or `fill` (the
/// extrapolation value's bits) where tf_crop_and_resize falls outside.
pub(crate) fn nearest<T: FromBits>(
    params: &Params,
    rounding: Nearest,
    geo: &Geometry,
    in_dims: &[usize],
    x: &[T],
    y: &mut [T],
    fill: u64,
) -> Result<(), OpError> {
    check_lens(geo, in_dims, x.len(), y.len())?;
    let (rank, out) = (in_dims.len(), &geo.out_dims);
    let in_strides = strides(in_dims);
    // Per axis, the input offset of each output coordinate (`None`: extrapolated).
    let tables: Vec<Vec<Option<usize>>> = (0..rank)
        .map(|d| match geo.axes.iter().find(|a| a.axis == d) {
            Some(a) => (0..a.output).map(|o| a.nearest(params, rounding, o).map(|j| j * in_strides[d])).collect(),
            None => (0..out[d]).map(|o| Some(o * in_strides[d])).collect(),
        })
        .collect();
    let fill = T::from_bits(fill);
    let Some(&last) = out.last().filter(|&&n| n > 0) else { return Ok(()) };
    for (row, ys) in y.chunks_exact_mut(last).enumerate() {
        let (mut rem, mut base) = (row, Some(0usize));
        for d in (0..rank - 1).rev() {
            base = base.zip(tables[d][rem % out[d]]).map(|(b, o)| b + o);
            rem /= out[d];
        }
        for (yv, at) in ys.iter_mut().zip(&tables[rank - 1]) {
            *yv = match base.zip(*at) {
                Some((b, o)) => x[b + o],
                None => fill,
            };
        }
    }
    Ok(())
}

/// One resized axis's taps for every output coordinate.
struct AxisTable {
    axis: usize,
    input: usize,
    stride: usize,
    taps: usize,
    at: Vec<Taps>,
    /// `taps` weights per output coordinate.
    weights: Vec<f32>,
}

/// Linear or cubic mode (f32): each output element is the sum over every combination of its axes'
/// taps of the weights' product times the input element there (indices clamped to the axes), or
/// the extrapolation value where tf_crop_and_resize falls outside.
pub(crate) fn filter(
    params: &Params,
    geo: &Geometry,
    in_dims: &[usize],
    x: &[f32],
    y: &mut [f32],
) -> Result<(), OpError> {
    check_lens(geo, in_dims, x.len(), y.len())?;
    let cubic = match params.mode {
        Mode::Cubic(a) => Some(cubic_constants(a)),
        _ => None,
    };
    let in_strides = strides(in_dims);
    let tables: Vec<AxisTable> = geo
        .axes
        .iter()
        .map(|a| {
            let mut weights = vec![0.0f32; a.output * a.taps];
            let at = (0..a.output)
                .map(|o| a.filter(params, cubic.as_ref(), o, &mut weights[o * a.taps..(o + 1) * a.taps]))
                .collect();
            AxisTable { axis: a.axis, input: a.input, stride: in_strides[a.axis], taps: a.taps, at, weights }
        })
        .collect();
    let table_of: Vec<Option<usize>> = (0..in_dims.len()).map(|d| tables.iter().position(|t| t.axis == d)).collect();
    let total_taps: usize = tables.iter().map(|t| t.taps).product();
    let (mut pos, mut tap) = (vec![0usize; tables.len()], vec![0usize; tables.len()]);
    let out = &geo.out_dims;
    for (i, yv) in y.iter_mut().enumerate() {
        let (mut rem, mut base) = (i, 0usize);
        for d in (0..out.len()).rev() {
            match table_of[d] {
                Some(s) => pos[s] = rem % out[d],
                None => base += rem % out[d] * in_strides[d],
            }
            rem /= out[d];
        }
        if tables.iter().zip(&pos).any(|(t, &o)| t.at[o].outside) {
            *yv = params.extrapolation;
            continue;
        }
        let mut acc = 0.0f32;
        tap.fill(0);
        for _ in 0..total_taps {
            let (mut off, mut w) = (base, 1.0f32);
            for (s, t) in tables.iter().enumerate().rev() {
                let j = (t.at[pos[s]].lo + tap[s] as i64).clamp(0, t.input as i64 - 1) as usize;
                off += j * t.stride;
                w *= t.weights[pos[s] * t.taps + tap[s]];
            }
            acc += w * x[off];
            // The next combination, the last axis's tap fastest.
            for (s, t) in tables.iter().enumerate().rev() {
                tap[s] += 1;
                if tap[s] < t.taps {
                    break;
                }
                tap[s] = 0;
            }
        }
        *yv = acc;
    }
    Ok(())
}
