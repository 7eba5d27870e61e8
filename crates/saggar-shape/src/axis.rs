//! Padding and slicing along an inner axis, such as a sequence: the extent of one axis grows to
//! a bucket with a declared pad value on the way in and shrinks back to the real extent on the way
//! out, for every index of the axes before it.
//!
//! A tensor of extents `[d_0, ..., d_{a-1}, n, d_{a+1}, ...]` padded along axis `a` to `m >= n`
//! is `outer = d_0 * ... * d_{a-1}` blocks, each holding `n` (real) or `m` (padded) runs of
//! `inner = d_{a+1} * ...` elements. An [`AxisPlan`] holds those numbers; [`pad_axis_into`] and
//! [`slice_axis_into`] move the bytes on the host. The batch axis keeps its own rule (the last
//! real row repeated, [`PadPlan`](crate::PadPlan)); this one fills with a value because a
//! repeated token would change what a masked model attends to, while a pad token under a zero
//! mask does not.

use crate::shape::product;
use crate::{Shape, ShapeError, TensorShape};

/// How one tensor is padded along one axis, or sliced back: block counts and byte sizes, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AxisPlan {
    outer: usize,
    /// Bytes of one position of the axis (the run of inner elements).
    position_bytes: usize,
    element_bytes: usize,
    real: usize,
    padded: usize,
}

impl AxisPlan {
    /// The plan for `tensor` (its real extents) padded along `axis` to `padded` positions.
    ///
    /// Fails when the axis does not exist, when `padded` is below the real extent, or when the
    /// padded tensor's byte size does not fit in `usize`.
    pub fn new(tensor: TensorShape<'_>, axis: usize, padded: u64) -> Result<AxisPlan, ShapeError> {
        let rank = tensor.dims.len();
        if axis >= rank {
            return Err(ShapeError::AxisOutOfRange { tensor: tensor.name.into(), axis, rank });
        }
        let extent = tensor.dims[axis];
        if padded < extent {
            return Err(ShapeError::PaddedExtentTooSmall { tensor: tensor.name.into(), axis, extent, padded });
        }
        let element_bytes = tensor.dtype.size_bytes() as u64;
        let padded_dims: Shape =
            tensor.dims.iter().enumerate().map(|(a, &d)| if a == axis { padded } else { d }).collect();
        let overflow = |dims: &[u64]| ShapeError::Overflow {
            input: tensor.name.into(),
            source: crate::SizeOverflow { dims: Shape::new(dims), element_bytes },
        };
        let to_usize = |v: Result<u64, crate::SizeOverflow>| {
            v.ok().and_then(|v| usize::try_from(v).ok()).ok_or_else(|| overflow(&padded_dims))
        };
        // The padded size bounds every count below, so checking it checks them all.
        to_usize(product(&padded_dims, element_bytes))?;
        Ok(AxisPlan {
            outer: to_usize(product(&tensor.dims[..axis], 1))?,
            position_bytes: to_usize(product(&tensor.dims[axis + 1..], element_bytes))?,
            element_bytes: element_bytes as usize,
            real: to_usize(Ok(extent))?,
            padded: to_usize(Ok(padded))?,
        })
    }

    /// Bytes of the tensor at its real extent.
    pub fn real_len(&self) -> usize {
        self.outer * self.real * self.position_bytes
    }

    /// Bytes of the tensor padded along the axis.
    pub fn padded_len(&self) -> usize {
        self.outer * self.padded * self.position_bytes
    }

    /// Whether the axis grows at all (a plan that pads nothing is a plain copy).
    pub fn pads(&self) -> bool {
        self.padded > self.real
    }
}

/// Pads a tensor along the plan's axis: copies every real run of `src` into place in `dst` and
/// fills the positions after them with `pad`, one element of the tensor's type (little-endian).
///
/// `dst` may be longer than [`AxisPlan::padded_len`]; bytes past it are left alone. Fails,
/// writing nothing, when a buffer is too short or `pad` is not one element.
pub fn pad_axis_into(src: &[u8], dst: &mut [u8], plan: &AxisPlan, pad: &[u8]) -> Result<(), ShapeError> {
    check_lengths(src.len(), plan.real_len(), dst.len(), plan.padded_len())?;
    if pad.len() != plan.element_bytes {
        return Err(ShapeError::PadValueSize { expected: plan.element_bytes, actual: pad.len() });
    }
    let real = plan.real * plan.position_bytes;
    let padded = plan.padded * plan.position_bytes;
    if padded == 0 {
        return Ok(());
    }
    if real == 0 {
        fill(&mut dst[..plan.padded_len()], pad);
        return Ok(());
    }
    for (block, from) in dst[..plan.padded_len()].chunks_exact_mut(padded).zip(src.chunks_exact(real)) {
        block[..real].copy_from_slice(from);
        fill(&mut block[real..], pad);
    }
    Ok(())
}

