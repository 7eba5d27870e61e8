//! [`ModelBuilder`]: writes ONNX models from code, for tests, benches and fuzz seeds.

use prost::Message;
use saggar_shape::{DType, Dim};

use crate::import::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeDimension, TensorShapeProto,
    TypeProto, TypeProtoTensor, ValueInfoProto, attribute_type, dtype_to_onnx,
};
use crate::import::tensor_pb::tensor_to_proto;
use crate::ops::Attribute;
use crate::tensor::Tensor;

/// Builds a `ModelProto` node by node.
#[derive(Debug, Clone)]
pub struct ModelBuilder {
    ir_version: i64,
    opset: i64,
    graph: GraphProto,
}

/// A `ValueInfoProto` of a dense tensor.
pub fn value_info(name: &str, dtype: DType, dims: &[Dim]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| match d {
            Dim::Fixed(v) => TensorShapeDimension { dim_value: Some(*v as i64), ..Default::default() },
            Dim::Symbolic(s) => TensorShapeDimension { dim_param: Some(s.to_string()), ..Default::default() },
        })
        .collect();
    ValueInfoProto {
        name: name.to_string(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: dtype_to_onnx(dtype),
                shape: Some(TensorShapeProto { dim }),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An `AttributeProto` named `name` holding `value`.
pub fn attribute_proto(name: &str, value: &Attribute) -> AttributeProto {
    let mut a = AttributeProto { name: name.to_string(), ..Default::default() };
    match value {
        Attribute::Int(v) => (a.r#type, a.i) = (attribute_type::INT, *v),
        Attribute::Float(v) => (a.r#type, a.f) = (attribute_type::FLOAT, *v),
        Attribute::String(v) => (a.r#type, a.s) = (attribute_type::STRING, v.clone()),
        Attribute::Tensor(t) => (a.r#type, a.t) = (attribute_type::TENSOR, Some(tensor_to_proto("", t))),
        Attribute::Ints(v) => (a.r#type, a.ints) = (attribute_type::INTS, v.clone()),
        Attribute::Floats(v) => (a.r#type, a.floats) = (attribute_type::FLOATS, v.clone()),
        Attribute::Strings(v) => (a.r#type, a.strings) = (attribute_type::STRINGS, v.clone()),
        Attribute::Graph(g) => (a.r#type, a.g) = (attribute_type::GRAPH, Some(g.proto().to_vec())),
    }
    a
}

/// A `GRAPH` attribute named `name` holding `graph` (an If branch, a Loop or Scan body).
pub fn graph_attribute(name: &str, graph: &GraphProto) -> AttributeProto {
    AttributeProto {
        name: name.to_string(),
        r#type: attribute_type::GRAPH,
        g: Some(graph.encode_to_vec()),
        ..Default::default()
    }
}

impl ModelBuilder {
    /// An empty model importing `opset` of the default domain, IR version 8.
    pub fn new(opset: u32) -> ModelBuilder {
        ModelBuilder {
            ir_version: 8,
            opset: i64::from(opset),
            graph: GraphProto { name: "graph".into(), ..Default::default() },
        }
    }

    /// Sets the IR version written.
    pub fn ir_version(mut self, version: i64) -> ModelBuilder {
        self.ir_version = version;
        self
    }

    /// Adds a graph input.
    pub fn input(&mut self, name: &str, dtype: DType, dims: &[Dim]) -> &mut ModelBuilder {
        self.graph.input.push(value_info(name, dtype, dims));
        self
    }

    /// Adds a graph output (its declared type is a hint; saggar infers its own).
    pub fn output(&mut self, name: &str, dtype: DType, dims: &[Dim]) -> &mut ModelBuilder {
        self.graph.output.push(value_info(name, dtype, dims));
        self
    }

    /// Adds an initializer.
    pub fn initializer(&mut self, name: &str, tensor: &Tensor) -> &mut ModelBuilder {
        self.graph.initializer.push(tensor_to_proto(name, tensor));
        self
    }

    /// Adds a node named after its first output.
    pub fn node(
        &mut self,
        op_type: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: &[(&str, Attribute)],
    ) -> &mut ModelBuilder {
        self.graph.node.push(NodeProto {
            input: inputs.iter().map(ToString::to_string).collect(),
            output: outputs.iter().map(ToString::to_string).collect(),
            name: outputs.first().map_or_else(String::new, |o| format!("{op_type}:{o}")),
            op_type: op_type.to_string(),
            attribute: attrs.iter().map(|(n, v)| attribute_proto(n, v)).collect(),
            ..Default::default()
        });
        self
    }

    /// Adds a node named after its first output with graph-valued attributes too (If branches, a
    /// Loop or Scan body: another builder's [`ModelBuilder::graph`], whose nodes may read this
    /// graph's values by name).
    pub fn control_node(
        &mut self,
        op_type: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: &[(&str, Attribute)],
        graphs: &[(&str, &GraphProto)],
    ) -> &mut ModelBuilder {
        self.node(op_type, inputs, outputs, attrs);
        let node = self.graph.node.last_mut().expect("just added");
        node.attribute.extend(graphs.iter().map(|(name, g)| graph_attribute(name, g)));
        self
    }

    /// The graph built so far (as a subgraph of another builder's node).
    pub fn graph(&self) -> &GraphProto {
        &self.graph
    }

    /// Gives mutable access to the graph for edits the builder does not cover.
    pub fn graph_mut(&mut self) -> &mut GraphProto {
        &mut self.graph
    }

    /// The model message.
    pub fn build(&self) -> ModelProto {
        ModelProto {
            ir_version: self.ir_version,
            opset_import: vec![OperatorSetIdProto { domain: String::new(), version: self.opset }],
            producer_name: "saggar-onnx".into(),
            graph: Some(self.graph.clone()),
            ..Default::default()
        }
    }

    /// The model as protobuf bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.build().encode_to_vec()
    }
}
