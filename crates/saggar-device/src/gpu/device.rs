//! A GPU device: what every object of one opened device shares ([`DeviceShared`]), the thread's
//! current context or device, pinning, and the releases destructors make: run now in the object's
//! context, postponed while the thread may not make unsafe calls (during a capture), and recorded
//! on the device, or in the backend's orphaned list once the device is gone.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::api;
use crate::code::{CodeObject, KernelSource};
use crate::error::{Error, Result};
use crate::gpu::driver::Driver;
use crate::gpu::event::Event;
use crate::gpu::graph::{Graph, GraphExec};
use crate::gpu::memory::{self, DeviceBuffer, PinnedBuffer};
use crate::gpu::module::Module;
use crate::gpu::stream::Stream;
use crate::gpu::{GpuBackend, capture_registry};
use crate::pinning::{PinGuard, check_pinned, pinned_device};
use crate::rules::DeviceLimits;
use crate::types::{DeviceInfo, MemoryInfo};

/// Makes `current` current on this thread, unless saggar already did (a thread-local compare on the
/// launch path). saggar's cache is its view of the thread: code outside saggar that changes the current
/// context or device on a thread saggar also uses must restore it.
#[inline]
fn make_current<D: Driver>(op: &'static str, current: D::Current) -> Result<()> {
    let cache = D::current_cache();
    if cache.with(|c| c.get() == current) {
        return Ok(());
    }
    // SAFETY: `current` is that of a live device: every caller reaches it through an `Arc` of the
    // device, which keeps the vendor's per-device state (a retained context) alive.
    unsafe { D::set_current(op, current) }?;
    cache.with(|c| c.set(current));
    Ok(())
}

/// Records that `current` is now current on this thread.
fn note_current<D: Driver>(current: D::Current) {
    // `try_with`: this also runs from guards and destructors, possibly while the thread exits.
    let _ = D::current_cache().try_with(|c| c.set(current));
}

/// Forgets `current` if this thread's cache names it, so the next use sets it again (a context about
/// to be released: CUDA's primary contexts).
#[cfg(feature = "cuda")]
pub(crate) fn forget_current<D: Driver>(current: D::Current) {
    let _ = D::current_cache().try_with(|c| {
        if c.get() == current {
            c.set(D::NO_CURRENT);
        }
    });
}

/// Runs `f` with `current` current, then makes current again what the vendor had current before.
fn with_current<D: Driver, R>(op: &'static str, current: D::Current, f: impl FnOnce() -> Result<R>) -> Result<R> {
    let previous = D::get_current(op)?;
    if previous == current {
        note_current::<D>(current);
        return f();
    }
    // SAFETY: `current` is that of a live device (see `make_current`).
    unsafe { D::set_current(op, current) }?;
    let out = f();
    // SAFETY: `previous` was current a moment ago, so it is null or still live: saggar releases a
    // context only when no object of its device is left, and an object is running `f`.
    let restored = unsafe { D::set_current(op, previous) };
    note_current::<D>(if restored.is_ok() { previous } else { current });
    let value = out?;
    restored.map(|()| value)
}

/// Records an error that no device can hold any more (a failed release of CUDA's primary context).
#[cfg(feature = "cuda")]
pub(crate) fn orphan<D: Driver>(error: Error) {
    D::globals().orphaned.lock().push(error);
}

/// Errors met while tearing down the last handle of a device (releasing its vendor state, or errors its
/// objects deferred that nobody took before the device went away), oldest first.
pub fn take_orphaned_errors<D: Driver>() -> Vec<Error> {
    std::mem::take(&mut *D::globals().orphaned.lock())
}

/// A driver handle moved into a postponed release.
pub(crate) struct SendHandle<T>(T);

// SAFETY: only built from driver handles (opaque pointers or integers the vendor runtime accepts from any
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

/// A postponed release.
pub(crate) type Release = Box<dyn FnOnce() -> Result<()> + Send>;

/// Whether the driver forbids "potentially unsafe" calls on this thread right now.
#[inline]
pub(crate) fn unsafe_calls_forbidden<D: Driver>() -> bool {
    D::globals().captures.unsafe_calls_forbidden()
}

/// Runs `load`, work that may load code (a module and its functions, a library's first launch of a
/// kernel), apart from every capture of the process ([`crate::gpu::load_gate`]). Where this thread
/// may not make unsafe calls (it is capturing) it runs at once: waiting would wait for itself, and
/// the driver refuses what the capture forbids.
pub(crate) fn loading_code<D: Driver, T>(load: impl FnOnce() -> T) -> T {
    if unsafe_calls_forbidden::<D>() { load() } else { D::globals().loads.load(load) }
}

/// Fails, invalidating the captures concerned, if the driver forbids `op` on this thread right now.
/// Called by every operation the driver counts as potentially unsafe (allocations, synchronous work).
#[inline]
pub(crate) fn forbid_during_capture<D: Driver>(op: &'static str) -> Result<()> {
    D::globals().captures.forbid_during_capture(op)
}

