//! The graph saggar imports an ONNX model into: values with inferred types (symbolic dimensions
//! allowed) and optional constant contents, and nodes holding their parsed [`Op`], in topological
//! order.
//!
//! **Architecture Invariant:** after import, `nodes` is topologically sorted, every node input names
//! a value that is a graph input, a constant or the output of an earlier node, and every value has a
//! type. Passes keep this true.

use std::sync::Arc;

use saggar_shape::DType;

use crate::ops::{Attributes, Op, SymInt, ValueType};
use crate::tensor::Tensor;

/// Index of a value in [`Graph::values`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub usize);

/// One value: a graph input, a constant or a node output.
#[derive(Clone, Debug)]
pub struct Value {
    /// The ONNX name (unique in the graph).
    pub name: String,
    /// Element type and dimensions, once inferred.
    pub ty: Option<ValueType>,
    /// The contents, when the value is a constant (initializer or folded).
    pub constant: Option<Arc<Tensor>>,
    /// For small integer vectors built from shapes, their elements as integers or symbols.
    pub dims_value: Option<Vec<SymInt>>,
}

/// One node.
#[derive(Clone, Debug)]
pub struct Node {
    /// The node's name (made up from its op type and position when the model has none).
    pub name: String,
    /// The ONNX op type.
    pub op_type: String,
    /// The raw attributes (passes that rebuild ops read them).
    pub attrs: Attributes,
    /// Input values; `None` for an absent optional input.
    pub inputs: Vec<Option<ValueId>>,
    /// Output values.
    pub outputs: Vec<ValueId>,
    /// The parsed op.
    pub op: Arc<dyn Op>,
}

/// A graph output: the name callers see and the value it reads (two outputs may read one value,
/// and an output may read an input or a constant directly after Identity removal).
#[derive(Clone, Debug)]
pub struct GraphOutput {
    /// The output's name.
    pub name: String,
    /// The value.
    pub value: ValueId,
    /// The type the model declares for the output, when it declares a tensor type with a shape.
    pub declared: Option<ValueType>,
}

/// An imported model graph.
#[derive(Clone, Debug)]
pub struct Graph {
    /// The graph's name.
    pub name: String,
    /// The default-domain opset.
    pub opset: u32,
    /// Every value.
    pub values: Vec<Value>,
    /// Nodes in topological order.
    pub nodes: Vec<Node>,
    /// The model inputs, in binding order.
    pub inputs: Vec<ValueId>,
    /// The model outputs, in binding order.
    pub outputs: Vec<GraphOutput>,
}

impl Graph {
    /// The value `id`.
    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.0]
    }

    /// The value `id`, mutably.
    pub fn value_mut(&mut self, id: ValueId) -> &mut Value {
        &mut self.values[id.0]
    }

    /// The type of `id` (every value has one after import).
    pub fn ty(&self, id: ValueId) -> Option<&ValueType> {
        self.values[id.0].ty.as_ref()
    }

    /// Adds a value and returns its id.
    pub fn add_value(&mut self, value: Value) -> ValueId {
        self.values.push(value);
        ValueId(self.values.len() - 1)
    }

    /// The node computing `id`, if a node does.
    pub fn producer(&self, id: ValueId) -> Option<usize> {
        self.nodes.iter().position(|n| n.outputs.contains(&id))
    }

    /// The other operand of node `add` when it is `Add(product, bias)` (either order) with `bias` a
    /// constant vector of `n` elements (`[n]` or `[1, n]`): a bias over a product's columns.
    pub fn bias_of(&self, add: usize, product: ValueId, n: u64) -> Option<(ValueId, &crate::tensor::Tensor)> {
        let node = self.nodes.get(add).filter(|node| node.op_type == "Add")?;
        let bias = match node.inputs.as_slice() {
            [Some(x), Some(y)] if *x == product && *y != product => *y,
            [Some(x), Some(y)] if *y == product && *x != product => *x,
            _ => return None,
        };
        let constant = self.value(bias).constant.as_deref()?;
        let vector =
            matches!(constant.dims(), [c] if *c as u64 == n) || matches!(constant.dims(), [1, c] if *c as u64 == n);
        vector.then_some((bias, constant))
    }

    /// The half type (f16 or bf16) node `n` casts to, when it is a Cast to one.
    pub fn half_cast(&self, n: usize) -> Option<DType> {
        let node = self.nodes.get(n).filter(|node| node.op_type == "Cast")?;
        let to = self.value(*node.outputs.first()?).ty.as_ref()?.dtype;
        matches!(to, DType::F16 | DType::BF16).then_some(to)
    }

    /// Each value's reading nodes, by index (a node reading a value twice appears twice).
    pub fn readers(&self) -> Vec<Vec<usize>> {
        let mut readers = vec![Vec::new(); self.values.len()];
        for (i, node) in self.nodes.iter().enumerate() {
            for id in node.inputs.iter().flatten() {
                readers[id.0].push(i);
            }
        }
        readers
    }

    /// How many node inputs and graph outputs read each value.
    pub fn use_counts(&self) -> Vec<usize> {
        let mut uses = vec![0usize; self.values.len()];
        for node in &self.nodes {
            for id in node.inputs.iter().flatten() {
                uses[id.0] += 1;
            }
        }
        for out in &self.outputs {
            uses[out.value.0] += 1;
        }
        uses
    }

    /// Replaces every read of `from` (node inputs and graph outputs) with `to`.
    pub fn replace_uses(&mut self, from: ValueId, to: ValueId) {
        for node in &mut self.nodes {
            for input in node.inputs.iter_mut().flatten() {
                if *input == from {
                    *input = to;
                }
            }
        }
        for out in &mut self.outputs {
            if out.value == from {
                out.value = to;
            }
        }
    }

    /// Total bytes of the constants that nodes or outputs read.
    pub fn constant_bytes(&self) -> usize {
        let uses = self.use_counts();
        self.values
            .iter()
            .zip(uses)
            .filter(|(_, n)| *n > 0)
            .filter_map(|(v, _)| v.constant.as_ref())
            .map(|t| t.len() * t.dtype().size_bytes())
            .sum()
    }
}
