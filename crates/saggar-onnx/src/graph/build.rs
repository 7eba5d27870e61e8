//! From a decoded `ModelProto` to the [`Graph`]: version and opset checks, initializers, inputs,
//! nodes with their ops built and attributes checked, names resolved, topological order; the
//! subgraphs of control-flow nodes imported the same way, reading the enclosing graphs' values by
//! name (captures).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use prost::Message;
use saggar_shape::Dim;

use crate::error::OnnxError;
use crate::graph::ir::{Graph, GraphOutput, Node, Value, ValueId};
use crate::graph::subgraph::SubgraphBody;
use crate::import::limits::ImportLimits;
use crate::import::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, ValueInfoProto, attribute_type, dtype_from_onnx,
};
use crate::import::tensor_pb::tensor_from_proto;
use crate::ops::control::Subgraph;
use crate::ops::{self, Attribute, Attributes, MAX_OPSET, MIN_OPSET, NodeCtx, ValueType};
use crate::tensor::is_supported_dtype;

/// Oldest IR version read (ONNX 1.0 files with opset imports).
pub const MIN_IR_VERSION: i64 = 3;
/// Newest IR version read.
pub const MAX_IR_VERSION: i64 = 12;

fn graph_err(reason: impl Into<String>) -> OnnxError {
    OnnxError::Graph { reason: reason.into() }
}

/// The default-domain opset `model` imports, checked.
fn default_opset(model: &ModelProto) -> Result<u32, OnnxError> {
    let mut found = None;
    for set in &model.opset_import {
        if set.domain.is_empty() || set.domain == "ai.onnx" {
            if found.is_some() {
                return Err(graph_err("the default domain is imported twice"));
            }
            found = Some(set.version);
        }
    }
    let version = found.ok_or_else(|| OnnxError::Opset {
        domain: String::new(),
        version: 0,
        supported: "the model imports no default-domain opset".into(),
    })?;
    if !(i64::from(MIN_OPSET)..=i64::from(MAX_OPSET)).contains(&version) {
        return Err(OnnxError::Opset {
            domain: String::new(),
            version,
            supported: format!("default domain opsets {MIN_OPSET} to {MAX_OPSET}"),
        });
    }
    Ok(version as u32)
}

