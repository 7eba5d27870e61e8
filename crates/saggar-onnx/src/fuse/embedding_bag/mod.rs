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
use crate::plan::{ArgSource, PlanStep, Step};

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
    let &ReduceKernel { op: op @ (ReduceOp::Sum | ReduceOp::Mean) } = reduce.kernel_as::<ReduceKernel>()? else {
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
    emit.steps.push(PlanStep::Launch(Step { kernel: name, args, config }));
    Ok(())
}

#[cfg(test)]
mod tests {
    use saggar_device::BackendKind;
    use saggar_shape::{DType, Dim};

    use super::*;
    use crate::builder::ModelBuilder;
    use crate::gpu_emulation::{assert_close, run_emulated};
    use crate::ops::Attribute::Int;
    use crate::{ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData, run_on_host};

    fn fixed(d: &[usize]) -> Vec<Dim> {
        d.iter().map(|&v| Dim::Fixed(v as u64)).collect()
    }

    /// A table of `rows` rows of `row` (dims) elements.
    fn table(rows: usize, row: &[usize], seed: usize) -> Tensor {
        let width: usize = row.iter().product();
        let v = (0..rows * width).map(|i| ((i * 7919 + seed * 104_729) % 211) as f32 / 105.0 - 1.0).collect();
        Tensor::new([&[rows], row].concat(), TensorData::F32(v)).unwrap()
    }

    /// One bag of the test model: a table, an index input, the reduction's axes, keepdims, mean.
    struct Case {
        rows: usize,
        row: Vec<usize>,
        idx: Vec<usize>,
        index: DType,
        axes: Vec<i64>,
        keepdims: bool,
        mean: bool,
    }

    fn cases() -> Vec<Case> {
        let case = |rows, width, idx: &[usize], axes: &[i64]| Case {
            rows,
            row: vec![width],
            idx: idx.to_vec(),
            index: DType::I64,
            axes: axes.to_vec(),
            keepdims: false,
            mean: false,
        };
        vec![
            // Width 37 (no multiple of 4 or 32), keepdims 0 and 1, int64 and int32 indices.
            case(7, 37, &[3, 5], &[1]),
            Case { keepdims: true, ..case(7, 37, &[3, 5], &[-2]) },
            Case { index: DType::I32, ..case(9, 5, &[4, 3], &[1]) },
            // Bags of one row; many rows a bag; more bags than one block holds; rows wider than a block.
            case(6, 16, &[5, 1], &[1]),
            case(11, 3, &[2, 40], &[1]),
            case(13, 16, &[40, 4], &[1]),
            case(5, 300, &[2, 3], &[1]),
            // Index rank 3: the last two axes, or the last one; every index axis (one bag).
            Case { keepdims: true, ..case(8, 6, &[2, 3, 4], &[1, 2]) },
            case(8, 6, &[2, 3, 4], &[2]),
            case(8, 6, &[3, 4], &[0, 1]),
            // ReduceMean.
            Case { mean: true, ..case(7, 10, &[3, 4], &[1]) },
            // A table of more than two dimensions: each row is [2, 5].
            Case { row: vec![2, 5], ..case(7, 10, &[3, 4], &[1]) },
        ]
    }

    /// Indices for case `c`: negative ones, and with `out_of_range` some outside the table either way.
    fn indices(c: &Case, k: usize, out_of_range: bool) -> Tensor {
        let n: usize = c.idx.iter().product();
        let rows = c.rows as i64;
        let v: Vec<i64> = (0..n)
            .map(|i| {
                let base = ((i * 5 + k * 3) as i64 % (2 * rows)) - rows;
                match (out_of_range, i % 7) {
                    (true, 2) => rows + (i as i64 % 3),
                    (true, 5) => -rows - 1 - (i as i64 % 2),
                    _ => base,
                }
            })
            .collect();
        let data = match c.index {
            DType::I32 => TensorData::I32(v.iter().map(|&x| x as i32).collect()),
            _ => TensorData::I64(v),
        };
        Tensor::new(c.idx.clone(), data).unwrap()
    }

    fn model(cases: &[Case]) -> OnnxModel {
        let mut b = ModelBuilder::new(18);
        for (k, c) in cases.iter().enumerate() {
            b.input(&format!("idx{k}"), c.index, &fixed(&c.idx));
            b.initializer(&format!("t{k}"), &table(c.rows, &c.row, k));
            b.initializer(&format!("axes{k}"), &Tensor::from_i64s(c.axes.clone()));
            b.node("Gather", &[&format!("t{k}"), &format!("idx{k}")], &[&format!("g{k}")], &[]);
            let op = if c.mean { "ReduceMean" } else { "ReduceSum" };
            let attrs = [("keepdims", Int(i64::from(c.keepdims)))];
            b.node(op, &[&format!("g{k}"), &format!("axes{k}")], &[&format!("y{k}")], &attrs);
            b.output(&format!("y{k}"), DType::F32, &[]);
        }
        OnnxModel::from_bytes(&b.to_bytes(), "bags", &ImportLimits::default()).unwrap()
    }

