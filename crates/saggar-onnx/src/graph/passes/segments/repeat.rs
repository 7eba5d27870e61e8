//! Loops run at run time: a `Loop` whose condition is computed from the values it carries (a while
//! loop over data) cannot be unrolled when a program is compiled, since no compile knows how many
//! iterations a request takes. The segments pass gives such a Loop a segment of its own whose model
//! is the body: inputs the iteration number, the condition, the carried values, then the captured
//! values; outputs the next condition, the carried values' next values, then the scan outputs of
//! the iteration. The run (saggar-dispatch's `Repeat`, or [`run_loop`] on the host) runs it once per
//! iteration and reads the condition back after each.
//!
//! A Loop whose condition folds once its trip count, initial values and the values it captures are
//! known (a counted loop, a condition on the iteration number or on small model inputs, which key
//! programs) is not one of these: the compile unrolls it.

use std::collections::BTreeSet;

use saggar_shape::DType;

use super::{BOUNDED, Source, computed_from_data, graph_error, reaches};
use crate::error::OnnxError;
use crate::graph::ir::{Graph, Node, ValueId};
use crate::graph::passes::SPECIALISE_FOLD_LIMIT;
use crate::graph::passes::control_flow;
use crate::graph::passes::infer::{FreshSymbols, Mode, infer_and_fold};
use crate::graph::passes::value_inputs::{self, trace};
use crate::ops::ValueType;
use crate::ops::control::truth;
use crate::tensor::Tensor;

/// The default [`crate::OnnxOptions::max_loop_iterations`]: 2^20 iterations of one loop in one
/// request.
pub const DEFAULT_MAX_LOOP_ITERATIONS: u64 = 1 << 20;

/// How a loop segment repeats ([`super::SegmentGraph::repeat`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Repeat {
    /// The Loop node's name.
    pub(crate) name: String,
    /// Where the trip count `M` comes from (`None`: no bound).
    pub(crate) trip_count: Option<Source>,
    /// Where the first condition comes from (`None`: true).
    pub(crate) cond: Option<Source>,
    /// Carried values (the body's inputs after the condition; the captured values follow).
    pub(crate) carried: usize,
}

/// The Loop nodes of `graph` run at run time: each whose body's condition is computed from data (a
/// captured value, or a carried value whose initial value is data or whose next value is computed
/// from data).
pub(crate) fn runtime_loops(graph: &Graph) -> Result<BTreeSet<usize>, OnnxError> {
    let mut out = BTreeSet::new();
    for (n, node) in graph.nodes.iter().enumerate() {
        let Some(body) = control_flow::loop_body(graph, node) else { continue };
        let (body, captured) = body?;
        let carried = body.formal.saturating_sub(2);
        let g = &body.graph;
        // The body's inputs computed from data: carried values whose initial value is, captures
        // that are; then every carried value whose next value is computed from one, to a fixpoint.
        let mut data: BTreeSet<usize> = (0..carried)
            .filter(|&j| node.inputs.get(2 + j).copied().flatten().is_some_and(|v| computed_from_data(graph, v)))
            .map(|j| 2 + j)
            .collect();
        data.extend(
            captured.iter().enumerate().filter(|(_, v)| computed_from_data(graph, **v)).map(|(c, _)| body.formal + c),
        );
        let reads = |out: usize| {
            let mut found = BTreeSet::new();
            if let Some(o) = g.outputs.get(out) {
                trace(g, o.value, &mut found, |_, _| true);
            }
            found
        };
        loop {
            let grown: Vec<usize> =
                (0..carried).filter(|j| !data.contains(&(2 + j)) && !reads(1 + j).is_disjoint(&data)).collect();
            if grown.is_empty() {
                break;
            }
            data.extend(grown.into_iter().map(|j| 2 + j));
        }
        let cond = g.outputs.first().map(|o| o.value);
        if !reads(0).is_disjoint(&data) || cond.is_some_and(|c| counts_values(g, c)) {
            out.insert(n);
        }
    }
    Ok(out)
}

/// Whether `id` is computed from the outputs of an op whose extents depend on values (NonZero,
/// Unique...), through every producer, shape-only ops included: such a body condition is data.
fn counts_values(graph: &Graph, id: ValueId) -> bool {
    reaches(graph, id, true, |_, producer| producer.is_some_and(|node| node.op.bounded().is_some()))
}

