//! The GPU kernels of the sampling family: GridSample (`grid_sample.cu`) and AffineGrid
//! (`affine_grid.cu`), one thread per output element; modes and extents travel in `meta`.

use super::{COORD_LIMIT, CUBIC_A};
use crate::ops::gpu::{GpuKernel, MAX_SPATIAL, render};

/// GridSample of f32 elements, every mode and padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GridSampleKernel;

impl GpuKernel for GridSampleKernel {
    fn prefix(&self) -> &'static str {
        "grid_sample"
    }

    fn source(&self) -> String {
        render(
            include_str!("grid_sample.cu"),
            &[
                ("MAX_SPATIAL", &MAX_SPATIAL.to_string()),
                ("LIMIT", &format!("{COORD_LIMIT:.1}f")),
                ("CUBIC_A", &format!("{CUBIC_A:?}f")),
            ],
        )
    }
}

/// AffineGrid of f32 matrices, 2-D and 3-D.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AffineGridKernel;

impl GpuKernel for AffineGridKernel {
    fn prefix(&self) -> &'static str {
        "affine_grid"
    }

    fn source(&self) -> String {
        render(include_str!("affine_grid.cu"), &[])
    }
}
