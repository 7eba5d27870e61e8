//! Control flow inlined: If, Loop and Scan nodes replaced by the nodes they run, so nothing after
//! this pass knows them.
//!
//! - An If whose `cond` is a constant becomes its chosen branch's nodes.
//! - A Loop whose trip count `M` and initial `cond` are constants (an absent `M` is no bound, an
//!   absent `cond` is true) is unrolled iteration by iteration: the body copied with the iteration
//!   number and carried values bound, folded, and its `cond` output read, which must fold to a
//!   constant for unrolling to go on. Scan outputs are stacked (Unsqueeze on axis 0, Concat).
//! - A Scan is unrolled over its scan axis, whose extent a compile knows: a Gather per step picks
//!   each scan input's element (honouring axes and directions), states are chained, and scan
//!   outputs are stacked on their axes in their directions. Opset 8's batch is unrolled too.
//!
//! Copies get fresh value names (`node/iterN/name`); captures read the values the node's implicit
//! inputs name; a subgraph's outputs reach the node's outputs through Identity nodes, which the
//! clean-up removes. Unrolling is bounded ([`MAX_UNROLLED_NODES`], [`MAX_UNROLLED_FOLD_ELEMENTS`]):
//! a Loop whose condition never becomes false or whose trip count is absurd is an error naming
//! the node and the value, never a hang.
//!
//! At import ([`inline`] with `strict` false) only what is already constant is inlined and a node
//! that cannot be is left as it is; per compile ([`specialise`]) every control node must go, and a
//! controlling value computed from tensor data is an error saying it needs a run-time segment.

mod copy;
mod scan;

use self::copy::{captured, constant, constant_i64, ready};
use crate::error::OnnxError;
use crate::graph::ir::{Graph, Node, ValueId};
use crate::graph::passes::infer::{Mode, infer_and_fold};
use crate::graph::passes::{SPECIALISE_FOLD_LIMIT, simplify, value_inputs};
use crate::graph::subgraph::SubgraphBody;
use crate::ops::control::select::{IF_SELECT, IfSelect};
use crate::ops::control::{Body, implicit_inputs, is_control as is_control_op, truth};
use crate::ops::{Attribute, MODERN_OPSET, OpError};
use crate::tensor::{Tensor, TensorData};
use std::collections::{BTreeSet, HashSet};

/// Most node copies unrolling makes in one graph (iterations × body nodes, nested loops
/// multiplied): past it the Loop or Scan is refused rather than grown without end.
pub(crate) const MAX_UNROLLED_NODES: usize = 1 << 18;

/// Most elements the constants folded while unrolling may hold together.
pub(crate) const MAX_UNROLLED_FOLD_ELEMENTS: usize = 1 << 24;

/// The input slots of `node` whose values decide its structure: If's `cond` (0), Loop's `M` and
/// `cond` (0 and 1); none for Scan (its sequence extent is a shape) or any other op.
pub(crate) fn control_inputs(node: &Node) -> &'static [usize] {
    match node.op_type.as_str() {
        "If" | IF_SELECT => &[0],
        "Loop" => &[0, 1],
        _ => &[],
    }
}

/// The values of `graph` whose values decide which nodes run: its control nodes' control inputs
/// ([`control_inputs`]), and the captured values that a Loop body's condition or a nested control
/// node's control inputs are computed from (recursively).
pub(crate) fn control_values(graph: &Graph) -> Vec<ValueId> {
    control_values_except(graph, &BTreeSet::new())
}