/// The values of `graph` the run-time Loop `node`'s segment reads: its trip count and first
/// condition where given, its carried values' initial values, and the values its body captures but
/// constants (which the body's model holds as its own).
pub(crate) fn segment_reads(graph: &Graph, node: &Node) -> Vec<ValueId> {
    let Some(Ok((body, captured))) = control_flow::loop_body(graph, node) else { return Vec::new() };
    let explicit = node.inputs.iter().take(body.formal).flatten().copied();
    explicit.chain(captured.into_iter().filter(|&c| graph.value(c).constant.is_none())).collect()
}

/// The model of the run-time Loop `node`'s body, the values of `graph` its inputs after the
/// condition read (the carried values' initial values, then the captured values but constants,
/// which the model holds), and how many values it carries.
pub(crate) fn body_model(graph: &Graph, node: &Node) -> Result<(Graph, Vec<ValueId>, usize), OnnxError> {
    let Some(body) = control_flow::loop_body(graph, node) else {
        return Err(graph_error(node, "only a Loop runs as a loop segment"));
    };
    let (body, captured) = body?;
    let carried = body.formal.checked_sub(2).ok_or_else(|| graph_error(node, "its body takes no condition"))?;
    let mut reads = Vec::with_capacity(carried + captured.len());
    for j in 0..carried {
        let initial = node.inputs.get(2 + j).copied().flatten();
        reads.push(initial.ok_or_else(|| graph_error(node, &format!("carried value {j} has no initial value")))?);
    }
    reads.extend(captured.iter().filter(|&&c| graph.value(c).constant.is_none()));
    let mut types = vec![ValueType::new(DType::I64, Vec::new()), ValueType::new(DType::Bool, Vec::new())];
    for (j, &initial) in reads[..carried].iter().enumerate() {
        // The carried value's type over every iteration: the Loop's output's, merged by inference.
        let out = node.outputs.get(j).and_then(|&o| graph.ty(o)).or_else(|| graph.ty(initial));
        types.push(out.cloned().ok_or_else(|| graph_error(node, &format!("carried value {j} has no type")))?);
    }
    for &c in &captured {
        types.push(graph.ty(c).cloned().ok_or_else(|| graph_error(node, "a captured value has no type"))?);
    }
    let mut g = body.graph.clone();
    g.name = format!("{}:{}", graph.name, node.name);
    let mut fresh = FreshSymbols::default();
    for (&id, ty) in body.graph.inputs.iter().zip(types) {
        let ty = fresh.name(&g, ty);
        let v = g.value_mut(id);
        (v.ty, v.constant, v.dims_value) = (Some(ty), None, None);
    }
    // A captured constant (a weight) is the body's own constant, not an input each request copies.
    let formal = body.formal;
    for (c, &value) in captured.iter().enumerate() {
        if let Some(t) = &graph.value(value).constant {
            g.value_mut(body.graph.inputs[formal + c]).constant = Some(t.clone());
        }
    }
    let constant: Vec<bool> = captured.iter().map(|&c| graph.value(c).constant.is_some()).collect();
    let mut k = 0;
    g.inputs.retain(|_| {
        k += 1;
        k <= formal || !constant[k - 1 - formal]
    });

    infer_and_fold(&mut g, Mode::Symbolic, SPECIALISE_FOLD_LIMIT)?;
    if g.nodes.iter().any(|n| n.op.bounded().is_some() || n.op_type.ends_with(BOUNDED)) || has_runtime_loop(&g)? {
        return Err(graph_error(
            node,
            "its condition is computed from the values it carries, so it runs at run time, but its body \
             computes extents from values too (NonZero, Unique, a nested while loop...): a loop run at run \
             time needs a body one program runs",
        ));
    }
    Ok((g, reads, carried))
}

fn has_runtime_loop(graph: &Graph) -> Result<bool, OnnxError> {
    Ok(!runtime_loops(graph)?.is_empty())
}

/// Runs a loop body once on its inputs (iteration number, condition, carried then captured values).
pub(crate) type BodyRun<'a> = dyn FnMut(&[Tensor]) -> Result<Vec<Tensor>, OnnxError> + 'a;

