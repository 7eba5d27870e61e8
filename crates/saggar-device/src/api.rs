//! The backend-neutral API: a [`Backend`] trait with only associated types, in the manner of
//! wgpu-hal, and one trait per object kind.
//!
//! Code above saggar-device is generic over `B: Backend` (static dispatch: no virtual call on the launch
//! path). A program that picks its backend at run time matches on [`crate::BackendKind`] once and
//! calls a generic function with the chosen type (see [`crate::visit_backend`]).
//!
//! # Safety contract of asynchronous work
//! Work enqueued on a stream runs later. The calls that let the device read or write **host** memory
//! asynchronously ([`Stream::copy_h2d_async`], [`Stream::copy_d2h_async`]) and the calls that run
//! arbitrary device code or replay baked addresses ([`Stream::launch`], [`Stream::launch_graph`]) are
//! `unsafe`: the caller promises that every address they touch stays allocated, and that the host does
//! not access a pinned range the device is reading or writing, until the stream has passed the
//! operation (a [`Stream::synchronize`] or an [`Event`] recorded after it). Calls that only touch
//! device memory through checked [`DeviceSlice`]s, or that block until done ([`Stream::upload`],
//! [`Stream::download`]), are safe.

use std::fmt;
use std::time::Duration;

use crate::code::{CodeObject, KernelSource};
use crate::error::Result;
use crate::pinning::PinGuard;
use crate::types::{
    BackendKind, CaptureMode, DeviceInfo, DevicePtr, DeviceSlice, KernelArg, KernelSignature, LaunchConfig, MemoryInfo,
};

/// A backend: a family of associated object types. Never instantiated.
pub trait Backend: Sized + Send + Sync + fmt::Debug + 'static {
    /// Which backend this is.
    const KIND: BackendKind;
    /// An opened device (a cheap, cloneable handle).
    type Device: Device<Backend = Self>;
    /// An in-order queue of device work.
    type Stream: Stream<Backend = Self>;
    /// A marker in a stream's work, for ordering and timing.
    type Event: Event;
    /// Device memory, freed on drop.
    type DeviceBuffer: DeviceBuffer;
    /// Page-locked host memory the device can copy to and from asynchronously, freed on drop.
    type PinnedBuffer: PinnedBuffer;
    /// Loaded code.
    type Module: Module<Backend = Self>;
    /// A kernel of a loaded module.
    type Kernel: Kernel;
    /// A captured graph (not yet executable).
    type Graph: Graph;
    /// An executable graph.
    type GraphExec: GraphExec<Backend = Self>;
    /// A BLAS-Lt handle (cuBLASLt, hipBLASLt, or the host's own GEMM).
    type Blas: crate::blas::Blas<Backend = Self>;

    /// The devices this backend sees, or [`crate::Error::BackendUnavailable`] with the reason it sees none.
    fn enumerate() -> Result<Vec<DeviceInfo>>;

    /// Opens device `ordinal`.
    fn open(ordinal: usize) -> Result<Self::Device>;
}

/// An opened device.
///
/// # Thread safety
/// A device handle is `Send + Sync` and cheap to clone; every clone names the same device.
pub trait Device: Clone + Send + Sync + fmt::Debug {
    /// The backend.
    type Backend: Backend<Device = Self>;

    /// What the device is.
    fn info(&self) -> &DeviceInfo;

    /// Pins this device to the calling thread until the guard drops: it becomes the current device,
    /// and any operation on an object of another device fails with [`crate::Error::WrongDevice`]
    /// instead of silently running on the wrong GPU. Guards nest.
    fn pin(&self) -> Result<PinGuard>;

    /// Free and total memory.
    fn memory_info(&self) -> Result<MemoryInfo>;

    /// A new stream.
    fn create_stream(&self) -> Result<<Self::Backend as Backend>::Stream>;

    /// A new event (with timing enabled).
    fn create_event(&self) -> Result<<Self::Backend as Backend>::Event>;

    /// A new event for ordering and waiting only: timing disabled, so recording it costs less (about
    /// 1 us less per record on an H200: no timestamp is written). [`Event::elapsed_since`] with it
    /// fails with [`crate::Error::Event`]. Use it for fences.
    fn create_untimed_event(&self) -> Result<<Self::Backend as Backend>::Event>;

    /// `bytes` of device memory. Zero bytes and sizes past the address space are errors.
    fn alloc(&self, bytes: usize) -> Result<<Self::Backend as Backend>::DeviceBuffer>;

    /// `bytes` of pinned host memory.
    fn alloc_pinned(&self, bytes: usize) -> Result<<Self::Backend as Backend>::PinnedBuffer>;

    /// Compiles kernel source for this device (NVRTC, hipRTC, or a host-kernel plan).
    fn compile(&self, source: &KernelSource) -> Result<CodeObject>;

    /// Loads a code object.
    fn load_module(&self, code: &CodeObject) -> Result<<Self::Backend as Backend>::Module>;

