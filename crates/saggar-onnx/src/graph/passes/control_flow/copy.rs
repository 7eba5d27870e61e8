//! What inlining builds with: copies of a subgraph's nodes and values under fresh names, the
//! constants and the Gather, Unsqueeze, Concat and Identity nodes that wire them, and the bounds
//! on what unrolling may spend.

use std::sync::Arc;

use super::{Inliner, MAX_UNROLLED_FOLD_ELEMENTS, MAX_UNROLLED_NODES, node_error};
use crate::error::OnnxError;
use crate::graph::ir::{Graph, Node, Value, ValueId};
use crate::graph::subgraph::SubgraphBody;
use crate::ops::control::select::IF_SELECT;
use crate::ops::control::{implicit_inputs, scan_spec};
use crate::ops::shape_util::normalize_axis;
use crate::ops::{self, Attribute, Attributes};
use crate::tensor::{Tensor, TensorData};

/// The constant value of `id`, if it has one.
pub(super) fn constant(graph: &Graph, id: Option<ValueId>) -> Option<Arc<Tensor>> {
    graph.value(id?).constant.clone()
}

/// The one integer of the constant `id` (a Loop's trip count).
pub(super) fn constant_i64(graph: &Graph, node: &Node, id: ValueId) -> Result<i64, OnnxError> {
    let t = constant(graph, Some(id)).ok_or_else(|| super::needs_segment(graph, node))?;
    match t.to_i64s().as_deref() {
        Some(&[v]) => Ok(v),
        _ => Err(node_error(graph.opset, node, format!("`{}` must hold one integer", graph.value(id).name))),
    }
}

/// Whether the control node `node`'s controlling values are known: If's and Loop's constants, a
/// Scan's sequence (and, at opset 8, batch) extents.
pub(super) fn ready(graph: &Graph, node: &Node) -> bool {
    let known =
        |slot: usize| node.inputs.get(slot).copied().flatten().is_none_or(|id| graph.value(id).constant.is_some());
    match node.op_type.as_str() {
        "If" | IF_SELECT => node.inputs.first().copied().flatten().is_some() && known(0),
        "Loop" => known(0) && known(1),
        _ => scan_extents(graph, node).is_some(),
    }
}

/// A Scan node's explicit input count.
pub(super) fn explicit_inputs(node: &Node) -> usize {
    node.inputs.len() - implicit_inputs(&node.attrs).len()
}

/// A Scan's (batch, sequence extent, scan axes), when its scan inputs' types fix them (the batch is
/// `None` after opset 8) and a `sequence_lens` input, if any, is constant.
pub(super) fn scan_extents(graph: &Graph, node: &Node) -> Option<(Option<usize>, usize, Vec<usize>)> {
    let spec = scan_spec(&node.attrs, graph.opset, explicit_inputs(node), node.outputs.len()).ok()?;
    let first = spec.first_scan_input();
    if spec.batched && node.inputs[0].is_some_and(|id| graph.value(id).constant.is_none()) {
        return None;
    }
    let fixed = |ty: &ops::ValueType, axis: usize| ty.dims.get(axis)?.as_fixed().and_then(|v| usize::try_from(v).ok());
    let mut batch = None;
    let mut extent = None;
    let mut axes = Vec::with_capacity(spec.scan_inputs);
    for j in 0..spec.scan_inputs {
        let ty = graph.ty(node.inputs.get(first + j).copied().flatten()?)?;
        let (axis, d) = if spec.batched {
            batch = Some(fixed(ty, 0)?);
            (0, fixed(ty, 1)?)
        } else {
            let axis = normalize_axis(spec.input_axes[j], ty.rank()).ok()?;
            (axis, fixed(ty, axis)?)
        };
        if extent.is_some_and(|e| e != d) {
            return None;
        }
        extent = Some(d);
        axes.push(axis);
    }
    Some((batch, extent?, axes))
}

