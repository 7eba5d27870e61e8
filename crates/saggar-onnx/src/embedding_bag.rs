//! Embedding bags: a `Gather` of table rows read only by a `ReduceSum` or `ReduceMean` over index
//! axes, run on CUDA and HIP as one kernel that sums the gathered rows without storing them.
//!
//! Recognised from the two nodes' GPU launches, so the fused kernel computes what they compute: the
//! Gather's launch takes rows of `inner` elements from a table of `rows` rows (`outer == 1`: axis 0,
//! or an axis after extents of 1), f32 data and int64 or int32 indices; the reduction's launch (f32
//! only) reduces a contiguous run of axes whose innermost has stride `inner`, that is a suffix of the
//! index axes (axes of extent 1 aside, which move nothing). Its result is then `out[b, d] = Σ_l
//! data[idx[b, l], d]` over bags `b` of `len` consecutive indices, with `keepdims` either way (the
//! same bytes). An index below 0 counts from the end once; one still outside the table adds
//! nothing, as the Gather kernel reads 0 there. The Gather's output must have no other reader and
//! must not be a graph output.
//!
//! The host backend runs the group as the two nodes' host kernels in order (an index out of range
//! is an evaluation error there, as for the unfused Gather).

use std::collections::{HashMap, HashSet};

use saggar_shape::DType;

use crate::error::OnnxError;
use crate::fusion::NodeInfo;
use crate::gpu_codegen::{self, kernel_name};
use crate::ir::{Graph, ValueId};
use crate::lowering::{ArgSource, Emitter, PlanStep, Step, launch_config};
use crate::ops::gpu::{GpuKind, GpuLaunch, GpuNode, ReduceOp, Work};

/// A recognised Gather → ReduceSum / ReduceMean pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EmbeddingBag {
    /// The Gather node.
    pub(crate) gather: usize,
    /// The reduction node: the group's root.
    pub(crate) reduce: usize,
    /// ReduceMean (the sum divided by `len`) rather than ReduceSum.
    pub(crate) mean: bool,
    /// The indices' element type (int64 or int32).
    pub(crate) index: DType,
    /// Bags (output rows).
    pub(crate) bags: u64,
    /// Indices per bag.
    pub(crate) len: u64,
    /// Elements per table row.
    pub(crate) width: u64,
    /// Rows of the table.
    pub(crate) rows: u64,
}

impl EmbeddingBag {
    /// The kernel's meta table: `bags, len, width, rows`.
    fn meta(&self) -> [i64; 4] {
        [self.bags, self.len, self.width, self.rows].map(|v| i64::try_from(v).unwrap_or(i64::MAX))
    }
}

/// The one launch of node `n`'s GPU form.
fn single_launch(info: &NodeInfo) -> Option<&GpuLaunch> {
    match &info.gpu {
        Some(Ok(GpuNode::Launches(l))) => match l.as_slice() {
            [one] => Some(one),
            _ => None,
        },
        _ => None,
    }
}

/// The pair whose reduction is node `r`, when it fuses.
fn match_at(
    graph: &Graph,
    info: &[NodeInfo],
    uses: &[usize],
    outputs: &HashSet<ValueId>,
    r: usize,
) -> Option<EmbeddingBag> {
    let reduce = single_launch(&info[r])?;
    let GpuKind::Reduce { op: op @ (ReduceOp::Sum | ReduceOp::Mean) } = reduce.kind else { return None };
    let x = graph.nodes[r].inputs.first().copied().flatten()?;
    if uses[x.0] != 1 || outputs.contains(&x) {
        return None;
    }
    let g = graph.nodes[..r].iter().rposition(|n| n.outputs.as_slice() == [x])?;
    let gather = single_launch(&info[g])?;
    let GpuKind::Gather { elem_bytes: 4, index } = gather.kind else { return None };
    if info[g].inputs.first()?.as_ref()?.dtype != DType::F32 || info[r].inputs.first()?.as_ref()?.dtype != DType::F32 {
        return None;
    }
    let &[outer, rows, inner, n_idx] = gather.meta.as_slice() else { return None };
    if outer != 1 || inner <= 0 || n_idx <= 0 || rows < 0 {
        return None;
    }
    // The reduction's table: nk, nr, n_out, n_red, kept dims and strides, reduced dims and strides
    // (strides of the Gather's contiguous output).
    let m = &reduce.meta;
    let (nk, nr) = (usize::try_from(*m.first()?).ok()?, usize::try_from(*m.get(1)?).ok()?);
    let (n_out, len) = (*m.get(2)?, *m.get(3)?);
    let reduced = m.get(4 + 2 * nk..4 + 2 * nk + 2 * nr)?;
    let (rdims, rstrides) = reduced.split_at(nr);
    // The reduced axes that move anything must be consecutive, innermost of stride `inner`.
    let mut expect = inner;
    for (&d, &s) in rdims.iter().zip(rstrides).rev().filter(|&(&d, _)| d != 1) {
        if s != expect {
            return None;
        }
        expect = expect.checked_mul(d)?;
    }
    if len <= 0 || n_idx % len != 0 || Some(n_out) != (n_idx / len).checked_mul(inner) {
        return None;
    }
    Some(EmbeddingBag {
        gather: g,
        reduce: r,
        mean: op == ReduceOp::Mean,
        index,
        bags: (n_idx / len) as u64,
        len: len as u64,
        width: inner as u64,
        rows: rows as u64,
    })
}

