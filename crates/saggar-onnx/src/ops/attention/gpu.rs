//! The GPU kernels of the attention family: RotaryEmbedding (`rotary.cu`, a thread per element) and
//! Attention (`attention.cu`, a block per query row with an online softmax over chunks of keys).

use crate::ops::gpu::{BLOCK, GpuKernel, render};

/// RotaryEmbedding, with or without `position_ids`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RotaryKernel {
    pub(crate) position_ids: bool,
}

impl GpuKernel for RotaryKernel {
    fn prefix(&self) -> &'static str {
        "rotary"
    }

    fn source(&self) -> String {
        let (param, row) = if self.position_ids {
            (", const long long* __restrict__ position_ids", "position_ids[b * S + s]")
        } else {
            ("", "b * S + s")
        };
        render(include_str!("rotary.cu"), &[("POS_PARAM", param), ("ROW", row)])
    }
}

/// The element type of Attention's mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MaskKind {
    None,
    /// True attends, false masks.
    Bool,
    /// Added to the scores.
    Float,
}

/// Largest Q/K head the Attention kernel keeps in shared memory (a longer one is read from memory).
const QCACHE: usize = 1024;

/// Attention of one query row a block (`attention.cu`), with or without the past caches, a mask,
/// `nonpad_kv_seqlen` and the `qk_matmul_output` output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttentionKernel {
    pub(crate) past: bool,
    pub(crate) mask: MaskKind,
    pub(crate) nonpad: bool,
    pub(crate) qk: bool,
}

impl GpuKernel for AttentionKernel {
    fn prefix(&self) -> &'static str {
        "attention"
    }

    fn source(&self) -> String {
        let mut params = String::new();
        if self.past {
            params.push_str(", const float* __restrict__ past_k, const float* __restrict__ past_v");
        }
        let at = "b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3]";
        let bias = match self.mask {
            MaskKind::None => "0.0f".to_string(),
            MaskKind::Bool => {
                params.push_str(", const unsigned char* __restrict__ mask");
                format!("(j < mask_len && mask[{at}]) ? 0.0f : ONNX_NEG_INF")
            }
            MaskKind::Float => {
                params.push_str(", const float* __restrict__ mask");
                format!("j < mask_len ? mask[{at}] : ONNX_NEG_INF")
            }
        };
        if self.nonpad {
            params.push_str(", const long long* __restrict__ nonpad");
        }
        let (offset, limit) = if self.nonpad { ("nonpad[b] - Sq", "nonpad[b]") } else { ("P", "T") };
        let (k_row, k_stride, v_at) = if self.past {
            (
                "past_k + b * pks[0] + kh * pks[1] + j * pks[2]",
                "pks[3]",
                "past_v[b * pvs[0] + kh * pvs[1] + jj * pvs[2] + d * pvs[3]]",
            )
        } else {
            ("k", "ks[3]", "0.0f")
        };
        let (qk_param, qk_store, qk_softmax) = if self.qk {
            (
                ", float* __restrict__ qk",
                "if (d0 == 0 && mode < 3) qk[row * T + j] = mode == 0 ? raw : (mode == 1 ? capped : s);",
                "if (d0 == 0 && mode == 3) for (onnx_i64 j = t; j < T; j += threads) {
        float raw, capped, bias;
        const float s = score(j, raw, capped, bias);
        qk[row * T + j] = (live && s != ONNX_NEG_INF) ? expf(s - m) * inv : 0.0f;
      }",
            )
        } else {
            ("", "", "")
        };
        render(
            include_str!("attention.cu"),
            &[
                ("PARAMS", &params),
                ("QK_PARAM", qk_param),
                ("QK_STORE", qk_store),
                ("QK_SOFTMAX", qk_softmax),
                ("MASK_BIAS", &bias),
                ("OFFSET", offset),
                ("LIMIT", limit),
                ("PAST_K_ROW", k_row),
                ("PAST_K_STRIDE", k_stride),
                ("PAST_V_AT", v_at),
                ("BLOCK", &BLOCK.to_string()),
                ("QCACHE", &QCACHE.to_string()),
                ("VEC", "4"),
            ],
        )
    }
}
