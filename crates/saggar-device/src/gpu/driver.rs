//! The [`Driver`] trait: what a GPU vendor provides to the shared layer. Raw calls only, in the manner
//! of wgpu-hal's `Api`: handle types, `unsafe` entry points that turn one vendor call into a `Result`,
//! the mapping of vendor error codes onto [`DriverFault`], and the few hooks where the vendors really
//! differ (module images, kernel limits, graph updates). No pinning, no capture bookkeeping, no
//! deferred releases: those are the shared layer's, written once.

use std::cell::{Cell, RefCell};
use std::ffi::{CStr, c_void};
use std::fmt;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Weak};
use std::thread::LocalKey;

use parking_lot::Mutex;

use crate::api::CaptureStatus;
use crate::code::{CodeObject, KernelSource};
use crate::error::{Error, Result};
use crate::gpu::capture_registry::CaptureRegistry;
use crate::gpu::device::{DeviceShared, Release};
use crate::gpu::load_gate::LoadGate;

/// A release postponed during a capture: the device to run it on, the operation, the release.
pub(crate) type Postponed<D> = (Arc<DeviceShared<D>>, &'static str, Release);

/// A loaded module and, where the vendor may read it after loading, the image to keep with it.
pub type LoadedModule<M> = (M, Option<Box<[u8]>>);
use crate::gpu::graph::GraphInner;
use crate::gpu::launch::CapturedOp;
use crate::gpu::stream::StreamShared;
use crate::rules::{DeviceLimits, KernelLimits};
use crate::types::{BackendKind, CaptureMode, DeviceInfo, LaunchConfig};

pub use crate::gpu::capture_registry::DriverFault;

/// What a vendor error means to the shared layer, beyond [`DriverFault`]'s capture and fault classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The device (or host, for pinned memory) has not the memory.
    OutOfMemory,
    /// An event has not completed yet.
    NotReady,
    /// A kernel launch needs more registers or shared memory than the device has.
    LaunchOutOfResources,
    /// A kernel name the module does not define.
    NotFound,
    /// A code object this device cannot load.
    BadImage,
    /// Nothing the shared layer gives a meaning to beyond [`DriverFault`].
    Fault(DriverFault),
}

/// A device as the vendor opened it.
pub struct Opened<D: Driver> {
    /// What the device is.
    pub info: DeviceInfo,
    /// What it allows.
    pub limits: DeviceLimits,
    /// The vendor's own per-device state (CUDA: the retained primary context).
    pub state: D::DeviceState,
}

impl<D: Driver> fmt::Debug for Opened<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Opened").field("info", &self.info).field("state", &self.state).finish_non_exhaustive()
    }
}

/// How an executable-graph update failed.
#[derive(Debug)]
pub enum UpdateFailure {
    /// Refused before anything changed: the executable graph is as it was.
    Refused(String),
    /// Failed part way: the executable graph may hold a mix of old and new parameters and must be
    /// instantiated again from the graph it held before (HIP's update is not atomic).
    Partial(String),
    /// The driver call failed before changing anything; returned as it is.
    Failed(Error),
}

/// The per-backend globals of the shared layer, one `static` per driver (declared by `gpu_driver_statics!`).
pub struct Globals<D: Driver> {
    /// The captures of this backend.
    pub(crate) captures: CaptureRegistry<StreamShared<D>>,
    /// Captures against first launches of library code.
    pub(crate) loads: LoadGate,
    /// Releases postponed because they were requested where the driver forbids unsafe calls.
    pub(crate) postponed: Mutex<Vec<Postponed<D>>>,
    /// `postponed.len()`, readable without the lock.
    pub(crate) postponed_count: AtomicUsize,
    /// Destructor errors whose device is gone.
    pub(crate) orphaned: Mutex<Vec<Error>>,
}

impl<D: Driver> fmt::Debug for Globals<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Globals").field("kind", &D::KIND).finish_non_exhaustive()
    }
}

/// The thread-local list behind a backend's capture registry.
pub type ThreadCaptures<D> = RefCell<Vec<Weak<StreamShared<D>>>>;

impl<D: Driver> Globals<D> {
    /// The globals over a backend's thread-local capture list.
    pub const fn new(thread_captures: &'static LocalKey<ThreadCaptures<D>>) -> Self {
        Globals {
            captures: CaptureRegistry::new(thread_captures),
            loads: LoadGate::new(),
            postponed: Mutex::new(Vec::new()),
            postponed_count: AtomicUsize::new(0),
            orphaned: Mutex::new(Vec::new()),
        }
    }
}

