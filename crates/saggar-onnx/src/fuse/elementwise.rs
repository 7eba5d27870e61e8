//! CUDA/HIP C++ of fused elementwise groups: a chain of elementwise nodes over broadcast inputs as one
//! kernel. The chain is one inlined `__device__` function of the loaded inputs; the kernel loads
//! each input at the offset its broadcast mode gives ([`crate::ops::gpu::broadcast_mode`], chosen per
//! bucket into the `meta` table), and a floating-point group moves four elements a step where every
//! input is in a common broadcast pattern. The LayerNormalization prologue (`fuse::layer_norm`)
//! evaluates the same loads and nodes where it reads its input.

use std::fmt::Write as _;

use saggar_shape::DType;

use crate::ops::gpu::ctype;
use crate::ops::gpu::kernel_name;

/// One fused elementwise group, as the lowering describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FusedGroup {
    /// Element types of the external inputs (kernel parameters `in0..`).
    pub(crate) inputs: Vec<DType>,
    /// The nodes in evaluation order: expression template, operand per `$k` and result type.
    pub(crate) nodes: Vec<FusedNode>,
}

/// Per input slot of a fused node: `None` absent, `Some(Ok(k))` external input `k`, `Some(Err(j))`
/// the value of the group's node `j`.
pub(crate) type Wiring = Vec<Option<Result<usize, usize>>>;

/// One node of a [`FusedGroup`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FusedNode {
    pub(crate) expr: String,
    pub(crate) operands: Wiring,
    pub(crate) out: DType,
}

/// The parameters `, const T0* __restrict__ in0, ...` of a group's external inputs.
pub(crate) fn fused_params(group: &FusedGroup) -> Option<String> {
    let mut params = String::new();
    for (k, d) in group.inputs.iter().enumerate() {
        let _ = write!(params, ", const {}* __restrict__ in{k}", ctype(*d)?);
    }
    Some(params)
}

/// The external inputs some node of `group` reads.
pub(crate) fn used_inputs(group: &FusedGroup) -> Vec<usize> {
    (0..group.inputs.len()).filter(|k| group.nodes.iter().any(|n| n.operands.contains(&Some(Ok(*k))))).collect()
}

/// Statements computing every node value `v0, v1, ..` of `group` at the flat output index `i`, with
/// `rank` and `dims` in scope and the group's `meta` in `meta`: `rank, n, dims[rank]`, the broadcast
/// strides of each external input (`rank` each), then each input's broadcast mode and its divisor
/// ([`crate::ops::gpu::broadcast_mode`]), a flag saying whether the index and the divisors fit
/// 32 bits, and each input's block count (`broadcast_mode`'s `c`). An input in a common pattern
/// costs at most two divisions; only when some input is in no common pattern does the kernel walk
/// the dimensions. Only the inputs some node reads are loaded.
pub(crate) fn fused_values(group: &FusedGroup) -> Option<String> {
    Some(fused_loads(group)? + &fused_nodes(group)?)
}

/// The loads `a{k}` of [`fused_values`]: each used input's offset by its broadcast mode, then its
/// element at that offset.
fn fused_loads(group: &FusedGroup) -> Option<String> {
    let used = used_inputs(group);
    let externals = group.inputs.len();
    let mut body = format!(
        "    const onnx_i64* fm = meta + 2 + {} * rank;\n    const bool n32 = fm[{}] != 0;\n    bool walk = false;\n",
        externals + 1,
        2 * externals
    );
    for &k in &used {
        let (mode, m) = (2 * k, format!("fm[{}]", 2 * k + 1));
        let _ = writeln!(body, "    onnx_i64 o{k} = 0;\n    switch ((int)fm[{mode}]) {{");
        let _ = writeln!(body, "      case 1: o{k} = i; break;");
        let _ = writeln!(body, "      case 2: o{k} = n32 ? (onnx_i64)((unsigned)i % (unsigned){m}) : i % {m}; break;");
        let _ = writeln!(body, "      case 3: break;");
        let _ = writeln!(body, "      case 4: o{k} = n32 ? (onnx_i64)((unsigned)i / (unsigned){m}) : i / {m}; break;");
        let c = format!("fm[{}]", 2 * externals + 1 + k);
        let _ = writeln!(
            body,
            "      case 5: o{k} = n32 ? (onnx_i64)((unsigned)i / (unsigned){m} % (unsigned){c}) : i / {m} % {c}; break;"
        );
        let _ = writeln!(body, "      default: walk = true;\n    }}");
    }
    if used.is_empty() {
        body.push_str("    (void)n32; (void)walk;\n");
    } else {
        body.push_str("    if (walk) {\n      onnx_i64 rem = i;\n");
        for k in &used {
            let _ = writeln!(body, "      o{k} = 0;");
        }
        body.push_str("      for (int d = rank - 1; d >= 0; --d) {\n");
        body.push_str("        const onnx_i64 c = rem % dims[d]; rem /= dims[d];\n");
        for k in &used {
            let _ = writeln!(body, "        o{k} += c * meta[2 + {} * rank + d];", k + 1);
        }
        body.push_str("      }\n    }\n");
    }
    for &k in &used {
        let _ = writeln!(body, "    const {} a{k} = in{k}[o{k}];", ctype(group.inputs[k])?);
    }
    Some(body)
}

