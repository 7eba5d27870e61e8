//! LayerNormalization with its input computed in the kernel: the elementwise group producing `x`
//! (a bias add and a residual add, typically) is evaluated where the normalisation reads `x`, so the
//! group's result is never stored. Rows go to groups of threads as in the plain LayerNormalization
//! kernel. Where every input the group reads is the row itself, one row shared by every row, one
//! value per row or a scalar (a bias add and a residual add are), and rows fit the row cache, the
//! group is evaluated once per element from four-element loads into the cache. Otherwise its values
//! come from [`elementwise::fused_values`] in a `__device__` function of the flat index, read from the
//! cache, or three times per element (sum, variance, output) when rows do not fit it. That function
//! is called, not inlined (`ONNX_NOINLINE`): the path is the slow one, and three inlined copies of
//! its broadcast arithmetic made the kernel NVRTC's slowest to compile.
//!
//! A plain LayerNormalization whose result is first read by a Cast to f16 or bf16 (the precision
//! pass's shared Cast of a product's activation) takes that Cast in too ([`half_cast`]): its kernel,
//! this one or the op's own, stores the half copy of each value beside the f32 one, or alone where
//! nothing else reads the f32 result ([`crate::ops::norm::gpu::NormStores`]). A norm with an input
//! group takes in a per-tensor QuantizeLinear of its result the same way ([`quantizes`]: a QDQ
//! encoder's norm, whose result only its quantisation reads), storing the `i8` or `u8` copy `yq`.
//!
//! Meta: `rows, cols, 1` (the LayerNorm kind's table), then the group's table (`rank, n, dims[rank]`,
//! the broadcast strides of each external input). Parameters: `meta`, the group's external inputs
//! (`in0..`, scale and bias among them), then the stored outputs: `y`, the half copy `yh`, or both.

use std::fmt::Write as _;

use saggar_shape::DType;

use crate::fuse::elementwise::{self, FusedGroup};
use crate::graph::ir::Graph;
use crate::ops::gpu::GpuNode;
use crate::ops::gpu::{BLOCK, ctype, kernel_name};
use crate::ops::norm::gpu::{LayerNormKernel, NormStores};
use crate::plan::nodes::NodeInfo;

/// `(name, C++ definitions)` of a LayerNormalization over the value of `group`'s last node, with
/// scale `in{scale}`, bias `in{bias}` when present, and epsilon `epsilon_bits` (f32 bits), storing
/// `stores` and, with `quant`, the quantised copy `yq` after them.
pub(crate) fn layer_norm_kernel(
    group: &FusedGroup,
    scale: usize,
    bias: Option<usize>,
    epsilon_bits: u32,
    (stores, quant): (NormStores, Option<&QuantCopy>),
) -> Option<(String, String)> {
    let stores = Stores { stores, quant };
    let params = elementwise::fused_params(group)?;
    let values = elementwise::fused_values(group)?;
    let last = group.nodes.len().checked_sub(1)?;
    let args: String = (0..group.inputs.len()).fold(String::new(), |mut s, k| {
        let _ = write!(s, ", in{k}");
        s
    });
    let bias_add = bias.map_or(String::new(), |b| format!(" + (float)in{b}[j]"));
    let eps = format!("__int_as_float({})", epsilon_bits as i32);
    let (vector_chain, vector_path) = vector_path(group, scale, bias, &eps, stores).unwrap_or_default();
    let (outputs, store) = (stores.params()?, stores.store("base + j", "o"));
    // NAME stands for the kernel's name, which hashes this text.
    let text = format!(
        r#"{vector_chain}__device__ ONNX_NOINLINE float NAME_x(const onnx_i64* meta{params}, onnx_i64 i) {{
  const int rank = (int)meta[0];
  const onnx_i64* dims = meta + 2;
{values}  return (float)v{last};
}}
SAGGAR_GLOBAL void NAME(const onnx_i64* meta{params}{outputs}) {{
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
    if (live) for (onnx_i64 j = lane; j < cols; j += lanes) {{
      const float o = ((cached ? cache[j] : NAME_x(em{args}, base + j)) - mean) * inv * (float)in{scale}[j]{bias_add};
      {store}
    }}
  }}
}}
"#
    );
    let name = kernel_name("layer_norm_fused", &text);
    Some((name.clone(), text.replace("NAME", &name)))
}

