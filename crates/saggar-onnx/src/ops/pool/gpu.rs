//! The GPU kernels of the pooling family: max and average pooling (`pool.cu`) and LRN (`lrn.cu`).
//! Global pooling is a reduction ([`crate::ops::reduce::gpu::reduce_launch`]).

use crate::ops::gpu::{GpuKernel, MAX_SPATIAL, float_literal, render};

/// Max (`max`) or average pooling, one thread per output element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolKernel {
    pub(crate) max: bool,
}

impl GpuKernel for PoolKernel {
    fn prefix(&self) -> &'static str {
        "pool"
    }

    fn source(&self) -> String {
        let (init, take, result) = if self.max {
            ("ONNX_NEG_INF", "if (v > acc || (inside == 0 && v != v)) acc = v;", "acc")
        } else {
            ("0.0f", "acc += v;", "acc / (float)(count_pad ? inside + padded : inside)")
        };
        render(
            include_str!("pool.cu"),
            &[("INIT", init), ("TAKE", take), ("RESULT", result), ("MAX_SPATIAL", &MAX_SPATIAL.to_string())],
        )
    }
}

/// LRN: `alpha / size` in `scale_bits`, `beta` and `bias` as f32 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LrnKernel {
    pub(crate) scale_bits: u32,
    pub(crate) beta_bits: u32,
    pub(crate) bias_bits: u32,
}

impl GpuKernel for LrnKernel {
    fn prefix(&self) -> &'static str {
        "lrn"
    }

    fn source(&self) -> String {
        render(
            include_str!("lrn.cu"),
            &[
                ("SCALE", &float_literal(self.scale_bits)),
                ("BETA", &float_literal(self.beta_bits)),
                ("BIAS", &float_literal(self.bias_bits)),
            ],
        )
    }
}
