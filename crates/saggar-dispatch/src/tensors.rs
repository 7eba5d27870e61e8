//! The tensors a request passes in and gets back.

use saggar_device::DeviceSlice;
use saggar_shape::DType;

/// An input in host memory.
#[derive(Debug, Clone, Copy)]
pub struct HostTensor<'a> {
    /// The model input's name.
    pub name: &'a str,
    /// Its element type.
    pub dtype: DType,
    /// Its extents, outermost first.
    pub dims: &'a [u64],
    /// Its bytes, row-major.
    pub data: &'a [u8],
}

impl AsRef<[u64]> for HostTensor<'_> {
    fn as_ref(&self) -> &[u64] {
        self.dims
    }
}

/// An input or output in device memory the caller owns.
#[derive(Debug, Clone, Copy)]
pub struct DeviceTensor<'a> {
    /// The model input's or output's name.
    pub name: &'a str,
    /// Its element type.
    pub dtype: DType,
    /// Its extents, outermost first.
    pub dims: &'a [u64],
    /// Its device memory.
    pub data: DeviceSlice,
}

impl AsRef<[u64]> for DeviceTensor<'_> {
    fn as_ref(&self) -> &[u64] {
        self.dims
    }
}

/// An output returned by [`crate::Session::run`].
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedTensor {
    /// The model output's name.
    pub name: String,
    /// Its element type.
    pub dtype: DType,
    /// Its extents (the request's real batch on the batch axis).
    pub dims: Vec<u64>,
    /// Its bytes.
    pub data: Vec<u8>,
}

/// Which run path served a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunPath {
    /// Same symbolic dimensions, binding mode and actual batch as the context's last run: rebind and
    /// launch or replay.
    UltraFast,
    /// A program was ready for the bucket or shape: bind (padding where needed), launch or replay.
    Fast,
    /// Full validation by name, and possibly a compile for a new shape.
    Standard,
}

/// How a request's tensors were bound, and which graph entries it may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BindingMode {
    /// Host tensors gathered into the run context's pinned staging buffer, one copy in, program on the
    /// arena's stable slots, one copy out. The graph holds the copies and the program.
    PinnedCopy,
    /// The caller's device pointers baked into the graph and checked on every run (pointer drift).
    DirectBind,
    /// The caller's device tensors copied into persistent arena slots before replay and results
    /// copied back after (XLA's address stabilization), so the graph never drifts.
    Stabilized,
}

/// What one request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunInfo {
    /// The path that served it.
    pub path: RunPath,
    /// The binding mode.
    pub mode: BindingMode,
    /// The request's batch (rows on the batch axis), if the model has one.
    pub batch: Option<u64>,
    /// The bucket of the (first) chunk.
    pub bucket: Option<u64>,
    /// Chunks the request was split into (1 when not split).
    pub chunks: u32,
    /// Whether a graph was replayed for every chunk.
    pub replayed: bool,
}
