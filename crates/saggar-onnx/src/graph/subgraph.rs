//! [`SubgraphBody`]: an If branch, a Loop or Scan body imported as a [`Graph`] whose inputs are
//! its formal inputs followed by its captures (the enclosing graphs' values it reads by name). It
//! is what a control op sees through [`Body`]: its output types come from the same inference and
//! folding as the model's graph, on a copy with the inputs' types bound.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use saggar_shape::Dim;

use crate::graph::ir::{Graph, Node};
use crate::graph::passes::infer::{Mode, infer_and_fold};
use crate::ops::control::Body;
use crate::ops::shape_util::is_unnamed;
use crate::ops::{Attribute, InferInput, OpError, ValueType, unknown_dim};

/// An imported subgraph.
pub(crate) struct SubgraphBody {
    /// The graph: inputs are the formal inputs, then the captures.
    pub(crate) graph: Graph,
    /// How many of `graph.inputs` are formal.
    pub(crate) formal: usize,
    captures: Vec<String>,
    node_count: usize,
    fold_limit: usize,
}

/// Nodes in the subgraphs of `node`.
fn nested_nodes(node: &Node) -> usize {
    node.attrs
        .0
        .iter()
        .filter_map(|(_, a)| match a {
            Attribute::Graph(g) => Some(g.body().node_count()),
            _ => None,
        })
        .sum()
}

impl SubgraphBody {
    /// The body of `graph`, whose first `formal` inputs are formal; inference folds tensors of up
    /// to `fold_limit` elements.
    pub(crate) fn new(graph: Graph, formal: usize, fold_limit: usize) -> SubgraphBody {
        let captures = graph.inputs[formal..].iter().map(|&id| graph.value(id).name.clone()).collect();
        let node_count = graph.nodes.iter().map(|n| 1 + nested_nodes(n)).sum();
        SubgraphBody { graph, formal, captures, node_count, fold_limit }
    }
}

impl fmt::Debug for SubgraphBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "subgraph `{}` ({} nodes, captures {:?})", self.graph.name, self.node_count, self.captures)
    }
}

impl Body for SubgraphBody {
    fn name(&self) -> &str {
        &self.graph.name
    }

    fn inputs(&self) -> usize {
        self.formal
    }

    fn outputs(&self) -> usize {
        self.graph.outputs.len()
    }

    fn captures(&self) -> &[String] {
        &self.captures
    }

    fn node_count(&self) -> usize {
        self.node_count
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let mut g = self.graph.clone();
        let mut known: Vec<&Dim> = Vec::new();
        for (k, &id) in self.graph.inputs.iter().enumerate() {
            let x = inputs
                .get(k)
                .copied()
                .flatten()
                .ok_or_else(|| OpError::infer(format!("input {k} (`{}`) has no type", g.value(id).name)))?;
            known.extend(&x.ty.dims);
            let v = g.value_mut(id);
            v.ty = Some(x.ty.clone());
            // Values small enough to fold are copied in; larger ones (weights) fold nothing.
            v.constant = x.value.filter(|t| t.len() <= self.fold_limit).map(|t| Arc::new(t.clone()));
            v.dims_value = x.dims_value.map(<[_]>::to_vec);
        }
        infer_and_fold(&mut g, Mode::Symbolic, self.fold_limit).map_err(|e| OpError::infer(e.to_string()))?;
        g.outputs
            .iter()
            .map(|o| {
                let ty = g.ty(o.value).ok_or_else(|| OpError::infer(format!("output `{}` has no type", o.name)))?;
                // Extents invented inside are unknown outside (the caller names its own).
                let dims = ty
                    .dims
                    .iter()
                    .map(|d| if is_unnamed(d) && !known.contains(&d) { unknown_dim() } else { d.clone() })
                    .collect();
                Ok(ValueType::new(ty.dtype, dims))
            })
            .collect()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
