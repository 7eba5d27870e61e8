//! Control flow: If, Loop and Scan, whose attributes hold subgraphs ([`Subgraph`]).
//!
//! These ops never run as kernels: the graph pass `graph::passes::control_flow` inlines them when a
//! program is compiled (the branch an If's constant condition picks, a Loop unrolled while its
//! trip count and condition fold to constants, a Scan unrolled over its known sequence extent),
//! and the inlined nodes lower like any others. Here they parse their attributes and infer their
//! outputs from their subgraphs' ([`Body::infer`]).
//!
//! A subgraph may read values of the enclosing graphs by name (its captures). The node reads them
//! as implicit inputs after its own: the sorted union of its subgraphs' captures
//! ([`implicit_inputs`]), so ordering, liveness and value-input tracing see them as inputs.
//! Sequence and Optional values are out of scope: a subgraph input or output of such a type is
//! refused at import.

pub(crate) mod body;
mod if_op;
mod loop_op;
mod scan;
pub(crate) mod select;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use saggar_shape::{DType, Dim};

pub use self::body::{Body, Subgraph};
pub(crate) use self::scan::{ScanSpec, scan_spec};
use crate::ops::{Attribute, Attributes, EvalInputs, InferInput, InferInputs, NodeCtx, OpEntry, OpError, ValueType};
use crate::ops::{UNKNOWN_DIM, unknown_dim};
use crate::tensor::{Tensor, TensorData, TensorMut};

/// The ops of this family: one entry per opset where the spec changed the types the op takes.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "If", since: 1, until: 10, build: if_op::build },
    OpEntry { op_type: "If", since: 11, until: 12, build: if_op::build },
    OpEntry { op_type: "If", since: 13, until: 15, build: if_op::build },
    OpEntry { op_type: "If", since: 16, until: 18, build: if_op::build },
    OpEntry { op_type: "If", since: 19, until: 20, build: if_op::build },
    OpEntry { op_type: "If", since: 21, until: 22, build: if_op::build },
    OpEntry { op_type: "If", since: 23, until: 23, build: if_op::build },
    OpEntry { op_type: "If", since: 24, until: 24, build: if_op::build },
    OpEntry { op_type: "Loop", since: 1, until: 10, build: loop_op::build },
    OpEntry { op_type: "Loop", since: 11, until: 12, build: loop_op::build },
    OpEntry { op_type: "Loop", since: 13, until: 15, build: loop_op::build },
    OpEntry { op_type: "Loop", since: 16, until: 18, build: loop_op::build },
    OpEntry { op_type: "Loop", since: 19, until: 20, build: loop_op::build },
    OpEntry { op_type: "Loop", since: 21, until: 22, build: loop_op::build },
    OpEntry { op_type: "Loop", since: 23, until: 23, build: loop_op::build },
    OpEntry { op_type: "Loop", since: 24, until: 24, build: loop_op::build },
    OpEntry { op_type: "Scan", since: 8, until: 8, build: scan::build },
    OpEntry { op_type: "Scan", since: 9, until: 10, build: scan::build },
    OpEntry { op_type: "Scan", since: 11, until: 15, build: scan::build },
    OpEntry { op_type: "Scan", since: 16, until: 18, build: scan::build },
    OpEntry { op_type: "Scan", since: 19, until: 20, build: scan::build },
    OpEntry { op_type: "Scan", since: 21, until: 22, build: scan::build },
    OpEntry { op_type: "Scan", since: 23, until: 23, build: scan::build },
    OpEntry { op_type: "Scan", since: 24, until: 24, build: scan::build },
];

/// Whether `op_type` is a control-flow op of this family.
pub(crate) fn is_control(op_type: &str) -> bool {
    matches!(op_type, "If" | "Loop" | "Scan" | select::IF_SELECT)
}

/// The outer-scope names the subgraphs of a node with `attrs` read, sorted and without repeats:
/// the node's implicit inputs, read after its own inputs.
pub(crate) fn implicit_inputs(attrs: &Attributes) -> Vec<String> {
    union(attrs.0.iter().filter_map(|(_, a)| match a {
        Attribute::Graph(g) => Some(g.body().as_ref()),
        _ => None,
    }))
}

fn union<'a>(bodies: impl Iterator<Item = &'a dyn Body>) -> Vec<String> {
    let mut names: Vec<String> = bodies.flat_map(|b| b.captures().iter().cloned()).collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Where a control node's inputs are: its own (`explicit` slots), then the implicit ones.
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    /// The node's own input slots.
    pub(crate) explicit: usize,
    /// The implicit inputs' names ([`implicit_inputs`]).
    pub(crate) implicit: Vec<String>,
}

impl Scope {
    /// The scope of a node built with `ctx` whose subgraphs are `bodies`.
    fn of(ctx: &NodeCtx<'_>, bodies: &[&Arc<dyn Body>]) -> Scope {
        Scope { explicit: ctx.num_inputs(), implicit: union(bodies.iter().map(|b| b.as_ref())) }
    }