    /// A BLAS-Lt handle of this device with `config`'s workspace size: loads the vendor library
    /// ([`crate::Error::LibraryUnavailable`] if it cannot be loaded) and creates its context. Allocates
    /// nothing on the device (the workspace is passed with each call), but is illegal during capture
    /// on the capturing thread, like every call that may load or initialise a library.
    fn create_blas(&self, config: &crate::blas::BlasConfig) -> Result<<Self::Backend as Backend>::Blas>;

    /// Makes a captured graph executable.
    fn instantiate(&self, graph: &<Self::Backend as Backend>::Graph) -> Result<<Self::Backend as Backend>::GraphExec>;

    /// Waits for all work on the device.
    fn synchronize(&self) -> Result<()>;

    /// Errors met while dropping objects of this device (a failed free, a failed destroy), oldest
    /// first. Destructors cannot return errors; they record them here instead of swallowing them.
    fn take_deferred_errors(&self) -> Vec<crate::Error>;
}

/// Whether a stream is capturing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureStatus {
    /// Work runs.
    Idle,
    /// Work is recorded into a graph.
    Active,
    /// A capture is active but an illegal call broke it; `end_capture` will fail.
    Invalidated,
}

/// An in-order queue of device work.
///
/// # Thread safety
/// A stream may be shared between threads (`Sync`); work enqueued from several threads runs in the
/// order the enqueue calls returned. Stream capture in [`CaptureMode::ThreadLocal`] or
/// [`CaptureMode::Global`] must begin and end on the same thread (the CUDA and HIP rule).
pub trait Stream: Send + Sync + fmt::Debug {
    /// The backend.
    type Backend: Backend<Stream = Self>;

    /// The device this stream belongs to.
    fn device_ordinal(&self) -> usize;

    /// Enqueues a copy of `dst.len()` bytes from `src[src_offset..]` to device memory.
    ///
    /// # Safety
    /// `dst` must name live device memory, and `src` must stay allocated and unwritten by the host
    /// until the stream has passed this copy (see the module docs).
    unsafe fn copy_h2d_async(
        &self,
        src: &<Self::Backend as Backend>::PinnedBuffer,
        src_offset: usize,
        dst: DeviceSlice,
    ) -> Result<()>;

    /// Enqueues a copy of `src.len()` bytes from device memory to `dst[dst_offset..]`.
    ///
    /// # Safety
    /// `src` must name live device memory, and `dst` must stay allocated and unaccessed by the host
    /// until the stream has passed this copy.
    unsafe fn copy_d2h_async(
        &self,
        src: DeviceSlice,
        dst: &<Self::Backend as Backend>::PinnedBuffer,
        dst_offset: usize,
    ) -> Result<()>;

    /// Enqueues a device-to-device copy. The lengths must match.
    fn copy_d2d(&self, src: DeviceSlice, dst: DeviceSlice) -> Result<()>;

    /// Enqueues setting every byte of `dst` to `value`.
    fn memset(&self, dst: DeviceSlice, value: u8) -> Result<()>;

    /// Copies pageable host bytes to the device and waits until done. Illegal during capture.
    fn upload(&self, src: &[u8], dst: DeviceSlice) -> Result<()>;

    /// Copies device bytes to pageable host memory and waits until done. Illegal during capture.
    fn download(&self, src: DeviceSlice, dst: &mut [u8]) -> Result<()>;

    /// Enqueues a kernel launch. Arguments are checked against the kernel's signature and the launch
    /// configuration against the device's limits before anything is enqueued.
    ///
    /// # Safety
    /// The kernel is arbitrary device code: every pointer argument must name live device memory that
    /// is large enough for what the kernel does with it, until the stream has passed the launch.
    unsafe fn launch(
        &self,
        kernel: &<Self::Backend as Backend>::Kernel,
        config: &LaunchConfig,
        args: &[KernelArg],
    ) -> Result<()>;

    /// Enqueues one replay of an executable graph.
    ///
    /// # Safety
    /// The graph replays the addresses it was captured (or last updated) with: every one must still
    /// name live memory of the right size. Replaying after a captured buffer was freed reads or writes
    /// whatever now lives at that address.
    unsafe fn launch_graph(&self, exec: &<Self::Backend as Backend>::GraphExec) -> Result<()>;

    /// Records `event` after the work enqueued so far.
    fn record(&self, event: &<Self::Backend as Backend>::Event) -> Result<()>;

    /// Makes later work on this stream wait for `event`.
    fn wait(&self, event: &<Self::Backend as Backend>::Event) -> Result<()>;

    /// Blocks until all enqueued work is done; reports the first asynchronous failure since the last
    /// synchronisation. Illegal on a capturing stream.
    fn synchronize(&self) -> Result<()>;

    /// Starts recording work into a graph instead of running it.
    fn begin_capture(&self, mode: CaptureMode) -> Result<()>;

    /// Stops recording and returns the graph. Fails if no capture is active or if it was invalidated.
    fn end_capture(&self) -> Result<<Self::Backend as Backend>::Graph>;

    /// Whether the stream is capturing.
    fn capture_status(&self) -> CaptureStatus;
}

