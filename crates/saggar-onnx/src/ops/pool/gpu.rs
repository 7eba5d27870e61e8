//! The GPU kernels of the pooling family: max, average and Lp pooling (`pool.cu`), MaxUnpool's
//! scatter (`max_unpool.cu`) and LRN (`lrn.cu`). Global pooling is a reduction
//! ([`crate::ops::reduce::gpu::reduce_launch`]), or for GlobalLpPool with `p` above 2 one pooling
//! window over the whole plane.

use crate::ops::gpu::{GpuKernel, MAX_SPATIAL, float_literal, render};

/// What [`PoolKernel`] computes over each window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolMode {
    /// The largest element.
    Max,
    /// The largest element and its flat position (an i64 second output).
    MaxWithIndices,
    /// The mean.
    Average,
    /// The `p`-norm, `p` in the meta table.
    Lp,
}

/// Pooling, one thread per output element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolKernel {
    pub(crate) mode: PoolMode,
}

/// The column-major position of row-major plane offset `best` (storage_order 1).
const COLUMN_MAJOR: &str = "onnx_i64 r = best, inner = 1; off = 0;
      for (int d = s - 1; d >= 0; --d) { inner *= in[d]; off += (r % in[d]) * (in_plane / inner); r /= in[d]; }";

impl GpuKernel for PoolKernel {
    fn prefix(&self) -> &'static str {
        "pool"
    }

    fn source(&self) -> String {
        const MAX: &str = "if (v > acc || (inside == 0 && v != v)) acc = v;";
        let indices_store = format!(
            "y[i] = acc;\n    onnx_i64 off = best;\n    if (param) {{ {COLUMN_MAJOR} }}\n    indices[i] = (i / out_plane) * in_plane + off;"
        );
        let (init, take, store, indices_param) = match self.mode {
            PoolMode::Max => ("ONNX_NEG_INF", MAX, "y[i] = acc;".to_string(), ""),
            PoolMode::MaxWithIndices => (
                "ONNX_NEG_INF",
                "if (v > acc || (inside == 0 && v != v)) { acc = v; best = at; }",
                indices_store,
                ", onnx_i64* __restrict__ indices",
            ),
            PoolMode::Average => (
                "0.0f",
                "acc += v;",
                "const onnx_i64 n = param ? inside + padded : inside;\n    y[i] = n ? acc / (float)n : 0.0f;".into(),
                "",
            ),
            PoolMode::Lp => (
                "0.0f",
                "const float a = fabsf(v); acc += param == 1 ? a : param == 2 ? a * a : powf(a, (float)param);",
                "y[i] = param == 1 ? acc : param == 2 ? sqrtf(acc) : powf(acc, 1.0f / (float)param);".into(),
                "",
            ),
        };
        render(
            include_str!("pool.cu"),
            &[
                ("INIT", init),
                ("TAKE", take),
                ("STORE", &store),
                ("INDICES_PARAM", indices_param),
                ("MAX_SPATIAL", &MAX_SPATIAL.to_string()),
            ],
        )
    }
}

/// MaxUnpool: zero the output (`scatter` false), then scatter the input to its indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MaxUnpoolKernel {
    pub(crate) scatter: bool,
}

impl GpuKernel for MaxUnpoolKernel {
    fn prefix(&self) -> &'static str {
        "max_unpool"
    }

    fn source(&self) -> String {
        let (params, body) = if self.scatter {
            (
                "const float* __restrict__ x, const onnx_i64* __restrict__ indices, float* __restrict__ y",
                "ONNX_LOOP(j, meta[0]) { const onnx_i64 at = indices[j]; if (at >= 0 && at < meta[1]) y[at] = x[j]; }",
            )
        } else {
            ("float* __restrict__ y", "ONNX_LOOP(i, meta[1]) y[i] = 0.0f;")
        };
        render(include_str!("max_unpool.cu"), &[("PARAMS", params), ("BODY", body)])
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