    /// The node-input slots of `body`'s captures, in the body's order.
    pub(crate) fn capture_slots(&self, body: &dyn Body) -> Result<Vec<usize>, OpError> {
        body.captures()
            .iter()
            .map(|name| {
                let at = self.implicit.iter().position(|n| n == name).ok_or_else(|| {
                    OpError::infer(format!("subgraph `{}` reads `{name}`, which is not an implicit input", body.name()))
                })?;
                Ok(self.explicit + at)
            })
            .collect()
    }
}

/// A required subgraph attribute.
fn graph_attr(ctx: &NodeCtx<'_>, name: &str) -> Result<Arc<dyn Body>, OpError> {
    let g = ctx.graph(name)?.ok_or_else(|| OpError::attribute(name, "is required"))?;
    Ok(g.body().clone())
}

/// The output types of `body` given its formal inputs' types (no values: they change per
/// iteration) and the node's `inputs` for its captures (with their values, which do not).
fn infer_body(
    body: &dyn Body,
    what: &str,
    formal: &[ValueType],
    inputs: &InferInputs<'_>,
    scope: &Scope,
) -> Result<Vec<ValueType>, OpError> {
    if body.inputs() != formal.len() {
        return Err(OpError::infer(format!(
            "{what} `{}` takes {} inputs, the op gives it {}",
            body.name(),
            body.inputs(),
            formal.len()
        )));
    }
    let mut args: Vec<Option<InferInput<'_>>> =
        formal.iter().map(|ty| Some(InferInput { ty, value: None, dims_value: None })).collect();
    for slot in scope.capture_slots(body)? {
        let input = inputs.req(slot).map_err(|_| OpError::infer(format!("implicit input {slot} has no type")))?;
        args.push(Some(*input));
    }
    body.infer(&args).map_err(|e| OpError::infer(format!("in {what} `{}`: {e}", body.name())))
}

/// The truth value of a one-element condition (bool, or a number: non-zero is true).
pub(crate) fn truth(t: &Tensor) -> Result<bool, OpError> {
    if t.len() != 1 {
        return Err(OpError::infer(format!("a condition must hold one element, found {}", t.len())));
    }
    Ok(match t.data() {
        TensorData::Bool(v) => v[0] != 0,
        _ => t.to_i64s().is_some_and(|v| v[0] != 0),
    })
}

/// Checks that a condition or trip count input holds at most one element of `dtype`.
fn scalar_input(input: &InferInput<'_>, dtype: DType, what: &str) -> Result<(), OpError> {
    if input.ty.dtype != dtype {
        return Err(OpError::infer(format!("{what} must be {dtype}, found {}", input.ty)));
    }
    if input.ty.dims.iter().any(|d| d.as_fixed().is_some_and(|v| v != 1)) {
        return Err(OpError::infer(format!("{what} must hold one element, found {}", input.ty)));
    }
    Ok(())
}

/// The type of a value that starts as `initial` and may be replaced by `next` (a loop-carried
/// value): the element type must stay, extents that differ become unknown.
fn carried(initial: &ValueType, next: &ValueType, what: &str) -> Result<ValueType, OpError> {
    if initial.dtype != next.dtype || initial.rank() != next.rank() {
        return Err(OpError::infer(format!("{what} starts as {initial} and the body makes {next}")));
    }
    Ok(ValueType::new(initial.dtype, merge_dims(&initial.dims, &next.dims)))
}

/// The output types of an If whose condition is unknown, from its two branches' (`If` and
/// `If.select`): one element type per output, extents where the branches agree, and where their
/// ranks differ (If-11 on) the larger rank of unknown extents until a compile knows the branch.
fn branch_types(then_types: &[ValueType], else_types: &[ValueType]) -> Result<Vec<ValueType>, OpError> {
    then_types
        .iter()
        .zip(else_types)
        .enumerate()
        .map(|(k, (t, e))| {
            if t.dtype != e.dtype {
                return Err(OpError::infer(format!(
                    "output {k}: then_branch makes {t} and else_branch makes {e}; the branches must make one element type"
                )));
            }
            Ok(if t.rank() == e.rank() {
                ValueType::new(t.dtype, merge_dims(&t.dims, &e.dims))
            } else {
                ValueType::new(t.dtype, vec![unknown_dim(); t.rank().max(e.rank())])
            })
        })
        .collect()
}

/// Dimensions equal in both kept, the others unknown.
fn merge_dims(a: &[Dim], b: &[Dim]) -> Vec<Dim> {
    a.iter()
        .zip(b)
        .map(|(x, y)| if x == y && x.symbol() != Some(UNKNOWN_DIM) { x.clone() } else { unknown_dim() })
        .collect()
}

/// The `eval` of the control ops: they never run as kernels.
fn refuse_eval(op: &str, _inputs: &EvalInputs<'_>, _outputs: &mut [TensorMut<'_>]) -> Result<(), OpError> {
    Err(OpError::eval(format!(
        "{op} runs only inlined when a program is compiled; its controlling values must be known then"
    )))
}