    /// `out[b, d] = Σ_l table[idx[b, l], d]` (a mean with `mean`), negative indices wrapped once and
    /// indices still out of range adding nothing, in index order in f32.
    fn reference(c: &Case, k: usize, idx: &Tensor) -> Vec<f32> {
        let t = table(c.rows, &c.row, k).to_f32s().unwrap();
        let width: usize = c.row.iter().product();
        let idx: Vec<i64> = match idx.data() {
            TensorData::I64(v) => v.clone(),
            TensorData::I32(v) => v.iter().map(|&x| i64::from(x)).collect(),
            other => panic!("{other:?}"),
        };
        // Axes of the Gather's output: the index axes, then the row's.
        let rank = c.idx.len() + c.row.len();
        let axes: Vec<usize> =
            c.axes.iter().map(|&a| if a < 0 { (a + rank as i64) as usize } else { a as usize }).collect();
        let len: usize = axes.iter().map(|&a| c.idx[a]).product();
        let mut out = Vec::new();
        for bag in idx.chunks(len) {
            for d in 0..width {
                let mut acc = 0.0f32;
                for &x in bag {
                    let x = if x < 0 { x + c.rows as i64 } else { x };
                    if (0..c.rows as i64).contains(&x) {
                        acc += t[x as usize * width + d];
                    }
                }
                out.push(if c.mean { acc / len as f32 } else { acc });
            }
        }
        out
    }

    fn bag_launches(compiler: &OnnxCompiler, inputs: &[Tensor]) -> usize {
        let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
        let lowered = compiler.lower(&dims, BackendKind::Cuda).unwrap();
        lowered
            .steps
            .iter()
            .filter(|s| matches!(s, PlanStep::Launch(l) if l.kernel.starts_with("onnx_embedding_bag_")))
            .count()
    }

    /// Every case as one fused launch, run on the CPU from the generated C++: against the host
    /// backend with indices in range, and against the reference (the host refuses them) and the
    /// unfused GPU plan with indices out of range.
    #[test]
    fn fused_bags_match_the_host_and_the_unfused_kernels_when_run_on_the_cpu() {
        let cases = cases();
        let model = model(&cases);
        let fused = OnnxCompiler::new(model.clone(), OnnxOptions::default());
        let unfused = OnnxCompiler::new(model, OnnxOptions::default().with_fusion(false));
        for out_of_range in [false, true] {
            let inputs: Vec<Tensor> = cases.iter().enumerate().map(|(k, c)| indices(c, k, out_of_range)).collect();
            assert_eq!(bag_launches(&fused, &inputs), cases.len(), "every case is one bag launch");
            assert_eq!(bag_launches(&unfused, &inputs), 0, "fusion off");
            let dir = tempfile::tempdir().unwrap();
            let Some(got) = run_emulated(&fused, &inputs, dir.path()) else { return };
            if out_of_range {
                assert!(run_on_host(&fused, &inputs).is_err(), "the host refuses indices out of range");
                let dir = tempfile::tempdir().unwrap();
                let plain = run_emulated(&unfused, &inputs, dir.path()).expect("g++ ran once already");
                for (k, (g, p)) in got.iter().zip(&plain).enumerate() {
                    let p = Tensor::from_le_bytes(DType::F32, vec![p.len() / 4], p).unwrap();
                    assert_close(g, &p, &format!("case {k} against the unfused kernels"));
                }
            } else {
                let want = run_on_host(&fused, &inputs).unwrap();
                for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_close(g, w, &format!("case {k} against the host"));
                }
            }
            for (k, (c, g)) in cases.iter().zip(&got).enumerate() {
                let want = reference(c, k, &inputs[k]);
                let want = Tensor::new(vec![want.len()], TensorData::F32(want)).unwrap();
                assert_close(g, &want, &format!("case {k} against the reference (out of range: {out_of_range})"));
            }
        }
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
        let g = crate::graph::passes::specialise(model.graph(), &[vec![3, 4]], "bag").unwrap();
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

    /// The DLRM model's 26 bags are one step each, labelled with both nodes, at batch 1 and 3.
    #[test]
    fn each_bag_of_the_dlrm_model_is_one_step_naming_both_nodes() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join("dlrm");
        let model = OnnxModel::load(dir.join("model.onnx")).unwrap();
        for fusion in [true, false] {
            let compiler = OnnxCompiler::new(model.clone(), OnnxOptions::default().with_fusion(fusion));
            for batch in [1u64, 3] {
                let dims: Vec<Vec<u64>> =
                    model.inputs().iter().enumerate().map(|(i, _)| vec![batch, if i == 0 { 13 } else { 4 }]).collect();
                let lowered = compiler.lower(&dims, BackendKind::Cuda).unwrap();
                let labels = &lowered.labels;
                let bag_steps: Vec<usize> = (0..lowered.steps.len())
                    .filter(|&s| labels.groups[labels.step_group[s]].ops == ["Gather", "ReduceSum"])
                    .collect();
                assert_eq!(bag_steps.len(), if fusion { 26 } else { 0 }, "fusion {fusion}, batch {batch}");
                for s in bag_steps {
                    let PlanStep::Launch(l) = &lowered.steps[s] else { panic!("step {s} is a matmul") };
                    assert!(l.kernel.starts_with("onnx_embedding_bag_"), "{}", l.kernel);
                }
            }
        }
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
