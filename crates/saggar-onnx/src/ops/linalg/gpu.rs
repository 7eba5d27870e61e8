//! The kernels of the linear-algebra family: the generated GEMM of MatMul, Gemm and Einsum
//! (`gemm.cu`), for GEMMs the backend's BLAS-Lt library does not take; Einsum's generic contraction
//! (`einsum.cu`); Det (`det.cu`).

use saggar_shape::DType;

use crate::ops::gpu::{BLOCK, GpuKernel, TILE, ctype, float_literal, render};

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

/// Largest matrix Det takes on GPU (its matrix sits in a block's static shared memory).
pub(crate) const DET_MAX: usize = 64;

/// Det of each matrix, a block per matrix (`det.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DetKernel;

impl GpuKernel for DetKernel {
    fn prefix(&self) -> &'static str {
        "det"
    }

    fn source(&self) -> String {
        render(include_str!("det.cu"), &[("MAX", &DET_MAX.to_string()), ("BLOCK", &BLOCK.to_string())])
    }
}

/// Einsum's generic contraction of `operands` operands of `dtype` (f32, i64 or i32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EinsumKernel {
    pub(crate) operands: usize,
    pub(crate) dtype: DType,
}

impl GpuKernel for EinsumKernel {
    fn prefix(&self) -> &'static str {
        "einsum"
    }

    fn source(&self) -> String {
        let t = ctype(self.dtype).unwrap_or("float");
        // Integers multiply and add as unsigned values of their width, which wrap as the host's do.
        let acc = match self.dtype {
            DType::I64 => "unsigned long long",
            DType::I32 => "unsigned int",
            _ => "float",
        };
        let params: Vec<String> = (0..self.operands).map(|k| format!("const {t}* __restrict__ x{k}")).collect();
        let product: Vec<String> = (0..self.operands).map(|k| format!("({acc})x{k}[off[{k}]]")).collect();
        render(
            include_str!("einsum.cu"),
            &[
                ("N", &self.operands.to_string()),
                ("PARAMS", &params.join(", ")),
                ("PRODUCT", &product.join(" * ")),
                ("T", t),
                ("ACC", acc),
            ],
        )
    }
}
