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
    /// A name that is not one of the model's inputs or outputs.
    #[error("the model has no {role} named `{name}`; see Session::signature for its names")]
    NoSuchName {
        /// `"input"` or `"output"`.
        role: &'static str,
        /// The name given.
        name: String,
    },
    /// A typed view of a tensor whose element type has another size (or a stricter alignment).
    #[error(
        "{role} `{name}` holds {dtype:?} elements; a view of {element_bytes}-byte elements does not fit them: \
         use a type of the tensor's element size"
    )]
    ElementType {
        /// `"input"` or `"output"`.
        role: &'static str,
        /// The tensor.
        name: String,
        /// Its element type.
        dtype: saggar_shape::DType,
        /// The size of the element type asked for.
        element_bytes: usize,
    },
    /// A [`crate::Request`] for a batch no single bucket serves (requests are not split).
    #[error(
        "a Request serves batches 1 to {largest} (the largest bucket), not {batch}: split the batch into \
         several requests or use Session::run, which splits"
    )]
    RequestBatch {
        /// The batch asked for.
        batch: u64,
        /// The largest bucket (1 for a model without a batch axis).
        largest: u64,
    },
    /// A request's extent along the padded axis is above its largest bucket (the axis is never
    /// split).
    #[error(
        "`{symbol}` is {extent}, above its largest bucket {largest}: raise the padded axis's largest bucket or \
         shorten the request"
    )]
    PaddedAxisAboveLargest {
        /// The padded axis's symbol.
        symbol: String,
        /// The request's extent.
        extent: u64,
        /// The largest bucket of the axis.
        largest: u64,
    },
    /// A request on device buffers (or written in place) whose padded-axis extent is not a bucket:
    /// only host requests are padded along that axis.
    #[error(
        "`{symbol}` is {extent}, which is not a bucket of the padded axis (the next is {bucket}): pad device \
         tensors (or a request written in place) to a bucket with the session's pad values, or use Session::run \
         with host tensors"
    )]
    PaddedAxisNeedsHostTensors {
        /// The padded axis's symbol.
        symbol: String,
        /// The request's extent.
        extent: u64,
        /// The bucket it would be padded to.
        bucket: u64,
    },
    /// A [`crate::Request`] on a model served per shape, which has no precompiled program to
    /// write into, or one by batch alone on a model with a padded axis.
    #[error(
        "requests written in place need precompiled programs: a model compiled per shape has none (use \
         Session::run), and one with a padded axis is leased by its inputs' dimensions \
         (Session::request_shaped, at one of the axis's buckets)"
    )]
    RequestNeedsBuckets,
    /// A call that needs output extents before running ([`crate::Session::output_dims`], device
    /// tensors, requests written in place) on a segmented model ([`crate::Segments`]), whose output
    /// extents depend on values it computes.
    #[error(
        "the output extents of `{model}` depend on values it computes (it runs as {segments} segments): \
         use Session::run with host tensors, which returns outputs of the extents each request produces"
    )]
    ExtentsDependOnValues {
        /// The model.
        model: String,
        /// Its segment count.
        segments: usize,
    },
    /// A [`crate::Request`]'s outputs were read before a run of it succeeded.
    #[error("the request has no outputs: its last run failed or it has not run yet; call Request::run first")]
    RequestNotRun,
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
    /// A loaded program's output has a different element type or shape than the model declares
    /// for the program's input shapes. The artifact was evicted from the cache; the next session
    /// creation compiles it again.
    #[error(
        "program for bucket {bucket:?} produces output `{output}` as {actual}, the model declares {expected}; \
         the artifact was evicted from the cache"
    )]
    ProgramOutputMismatch {
        /// The bucket.
        bucket: Option<u64>,
        /// The model's output.
        output: String,
        /// What the model declares, e.g. `f32 [4, 16]` (symbolic dimensions by name when the input
        /// shapes do not bind them).
        expected: String,
        /// What the program reports.
        actual: String,
    },
    /// The request is larger than the session's [`crate::RequestLimits`]. Nothing was allocated
    /// or run for it.
    #[error(
        "the request needs {requested} {what}, above the session's limit of {limit}; send smaller requests or \
         raise the limit (SessionConfigBuilder::request_limits)"
    )]
    LimitExceeded {
        /// `"rows"` or `"bytes"`.
        what: &'static str,
        /// What the request's declared shapes need (`u64::MAX` when the count overflows).
        requested: u64,
        /// The configured limit.
        limit: u64,
    },
    /// A loop run at run time ([`crate::Repeat`]) reached its iteration limit with its condition still
    /// true: a `Loop` with no trip count whose condition never turns false, or a trip count beyond the
    /// limit.
    #[error(
        "the loop `{node}` ran {limit} iterations without its condition turning false (the limit for a loop \
         run at run time): check the inputs that decide its condition, or give the Loop a trip count"
    )]
    LoopIterations {
        /// The loop node's name.
        node: String,
        /// The iteration limit.
        limit: u64,
    },
    /// Every device of a [`crate::SessionGroup`] was lost (see [`DispatchError::is_device_lost`]).
    #[error(
        "all {devices} devices of the session group are lost: restart the process, leaving out the devices that \
         failed (see the earlier device errors)"
    )]
    NoDeviceLeft {
        /// The group's devices.
        devices: usize,
    },
    /// A run failed, and so did the synchronize of its stream that followed it (the stream may
    /// be broken; the device's own error is in `synchronize`).
    #[error("{error}; synchronizing the stream after it also failed: {synchronize}")]
    AfterFailedRun {
        /// The run's error.
        #[source]
        error: Box<DispatchError>,
        /// The error of the synchronize that followed.
        synchronize: saggar_device::Error,
    },
}