/// A marker in a stream.
pub trait Event: Send + Sync + fmt::Debug {
    /// Blocks until the work before the last record is done.
    fn synchronize(&self) -> Result<()>;
    /// Whether the work before the last record is done (never blocks).
    fn is_complete(&self) -> Result<bool>;
    /// Time between `start` completing and `self` completing. Both must have been recorded and be done.
    fn elapsed_since(&self, start: &Self) -> Result<Duration>;
}

/// Device memory, freed on drop.
///
/// # Thread safety
/// `Send + Sync`: the handle is only an address; the memory behind it is ordered by streams.
pub trait DeviceBuffer: Send + Sync + fmt::Debug {
    /// The first address.
    fn ptr(&self) -> DevicePtr;
    /// The size in bytes.
    fn len(&self) -> usize;
    /// Always false: zero-sized buffers cannot be allocated.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The whole buffer as a slice.
    fn as_slice(&self) -> DeviceSlice {
        DeviceSlice::from_raw(self.ptr(), self.len())
    }
    /// The range `offset..offset + len`, bounds-checked.
    fn slice(&self, offset: usize, len: usize) -> Result<DeviceSlice> {
        self.as_slice().sub(offset, len)
    }
}

/// Pinned host memory, freed on drop.
///
/// # Thread safety
/// `Send + Sync`. Host access through [`PinnedBuffer::as_slice`] / [`PinnedBuffer::as_mut_slice`] must
/// not overlap an asynchronous copy that uses the same range; that is the caller's promise when it
/// enqueues the copy (the copy functions are `unsafe`).
pub trait PinnedBuffer: Send + Sync + fmt::Debug {
    /// The size in bytes.
    fn len(&self) -> usize;
    /// Always false: zero-sized buffers cannot be allocated.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The bytes, for reading on the host.
    fn as_slice(&self) -> &[u8];
    /// The bytes, for writing on the host.
    fn as_mut_slice(&mut self) -> &mut [u8];
    /// The buffer's address in the allocating device's address space, where that device's kernels
    /// read and write it directly, with no copy engine (mapped pinned memory); `None` where the
    /// backend could not map it. A kernel's access is asynchronous device access like a copy's: the
    /// host must not touch the range until the stream has passed the kernel.
    fn device_ptr(&self) -> Option<DevicePtr>;
    /// The whole buffer as a device range ([`PinnedBuffer::device_ptr`]), for kernel arguments.
    fn device_slice(&self) -> Option<DeviceSlice> {
        self.device_ptr().map(|ptr| DeviceSlice::from_raw(ptr, self.len()))
    }
}

/// A loaded module.
pub trait Module: Send + Sync + fmt::Debug {
    /// The backend.
    type Backend: Backend<Module = Self>;
    /// A kernel by name; [`crate::Error::NoSuchKernel`] if the module lacks it.
    fn kernel(&self, name: &str) -> Result<<Self::Backend as Backend>::Kernel>;
}

/// A kernel handle; it keeps its module loaded.
pub trait Kernel: Clone + Send + Sync + fmt::Debug {
    /// The kernel's signature.
    fn signature(&self) -> &KernelSignature;
    /// The kernel's name.
    fn name(&self) -> &str {
        &self.signature().name
    }
}

/// A captured graph.
pub trait Graph: Send + fmt::Debug {
    /// How many operations (nodes) it holds. An empty capture has zero and is valid.
    fn node_count(&self) -> usize;
}

/// An executable graph.
///
/// # Thread safety
/// `Send + Sync`; a replay may be enqueued from any thread. Updating needs `&mut`, so it cannot race a
/// launch being enqueued.
pub trait GraphExec: Send + Sync + fmt::Debug {
    /// The backend.
    type Backend: Backend<GraphExec = Self>;

    /// Updates this executable graph in place from a newly captured graph of the same topology (same
    /// node kinds in the same order; parameters, pointers included, may differ). On refusal
    /// ([`crate::Error::GraphUpdate`]) the executable graph is unchanged and still usable.
    fn update(&mut self, graph: &<Self::Backend as Backend>::Graph) -> Result<()>;

    /// Frees the executable graph now and reports any error; later launches fail with
    /// [`crate::Error::GraphDestroyed`]. Dropping also destroys, recording errors on the device.
    fn destroy(&mut self) -> Result<()>;

    /// Whether [`GraphExec::destroy`] ran.
    fn is_destroyed(&self) -> bool;

    /// Device memory this executable graph holds, in bytes, as measured when it was instantiated.
    ///
    /// GPU backends measure it: the drop in the device's free memory across the instantiation
    /// (`cuMemGetInfo` / `hipMemGetInfo` before and after). The driver allocates graph memory in
    /// pages, so small graphs often read as 0 and larger ones as whole pages, and an allocation or
    /// free by another thread during the instantiation shows up in the figure; it is the driver's
    /// account, not an estimate from the node count. The host backend, which has no driver, models
    /// it as [`HOST_GRAPH_NODE_BYTES`](crate::host::HOST_GRAPH_NODE_BYTES) per node. An empty graph holds 0.
    fn memory_bytes(&self) -> u64;
}
