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
use crate::graph::ir::{Graph, ValueId};
use crate::ops::gather::gpu::{GatherForm, GatherKernel};
use crate::ops::gpu::{GpuKernel, GpuLaunch, GpuNode, Work, index_type, kernel_definition, kernel_signature, render};
use crate::ops::reduce::ReduceOp;
use crate::ops::reduce::gpu::ReduceKernel;
use crate::plan::emitter::Emitter;
use crate::plan::launch::launch_config;
use crate::plan::nodes::NodeInfo;
use crate::plan::{ArgSource, LaunchStep, PlanStep};

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

/// The launch of a node whose GPU form is exactly one launch.
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
    let &ReduceKernel { op: op @ (ReduceOp::Sum | ReduceOp::Mean), dtype: DType::F32 } =
        reduce.kernel_as::<ReduceKernel>()?
    else {
        return None;
    };
    let x = graph.nodes[r].inputs.first().copied().flatten()?;
    if uses[x.0] != 1 || outputs.contains(&x) {
        return None;
    }
    let g = graph.nodes[..r].iter().rposition(|n| n.outputs.as_slice() == [x])?;
    let gather = single_launch(&info[g])?;
    let &GatherKernel { form: GatherForm::Axis, elem_bytes: 4, index } = gather.kernel_as::<GatherKernel>()? else {
        return None;
    };
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
    if len <= 0
        || Some(expect) != inner.checked_mul(len)
        || n_idx % len != 0
        || Some(n_out) != (n_idx / len).checked_mul(inner)
    {
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

/// The bag kernel (`embedding_bag.cu`) for `index` indices, summing or (`mean`) averaging. Launched
/// with the parameters `meta`, the table, the indices, the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EmbeddingBagKernel {
    pub(crate) index: DType,
    pub(crate) mean: bool,
}

impl GpuKernel for EmbeddingBagKernel {
    fn prefix(&self) -> &'static str {
        "embedding_bag"
    }

    fn source(&self) -> String {
        let finish = if self.mean { " / (float)len" } else { "" };
        render(include_str!("embedding_bag.cu"), &[("IX", index_type(self.index)), ("FINISH", finish)])
    }
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
    let (name, text) = kernel_definition(&EmbeddingBagKernel { index: bag.index, mean: bag.mean });
    let name = emit.kernel(kernel_signature(&name, 3), Some(text));
    let config = launch_config(Work::Columns { rows: bag.bags, cols: bag.width });
    emit.steps.push(PlanStep::Launch(LaunchStep { kernel: name, args, config }));
    Ok(())
}

#[cfg(test)]
mod tests {
    use saggar_shape::{DType, Dim};

    use super::*;
    use crate::builder::ModelBuilder;
    use crate::ops::Attribute::Int;
    use crate::{ImportLimits, OnnxModel, Tensor, TensorData};

    fn fixed(d: &[usize]) -> Vec<Dim> {
        d.iter().map(|&v| Dim::Fixed(v as u64)).collect()
    }

    /// A table of `rows` rows of `row` (dims) elements.
    fn table(rows: usize, row: &[usize], seed: usize) -> Tensor {
        let width: usize = row.iter().product();
        let v = (0..rows * width).map(|i| ((i * 7919 + seed * 104_729) % 211) as f32 / 105.0 - 1.0).collect();
        Tensor::new([&[rows], row].concat(), TensorData::F32(v)).unwrap()
    }

    /// The grouping of `Gather(t[7, 6], idx[3, 4]) -> g[3, 4, 6]` then `op(g, axes)` plus `extra`
    /// (more nodes or outputs): whether the Gather joined the reduction's group, with fusion on and off.
    fn fused(op: &str, axes: &[i64], extra: impl Fn(&mut ModelBuilder)) -> (bool, bool) {
        let mut b = ModelBuilder::new(18);
        b.input("idx", DType::I64, &fixed(&[3, 4]));
        b.initializer("t", &table(7, &[6], 0));
        b.initializer("axes", &Tensor::from_i64s(axes.to_vec()));
        b.node("Gather", &["t", "idx"], &["g"], &[]);
        b.node(op, &["g", "axes"], &["y"], &[("keepdims", Int(0))]);
        b.output("y", DType::F32, &[]);
        extra(&mut b);
        let model = OnnxModel::from_bytes(&b.to_bytes(), "bag", &ImportLimits::default()).unwrap();
        let g = crate::graph::passes::specialise(model.graph(), &[vec![3, 4]], &[], "bag").unwrap();
        let info = crate::plan::nodes::describe(&g).unwrap();
        let at = |t: &str| g.nodes.iter().position(|n| n.op_type == t).unwrap();
        let (gather, reduce) = (at("Gather"), at(op));
        let grouped = |fuse: bool| {
            let plan = crate::fuse::group(&g, &info, fuse);
            assert_eq!(plan.root[gather] == reduce, plan.bags.contains_key(&reduce), "the group is a bag");
            plan.root[gather] == reduce
        };
        (grouped(true), grouped(false))
    }

    #[test]
    fn only_a_gather_read_by_nothing_else_and_reduced_over_index_axes_is_fused() {
        let none = |_: &mut ModelBuilder| {};
        assert_eq!(fused("ReduceSum", &[1], none), (true, false), "the bag; fusion off");
        assert_eq!(fused("ReduceMean", &[0, 1], none), (true, false), "every index axis, a mean");
        let second_reader = |b: &mut ModelBuilder| {
            b.node("Relu", &["g"], &["r"], &[]);
            b.output("r", DType::F32, &[]);
        };
        assert_eq!(fused("ReduceSum", &[1], second_reader), (false, false), "a second reader");
        let output = |b: &mut ModelBuilder| {
            b.output("g", DType::F32, &[]);
        };
        assert_eq!(fused("ReduceSum", &[1], output), (false, false), "a graph output");
        assert_eq!(fused("ReduceSum", &[2], none), (false, false), "over the row's elements");
        assert_eq!(fused("ReduceSum", &[1, 2], none), (false, false), "over an index axis and the row's");
        assert_eq!(fused("ReduceSum", &[0], none), (false, false), "an outer index axis, the inner kept");
        assert_eq!(fused("ReduceMax", &[1], none), (false, false), "another reduction");
    }

    #[test]
    fn bag_launches_put_threads_along_the_row_and_the_rest_of_the_block_on_bags() {
        let shape = |rows, cols| {
            let c = launch_config(Work::Columns { rows, cols });
            (c.grid.x, c.block.x, c.block.y, c.shared_mem_bytes)
        };
        assert_eq!(shape(1, 16), (1, 16, 1, 0), "one bag: one row of threads");
        assert_eq!(shape(40, 16), (3, 16, 16, 0), "16 bags a block");
        assert_eq!(shape(2, 300), (2, 256, 1, 0), "rows wider than a block loop");
        assert_eq!(shape(3, 37), (1, 64, 4, 0), "rows of bags rounded up to a power of two");
        assert_eq!(shape(10_000_000, 3), (65_535, 4, 64, 0), "the kernel loops over bags past the grid");
    }
}