/// Declares a driver's statics: its [`Globals`] and its per-thread cache of the current context or
/// device. Expands, inside `impl Driver for ..`, to [`Driver::globals`] and [`Driver::current_cache`].
/// The cache is returned as a path to its own `thread_local!`, not read from a static, so the launch
/// path's compare inlines to a thread-local load.
#[macro_export]
#[doc(hidden)]
macro_rules! gpu_driver_statics {
    ($driver:ty) => {
        fn globals() -> &'static $crate::gpu::Globals<$driver> {
            thread_local! {
                static THREAD_CAPTURES: $crate::gpu::ThreadCaptures<$driver> =
                    const { ::std::cell::RefCell::new(Vec::new()) };
            }
            static GLOBALS: $crate::gpu::Globals<$driver> = $crate::gpu::Globals::new(&THREAD_CAPTURES);
            &GLOBALS
        }

        #[inline(always)]
        fn current_cache()
        -> &'static ::std::thread::LocalKey<::std::cell::Cell<<$driver as $crate::gpu::Driver>::Current>> {
            thread_local! {
                static CURRENT: ::std::cell::Cell<<$driver as $crate::gpu::Driver>::Current> =
                    const { ::std::cell::Cell::new(<$driver as $crate::gpu::Driver>::NO_CURRENT) };
            }
            &CURRENT
        }
    };
}