/// The type of a graph input or output.
pub(crate) fn value_type(info: &ValueInfoProto, is_input: bool) -> Result<ValueType, OnnxError> {
    let bad = |reason: String| OnnxError::ValueType { name: info.name.clone(), reason };
    let ty = info.r#type.as_ref().ok_or_else(|| bad("has no type".into()))?;
    let tensor = ty.tensor_type.as_ref().ok_or_else(|| {
        bad("is not a dense tensor (sequences, maps, optionals and sparse tensors are not supported)".into())
    })?;
    let dtype = dtype_from_onnx(i64::from(tensor.elem_type)).filter(|d| is_supported_dtype(*d)).ok_or_else(|| {
        bad(format!("element type code {} is not supported (f32, i64, i32, bool, f16, bf16 are)", tensor.elem_type))
    })?;
    let shape = match &tensor.shape {
        Some(s) => s,
        None if is_input => return Err(bad("has no shape (the rank must be known)".into())),
        None => return Ok(ValueType::new(dtype, Vec::new())),
    };
    let dims = shape
        .dim
        .iter()
        .enumerate()
        .map(|(i, d)| match (d.dim_value, &d.dim_param) {
            (Some(v), _) => u64::try_from(v).map(Dim::Fixed).map_err(|_| bad(format!("axis {i} has extent {v}"))),
            (None, Some(p)) if !p.is_empty() => Ok(Dim::symbolic(p.as_str())),
            // An axis with neither gets a symbol of its own.
            _ => Ok(Dim::symbolic(format!("{}_{i}", info.name))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ValueType::new(dtype, dims))
}

fn convert_attribute(a: &AttributeProto, limits: &ImportLimits) -> Result<Attribute, String> {
    if !a.ref_attr_name.is_empty() {
        return Err("refers to a function attribute".into());
    }
    let ty = if a.r#type != 0 {
        a.r#type
    } else if a.t.is_some() {
        attribute_type::TENSOR
    } else if !a.ints.is_empty() {
        attribute_type::INTS
    } else if !a.floats.is_empty() {
        attribute_type::FLOATS
    } else if !a.s.is_empty() {
        attribute_type::STRING
    } else {
        attribute_type::INT
    };
    Ok(match ty {
        attribute_type::FLOAT => Attribute::Float(a.f),
        attribute_type::INT => Attribute::Int(a.i),
        attribute_type::STRING => Attribute::String(a.s.clone()),
        attribute_type::TENSOR => {
            let t = a.t.as_ref().ok_or("TENSOR attribute without a tensor")?;
            // Half-precision attributes (a ConstantOfShape value) compute in f32, see `crate::import::half`.
            Attribute::Tensor(tensor_from_proto(t, None, limits).map_err(|e| e.to_string())?.widened())
        }
        attribute_type::FLOATS => Attribute::Floats(a.floats.clone()),
        attribute_type::INTS => Attribute::Ints(a.ints.clone()),
        attribute_type::STRINGS => Attribute::Strings(a.strings.clone()),
        attribute_type::GRAPHS => return Err("GRAPHS attributes are not supported".into()),
        attribute_type::GRAPH => return Err("a GRAPH attribute is read by the importer".into()),
        other => return Err(format!("attribute type {other} is not supported")),
    })
}

/// A node's op with its attributes and the nodes its builder inserts ahead of it.
type BuiltNode = (Arc<dyn ops::Op>, Attributes, Vec<ops::InputView>);

/// Builds the graph of `model`. Types of node outputs are filled in by inference afterwards.
pub(crate) fn import(model: &ModelProto, model_dir: Option<&Path>, limits: &ImportLimits) -> Result<Graph, OnnxError> {
    if !(MIN_IR_VERSION..=MAX_IR_VERSION).contains(&model.ir_version) {
        return Err(OnnxError::IrVersion { found: model.ir_version, min: MIN_IR_VERSION, max: MAX_IR_VERSION });
    }
    let opset = default_opset(model)?;
    let graph = model.graph.as_ref().ok_or_else(|| graph_err("the model has no graph"))?;
    let mut importer = Importer { opset, model_dir, limits, nodes: 0, constant_bytes: 0, depth: 0 };
    Ok(importer.graph(graph, None)?.0)
}

/// The names a graph defines (initializers, inputs, node outputs) and those of the graphs around
/// it: what a subgraph may read from outside.
pub(crate) struct Scope<'p> {
    names: HashSet<&'p str>,
    parent: Option<&'p Scope<'p>>,
}

impl<'p> Scope<'p> {
    fn of(graph: &'p GraphProto, parent: Option<&'p Scope<'p>>) -> Scope<'p> {
        let inits = graph.initializer.iter().map(|t| t.name.as_str());
        let inputs = graph.input.iter().map(|i| i.name.as_str());
        let outputs = graph.node.iter().flat_map(|n| n.output.iter().map(String::as_str));
        Scope { names: inits.chain(inputs).chain(outputs).filter(|n| !n.is_empty()).collect(), parent }
    }

    fn visible(&self, name: &str) -> bool {
        self.names.contains(name) || self.parent.is_some_and(|p| p.visible(name))
    }
}

/// One import: the opset, the model's folder, the limits, and the totals they bound across the
/// graph and its subgraphs.
pub(crate) struct Importer<'a> {
    opset: u32,
    model_dir: Option<&'a Path>,
    limits: &'a ImportLimits,
    nodes: usize,
    constant_bytes: u64,
    depth: usize,
}

