//! Ops whose output extents depend on their input values: NonZero, Compress, Unique and
//! NonMaxSuppression. Each is declared with the spec's semantics: `infer` gives the exact output
//! shape when every input it depends on is a constant (so the importer folds the node), else an
//! unknown extent; `eval` is the exact host kernel.
//!
//! A compiled program cannot know such extents, so each op also has a *bounded form*
//! ([`Op::bounded`](crate::ops::Op::bounded)): an op of the same inputs and attributes computing
//! every output at its worst-case extent (fixed by the input shapes), the valid prefix along the
//! cut axis equal to the standard op's output and zeros after it, plus one more output, the count
//! (i64 `[1]`). Segmented runs read the count back and slice. The bounded forms run on CUDA and
//! HIP ([`gpu`]); the standard ops lower only where their extents are known (Compress of a
//! constant condition, empty outputs).
//!
//! Element orders shared by the host and the GPU kernels come from each element's bits: Unique
//! sorts by an unsigned key per element ([`order_key`]: integers by value, floats by value with
//! -0 and +0 equal and every NaN equal and above everything), and NonZero tests the bits with the
//! sign bit of floats cleared ([`nonzero_mask`]).

mod compress;
pub(crate) mod gpu;
mod nms;
mod nonzero;
mod unique;

#[cfg(test)]
pub(crate) use nms::bounded_without_matrix;

use std::sync::Arc;

use saggar_shape::{DType, Dim};

use crate::ops::{Bounded, NodeCtx, Op, OpEntry, OpError, ValueType};
use crate::tensor::{DataMut, DataRef, TensorMut};

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "NonZero", since: 9, until: 12, build: nonzero::build },
    OpEntry { op_type: "NonZero", since: 13, until: 24, build: nonzero::build },
    OpEntry { op_type: "Compress", since: 9, until: 10, build: compress::build },
    OpEntry { op_type: "Compress", since: 11, until: 24, build: compress::build },
    OpEntry { op_type: "Unique", since: 11, until: 24, build: unique::build },
    OpEntry { op_type: "NonMaxSuppression", since: 10, until: 10, build: nms::build },
    OpEntry { op_type: "NonMaxSuppression", since: 11, until: 24, build: nms::build },
];

/// The most bytes one output of a bounded form may take: a worst case above it (NonZero over a
/// huge tensor: `rank * numel` indices) is refused at inference rather than allocated.
pub(crate) const MAX_BOUNDED_BYTES: u64 = 1 << 30;

/// `dims` as a value type of `dtype`, refused when its bytes exceed [`MAX_BOUNDED_BYTES`].
fn bounded_type(op_type: &str, dtype: DType, dims: Vec<Dim>) -> Result<ValueType, OpError> {
    let ty = ValueType::new(dtype, dims);
    if let Some(fixed) = ty.fixed_dims() {
        let bytes = fixed.iter().try_fold(dtype.size_bytes() as u64, |n, &d| n.checked_mul(d as u64));
        if bytes.is_none_or(|b| b > MAX_BOUNDED_BYTES) {
            let shown = bytes.map_or("more than 2^64".to_string(), |b| b.to_string());
            return Err(OpError::infer(format!(
                "{op_type}.bounded's worst-case output {ty} takes {shown} bytes, above the limit of {MAX_BOUNDED_BYTES}; \
                 give the input a smaller shape"
            )));
        }
    }
    Ok(ty)
}

/// The count output of a bounded form.
fn count_type() -> ValueType {
    ValueType::fixed(DType::I64, &[1])
}

/// A bounded form's [`Bounded`]: `cuts` counted from the front of each output's axes, or from the
/// end when `from_end` (the node's axis is negative).
fn bounded(op: impl Op, op_type: &'static str, cuts: Vec<Option<usize>>, from_end: bool) -> Option<Bounded> {
    Some(Bounded { op: Arc::new(op), op_type, cuts, cuts_from_end: from_end })
}

/// How a cut along an `axis` attribute is written in [`Bounded::cuts`]: `(axis, from_end)` for the
/// attribute's own axis, and for a rank-1 output cut along its only axis.
fn cut_of(axis: Option<i64>) -> ((usize, bool), usize) {
    match axis {
        Some(a) if a < 0 => ((a.unsigned_abs() as usize, true), 1),
        Some(a) => ((a as usize, false), 0),
        None => ((0, false), 0),
    }
}

/// Writes `count` into a bounded form's count output.
fn write_count(out: &mut TensorMut<'_>, count: usize) -> Result<(), OpError> {
    match out.i64s()? {
        [c] => {
            *c = count as i64;
            Ok(())
        }
        other => Err(OpError::eval(format!("the count output holds {} elements, not 1", other.len()))),
    }
}

/// An attribute that must be 0 or 1 (`default` when absent).
fn flag(ctx: &NodeCtx<'_>, name: &str, default: bool) -> Result<bool, OpError> {
    match ctx.int_or(name, i64::from(default))? {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(OpError::attribute(name, format!("must be 0 or 1, found {other}"))),
    }
}

/// `(outer, len, inner)` of `dims` around `axis` (without one, the flattened input:
/// `(1, numel, 1)`).
fn around_axis(axis: Option<i64>, dims: &[usize]) -> Result<(usize, usize, usize), OpError> {
    let p = |d: &[usize]| d.iter().product::<usize>();
    match axis {
        None => Ok((1, p(dims), 1)),
        Some(a) => {
            let axis = crate::ops::shape_util::normalize_axis(a, dims.len())?;
            Ok((p(&dims[..axis]), dims[axis], p(&dims[axis + 1..])))
        }
    }
}