/// A GPU vendor's raw calls. Every `unsafe fn` has the contract of the vendor call it wraps: the
/// handles it takes must be live, and the device of those handles current on the calling thread.
/// Every call returns the vendor's error as [`Error::Vendor`]; the shared layer reads it back with
/// [`Driver::classify`].
pub trait Driver: Sized + Send + Sync + 'static {
    /// Which backend this is.
    const KIND: BackendKind;
    /// Whether streams keep a list of the operations a capture enqueued, for
    /// [`Driver::update_exec`] (HIP's kernel-node updates). When false, a capture takes no extra lock.
    const RECORDS_CAPTURED_OPS: bool;
    /// What the per-thread cache of the current context or device holds before saggar made anything
    /// current on a thread.
    const NO_CURRENT: Self::Current;

    /// The vendor's per-device state, released on drop (CUDA: the primary-context retain).
    type DeviceState: Send + Sync + fmt::Debug;
    /// What is made current on a thread for a device (CUDA: a context; HIP: a device ordinal).
    type Current: Copy + PartialEq + 'static;
    /// A stream handle.
    type Stream: Copy + 'static;
    /// An event handle.
    type Event: Copy + 'static;
    /// A loaded module handle.
    type Module: Copy + 'static;
    /// A kernel (function) handle.
    type Function: Copy + 'static;
    /// A captured graph handle.
    type Graph: Copy + 'static;
    /// An executable graph handle.
    type GraphExec: Copy + 'static;
    /// What the vendor reads from a captured graph besides its node count (HIP: node handles and types).
    type GraphData: Send + Sync + 'static;

    /// This backend's globals (declared with `gpu_driver_statics!`).
    fn globals() -> &'static Globals<Self>;
    /// What saggar last made current on each thread ([`Driver::NO_CURRENT`]: nothing, or unknown).
    fn current_cache() -> &'static LocalKey<Cell<Self::Current>>;

    /// The vendor error codes the shared layer gives a meaning to, as [`Error::Vendor`] holds them;
    /// every other code is [`DriverFault::Other`].
    const ERROR_CLASSES: &'static [(i64, ErrorClass)];

    /// What a vendor error means to the shared layer (looked up in [`Driver::ERROR_CLASSES`]).
    #[cold]
    fn classify(error: &Error) -> ErrorClass {
        match error {
            Error::Vendor { backend, code, .. } if *backend == Self::KIND => Self::ERROR_CLASSES
                .iter()
                .find(|(c, _)| c == code)
                .map_or(ErrorClass::Fault(DriverFault::Other), |&(_, class)| class),
            _ => ErrorClass::Fault(DriverFault::Other),
        }
    }

    // Devices.

    /// The devices the vendor sees, or [`Error::BackendUnavailable`] with the reason it sees none.
    fn enumerate() -> Result<Vec<DeviceInfo>>;
    /// Opens device `ordinal` ([`Error::NoSuchDevice`] if it does not exist).
    fn open(ordinal: usize) -> Result<Opened<Self>>;
    /// What to make current for `state`'s device.
    fn current_of(state: &Self::DeviceState) -> Self::Current;
    /// What the vendor has current on this thread.
    fn get_current(op: &'static str) -> Result<Self::Current>;
    /// Makes `current` current on this thread.
    ///
    /// # Safety
    /// `current` must be live (a retained context; any device ordinal is sound).
    unsafe fn set_current(op: &'static str, current: Self::Current) -> Result<()>;
    /// Waits for all work of the current device.
    fn synchronize_device(op: &'static str) -> Result<()>;
    /// Free and total bytes of the current device.
    fn memory_info(op: &'static str) -> Result<(usize, usize)>;
    /// Compiles kernel source for `device` (NVRTC, hipRTC).
    fn compile(device: &DeviceShared<Self>, source: &KernelSource) -> Result<CodeObject>;

    // Memory.

    /// Allocates device memory on the current device.
    fn alloc(op: &'static str, bytes: usize) -> Result<u64>;
    /// Frees device memory.
    ///
    /// # Safety
    /// `ptr` came from [`Driver::alloc`] and is freed once.
    unsafe fn free(op: &'static str, ptr: u64) -> Result<()>;
    /// Allocates pinned host memory, usable by every device and mapped into the device's address space.
    fn alloc_host(op: &'static str, bytes: usize) -> Result<*mut c_void>;
    /// The current device's address of pinned host memory, for kernels that read and write it directly.
    ///
    /// # Safety
    /// `ptr` came from [`Driver::alloc_host`] and is not freed yet.
    unsafe fn device_pointer_of_host(op: &'static str, ptr: *mut c_void) -> Result<u64>;
    /// Frees pinned host memory.
    ///
    /// # Safety
    /// `ptr` came from [`Driver::alloc_host`] and is freed once.
    unsafe fn free_host(op: &'static str, ptr: *mut c_void) -> Result<()>;
    /// Enqueues a host-to-device copy.
    ///
    /// # Safety
    /// The stream is live; `src` stays readable and `dst` names device memory until the copy ran.
    unsafe fn copy_htod_async(
        op: &'static str,
        dst: u64,
        src: *const c_void,
        bytes: usize,
        stream: Self::Stream,
    ) -> Result<()>;
    /// Enqueues a device-to-host copy.
    ///
    /// # Safety
    /// The stream is live; `dst` stays writable and unaccessed by the host until the copy ran.
    unsafe fn copy_dtoh_async(
        op: &'static str,
        dst: *mut c_void,
        src: u64,
        bytes: usize,
        stream: Self::Stream,
    ) -> Result<()>;
    /// Enqueues a device-to-device copy.
    ///
    /// # Safety
    /// The stream is live.
    unsafe fn copy_dtod_async(op: &'static str, dst: u64, src: u64, bytes: usize, stream: Self::Stream) -> Result<()>;
    /// Enqueues a byte fill.
    ///
    /// # Safety
    /// The stream is live.
    unsafe fn memset_async(op: &'static str, dst: u64, value: u8, bytes: usize, stream: Self::Stream) -> Result<()>;

    // Streams.

    /// A non-blocking stream of the current device.
    fn stream_create(op: &'static str) -> Result<Self::Stream>;
    /// Destroys a stream (its pending work still runs).
    ///
    /// # Safety
    /// `stream` is live and not used afterwards.
    unsafe fn stream_destroy(op: &'static str, stream: Self::Stream) -> Result<()>;
    /// Blocks until the stream's work is done.
    ///
    /// # Safety
    /// `stream` is live.
    unsafe fn stream_synchronize(op: &'static str, stream: Self::Stream) -> Result<()>;
    /// Makes later work on `stream` wait for `event`.
    ///
    /// # Safety
    /// Both handles are live.
    unsafe fn stream_wait_event(op: &'static str, stream: Self::Stream, event: Self::Event) -> Result<()>;
    /// Begins a capture in `mode`.
    ///
    /// # Safety
    /// `stream` is live.
    unsafe fn begin_capture(op: &'static str, stream: Self::Stream, mode: CaptureMode) -> Result<()>;
    /// Ends a capture; `None` when the vendor returned no graph for a capture of no work.
    ///
    /// # Safety
    /// `stream` is live.
    unsafe fn end_capture(op: &'static str, stream: Self::Stream) -> Result<Option<Self::Graph>>;
    /// The vendor's capture status of a stream; `None` for a status saggar does not know.
    ///
    /// # Safety
    /// `stream` is live.
    unsafe fn capture_status(op: &'static str, stream: Self::Stream) -> Result<Option<CaptureStatus>>;

    // Events.

    /// An event of the current device, with or without timing.
    fn event_create(op: &'static str, timed: bool) -> Result<Self::Event>;
    /// Destroys an event.
    ///
    /// # Safety
    /// `event` is live and not used afterwards.
    unsafe fn event_destroy(op: &'static str, event: Self::Event) -> Result<()>;
    /// Records `event` on `stream`.
    ///
    /// # Safety
    /// Both handles are live.
    unsafe fn event_record(op: &'static str, event: Self::Event, stream: Self::Stream) -> Result<()>;
    /// Whether the event completed (never blocks).
    ///
    /// # Safety
    /// `event` is live.
    unsafe fn event_query(op: &'static str, event: Self::Event) -> Result<bool>;
    /// Blocks until the event completed.
    ///
    /// # Safety
    /// `event` is live.
    unsafe fn event_synchronize(op: &'static str, event: Self::Event) -> Result<()>;
    /// Milliseconds between two completed events.
    ///
    /// # Safety
    /// Both handles are live.
    unsafe fn event_elapsed_ms(op: &'static str, start: Self::Event, end: Self::Event) -> Result<f32>;

    // Modules and kernels.

    /// Loads a code object on the current device. Returns the module and, when the vendor may read the
    /// image after loading, the image to keep alive with it. Refuses formats and images the vendor
    /// cannot load with [`Error::CodeObject`].
    fn load_module(op: &'static str, code: &CodeObject) -> Result<LoadedModule<Self::Module>>;
    /// Unloads a module.
    ///
    /// # Safety
    /// `module` is live and not used afterwards.
    unsafe fn unload_module(op: &'static str, module: Self::Module) -> Result<()>;
    /// A kernel of a module by name.
    ///
    /// # Safety
    /// `module` is live.
    unsafe fn get_function(op: &'static str, module: Self::Module, name: &CStr) -> Result<Self::Function>;
    /// The limits a launch of `function` must keep: `device`'s, narrowed by the kernel's own.
    ///
    /// # Safety
    /// `function` belongs to a live module.
    unsafe fn kernel_limits(op: &'static str, function: Self::Function, device: &DeviceLimits) -> Result<KernelLimits>;
    /// What a kernel's module is called in [`Error::NoSuchKernel`].
    fn module_name(code: &CodeObject) -> String;
    /// The function handle as an address, for comparing captured launches.
    fn function_address(function: Self::Function) -> usize;
    /// Enqueues a kernel.
    ///
    /// # Safety
    /// `function` belongs to a live module and `stream` is live; `params` holds one pointer per kernel
    /// parameter, each to a value of the parameter's size, valid for the call; whatever the kernel does
    /// with its arguments is sound.
    unsafe fn launch_kernel(
        op: &'static str,
        function: Self::Function,
        config: &LaunchConfig,
        stream: Self::Stream,
        params: *mut *mut c_void,
    ) -> Result<()>;

    // BLAS-Lt.

    /// The vendor's BLAS-Lt library (cuBLASLt, hipBLASLt).
    const BLAS_LT: &'static crate::gpu::blas::LtSpec;
    /// A stream handle as the BLAS-Lt library takes it.
    fn blas_stream(stream: Self::Stream) -> *mut c_void;

    // Graphs.

    /// Reads a graph that a capture returned: its node count and whatever the vendor keeps of it.
    /// `ops` are the operations saggar recorded (empty unless [`Driver::RECORDS_CAPTURED_OPS`]).
    ///
    /// # Safety
    /// `graph` is live and used by no other thread.
    unsafe fn read_graph(
        op: &'static str,
        graph: Self::Graph,
        ops: Vec<CapturedOp>,
    ) -> Result<(usize, Self::GraphData)>;
    /// What an empty capture (no graph returned) keeps.
    fn empty_graph_data() -> Self::GraphData;
    /// Destroys a graph.
    ///
    /// # Safety
    /// `graph` is live and not used afterwards.
    unsafe fn graph_destroy(op: &'static str, graph: Self::Graph) -> Result<()>;
    /// Instantiates a graph.
    ///
    /// # Safety
    /// `graph` is live and used by no other thread during the call.
    unsafe fn graph_instantiate(op: &'static str, graph: Self::Graph) -> Result<Self::GraphExec>;
    /// Enqueues one replay.
    ///
    /// # Safety
    /// Both handles are live; `exec` is not launched or updated concurrently; every address baked into
    /// it is sound to use.
    unsafe fn graph_launch(op: &'static str, exec: Self::GraphExec, stream: Self::Stream) -> Result<()>;
    /// Destroys an executable graph (an in-flight one is freed on completion).
    ///
    /// # Safety
    /// `exec` is live and not used afterwards.
    unsafe fn graph_exec_destroy(op: &'static str, exec: Self::GraphExec) -> Result<()>;
    /// Brings `exec`, instantiated from `source` and holding `applied`'s parameters, to `new`'s
    /// parameters. Both graphs have the same node count (checked by the caller).
    ///
    /// # Safety
    /// `exec` is live and not launched concurrently (`&mut` upstream); the graphs are live.
    unsafe fn update_exec(
        op: &'static str,
        exec: Self::GraphExec,
        source: &GraphInner<Self>,
        applied: &GraphInner<Self>,
        new: &GraphInner<Self>,
    ) -> Result<(), UpdateFailure>;
}