/// Slices a tensor padded along the plan's axis back to its real extent: copies every real run
/// of `src` (the padded tensor) into `dst`.
///
/// Fails, writing nothing, when a buffer is too short.
pub fn slice_axis_into(src: &[u8], dst: &mut [u8], plan: &AxisPlan) -> Result<(), ShapeError> {
    check_lengths(src.len(), plan.padded_len(), dst.len(), plan.real_len())?;
    let real = plan.real * plan.position_bytes;
    let padded = plan.padded * plan.position_bytes;
    if real == 0 {
        return Ok(());
    }
    for (to, block) in dst[..plan.real_len()].chunks_exact_mut(real).zip(src.chunks_exact(padded)) {
        to.copy_from_slice(&block[..real]);
    }
    Ok(())
}

fn check_lengths(src: usize, src_needed: usize, dst: usize, dst_needed: usize) -> Result<(), ShapeError> {
    if src < src_needed {
        return Err(ShapeError::BufferTooShort { buffer: "source", needed: src_needed, actual: src });
    }
    if dst < dst_needed {
        return Err(ShapeError::BufferTooShort { buffer: "destination", needed: dst_needed, actual: dst });
    }
    Ok(())
}

/// Fills `buf` with copies of `element` (whose length divides `buf`'s), doubling each step.
fn fill(buf: &mut [u8], element: &[u8]) {
    if buf.is_empty() || element.is_empty() {
        return;
    }
    let first = element.len().min(buf.len());
    buf[..first].copy_from_slice(&element[..first]);
    let mut filled = first;
    while filled < buf.len() {
        let count = filled.min(buf.len() - filled);
        buf.copy_within(..count, filled);
        filled += count;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::DType;

    #[test]
    fn pads_each_row_with_the_value_and_slices_back() {
        // [2, 3] of u16 padded along axis 1 to 5 with 0xBEEF.
        let src: Vec<u8> = (0..12).collect();
        let plan = AxisPlan::new(TensorShape::new("ids", DType::U16, &[2, 3]), 1, 5).unwrap();
        assert_eq!((plan.real_len(), plan.padded_len()), (12, 20));
        let mut dst = vec![0xAA; 22];
        pad_axis_into(&src, &mut dst, &plan, &0xBEEFu16.to_le_bytes()).unwrap();
        assert_eq!(&dst[..6], &src[..6]);
        assert_eq!(&dst[6..10], &[0xEF, 0xBE, 0xEF, 0xBE]);
        assert_eq!(&dst[10..16], &src[6..12]);
        assert_eq!(&dst[16..20], &[0xEF, 0xBE, 0xEF, 0xBE]);
        assert_eq!(&dst[20..], &[0xAA, 0xAA], "bytes past the plan stay untouched");
        let mut back = vec![0u8; 12];
        slice_axis_into(&dst, &mut back, &plan).unwrap();
        assert_eq!(back, src);
    }

    #[test]
    fn bad_plans_and_buffers_are_errors() {
        let t = TensorShape::new("x", DType::F32, &[2, 4]);
        assert!(matches!(AxisPlan::new(t, 2, 8), Err(ShapeError::AxisOutOfRange { axis: 2, rank: 2, .. })));
        assert!(matches!(AxisPlan::new(t, 1, 3), Err(ShapeError::PaddedExtentTooSmall { extent: 4, .. })));
        let huge = TensorShape::new("huge", DType::F64, &[2, 1]);
        assert!(matches!(AxisPlan::new(huge, 1, u64::MAX / 4), Err(ShapeError::Overflow { .. })));
        let plan = AxisPlan::new(t, 1, 8).unwrap();
        let mut dst = vec![0u8; 63];
        assert!(matches!(
            pad_axis_into(&[0; 32], &mut dst, &plan, &[0; 4]),
            Err(ShapeError::BufferTooShort { buffer: "destination", .. })
        ));
        let mut dst = vec![0u8; 64];
        assert!(matches!(pad_axis_into(&[0; 32], &mut dst, &plan, &[0; 2]), Err(ShapeError::PadValueSize { .. })));
        assert!(matches!(
            slice_axis_into(&[0; 63], &mut [0; 32], &plan),
            Err(ShapeError::BufferTooShort { buffer: "source", .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Padding then slicing is the identity, and every padded position holds the pad value,
        /// for any rank, axis and extents (zero extents included).
        #[test]
        fn pad_then_slice_round_trips(
            dims in proptest::collection::vec(0u64..4, 1..4),
            axis_pick in 0usize..4,
            extra in 0u64..4,
        ) {
            let axis = axis_pick % dims.len();
            let t = TensorShape::new("x", DType::U8, &dims);
            let plan = AxisPlan::new(t, axis, dims[axis] + extra).unwrap();
            let src: Vec<u8> = (0..plan.real_len()).map(|i| (i % 200) as u8 + 1).collect();
            let mut padded = vec![0u8; plan.padded_len()];
            pad_axis_into(&src, &mut padded, &plan, &[0]).unwrap();
            prop_assert_eq!(padded.iter().filter(|&&b| b == 0).count(), plan.padded_len() - plan.real_len());
            let mut back = vec![0u8; plan.real_len()];
            slice_axis_into(&padded, &mut back, &plan).unwrap();
            prop_assert_eq!(back, src);
        }
    }
}