/// The four-element path of [`layer_norm_kernel`] (a group of f32, half or 8- and 32-bit integer
/// inputs, f32 scale and bias): taken when
/// the block's rows are cached, the row length is a multiple of 4, and every input the group reads
/// is the row itself, one row shared by every row, one value per row or a scalar (a bias add and a
/// residual add are), all 16-byte aligned. The group's value is computed once per element from
/// vector loads (no broadcast arithmetic per element) into the row cache, and the row is written
/// back four elements a store (to each output `stores` names).
/// Returns the group's chain function and the path's statements.
fn vector_path(
    group: &FusedGroup,
    scale: usize,
    bias: Option<usize>,
    eps: &str,
    stores: Stores<'_>,
) -> Option<(String, String)> {
    let used = elementwise::used_inputs(group);
    let f32s = |k: usize| group.inputs.get(k) == Some(&DType::F32);
    // The group's inputs f32, half (a half product's result, read as bits its chain widens) or
    // integer (an `i8` product's `i32` result, a quantised residual), four elements a load.
    let loader = |k: usize| group.inputs.get(k).and_then(|&d| elementwise::vector_type(d)).map(|(v4, _)| v4);
    if !(used.iter().all(|&k| loader(k).is_some())
        && f32s(scale)
        && bias.is_none_or(f32s)
        && group.nodes.last()?.out == DType::F32)
    {
        return None;
    }
    let aligned = |k: usize| format!("onnx_aligned16(in{k})");
    let externals = group.inputs.len();
    let (store4, stores_aligned) = stores.store4("row * cols4 + q", "o")?;
    let mut text = format!(
        "  const onnx_i64* fm = em + 2 + {} * em[0];\n  bool vec = cached && (cols & 3) == 0 && {stores_aligned}{};\n",
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
        let v4 = loader(k)?;
        // A scalar (a quantised chain's scales and zero points) is read once, before the rows.
        let _ =
            writeln!(text, "  const {v4} one{k} = mode{k} == 3 ? onnx_row_load4<{v4}>(in{k}, 3, 0, 0, 0) : {v4}{{}};");
        let _ = writeln!(
            loads,
            "          const {v4} x{k} = mode{k} == 3 ? one{k} : onnx_row_load4<{v4}>(in{k}, mode{k}, row, cols4, q);"
        );
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
        const float4 o = make_float4((e.x - mean) * inv * g.x{px}, (e.y - mean) * inv * g.y{py}, (e.z - mean) * inv * g.z{pz}, (e.w - mean) * inv * g.w{pw});
        {store4}
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

/// The node ending a norm group after the norm (the group's root), whose value of each f32 result
/// the norm's kernel stores too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NormCopy {
    /// A Cast to this half type ([`half_cast`]).
    Half(DType),
    /// A per-tensor QuantizeLinear to this 8-bit type ([`quantizes`]); only a norm with an input
    /// group (this file's kernel) takes one.
    Quantized(DType),
}

/// A group formed around a plain LayerNormalization, as the lowering emits it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NormGroup {
    /// The norm's position among the members; the elementwise members before it compute its input.
    pub(crate) at: usize,
    /// The node after the norm ending the group, if any.
    pub(crate) copy: Option<NormCopy>,
}

/// The shape of a group of [`crate::fuse::group`] (`members` in graph order, the root last) built
/// around a plain LayerNormalization: its input group before it, a half Cast or a quantisation of
/// its result after it, or both. `None` for every other group, a lone LayerNormalization included.
pub(crate) fn norm_group(graph: &Graph, info: &[NodeInfo], members: &[usize]) -> Option<NormGroup> {
    let (&root, before) = members.split_last()?;
    if is_plain_layer_norm(graph, info, root) {
        return (!before.is_empty()).then_some(NormGroup { at: before.len(), copy: None });
    }
    let &norm = before.last()?;
    let copy = norm_copy(graph, info, norm, root)?;
    is_plain_layer_norm(graph, info, norm).then_some(NormGroup { at: before.len() - 1, copy: Some(copy) })
}

