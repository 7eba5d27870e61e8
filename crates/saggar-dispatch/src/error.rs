//! Errors of saggar-dispatch.

use saggar_arena::ArenaError;
use saggar_cache::CacheError;
use saggar_shape::ShapeError;

use crate::compiler::CompilerError;

/// What went wrong in a session. After any of these the session serves the next valid request.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// The request's shapes, names or dtypes do not fit the model (includes a zero batch and a batch
    /// above every bucket with splitting off).
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// A device operation failed.
    #[error(transparent)]
    Device(#[from] saggar_device::Error),
    /// Staging or read-back failed.
    #[error(transparent)]
    Arena(#[from] ArenaError),
    /// The compile cache failed.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// The user's compiler failed to compile.
    #[error("compiling `{model}` for input shapes {shapes} failed: {source}")]
    Compile {
        /// The model.
        model: String,
        /// The concrete input shapes, for the message.
        shapes: String,
        /// The compiler's error.
        #[source]
        source: CompilerError,
    },
    /// The user's compiler failed to load an artifact.
    #[error("loading a compiled `{model}` failed: {source}")]
    Load {
        /// The model.
        model: String,
        /// The compiler's error.
        #[source]
        source: CompilerError,
    },
    /// The request's outputs do not match the model's.
    #[error("the model has {expected} outputs, the request gives {actual} buffers")]
    OutputCount {
        /// Outputs of the model.
        expected: usize,
        /// Buffers given.
        actual: usize,
    },
    /// A caller's buffer is too small for its tensor.
    #[error("{role} `{name}` needs {needed} bytes, the buffer has {actual}")]
    BufferTooSmall {
        /// `"input"` or `"output"`.
        role: &'static str,
        /// The tensor.
        name: String,
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        actual: usize,
    },
    /// A caller's output tensor has the wrong name, dtype or shape for this request.
    #[error("output `{output}` must have shape {expected:?}; the request gives `{}` {:?} {:?}", actual.0, actual.1, actual.2)]
    OutputShape {
        /// The model's output.
        output: String,
        /// The shape this request produces.
        expected: Vec<u64>,
        /// The caller's name, dtype and shape.
        actual: (String, saggar_shape::DType, Vec<u64>),
    },
    /// A device buffer not aligned for its element type.
    #[error(
        "{role} `{name}` is at device address {address:#x}, which is not aligned to its element size of {align} bytes"
    )]
    Misaligned {
        /// `"input"` or `"output"`.
        role: &'static str,
        /// The tensor.
        name: String,
        /// The address.
        address: u64,
        /// The element size.
        align: u64,
    },
    /// A binding index past the model's inputs or outputs.
    #[error("the model has {count} {role}s; there is no {role} {index}")]
    NoSuchTensor {
        /// `"input"` or `"output"`.
        role: &'static str,
        /// The index given.
        index: usize,
        /// How many there are.
        count: usize,
    },
    /// An invalid configuration.
    #[error("invalid session configuration: {0}")]
    Config(String),
    /// A program's output shape does not match the model's output spec.
    #[error("program for bucket {bucket:?} reports {actual} outputs, the model declares {expected}")]
    ProgramMismatch {
        /// The bucket.
        bucket: Option<u64>,
        /// Outputs the model declares.
        expected: usize,
        /// Outputs the program reports.
        actual: usize,
    },
}

/// Result with [`DispatchError`].
pub type Result<T, E = DispatchError> = std::result::Result<T, E>;