/// The values of `node` that `body`'s captures read, in the body's order.
pub(super) fn captured(opset: u32, node: &Node, body: &SubgraphBody) -> Result<Vec<ValueId>, OnnxError> {
    use crate::ops::control::Body;
    let implicit = implicit_inputs(&node.attrs);
    let explicit = node.inputs.len() - implicit.len();
    body.captures()
        .iter()
        .map(|name| {
            implicit
                .iter()
                .position(|n| n == name)
                .and_then(|at| node.inputs.get(explicit + at).copied().flatten())
                .ok_or_else(|| node_error(opset, node, format!("the subgraph reads `{name}`, which the node does not")))
        })
        .collect()
}

impl Inliner {
    /// A fresh value name from `wanted`.
    fn fresh_name(&mut self, wanted: String) -> String {
        let mut name = wanted.clone();
        let mut k = 1;
        while self.names.contains(&name) {
            name = format!("{wanted}#{k}");
            k += 1;
        }
        self.names.insert(name.clone());
        name
    }

    fn add_value(&mut self, graph: &mut Graph, name: String, constant: Option<Arc<Tensor>>) -> ValueId {
        let ty = constant.as_ref().map(|t| ops::ValueType::fixed(t.dtype(), t.dims()));
        let name = self.fresh_name(name);
        graph.add_value(Value { name, ty, constant, dims_value: None })
    }

    /// A constant named after `node` and `what`.
    pub(super) fn constant(
        &mut self,
        graph: &mut Graph,
        node: &Node,
        what: &str,
        tensor: Result<Tensor, ops::OpError>,
    ) -> Result<ValueId, OnnxError> {
        let tensor = tensor.map_err(|e| node_error(graph.opset, node, e.to_string()))?;
        Ok(self.add_value(graph, format!("{}/{what}", node.name), Some(Arc::new(tensor))))
    }

    /// A copy of `body`'s nodes reading `formal` for its formal inputs and `captured` for its
    /// captures, and the values its outputs became. Names are `node/tag/name`.
    pub(super) fn instantiate(
        &mut self,
        graph: &mut Graph,
        node: &Node,
        body: &SubgraphBody,
        formal: &[ValueId],
        captured: &[ValueId],
        tag: &str,
    ) -> Result<(Vec<Node>, Vec<ValueId>), OnnxError> {
        let bg = &body.graph;
        if formal.len() != body.formal || captured.len() != bg.inputs.len() - body.formal {
            let reason =
                format!("the subgraph `{}` takes {} inputs, the node gives it {}", bg.name, body.formal, formal.len());
            return Err(node_error(graph.opset, node, reason));
        }
        let prefix = format!("{}/{tag}", node.name);
        let mut map: Vec<Option<ValueId>> = vec![None; bg.values.len()];
        for (&id, &to) in bg.inputs.iter().zip(formal.iter().chain(captured)) {
            map[id.0] = Some(to);
        }
        for (k, v) in bg.values.iter().enumerate() {
            if map[k].is_none() {
                map[k] = Some(self.add_value(graph, format!("{prefix}/{}", v.name), v.constant.clone()));
            }
        }
        let at = |id: ValueId| map[id.0].expect("every value is mapped");
        let nodes = bg
            .nodes
            .iter()
            .map(|n| Node {
                name: format!("{prefix}/{}", n.name),
                op_type: n.op_type.clone(),
                attrs: n.attrs.clone(),
                inputs: n.inputs.iter().map(|i| i.map(at)).collect(),
                outputs: n.outputs.iter().map(|&o| at(o)).collect(),
                op: n.op.clone(),
            })
            .collect();
        Ok((nodes, bg.outputs.iter().map(|o| at(o.value)).collect()))
    }

    /// A node of `op_type` the pass adds for `node`, writing `output` (or a fresh value).
    fn add_node(
        &mut self,
        graph: &mut Graph,
        node: &Node,
        op_type: &str,
        attrs: Attributes,
        inputs: Vec<ValueId>,
        output: Option<ValueId>,
    ) -> Result<(Node, ValueId), OnnxError> {
        let op = ops::build_op(op_type, self.opset, &attrs, inputs.len(), 1)
            .map_err(|e| node_error(graph.opset, node, e))?;
        let output = match output {
            Some(o) => o,
            None => self.add_value(graph, format!("{}/{}", node.name, op_type.to_lowercase()), None),
        };
        let name = format!("{}/{op_type}", node.name);
        let inputs = inputs.into_iter().map(Some).collect();
        let added = Node { name, op_type: op_type.into(), attrs, inputs, outputs: vec![output], op };
        Ok((added, output))
    }

