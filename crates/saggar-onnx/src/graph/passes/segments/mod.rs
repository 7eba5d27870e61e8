//! Segments: how a model some of whose extents depend on values it computes is cut into models a
//! program each can run.
//!
//! 1. **Bounded forms.** Each node whose op has a bounded form ([`crate::ops::Op::bounded`]:
//!    NonZero, Compress, Unique, NonMaxSuppression) becomes that form, which computes its outputs at
//!    their worst-case extent plus the count, followed by a `Slice` of each output to the count along
//!    its cut axis. The Slice outputs keep the original values, so the rest of the graph is unchanged.
//! 2. **Boundary values.** A small value that fixes extents ([`value_inputs::shape_fixing_values`])
//!    or decides which nodes run (an If condition, a Loop trip count: `control_flow::control_values`)
//!    and is computed from tensor data (a count, a computed Reshape `shape`) is known only once the
//!    program computing it has run: it is a boundary value. Values computed from small model inputs
//!    alone stay value inputs of the model.
//! 3. **Levels.** A node's level is the highest level of its inputs, plus one for an input that is a
//!    boundary value; segment `k` holds the nodes of level `k`, in order. A segment's inputs are the
//!    model inputs and earlier segments' values it reads; its outputs are the values later segments
//!    read and the model outputs it computes. In a later segment, the boundary values it reads are
//!    small inputs that fix extents: its value inputs, so it is compiled per value.
//! 4. **Loops run at run time** (`repeat.rs`). A Loop whose condition is computed from the values it
//!    carries is a segment of its own, whose model is its body, run once per iteration. It comes
//!    after the other nodes of its level; a node reading its outputs is a level later. The constants
//!    it reads (a trip count, an initial value) are outputs of the first segment.

mod repeat;

use std::collections::BTreeSet;
use std::sync::Arc;

use saggar_shape::DType;

use crate::error::OnnxError;
use crate::graph::ir::{Graph, GraphOutput, Node, Value, ValueId};
use crate::graph::passes::control_flow;
use crate::graph::passes::infer::FreshSymbols;
use crate::graph::passes::value_inputs::{self, SHAPE_ONLY, small_or_flag};
use crate::ops::{self, Attributes, ValueType};
use crate::tensor::Tensor;

pub use self::repeat::DEFAULT_MAX_LOOP_ITERATIONS;
pub(crate) use self::repeat::Repeat;

/// Where a segment input or a model output comes from (see saggar-dispatch's `SegmentSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// Model input `i` (binding order).
    Input(usize),
    /// Output `output` of segment `segment`.
    Output { segment: usize, output: usize },
}

/// One segment's graph and where each of its inputs comes from (for a loop segment, each input
/// after the iteration number and the condition).
#[derive(Debug, Clone)]
pub(crate) struct SegmentGraph {
    pub(crate) graph: Graph,
    pub(crate) inputs: Vec<Source>,
    /// `Some` for a loop segment: `graph` is the body, run once per iteration.
    pub(crate) repeat: Option<Repeat>,
}

/// A model cut into segments.
#[derive(Debug, Clone)]
pub(crate) struct Split {
    pub(crate) segments: Vec<SegmentGraph>,
    /// One source per model output.
    pub(crate) outputs: Vec<Source>,
}

/// The suffix of a bounded node's op type in plans and errors.
const BOUNDED: &str = ".bounded";

/// `graph` cut into segments, or `None` when one program runs it (no extent depends on a value it
/// computes).
pub(crate) fn split(graph: &Graph) -> Result<Option<Split>, OnnxError> {
    let mut g = graph.clone();
    control_flow::hoist_bounded_branches(&mut g)?;
    bound_nodes(&mut g)?;
    let loops = repeat::runtime_loops(&g)?;
    let boundary = boundary_values(&g, &loops);
    if boundary.is_empty() && loops.is_empty() {
        return Ok(None);
    }
    let levels = node_levels(&g, &boundary, &loops);
    Ok(Some(cut(&g, &levels, &loops)?))
}