/// Runs the loop segment `body` on the host: `ins` are its inputs after the condition, `limit`
/// and `cond` the trip count and first condition; `run` runs the body once. Returns the carried
/// values' last values, then the scan outputs stacked.
pub(crate) fn run_loop(
    repeat: &Repeat,
    body: &Graph,
    controls: (Option<&Tensor>, Option<&Tensor>),
    ins: &[Tensor],
    max_iterations: u64,
    run: &mut BodyRun<'_>,
) -> Result<Vec<Tensor>, OnnxError> {
    let request = |reason: String| OnnxError::Request { model: body.name.clone(), reason };
    let limit = match controls.0 {
        None => u64::MAX,
        Some(m) => u64::try_from(m.to_i64s().and_then(|v| v.first().copied()).unwrap_or(0)).unwrap_or(0),
    };
    let mut cond = match controls.1 {
        None => true,
        Some(c) => truth(c).map_err(|e| request(e.to_string()))?,
    };
    let n = repeat.carried;
    let mut carried: Vec<Tensor> = ins[..n].to_vec();
    let mut rows: Vec<Vec<Tensor>> = Vec::new();
    let mut i = 0u64;
    while cond && i < limit {
        if i >= max_iterations {
            return Err(request(format!(
                "the loop `{}` ran {max_iterations} iterations without its condition turning false (the limit \
                 for a loop run at run time, OnnxOptions::max_loop_iterations)",
                repeat.name
            )));
        }
        let mut inputs = controls_of(i)?;
        inputs.extend(carried.iter().cloned());
        inputs.extend(ins[n..].iter().cloned());
        let mut outs = run(&inputs)?;
        cond = truth(&outs[0]).map_err(|e| request(e.to_string()))?;
        rows.push(outs.split_off(1 + n));
        carried = outs.split_off(1);
        i += 1;
    }
    let scans = body.outputs.len() - 1 - n;
    let mut out = carried;
    for s in 0..scans {
        let stacked = match rows.first() {
            None => {
                let mut dims = vec![0];
                dims.extend(first_row_dims(body, ins, n, s)?);
                let dtype = body.ty(body.outputs[1 + n + s].value).map_or(DType::F32, |t| t.dtype);
                Tensor::zeros(dtype, dims)
            }
            Some(first) => {
                let row = first[s].dims();
                if let Some(r) = rows.iter().position(|r| r[s].dims() != row) {
                    return Err(request(format!(
                        "the loop `{}`'s scan output {s} has extents {:?} in iteration {r}, {row:?} before: every \
                         iteration's must match",
                        repeat.name,
                        rows[r][s].dims()
                    )));
                }
                let mut dims = vec![rows.len()];
                dims.extend(row);
                let bytes: Vec<u8> = rows.iter().flat_map(|r| r[s].to_le_bytes()).collect();
                Tensor::from_le_bytes(first[s].dtype(), dims, &bytes)
            }
        };
        out.push(stacked.map_err(|e| request(format!("the loop `{}`'s scan output {s}: {e}", repeat.name)))?);
    }
    Ok(out)
}

/// The iteration number `i` and a true condition, as the body's first two inputs.
fn controls_of(i: u64) -> Result<Vec<Tensor>, OnnxError> {
    let number = Tensor::from_le_bytes(DType::I64, Vec::new(), &(i as i64).to_le_bytes());
    let cond = Tensor::from_le_bytes(DType::Bool, Vec::new(), &[1]);
    let internal = |e: crate::error::OpError| OnnxError::Graph { reason: format!("a loop's iteration inputs: {e}") };
    Ok(vec![number.map_err(internal)?, cond.map_err(internal)?])
}

/// The extents scan output `s` would have in a first iteration (a loop that ran none stacks zero
/// rows of them).
fn first_row_dims(body: &Graph, ins: &[Tensor], carried: usize, s: usize) -> Result<Vec<usize>, OnnxError> {
    let mut dims: Vec<Vec<u64>> = vec![Vec::new(), Vec::new()];
    dims.extend(ins.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()));
    let keyed = value_inputs::value_inputs(body);
    let mut inputs: Vec<Tensor> = controls_of(0)?;
    inputs.extend(ins.iter().cloned());
    let bound: Vec<(usize, Vec<u8>)> = keyed.into_iter().map(|i| (i, inputs[i].to_le_bytes())).collect();
    let g = crate::graph::passes::specialise(body, &dims, &bound, &body.name)?;
    let ty = g.ty(g.outputs[1 + carried + s].value).and_then(ValueType::fixed_dims);
    ty.ok_or_else(|| OnnxError::Graph { reason: format!("scan output {s} of `{}` has no fixed extents", body.name) })
}