/// [`control_values`] of every control node but the nodes `skip` lists (Loops run at run time,
/// whose conditions the run reads itself).
pub(crate) fn control_values_except(graph: &Graph, skip: &BTreeSet<usize>) -> Vec<ValueId> {
    let mut out = Vec::new();
    let nodes = graph.nodes.iter().enumerate().filter(|(n, node)| is_control(node) && !skip.contains(n));
    for (_, node) in nodes {
        out.extend(control_inputs(node).iter().filter_map(|&slot| node.inputs.get(slot).copied().flatten()));
        for (_, a) in &node.attrs.0 {
            let Attribute::Graph(g) = a else { continue };
            let Some(body) = g.body().as_any().downcast_ref::<SubgraphBody>() else { continue };
            let mut inner = control_values(&body.graph);
            // A Loop body's condition decides whether the next iteration runs.
            if node.op_type == "Loop" {
                inner.extend(body.graph.outputs.first().map(|o| o.value));
            }
            let mut reached = BTreeSet::new();
            for id in inner {
                value_inputs::trace(&body.graph, id, &mut reached, |_, _| true);
            }
            let captured = copy::captured(graph.opset, node, body).unwrap_or_default();
            out.extend(
                reached.into_iter().filter_map(|i| i.checked_sub(body.formal)).filter_map(|k| captured.get(k).copied()),
            );
        }
    }
    out
}

/// A Loop node's body and the values of `graph` its captures read (in the body's input order, after
/// its formal inputs); `None` for any other node or a body that is not an imported subgraph.
pub(crate) fn loop_body<'g>(
    graph: &Graph,
    node: &'g Node,
) -> Option<Result<(&'g SubgraphBody, Vec<ValueId>), OnnxError>> {
    if node.op_type != "Loop" {
        return None;
    }
    let body = node.attrs.0.iter().find_map(|(name, a)| match a {
        Attribute::Graph(g) if name == "body" => g.body().as_any().downcast_ref::<SubgraphBody>(),
        _ => None,
    })?;
    Some(captured(graph.opset, node, body).map(|c| (body, c)))
}

/// The values control node `node` of `graph` captures that fix extents inside its subgraphs: the
/// captured values that a body's own shape-fixing values ([`value_inputs::shape_fixing_values`],
/// recursively) are computed from. A captured value the bodies only compute with is data.
pub(crate) fn captured_shape_values(graph: &Graph, node: &Node) -> Vec<ValueId> {
    let mut out = Vec::new();
    for (_, a) in &node.attrs.0 {
        let Attribute::Graph(g) = a else { continue };
        let Some(body) = g.body().as_any().downcast_ref::<SubgraphBody>() else { continue };
        let mut reached = BTreeSet::new();
        for id in value_inputs::shape_fixing_values(&body.graph) {
            value_inputs::trace(&body.graph, id, &mut reached, |_, _| true);
        }
        let captured = captured(graph.opset, node, body).unwrap_or_default();
        out.extend(
            reached.into_iter().filter_map(|i| i.checked_sub(body.formal)).filter_map(|k| captured.get(k).copied()),
        );
    }
    out
}

/// Replaces each If of `graph` whose condition a node computes and one of whose branches holds
/// (at any depth) an op with a bounded form by both branches copied into the graph and an
/// `If.select` of their outputs (`ops::control::select`), so the segments pass cuts that op like any
/// other; both branches then run, the compile that knows the condition keeping one's outputs.
/// Whether any was.
pub(crate) fn hoist_bounded_branches(graph: &mut Graph) -> Result<bool, OnnxError> {
    let hoisted: Vec<usize> = (0..graph.nodes.len())
        .filter(|&i| {
            let n = &graph.nodes[i];
            let cond = n.inputs.first().copied().flatten();
            // A condition the model computes; one that is a model input is a value input, and a
            // compile inlines its If per value as before.
            let computed = cond.is_some_and(|c| graph.producer(c).is_some());
            n.op_type == "If" && computed && constant(graph, cond).is_none() && holds_bounded(n)
        })
        .collect();
    if hoisted.is_empty() {
        return Ok(false);
    }
    let mut cx = Inliner::new(graph, 0, false);
    for &i in hoisted.iter().rev() {
        let node = graph.nodes[i].clone();
        let nodes = cx.hoist_if(graph, &node)?;
        graph.nodes.splice(i..=i, nodes);
    }
    infer_and_fold(graph, Mode::Symbolic, SPECIALISE_FOLD_LIMIT)?;
    Ok(true)
}

