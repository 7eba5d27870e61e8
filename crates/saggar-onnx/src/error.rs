//! The errors of saggar-onnx.
//!
//! [`OnnxError`] covers reading, importing, checking and compiling a model; [`OpError`] is one op's
//! error before the importer adds the node's context. Each variant names what
//! the caller can act on: the file, the node with its op and opset, the tensor, the limit.

/// What went wrong importing or compiling an ONNX model.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    /// A file could not be read or written.
    #[error(transparent)]
    Io(#[from] saggar_dispatch::FileError),
    /// The bytes are not a valid protobuf message of the expected type (truncated, not protobuf).
    #[error("`{what}` is not a valid ONNX {message}: {reason}")]
    Decode {
        /// The file or buffer.
        what: String,
        /// The message type expected (`ModelProto`, `TensorProto`).
        message: &'static str,
        /// prost's description.
        reason: String,
    },
    /// A size above a limit of [`crate::ImportLimits`] (checked before allocating).
    #[error("{what} is {size}, above the limit of {limit}; raise ImportLimits::{field} if the model is trusted")]
    TooLarge {
        /// What is too large.
        what: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
        /// The limit's field.
        field: &'static str,
    },
    /// The file's IR version is outside what saggar reads.
    #[error("IR version {found} is not supported (supported: {min} to {max}); re-export with an older onnx")]
    IrVersion {
        /// The file's IR version.
        found: i64,
        /// Oldest supported.
        min: i64,
        /// Newest supported.
        max: i64,
    },
    /// An imported operator set is not supported.
    #[error("opset {version} of domain `{domain}` is not supported ({supported})")]
    Opset {
        /// The domain (`""` is the default domain).
        domain: String,
        /// The version.
        version: i64,
        /// What is supported.
        supported: String,
    },
    /// A node whose op is outside the declared op set at the model's opset.
    #[error(
        "node `{node}`: op `{op}` (domain `{domain}`) at opset {opset} is not in the declared op set ({supported})"
    )]
    UnsupportedOp {
        /// The node.
        node: String,
        /// The op type.
        op: String,
        /// The op's domain.
        domain: String,
        /// The opset the model imports.
        opset: u32,
        /// The opsets this op is implemented for, or the declared op set.
        supported: String,
    },
    /// A node's op rejected its attributes, inputs or shapes.
    #[error("node `{node}` ({op}, opset {opset}): {source}")]
    Node {
        /// The node.
        node: String,
        /// The op type.
        op: String,
        /// The opset.
        opset: u32,
        /// The op's error (boxed to keep `OnnxError` small).
        #[source]
        source: Box<OpError>,
    },
    /// An output extent depends on the values of inputs, not only on their shapes (a Slice bound, a
    /// Reshape target or Split sizes given as model inputs) in a way the value-input analysis does
    /// not follow (it keys programs by a model input's values when a shape reads it, see
    /// [`crate::OnnxCompiler::value_inputs`]); binding such inputs as constants with
    /// [`crate::OnnxModel::with_constant_inputs`] still works.
    #[error(
        "node `{node}` ({op}): axis {axis} of output {output} depends on run-time data that no model input's values fix (the values of an op's own computation); bind the inputs it comes from as constants (OnnxModel::with_constant_inputs) or report the model"
    )]
    ShapeDependsOnData {
        /// The node.
        node: String,
        /// The op type.
        op: String,
        /// The output.
        output: usize,
        /// The axis.
        axis: usize,
    },
    /// The graph is malformed: a cycle, a duplicate or undefined name, a missing initializer.
    #[error("invalid graph: {reason}")]
    Graph {
        /// What is wrong.
        reason: String,
    },
    /// A tensor (initializer, attribute, test data) is malformed.
    #[error("tensor `{name}`: {reason}")]
    Tensor {
        /// The tensor's name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor's external data is missing, malformed or outside the model's folder.
    #[error("external data of tensor `{name}`: {reason}")]
    ExternalData {
        /// The tensor's name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A graph input or output with a type saggar does not support.
    #[error("value `{name}`: {reason}")]
    ValueType {
        /// The value.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A compile or run request does not fit the model (input count, rank, fixed extents).
    #[error("request for model `{model}`: {reason}")]
    Request {
        /// The model.
        model: String,
        /// What is wrong.
        reason: String,
    },
    /// A precision setting that does not fit the model ([`crate::OnnxOptions::precision`],
    /// [`crate::OnnxOptions::keep_fp32`]).
    #[error("precision setting for model `{model}`: {reason}")]
    Precision {
        /// The model.
        model: String,
        /// What is wrong, and what to do.
        reason: String,
    },
    /// Artifact bytes that do not load (wrong model, backend, or corrupt).
    #[error("artifact: {reason}")]
    Artifact {
        /// What is wrong.
        reason: String,
    },
    /// A node the host backend runs has no lowering on the chosen GPU backend (refused when the
    /// first program is compiled, before any kernel is built). Serve the model on the host backend,
    /// or re-export it without the op.
    #[error("op `{op}` (node `{node}`) is not supported on the {backend:?} backend: {reason}")]
    UnsupportedOnBackend {
        /// The backend asked for.
        backend: saggar_device::BackendKind,
        /// The ONNX op type.
        op: String,
        /// The node's name.
        node: String,
        /// Why.
        reason: String,
    },
    /// Several nodes cannot be imported, or run on the chosen backend: every one is listed (each
    /// an [`OnnxError::UnsupportedOp`], [`OnnxError::Node`] or [`OnnxError::UnsupportedOnBackend`]),
    /// so one look at the model says all that is missing. One such node is reported as itself.
    #[error("{} nodes are not supported{}", errors.len(), list(errors))]
    Nodes {
        /// One error per node, in graph order.
        errors: Vec<OnnxError>,
    },
    /// A device call failed.
    #[error(transparent)]
    Device(#[from] saggar_device::Error),
}

fn list(errors: &[OnnxError]) -> String {
    errors.iter().map(|e| format!("\n  - {e}")).collect()
}

impl OnnxError {
    /// The errors of several refused nodes as one: the error itself when there is one, else
    /// [`OnnxError::Nodes`]. `None` when `errors` is empty.
    pub fn refused(mut errors: Vec<OnnxError>) -> Option<OnnxError> {
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(OnnxError::Nodes { errors }),
        }
    }

    /// Whether this error is about the model's nodes, each refused for what it is (an op outside
    /// the declared set, an op rejecting its attributes or inputs, an op without a lowering on the
    /// backend), rather than about the file, the request or saggar itself.
    pub fn refuses_nodes(&self) -> bool {
        self.node_errors().iter().all(|e| {
            matches!(
                e,
                OnnxError::UnsupportedOp { .. } | OnnxError::Node { .. } | OnnxError::UnsupportedOnBackend { .. }
            )
        })
    }

    /// The per-node errors this error stands for: the list of [`OnnxError::Nodes`], else itself.
    pub fn node_errors(&self) -> &[OnnxError] {
        match self {
            OnnxError::Nodes { errors } => errors,
            other => std::slice::from_ref(other),
        }
    }
}

/// An error of one op, without the node's context (the importer adds it).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    /// An attribute is missing, has the wrong type or an invalid value.
    #[error("attribute `{name}`: {reason}")]
    Attribute {
        /// The attribute.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// An attribute value (or attribute) the declared op set does not implement.
    #[error("attribute `{name}` = {value} is not supported (supported: {supported})")]
    Unsupported {
        /// The attribute.
        name: String,
        /// The value found.
        value: String,
        /// What is supported.
        supported: String,
    },
    /// Inputs the op cannot take (wrong count, type or shape).
    #[error("{0}")]
    Infer(String),
    /// Evaluation failed (an index out of range, a size that overflows).
    #[error("{0}")]
    Eval(String),
}

impl OpError {
    /// An inference error.
    pub fn infer(reason: impl Into<String>) -> OpError {
        OpError::Infer(reason.into())
    }

    /// An evaluation error.
    pub fn eval(reason: impl Into<String>) -> OpError {
        OpError::Eval(reason.into())
    }

    /// An attribute error.
    pub fn attribute(name: &str, reason: impl Into<String>) -> OpError {
        OpError::Attribute { name: name.to_string(), reason: reason.into() }
    }
}
