//! The GPU kernels of the normalisation family: Softmax and LogSoftmax (`softmax.cu`), Hardmax
//! (`hardmax.cu`), LayerNormalization by row groups (`layer_norm_rows.cu`) and
//! InstanceNormalization, a LayerNorm whose scale and bias follow the row's channel
//! (`layer_norm_channels.cu`).

use crate::ops::gpu::{BLOCK, GpuKernel, float_literal, render};

/// Softmax (or LogSoftmax with `log`) over the middle axis of `[outer, len, inner]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SoftmaxKernel {
    pub(crate) log: bool,
}

impl GpuKernel for SoftmaxKernel {
    fn prefix(&self) -> &'static str {
        "softmax"
    }

    fn source(&self) -> String {
        let store = if self.log { "x[at] - m - logf(s)" } else { "expf(x[at] - m) / s" };
        render(include_str!("softmax.cu"), &[("STORE", store), ("BLOCK", &BLOCK.to_string())])
    }
}

/// Hardmax over the middle axis of `[outer, len, inner]`, a thread a row (rows are short where
/// models use it: class scores).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HardmaxKernel;

impl GpuKernel for HardmaxKernel {
    fn prefix(&self) -> &'static str {
        "hardmax"
    }

    fn source(&self) -> String {
        render(include_str!("hardmax.cu"), &[])
    }
}

/// LayerNormalization over the trailing `cols` of each row, with `stats` of the Mean and InvStdDev
/// outputs (0, 1 or 2); with `channels` (InstanceNormalization) scale and bias are indexed by the
/// row's channel `row % C` instead of the column. Meta: `rows, cols, C`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LayerNormKernel {
    pub(crate) epsilon_bits: u32,
    pub(crate) bias: bool,
    pub(crate) stats: u8,
    pub(crate) channels: bool,
}

impl GpuKernel for LayerNormKernel {
    fn prefix(&self) -> &'static str {
        "layer_norm"
    }

    fn source(&self) -> String {
        let p = if self.channels { "row % meta[2]" } else { "j" };
        let (bias_param, bias_add) =
            if self.bias { (", const float* __restrict__ bias", format!(" + bias[{p}]")) } else { ("", String::new()) };
        let (stat_params, stats_written) = match self.stats {
            0 => ("", ""),
            1 => (", float* __restrict__ mean_out", "mean_out[row] = mean;"),
            _ => (
                ", float* __restrict__ mean_out, float* __restrict__ inv_out",
                "mean_out[row] = mean; inv_out[row] = inv;",
            ),
        };
        // The Mean and InvStdDev outputs, written by one thread of the row's.
        let writer = if self.channels { "threadIdx.x == 0" } else { "lane == 0" };
        let stat_stores =
            if stats_written.is_empty() { String::new() } else { format!("\n    if ({writer}) {{ {stats_written} }}") };
        let template =
            if self.channels { include_str!("layer_norm_channels.cu") } else { include_str!("layer_norm_rows.cu") };
        render(
            template,
            &[
                ("P", p),
                ("BIAS_PARAM", bias_param),
                ("BIAS_ADD", &bias_add),
                ("STAT_PARAMS", stat_params),
                ("STAT_STORES", &stat_stores),
                ("EPS", &float_literal(self.epsilon_bits)),
                ("BLOCK", &BLOCK.to_string()),
            ],
        )
    }
}
