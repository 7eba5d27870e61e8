//! LayerNormalization with its input computed in the kernel: the elementwise group producing `x`
//! (a bias add and a residual add, typically) is evaluated where the normalisation reads `x`, so the
//! group's result is never stored. Rows go to groups of threads as in the plain LayerNormalization
//! kernel. The group's values come from [`gpu_fused::fused_values`] in a
//! `__device__` function of the flat index; the normalisation reads it three times per element (sum,
//! variance, output), recomputing a few adds instead of a round trip through memory.
//!
//! Meta: `rows, cols, 1` (the LayerNorm kind's table), then the group's table (`rank, n, dims[rank]`,
//! the broadcast strides of each external input). Parameters: `meta`, the group's external inputs
//! (`in0..`, scale and bias among them), `y`.

use std::fmt::Write as _;

use crate::gpu_codegen::{BLOCK, kernel_name};
use crate::gpu_fused::{self, FusedGroup};

/// `(name, C++ definitions)` of a LayerNormalization over the value of `group`'s last node, with
/// scale `in{scale}`, bias `in{bias}` when present, and epsilon `epsilon_bits` (f32 bits).
pub(crate) fn layer_norm_kernel(
    group: &FusedGroup,
    scale: usize,
    bias: Option<usize>,
    epsilon_bits: u32,
) -> Option<(String, String)> {
    let params = gpu_fused::fused_params(group)?;
    let values = gpu_fused::fused_values(group)?;
    let last = group.nodes.len().checked_sub(1)?;
    let args: String = (0..group.inputs.len()).fold(String::new(), |mut s, k| {
        let _ = write!(s, ", in{k}");
        s
    });
    let bias_add = bias.map_or(String::new(), |b| format!(" + (float)in{b}[j]"));
    let eps = format!("__int_as_float({})", epsilon_bits as i32);
    // NAME stands for the kernel's name, which hashes this text.
    let text = format!(
        r#"__device__ inline float NAME_x(const onnx_i64* meta{params}, onnx_i64 i) {{
  const int rank = (int)meta[0];
  const onnx_i64* dims = meta + 2;
{values}  return (float)v{last};
}}
SAGGAR_GLOBAL void NAME(const onnx_i64* meta{params}, float* __restrict__ y) {{
  __shared__ float sh[{BLOCK} / ONNX_ROW_LANES];
  ONNX_DYNAMIC_SHARED(onnx_row_cache);
  const onnx_i64 rows = meta[0], cols = meta[1];
  const onnx_i64* em = meta + 3;
  const int lane = (int)threadIdx.x, lanes = (int)blockDim.x;
  const onnx_i64 groups = blockDim.y;
  const bool cached = cols * groups * 4 <= ONNX_ROW_CACHE_BYTES;
  float* cache = onnx_row_cache + (cached ? (onnx_i64)threadIdx.y * cols : 0);
  for (onnx_i64 first = (onnx_i64)blockIdx.x * groups; first < rows; first += (onnx_i64)gridDim.x * groups) {{
    const onnx_i64 row = first + threadIdx.y;
    const bool live = row < rows;
    const onnx_i64 base = row * cols;
    float s = 0.0f;
    if (live) for (onnx_i64 j = lane; j < cols; j += lanes) {{
      const float e = NAME_x(em{args}, base + j);
      if (cached) cache[j] = e;
      s += e;
    }}
    const float mean = onnx_row_sum(s, sh) / (float)cols;
    float v = 0.0f;
    if (live) for (onnx_i64 j = lane; j < cols; j += lanes) {{
      const float d = (cached ? cache[j] : NAME_x(em{args}, base + j)) - mean;
      v += d * d;
    }}
    const float inv = 1.0f / sqrtf(onnx_row_sum(v, sh) / (float)cols + {eps});
    if (live) for (onnx_i64 j = lane; j < cols; j += lanes)
      y[base + j] = ((cached ? cache[j] : NAME_x(em{args}, base + j)) - mean) * inv * (float)in{scale}[j]{bias_add};
  }}
}}
"#
    );
    let name = kernel_name("layer_norm_fused", &text);
    Some((name.clone(), text.replace("NAME", &name)))
}

#[cfg(test)]
mod tests {
    use saggar_shape::DType;

    use super::*;
    use crate::gpu_fused::FusedNode;

    #[test]
    fn the_group_value_feeds_every_read_of_x() {
        let group = FusedGroup {
            inputs: vec![DType::F32, DType::F32, DType::F32, DType::F32, DType::F32],
            nodes: vec![
                FusedNode { expr: "($0 + $1)".into(), operands: vec![Some(Ok(0)), Some(Ok(1))], out: DType::F32 },
                FusedNode { expr: "($0 + $1)".into(), operands: vec![Some(Err(0)), Some(Ok(2))], out: DType::F32 },
            ],
        };
        let (name, text) = layer_norm_kernel(&group, 3, Some(4), 1e-5f32.to_bits()).unwrap();
        assert!(name.starts_with("onnx_layer_norm_fused_"));
        assert_eq!(text.matches(&format!("{name}_x(em, in0, in1, in2, in3, in4, base + j)")).count(), 3, "{text}");
        assert!(text.contains("const float v1 = (v0 + a2);") && text.contains("return (float)v1;"), "{text}");
        assert!(!text.contains("a3 = in3"), "scale and bias are not loaded by the group: {text}");
        assert!(text.contains("(float)in3[j] + (float)in4[j]"), "{text}");
    }
}