/// What kind of error a failed request met, as counted in [`crate::StatsSnapshot::failures`].
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// The request does not fit the model: names, dtypes, shapes, batch, buffer sizes or
    /// alignment, output count.
    Request,
    /// The request is above the session's [`crate::RequestLimits`].
    Limit,
    /// A device operation failed (including while staging or reading back).
    Device,
    /// A compile, a load or the compile cache failed (per-shape models compile on demand).
    Compile,
    /// Anything else (configuration, arena pool exhausted or timed out).
    Other,
}

impl DispatchError {
    /// The kind of this error, as counted in the session's stats.
    pub fn failure_kind(&self) -> FailureKind {
        match self {
            DispatchError::Shape(_)
            | DispatchError::OutputCount { .. }
            | DispatchError::BufferTooSmall { .. }
            | DispatchError::OutputShape { .. }
            | DispatchError::Misaligned { .. }
            | DispatchError::NoSuchTensor { .. }
            | DispatchError::NoSuchName { .. }
            | DispatchError::ElementType { .. }
            | DispatchError::RequestBatch { .. }
            | DispatchError::RequestNotRun => FailureKind::Request,
            DispatchError::LimitExceeded { .. } | DispatchError::LoopIterations { .. } => FailureKind::Limit,
            DispatchError::PaddedAxisAboveLargest { .. } | DispatchError::PaddedAxisNeedsHostTensors { .. } => {
                FailureKind::Request
            }
            DispatchError::Device(_) | DispatchError::NoDeviceLeft { .. } => FailureKind::Device,
            DispatchError::Arena(e) => match e {
                ArenaError::Device(_) => FailureKind::Device,
                ArenaError::Shape(_)
                | ArenaError::Count { .. }
                | ArenaError::InputTooShort { .. }
                | ArenaError::InputTooLarge { .. }
                | ArenaError::Output { .. }
                | ArenaError::Misaligned { .. } => FailureKind::Request,
                _ => FailureKind::Other,
            },
            DispatchError::Cache(_)
            | DispatchError::Compile { .. }
            | DispatchError::Load { .. }
            | DispatchError::ProgramMismatch { .. }
            | DispatchError::ProgramOutputMismatch { .. } => FailureKind::Compile,
            DispatchError::AfterFailedRun { error, .. } => error.failure_kind(),
            // The request asked for a path this model cannot take (the message names the one it can).
            DispatchError::ExtentsDependOnValues { .. } => FailureKind::Request,
            DispatchError::Config(_) | DispatchError::RequestNeedsBuckets => FailureKind::Other,
        }
    }
}

impl DispatchError {
    /// True when the device that ran the request can no longer run work (see
    /// `saggar_device::Error::is_device_lost`).
    pub fn is_device_lost(&self) -> bool {
        match self {
            DispatchError::Device(e) | DispatchError::Arena(ArenaError::Device(e)) => e.is_device_lost(),
            DispatchError::AfterFailedRun { error, synchronize } => {
                error.is_device_lost() || synchronize.is_device_lost()
            }
            DispatchError::NoDeviceLeft { .. } => true,
            _ => false,
        }
    }
}

/// Result with [`DispatchError`].
pub type Result<T, E = DispatchError> = std::result::Result<T, E>;

/// An I/O failure on one file: what was being done, the file, and the operating system's error.
/// Compilers use it for the model files they read and write.
#[derive(Debug, thiserror::Error)]
#[error("{op} `{}`: {source}", path.display())]
pub struct FileError {
    /// What was being done (`"reading model config"`, `"writing tensor file"`).
    pub op: &'static str,
    /// The file.
    pub path: std::path::PathBuf,
    /// The operating system's error.
    #[source]
    pub source: std::io::Error,
}

impl FileError {
    /// The error of doing `op` on `path`, for `map_err`: `std::fs::read(p).map_err(FileError::at("reading", p))`.
    pub fn at<'a>(op: &'static str, path: &'a std::path::Path) -> impl Fn(std::io::Error) -> FileError + Copy + 'a {
        move |source| FileError { op, path: path.to_path_buf(), source }
    }
}
