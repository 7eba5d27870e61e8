//! The generated GEMM of MatMul and Gemm (`gemm.cu`), for GEMMs the backend's BLAS-Lt library does
//! not take.

use crate::ops::gpu::{GpuKernel, TILE, float_literal, render};

/// `C[b] = alpha op(A[b]) op(B[b]) + beta bias` (the bias only with `bias`), f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GemmKernel {
    pub(crate) alpha_bits: u32,
    pub(crate) beta_bits: u32,
    pub(crate) bias: bool,
}

impl GpuKernel for GemmKernel {
    fn prefix(&self) -> &'static str {
        "gemm"
    }

    fn source(&self) -> String {
        let (bias_param, bias_add) = if self.bias {
            (
                ", const float* __restrict__ c",
                format!(" + {} * c[row * c_rs + col * c_cs]", float_literal(self.beta_bits)),
            )
        } else {
            ("", String::new())
        };
        render(
            include_str!("gemm.cu"),
            &[
                ("BIAS_PARAM", bias_param),
                ("BIAS_ADD", &bias_add),
                ("ALPHA", &float_literal(self.alpha_bits)),
                ("TILE", &TILE.to_string()),
            ],
        )
    }
}
