//! The CUDA backend's device: identity, limits, the primary context, pinning and the deferred-error list.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use cudarc::driver::sys;
use cudarc::driver::sys::CUdevice_attribute as Attr;
use parking_lot::Mutex;

use crate::api::Device;
use crate::code::{CodeObject, KernelSource};
use crate::cuda::context::{self, PrimaryContext};
use crate::cuda::event::CudaEvent;
use crate::cuda::graph::{CudaGraph, CudaGraphExec};
use crate::cuda::memory::{self, CudaDeviceBuffer, CudaPinnedBuffer};
use crate::cuda::module::CudaModule;
use crate::cuda::stream::{self, CudaStream};
use crate::cuda::{CudaBackend, result, rtc};
use crate::error::{Error, Result};
use crate::pinning::{PinGuard, check_pinned, pinned_device};
use crate::types::{BackendKind, DeviceInfo, MemoryInfo};

/// What a device allows, read once at open so launches are checked without a driver call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceLimits {
    /// `CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK`.
    pub(crate) max_threads_per_block: u32,
    /// `CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_{X,Y,Z}`.
    pub(crate) max_block: [u32; 3],
    /// `CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_{X,Y,Z}`.
    pub(crate) max_grid: [u32; 3],
    /// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_{MAJOR,MINOR}`.
    pub(crate) compute_capability: (u32, u32),
}

/// A device as the driver describes it, before any context exists.
struct Described {
    handle: sys::CUdevice,
    info: DeviceInfo,
    limits: DeviceLimits,
}