    /// `Identity(from) -> to`.
    pub(super) fn identity(
        &mut self,
        graph: &mut Graph,
        node: &Node,
        from: ValueId,
        to: ValueId,
    ) -> Result<Node, OnnxError> {
        Ok(self.add_node(graph, node, "Identity", Attributes::default(), vec![from], Some(to))?.0)
    }

    /// `Gather(x, index)` on `axis`: the element `index` of `x` along `axis`, without that axis.
    pub(super) fn pick(
        &mut self,
        graph: &mut Graph,
        node: &Node,
        x: ValueId,
        axis: usize,
        index: usize,
    ) -> Result<(Node, ValueId), OnnxError> {
        let i = self.constant(graph, node, "index", Tensor::scalar(TensorData::I64(vec![index as i64])))?;
        let attrs = Attributes(vec![("axis".into(), Attribute::Int(axis as i64))]);
        self.add_node(graph, node, "Gather", attrs, vec![x, i], None)
    }

    /// `pieces` stacked on a new axis `axis` (Unsqueeze each, Concat), into `output` or a fresh
    /// value.
    pub(super) fn stack(
        &mut self,
        graph: &mut Graph,
        node: &Node,
        pieces: &[ValueId],
        axis: i64,
        output: Option<ValueId>,
    ) -> Result<(Vec<Node>, ValueId), OnnxError> {
        let mut nodes = Vec::with_capacity(pieces.len() + 1);
        let mut unsqueezed = Vec::with_capacity(pieces.len());
        for &p in pieces {
            let (attrs, inputs) = if self.opset >= 13 {
                let axes = self.constant(graph, node, "axes", Ok(Tensor::from_i64s(vec![axis])))?;
                (Attributes::default(), vec![p, axes])
            } else {
                (Attributes(vec![("axes".into(), Attribute::Ints(vec![axis]))]), vec![p])
            };
            let (n, v) = self.add_node(graph, node, "Unsqueeze", attrs, inputs, None)?;
            nodes.push(n);
            unsqueezed.push(v);
        }
        let attrs = Attributes(vec![("axis".into(), Attribute::Int(axis))]);
        let (concat, out) = self.add_node(graph, node, "Concat", attrs, unsqueezed, output)?;
        nodes.push(concat);
        Ok((nodes, out))
    }

    /// Counts one more copy of a body of `nodes` nodes (iteration `i`) against
    /// [`MAX_UNROLLED_NODES`]; `bound` names what decides the iteration count.
    pub(super) fn charge(
        &mut self,
        graph: &Graph,
        node: &Node,
        nodes: usize,
        i: i64,
        bound: &str,
    ) -> Result<(), OnnxError> {
        self.unrolled += nodes.max(1);
        if self.unrolled > MAX_UNROLLED_NODES {
            let reason = format!(
                "unrolling stops at iteration {i}: with {bound}, copies of the {nodes}-node body pass {MAX_UNROLLED_NODES} nodes; such a loop needs a run-time segment"
            );
            return Err(node_error(graph.opset, node, reason));
        }
        Ok(())
    }

    /// Counts the constants folded in the values made since `from` against
    /// [`MAX_UNROLLED_FOLD_ELEMENTS`].
    pub(super) fn charge_folds(&mut self, graph: &Graph, node: &Node, from: usize) -> Result<(), OnnxError> {
        self.folded += graph.values[from..].iter().filter_map(|v| v.constant.as_ref()).map(|t| t.len()).sum::<usize>();
        if self.folded > MAX_UNROLLED_FOLD_ELEMENTS {
            let reason =
                format!("the constants folded while unrolling hold more than {MAX_UNROLLED_FOLD_ELEMENTS} elements");
            return Err(node_error(graph.opset, node, reason));
        }
        Ok(())
    }
}
