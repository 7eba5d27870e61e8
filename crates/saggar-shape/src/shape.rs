//! Dimensions, tensor specs and concrete shapes.

use std::fmt;

use smallvec::SmallVec;

use crate::DType;

/// How many dimensions a [`Shape`] keeps inline before it spills to the heap.
///
/// Six covers every common inference tensor (NCHW images, `[batch, seq, heads, head_dim]`
/// attention blocks, 5-D video); only rarer shapes pay for an allocation.
pub const INLINE_RANK: usize = 6;

/// One dimension of a [`TensorSpec`]: a fixed extent, or a named symbol bound per request.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    /// An extent fixed when the model was built.
    Fixed(u64),
    /// A symbolic extent such as `"batch"` or `"seq_len"`; every occurrence of the same
    /// name in one request must have the same value.
    Symbolic(Box<str>),
}

impl Dim {
    /// A fixed dimension.
    pub const fn fixed(extent: u64) -> Dim {
        Dim::Fixed(extent)
    }

    /// A symbolic dimension called `name`.
    pub fn symbolic(name: impl Into<Box<str>>) -> Dim {
        Dim::Symbolic(name.into())
    }

    /// The extent, when the dimension is fixed.
    pub fn as_fixed(&self) -> Option<u64> {
        match self {
            Dim::Fixed(extent) => Some(*extent),
            Dim::Symbolic(_) => None,
        }
    }

    /// The symbol name, when the dimension is symbolic.
    pub fn symbol(&self) -> Option<&str> {
        match self {
            Dim::Fixed(_) => None,
            Dim::Symbolic(name) => Some(name),
        }
    }
}

impl From<u64> for Dim {
    fn from(extent: u64) -> Dim {
        Dim::Fixed(extent)
    }
}

impl From<&str> for Dim {
    fn from(name: &str) -> Dim {
        Dim::Symbolic(name.into())
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(extent) => write!(f, "{extent}"),
            Dim::Symbolic(name) => f.write_str(name),
        }
    }
}

/// What a model declares about one of its inputs or outputs: a name, an element type and
/// one [`Dim`] per axis.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorSpec {
    name: Box<str>,
    dtype: DType,
    dims: Box<[Dim]>,
}

impl TensorSpec {
    /// A spec called `name` of element type `dtype` with the given dimensions.
    ///
    /// ```
    /// use saggar_shape::{DType, Dim, TensorSpec};
    /// let spec = TensorSpec::new("pixels", DType::F32, [Dim::symbolic("batch"), 3.into(), 224.into(), 224.into()]);
    /// assert_eq!(spec.rank(), 4);
    /// ```
    pub fn new(name: impl Into<Box<str>>, dtype: DType, dims: impl IntoIterator<Item = Dim>) -> TensorSpec {
        TensorSpec { name: name.into(), dtype, dims: dims.into_iter().collect() }
    }

    /// The tensor's name, unique among the inputs (or outputs) of one model.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The declared dimensions, outermost first.
    pub fn dims(&self) -> &[Dim] {
        &self.dims
    }

    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Whether every dimension is fixed.
    pub fn is_static(&self) -> bool {
        self.dims.iter().all(|dim| matches!(dim, Dim::Fixed(_)))
    }
}

/// A concrete shape: one extent per axis, outermost first.
///
/// Up to [`INLINE_RANK`] dimensions are stored inline, so building, cloning and comparing the
/// shapes of a request does not touch the allocator.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shape(SmallVec<[u64; INLINE_RANK]>);

impl Shape {
    /// A shape with the given extents.
    pub fn new(dims: &[u64]) -> Shape {
        Shape(SmallVec::from_slice(dims))
    }

    /// The shape of a scalar: rank 0, one element.
    pub fn scalar() -> Shape {
        Shape(SmallVec::new())
    }

    /// The extents, outermost first.
    pub fn dims(&self) -> &[u64] {
        &self.0
    }

    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// The number of elements, the product of the extents (1 for a scalar).
    pub fn element_count(&self) -> Result<u64, SizeOverflow> {
        element_count(&self.0)
    }

