//! The GPU kernels of the region family: RoiAlign (`roi_align.cu`) and MaxRoiPool
//! (`max_roi_pool.cu`), one thread per output element; extents and attributes travel in `meta`.

use saggar_shape::DType;

use super::MAX_ROI_GRID;
use crate::ops::gpu::{GpuKernel, index_type, render};

/// RoiAlign with `index` typed batch indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RoiAlignKernel {
    pub(crate) index: DType,
}

impl GpuKernel for RoiAlignKernel {
    fn prefix(&self) -> &'static str {
        "roi_align"
    }

    fn source(&self) -> String {
        render(include_str!("roi_align.cu"), &[("IX", index_type(self.index)), ("MAX_GRID", &MAX_ROI_GRID.to_string())])
    }
}

/// MaxRoiPool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MaxRoiPoolKernel;

impl GpuKernel for MaxRoiPoolKernel {
    fn prefix(&self) -> &'static str {
        "max_roi_pool"
    }

    fn source(&self) -> String {
        render(include_str!("max_roi_pool.cu"), &[("LIMIT", &format!("{:.1}f", super::CELL_LIMIT))])
    }
}
