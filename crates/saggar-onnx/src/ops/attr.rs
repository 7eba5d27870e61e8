//! Node attributes and [`NodeCtx`], through which op builders read them with typed errors.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt;

use crate::error::OpError;
use crate::ops::Op;
use crate::ops::control::Subgraph;
use crate::tensor::Tensor;

/// One attribute value, as ONNX stores it (a `GRAPH` holds its imported subgraph; `GRAPHS` is
/// refused at parse).
#[derive(Clone, Debug, PartialEq)]
pub enum Attribute {
    /// `INT`.
    Int(i64),
    /// `FLOAT`.
    Float(f32),
    /// `STRING` (bytes, usually UTF-8).
    String(Vec<u8>),
    /// `TENSOR`.
    Tensor(Tensor),
    /// `INTS`.
    Ints(Vec<i64>),
    /// `FLOATS`.
    Floats(Vec<f32>),
    /// `STRINGS`.
    Strings(Vec<Vec<u8>>),
    /// `GRAPH`: an If branch, a Loop or Scan body.
    Graph(Subgraph),
}

impl Attribute {
    /// The ONNX type name (`"INT"`, `"FLOATS"`, ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            Attribute::Int(_) => "INT",
            Attribute::Float(_) => "FLOAT",
            Attribute::String(_) => "STRING",
            Attribute::Tensor(_) => "TENSOR",
            Attribute::Ints(_) => "INTS",
            Attribute::Floats(_) => "FLOATS",
            Attribute::Strings(_) => "STRINGS",
            Attribute::Graph(_) => "GRAPH",
        }
    }
}

impl fmt::Display for Attribute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attribute::Int(v) => write!(f, "{v}"),
            Attribute::Float(v) => write!(f, "{v}"),
            Attribute::String(v) => write!(f, "{:?}", String::from_utf8_lossy(v)),
            Attribute::Tensor(t) => write!(f, "tensor {} {:?}", t.dtype(), t.dims()),
            Attribute::Ints(v) => write!(f, "{v:?}"),
            Attribute::Floats(v) => write!(f, "{v:?}"),
            Attribute::Strings(v) => {
                let s: Vec<_> = v.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect();
                write!(f, "{s:?}")
            }
            Attribute::Graph(g) => write!(f, "{g:?}"),
        }
    }
}

/// A node's attributes by name, in the order the model lists them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attributes(pub Vec<(String, Attribute)>);

impl Attributes {
    /// The attribute called `name`.
    pub fn get(&self, name: &str) -> Option<&Attribute> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    /// Sets (or replaces) an attribute.
    pub fn set(&mut self, name: &str, value: Attribute) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some((_, a)) => *a = value,
            None => self.0.push((name.to_string(), value)),
        }
    }

    /// Removes an attribute.
    pub fn remove(&mut self, name: &str) -> Option<Attribute> {
        let pos = self.0.iter().position(|(n, _)| n == name)?;
        Some(self.0.remove(pos).1)
    }
}

/// A node the importer inserts ahead of the node being built, on one of its inputs (legacy
/// broadcasting, opsets 1 to 6: `B` viewed as aligned with `A` at `axis`, see `ops::legacy`).
#[derive(Debug)]
pub struct InputView {
    /// The input slot whose value the inserted node replaces.
    pub input: usize,
    /// The op type the inserted node is named by in errors and listings.
    pub op_type: &'static str,
    /// The inserted op. Its inputs: input `input` of the node, then the node's inputs at `with`.
    pub op: Box<dyn Op>,
    /// Further inputs of the node the inserted op reads (for their shapes).
    pub with: Vec<usize>,
}

/// What an op builder sees of a node: its attributes, its input and output counts and the opset.
/// Every attribute read is recorded; the importer refuses attributes no builder read.
#[derive(Debug)]
pub struct NodeCtx<'a> {
    attrs: &'a Attributes,
    opset: u32,
    inputs: usize,
    outputs: usize,
    read: RefCell<BTreeSet<String>>,
    views: Vec<InputView>,
}

impl<'a> NodeCtx<'a> {
    /// The context of a node with `attrs`, `inputs` input slots and `outputs` outputs at `opset`.
    pub fn new(attrs: &'a Attributes, opset: u32, inputs: usize, outputs: usize) -> NodeCtx<'a> {
        NodeCtx { attrs, opset, inputs, outputs, read: RefCell::new(BTreeSet::new()), views: Vec::new() }
    }

    /// Asks the importer to pass an input through another op before this node reads it.
    pub fn view_input(&mut self, view: InputView) {
        self.views.push(view);
    }

    /// The inserted nodes [`NodeCtx::view_input`] asked for, taken out.
    pub fn take_views(&mut self) -> Vec<InputView> {
        std::mem::take(&mut self.views)
    }

    /// For tests: a context from `(name, value)` pairs.
    pub fn for_test(attrs: &'a Attributes, opset: u32, inputs: usize) -> NodeCtx<'a> {
        NodeCtx::new(attrs, opset, inputs, 1)
    }

    /// The default-domain opset the model imports.
    pub fn opset(&self) -> u32 {
        self.opset
    }

    /// Number of input slots of the node (absent optional inputs included).
    pub fn num_inputs(&self) -> usize {
        self.inputs
    }

    /// Number of outputs of the node.
    pub fn num_outputs(&self) -> usize {
        self.outputs
    }

    fn take(&self, name: &str) -> Option<&'a Attribute> {
        self.read.borrow_mut().insert(name.to_string());
        self.attrs.get(name)
    }

    /// Marks an attribute as handled without reading it (one with no effect on inference, such as
    /// Dropout's `seed`).
    pub fn ignore(&self, name: &str) {
        self.read.borrow_mut().insert(name.to_string());
    }

    /// The attributes present that no builder read, in model order.
    pub fn unread(&self) -> Vec<&'a str> {
        let read = self.read.borrow();
        self.attrs.0.iter().map(|(n, _)| n.as_str()).filter(|n| !read.contains(*n)).collect()
    }