impl Importer<'_> {
    /// Imports `graph` and returns it with the number of its formal inputs. For the model's graph
    /// (`outer` is `None`) every input needs a shape and every name read must be defined; a
    /// subgraph's formal inputs take their types from its op, and a name its enclosing graphs define
    /// becomes a capture: an input after the formal ones.
    pub(crate) fn graph(&mut self, graph: &GraphProto, outer: Option<&Scope<'_>>) -> Result<(Graph, usize), OnnxError> {
        if !graph.sparse_initializer.is_empty() {
            return Err(graph_err("sparse initializers are not supported"));
        }
        self.nodes += graph.node.len();
        if self.nodes > self.limits.max_nodes {
            return Err(OnnxError::TooLarge {
                what: "the node count (subgraphs included)".into(),
                size: self.nodes as u64,
                limit: self.limits.max_nodes as u64,
                field: "max_nodes",
            });
        }
        let scope = Scope::of(graph, outer);
        let mut table = ValueTable { scope: outer.map(|_| &scope), ..ValueTable::default() };
        for init in &graph.initializer {
            // Half-precision weights are widened exactly: the model computes in f32 (`crate::import::half`).
            let tensor = tensor_from_proto(init, self.model_dir, self.limits)?.widened();
            self.constant_bytes += (tensor.len() * tensor.dtype().size_bytes()) as u64;
            if self.constant_bytes > self.limits.max_initializer_bytes {
                return Err(OnnxError::TooLarge {
                    what: "the initializers".into(),
                    size: self.constant_bytes,
                    limit: self.limits.max_initializer_bytes,
                    field: "max_initializer_bytes",
                });
            }
            let ty = ValueType::fixed(tensor.dtype(), tensor.dims());
            table.define(Value {
                name: init.name.clone(),
                ty: Some(ty),
                constant: Some(Arc::new(tensor)),
                dims_value: None,
            })?;
        }
        let initializer_names: HashSet<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
        let mut inputs = Vec::new();
        for info in &graph.input {
            // IR version 3 files list initializers among the inputs: those are constants, not inputs.
            if initializer_names.contains(info.name.as_str()) {
                continue;
            }
            let ty = match outer {
                None => Some(value_type(info, true)?),
                // A subgraph's input takes its type from the op; a declared one must be a tensor.
                Some(_) => {
                    subgraph_value_type(info)?;
                    None
                }
            };
            inputs.push(table.define(Value { name: info.name.clone(), ty, constant: None, dims_value: None })?);
        }
        let formal = inputs.len();
        // Nodes: outputs defined first (so inputs may name later nodes), then sorted.
        let nodes = build_nodes(self, graph, &scope, &mut table)?;
        let nodes = topological_order(nodes, table.values.len())?;
        let mut outputs = Vec::with_capacity(graph.output.len());
        for o in &graph.output {
            let value =
                table.resolve(&o.name).ok_or_else(|| graph_err(format!("output `{}` is never defined", o.name)))?;
            let declared = match outer {
                None => value_type(o, false).ok().filter(|t| t.rank() > 0),
                Some(_) => subgraph_value_type(o)?,
            };
            outputs.push(GraphOutput { name: o.name.clone(), value, declared });
        }
        if outputs.is_empty() {
            return Err(graph_err(format!("the graph `{}` has no outputs", graph.name)));
        }
        inputs.extend(table.captures);
        let graph = Graph { name: graph.name.clone(), opset: self.opset, values: table.values, nodes, inputs, outputs };
        Ok((graph, formal))
    }

    /// The subgraph of the `GRAPH` attribute `a` of a node in `scope`.
    fn subgraph(&mut self, a: &AttributeProto, scope: &Scope<'_>) -> Result<Attribute, OnnxError> {
        let bytes = a.g.as_deref().unwrap_or_default();
        let proto = GraphProto::decode(bytes).map_err(|e| OnnxError::Decode {
            what: format!("attribute `{}`", a.name),
            message: "GraphProto",
            reason: e.to_string(),
        })?;
        if self.depth >= self.limits.max_subgraph_depth {
            return Err(OnnxError::TooLarge {
                what: format!("the subgraph nesting depth at attribute `{}`", a.name),
                size: self.depth as u64 + 1,
                limit: self.limits.max_subgraph_depth as u64,
                field: "max_subgraph_depth",
            });
        }
        self.depth += 1;
        let imported = self.graph(&proto, Some(scope));
        self.depth -= 1;
        let (graph, formal) = imported?;
        let body = SubgraphBody::new(graph, formal, self.limits.max_fold_elements);
        Ok(Attribute::Graph(Subgraph::new(Arc::new(body), bytes.to_vec())))
    }

    /// Builds a node's op; the error names the node, its op and the opset.
    fn build_node(&mut self, proto: &NodeProto, name: &str, scope: &Scope<'_>) -> Result<BuiltNode, OnnxError> {
        let opset = self.opset;
        let node_err = |source: ops::OpError| OnnxError::Node {
            node: name.to_string(),
            op: proto.op_type.clone(),
            opset,
            source: Box::new(source),
        };
        if !(proto.domain.is_empty() || proto.domain == "ai.onnx") {
            return Err(OnnxError::UnsupportedOp {
                node: name.to_string(),
                op: proto.op_type.clone(),
                domain: proto.domain.clone(),
                opset,
                supported: "only the default domain is supported".into(),
            });
        }
        let entry = ops::lookup(&proto.op_type, opset).ok_or_else(|| OnnxError::UnsupportedOp {
            node: name.to_string(),
            op: proto.op_type.clone(),
            domain: proto.domain.clone(),
            opset,
            supported: match ops::supported_opsets(&proto.op_type).as_str() {
                "none" => {
                    "saggar-onnx does not implement it; `saggar check --onnx FILE` lists every such node".to_string()
                }
                ranges => format!("implemented for opsets {ranges}"),
            },
        })?;
        let mut attrs = Attributes::default();
        for a in &proto.attribute {
            if attrs.get(&a.name).is_some() {
                return Err(node_err(ops::OpError::attribute(&a.name, "is given twice")));
            }
            let value = if a.r#type == attribute_type::GRAPH && a.ref_attr_name.is_empty() {
                self.subgraph(a, scope)?
            } else {
                convert_attribute(a, self.limits)
                    .map_err(|reason| node_err(ops::OpError::attribute(&a.name, reason)))?
            };
            attrs.0.push((a.name.clone(), value));
        }
        let mut ctx = NodeCtx::new(&attrs, opset, proto.input.len(), proto.output.len());
        let op = (entry.build)(&mut ctx).map_err(node_err)?;
        if let Some(unread) = ctx.unread().first() {
            let value = attrs.get(unread).map(ToString::to_string).unwrap_or_default();
            return Err(node_err(ops::OpError::Unsupported {
                name: unread.to_string(),
                value,
                supported: format!("{} does not implement this attribute", proto.op_type),
            }));
        }
        let views = ctx.take_views();
        Ok((Arc::from(op), attrs, views))
    }
}