/// Whether a subgraph of `node` holds, at any depth, a node whose op has a bounded form.
fn holds_bounded(node: &Node) -> bool {
    node.attrs.0.iter().any(|(_, a)| {
        let Attribute::Graph(g) = a else { return false };
        g.body()
            .as_any()
            .downcast_ref::<SubgraphBody>()
            .is_some_and(|b| b.graph.nodes.iter().any(|n| n.op.bounded().is_some() || holds_bounded(n)))
    })
}

/// Whether `node` is an If, a Loop or a Scan.
pub(crate) fn is_control(node: &Node) -> bool {
    is_control_op(&node.op_type)
}

/// Per compile, after the inputs and value inputs are bound: infers and folds, inlines every
/// control node, and removes the Identity nodes the inlining left. A control node whose
/// controlling value is not a constant is an error.
pub(crate) fn specialise(graph: &mut Graph) -> Result<(), OnnxError> {
    if !graph.nodes.iter().any(is_control) {
        return Ok(());
    }
    infer_and_fold(graph, Mode::Symbolic, SPECIALISE_FOLD_LIMIT)?;
    inline(graph, SPECIALISE_FOLD_LIMIT, true)?;
    simplify::remove_identities(graph);
    Ok(())
}

/// Inlines the control nodes of `graph` (inferred) whose controlling values are constants, folding
/// tensors of up to `fold_limit` elements on the way. With `strict`, a control node that cannot
/// be inlined is an error; without, it stays. Returns whether anything was inlined.
pub(crate) fn inline(graph: &mut Graph, fold_limit: usize, strict: bool) -> Result<bool, OnnxError> {
    if !graph.nodes.iter().any(is_control) {
        return Ok(false);
    }
    let mut cx = Inliner::new(graph, fold_limit, strict);
    let nodes = std::mem::take(&mut graph.nodes);
    graph.nodes = cx.settle(graph, nodes)?;
    let left = graph.nodes.iter().filter(|n| is_control(n)).map(|n| needs_segment(graph, n));
    if strict && let Some(e) = OnnxError::refused(left.collect()) {
        return Err(e);
    }
    Ok(cx.inlined)
}

/// The error of a control node left after inlining at a compile.
fn needs_segment(graph: &Graph, node: &Node) -> OnnxError {
    // The first control input that is not a constant.
    let open = control_inputs(node)
        .iter()
        .filter_map(|&slot| Some((slot, node.inputs.get(slot).copied().flatten()?)))
        .find(|(_, id)| graph.value(*id).constant.is_none());
    let Some((slot, id)) = open else {
        let reason = "its sequence extent is computed from tensor data at run time, so the Scan cannot be unrolled when the program is compiled; it needs a run-time segment";
        return node_error(graph.opset, node, reason.into());
    };
    let role = if node.op_type == "Loop" && slot == 0 { "trip count" } else { "condition" };
    let name = &graph.value(id).name;
    // From value inputs whose values this compile was not given (a session binds them per request)?
    let mut reached = BTreeSet::new();
    value_inputs::trace(graph, id, &mut reached, |_, _| true);
    let keyed = value_inputs::value_inputs(graph);
    let unbound: Vec<&str> =
        reached.iter().filter(|i| keyed.contains(i)).map(|&i| graph.value(graph.inputs[i]).name.as_str()).collect();
    let reason = if unbound.is_empty() {
        format!(
            "its {role} `{name}` is computed from tensor data at run time, so the control flow cannot be inlined when the program is compiled; it needs a run-time segment"
        )
    } else {
        format!(
            "its {role} `{name}` is computed from the values of the value inputs {unbound:?}, which this compile was not given (a session binds them per request); without them the control flow needs a run-time segment"
        )
    };
    node_error(graph.opset, node, reason)
}