/// Replaces every node with a bounded form by that form and a Slice per cut output.
fn bound_nodes(graph: &mut Graph) -> Result<(), OnnxError> {
    let mut nodes = Vec::with_capacity(graph.nodes.len());
    // Worst-case extents the bounded forms cannot name get symbols of their own: an unnamed one in a
    // segment's declared outputs would be bound to whichever input extent shares the name.
    let mut fresh = FreshSymbols::default();
    for node in std::mem::take(&mut graph.nodes) {
        let Some(bounded) = node.op.bounded() else {
            nodes.push(node);
            continue;
        };
        let op_type = format!("{}{BOUNDED}", node.op_type);
        // The bounded node's inputs are the node's, with its outputs' types from its own inference.
        let input_types: Vec<Option<&ValueType>> = node.inputs.iter().map(|i| i.and_then(|id| graph.ty(id))).collect();
        let types = infer_bounded(graph, &node, &*bounded.op, &input_types)?;
        let types: Vec<ValueType> = types.into_iter().map(|ty| fresh.name(graph, ty)).collect();
        let mut padded = Vec::with_capacity(types.len());
        for (k, ty) in types.into_iter().enumerate() {
            // An output no value fixes (Unique's inverse_indices) is the bounded node's own.
            if let (Some(None), Some(&out)) = (bounded.cuts.get(k), node.outputs.get(k)) {
                graph.value_mut(out).ty = Some(ty);
                padded.push(out);
                continue;
            }
            let name = format!("{}:bounded:{k}", node.name);
            padded.push(graph.add_value(Value { name, ty: Some(ty), constant: None, dims_value: None }));
        }
        let count =
            *padded.get(bounded.cuts.len()).ok_or_else(|| graph_error(&node, "its bounded form has no count"))?;
        nodes.push(Node {
            name: format!("{}{BOUNDED}", node.name),
            op_type,
            attrs: node.attrs.clone(),
            inputs: node.inputs.clone(),
            outputs: padded.clone(),
            op: bounded.op.clone(),
        });
        for (k, &out) in node.outputs.iter().enumerate() {
            let rank = graph.ty(padded[k]).map_or(0, ValueType::rank);
            match bounded.cut_axis(k, rank) {
                Some(axis) => nodes.push(slice_node(graph, &node, k, padded[k], out, axis, count)?),
                None if padded[k] == out => {}
                None => return Err(graph_error(&node, &format!("output {k}'s cut axis is outside its rank {rank}"))),
            }
        }
    }
    graph.nodes = nodes;
    Ok(())
}

/// The bounded op's output types from its inputs' types and constants.
fn infer_bounded(
    graph: &Graph,
    node: &Node,
    op: &dyn ops::Op,
    types: &[Option<&ValueType>],
) -> Result<Vec<ValueType>, OnnxError> {
    let inputs: Vec<Option<ops::InferInput<'_>>> = node
        .inputs
        .iter()
        .zip(types)
        .map(|(id, ty)| {
            let (id, ty) = ((*id)?, (*ty)?);
            let value = graph.value(id);
            Some(ops::InferInput { ty, value: value.constant.as_deref(), dims_value: value.dims_value.as_deref() })
        })
        .collect();
    op.infer(&ops::InferInputs::new(&inputs)).map_err(|e| OnnxError::Graph {
        reason: format!("node `{}` ({}): its bounded form: {e}", node.name, node.op_type),
    })
}

/// `out = Slice(padded, [0], count, [axis])`.
fn slice_node(
    graph: &mut Graph,
    node: &Node,
    k: usize,
    padded: ValueId,
    out: ValueId,
    axis: usize,
    count: ValueId,
) -> Result<Node, OnnxError> {
    let opset = graph.opset.max(ops::MODERN_OPSET).max(10);
    let zero = constant_i64(graph, format!("{}:cut:{k}:start", node.name), 0);
    let axes = constant_i64(graph, format!("{}:cut:{k}:axis", node.name), axis as i64);
    let inputs = vec![Some(padded), Some(zero), Some(count), Some(axes)];
    let attrs = Attributes::default();
    let op = ops::build_op("Slice", opset, &attrs, inputs.len(), 1)
        .map_err(|e| graph_error(node, &format!("cutting output {k}: {e}")))?;
    Ok(Node { name: format!("{}:cut:{k}", node.name), op_type: "Slice".into(), attrs, inputs, outputs: vec![out], op })
}