/// What node `reader` makes of node `norm`'s result, when a norm group may end with it.
pub(crate) fn norm_copy(graph: &Graph, info: &[NodeInfo], norm: usize, reader: usize) -> Option<NormCopy> {
    half_cast(graph, info, norm, reader)
        .map(NormCopy::Half)
        .or_else(|| quantizes(graph, info, norm, reader).map(NormCopy::Quantized))
}

/// The type node `q` quantises node `norm`'s result to, when `q` is a QuantizeLinear of that
/// result to `i8` or `u8` with a GPU form and a scalar scale and zero point (per tensor, as
/// `quantize_static` writes an activation's).
pub(crate) fn quantizes(graph: &Graph, info: &[NodeInfo], norm: usize, q: usize) -> Option<DType> {
    let node = &graph.nodes[q];
    let scalar = |k: usize| match info[q].inputs.get(k) {
        Some(Some(o)) => o.dims.iter().product::<usize>() == 1,
        _ => k == 2,
    };
    let out = info[q].outputs.first()?.dtype;
    (node.op_type == "QuantizeLinear"
        && node.inputs.first() == Some(&graph.nodes[norm].outputs.first().copied())
        && info[q].elementwise().is_some()
        && scalar(1)
        && scalar(2)
        && matches!(out, DType::I8 | DType::U8))
    .then_some(out)
}

/// A quantised copy of a norm's result (a [`NormCopy::Quantized`] group's root): its type and its
/// expression of `$0`, the f32 value, with its scale and zero point already read (`in{k}[0]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QuantCopy {
    pub(crate) out: DType,
    pub(crate) expr: String,
}

/// Everything the fused kernel stores per element: the norm's own stores, then the quantised copy.
#[derive(Debug, Clone, Copy)]
struct Stores<'a> {
    stores: NormStores,
    quant: Option<&'a QuantCopy>,
}

impl Stores<'_> {
    fn params(self) -> Option<String> {
        let mut params = self.stores.params();
        if let Some(q) = self.quant {
            let _ = write!(params, ", {}* __restrict__ yq", ctype(q.out)?);
        }
        Some(params)
    }

    fn store(self, at: &str, v: &str) -> String {
        let mut text = self.stores.store(at, v);
        if let Some(q) = self.quant {
            let _ = write!(text, "{}yq[{at}] = {};", if text.is_empty() { "" } else { " " }, q.expr.replace("$0", v));
        }
        text
    }

    /// Statements storing the `float4` `v` from element `4 * at`, and the condition the pointers
    /// meet for it (empty, or ending in ` && `).
    fn store4(self, at: &str, v: &str) -> Option<(String, String)> {
        let (mut text, aligned) = self.stores.store4(at, v);
        let mut aligned = if aligned.is_empty() { String::new() } else { format!("{aligned} && ") };
        if let Some(q) = self.quant {
            let (v4, make) = elementwise::vector_type(q.out)?;
            let lanes: Vec<String> =
                ["x", "y", "z", "w"].iter().map(|c| q.expr.replace("$0", &format!("{v}.{c}"))).collect();
            let sep = if text.is_empty() { "" } else { " " };
            let _ = write!(text, "{sep}(({v4}*)yq)[{at}] = {make}({});", lanes.join(", "));
            aligned.push_str("onnx_aligned16(yq) && ");
        }
        Some((text, aligned))
    }
}