/// An error naming `node`.
fn node_error(opset: u32, node: &Node, reason: String) -> OnnxError {
    OnnxError::Node {
        node: node.name.clone(),
        op: node.op_type.clone(),
        opset,
        source: Box::new(OpError::infer(reason)),
    }
}

/// The imported subgraph in `node`'s attribute `name`.
fn body_of<'n>(opset: u32, node: &'n Node, name: &str) -> Result<&'n SubgraphBody, OnnxError> {
    match node.attrs.get(name) {
        Some(Attribute::Graph(g)) => g
            .body()
            .as_any()
            .downcast_ref::<SubgraphBody>()
            .ok_or_else(|| node_error(opset, node, format!("attribute `{name}` is not an imported subgraph"))),
        _ => Err(node_error(opset, node, format!("attribute `{name}` is missing"))),
    }
}

/// The state of one inlining: limits, what unrolling has spent, the value names taken.
struct Inliner {
    fold_limit: usize,
    strict: bool,
    /// Whether a node was inlined.
    inlined: bool,
    unrolled: usize,
    folded: usize,
    names: HashSet<String>,
    /// The opset the nodes the pass adds (Gather, Unsqueeze, Concat, Identity) are built at.
    opset: u32,
}

impl Inliner {
    /// An inliner of `graph`'s control nodes, its value names taken.
    fn new(graph: &Graph, fold_limit: usize, strict: bool) -> Inliner {
        Inliner {
            fold_limit,
            strict,
            inlined: false,
            unrolled: 0,
            folded: 0,
            names: graph.values.iter().map(|v| v.name.clone()).collect(),
            opset: graph.opset.max(MODERN_OPSET),
        }
    }