/// For destructors: runs `release` (a free, an unload, a destroy) with `device` current now, or, while
/// this thread may not make unsafe calls because of an active capture, at the next point where it may
/// ([`flush_postponed_releases`]). A free is one of the calls stream capture forbids
/// (`cuThreadExchangeStreamCaptureMode`: "During stream capture, some actions, such as a call to
/// cudaMalloc, may be unsafe"; HIP follows CUDA); making it there would fail and invalidate the
/// capture. Errors are recorded on the device either way.
pub(crate) fn release<D: Driver>(
    device: &Arc<DeviceShared<D>>,
    op: &'static str,
    release: impl FnOnce() -> Result<()> + Send + 'static,
) {
    if unsafe_calls_forbidden::<D>() {
        let globals = D::globals();
        let mut postponed = globals.postponed.lock();
        postponed.push((device.clone(), op, Box::new(release)));
        globals.postponed_count.store(postponed.len(), Ordering::Release);
    } else {
        device.release_with(op, release);
    }
}

/// Runs the postponed releases, if this thread may make unsafe calls; called at the end of a capture,
/// before allocations, at device synchronisation and when a stream is dropped. Cheap when there are none.
pub(crate) fn flush_postponed_releases<D: Driver>() {
    let globals = D::globals();
    if globals.postponed_count.load(Ordering::Acquire) == 0 || unsafe_calls_forbidden::<D>() {
        return;
    }
    let pending = {
        let mut postponed = globals.postponed.lock();
        globals.postponed_count.store(0, Ordering::Release);
        std::mem::take(&mut *postponed)
    };
    for (device, op, release) in pending {
        device.release_with(op, release);
    }
}

/// Gives a driver error its saggar meaning (see [`capture_registry::CaptureRegistry::map_fault`]),
/// naming `stream_id` (0 for the device as a whole) in an asynchronous fault.
#[cold]
pub(crate) fn map_fault<D: Driver>(
    op: &'static str,
    error: Error,
    stream: Option<&crate::gpu::stream::StreamShared<D>>,
    stream_id: u64,
) -> Error {
    let fault = match D::classify(&error) {
        crate::gpu::driver::ErrorClass::Fault(fault) => fault,
        _ => capture_registry::DriverFault::Other,
    };
    D::globals().captures.map_fault(op, error, fault, stream, stream_id)
}

/// What every object of one opened device shares: identity, limits, the vendor's per-device state
/// and the deferred-error list. Objects hold it by `Arc`, so the vendor state (a retained context)
/// outlives every object that uses it.
pub struct DeviceShared<D: Driver> {
    pub(crate) info: DeviceInfo,
    pub(crate) limits: DeviceLimits,
    /// The vendor's state; read by vendor hooks (CUDA: the compute capability).
    pub(crate) state: D::DeviceState,
    current: D::Current,
    pub(crate) next_id: AtomicU64,
    deferred: Mutex<Vec<Error>>,
}

// SAFETY: `current` is a copy of what `state` holds (a context handle or an ordinal), which the vendor
// accepts from any thread; everything else is `Send + Sync` on its own.
unsafe impl<D: Driver> Send for DeviceShared<D> {}
// SAFETY: as above; `current` is never mutated.
unsafe impl<D: Driver> Sync for DeviceShared<D> {}

impl<D: Driver> std::fmt::Debug for DeviceShared<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceShared").field("info", &self.info).field("state", &self.state).finish_non_exhaustive()
    }
}

impl<D: Driver> DeviceShared<D> {
    /// The device ordinal.
    #[inline]
    pub(crate) fn ordinal(&self) -> usize {
        self.info.ordinal
    }

    /// Records an error met where it cannot be returned (a destructor).
    pub(crate) fn defer(&self, error: Error) {
        self.deferred.lock().push(error);
    }

    /// The entry of every operation: fails with [`Error::WrongDevice`] if another device of this backend
    /// is pinned to this thread, or [`Error::DeviceLost`] if it was marked lost
    /// ([`crate::lose_device`]), then makes this device current (a thread-local compare when it is).
    #[inline]
    pub(crate) fn enter(&self, op: &'static str) -> Result<()> {
        check_pinned(op, D::KIND, self.ordinal())?;
        crate::lost::check_alive(D::KIND, self.ordinal())?;
        make_current::<D>(op, self.current)
    }

    /// For calls that, like the host backend's, are not tied to the pinned device (event queries): makes
    /// this device current unless another device of this backend is pinned here, in which case the call
    /// runs with that one current, which the vendors accept for events and streams of any device.
    #[inline]
    pub(crate) fn touch(&self, op: &'static str) -> Result<()> {
        match pinned_device(D::KIND) {
            Some(other) if other != self.ordinal() => Ok(()),
            _ => make_current::<D>(op, self.current),
        }
    }

    /// Runs `f` with this device current and restores the previous context or device.
    pub(crate) fn with_current<R>(&self, op: &'static str, f: impl FnOnce() -> Result<R>) -> Result<R> {
        with_current::<D, R>(op, self.current, f)
    }

    /// For destructors: runs `f` with this device current, restores the previous one, and records any
    /// error on the device instead of returning it.
    pub(crate) fn release_with(&self, op: &'static str, f: impl FnOnce() -> Result<()>) {
        if let Err(e) = self.with_current(op, f) {
            self.defer(e);
        }
    }
}