/// Every fusable pair among the nodes not `claimed`, by reduction node.
pub(crate) fn find(graph: &Graph, info: &[NodeInfo], claimed: &[bool]) -> HashMap<usize, EmbeddingBag> {
    let uses = graph.use_counts();
    let outputs: HashSet<ValueId> = graph.outputs.iter().map(|o| o.value).collect();
    (0..graph.nodes.len())
        .filter(|&r| !claimed[r])
        .filter_map(|r| match_at(graph, info, &uses, &outputs, r))
        .filter(|b| !claimed[b.gather])
        .map(|b| (b.reduce, b))
        .collect()
}

/// `(name, C++ definition)` of the bag kernel for `index` indices. Threads run along a row's
/// elements (`threadIdx.x`, coalesced) and bags (`threadIdx.y`, then blocks); each thread adds its
/// element of the bag's rows in index order. Meta: `bags, len, width, rows`. Parameters: `meta`,
/// the table, the indices, the output.
pub(crate) fn kernel(index: DType, mean: bool) -> (String, String) {
    let ix = if index == DType::I32 { "int" } else { "long long" };
    let finish = if mean { " / (float)len" } else { "" };
    let text = format!(
        r#"(const onnx_i64* meta, const float* __restrict__ data, const {ix}* __restrict__ idx, float* __restrict__ out) {{
  const onnx_i64 bags = meta[0], len = meta[1], width = meta[2], rows = meta[3];
  for (onnx_i64 b = (onnx_i64)blockIdx.x * blockDim.y + threadIdx.y; b < bags; b += (onnx_i64)gridDim.x * blockDim.y) {{
    const {ix}* bag = idx + b * len;
    for (onnx_i64 d = threadIdx.x; d < width; d += blockDim.x) {{
      float acc = 0.0f;
      for (onnx_i64 l = 0; l < len; ++l) {{
        onnx_i64 x = (onnx_i64)bag[l];
        if (x < 0) x += rows;
        if (x >= 0 && x < rows) acc += data[x * width + d];
      }}
      out[b * width + d] = acc{finish};
    }}
  }}
}}
"#
    );
    let name = kernel_name("embedding_bag", &text);
    (name.clone(), format!("SAGGAR_GLOBAL void {name}{text}"))
}

/// Emits the one launch of `bag` on CUDA or HIP.
pub(crate) fn emit(
    graph: &Graph,
    bag: &EmbeddingBag,
    location: &HashMap<ValueId, ArgSource>,
    emit: &mut Emitter,
) -> Result<(), OnnxError> {
    let (gather, reduce) = (&graph.nodes[bag.gather], &graph.nodes[bag.reduce]);
    let operands = [
        gather.inputs.first().copied().flatten(),
        gather.inputs.get(1).copied().flatten(),
        reduce.outputs.first().copied(),
    ];
    let mut args = vec![emit.meta(&bag.meta())];
    for id in operands {
        let src = id.and_then(|id| location.get(&id).copied());
        args.push(src.ok_or_else(|| OnnxError::Graph {
            reason: format!("an operand of the embedding bag `{}` has no location", reduce.name),
        })?);
    }
    let (name, text) = kernel(bag.index, bag.mean);
    let name = emit.kernel(gpu_codegen::signature(&name, 3), Some(text));
    let config = launch_config(Work::Columns { rows: bag.bags, cols: bag.width });
    emit.steps.push(PlanStep::Launch(Step { kernel: name, args, config }));
    Ok(())
}