    /// Infers and folds `nodes` (their inputs are defined in `graph`) and inlines each control
    /// node among them whose controlling values are constant, then folds what follows it again.
    fn settle(&mut self, graph: &mut Graph, nodes: Vec<Node>) -> Result<Vec<Node>, OnnxError> {
        let mut done = Vec::with_capacity(nodes.len());
        let mut rest = nodes;
        loop {
            rest = self.fold(graph, rest)?;
            let Some(at) = rest.iter().position(|n| is_control(n) && ready(graph, n)) else {
                done.extend(rest);
                return Ok(done);
            };
            let mut tail = rest.split_off(at);
            let node = tail.remove(0);
            done.append(&mut rest);
            let spent = (self.unrolled, self.folded, graph.values.len());
            match self.expand(graph, &node) {
                Ok(expanded) => {
                    self.inlined = true;
                    rest = expanded;
                    rest.append(&mut tail);
                }
                // At import a node that does not unroll (a body condition computed from data,
                // past the bound) is left to the compile, and what the attempt made is dropped.
                Err(_) if !self.strict => {
                    (self.unrolled, self.folded) = (spent.0, spent.1);
                    for v in graph.values.drain(spent.2..) {
                        self.names.remove(&v.name);
                    }
                    done.push(node);
                    rest = tail;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Infers and folds `nodes` alone (the rest of the graph is already inferred).
    fn fold(&mut self, graph: &mut Graph, nodes: Vec<Node>) -> Result<Vec<Node>, OnnxError> {
        let outer = std::mem::replace(&mut graph.nodes, nodes);
        let result = infer_and_fold(graph, Mode::Symbolic, self.fold_limit);
        let nodes = std::mem::replace(&mut graph.nodes, outer);
        result.map(|()| nodes)
    }

    /// The nodes replacing the control node `node`.
    fn expand(&mut self, graph: &mut Graph, node: &Node) -> Result<Vec<Node>, OnnxError> {
        match node.op_type.as_str() {
            "If" => self.expand_if(graph, node),
            IF_SELECT => self.expand_select(graph, node),
            "Loop" => self.unroll_loop(graph, node),
            _ => self.unroll_scan(graph, node),
        }
    }

    fn expand_if(&mut self, graph: &mut Graph, node: &Node) -> Result<Vec<Node>, OnnxError> {
        let cond = constant(graph, node.inputs[0]).ok_or_else(|| needs_segment(graph, node))?;
        let taken = truth(&cond).map_err(|e| node_error(graph.opset, node, e.to_string()))?;
        let (attr, tag) = if taken { ("then_branch", "then") } else { ("else_branch", "else") };
        let branch = body_of(graph.opset, node, attr)?;
        let captured = captured(graph.opset, node, branch)?;
        let (mut nodes, outs) = self.instantiate(graph, node, branch, &[], &captured, tag)?;
        if outs.len() != node.outputs.len() {
            let reason = format!("{attr} makes {} outputs, the node has {}", outs.len(), node.outputs.len());
            return Err(node_error(graph.opset, node, reason));
        }
        for (&from, &to) in outs.iter().zip(&node.outputs) {
            nodes.push(self.identity(graph, node, from, to)?);
        }
        Ok(nodes)
    }

    /// An `If.select` on a known condition: its chosen branch's outputs, as Identity nodes.
    fn expand_select(&mut self, graph: &mut Graph, node: &Node) -> Result<Vec<Node>, OnnxError> {
        let cond = constant(graph, node.inputs[0]).ok_or_else(|| needs_segment(graph, node))?;
        let taken = truth(&cond).map_err(|e| node_error(graph.opset, node, e.to_string()))?;
        let select = IfSelect { outputs: node.outputs.len() };
        let chosen: Vec<ValueId> = node.inputs[select.chosen(taken)].iter().flatten().copied().collect();
        chosen.into_iter().zip(node.outputs.clone()).map(|(from, to)| self.identity(graph, node, from, to)).collect()
    }

    /// `node`, an If whose branches hold an op with a bounded form, as both branches copied into
    /// the graph and an `If.select` of their outputs (see [`hoist_bounded_branches`]).
    fn hoist_if(&mut self, graph: &mut Graph, node: &Node) -> Result<Vec<Node>, OnnxError> {
        let mut nodes = Vec::new();
        let mut inputs = vec![node.inputs[0]];
        for (attr, tag) in [("then_branch", "then"), ("else_branch", "else")] {
            let branch = body_of(graph.opset, node, attr)?;
            let captured = captured(graph.opset, node, branch)?;
            let (copied, outs) = self.instantiate(graph, node, branch, &[], &captured, tag)?;
            if outs.len() != node.outputs.len() {
                let reason = format!("{attr} makes {} outputs, the node has {}", outs.len(), node.outputs.len());
                return Err(node_error(graph.opset, node, reason));
            }
            nodes.extend(copied);
            inputs.extend(outs.into_iter().map(Some));
        }
        nodes.push(Node {
            name: format!("{}/select", node.name),
            op_type: IF_SELECT.to_string(),
            attrs: crate::ops::Attributes::default(),
            inputs,
            outputs: node.outputs.clone(),
            op: std::sync::Arc::new(IfSelect { outputs: node.outputs.len() }),
        });
        Ok(nodes)
    }

    fn unroll_loop(&mut self, graph: &mut Graph, node: &Node) -> Result<Vec<Node>, OnnxError> {
        let opset = graph.opset;
        let body = body_of(opset, node, "body")?;
        let captured = captured(opset, node, body)?;
        let explicit = node.inputs.len() - implicit_inputs(&node.attrs).len();
        let trip = match node.inputs[0] {
            None => None,
            Some(id) => Some(constant_i64(graph, node, id)?),
        };
        let mut going = match node.inputs[1] {
            None => true,
            Some(id) => truth(&*constant(graph, Some(id)).ok_or_else(|| needs_segment(graph, node))?)
                .map_err(|e| node_error(opset, node, e.to_string()))?,
        };
        let n = explicit - 2;
        let mut carried: Vec<ValueId> = node.inputs[2..explicit]
            .iter()
            .map(|id| id.ok_or_else(|| node_error(opset, node, "a carried value is absent".into())))
            .collect::<Result<_, _>>()?;
        if body.graph.outputs.len() != 1 + node.outputs.len() || node.outputs.len() < n {
            let reason =
                format!("the body makes {} outputs, the node has {}", body.graph.outputs.len(), node.outputs.len());
            return Err(node_error(opset, node, reason));
        }
        let mut scans: Vec<Vec<ValueId>> = vec![Vec::new(); node.outputs.len() - n];
        let mut out = Vec::new();
        let mut i = 0i64;
        while going && trip.is_none_or(|m| i < m) {
            let bound = match (node.inputs[0], trip) {
                (Some(id), Some(m)) => format!("trip count `{}` = {m}", graph.value(id).name),
                _ => format!(
                    "condition `{}`, which never became false",
                    body.graph.value(body.graph.outputs[0].value).name
                ),
            };
            self.charge(graph, node, body.node_count(), i, &bound)?;
            let values_before = graph.values.len();
            let tag = format!("iter{i}");
            let iter =
                self.constant(graph, node, &format!("{tag}/iteration"), Tensor::scalar(TensorData::I64(vec![i])));
            let cond_in = self.constant(graph, node, &format!("{tag}/cond"), Tensor::scalar(TensorData::Bool(vec![1])));
            let mut formal = vec![iter?, cond_in?];
            formal.extend(&carried);
            let (nodes, outs) = self.instantiate(graph, node, body, &formal, &captured, &tag)?;
            out.extend(self.settle(graph, nodes)?);
            self.charge_folds(graph, node, values_before)?;
            let cond = constant(graph, Some(outs[0])).ok_or_else(|| {
                let name = &body.graph.value(body.graph.outputs[0].value).name;
                node_error(opset, node, format!(
                    "the body's condition `{name}` in iteration {i} is computed from tensor data at run time, so the Loop cannot be unrolled when the program is compiled; it needs a run-time segment"
                ))
            })?;
            going = truth(&cond).map_err(|e| node_error(opset, node, e.to_string()))?;
            carried = outs[1..=n].to_vec();
            for (stack, &v) in scans.iter_mut().zip(&outs[1 + n..]) {
                stack.push(v);
            }
            i += 1;
        }
        for (&from, &to) in carried.iter().zip(&node.outputs) {
            out.push(self.identity(graph, node, from, to)?);
        }
        for (pieces, &to) in scans.iter().zip(&node.outputs[n..]) {
            if pieces.is_empty() {
                out.push(self.empty_scan_output(graph, node, to)?);
            } else {
                out.extend(self.stack(graph, node, pieces, 0, Some(to))?.0);
            }
        }
        Ok(out)
    }

    /// A Loop scan output of no iteration: an empty tensor, when the per-iteration shape is known.
    fn empty_scan_output(&mut self, graph: &mut Graph, node: &Node, to: ValueId) -> Result<Node, OnnxError> {
        let ty = graph.ty(to).cloned();
        let dims = ty.as_ref().and_then(|t| {
            t.dims.get(1..).and_then(|d| {
                d.iter().map(|x| x.as_fixed().and_then(|v| usize::try_from(v).ok())).collect::<Option<Vec<_>>>()
            })
        });
        let (Some(ty), Some(mut dims)) = (ty, dims) else {
            let reason = format!(
                "the Loop runs no iteration and the shape of scan output `{}` is not known",
                graph.value(to).name
            );
            return Err(node_error(graph.opset, node, reason));
        };
        dims.insert(0, 0);
        let empty = Tensor::zeros(ty.dtype, dims).map_err(|e| node_error(graph.opset, node, e.to_string()))?;
        let c = self.constant(graph, node, "empty", Ok(empty))?;
        self.identity(graph, node, c, to)
    }
}