/// A node's expression with each operand `$slot` replaced by `name(operand)`: `Ok(k)` the external
/// input `k`, `Err(m)` member `m`'s value. Absent optional operands are left out.
pub(crate) fn substitute(expr: &str, operands: &Wiring, name: impl Fn(Result<usize, usize>) -> String) -> String {
    let mut expr = expr.to_string();
    // Last slot first, so that `$1` never rewrites the start of `$10`.
    for (slot, operand) in operands.iter().enumerate().rev() {
        if let Some(operand) = operand {
            expr = expr.replace(&format!("${slot}"), &name(*operand));
        }
    }
    expr
}

/// The statements `const T v{j} = ...;` of `group`'s nodes over the loaded `a{k}`.
fn fused_nodes(group: &FusedGroup) -> Option<String> {
    let mut body = String::new();
    for (j, node) in group.nodes.iter().enumerate() {
        let expr = substitute(&node.expr, &node.operands, |operand| match operand {
            Ok(k) => format!("a{k}"),
            Err(n) => format!("v{n}"),
        });
        let _ = writeln!(body, "    const {} v{j} = {expr};", ctype(node.out)?);
    }
    Some(body)
}

/// The `__device__` function `NAME_v` of the loaded inputs `a{k}` (`k` in `used`) returning the
/// value of `group`'s last node, inlined where it is called.
pub(crate) fn chain_function(group: &FusedGroup, used: &[usize]) -> Option<String> {
    let last = group.nodes.len().checked_sub(1)?;
    let mut params = String::new();
    for &k in used {
        let _ = write!(params, "{}{} a{k}", if params.is_empty() { "" } else { ", " }, ctype(group.inputs[k])?);
    }
    Some(format!(
        "__device__ ONNX_FORCEINLINE {} NAME_v({params}) {{\n{}    return v{last};\n}}\n",
        ctype(group.nodes[last].out)?,
        fused_nodes(group)?
    ))
}

/// `(name, C++ definitions)` of a fused group's kernel. Meta: as [`fused_values`] reads it.
///
/// The nodes are one `__device__` function of the loaded inputs ([`chain_function`]). When every
/// input and the output are `f32`, `f16`, `bf16`, `i32`, `i8` or `u8` (a chain ending in a cast to
/// half precision, a quantised model's Quantize- and DequantizeLinear chains), the kernel first
/// tests whether this launch takes four elements a step (whole four-element vectors, 16-byte
/// aligned output and inputs of the output's shape, every used input in a common broadcast
/// pattern) and then moves four elements a thread a step: inputs of the output's shape and the
/// output with vector loads and stores (`float4`; `ushort4` for half bits; `int4`, `char4`,
/// `uchar4`), a scalar as one value, and inputs read in blocks (a bias, a per-channel value over NCHW)
/// element by element at four offsets from at most two divisions ([`vector_path`]). A thread keeps
/// four elements of each input in flight instead of one, which is what a memory-bound chain (GELU
/// over a transformer's FFN activations, a convolution's bias, residual add and ReLU) waits on.
/// Otherwise the thread reads one element a step at the offsets its broadcast modes give.
pub(crate) fn fused_kernel(group: &FusedGroup) -> Option<(String, String)> {
    let last = group.nodes.last()?;
    let used = used_inputs(group);
    let out_type = ctype(last.out)?;
    let args: Vec<String> = used.iter().map(|k| format!("a{k}")).collect();
    let vector = used.iter().all(|&k| vector_type(group.inputs[k]).is_some()) && vector_type(last.out).is_some();
    let vector_path = if vector { vector_path(group, &used) } else { String::new() };
    // NAME stands for the kernel's name, which hashes this text.
    let text = format!(
        "{chain}SAGGAR_GLOBAL void NAME(const onnx_i64* meta{inputs}, {out_type}* __restrict__ out) {{\n  const int rank = (int)meta[0];\n  const onnx_i64* dims = meta + 2;\n{vector_path}  ONNX_LOOP(i, meta[1]) {{\n{loads}    out[i] = NAME_v({args});\n  }}\n}}\n",
        chain = chain_function(group, &used)?,
        inputs = fused_params(group)?,
        loads = fused_loads(group)?,
        args = args.join(", "),
    );
    let name = kernel_name("fused", &text);
    Some((name.clone(), text.replace("NAME", &name)))
}