/// The declared type of a subgraph input or output, when it declares a tensor type with a shape;
/// a declared type that is not a dense tensor (a sequence, an optional) is refused.
fn subgraph_value_type(info: &ValueInfoProto) -> Result<Option<ValueType>, OnnxError> {
    match &info.r#type {
        None => Ok(None),
        Some(t) if t.tensor_type.as_ref().is_some_and(|t| t.shape.is_none()) => Ok(None),
        Some(_) => value_type(info, false).map(|t| Some(t).filter(|t| t.rank() > 0)),
    }
}

/// The values defined so far, by name; a name is defined once. In a subgraph, a name the
/// enclosing graphs define (`outer`) is defined on first read as a capture.
#[derive(Default)]
struct ValueTable<'s> {
    values: Vec<Value>,
    by_name: HashMap<String, ValueId>,
    /// The graph's own scope, for a subgraph (`None` for the model's graph).
    scope: Option<&'s Scope<'s>>,
    captures: Vec<ValueId>,
}

impl ValueTable<'_> {
    /// The value called `name`: defined here, or captured from the enclosing graphs.
    fn resolve(&mut self, name: &str) -> Option<ValueId> {
        if let Some(&id) = self.by_name.get(name) {
            return Some(id);
        }
        // Not among this graph's names: the enclosing graphs' (`Scope::visible` walks them).
        if !self.scope.is_some_and(|s| s.parent.is_some_and(|p| p.visible(name))) {
            return None;
        }
        let id = self.define(Value { name: name.to_string(), ty: None, constant: None, dims_value: None }).ok()?;
        self.captures.push(id);
        Some(id)
    }

    fn define(&mut self, value: Value) -> Result<ValueId, OnnxError> {
        if value.name.is_empty() {
            return Err(graph_err("a value has an empty name"));
        }
        if self.by_name.contains_key(&value.name) {
            return Err(graph_err(format!("the name `{}` is defined twice", value.name)));
        }
        let id = ValueId(self.values.len());
        self.by_name.insert(value.name.clone(), id);
        self.values.push(value);
        Ok(id)
    }
}

