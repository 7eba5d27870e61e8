//! LayerNormalization with its input computed in the kernel: the elementwise group producing `x`
//! (a bias add and a residual add, typically) is evaluated where the normalisation reads `x`, so the
//! group's result is never stored. Rows go to groups of threads as in the plain LayerNormalization
//! kernel. Where every input the group reads is the row itself, one row shared by every row, one
//! value per row or a scalar (a bias add and a residual add are), and rows fit the row cache, the
//! group is evaluated once per element from four-element loads into the cache. Otherwise its values
//! come from [`elementwise::fused_values`] in a `__device__` function of the flat index, read from the
//! cache, or three times per element (sum, variance, output) when rows do not fit it.
//!
//! Meta: `rows, cols, 1` (the LayerNorm kind's table), then the group's table (`rank, n, dims[rank]`,
//! the broadcast strides of each external input). Parameters: `meta`, the group's external inputs
//! (`in0..`, scale and bias among them), `y`.

use std::fmt::Write as _;

use saggar_shape::DType;

use crate::fuse::elementwise::{self, FusedGroup};
use crate::graph::ir::Graph;
use crate::ops::gpu::GpuNode;
use crate::ops::gpu::{BLOCK, kernel_name};
use crate::ops::norm::gpu::LayerNormKernel;
use crate::plan::nodes::NodeInfo;

