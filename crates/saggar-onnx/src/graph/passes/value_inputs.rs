//! Value inputs: the model inputs whose values, not only their shapes, fix the program. A node
//! whose output extents import could not know (an unnamed symbol none of its inputs has) reads a
//! small non-constant tensor at a slot past its data input (a Reshape `shape`, Slice `starts`, a
//! reduction's `axes`, TopK's `k`, Resize's `scales`): the model inputs that tensor is computed
//! from are value inputs. So are, in a segment of a model cut by `segments.rs`, the integer vectors
//! an earlier segment computed that its nodes read there: the segment inherits the whole model's
//! types, which named those extents from the vector's symbolic elements. Sessions key programs by
//! their values as well as the shapes; per compile, [`bind_values`] makes them constants, so the
//! shape chains fold as for initializers.

use std::collections::BTreeSet;

use saggar_shape::{DType, Dim};

use crate::error::OnnxError;
use crate::graph::ir::{Graph, ValueId};
use crate::graph::passes::control_flow;
use crate::ops::shape_util::is_unnamed;
use crate::tensor::{Tensor, checked_numel};

/// Most elements of a tensor read as a shape-fixing value: shape, axes, pads and scale vectors are
/// short; a longer tensor is data.
pub(crate) const MAX_VALUE_ELEMENTS: usize = 4096;

/// Ops whose output values depend only on their input's shape: tracing stops there.
pub(crate) const SHAPE_ONLY: [&str; 2] = ["Shape", "Size"];

/// Ops whose first input fixes their output's shape (elsewhere it is the data).
const SHAPE_FIRST: [&str; 6] =
    ["Range", "ConstantOfShape", "BlackmanWindow", "HammingWindow", "HannWindow", "MelWeightMatrix"];

/// The binding indices of `graph`'s value inputs, ascending.
pub(crate) fn value_inputs(graph: &Graph) -> Vec<usize> {
    let mut found = BTreeSet::new();
    for id in shape_fixing_values(graph) {
        trace(graph, id, &mut found, small);
    }
    control_flow_inputs(graph, &mut found);
    found.into_iter().collect()
}

/// The small non-constant values that fix extents: each read at a slot past its node's data input
/// (or at the first slot of [`SHAPE_FIRST`] ops) by a node whose output extents import could not
/// know (an unnamed symbol none of its inputs has). Deduplicated, in node order.
pub(crate) fn shape_fixing_values(graph: &Graph) -> Vec<ValueId> {
    let mut values = Vec::new();
    for node in &graph.nodes {
        let input_dims: Vec<&Dim> =
            node.inputs.iter().flatten().filter_map(|&id| graph.ty(id)).flat_map(|t| t.dims.iter()).collect();
        let fresh = node
            .outputs
            .iter()
            .filter_map(|&id| graph.ty(id))
            .flat_map(|t| t.dims.iter())
            .any(|d| is_unnamed(d) && !input_dims.contains(&d));
        if node.op.extents_from_shapes() {
            continue;
        }
        if !fresh {
            // A segment inherits its types from the whole model's inference, where a shape vector
            // computed from other extents (`Concat(Shape(x)[0], 364)`, whose elements that inference
            // knew: `dims_value`) named its Reshape's output. Read from an earlier segment, that
            // vector is an input of this graph, which nothing here computes any more: its values fix
            // the extents. A model's own inputs carry no `dims_value`, so this holds for segments only.
            let inherited = |id: ValueId| graph.inputs.contains(&id) && graph.value(id).dims_value.is_some();
            for &id in node.inputs.iter().skip(1).flatten() {
                if inherited(id) && small(graph, id) && !values.contains(&id) {
                    values.push(id);
                }
            }
            continue;
        }
        // A control node's inputs past its control inputs are the values its bodies capture: those
        // that fix extents inside them (its control inputs are `control_flow_inputs`').
        if control_flow::is_control(node) {
            for id in control_flow::captured_shape_values(graph, node) {
                if small(graph, id) && graph.value(id).constant.is_none() && !values.contains(&id) {
                    values.push(id);
                }
            }
            continue;
        }
        // Slot 0 is the data input, except for the ops whose first input is a shape.
        let first = SHAPE_FIRST.contains(&node.op_type.as_str());
        for (slot, id) in node.inputs.iter().enumerate() {
            let Some(id) = *id else { continue };
            if (slot > 0 || first) && small(graph, id) && graph.value(id).constant.is_none() && !values.contains(&id) {
                values.push(id);
            }
        }
    }
    values
}

