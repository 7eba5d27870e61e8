//! The program compiler a user plugs into the dispatcher.
//!
//! saggar does not compile models itself. A downstream project supplies a [`ProgramCompiler`]: it
//! compiles its model for concrete input shapes to artifact bytes (MIGraphX, its own code generator,
//! saggar's reference compiler in `saggar-models`), and loads artifact bytes into a [`Program`] that
//! enqueues work on a stream. The dispatcher decides when to compile (at session creation, once per
//! bucket, through saggar-cache), when to load, and how to bind, capture and replay.

use std::collections::BTreeMap;

use saggar_cache::ModelHash;
use saggar_device::{Backend, DeviceSlice};
use saggar_shape::TensorSpec;

/// An error from a user's compiler, boxed so any error type fits.
pub type CompilerError = Box<dyn std::error::Error + Send + Sync>;

/// A model as the dispatcher sees it: named, typed inputs and outputs, each dimension fixed or
/// symbolic. Inputs and outputs are in the program's binding order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelSpec {
    /// The model's name (for logs and cache listings).
    pub name: String,
    /// Inputs in binding order.
    pub inputs: Vec<TensorSpec>,
    /// Outputs in binding order.
    pub outputs: Vec<TensorSpec>,
    /// Inputs whose values, not only their shapes, fix the program (a `shape`, `axes` or `k` tensor
    /// given as a model input), by binding index. A session serves such a model a program per
    /// shape and values (the values are part of the key: a bounded table, with graphs), reads them
    /// from host memory (device requests: one copy to the host, counted), and hands them to
    /// [`ProgramCompiler::compile`] and [`ProgramCompiler::load`] in [`CompileRequest::input_values`].
    pub value_inputs: Vec<usize>,
    /// Served a program per shape, never from buckets, whatever its leading axes look like (a
    /// loop body's carried values have leading axes that are no batch: padding them would change
    /// the loop's results).
    pub per_shape: bool,
}

impl ModelSpec {
    /// A model named `name` with `inputs` and `outputs` in binding order.
    pub fn new(name: impl Into<String>, inputs: Vec<TensorSpec>, outputs: Vec<TensorSpec>) -> ModelSpec {
        ModelSpec { name: name.into(), inputs, outputs, value_inputs: Vec::new(), per_shape: false }
    }

    /// The model served a program per shape or not ([`ModelSpec::per_shape`]).
    pub fn with_per_shape(mut self, per_shape: bool) -> ModelSpec {
        self.per_shape = per_shape;
        self
    }

    /// The model with `inputs` (binding indices) as [`ModelSpec::value_inputs`].
    pub fn with_value_inputs(mut self, inputs: Vec<usize>) -> ModelSpec {
        self.value_inputs = inputs;
        self
    }
}

/// Most bytes of one value input ([`ModelSpec::value_inputs`]) a request may carry: the values are
/// hashed into the program key and copied to the host from device requests.
pub const MAX_VALUE_INPUT_BYTES: usize = 64 << 10;

/// Everything besides shapes and the device that changes generated code; part of the cache key.
///
/// ```
/// use saggar_dispatch::{CompilerIdentity, ModelHash};
///
/// let identity = CompilerIdentity::new("my-compiler", "1.0.0", ModelHash::of_bytes(b"model file"))
///     .with_option("fp16", "true");
/// assert_eq!(identity.options["fp16"], "true");
/// // A bad hash fails where it is given, not when the first cache key is built.
/// assert!(ModelHash::parse("not a hash").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompilerIdentity {
    /// The compiler's name, e.g. `"saggar-models"` or `"migraphx"`.
    pub compiler: String,
    /// The compiler's version.
    pub version: String,
    /// A content hash of the model (weights included if they are baked into the code).
    pub model_hash: ModelHash,
    /// Options that change generated code.
    pub options: BTreeMap<String, String>,
}