/// A new constant i64 vector `[v]`.
fn constant_i64(graph: &mut Graph, name: String, v: i64) -> ValueId {
    let tensor = Tensor::from_i64s(vec![v]);
    let ty = Some(ValueType::fixed(DType::I64, &[1]));
    graph.add_value(Value { name, ty, constant: Some(Arc::new(tensor)), dims_value: None })
}

fn graph_error(node: &Node, reason: &str) -> OnnxError {
    OnnxError::Graph { reason: format!("node `{}` ({}): {reason}", node.name, node.op_type) }
}

/// The small values fixing extents that only a run can know: computed from a bounded node or
/// from a model input too large to be a value input. The Loops run at run time (`loops`) read their
/// own controls.
fn boundary_values(graph: &Graph, loops: &BTreeSet<usize>) -> BTreeSet<ValueId> {
    let control = control_flow::control_values_except(graph, loops).into_iter().filter(|&v| small_or_flag(graph, v));
    value_inputs::shape_fixing_values(graph)
        .into_iter()
        .chain(control)
        .filter(|&v| graph.value(v).constant.is_none() && computed_from_data(graph, v))
        .collect()
}

/// Whether `id` depends on a bounded node's outputs or on a model input that is not small, through
/// every producer but the shape-only ops.
fn computed_from_data(graph: &Graph, id: ValueId) -> bool {
    reaches(graph, id, false, |v, producer| match producer {
        Some(node) => node.op_type.ends_with(BOUNDED),
        None => graph.inputs.contains(&v) && !small_or_flag(graph, v),
    })
}

/// Whether a value `id` is computed from, itself included, is one `hit` takes (given its producer,
/// if any). The walk goes through every producer's inputs, past the shape-only ops only when
/// `through_shapes`, and stops at constants.
fn reaches(graph: &Graph, id: ValueId, through_shapes: bool, hit: impl Fn(ValueId, Option<&Node>) -> bool) -> bool {
    let mut stack = vec![id];
    let mut seen = BTreeSet::new();
    while let Some(v) = stack.pop() {
        if !seen.insert(v) || graph.value(v).constant.is_some() {
            continue;
        }
        let producer = graph.producer(v).map(|n| &graph.nodes[n]);
        if hit(v, producer) {
            return true;
        }
        if let Some(node) = producer.filter(|n| through_shapes || !SHAPE_ONLY.contains(&n.op_type.as_str())) {
            stack.extend(node.inputs.iter().flatten());
        }
    }
    false
}

/// Each node's level: the highest of its inputs', plus one for a boundary value or an output of a
/// Loop run at run time (`loops`).
fn node_levels(graph: &Graph, boundary: &BTreeSet<ValueId>, loops: &BTreeSet<usize>) -> Vec<usize> {
    let mut value_level = vec![0usize; graph.values.len()];
    let mut after_loop = vec![false; graph.values.len()];
    let mut levels = Vec::with_capacity(graph.nodes.len());
    for (n, node) in graph.nodes.iter().enumerate() {
        let level = node
            .inputs
            .iter()
            .flatten()
            .map(|v| value_level[v.0] + usize::from(boundary.contains(v) || after_loop[v.0]))
            .max()
            .unwrap_or(0);
        for out in &node.outputs {
            value_level[out.0] = level;
            after_loop[out.0] = loops.contains(&n);
        }
        levels.push(level);
    }
    levels
}

/// What a segment holds: the nodes of a level other than its run-time Loops, or one such Loop.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Level(usize),
    Loop(usize),
}

