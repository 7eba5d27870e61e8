//! The GPU kernels of the constants family: ConstantOfShape (`fill.cu`), EyeLike (`eye_like.cu`)
//! and OneHot (`one_hot.cu`), each writing elements as bits of their width.

use saggar_shape::DType;

use crate::ops::gpu::{GpuKernel, bits_type, index_type, render};

/// A fill of `elem_bytes`-byte elements with the bits `bits` (ConstantOfShape).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FillKernel {
    pub(crate) elem_bytes: u8,
    pub(crate) bits: u64,
}

impl GpuKernel for FillKernel {
    fn prefix(&self) -> &'static str {
        "fill"
    }

    fn source(&self) -> String {
        render(include_str!("fill.cu"), &[("T", bits_type(self.elem_bytes)), ("BITS", &format!("{}ull", self.bits))])
    }
}

/// EyeLike of `elem_bytes`-byte elements, 1 being `one_bits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EyeLikeKernel {
    pub(crate) elem_bytes: u8,
    pub(crate) one_bits: u64,
}

impl GpuKernel for EyeLikeKernel {
    fn prefix(&self) -> &'static str {
        "eye_like"
    }

    fn source(&self) -> String {
        render(
            include_str!("eye_like.cu"),
            &[("T", bits_type(self.elem_bytes)), ("ONE", &format!("{}ull", self.one_bits))],
        )
    }
}

/// OneHot of `elem_bytes`-byte values with `index` (f32, i32 or i64) indices; `negative` indices
/// count from the depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OneHotKernel {
    pub(crate) elem_bytes: u8,
    pub(crate) index: DType,
    pub(crate) negative: bool,
}

impl GpuKernel for OneHotKernel {
    fn prefix(&self) -> &'static str {
        "one_hot"
    }

    fn source(&self) -> String {
        let (ix, class) = if self.index == DType::F32 {
            (
                "float",
                "const double t = trunc((double)raw); const bool ok = t >= (double)lo && t < (double)depth; const onnx_i64 c = ok ? (onnx_i64)t : 0;",
            )
        } else {
            (index_type(self.index), "const onnx_i64 c = (onnx_i64)raw; const bool ok = c >= lo && c < depth;")
        };
        render(
            include_str!("one_hot.cu"),
            &[
                ("T", bits_type(self.elem_bytes)),
                ("IX", ix),
                ("CLASS", class),
                ("NEGATIVE", if self.negative { "1" } else { "0" }),
            ],
        )
    }
}
