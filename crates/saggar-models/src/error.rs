//! The errors of saggar-models.
//!
//! [`ModelError`] covers configs, weights, inputs, compile requests and device failures;
//! [`ArtifactError`] (saggar-dispatch's, shared by every step-program compiler) covers artifact bytes
//! that do not load. Both name what the caller can act on
//! (the field, the tensor with its expected and actual shape, the input). The compiler returns them
//! boxed as [`saggar_dispatch::CompilerError`]; `downcast_ref::<ModelError>()` recovers them.

pub use saggar_dispatch::steps::ArtifactError;
use saggar_dispatch::steps::LoadError;

/// What went wrong in saggar-models.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The config is not valid JSON, or does not have the fields of a model config.
    #[error("malformed model config: {source}")]
    ConfigJson {
        /// serde_json's description, with line and column.
        #[source]
        source: serde_json::Error,
    },
    /// The config parses but a value is out of range or inconsistent.
    #[error("invalid model config: `{field}` {reason}")]
    InvalidConfig {
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A file could not be read or written.
    #[error(transparent)]
    Io(#[from] saggar_dispatch::FileError),
    /// A safetensors file that the safetensors crate rejects (bad header, bad offsets).
    #[error("unreadable safetensors data: {source}")]
    Safetensors {
        /// The safetensors crate's description.
        #[source]
        source: safetensors::SafeTensorError,
    },
    /// A tensor the model needs is not in the safetensors file.
    #[error("safetensors file lacks tensor `{name}` (expected shape {expected:?}, f32)")]
    MissingTensor {
        /// The tensor's name.
        name: String,
        /// The shape the config expects.
        expected: Vec<usize>,
    },
    /// A tensor has a shape other than the one the config implies.
    #[error("tensor `{name}` has shape {actual:?}, but the model config expects {expected:?}")]
    TensorShape {
        /// The tensor's name.
        name: String,
        /// The shape the config expects.
        expected: Vec<usize>,
        /// The shape in the file.
        actual: Vec<usize>,
    },
    /// A tensor is not f32.
    #[error("tensor `{name}` has dtype {actual}, but saggar-models needs F32")]
    TensorDtype {
        /// The tensor's name.
        name: String,
        /// The dtype in the file.
        actual: String,
    },
    /// The safetensors file holds a tensor the model does not have (it is probably for another model).
    #[error("safetensors file holds tensor `{name}`, which this model config does not have")]
    UnexpectedTensor {
        /// The tensor's name.
        name: String,
    },
    /// Input data handed to the eager reference does not fit the model.
    #[error("input data: {reason}")]
    InputData {
        /// What does not fit.
        reason: String,
    },
    /// A compile request whose input dimensions do not fit the model.
    #[error("compile request does not fit model `{model}`: {reason}")]
    Request {
        /// The model's name.
        model: String,
        /// What does not fit.
        reason: String,
    },
    /// Artifact bytes that cannot be loaded.
    #[error("artifact: {0}")]
    Artifact(#[from] ArtifactError),
    /// A device operation failed (compiling, loading, uploading weights).
    #[error(transparent)]
    Device(#[from] saggar_device::Error),
}

impl From<LoadError> for ModelError {
    fn from(error: LoadError) -> ModelError {
        match error {
            LoadError::Artifact(e) => ModelError::Artifact(e),
            LoadError::Device(e) => ModelError::Device(e),
        }
    }
}

impl From<safetensors::SafeTensorError> for ModelError {
    fn from(source: safetensors::SafeTensorError) -> ModelError {
        ModelError::Safetensors { source }
    }
}