    /// The size in bytes of a tensor of this shape and element type.
    pub fn byte_size(&self, dtype: DType) -> Result<u64, SizeOverflow> {
        byte_size(&self.0, dtype)
    }

    /// Sets the extent of `axis`. Panics if `axis` is out of range, like slice indexing.
    pub fn set_dim(&mut self, axis: usize, extent: u64) {
        self.0[axis] = extent;
    }

    /// Appends an axis.
    pub fn push(&mut self, extent: u64) {
        self.0.push(extent);
    }
}

impl AsRef<[u64]> for Shape {
    fn as_ref(&self) -> &[u64] {
        &self.0
    }
}

impl std::ops::Deref for Shape {
    type Target = [u64];
    fn deref(&self) -> &[u64] {
        &self.0
    }
}

impl From<&[u64]> for Shape {
    fn from(dims: &[u64]) -> Shape {
        Shape::new(dims)
    }
}

impl<const N: usize> From<[u64; N]> for Shape {
    fn from(dims: [u64; N]) -> Shape {
        Shape::new(&dims)
    }
}

impl FromIterator<u64> for Shape {
    fn from_iter<I: IntoIterator<Item = u64>>(iter: I) -> Shape {
        Shape(iter.into_iter().collect())
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, extent) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{extent}")?;
        }
        f.write_str("]")
    }
}

/// The product of `dims` did not fit in 64 bits.
///
/// Carries the offending extents and the element size in bytes (1 when only the element count
/// was asked for), so the message can say exactly what overflowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the size of shape {dims} with {element_bytes}-byte elements overflows 64 bits")]
pub struct SizeOverflow {
    /// The extents whose product overflowed.
    pub dims: Shape,
    /// Bytes per element, 1 for an element count.
    pub element_bytes: u64,
}

/// The number of elements of a tensor with extents `dims` (1 for rank 0), with overflow as an error.
pub fn element_count(dims: &[u64]) -> Result<u64, SizeOverflow> {
    product(dims, 1)
}

/// The size in bytes of a tensor with extents `dims` and element type `dtype`, with overflow as an error.
pub fn byte_size(dims: &[u64], dtype: DType) -> Result<u64, SizeOverflow> {
    product(dims, dtype.size_bytes() as u64)
}

/// `element_bytes * product(dims)`, checked.
///
/// A zero extent makes the whole product zero even if a prefix of it would have overflowed,
/// matching what a tensor with an empty axis actually occupies.
pub(crate) fn product(dims: &[u64], element_bytes: u64) -> Result<u64, SizeOverflow> {
    if dims.contains(&0) {
        return Ok(0);
    }
    dims.iter()
        .try_fold(element_bytes, |acc, &extent| acc.checked_mul(extent))
        .ok_or_else(|| SizeOverflow { dims: Shape::new(dims), element_bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_size_multiplies_element_size() {
        let shape = Shape::from([2, 3, 4]);
        assert_eq!(shape.element_count(), Ok(24));
        assert_eq!(shape.byte_size(DType::F32), Ok(96));
        assert_eq!(Shape::scalar().byte_size(DType::F64), Ok(8));
    }

    #[test]
    fn overflow_is_an_error_naming_the_dims() {
        let err = byte_size(&[1 << 32, 1 << 30], DType::F32).unwrap_err();
        assert_eq!(err.dims.dims(), &[1 << 32, 1 << 30]);
        assert_eq!(err.element_bytes, 4);
        // The element count alone still fits.
        assert_eq!(element_count(&[1 << 32, 1 << 30]), Ok(1 << 62));
        assert!(element_count(&[u64::MAX, 2]).is_err());
    }

    #[test]
    fn zero_extent_never_overflows() {
        assert_eq!(byte_size(&[u64::MAX, u64::MAX, 0], DType::F64), Ok(0));
    }

    #[test]
    fn shapes_stay_inline_up_to_inline_rank() {
        let shape = Shape::from([1, 2, 3, 4, 5, 6]);
        assert!(!shape.0.spilled());
        let big = Shape::from([1, 2, 3, 4, 5, 6, 7]);
        assert!(big.0.spilled());
        assert_eq!(format!("{big}"), "[1, 2, 3, 4, 5, 6, 7]");
    }
}