/// The type node `cast` converts node `norm`'s result to, when `cast` is a Cast to f16 or bf16 of
/// that result alone with a GPU form.
pub(crate) fn half_cast(graph: &Graph, info: &[NodeInfo], norm: usize, cast: usize) -> Option<DType> {
    let reads_norm = graph.nodes[cast].inputs.as_slice() == [graph.nodes[norm].outputs.first().copied()];
    graph.half_cast(cast).filter(|_| reads_norm && info[cast].elementwise().is_some())
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
        let (name, text) = layer_norm_kernel(&group, 3, Some(4), 1e-5f32.to_bits(), (NormStores::F32, None)).unwrap();
        assert!(name.starts_with("onnx_layer_norm_fused_"));
        assert_eq!(text.matches(&format!("{name}_x(em, in0, in1, in2, in3, in4, base + j)")).count(), 3, "{text}");
        assert!(text.contains("const float v1 = (v0 + a2);") && text.contains("return (float)v1;"), "{text}");
        assert!(!text.contains("a3 = in3"), "scale and bias are not loaded by the group: {text}");
        assert!(text.contains("(float)in3[j] + (float)in4[j]"), "{text}");
        assert!(
            text.contains("const float4 x2 = mode2 == 3 ? one2 : onnx_row_load4<float4>(in2, mode2, row, cols4, q);"),
            "{text}"
        );
        assert!(!text.contains("onnx_row_load4(in3"), "scale and bias are read as rows: {text}");
        // A half input (a half product's result) is read four elements a load too, as bits.
        let half = FusedGroup { inputs: vec![DType::F32, DType::F16, DType::F32, DType::F32, DType::F32], ..group };
        let (_, text) = layer_norm_kernel(&half, 3, Some(4), 1e-5f32.to_bits(), (NormStores::F32, None)).unwrap();
        assert!(
            text.contains("const ushort4 x1 = mode1 == 3 ? one1 : onnx_row_load4<ushort4>(in1, mode1, row, cols4, q);"),
            "{text}"
        );
        // So are an `i8` product's `i32` result and a quantised `i8` residual (a requantising
        // encoder's norm).
        let int =
            FusedGroup { inputs: vec![DType::I32, DType::I8, DType::F32, DType::F32, DType::F32], ..half.clone() };
        let (_, text) = layer_norm_kernel(&int, 3, Some(4), 1e-5f32.to_bits(), (NormStores::F32, None)).unwrap();
        assert!(
            text.contains("const int4 x0 = mode0 == 3 ? one0 : onnx_row_load4<int4>(in0, mode0, row, cols4, q);"),
            "{text}"
        );
        assert!(
            text.contains("const char4 x1 = mode1 == 3 ? one1 : onnx_row_load4<char4>(in1, mode1, row, cols4, q);"),
            "{text}"
        );
        // A half scale is not.
        let half_scale =
            FusedGroup { inputs: vec![DType::F32, DType::F32, DType::F32, DType::F16, DType::F32], ..half };
        let (_, text) = layer_norm_kernel(&half_scale, 3, Some(4), 1e-5f32.to_bits(), (NormStores::F32, None)).unwrap();
        assert!(!text.contains("onnx_row_load4"), "f32 scale and bias only: {text}");
    }

    #[test]
    fn the_kernel_stores_the_half_copy_of_each_value_it_computes_beside_or_instead_of_it() {
        let group = FusedGroup {
            inputs: vec![DType::F32; 4],
            nodes: vec![FusedNode {
                expr: "($0 + $1)".into(),
                operands: vec![Some(Ok(0)), Some(Ok(1))],
                out: DType::F32,
            }],
        };
        let both = NormStores { f32: true, half: Some(DType::F16) };
        let (_, text) = layer_norm_kernel(&group, 2, Some(3), 1e-5f32.to_bits(), (both, None)).unwrap();
        assert!(text.contains("in3, float* __restrict__ y, unsigned short* __restrict__ yh) {"), "{text}");
        assert!(text.contains("y[base + j] = o; yh[base + j] = onnx_f32_to_f16(o);"), "{text}");
        assert!(text.contains("((float4*)y)[row * cols4 + q] = o; ((ushort4*)yh)[row * cols4 + q] = make_ushort4(onnx_f32_to_f16(o.x), onnx_f32_to_f16(o.y), onnx_f32_to_f16(o.z), onnx_f32_to_f16(o.w));"), "{text}");
        assert!(text.contains("onnx_aligned16(y) && onnx_aligned16(yh)"), "{text}");
        let alone = NormStores { f32: false, half: Some(DType::BF16) };
        let (_, text) = layer_norm_kernel(&group, 2, Some(3), 1e-5f32.to_bits(), (alone, None)).unwrap();
        assert!(text.contains("in3, unsigned short* __restrict__ yh) {"), "{text}");
        assert!(text.contains("yh[base + j] = onnx_f32_to_bf16(o);") && !text.contains("y["), "{text}");
        assert!(text.contains("make_ushort4(onnx_f32_to_bf16(o.x),") && !text.contains("float4*)y"), "{text}");
    }
}