/// The segments of `graph` in run order: per level, its other nodes, then each of its run-time
/// Loops. A level's other nodes are left out when there are none, except level 0's when the
/// constants the Loops read must come from somewhere.
fn parts(graph: &Graph, levels: &[usize], loops: &BTreeSet<usize>) -> Vec<Part> {
    let count = levels.iter().copied().max().map_or(1, |m| m + 1);
    let loop_reads = loops.iter().flat_map(|&n| repeat::segment_reads(graph, &graph.nodes[n]));
    let constants = loop_reads.chain(graph.outputs.iter().map(|o| o.value)).any(|v| graph.value(v).constant.is_some());
    let mut parts = Vec::new();
    for level in 0..count {
        let plain = (0..graph.nodes.len()).any(|n| levels[n] == level && !loops.contains(&n));
        if plain || (level == 0 && (constants || loops.is_empty())) {
            parts.push(Part::Level(level));
        }
        parts.extend(loops.iter().filter(|&&n| levels[n] == level).map(|&n| Part::Loop(n)));
    }
    parts
}

/// The segment graphs of `graph`'s nodes by `levels`, the run-time Loops (`loops`) each in its own.
fn cut(graph: &Graph, levels: &[usize], loops: &BTreeSet<usize>) -> Result<Split, OnnxError> {
    let parts = parts(graph, levels, loops);
    let segment_of = |n: usize| {
        let part = if loops.contains(&n) { Part::Loop(n) } else { Part::Level(levels[n]) };
        parts.iter().position(|p| *p == part).expect("every node has a part")
    };
    let mut made_in: Vec<Option<usize>> = vec![None; graph.values.len()];
    for (n, node) in graph.nodes.iter().enumerate() {
        for out in &node.outputs {
            made_in[out.0] = Some(segment_of(n));
        }
    }
    // A model output or a Loop input reading a constant is the first segment's.
    let loop_reads = loops.iter().flat_map(|&n| repeat::segment_reads(graph, &graph.nodes[n]));
    for v in graph.outputs.iter().map(|o| o.value).chain(loop_reads) {
        if graph.value(v).constant.is_some() {
            made_in[v.0] = Some(0);
        }
    }
    // Values each segment reads that another segment makes.
    let mut read_later: Vec<BTreeSet<ValueId>> = vec![BTreeSet::new(); parts.len()];
    for (n, node) in graph.nodes.iter().enumerate() {
        for v in node.inputs.iter().flatten() {
            if let Some(maker) = made_in[v.0].filter(|&m| m != segment_of(n)) {
                read_later[maker].insert(*v);
            }
        }
    }
    let mut segments: Vec<SegmentGraph> = Vec::with_capacity(parts.len());
    // Per segment: its output values in order.
    let mut outputs_of: Vec<Vec<ValueId>> = Vec::with_capacity(parts.len());
    for (k, part) in parts.iter().enumerate() {
        let source = |v: ValueId, outputs_of: &[Vec<ValueId>]| source_of(graph, &made_in, outputs_of, v);
        match *part {
            Part::Level(level) => {
                let (segment, outs) =
                    level_segment(graph, levels, loops, level, k, &made_in, &read_later[k], |v| source(v, &outputs_of));
                segments.push(segment);
                outputs_of.push(outs);
            }
            Part::Loop(n) => {
                let node = &graph.nodes[n];
                let (body, reads, carried) = repeat::body_model(graph, node)?;
                let control = |slot: usize| node.inputs.get(slot).copied().flatten().map(|v| source(v, &outputs_of));
                let repeat = Repeat { name: node.name.clone(), trip_count: control(0), cond: control(1), carried };
                let inputs = reads.iter().map(|&v| source(v, &outputs_of)).collect();
                segments.push(SegmentGraph { graph: body, inputs, repeat: Some(repeat) });
                outputs_of.push(node.outputs.clone());
            }
        }
    }
    let outputs = graph.outputs.iter().map(|o| source_of(graph, &made_in, &outputs_of, o.value)).collect();
    Ok(Split { segments, outputs })
}

