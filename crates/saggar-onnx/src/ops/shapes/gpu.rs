//! The GPU kernel of the shape family: Concat of any number of inputs in one launch (`concat.cu`).
//! Reshape, Flatten, Squeeze, Unsqueeze and Expand are copies ([`crate::ops::data_movement::gpu`]).

use crate::ops::gpu::{GpuKernel, bits_type, render};

/// Concat of `inputs` contiguous tensors of `elem_bytes`-byte elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConcatKernel {
    pub(crate) elem_bytes: u8,
    pub(crate) inputs: u16,
}

impl GpuKernel for ConcatKernel {
    fn prefix(&self) -> &'static str {
        "concat"
    }

    fn source(&self) -> String {
        let t = bits_type(self.elem_bytes);
        let params: String = (0..self.inputs).map(|p| format!(", const {t}* __restrict__ in{p}")).collect();
        let cases: String = (0..self.inputs).map(|p| format!("      case {p}: v = in{p}[src]; break;\n")).collect();
        render(
            include_str!("concat.cu"),
            &[("T", t), ("PARAMS", &params), ("CASES", &cases), ("INPUTS", &self.inputs.to_string())],
        )
    }
}