impl CompilerIdentity {
    /// The identity of `compiler` at `version` compiling the model whose content hash is
    /// `model_hash`, with no options.
    pub fn new(compiler: impl Into<String>, version: impl Into<String>, model_hash: ModelHash) -> CompilerIdentity {
        CompilerIdentity { compiler: compiler.into(), version: version.into(), model_hash, options: BTreeMap::new() }
    }

    /// Adds (or replaces) an option that changes generated code. Options that do not change the
    /// code must stay out: they would only split the cache.
    pub fn with_option(mut self, name: impl Into<String>, value: impl Into<String>) -> CompilerIdentity {
        self.options.insert(name.into(), value.into());
        self
    }
}

/// What one compile is for. [`ProgramCompiler::load`] receives the same request as the compile
/// that made the artifact, so an artifact needs no framing of its own to know its shapes.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct CompileRequest<'a> {
    /// Concrete input dimensions, in binding order.
    pub input_dims: &'a [Vec<u64>],
    /// The batch bucket this program serves, when the model is batch-bucketed.
    pub bucket: Option<u64>,
    /// The values of the model's [`ModelSpec::value_inputs`] this program is made for: binding
    /// index and little-endian bytes, in the order of `value_inputs` (empty for other models).
    pub input_values: &'a [(usize, Vec<u8>)],
}

impl<'a> CompileRequest<'a> {
    /// A request for `input_dims` (binding order), serving `bucket` if the model is batch-bucketed.
    pub fn new(input_dims: &'a [Vec<u64>], bucket: Option<u64>) -> CompileRequest<'a> {
        CompileRequest { input_dims, bucket, input_values: &[] }
    }

    /// The request for a program made for these values of the model's value inputs.
    pub fn with_input_values(mut self, values: &'a [(usize, Vec<u8>)]) -> CompileRequest<'a> {
        self.input_values = values;
        self
    }
}

/// What a compiler declares about itself, so the dispatcher can compile less and in parallel.
/// The default declares nothing: one compile at a time per process, one artifact per bucket.
///
/// ```
/// use saggar_dispatch::CompilerCapabilities;
///
/// let caps = CompilerCapabilities::default().with_thread_safe(true).with_one_artifact_per_model(true);
/// assert!(caps.thread_safe && caps.one_artifact_per_model);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CompilerCapabilities {
    /// [`ProgramCompiler::compile`] may run on several threads at once (for different shapes). The
    /// dispatcher then compiles a session's cache misses in parallel (up to
    /// [`crate::SessionConfigBuilder::compile_threads`] at once) and takes only the key's own locks,
    /// not the process-wide compile lock.
    pub thread_safe: bool,
    /// One artifact serves every bucket of the model (every cell of a grid with a padded axis): its
    /// code takes the batch (and the padded extent) as arguments. The
    /// dispatcher compiles it once per model (one cache entry, keyed by [`crate::model_cache_key`])
    /// and loads it once per bucket with that bucket's request; graphs are still per bucket.
    pub one_artifact_per_model: bool,
}

impl CompilerCapabilities {
    /// Whether [`ProgramCompiler::compile`] may run on several threads at once.
    pub fn with_thread_safe(mut self, thread_safe: bool) -> Self {
        self.thread_safe = thread_safe;
        self
    }