/// A dimension from an extent.
fn fixed(n: usize) -> Dim {
    Dim::Fixed(n as u64)
}

/// The product of `dims` when all are fixed.
fn fixed_numel(dims: &[Dim]) -> Option<usize> {
    dims.iter().try_fold(1usize, |n, d| n.checked_mul(usize::try_from(d.as_fixed()?).ok()?))
}

/// Calls `f(i, bits)` for every element, its bits zero-extended (bools as 0 or 1, halves as
/// their bits, signed integers as their two's complement of their own width).
fn for_each_bits(data: DataRef<'_>, mut f: impl FnMut(usize, u64)) {
    macro_rules! each {
        ($v:expr, |$x:ident| $bits:expr) => {
            $v.iter().enumerate().for_each(|(i, &$x)| f(i, $bits))
        };
    }
    match data {
        DataRef::F32(v) => each!(v, |x| u64::from(x.to_bits())),
        DataRef::F64(v) => each!(v, |x| x.to_bits()),
        DataRef::I8(v) => each!(v, |x| u64::from(x as u8)),
        DataRef::I16(v) => each!(v, |x| u64::from(x as u16)),
        DataRef::I32(v) => each!(v, |x| u64::from(x as u32)),
        DataRef::I64(v) => each!(v, |x| x as u64),
        DataRef::U8(v) | DataRef::Bool(v) => each!(v, |x| u64::from(x)),
        DataRef::U16(v) | DataRef::F16(v) | DataRef::BF16(v) => each!(v, |x| u64::from(x)),
        DataRef::U32(v) => each!(v, |x| u64::from(x)),
        DataRef::U64(v) => each!(v, |x| x),
    }
}

/// How the bits of one element type order: width in bits, and for floats the exponent mask (the
/// largest magnitude that is not NaN); `None` for integers (signed or not) and bool.
fn float_exponent(dtype: DType) -> Option<u64> {
    match dtype {
        DType::F16 => Some(0x7c00),
        DType::BF16 => Some(0x7f80),
        DType::F32 => Some(0x7f80_0000),
        DType::F64 => Some(0x7ff0_0000_0000_0000),
        _ => None,
    }
}

/// The bits of `dtype` that make an element nonzero: all but the sign for floats (-0 is zero, NaN
/// is not), all for integers and bool.
fn nonzero_mask(dtype: DType) -> u64 {
    let width = dtype.size_bytes() as u32 * 8;
    let all = u64::MAX >> (64 - width);
    if float_exponent(dtype).is_some() { all >> 1 } else { all }
}

/// The unsigned key ordering elements of `dtype` by value from their bits ([`for_each_bits`]):
/// integers by value; floats by value with both zeros one key and every NaN one key above all.
/// The GPU kernels compute the same (`gpu::key_code`).
fn order_key(dtype: DType, bits: u64) -> u64 {
    let width = dtype.size_bytes() as u32 * 8;
    let all = u64::MAX >> (64 - width);
    let sign = 1u64 << (width - 1);
    match float_exponent(dtype) {
        Some(exponent) => {
            let magnitude = bits & !sign;
            if magnitude > exponent {
                u64::MAX
            } else if magnitude == 0 {
                sign
            } else if bits & sign != 0 {
                !bits & all
            } else {
                bits | sign
            }
        }
        None if matches!(dtype, DType::I8 | DType::I16 | DType::I32 | DType::I64) => {
            // Sign-extend to 64 bits, then flip the sign so that the order is unsigned.
            let shift = 64 - width;
            (((bits << shift) as i64 >> shift) as u64) ^ (1 << 63)
        }
        None => bits,
    }
}

/// Copies `sources.len()` slices along the middle axis of `x` (`[outer, len, inner]`) into the
/// first slices of `y` (`[outer, m, inner]`): slice `j` of `y` is slice `sources[j]` of `x`; the
/// slices after them are zeros. Any element type (moved as bits).
fn copy_slices(
    x: DataRef<'_>,
    y: &mut DataMut<'_>,
    (outer, len, inner): (usize, usize, usize),
    m: usize,
    sources: &[usize],
) -> Result<(), OpError> {
    if sources.len() > m || sources.iter().any(|&s| s >= len) {
        return Err(OpError::eval(format!("{} slices of {len} do not fit an output of {m}", sources.len())));
    }
    if x.len() != outer * len * inner || y.len() != outer * m * inner {
        return Err(OpError::eval("the output's shape does not match the input's"));
    }
    crate::tensor::same_type!(x, y, |x, y| {
        for o in 0..outer {
            let out = &mut y[o * m * inner..(o + 1) * m * inner];
            for (j, &s) in sources.iter().enumerate() {
                let from = (o * len + s) * inner;
                out[j * inner..(j + 1) * inner].copy_from_slice(&x[from..from + inner]);
            }
            out[sources.len() * inner..].fill(Default::default());
        }
        Ok(())
    })
}

/// Refuses the GPU lowering of a standard op whose outputs are not all empty (their extents come
/// from values: the bounded form runs instead); launches nothing for empty ones.
fn gpu_of_standard(op_type: &str, ctx: &crate::ops::gpu::GpuCtx<'_>) -> Result<crate::ops::gpu::GpuNode, OpError> {
    if !ctx.outputs.is_empty() && ctx.outputs.iter().all(|o| o.dims.contains(&0)) {
        return Ok(crate::ops::gpu::GpuNode::Launches(Vec::new()));
    }
    Err(OpError::eval(format!(
        "{op_type}'s output extents depend on its input values: on CUDA and HIP it runs as {op_type}.bounded \
         (Op::bounded), whose count a segmented run reads back"
    )))
}

#[cfg(test)]
mod tests;