/// The four-element vector type of an element type and its constructor (`None`: the type has no
/// vector path). The 8- and 32-bit integers are there for quantised models: their Quantize- and
/// DequantizeLinear chains read `i32` products and write `i8`.
pub(crate) fn vector_type(d: DType) -> Option<(&'static str, &'static str)> {
    match d {
        DType::F32 => Some(("float4", "make_float4")),
        DType::F16 | DType::BF16 => Some(("ushort4", "make_ushort4")),
        DType::I32 => Some(("int4", "make_int4")),
        DType::I8 => Some(("char4", "make_char4")),
        DType::U8 => Some(("uchar4", "make_uchar4")),
        _ => None,
    }
}

/// The four-element path of [`fused_kernel`] for a floating-point group reading `used`: per input a
/// vector load (mode 1, and mode 2 when its rows are whole aligned vectors: a bias or per-column
/// scale over the last axis), one value (mode 3), or four element loads at the offsets of its
/// blocks (modes 2, 4 and 5, `onnx_block_offsets4` in the prelude; their lanes may straddle
/// blocks). Each
/// input's mode, block extents and (mode 3) value are read once before the loop, so the loop body
/// is the loads, the chain and the store: the meta table is not read again per step.
fn vector_path(group: &FusedGroup, used: &[usize]) -> String {
    let externals = group.inputs.len();
    let mut text = format!(
        "  const onnx_i64* fm = meta + 2 + {} * rank;\n  const bool n32 = fm[{}] != 0;\n  bool vec = (meta[1] & 3) == 0 && onnx_aligned16(out);\n",
        externals + 1,
        2 * externals
    );
    // Per used input: its test (a common pattern, aligned when of the output's shape), its hoisted
    // parameters and its load.
    let mut loads = String::new();
    for &k in used {
        let (v4, make) = vector_type(group.inputs[k]).unwrap_or(("float4", "make_float4"));
        let _ = writeln!(
            text,
            "  const int mode{k} = (int)fm[{mode}];\n  const onnx_i64 inner{k} = mode{k} == 2 ? 1 : fm[{m}], count{k} = fm[{count}];\n  const {v4} one{k} = mode{k} == 3 ? {make}(in{k}[0], in{k}[0], in{k}[0], in{k}[0]) : {v4}{{}};\n  const bool row{k} = mode{k} == 2 && (count{k} & 3) == 0 && onnx_aligned16(in{k});\n  vec = vec && mode{k} != 0 && (mode{k} != 1 || onnx_aligned16(in{k}));",
            mode = 2 * k,
            m = 2 * k + 1,
            count = 2 * externals + 1 + k,
        );
        let _ = writeln!(
            loads,
            "      {v4} x{k};\n      if (mode{k} == 1) x{k} = ((const {v4}*)in{k})[q];\n      else if (mode{k} == 3) x{k} = one{k};\n      else if (row{k}) x{k} = ((const {v4}*)in{k})[n32 ? (onnx_i64)((unsigned)q % (unsigned)(count{k} >> 2)) : q % (count{k} >> 2)];"
        );
        let _ = writeln!(
            loads,
            "      else {{\n        onnx_i64 o[4];\n        onnx_block_offsets4(q << 2, inner{k}, count{k}, n32, o);\n        x{k} = {make}(in{k}[o[0]], in{k}[o[1]], in{k}[o[2]], in{k}[o[3]]);\n      }}"
        );
    }
    if used.is_empty() {
        text.push_str("  (void)n32;\n");
    }
    let out = group.nodes.last().map_or(DType::F32, |n| n.out);
    let (out4, _) = vector_type(out).unwrap_or(("float4", "make_float4"));
    text.push_str("  if (vec) {\n    ONNX_LOOP(q, meta[1] >> 2) {\n");
    text.push_str(&loads);
    let _ = writeln!(text, "      {out4} r;");
    for c in ["x", "y", "z", "w"] {
        let args: Vec<String> = used.iter().map(|k| format!("x{k}.{c}")).collect();
        let _ = writeln!(text, "      r.{c} = NAME_v({});", args.join(", "));
    }
    let _ = writeln!(text, "      (({out4}*)out)[q] = r;\n    }}\n    return;\n  }}");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_kernel_chains_node_values_and_names_by_text() {
        let group = FusedGroup {
            inputs: vec![DType::F32, DType::F32],
            nodes: vec![
                FusedNode { expr: "($0 + $1)".into(), operands: vec![Some(Ok(0)), Some(Ok(1))], out: DType::F32 },
                FusedNode { expr: "erff($0)".into(), operands: vec![Some(Err(0))], out: DType::F32 },
            ],
        };
        let (name, text) = fused_kernel(&group).unwrap();
        assert!(name.starts_with("onnx_fused_"));
        assert!(text.contains("const float v0 = (a0 + a1);"), "{text}");
        assert!(text.contains("const float v1 = erff(v0);"), "{text}");
        assert!(text.contains("return v1;"), "{text}");
        assert!(text.contains(&format!("out[i] = {name}_v(a0, a1);")), "{text}");
        assert!(text.contains(&format!("r.w = {name}_v(x0.w, x1.w);")), "an all-f32 chain has the vector path: {text}");
        assert!(text.contains("o1 += c * meta[2 + 2 * rank + d];"), "{text}");
        assert!(text.contains("const onnx_i64* fm = meta + 2 + 3 * rank;"), "{text}");
        assert!(text.contains("case 2: o1 = n32 ? (onnx_i64)((unsigned)i % (unsigned)fm[3]) : i % fm[3];"), "{text}");
        assert_eq!(fused_kernel(&group).unwrap().0, name, "deterministic");
        let cast = FusedNode { expr: "onnx_f32_to_f16($0)".into(), operands: vec![Some(Err(1))], out: DType::F16 };
        let half = FusedGroup { nodes: [group.nodes.clone(), vec![cast]].concat(), ..group.clone() };
        let (_, text) = fused_kernel(&half).unwrap();
        assert!(text.contains("float4 x0;") && text.contains("((ushort4*)out)[q] = r;"), "{text}");
        // Inputs read in blocks (a per-channel bias) take the four-element path too, each lane at its
        // block's offset.
        assert!(text.contains("vec = vec && mode1 != 0 && (mode1 != 1 || onnx_aligned16(in1));"), "{text}");
        assert!(text.contains("const onnx_i64 inner1 = mode1 == 2 ? 1 : fm[3], count1 = fm[6];"), "{text}");
        assert!(text.contains("onnx_block_offsets4(q << 2, inner1, count1, n32, o);"), "{text}");
        assert!(
            text.contains("const float4 one1 = mode1 == 3 ? make_float4(in1[0], in1[0], in1[0], in1[0]) : float4{};"),
            "a scalar input is read once, before the loop: {text}"
        );
        assert!(text.contains("else if (mode1 == 3) x1 = one1;"), "{text}");
        assert!(text.contains("x1 = make_float4(in1[o[0]], in1[o[1]], in1[o[2]], in1[o[3]]);"), "{text}");
        assert!(
            text.contains("case 5: o1 = n32 ? (onnx_i64)((unsigned)i / (unsigned)fm[3] % (unsigned)fm[6])"),
            "{text}"
        );
        let mixed = FusedGroup { inputs: vec![DType::F32, DType::I64], ..group };
        let (_, text) = fused_kernel(&mixed).unwrap();
        assert!(!text.contains("float4"), "a chain reading i64 moves one element at a time: {text}");
        // A quantised product's requantisation: i32 in, f32 scale, i8 out, four at a time.
        let requantise = FusedGroup {
            inputs: vec![DType::I32, DType::F32],
            nodes: vec![
                FusedNode {
                    expr: "((float)$0 * $1)".into(),
                    operands: vec![Some(Ok(0)), Some(Ok(1))],
                    out: DType::F32,
                },
                FusedNode { expr: "(signed char)$0".into(), operands: vec![Some(Err(0))], out: DType::I8 },
            ],
        };
        let (_, text) = fused_kernel(&requantise).unwrap();
        assert!(text.contains("x0 = ((const int4*)in0)[q];") && text.contains("((char4*)out)[q] = r;"), "{text}");
    }
}
