//! The GPU kernel of the conversion family: CastLike where it cannot fuse (`cast_like.cu`). Where,
//! Clip and Cast are elementwise expressions, fused by the lowering.

use saggar_shape::DType;

use crate::ops::gpu::{GpuKernel, ctype, render};

/// Cast's elementwise expression `expr` (of `$0`) as a launch of its own, from `from` to `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CastLikeKernel {
    pub(crate) from: DType,
    pub(crate) to: DType,
    pub(crate) expr: String,
}

impl GpuKernel for CastLikeKernel {
    fn prefix(&self) -> &'static str {
        "cast_like"
    }

    fn source(&self) -> String {
        render(
            include_str!("cast_like.cu"),
            &[
                ("TI", ctype(self.from).unwrap_or("float")),
                ("TO", ctype(self.to).unwrap_or("float")),
                ("EXPR", &self.expr.replace("$0", "x[i]")),
            ],
        )
    }
}