/// The graph's nodes with their outputs defined in `table` and their inputs resolved. Every node
/// that cannot be built is reported, not only the first.
fn build_nodes(
    importer: &mut Importer<'_>,
    graph: &GraphProto,
    scope: &Scope<'_>,
    table: &mut ValueTable<'_>,
) -> Result<Vec<Node>, OnnxError> {
    let mut nodes = Vec::with_capacity(graph.node.len());
    let mut inserted = Vec::new();
    let mut refused = Vec::new();
    for (index, proto) in graph.node.iter().enumerate() {
        let name = if proto.name.is_empty() { format!("{}_{index}", proto.op_type) } else { proto.name.clone() };
        let (op, attrs, views) = match importer.build_node(proto, &name, scope) {
            Ok(built) => built,
            Err(e) => {
                refused.push(e);
                continue;
            }
        };
        let mut outputs = Vec::with_capacity(proto.output.len());
        for (k, out) in proto.output.iter().enumerate() {
            let value_name = if out.is_empty() { format!("{name}:unused{k}") } else { out.clone() };
            outputs.push(table.define(Value { name: value_name, ty: None, constant: None, dims_value: None })?);
        }
        for (k, view) in views.into_iter().enumerate() {
            let value_name = format!("{name}:{}{k}", view.op_type);
            let out = table.define(Value { name: value_name.clone(), ty: None, constant: None, dims_value: None })?;
            inserted.push((nodes.len(), view, out, value_name));
        }
        nodes.push((proto, Node { name, op_type: proto.op_type.clone(), attrs, inputs: Vec::new(), outputs, op }));
    }
    if let Some(e) = OnnxError::refused(refused) {
        return Err(e);
    }
    for (proto, node) in &mut nodes {
        // The node's own inputs, then the outer values its subgraphs read (`ops::control`).
        let implicit = ops::control::implicit_inputs(&node.attrs);
        let names = proto.input.iter().chain(&implicit);
        node.inputs = names
            .map(|n| {
                if n.is_empty() {
                    return Ok(None);
                }
                table.resolve(n).map(Some).ok_or_else(|| {
                    graph_err(format!(
                        "node `{}` reads `{n}`, which no input, initializer or node defines (a missing initializer?)",
                        node.name
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
    }
    let mut nodes: Vec<Node> = nodes.into_iter().map(|(_, n)| n).collect();
    for (at, view, out, name) in inserted {
        let node = &mut nodes[at];
        let slot = |i: usize| node.inputs.get(i).copied().flatten();
        let missing = || graph_err(format!("node `{}` lacks input {} of its {}", node.name, view.input, view.op_type));
        let inputs: Vec<Option<ValueId>> = std::iter::once(view.input)
            .chain(view.with.iter().copied())
            .map(|i| slot(i).map(Some).ok_or_else(missing))
            .collect::<Result<_, _>>()?;
        node.inputs[view.input] = Some(out);
        let (op_type, op) = (view.op_type.to_string(), Arc::from(view.op));
        nodes.push(Node { name, op_type, attrs: Attributes::default(), inputs, outputs: vec![out], op });
    }
    Ok(nodes)
}

/// Sorts `nodes` so every node comes after the producers of its inputs (Kahn's algorithm, stable
/// for already sorted files); a cycle is an error naming a node on it.
fn topological_order(nodes: Vec<Node>, value_count: usize) -> Result<Vec<Node>, OnnxError> {
    let mut producer = vec![usize::MAX; value_count];
    for (i, n) in nodes.iter().enumerate() {
        for o in &n.outputs {
            producer[o.0] = i;
        }
    }
    let mut pending = vec![0usize; nodes.len()];
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        for id in n.inputs.iter().flatten() {
            let p = producer[id.0];
            if p != usize::MAX {
                pending[i] += 1;
                consumers[p].push(i);
            }
        }
    }
    let mut ready: std::collections::BTreeSet<usize> = (0..nodes.len()).filter(|&i| pending[i] == 0).collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &c in &consumers[i] {
            pending[c] -= 1;
            if pending[c] == 0 {
                ready.insert(c);
            }
        }
    }
    if order.len() != nodes.len() {
        let stuck = (0..nodes.len()).find(|i| pending[*i] > 0).map(|i| nodes[i].name.clone()).unwrap_or_default();
        return Err(graph_err(format!("the graph has a cycle through node `{stuck}`")));
    }
    let mut slots: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
    Ok(order.into_iter().filter_map(|i| slots[i].take()).collect())
}
