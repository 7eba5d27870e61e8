//! The errors of saggar-models.
//!
//! [`ModelError`] covers configs, weights, inputs, compile requests and device failures;
//! [`ArtifactError`] covers artifact bytes that do not load. Both name what the caller can act on
//! (the field, the tensor with its expected and actual shape, the input). The compiler returns them
//! boxed as [`saggar_dispatch::CompilerError`]; `downcast_ref::<ModelError>()` recovers them.

use std::path::PathBuf;

use saggar_device::BackendKind;

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
    #[error("{op} `{path}`: {source}")]
    Io {
        /// What was being done (`"reading model config"`, `"writing safetensors"`).
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
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

/// Why artifact bytes cannot be loaded. The layout is in `docs/models.md` and [`crate::artifact`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactError {
    /// Fewer bytes than the header or a length field promises.
    #[error("truncated: {needed} bytes needed for {what}, {available} available")]
    Truncated {
        /// The part being read.
        what: &'static str,
        /// Bytes needed from the start of that part.
        needed: u64,
        /// Bytes left.
        available: u64,
    },
    /// Not a saggar-models artifact.
    #[error("not a saggar-models artifact (bad magic)")]
    BadMagic,
    /// Made by a saggar-models with another artifact format.
    #[error("artifact format version {found} is not supported (this build reads version {supported})")]
    UnsupportedVersion {
        /// The version in the artifact.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The bytes were modified after they were written.
    #[error("checksum mismatch: the artifact is corrupted")]
    Checksum,
    /// Bytes after the checksum.
    #[error("{extra} unexpected trailing bytes")]
    TrailingBytes {
        /// How many.
        extra: u64,
    },
    /// A field holds a value no writer produces.
    #[error("malformed: {reason}")]
    Malformed {
        /// Which field and why.
        reason: String,
    },
    /// Compiled for another backend.
    #[error("compiled for the {artifact} backend, cannot load on {device}")]
    WrongBackend {
        /// The artifact's backend.
        artifact: BackendKind,
        /// The device's backend.
        device: BackendKind,
    },
    /// Compiled from another model architecture.
    #[error("compiled for model config {artifact}, but this compiler's config hashes to {compiler}")]
    ConfigMismatch {
        /// The artifact's config hash (hex).
        artifact: String,
        /// This compiler's config hash (hex).
        compiler: String,
    },
    /// Compiled for other input shapes or another bucket than the program being loaded.
    #[error("compiled for {artifact}, but loaded for {requested}; the cache key must include every input shape")]
    RequestMismatch {
        /// The input dimensions and bucket the artifact was compiled for.
        artifact: String,
        /// The input dimensions and bucket of the load.
        requested: String,
    },
    /// The embedded code object does not parse or lacks a kernel.
    #[error("code object: {reason}")]
    CodeObject {
        /// Why.
        reason: String,
    },
}

impl From<safetensors::SafeTensorError> for ModelError {
    fn from(source: safetensors::SafeTensorError) -> ModelError {
        ModelError::Safetensors { source }
    }
}
