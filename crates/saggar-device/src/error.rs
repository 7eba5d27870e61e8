//! The one error type of saggar-device.
//!
//! Every variant names the operation that failed and what the caller can act on. Errors that come
//! from a vendor runtime keep the vendor's own name for the code (`CUDA_ERROR_OUT_OF_MEMORY`,
//! `hipErrorInvalidValue`) so they can be searched for in the vendor's documentation.

use crate::types::{BackendKind, DevicePtr, ParamKind};

/// What went wrong in saggar-device.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The backend cannot be used on this machine (no driver, no device, not built in).
    #[error("{backend} backend unavailable: {reason}")]
    BackendUnavailable {
        /// Which backend.
        backend: BackendKind,
        /// Why, in words a user can act on ("no CUDA driver found: libcuda.so could not be loaded").
        reason: String,
    },
    /// A device ordinal that does not exist.
    #[error("{backend} device {ordinal} does not exist: {count} device(s) found (valid ordinals 0..{count})")]
    NoSuchDevice {
        /// Which backend.
        backend: BackendKind,
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the backend sees.
        count: usize,
    },
    /// A vendor runtime call failed.
    #[error("{op} failed on {backend}: {name} ({code}): {message}")]
    Vendor {
        /// Which backend.
        backend: BackendKind,
        /// The saggar operation, e.g. `"stream.launch"`.
        op: &'static str,
        /// The vendor's own name of the error code.
        name: String,
        /// The numeric code.
        code: i64,
        /// The vendor's description.
        message: String,
    },
    /// An allocation of zero bytes, or of a size that overflows the address space.
    #[error("{op}: invalid size of {bytes} bytes: {reason}")]
    InvalidSize {
        /// The operation.
        op: &'static str,
        /// The size asked for.
        bytes: u128,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// The device does not have the memory.
    #[error("{op}: out of memory: {requested} bytes requested, {available} available")]
    OutOfMemory {
        /// The operation.
        op: &'static str,
        /// Bytes requested.
        requested: u64,
        /// Bytes still available.
        available: u64,
    },
    /// A range that does not fit inside the buffer it names.
    #[error("{op}: range {offset}..{offset}+{len} does not fit in a buffer of {capacity} bytes")]
    OutOfBounds {
        /// The operation.
        op: &'static str,
        /// Start of the range.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// Size of the buffer.
        capacity: u64,
    },
    /// Source and destination of a copy differ in length.
    #[error("{op}: source is {src} bytes but destination is {dst} bytes")]
    LengthMismatch {
        /// The operation.
        op: &'static str,
        /// Source length.
        src: u64,
        /// Destination length.
        dst: u64,
    },
    /// A device address that is not inside a live allocation (freed, never allocated, or past the end).
    /// Only the host backend can detect this; a GPU reports an illegal address instead, or nothing.
    #[error("{op}: device address {ptr} (+{len} bytes) is not inside a live allocation of device {ordinal}")]
    InvalidAddress {
        /// The operation.
        op: &'static str,
        /// The address.
        ptr: DevicePtr,
        /// The length accessed.
        len: u64,
        /// The device whose address space was searched.
        ordinal: usize,
    },
    /// An operation on one device while another device is pinned to this thread.
    #[error(
        "{op}: runs on {backend} device {expected} but device {current} is pinned to this thread; drop that device's pin guard first"
    )]
    WrongDevice {
        /// The operation.
        op: &'static str,
        /// Which backend.
        backend: BackendKind,
        /// The device the object belongs to.
        expected: usize,
        /// The device pinned to this thread.
        current: usize,
    },
    /// Objects of two different devices were mixed in one call.
    #[error("{op}: object of device {other} used with device {ordinal}")]
    DeviceMismatch {
        /// The operation.
        op: &'static str,
        /// The device doing the work.
        ordinal: usize,
        /// The device the foreign object belongs to.
        other: usize,
    },
    /// The kernel name is not in the module.
    #[error("kernel `{kernel}` is not in module `{module}` (it has: {available})")]
    NoSuchKernel {
        /// The kernel asked for.
        kernel: String,
        /// The module's name.
        module: String,
        /// The kernels it has, comma separated.
        available: String,
    },
    /// A launch with the wrong number of arguments.
    #[error("kernel `{kernel}` takes {expected} argument(s), {got} given")]
    ArgumentCount {
        /// The kernel.
        kernel: String,
        /// Parameters it declares.
        expected: usize,
        /// Arguments given.
        got: usize,
    },
    /// A launch argument of the wrong kind.
    #[error("kernel `{kernel}` argument {index}: expected {expected:?}, got {got:?}")]
    ArgumentKind {
        /// The kernel.
        kernel: String,
        /// Zero-based argument position.
        index: usize,
        /// The declared kind.
        expected: ParamKind,
        /// The given kind.
        got: ParamKind,
    },
    /// A launch configuration the device cannot run.
    #[error("kernel `{kernel}`: invalid launch configuration: {reason}")]
    InvalidLaunchConfig {
        /// The kernel.
        kernel: String,
        /// What is wrong.
        reason: String,
    },
    /// A host kernel reported a fault (the host backend's equivalent of a device-side trap).
    #[error("kernel `{kernel}` faulted: {message}")]
    KernelFault {
        /// The kernel.
        kernel: String,
        /// What it reported.
        message: String,
    },
    /// Runtime compilation failed; the log is the compiler's own.
    #[error("compiling `{name}` failed:\n{log}")]
    Compile {
        /// Name of the source.
        name: String,
        /// The compiler log.
        log: String,
    },
    /// A code object that this backend cannot load.
    #[error("code object: {reason}")]
    CodeObject {
        /// What is wrong with it.
        reason: String,
    },
    /// A call that is illegal while a stream capture is active (CUDA / HIP: `StreamCaptureUnsupported`).
    /// The capture it broke is invalidated and its `end_capture` fails.
    #[error("{op} is not allowed while stream capture is active ({mode}); the capture has been invalidated")]
    IllegalDuringCapture {
        /// The operation attempted.
        op: &'static str,
        /// The capture mode in force.
        mode: &'static str,
    },
    /// A capture that was invalidated by an illegal call; the graph is discarded.
    #[error("stream capture was invalidated by an earlier illegal call: {reason}")]
    CaptureInvalidated {
        /// The first illegal call.
        reason: String,
    },
    /// A capture-state error: ending a capture that never began, beginning one twice, ending it on the wrong thread.
    #[error("{op}: {reason}")]
    CaptureState {
        /// The operation.
        op: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// Launching or updating a graph that has been destroyed.
    #[error("{op}: the executable graph has been destroyed")]
    GraphDestroyed {
        /// The operation.
        op: &'static str,
    },
    /// An in-place graph update that the backend refused; the executable graph is unchanged and usable.
    #[error("graph update refused: {reason}; re-instantiate instead")]
    GraphUpdate {
        /// Why (topology changed, node kind changed, ...).
        reason: String,
    },
    /// The device can no longer run work: a sticky fault (an illegal address, an uncorrectable ECC
    /// error, a fallen-off-the-bus GPU, or the host backend's injected fault). Every later operation on
    /// it fails; the process must leave the device out (a session group routes around it).
    #[error("{backend} device {ordinal} is lost: {reason}; leave it out (--devices) or restart the process")]
    DeviceLost {
        /// Which backend.
        backend: BackendKind,
        /// The device.
        ordinal: usize,
        /// What happened.
        reason: String,
    },
    /// Work that failed asynchronously, reported at the next synchronisation point.
    #[error("asynchronous work on stream {stream} failed: {source}")]
    Async {
        /// The stream's id.
        stream: u64,
        /// The first failure.
        #[source]
        source: Box<Error>,
    },
    /// An event that has not been recorded, or whose timing is not available.
    #[error("{op}: {reason}")]
    Event {
        /// The operation.
        op: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// A vendor library loaded at run time (cuBLASLt, hipBLASLt) could not be loaded, or lacks a
    /// function saggar calls.
    #[error("{library} could not be loaded (tried: {}): {reason}; {hint}", tried.join(", "))]
    LibraryUnavailable {
        /// The library, e.g. `"cuBLASLt"`.
        library: &'static str,
        /// The file names or paths tried, in order (boxed: keeps the error as small as the vendor errors).
        tried: Box<[String]>,
        /// The loader's last answer.
        reason: String,
        /// What to install or set.
        hint: &'static str,
    },
    /// A matmul that no backend runs: a zero or oversized dimension, buffers smaller than the
    /// description needs, a bias missing or unexpected, too little workspace.
    #[error("matmul {m}x{n}x{k} (batch {batch}): {reason}")]
    InvalidMatmul {
        /// Rows of the output.
        m: u64,
        /// Columns of the output.
        n: u64,
        /// The inner dimension.
        k: u64,
        /// The batch count.
        batch: u64,
        /// What is wrong.
        reason: String,
    },
    /// Registering a host kernel under a name already taken by a different signature.
    #[error("host kernel `{name}` is already registered with a different signature")]
    KernelAlreadyRegistered {
        /// The name.
        name: String,
    },
}

/// Result with saggar-device's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Vendor errors after which CUDA or HIP leave the context unusable ("sticky" errors).
const STICKY_VENDOR_ERRORS: &[&str] = &[
    "CUDA_ERROR_ILLEGAL_ADDRESS",
    "CUDA_ERROR_LAUNCH_FAILED",
    "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    "CUDA_ERROR_MISALIGNED_ADDRESS",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    "CUDA_ERROR_INVALID_PC",
    "CUDA_ERROR_ASSERT",
    "CUDA_ERROR_ECC_UNCORRECTABLE",
    "CUDA_ERROR_CONTEXT_IS_DESTROYED",
    "hipErrorIllegalAddress",
    "hipErrorLaunchFailure",
    "hipErrorECCNotCorrectable",
    "hipErrorAssert",
    "hipErrorContextIsDestroyed",
];

impl Error {
    /// The error that is the root cause (unwraps [`Error::Async`]).
    pub fn root(&self) -> &Error {
        match self {
            Error::Async { source, .. } => source.root(),
            other => other,
        }
    }

    /// True when the device that returned this error can no longer run work: [`Error::DeviceLost`], or a
    /// vendor error that CUDA and HIP document as sticky (the context is unusable after it).
    pub fn is_device_lost(&self) -> bool {
        match self.root() {
            Error::DeviceLost { .. } => true,
            Error::Vendor { name, .. } => STICKY_VENDOR_ERRORS.contains(&name.as_str()),
            _ => false,
        }
    }

    /// True when the error means the backend or device is absent rather than broken.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::BackendUnavailable { .. } | Error::NoSuchDevice { .. })
    }
}