/// Whether `id` is [`small`] or a short bool tensor (a condition).
pub(crate) fn small_or_flag(graph: &Graph, id: ValueId) -> bool {
    let flag = graph.ty(id).is_some_and(|t| {
        t.dtype == DType::Bool
            && t.fixed_dims().and_then(|d| checked_numel(&d)).is_some_and(|n| n <= MAX_VALUE_ELEMENTS)
    });
    flag || small(graph, id)
}

/// Whether `id` is a short vector or a scalar (at most [`MAX_VALUE_ELEMENTS`] elements, rank at
/// most 1 when its length is symbolic), of a numeric type.
pub(crate) fn small(graph: &Graph, id: ValueId) -> bool {
    let Some(ty) = graph.ty(id) else { return false };
    let count = ty.fixed_dims().and_then(|d| checked_numel(&d));
    ty.dtype != DType::Bool && count.map_or(ty.rank() <= 1, |n| n <= MAX_VALUE_ELEMENTS)
}

/// Adds the inputs of `graph` that `id` is computed from (through every producer but the
/// shape-only ops) and that `accept` takes.
pub(crate) fn trace(graph: &Graph, id: ValueId, found: &mut BTreeSet<usize>, accept: fn(&Graph, ValueId) -> bool) {
    let mut stack = vec![id];
    let mut seen = BTreeSet::new();
    while let Some(v) = stack.pop() {
        if !seen.insert(v) || graph.value(v).constant.is_some() {
            continue;
        }
        if let Some(i) = graph.inputs.iter().position(|&input| input == v) {
            if accept(graph, v) {
                found.insert(i);
            }
            continue;
        }
        if let Some(n) = graph.producer(v) {
            let node = &graph.nodes[n];
            if !SHAPE_ONLY.contains(&node.op_type.as_str()) {
                stack.extend(node.inputs.iter().flatten());
            }
        }
    }
}

// ---- Control flow -------------------------------------------------------------------------------

/// Adds the model inputs an If `cond` or a Loop `M` or `cond` is computed from, in the graph or
/// inside its subgraphs ([`control_flow::control_values`]): their values decide which nodes run, and
/// the compile inlines the control flow for them. Small ones only, bool conditions included.
fn control_flow_inputs(graph: &Graph, found: &mut BTreeSet<usize>) {
    for id in control_flow::control_values(graph) {
        trace(graph, id, found, small_or_flag);
    }
}

// -------------------------------------------------------------------------------------------------

/// Makes the value inputs' `values` (binding index, little-endian bytes) constants of `graph`,
/// which keeps them as inputs: a program made for these values reads nothing else from them. The
/// input's shape must already be bound.
pub(crate) fn bind_values(graph: &mut Graph, values: &[(usize, Vec<u8>)], model: &str) -> Result<(), OnnxError> {
    let err = |reason: String| OnnxError::Request { model: model.to_string(), reason };
    for (index, bytes) in values {
        let id = *graph.inputs.get(*index).ok_or_else(|| err(format!("no input {index} to bind a value to")))?;
        let value = graph.value(id);
        let ty = value.ty.as_ref().ok_or_else(|| err(format!("input `{}` has no type", value.name)))?;
        let dims = ty.fixed_dims().ok_or_else(|| err(format!("input `{}` has no concrete shape", value.name)))?;
        let tensor = Tensor::from_le_bytes(ty.dtype, dims, bytes)
            .map_err(|e| err(format!("the value of input `{}`: {e}", value.name)))?;
        graph.value_mut(id).constant = Some(std::sync::Arc::new(tensor));
    }
    Ok(())
}
