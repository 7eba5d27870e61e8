//! The GPU kernels of the normalisation family: Softmax and LogSoftmax (`softmax.cu`), Hardmax
//! (`hardmax.cu`), LayerNormalization by row groups (`layer_norm_rows.cu`), InstanceNormalization and
//! GroupNormalization, LayerNorms whose scale and bias follow the row's channel
//! (`layer_norm_channels.cu`), and LpNormalization and MeanVarianceNormalization over a set of
//! axes (`norm_axes.cu`).

use saggar_shape::DType;

use crate::ops::gpu::{BLOCK, GpuKernel, float_literal, render, store_f32};

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

/// What a row normalisation stores for each element: its f32 result `y`, a copy `yh` of it rounded
/// to a half precision (to nearest even: the Cast a half-precision product reads, written in the same
/// pass), or both. Each stored value is the one f32 the kernel computed, so `yh` is exactly that
/// value's Cast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NormStores {
    /// Whether `y` is stored.
    pub(crate) f32: bool,
    /// The type of `yh` (F16 or BF16), when it is stored.
    pub(crate) half: Option<DType>,
}

impl NormStores {
    /// `y` alone.
    pub(crate) const F32: NormStores = NormStores { f32: true, half: None };

    /// The output pointer parameters, `y` then `yh`.
    pub(crate) fn params(self) -> String {
        let mut params = String::new();
        if self.f32 {
            params.push_str(", float* __restrict__ y");
        }
        if self.half.is_some() {
            params.push_str(", unsigned short* __restrict__ yh");
        }
        params
    }

    /// Statements storing the f32 value `v` at element `at`.
    pub(crate) fn store(self, at: &str, v: &str) -> String {
        let mut statements = Vec::new();
        if self.f32 {
            statements.push(format!("y[{at}] = {v};"));
        }
        if let Some(h) = self.half {
            statements.push(format!("yh[{at}] = {};", store_f32(h, v)));
        }
        statements.join(" ")
    }

    /// Statements storing the `float4` `v` as the four elements from `4 * at`, and the condition
    /// under which the pointers allow it (16-byte aligned).
    pub(crate) fn store4(self, at: &str, v: &str) -> (String, String) {
        let (mut statements, mut aligned) = (Vec::new(), Vec::new());
        if self.f32 {
            statements.push(format!("((float4*)y)[{at}] = {v};"));
            aligned.push("onnx_aligned16(y)");
        }
        if let Some(h) = self.half {
            let lanes: Vec<String> = ["x", "y", "z", "w"].iter().map(|c| store_f32(h, &format!("{v}.{c}"))).collect();
            statements.push(format!("((ushort4*)yh)[{at}] = make_ushort4({});", lanes.join(", ")));
            aligned.push("onnx_aligned16(yh)");
        }
        (statements.join(" "), aligned.join(" && "))
    }
}

/// LayerNormalization over the trailing `cols` of each row, with `stats` of the Mean and InvStdDev
/// outputs (0, 1 or 2); with `channels` (InstanceNormalization) scale and bias are indexed by the
/// row's channel `row % C` instead of the column. `stores`: what the kernel writes per element
/// (pointers after scale and bias, before the statistics). Meta: `rows, cols, C`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LayerNormKernel {
    pub(crate) epsilon_bits: u32,
    pub(crate) bias: bool,
    pub(crate) stats: u8,
    pub(crate) channels: bool,
    pub(crate) stores: NormStores,
}

impl GpuKernel for LayerNormKernel {
    fn prefix(&self) -> &'static str {
        "layer_norm"
    }

    fn source(&self) -> String {
        self.render_with(if self.channels { "row % meta[2]" } else { "j" })
    }
}

impl LayerNormKernel {
    /// The kernel text with `p` the index of a column's scale and bias.
    fn render_with(&self, p: &str) -> String {
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
        let inv = format!("float v = 0.0f;
    if (live) for (onnx_i64 j = lane; j < cols; j += lanes) {{ const float d = (cached ? cache[j] : xr[j]) - mean; v += d * d; }}
    const float inv = 1.0f / sqrtf(onnx_row_sum(v, sh) / (float)cols + {});", float_literal(self.epsilon_bits));
        render(
            template,
            &[
                ("TERM", "e"),
                ("INV", &inv),
                ("CENTER", " - mean"),
                ("SCALE_META", ""),
                ("SCALE_ROW", ""),
                ("SCALE_AT", "j"),
                ("P", p),
                ("BIAS_PARAM", bias_param),
                ("BIAS_ADD", &bias_add),
                ("OUT_PARAMS", &self.stores.params()),
                ("STORE", &self.stores.store("row * cols + j", "o")),
                ("STAT_PARAMS", stat_params),
                ("STAT_STORES", &stat_stores),
                ("EPS", &float_literal(self.epsilon_bits)),
                ("BLOCK", &BLOCK.to_string()),
            ],
        )
    }
}

/// GroupNormalization: a [`LayerNormKernel`] over rows `(image, group)` of `cols` elements, scale
/// and bias at `(row % G) * per_group + j / run` (`per_group` channels of `run` elements each for
/// per-channel parameters; 1 and `cols` for opset 18's per-group ones).
/// Meta: `rows, cols, G, per_group, run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GroupNormKernel {
    pub(crate) epsilon_bits: u32,
}

