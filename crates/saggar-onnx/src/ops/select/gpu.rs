//! The GPU kernel of the selection family: TopK (`top_k.cu`), a block per row sorting it in shared
//! memory or selecting `k` times.

use saggar_shape::DType;

use crate::ops::gpu::{BLOCK, GpuKernel, ctype, render};

/// TopK of `dtype` elements (f32, i64 or i32), the largest first with `largest`, else the smallest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TopKKernel {
    pub(crate) dtype: DType,
    pub(crate) largest: bool,
}

impl GpuKernel for TopKKernel {
    fn prefix(&self) -> &'static str {
        "top_k"
    }

    fn source(&self) -> String {
        let (cmp, nan_first) = if self.largest { (">", "true") } else { ("<", "false") };
        render(
            include_str!("top_k.cu"),
            &[
                ("T", ctype(self.dtype).unwrap_or("float")),
                ("CMP", cmp),
                ("NAN_FIRST", nan_first),
                ("BLOCK", &BLOCK.to_string()),
                ("SORT", "2048"),
            ],
        )
    }
}
