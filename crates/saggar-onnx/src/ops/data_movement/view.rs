//! Outputs that are a strided view of input 0, materialised: Tile, DepthToSpace and SpaceToDepth
//! describe theirs as a [`StridedView`], which the host walks and the GPU copies, so both read the
//! same elements in the same order.

use saggar_shape::DType;

use super::gpu::copy_launch;
use crate::error::OpError;
use crate::ops::gpu::{GpuNode, Slot, contiguous};
use crate::ops::shape_util::for_each_broadcast;
use crate::tensor::{TensorMut, TensorView, checked_numel, same_type};

/// Output element `i`, at row-major coordinates `c` of `dims`, is input element `Σ c_d strides_d`.
/// The output's own extents are `dims` merged in order (a Tile of `[2, 3]` by `[2, 1]` is the view
/// `[2, 2, 1, 3]` with strides `[0, 3, 0, 1]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StridedView {
    pub(super) dims: Vec<usize>,
    pub(super) strides: Vec<usize>,
}

impl StridedView {
    /// The view of `split` (the input's elements seen with these extents, row-major) read in the
    /// order `perm`: a transpose of a reshape.
    pub(super) fn permuted(split: &[usize], perm: &[usize]) -> StridedView {
        let own = crate::ops::shape_util::strides(split);
        StridedView { dims: perm.iter().map(|&p| split[p]).collect(), strides: perm.iter().map(|&p| own[p]).collect() }
    }

    /// Writes the view of `x` into `out`, checking that it covers `out` and reads inside `x`.
    pub(super) fn eval(&self, x: &TensorView<'_>, out: &mut TensorMut<'_>) -> Result<(), OpError> {
        let n = checked_numel(&self.dims).ok_or_else(|| OpError::eval("view size overflows"))?;
        let last =
            self.dims.iter().zip(&self.strides).map(|(&d, &s)| d.saturating_sub(1).saturating_mul(s)).sum::<usize>();
        same_type!(x.data, &mut out.data, |s, d| {
            if d.len() != n || (n > 0 && last >= s.len()) {
                return Err(OpError::eval(format!(
                    "view {self:?} does not fit {} inputs and {} outputs",
                    s.len(),
                    d.len()
                )));
            }
            for_each_broadcast(&self.dims, [self.strides.as_slice()], |i, [o]| d[i] = s[o]);
            Ok(())
        })
    }

    /// The copy of the view of input 0 into output 0, elements of `dtype` moved as bits.
    pub(super) fn gpu(&self, dtype: DType) -> GpuNode {
        let strides: Vec<i64> = self.strides.iter().map(|&s| i64::try_from(s).unwrap_or(i64::MAX)).collect();
        let out_strides = contiguous(&self.dims);
        let (input, output) = ((Slot::In(0), 0, strides.as_slice()), (Slot::Out(0), 0, out_strides.as_slice()));
        GpuNode::Launches(vec![copy_launch(dtype.size_bytes(), &self.dims, input, output)])
    }
}