/// `(name, C++ definitions)` of a LayerNormalization over the value of `group`'s last node, with
/// scale `in{scale}`, bias `in{bias}` when present, and epsilon `epsilon_bits` (f32 bits).
pub(crate) fn layer_norm_kernel(
    group: &FusedGroup,
    scale: usize,
    bias: Option<usize>,
    epsilon_bits: u32,
) -> Option<(String, String)> {
    let params = elementwise::fused_params(group)?;
    let values = elementwise::fused_values(group)?;
    let last = group.nodes.len().checked_sub(1)?;
    let args: String = (0..group.inputs.len()).fold(String::new(), |mut s, k| {
        let _ = write!(s, ", in{k}");
        s
    });
    let bias_add = bias.map_or(String::new(), |b| format!(" + (float)in{b}[j]"));
    let eps = format!("__int_as_float({})", epsilon_bits as i32);
    let (vector_chain, vector_path) = vector_path(group, scale, bias, &eps).unwrap_or_default();
    // NAME stands for the kernel's name, which hashes this text.
    let text = format!(
        r#"{vector_chain}__device__ inline float NAME_x(const onnx_i64* meta{params}, onnx_i64 i) {{
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
{vector_path}  for (onnx_i64 first = (onnx_i64)blockIdx.x * groups; first < rows; first += (onnx_i64)gridDim.x * groups) {{
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

/// The four-element path of [`layer_norm_kernel`] (an all-`f32` group, scale and bias): taken when
/// the block's rows are cached, the row length is a multiple of 4, and every input the group reads
/// is the row itself, one row shared by every row, one value per row or a scalar (a bias add and a
/// residual add are), all 16-byte aligned. The group's value is computed once per element from
/// vector loads (no broadcast arithmetic per element) into the row cache, and the row is written
/// back four elements a store.
/// Returns the group's chain function and the path's statements.
fn vector_path(group: &FusedGroup, scale: usize, bias: Option<usize>, eps: &str) -> Option<(String, String)> {
    let used = elementwise::used_inputs(group);
    let f32s = |k: usize| group.inputs.get(k) == Some(&DType::F32);
    if !(used.iter().all(|&k| f32s(k)) && f32s(scale) && bias.is_none_or(f32s) && group.nodes.last()?.out == DType::F32)
    {
        return None;
    }
    let aligned = |k: usize| format!("onnx_aligned16(in{k})");
    let externals = group.inputs.len();
    let mut text = format!(
        "  const onnx_i64* fm = em + 2 + {} * em[0];\n  bool vec = cached && (cols & 3) == 0 && onnx_aligned16(y) && {};\n",
        externals + 1,
        aligned(scale)
    );
    if let Some(b) = bias {
        let _ = writeln!(text, "  vec = vec && {};", aligned(b));
    }
    let mut loads = String::new();
    for &k in &used {
        let (mode, div) = (2 * k, 2 * k + 1);
        let _ = writeln!(
            text,
            "  const onnx_i64 mode{k} = fm[{mode}];\n  vec = vec && (mode{k} == 3 || (mode{k} == 4 && fm[{div}] == cols) || (mode{k} == 1 && {al}) || (mode{k} == 2 && fm[{div}] == cols && {al}));",
            al = aligned(k)
        );
        let _ = writeln!(loads, "          const float4 x{k} = onnx_row_load4(in{k}, mode{k}, row, cols4, q);");
    }
    let lane_args = |c: &str| used.iter().map(|k| format!("x{k}.{c}")).collect::<Vec<_>>().join(", ");
    let bias4 = bias.map_or(String::new(), |b| format!(", b = ((const float4*)in{b})[q]"));
    let plus = |c: &str| bias.map_or(String::new(), |_| format!(" + b.{c}"));
    let _ = write!(
        text,
        r#"  if (vec) {{
    const int cols4 = (int)(cols >> 2);
    float4* cache4 = (float4*)cache;
    for (onnx_i64 first = (onnx_i64)blockIdx.x * groups; first < rows; first += (onnx_i64)gridDim.x * groups) {{
      const onnx_i64 row = first + threadIdx.y;
      const bool live = row < rows;
      float s = 0.0f;
      if (live) {{
#pragma unroll 4
        for (int q = lane; q < cols4; q += lanes) {{
{loads}          const float4 e = make_float4(NAME_v({ax}), NAME_v({ay}), NAME_v({az}), NAME_v({aw}));
          cache4[q] = e;
          s += (e.x + e.y) + (e.z + e.w);
        }}
      }}
      const float mean = onnx_row_sum(s, sh) / (float)cols;
      float v = 0.0f;
      if (live) for (int q = lane; q < cols4; q += lanes) {{
        const float4 e = cache4[q];
        const float dx = e.x - mean, dy = e.y - mean, dz = e.z - mean, dw = e.w - mean;
        v += (dx * dx + dy * dy) + (dz * dz + dw * dw);
      }}
      const float inv = 1.0f / sqrtf(onnx_row_sum(v, sh) / (float)cols + {eps});
      if (live) for (int q = lane; q < cols4; q += lanes) {{
        const float4 e = cache4[q], g = ((const float4*)in{scale})[q]{bias4};
        ((float4*)y)[row * cols4 + q] = make_float4((e.x - mean) * inv * g.x{px}, (e.y - mean) * inv * g.y{py}, (e.z - mean) * inv * g.z{pz}, (e.w - mean) * inv * g.w{pw});
      }}
    }}
    return;
  }}
"#,
        ax = lane_args("x"),
        ay = lane_args("y"),
        az = lane_args("z"),
        aw = lane_args("w"),
        px = plus("x"),
        py = plus("y"),
        pz = plus("z"),
        pw = plus("w"),
    );
    Some((elementwise::chain_function(group, &used)?, text))
}

/// Whether node `n` is a LayerNormalization launching one kernel without its statistics outputs.
pub(crate) fn is_plain_layer_norm(graph: &Graph, info: &[NodeInfo], n: usize) -> bool {
    graph.nodes[n].op_type == "LayerNormalization"
        && graph.nodes[n].outputs.len() == 1
        && matches!(&info[n].gpu, Some(Ok(GpuNode::Launches(l)))
            if matches!(l.as_slice(), [one] if matches!(one.kernel_as::<LayerNormKernel>(), Some(LayerNormKernel { stats: 0, channels: false, .. }))))
}

#[cfg(test)]
mod tests {
    use saggar_shape::DType;

    use super::*;
    use crate::fuse::elementwise::FusedNode;

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
        assert!(text.contains("const float4 x2 = onnx_row_load4(in2, mode2, row, cols4, q);"), "{text}");
        assert!(!text.contains("onnx_row_load4(in3"), "scale and bias are read as rows: {text}");
        let half = FusedGroup { inputs: vec![DType::F32, DType::F16, DType::F32, DType::F32, DType::F32], ..group };
        let (_, text) = layer_norm_kernel(&half, 3, Some(4), 1e-5f32.to_bits()).unwrap();
        assert!(!text.contains("onnx_row_load4"), "only all-f32 groups take four elements at once: {text}");
    }
}