/// Where value `v` comes from, by the segment that makes it (`made_in`) and their outputs.
fn source_of(graph: &Graph, made_in: &[Option<usize>], outputs_of: &[Vec<ValueId>], v: ValueId) -> Source {
    match made_in[v.0] {
        Some(m) => Source::Output {
            segment: m,
            output: outputs_of[m].iter().position(|&o| o == v).expect("its segment exports it"),
        },
        None => Source::Input(graph.inputs.iter().position(|&i| i == v).expect("a model input")),
    }
}

/// Segment `k`, the nodes of `level` but the run-time Loops: its graph, inputs and outputs (the
/// values `later` segments read, then the model outputs it computes).
#[allow(clippy::too_many_arguments)]
fn level_segment(
    graph: &Graph,
    levels: &[usize],
    loops: &BTreeSet<usize>,
    level: usize,
    k: usize,
    made_in: &[Option<usize>],
    later: &BTreeSet<ValueId>,
    source: impl Fn(ValueId) -> Source,
) -> (SegmentGraph, Vec<ValueId>) {
    let nodes: Vec<Node> = (graph.nodes.iter().enumerate())
        .filter(|(n, _)| levels[*n] == level && !loops.contains(n))
        .map(|(_, node)| node.clone())
        .collect();
    let mut inputs = Vec::new();
    let mut sources = Vec::new();
    for v in nodes.iter().flat_map(|n| n.inputs.iter().flatten()) {
        if inputs.contains(v) || graph.value(*v).constant.is_some() || made_in[v.0] == Some(k) {
            continue;
        }
        inputs.push(*v);
        sources.push(source(*v));
    }
    let mut outs: Vec<ValueId> = later.iter().copied().collect();
    for o in &graph.outputs {
        if made_in[o.value.0] == Some(k) && !outs.contains(&o.value) {
            outs.push(o.value);
        }
    }
    let graph_outputs =
        outs.iter().map(|&v| GraphOutput { name: graph.value(v).name.clone(), value: v, declared: None }).collect();
    let segment = Graph {
        name: format!("{}:segment{k}", graph.name),
        opset: graph.opset,
        values: graph.values.clone(),
        nodes,
        inputs,
        outputs: graph_outputs,
    };
    (SegmentGraph { graph: segment, inputs: sources, repeat: None }, outs)
}

/// Runs `split` on `inputs` (model binding order): `run` runs segment `k`'s graph on its inputs and
/// returns its outputs (a loop segment's body once per iteration, at most `max_iterations`); each
/// segment's inputs are gathered from the model's and earlier segments'.
pub(crate) fn run_split(
    split: Split,
    inputs: &[Tensor],
    max_iterations: u64,
    mut run: impl FnMut(usize, &SegmentGraph, &[Tensor]) -> Result<Vec<Tensor>, OnnxError>,
) -> Result<Vec<Tensor>, OnnxError> {
    let mut produced: Vec<Vec<Tensor>> = Vec::with_capacity(split.segments.len());
    let pick = |s: Source, produced: &[Vec<Tensor>]| match s {
        Source::Input(i) => inputs.get(i).cloned(),
        Source::Output { segment, output } => produced.get(segment).and_then(|o| o.get(output)).cloned(),
    };
    let missing = || OnnxError::Graph { reason: "a segment input names nothing computed".into() };
    for (k, segment) in split.segments.iter().enumerate() {
        let ins =
            segment.inputs.iter().map(|&s| pick(s, &produced)).collect::<Option<Vec<Tensor>>>().ok_or_else(missing)?;
        let outs = match &segment.repeat {
            None => run(k, segment, &ins)?,
            Some(r) => {
                let control = |s: Option<Source>| s.map(|s| pick(s, &produced).ok_or_else(missing)).transpose();
                let (m, cond) = (control(r.trip_count)?, control(r.cond)?);
                let mut body = |ins: &[Tensor]| run(k, segment, ins);
                repeat::run_loop(r, &segment.graph, (m.as_ref(), cond.as_ref()), &ins, max_iterations, &mut body)?
            }
        };
        produced.push(outs);
    }
    split
        .outputs
        .iter()
        .map(|&s| {
            pick(s, &produced)
                .ok_or_else(|| OnnxError::Graph { reason: "a model output names nothing computed".into() })
        })
        .collect()
}