impl GpuKernel for GroupNormKernel {
    fn prefix(&self) -> &'static str {
        "group_norm"
    }

    fn source(&self) -> String {
        let row_norm = LayerNormKernel {
            epsilon_bits: self.epsilon_bits,
            bias: true,
            stats: 0,
            channels: true,
            stores: NormStores::F32,
        };
        row_norm.render_with("(row % meta[2]) * meta[3] + j / meta[4]")
    }
}

/// What [`AxesNormKernel`] divides by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AxesNorm {
    /// The L1 norm (LpNormalization, p = 1).
    L1,
    /// The L2 norm (LpNormalization, p = 2).
    L2,
    /// The standard deviation plus 1e-9, after subtracting the mean (MeanVarianceNormalization).
    MeanVariance,
}

/// A normalisation over the reduced axes of each kept position, with a reduction's meta table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AxesNormKernel {
    pub(crate) norm: AxesNorm,
}

impl GpuKernel for AxesNormKernel {
    fn prefix(&self) -> &'static str {
        "norm_axes"
    }

    fn source(&self) -> String {
        let (term, scale) = match self.norm {
            AxesNorm::L1 => ("fabsf(v)", "const float shift = 0.0f, div = acc;"),
            AxesNorm::L2 => ("v * v", "const float shift = 0.0f, div = sqrtf(acc);"),
            AxesNorm::MeanVariance => ("v", MEAN_VARIANCE),
        };
        render(include_str!("norm_axes.cu"), &[("TERM", term), ("SCALE", scale), ("BLOCK", &BLOCK.to_string())])
    }
}

/// MeanVarianceNormalization's second pass: the mean, then the standard deviation about it.
const MEAN_VARIANCE: &str = "const float shift = acc / (float)n;
    float sq = 0.0f;
    for (onnx_i64 j = threadIdx.x; j < n; j += blockDim.x) { const float d = x[base + red_offset(j, nr, rd, rs)] - shift; sq += d * d; }
    ONNX_BLOCK_REDUCE(sq, sh, p, q, p + q);
    const float div = sqrtf(sq / (float)n) + 1e-9f;";

/// RMSNormalization over the trailing `cols` of each row, scaled by a broadcast scale: the
/// row-group LayerNorm kernel (`layer_norm_rows.cu`) with a sum of squares and no mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RmsNormKernel {
    pub(crate) epsilon_bits: u32,
}

impl GpuKernel for RmsNormKernel {
    fn prefix(&self) -> &'static str {
        "rms_norm"
    }

    fn source(&self) -> String {
        let inv = format!("const float inv = 1.0f / sqrtf(mean + {});", float_literal(self.epsilon_bits));
        let meta = "
  const onnx_i64 mode = meta[2];
  const int nl = (int)meta[3], nn = (int)meta[4];
  const onnx_i64* ld = meta + 5; const onnx_i64* ls = ld + nl; const onnx_i64* nd = ls + nl; const onnx_i64* ns = nd + nn;";
        render(
            include_str!("layer_norm_rows.cu"),
            &[
                ("TERM", "e * e"),
                ("INV", &inv),
                ("CENTER", ""),
                ("SCALE_META", meta),
                ("SCALE_ROW", "\n      const onnx_i64 base = mode == 1 ? 0 : red_offset(row, nl, ld, ls);"),
                ("SCALE_AT", "mode == 1 ? j : base + red_offset(j, nn, nd, ns)"),
                ("BIAS_PARAM", ""),
                ("BIAS_ADD", ""),
                ("OUT_PARAMS", &NormStores::F32.params()),
                ("STORE", &NormStores::F32.store("row * cols + j", "o")),
                ("STAT_PARAMS", ""),
                ("STAT_STORES", ""),
                ("BLOCK", &BLOCK.to_string()),
            ],
        )
    }
}