impl<D: Driver> Drop for DeviceShared<D> {
    fn drop(&mut self) {
        let left = std::mem::take(&mut *self.deferred.lock());
        if !left.is_empty() {
            D::globals().orphaned.lock().extend(left);
        }
        // `state` is released by its own destructor, after this.
    }
}

/// Opens device `ordinal`.
pub(crate) fn open<D: Driver>(ordinal: usize) -> Result<Device<D>> {
    let opened = D::open(ordinal)?;
    let current = D::current_of(&opened.state);
    Ok(Device {
        shared: Arc::new(DeviceShared {
            info: opened.info,
            limits: opened.limits,
            state: opened.state,
            current,
            next_id: AtomicU64::new(1),
            deferred: Mutex::new(Vec::new()),
        }),
    })
}

/// An opened GPU device: its vendor state (CUDA: the primary context) is kept for as long as this
/// handle or any object made from it lives. Each [`crate::Backend::open`] gives an independent handle
/// with its own deferred-error list; all of them drive the same GPU.
///
/// # Thread safety
/// `Send + Sync`, cheap to clone. CUDA's driver API and HIP's runtime API are thread-safe and act on
/// the context or device current on the calling thread (`cuCtxSetCurrent`: "Binds the specified CUDA
/// context to the calling CPU thread"; `hipSetDevice`: "Set default device to be used for subsequent hip
/// API calls from this thread"), so every operation makes its device current on the calling thread
/// first, and a device may be used from any thread. [`api::Device::pin`] makes that explicit and turns
/// a use of another device into [`Error::WrongDevice`].
pub struct Device<D: Driver> {
    pub(crate) shared: Arc<DeviceShared<D>>,
}

impl<D: Driver> Clone for Device<D> {
    fn clone(&self) -> Self {
        Device { shared: self.shared.clone() }
    }
}

impl<D: Driver> std::fmt::Debug for Device<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("shared", &self.shared).finish()
    }
}

impl<D: Driver> api::Device for Device<D> {
    type Backend = GpuBackend<D>;

    fn info(&self) -> &DeviceInfo {
        &self.shared.info
    }

    fn pin(&self) -> Result<PinGuard> {
        let op = "device.pin";
        let previous = D::get_current(op)?;
        let current = self.shared.current;
        // SAFETY: `current` is this live device's.
        unsafe { D::set_current(op, current) }?;
        note_current::<D>(current);
        // The guard holds the device so what it made current stays live until the guard drops.
        let device = self.shared.clone();
        let restore = move || {
            // SAFETY: `previous` was current when the pin was made: null, or live as long as whoever made
            // it current keeps it (for saggar, an outer pin's guard holds its device).
            match unsafe { D::set_current("device.unpin", previous) } {
                Ok(()) => note_current::<D>(previous),
                Err(e) => device.defer(e),
            }
        };
        Ok(PinGuard::push(D::KIND, self.shared.ordinal(), Some(Box::new(restore))))
    }

    fn memory_info(&self) -> Result<MemoryInfo> {
        self.shared.enter("device.memory_info")?;
        let (free, total) = D::memory_info("device.memory_info")?;
        Ok(MemoryInfo { free: free as u64, total: total as u64 })
    }

    fn create_stream(&self) -> Result<Stream<D>> {
        self.shared.enter("device.create_stream")?;
        Stream::new(self.shared.clone())
    }

    fn create_event(&self) -> Result<Event<D>> {
        self.shared.enter("device.create_event")?;
        Event::new(self.shared.clone(), true)
    }

    fn create_untimed_event(&self) -> Result<Event<D>> {
        self.shared.enter("device.create_untimed_event")?;
        Event::new(self.shared.clone(), false)
    }

    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer<D>> {
        memory::alloc(&self.shared, bytes)
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<PinnedBuffer<D>> {
        memory::alloc_pinned(&self.shared, bytes)
    }

    fn compile(&self, source: &KernelSource) -> Result<CodeObject> {
        D::compile(&self.shared, source)
    }

    fn load_module(&self, code: &CodeObject) -> Result<Module<D>> {
        self.shared.enter("device.load_module")?;
        loading_code::<D, _>(|| Module::load(self.shared.clone(), code))
    }

    fn create_blas(&self, config: &crate::blas::BlasConfig) -> Result<crate::gpu::GpuBlas<D>> {
        crate::gpu::GpuBlas::new(self, config)
    }

    fn instantiate(&self, graph: &Graph<D>) -> Result<GraphExec<D>> {
        self.shared.enter("device.instantiate")?;
        GraphExec::instantiate(self.shared.clone(), graph)
    }

    fn synchronize(&self) -> Result<()> {
        let op = "device.synchronize";
        self.shared.enter(op)?;
        forbid_during_capture::<D>(op)?;
        flush_postponed_releases::<D>();
        D::synchronize_device(op).map_err(|e| map_fault::<D>(op, e, None, 0))
    }

    fn take_deferred_errors(&self) -> Vec<Error> {
        std::mem::take(&mut *self.shared.deferred.lock())
    }
}