    fn wrong_type(name: &str, want: &str, got: &Attribute) -> OpError {
        OpError::attribute(name, format!("expected {want}, found {}", got.type_name()))
    }

    /// The raw attribute, if present.
    pub fn raw(&self, name: &str) -> Option<&'a Attribute> {
        self.take(name)
    }

    /// An `INT` attribute, if present.
    pub fn int(&self, name: &str) -> Result<Option<i64>, OpError> {
        match self.take(name) {
            None => Ok(None),
            Some(Attribute::Int(v)) => Ok(Some(*v)),
            Some(other) => Err(Self::wrong_type(name, "INT", other)),
        }
    }

    /// An `INT` attribute or `default`.
    pub fn int_or(&self, name: &str, default: i64) -> Result<i64, OpError> {
        Ok(self.int(name)?.unwrap_or(default))
    }

    /// A `FLOAT` attribute, if present.
    pub fn float(&self, name: &str) -> Result<Option<f32>, OpError> {
        match self.take(name) {
            None => Ok(None),
            Some(Attribute::Float(v)) => Ok(Some(*v)),
            Some(other) => Err(Self::wrong_type(name, "FLOAT", other)),
        }
    }

    /// A `FLOAT` attribute or `default`.
    pub fn float_or(&self, name: &str, default: f32) -> Result<f32, OpError> {
        Ok(self.float(name)?.unwrap_or(default))
    }

    /// An `INTS` attribute, if present.
    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, OpError> {
        match self.take(name) {
            None => Ok(None),
            Some(Attribute::Ints(v)) => Ok(Some(v.clone())),
            Some(other) => Err(Self::wrong_type(name, "INTS", other)),
        }
    }

    /// A `FLOATS` attribute, if present.
    pub fn floats(&self, name: &str) -> Result<Option<Vec<f32>>, OpError> {
        match self.take(name) {
            None => Ok(None),
            Some(Attribute::Floats(v)) => Ok(Some(v.clone())),
            Some(other) => Err(Self::wrong_type(name, "FLOATS", other)),
        }
    }

    /// A `STRING` attribute as UTF-8, if present.
    pub fn string(&self, name: &str) -> Result<Option<String>, OpError> {
        match self.take(name) {
            None => Ok(None),
            Some(Attribute::String(v)) => {
                String::from_utf8(v.clone()).map(Some).map_err(|_| OpError::attribute(name, "the string is not UTF-8"))
            }
            Some(other) => Err(Self::wrong_type(name, "STRING", other)),
        }
    }

    /// A `STRING` attribute or `default`.
    pub fn string_or(&self, name: &str, default: &str) -> Result<String, OpError> {
        Ok(self.string(name)?.unwrap_or_else(|| default.to_string()))
    }

    /// A `TENSOR` attribute, if present.
    pub fn tensor(&self, name: &str) -> Result<Option<&'a Tensor>, OpError> {
        match self.take(name) {
            None => Ok(None),
            Some(Attribute::Tensor(t)) => Ok(Some(t)),
            Some(other) => Err(Self::wrong_type(name, "TENSOR", other)),
        }
    }

    /// A `GRAPH` attribute, if present.
    pub fn graph(&self, name: &str) -> Result<Option<&'a Subgraph>, OpError> {
        match self.take(name) {
            None => Ok(None),
            Some(Attribute::Graph(g)) => Ok(Some(g)),
            Some(other) => Err(Self::wrong_type(name, "GRAPH", other)),
        }
    }

    /// The error for an attribute value the op does not implement.
    pub fn unsupported(&self, name: &str, value: impl fmt::Display, supported: &str) -> OpError {
        OpError::Unsupported { name: name.to_string(), value: value.to_string(), supported: supported.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_tracked_and_types_checked() {
        let attrs = Attributes(vec![
            ("axis".into(), Attribute::Int(1)),
            ("perm".into(), Attribute::Ints(vec![1, 0])),
            ("mode".into(), Attribute::String(b"constant".to_vec())),
        ]);
        let ctx = NodeCtx::new(&attrs, 13, 1, 1);
        assert_eq!(ctx.int_or("axis", 0).unwrap(), 1);
        assert!(matches!(ctx.float("perm"), Err(OpError::Attribute { .. })));
        assert_eq!(ctx.unread(), vec!["mode"]);
        assert_eq!(ctx.string_or("mode", "x").unwrap(), "constant");
        assert!(ctx.unread().is_empty());
        assert_eq!(ctx.int_or("missing", 7).unwrap(), 7);
    }
}