    /// Whether one artifact serves every bucket of the model.
    pub fn with_one_artifact_per_model(mut self, one: bool) -> Self {
        self.one_artifact_per_model = one;
        self
    }
}

/// Compiles a model and loads compiled artifacts on a device.
///
/// # The contract
/// - **When.** The dispatcher compiles at session creation (every bucket, or one program for a
///   static model) and, for models with symbolic dimensions besides the batch, on the first request
///   of each new shape. Lookups go through the session's compile cache when it has one: memory,
///   disk, then a compile, published for other sessions and processes.
/// - **Locks.** Compiles of one cache key never overlap (the cache's per-key and cross-process
///   locks; without a cache, each shape has one lock in the session). Unless the compiler declares
///   [`CompilerCapabilities::thread_safe`], every compile also holds saggar's process-wide compile
///   lock, with or without a cache, so at most one runs in the process at a time.
/// - **One artifact per model.** A compiler that declares
///   [`CompilerCapabilities::one_artifact_per_model`] is asked to compile once per model, with the
///   largest bucket's request (the batch in `input_dims` is that bucket's, and `bucket` says so;
///   with a [`crate::PaddedAxis`], the largest cell of the grid), and must return an artifact that
///   [`ProgramCompiler::load`] accepts with every bucket's request, including the grid cells live
///   re-bucketing adds later. Per-shape programs (models with other symbolic dimensions) are still
///   compiled per shape.
/// - **Loads** run on several threads at once, each pinned to the session's device.
///
/// # Thread safety
/// `Send + Sync`: the dispatcher loads artifacts from several threads at once (parallel disk loads)
/// and calls [`ProgramCompiler::compile`] from one thread at a time per process, or from several
/// when the compiler declares itself thread-safe.
pub trait ProgramCompiler<B: Backend>: Send + Sync + 'static {
    /// The loaded program type.
    type Program: Program<B>;

    /// The model.
    fn model(&self) -> &ModelSpec;

    /// What identifies the generated code besides shapes and device.
    fn identity(&self) -> CompilerIdentity;

    /// What this compiler declares about itself (see [`CompilerCapabilities`]); by default nothing.
    fn capabilities(&self) -> CompilerCapabilities {
        CompilerCapabilities::default()
    }

    /// The chain of segments this model runs as when some of its extents depend on values it
    /// computes ([`crate::Segments`]); `None`, the default, for a model one program runs.
    fn segments(&self) -> Option<crate::Segments<Self>>
    where
        Self: Sized,
    {
        None
    }

    /// Compiles the model for `request` on `device`'s architecture, returning artifact bytes.
    fn compile(&self, device: &B::Device, request: &CompileRequest<'_>) -> Result<Vec<u8>, CompilerError>;

    /// Loads artifact bytes made by [`ProgramCompiler::compile`] for `request` (possibly in another
    /// process, or on another device of the same architecture) into a program on `device`.
    ///
    /// The artifact comes from the cache, whose entries are integrity-checked but may have been
    /// written by another version of this compiler only if [`ProgramCompiler::identity`] did not
    /// change: treat its bytes as untrusted input and fail with an error, never a panic.
    fn load(
        &self,
        device: &B::Device,
        request: &CompileRequest<'_>,
        artifact: &[u8],
    ) -> Result<Self::Program, CompilerError>;
}

/// A loaded program for one concrete input shape (one bucket).
///
/// # Thread safety
/// `Send + Sync`: one program serves concurrent requests, each with its own stream, bindings and
/// scratch memory; a program must keep no per-run state of its own.
pub trait Program<B: Backend>: Send + Sync + 'static {
    /// Concrete output dimensions, in binding order.
    fn output_dims(&self) -> &[Vec<u64>];

    /// The element type of each output, in binding order, when the program knows them. A session
    /// checks them (and [`Program::output_dims`]) against the model when it loads the program; a
    /// mismatch is [`crate::DispatchError::ProgramOutputMismatch`] and evicts the artifact.
    fn output_dtypes(&self) -> Option<&[saggar_shape::DType]> {
        None
    }

    /// Bytes of scratch device memory one run needs (temporaries between kernels).
    fn scratch_bytes(&self) -> usize;

    /// Enqueues one run on `stream`. `inputs` and `outputs` are in binding order and each holds at
    /// least the bytes of its concrete shape; `scratch` holds [`Program::scratch_bytes`]. The launch
    /// may be captured into a graph, so it must only enqueue work: no synchronisation, no allocation.
    ///
    /// # Safety
    /// Every slice must name live device memory of at least its stated length until the stream has
    /// passed the work, and no other work may write `outputs` or `scratch` meanwhile.
    unsafe fn launch(
        &self,
        stream: &B::Stream,
        inputs: &[DeviceSlice],
        outputs: &[DeviceSlice],
        scratch: DeviceSlice,
    ) -> Result<(), saggar_device::Error>;
}
