//! The kernels of the linear-algebra family: the generated GEMM of MatMul, Gemm and Einsum
//! (`gemm.cu`), for GEMMs the backend's BLAS-Lt library does not take; Einsum's generic contraction
//! (`einsum.cu`); Det (`det.cu`).

use saggar_shape::DType;

use crate::ops::gpu::{BLOCK, GpuKernel, TILE, ctype, float_literal, load_f32, render, store_f32};

/// `C[b] = alpha op(A[b]) op(B[b]) + beta bias` (the bias only with `bias`), accumulated in f32. A and
/// B are of type `inputs` (f32, or a half precision read exactly as f32); the output and the bias are
/// of type `output`, rounded to it last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GemmKernel {
    pub(crate) alpha_bits: u32,
    pub(crate) beta_bits: u32,
    pub(crate) bias: bool,
    pub(crate) inputs: DType,
    pub(crate) output: DType,
}

impl GemmKernel {
    /// An all-f32 GEMM.
    pub(crate) const fn f32(alpha_bits: u32, beta_bits: u32, bias: bool) -> GemmKernel {
        GemmKernel { alpha_bits, beta_bits, bias, inputs: DType::F32, output: DType::F32 }
    }

    /// The same GEMM with A and B of type `inputs` and the output (and bias) of type `output`.
    pub(crate) const fn with_types(mut self, inputs: DType, output: DType) -> GemmKernel {
        self.inputs = inputs;
        self.output = output;
        self
    }
}

impl GpuKernel for GemmKernel {
    fn prefix(&self) -> &'static str {
        "gemm"
    }

    fn source(&self) -> String {
        let (in_t, out_t) = (ctype(self.inputs).unwrap_or("float"), ctype(self.output).unwrap_or("float"));
        let (bias_param, bias_add) = if self.bias {
            (
                format!(", const {out_t}* __restrict__ c"),
                format!(
                    " + {} * {}",
                    float_literal(self.beta_bits),
                    load_f32(self.output, "c[row * c_rs + col * c_cs]")
                ),
            )
        } else {
            (String::new(), String::new())
        };
        let result = store_f32(self.output, &format!("{} * acc{bias_add}", float_literal(self.alpha_bits)));
        render(
            include_str!("gemm.cu"),
            &[
                ("IN", in_t),
                ("OUT", out_t),
                ("LOAD_A", &load_f32(self.inputs, "A[ao + row * a_rs + ka * a_cs]")),
                ("LOAD_B", &load_f32(self.inputs, "B[bo + kb * b_rs + col * b_cs]")),
                ("BIAS_PARAM", &bias_param),
                ("RESULT", &result),
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
            DType::I64 | DType::U64 => "unsigned long long",
            DType::F32 => "float",
            DType::F64 => "double",
            _ => "unsigned int",
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