fn describe(ordinal: usize, driver_version: i32) -> Result<Described> {
    let op = "cuda.describe_device";
    let handle = result::device::get(op, ordinal)?;
    let attr = |a: Attr| result::device::attribute(op, handle, a).map(|v| v.max(0) as u32);
    let limits = DeviceLimits {
        max_threads_per_block: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        max_block: [
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
        ],
        max_grid: [
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
        ],
        compute_capability: (
            attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
    };
    let (major, minor) = limits.compute_capability;
    let info = DeviceInfo {
        backend: BackendKind::Cuda,
        ordinal,
        name: result::device::name(op, handle)?,
        arch: format!("sm_{major}{minor}"),
        total_memory: result::device::total_mem(op, handle)? as u64,
        driver_version: format!(
            "CUDA driver API {}.{} ({driver_version})",
            driver_version / 1000,
            (driver_version % 1000) / 10
        ),
    };
    Ok(Described { handle, info, limits })
}

/// The devices the driver sees, or why there are none.
pub(crate) fn enumerate() -> Result<Vec<DeviceInfo>> {
    let driver = result::library::driver()?;
    let count = result::driver::device_count("cuda.enumerate")?;
    if count == 0 {
        return Err(Error::BackendUnavailable {
            backend: BackendKind::Cuda,
            reason: "no CUDA device found: the driver reports 0 devices".into(),
        });
    }
    (0..count).map(|ordinal| describe(ordinal, driver.version).map(|d| d.info)).collect()
}

/// Opens device `ordinal`: describes it and retains its primary context.
pub(crate) fn open(ordinal: usize) -> Result<CudaDevice> {
    let driver = result::library::driver()?;
    let count = result::driver::device_count("cuda.open")?;
    if ordinal >= count {
        return Err(Error::NoSuchDevice { backend: BackendKind::Cuda, ordinal, count });
    }
    let described = describe(ordinal, driver.version)?;
    let context = PrimaryContext::retain("cuda.open", described.handle)?;
    Ok(CudaDevice {
        shared: Arc::new(DeviceShared {
            info: described.info,
            limits: described.limits,
            context,
            next_id: AtomicU64::new(1),
            deferred: Mutex::new(Vec::new()),
        }),
    })
}

/// Errors recorded by destructors of objects whose device is gone, so nobody can take them from it.
static ORPHANED: Mutex<Vec<Error>> = Mutex::new(Vec::new());

/// Records an error that no device can hold any more.
pub(crate) fn orphan(error: Error) {
    ORPHANED.lock().push(error);
}

/// Errors met while tearing down the last handle of a device (releasing its primary context, or errors
/// its objects deferred that nobody took before the device went away), oldest first. Every other
/// destructor error is on its device: [`Device::take_deferred_errors`].
pub fn take_orphaned_errors() -> Vec<Error> {
    std::mem::take(&mut *ORPHANED.lock())
}

/// A driver handle moved into a postponed release.
pub(crate) struct SendHandle<T>(T);

// SAFETY: only built from CUDA driver handles (opaque pointers or integers the driver accepts from any
// thread), and only moved so that the one call that releases the handle can run on another thread.
unsafe impl<T> Send for SendHandle<T> {}

impl<T> SendHandle<T> {
    pub(crate) fn new(handle: T) -> SendHandle<T> {
        SendHandle(handle)
    }

    /// The handle (taking the whole wrapper, so a closure that calls this captures the wrapper).
    pub(crate) fn into_inner(self) -> T {
        self.0
    }
}

type Release = Box<dyn FnOnce() -> Result<()> + Send>;

/// Releases postponed because they were requested where CUDA forbids unsafe calls (during a capture).
static POSTPONED: Mutex<Vec<(Arc<DeviceShared>, &'static str, Release)>> = Mutex::new(Vec::new());
/// `POSTPONED.len()`, readable without the lock.
static POSTPONED_COUNT: AtomicUsize = AtomicUsize::new(0);

/// For destructors: runs `release` (a free, an unload, a destroy) in `device`'s context now, or, while
/// this thread may not make unsafe calls because of an active capture, at the next point where it may
/// ([`flush_postponed_releases`]). A free is one of the calls CUDA forbids during capture
/// (`cuThreadExchangeStreamCaptureMode`: "During stream capture, some actions, such as a call to
/// cudaMalloc, may be unsafe"); making it there would fail and invalidate the capture. Errors are
/// recorded on the device either way.
pub(crate) fn release(
    device: &Arc<DeviceShared>,
    op: &'static str,
    release: impl FnOnce() -> Result<()> + Send + 'static,
) {
    if stream::unsafe_calls_forbidden() {
        let mut postponed = POSTPONED.lock();
        postponed.push((device.clone(), op, Box::new(release)));
        POSTPONED_COUNT.store(postponed.len(), Ordering::Release);
    } else {
        device.release_with(op, release);
    }
}

/// Runs the postponed releases, if this thread may make unsafe calls; called at the end of a capture,
/// before allocations, at device synchronisation and when a stream is dropped. Cheap when there are none.
pub(crate) fn flush_postponed_releases() {
    if POSTPONED_COUNT.load(Ordering::Acquire) == 0 || stream::unsafe_calls_forbidden() {
        return;
    }
    let pending = {
        let mut postponed = POSTPONED.lock();
        POSTPONED_COUNT.store(0, Ordering::Release);
        std::mem::take(&mut *postponed)
    };
    for (device, op, release) in pending {
        device.release_with(op, release);
    }
}

/// What every object of one opened device shares: identity, limits, the primary context and the
/// deferred-error list. Objects hold it by `Arc`, so the context outlives every object that uses it.
#[derive(Debug)]
pub(crate) struct DeviceShared {
    pub(crate) info: DeviceInfo,
    pub(crate) limits: DeviceLimits,
    context: PrimaryContext,
    pub(crate) next_id: AtomicU64,
    deferred: Mutex<Vec<Error>>,
}

impl DeviceShared {
    /// The device ordinal.
    #[inline]
    pub(crate) fn ordinal(&self) -> usize {
        self.info.ordinal
    }

    /// The primary context.
    #[inline]
    pub(crate) fn context(&self) -> sys::CUcontext {
        self.context.raw()
    }

    /// Records an error met where it cannot be returned (a destructor).
    pub(crate) fn defer(&self, error: Error) {
        self.deferred.lock().push(error);
    }

    /// The entry of every operation: fails with [`Error::WrongDevice`] if another CUDA device is pinned
    /// to this thread, then makes this device's context current (a thread-local compare when it is).
    #[inline]
    pub(crate) fn enter(&self, op: &'static str) -> Result<()> {
        check_pinned(op, BackendKind::Cuda, self.ordinal())?;
        context::make_current(op, self.context())
    }

    /// For calls that, like the host backend's, are not tied to the pinned device (event queries): makes
    /// this device's context current unless another CUDA device is pinned here, in which case the call
    /// runs in that device's context, which the driver accepts for objects of any context.
    #[inline]
    pub(crate) fn touch(&self, op: &'static str) -> Result<()> {
        match pinned_device(BackendKind::Cuda) {
            Some(other) if other != self.ordinal() => Ok(()),
            _ => context::make_current(op, self.context()),
        }
    }

    /// For destructors: runs `f` with this device's context current, restores the previous context, and
    /// records any error on the device instead of returning it.
    pub(crate) fn release_with(&self, op: &'static str, f: impl FnOnce() -> Result<()>) {
        if let Err(e) = context::with_context(op, self.context(), f) {
            self.defer(e);
        }
    }
}

impl Drop for DeviceShared {
    fn drop(&mut self) {
        let left = std::mem::take(&mut *self.deferred.lock());
        if !left.is_empty() {
            ORPHANED.lock().extend(left);
        }
        // `context` is released by its own destructor, after this.
    }
}

/// An opened CUDA device: its primary context, retained for as long as this handle or any object made
/// from it lives. Each [`crate::Backend::open`] gives an independent handle with its own deferred-error
/// list; all of them share the driver's one primary context of that device.
///
/// # Thread safety
/// `Send + Sync`, cheap to clone. Every operation makes the device's context current on the calling
/// thread first, so a device may be used from any thread; [`Device::pin`] makes that explicit and turns
/// a use of another device into [`Error::WrongDevice`].
#[derive(Debug, Clone)]
pub struct CudaDevice {
    pub(crate) shared: Arc<DeviceShared>,
}

impl CudaDevice {
    /// The compute capability, e.g. `(9, 0)` for an H100 or H200.
    pub fn compute_capability(&self) -> (u32, u32) {
        self.shared.limits.compute_capability
    }

    /// The raw primary-context handle, for interop and benchmarks. saggar keeps ownership: do not release it.
    pub fn raw_context(&self) -> sys::CUcontext {
        self.shared.context()
    }
}

impl Device for CudaDevice {
    type Backend = CudaBackend;

    fn info(&self) -> &DeviceInfo {
        &self.shared.info
    }

    fn pin(&self) -> Result<PinGuard> {
        let op = "device.pin";
        let previous = result::ctx::get_current(op)?;
        let ctx = self.shared.context();
        // SAFETY: `ctx` is the retained primary context of this device.
        unsafe { result::ctx::set_current(op, ctx) }?;
        context::note_current(ctx);
        // The guard holds the device so its context, current until the guard drops, stays retained.
        let device = self.shared.clone();
        let restore = move || {
            // SAFETY: `previous` was current when the pin was made: null, or a context that is live as long
            // as whoever made it current keeps it (for saggar, an outer pin's guard holds its device).
            match unsafe { result::ctx::set_current("device.unpin", previous) } {
                Ok(()) => context::note_current(previous),
                Err(e) => device.defer(e),
            }
        };
        Ok(PinGuard::push(BackendKind::Cuda, self.shared.ordinal(), Some(Box::new(restore))))
    }

    fn memory_info(&self) -> Result<MemoryInfo> {
        self.shared.enter("device.memory_info")?;
        let (free, total) = result::memory::info("device.memory_info")?;
        Ok(MemoryInfo { free: free as u64, total: total as u64 })
    }

    fn create_stream(&self) -> Result<CudaStream> {
        self.shared.enter("device.create_stream")?;
        CudaStream::new(self.shared.clone())
    }

    fn create_event(&self) -> Result<CudaEvent> {
        self.shared.enter("device.create_event")?;
        CudaEvent::new(self.shared.clone(), true)
    }

    fn create_untimed_event(&self) -> Result<CudaEvent> {
        self.shared.enter("device.create_untimed_event")?;
        CudaEvent::new(self.shared.clone(), false)
    }

    fn alloc(&self, bytes: usize) -> Result<CudaDeviceBuffer> {
        memory::alloc(&self.shared, bytes)
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<CudaPinnedBuffer> {
        memory::alloc_pinned(&self.shared, bytes)
    }

    fn compile(&self, source: &KernelSource) -> Result<CodeObject> {
        rtc::compile_for(source, self.shared.limits.compute_capability)
    }

    fn load_module(&self, code: &CodeObject) -> Result<CudaModule> {
        self.shared.enter("device.load_module")?;
        CudaModule::load(self.shared.clone(), code)
    }

    fn instantiate(&self, graph: &CudaGraph) -> Result<CudaGraphExec> {
        self.shared.enter("device.instantiate")?;
        CudaGraphExec::instantiate(self.shared.clone(), graph)
    }

    fn synchronize(&self) -> Result<()> {
        let op = "device.synchronize";
        self.shared.enter(op)?;
        stream::forbid_during_capture(op)?;
        flush_postponed_releases();
        result::ctx::synchronize(op).map_err(|e| stream::map_fault(op, e, None, 0))
    }

    fn take_deferred_errors(&self) -> Vec<Error> {
        std::mem::take(&mut *self.shared.deferred.lock())
    }
}
