//! Streams and stream capture of the CUDA backend.
//!
//! A stream is a `CU_STREAM_NON_BLOCKING` driver stream of its device's primary context. Work is
//! enqueued with the asynchronous driver calls; `upload` and `download` are an asynchronous copy plus a
//! `cuStreamSynchronize`, so they are ordered after earlier work on the stream, as on the host backend.
//!
//! # Capture
//! `begin_capture` / `end_capture` are `cuStreamBeginCapture_v2` / `cuStreamEndCapture`, with saggar's
//! [`CaptureMode`] mapped one to one onto `CUstreamCaptureMode`. saggar also keeps its own record of every
//! capture (mode, thread, whether an illegal call broke it), for three reasons:
//! - the calls CUDA forbids during capture are refused *before* they reach the driver, with
//!   [`Error::IllegalDuringCapture`], and the capture is marked invalidated, so `end_capture` fails with
//!   [`Error::CaptureInvalidated`] exactly as on the host backend, whichever way the driver would have
//!   reacted. The rule is CUDA's (`cuThreadExchangeStreamCaptureMode`): "If the local thread has an
//!   ongoing capture sequence that was not initiated with `CU_STREAM_CAPTURE_MODE_RELAXED` [...], or if
//!   any other thread has a concurrent capture sequence initiated with `CU_STREAM_CAPTURE_MODE_GLOBAL`,
//!   this thread is prohibited from potentially unsafe API calls." saggar applies it to allocations,
//!   synchronous copies and device synchronisation; synchronising the capturing stream itself is refused
//!   in every mode.
//! - a driver refusal that saggar did not foresee (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, `_IMPLICIT`,
//!   `_ISOLATION`, e.g. waiting on an event recorded outside the capture: "dependency created on
//!   uncaptured work") is mapped to the same two errors;
//! - the modules whose kernels a capture launched are kept alive by the graph and its executable graphs,
//!   so unloading a module cannot leave a graph pointing at freed code.

use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::ThreadId;

use cudarc::driver::sys;
use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::api::{CaptureStatus, Kernel as _, Stream};
use crate::capture_registry::{CaptureRegistry, CapturingStream, DriverFault};
use crate::cuda::CudaBackend;
use crate::cuda::device::{self, DeviceShared, SendHandle};
use crate::cuda::event::CudaEvent;
use crate::cuda::graph::{CudaGraph, CudaGraphExec};
use crate::cuda::memory::CudaPinnedBuffer;
use crate::cuda::module::{CudaKernel, ModuleShared};
use crate::cuda::result::{self, CUresult, has_code};
use crate::error::{Error, Result};
use crate::stream_progress::StreamProgress;
use crate::types::{CaptureMode, DeviceSlice, KernelArg, LaunchConfig};

/// saggar's record of an active capture.
struct Capture {
    mode: CaptureMode,
    thread: ThreadId,
    /// Why the capture is broken, if an illegal call broke it.
    invalidated: Option<String>,
    /// Modules whose kernels were launched into the capture (deduplicated by address).
    modules: Vec<Arc<ModuleShared>>,
}

pub(crate) struct StreamShared {
    pub(crate) id: u64,
    pub(crate) device: Arc<DeviceShared>,
    raw: sys::CUstream,
    /// Whether `capture` is `Some`, readable on the launch path without the lock.
    capturing: AtomicBool,
    capture: Mutex<Option<Capture>>,
    /// Event records enqueued and covered by a successful synchronize.
    pub(crate) progress: Arc<StreamProgress>,
}

// SAFETY: a `CUstream` is an opaque handle the driver accepts from any thread; the driver API is
// thread-safe and serialises calls that enqueue into the same stream. saggar's own state is behind a
// mutex and atomics.
unsafe impl Send for StreamShared {}
// SAFETY: as above.
unsafe impl Sync for StreamShared {}

impl StreamShared {
    /// Marks the active capture invalidated with `reason` (the first reason wins); returns its mode, or
    /// `None` if no capture is active.
    fn invalidate(&self, reason: &dyn Fn() -> String) -> Option<CaptureMode> {
        let mut capture = self.capture.lock();
        let cap = capture.as_mut()?;
        if cap.invalidated.is_none() {
            cap.invalidated = Some(reason());
        }
        Some(cap.mode)
    }

    /// The reason the active capture was invalidated, if it was.
    fn invalidation(&self) -> Option<String> {
        self.capture.lock().as_ref().and_then(|c| c.invalidated.clone())
    }

    /// Keeps `modules` alive for as long as the graph being captured (a no-op when not capturing).
    pub(crate) fn keep_alive<'a>(&self, modules: impl IntoIterator<Item = &'a Arc<ModuleShared>>) {
        let mut capture = self.capture.lock();
        if let Some(cap) = capture.as_mut() {
            for module in modules {
                if !cap.modules.iter().any(|m| Arc::ptr_eq(m, module)) {
                    cap.modules.push(module.clone());
                }
            }
        }
    }

    /// Ends a capture left active when the stream is dropped; the graph, if any, is destroyed.
    fn abandon_capture(&self) {
        if self.capture.lock().take().is_none() {
            return;
        }
        self.capturing.store(false, Ordering::Release);
        CAPTURES.unregister_global(self);
        self.device.release_with("stream.drop", || {
            // SAFETY: `raw` is live until this stream's destructor finishes.
            match unsafe { result::stream::end_capture("stream.drop", self.raw) } {
                Ok(graph) if !graph.is_null() => {
                    // SAFETY: the graph was just returned to us and is used by no one else.
                    unsafe { result::graph::destroy("stream.drop", graph) }
                }
                Ok(_) => Ok(()),
                Err(e) if has_code(&e, CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) => Ok(()),
                Err(e) => Err(e),
            }
        });
    }
}

impl Drop for StreamShared {
    fn drop(&mut self) {
        self.abandon_capture();
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if !raw.is_null() {
            let raw = SendHandle::new(raw);
            device::release(&self.device, "stream.drop", move || {
                // SAFETY: `raw` was swapped out, so it is destroyed once; CUDA: "In case the device is still
                // doing work in the stream hStream when cuStreamDestroy() is called, the function will
                // return immediately and the resources associated with hStream will be released
                // automatically once the device has completed all work in hStream."
                unsafe { result::stream::destroy("stream.drop", raw.into_inner()) }
            });
        }
        device::flush_postponed_releases();
    }
}

thread_local! {
    /// Captures begun on this thread in thread-local or global mode.
    static THREAD_CAPTURES: RefCell<Vec<Weak<StreamShared>>> = const { RefCell::new(Vec::new()) };
}

/// This backend's captures (see [`CaptureRegistry`]).
static CAPTURES: CaptureRegistry<StreamShared> = CaptureRegistry::new(&THREAD_CAPTURES);

impl CapturingStream for StreamShared {
    fn invalidate(&self, reason: &dyn Fn() -> String) -> Option<CaptureMode> {
        StreamShared::invalidate(self, reason)
    }

    fn invalidation(&self) -> Option<String> {
        StreamShared::invalidation(self)
    }
}

/// Whether CUDA forbids "potentially unsafe" calls on this thread right now: a capture begun here in
/// thread-local or global mode, or a global-mode capture anywhere.
pub(crate) fn unsafe_calls_forbidden() -> bool {
    CAPTURES.unsafe_calls_forbidden()
}

/// Fails, and invalidates the captures concerned, if CUDA forbids `op` on this thread right now (see
/// [`unsafe_calls_forbidden`]). Called by every operation CUDA counts as potentially unsafe.
pub(crate) fn forbid_during_capture(op: &'static str) -> Result<()> {
    CAPTURES.forbid_during_capture(op)
}

/// Whether a driver error means "a call that stream capture does not allow".
fn is_capture_violation(error: &Error) -> bool {
    [
        CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
        CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
        CUresult::CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
        CUresult::CUDA_ERROR_STREAM_CAPTURE_MERGE,
        CUresult::CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,
        CUresult::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
    ]
    .into_iter()
    .any(|code| has_code(error, code))
}

/// Whether a driver error is one of CUDA's "sticky" asynchronous faults: a kernel or copy failed on the
/// device, the context is unusable, and every later call reports the same error.
fn is_sticky(error: &Error) -> bool {
    [
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
        CUresult::CUDA_ERROR_LAUNCH_TIMEOUT,
        CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR,
        CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION,
        CUresult::CUDA_ERROR_MISALIGNED_ADDRESS,
        CUresult::CUDA_ERROR_INVALID_ADDRESS_SPACE,
        CUresult::CUDA_ERROR_INVALID_PC,
        CUresult::CUDA_ERROR_LAUNCH_FAILED,
        CUresult::CUDA_ERROR_ASSERT,
        CUresult::CUDA_ERROR_ECC_UNCORRECTABLE,
        CUresult::CUDA_ERROR_CONTAINED,
    ]
    .into_iter()
    .any(|code| has_code(error, code))
}

/// Gives a driver error its saggar meaning (see [`CaptureRegistry::map_fault`]), naming `stream_id` (0 for
/// the device as a whole) in an asynchronous fault.
#[cold]
pub(crate) fn map_fault(op: &'static str, error: Error, stream: Option<&StreamShared>, stream_id: u64) -> Error {
    let fault = if is_capture_violation(&error) {
        DriverFault::CaptureViolation
    } else if has_code(&error, CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) {
        DriverFault::CaptureInvalidated
    } else if has_code(&error, CUresult::CUDA_ERROR_CAPTURED_EVENT) {
        DriverFault::CapturedEvent
    } else if is_sticky(&error) {
        DriverFault::Sticky
    } else {
        DriverFault::Other
    };
    CAPTURES.map_fault(op, error, fault, stream, stream_id)
}

/// A stream of the CUDA backend: an in-order queue of device work (`cuStreamCreate` with
/// `CU_STREAM_NON_BLOCKING`), destroyed on drop.
///
/// # Thread safety
/// `Send + Sync`: work may be enqueued from any thread, in the order the enqueue calls return. A capture
/// in [`CaptureMode::ThreadLocal`] or [`CaptureMode::Global`] must end on the thread that began it
/// (CUDA: `CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD`, "A stream capture sequence not initiated with the
/// `CU_STREAM_CAPTURE_MODE_RELAXED` argument to `cuStreamBeginCapture` was passed to
/// `cuStreamEndCapture` in a different thread"); saggar refuses it with [`Error::CaptureState`] first.
pub struct CudaStream {
    shared: Arc<StreamShared>,
}

impl std::fmt::Debug for CudaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaStream").field("id", &self.shared.id).field("device", &self.ordinal()).finish()
    }
}

impl CudaStream {
    /// A new stream; the device's context is current (the caller entered it).
    pub(crate) fn new(device: Arc<DeviceShared>) -> Result<CudaStream> {
        let raw = result::stream::create("device.create_stream")?;
        let id = device.next_id.fetch_add(1, Ordering::Relaxed);
        Ok(CudaStream {
            shared: Arc::new(StreamShared {
                id,
                device,
                raw,
                capturing: AtomicBool::new(false),
                capture: Mutex::new(None),
                progress: Arc::default(),
            }),
        })
    }

    /// The raw driver handle, for interop and benchmarks. saggar keeps ownership: do not destroy it.
    pub fn raw_handle(&self) -> sys::CUstream {
        self.shared.raw
    }

    /// This stream's id, as used in [`Error::Async`].
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    fn ordinal(&self) -> usize {
        self.shared.device.ordinal()
    }

    #[inline]
    fn enter(&self, op: &'static str) -> Result<()> {
        self.shared.device.enter(op)
    }

    #[cold]
    fn fault(&self, op: &'static str, error: Error) -> Error {
        map_fault(op, error, Some(&self.shared), self.shared.id)
    }

    /// A failure reported by a synchronisation is the failure of earlier asynchronous work.
    #[cold]
    fn sync_fault(&self, op: &'static str, error: Error) -> Error {
        match self.fault(op, error) {
            e @ Error::Vendor { .. } => Error::Async { stream: self.shared.id, source: Box::new(e) },
            other => other,
        }
    }

    /// Fails, invalidating it, if this stream is capturing: synchronous work cannot be captured.
    fn forbid_own_capture(&self, op: &'static str) -> Result<()> {
        if !self.shared.capturing.load(Ordering::Acquire) {
            return Ok(());
        }
        match self.shared.invalidate(&|| format!("{op} was called on the capturing stream")) {
            Some(mode) => Err(Error::IllegalDuringCapture { op, mode: mode.name() }),
            None => Ok(()),
        }
    }

    fn check_pinned_range(op: &'static str, buffer: &CudaPinnedBuffer, offset: usize, len: usize) -> Result<()> {
        use crate::api::PinnedBuffer as _;
        let fits = offset.checked_add(len).is_some_and(|end| end <= buffer.len());
        if fits {
            Ok(())
        } else {
            Err(Error::OutOfBounds { op, offset: offset as u64, len: len as u64, capacity: buffer.len() as u64 })
        }
    }

    /// Shared by `upload` and `download`: the checks of a synchronous call.
    fn enter_synchronous(&self, op: &'static str) -> Result<()> {
        self.enter(op)?;
        forbid_during_capture(op)?;
        self.forbid_own_capture(op)
    }

    /// Waits for everything enqueued so far; on success, every event recorded here before is known
    /// complete.
    fn wait_idle(&self, op: &'static str) -> Result<()> {
        let records = self.shared.progress.before_synchronize();
        // SAFETY: `raw` is live while `self` is.
        unsafe { result::stream::synchronize(op, self.shared.raw) }.map_err(|e| self.sync_fault(op, e))?;
        self.shared.progress.synchronized(records);
        Ok(())
    }
}

impl Stream for CudaStream {
    type Backend = CudaBackend;

    fn device_ordinal(&self) -> usize {
        self.ordinal()
    }

    unsafe fn copy_h2d_async(&self, src: &CudaPinnedBuffer, src_offset: usize, dst: DeviceSlice) -> Result<()> {
        let op = "stream.copy_h2d_async";
        Self::check_pinned_range(op, src, src_offset, dst.len())?;
        self.enter(op)?;
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: the range was checked against the pinned buffer; the caller promised (this function's
        // contract) that `dst` is live and that `src` stays allocated and unwritten until the copy ran.
        unsafe {
            result::memory::copy_htod_async(
                op,
                dst.ptr().0,
                src.host_ptr().add(src_offset).cast::<c_void>().cast_const(),
                dst.len(),
                self.shared.raw,
            )
        }
        .map_err(|e| self.fault(op, e))
    }

    unsafe fn copy_d2h_async(&self, src: DeviceSlice, dst: &CudaPinnedBuffer, dst_offset: usize) -> Result<()> {
        let op = "stream.copy_d2h_async";
        Self::check_pinned_range(op, dst, dst_offset, src.len())?;
        self.enter(op)?;
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: the range was checked against the pinned buffer; the caller promised that `src` is live
        // and that the host does not access `dst` until the copy ran.
        unsafe {
            result::memory::copy_dtoh_async(
                op,
                dst.host_ptr().add(dst_offset).cast::<c_void>(),
                src.ptr().0,
                src.len(),
                self.shared.raw,
            )
        }
        .map_err(|e| self.fault(op, e))
    }

    fn copy_d2d(&self, src: DeviceSlice, dst: DeviceSlice) -> Result<()> {
        let op = "stream.copy_d2d";
        if src.len() != dst.len() {
            return Err(Error::LengthMismatch { op, src: src.len() as u64, dst: dst.len() as u64 });
        }
        self.enter(op)?;
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: only device memory is touched; a bad device range faults the device (reported
        // asynchronously), never host memory. The stream is live.
        unsafe { result::memory::copy_dtod_async(op, dst.ptr().0, src.ptr().0, src.len(), self.shared.raw) }
            .map_err(|e| self.fault(op, e))
    }

    fn memset(&self, dst: DeviceSlice, value: u8) -> Result<()> {
        let op = "stream.memset";
        self.enter(op)?;
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: as for `copy_d2d`.
        unsafe { result::memory::memset_d8_async(op, dst.ptr().0, value, dst.len(), self.shared.raw) }
            .map_err(|e| self.fault(op, e))
    }

    fn upload(&self, src: &[u8], dst: DeviceSlice) -> Result<()> {
        let op = "stream.upload";
        if src.len() != dst.len() {
            return Err(Error::LengthMismatch { op, src: src.len() as u64, dst: dst.len() as u64 });
        }
        self.enter_synchronous(op)?;
        if !src.is_empty() {
            // SAFETY: `src` is borrowed for the whole call and the call does not return before the copy
            // ran (the synchronize below); for pageable memory the driver stages the bytes before returning.
            unsafe {
                result::memory::copy_htod_async(op, dst.ptr().0, src.as_ptr().cast(), src.len(), self.shared.raw)
            }
            .map_err(|e| self.fault(op, e))?;
        }
        self.wait_idle(op)
    }

    fn download(&self, src: DeviceSlice, dst: &mut [u8]) -> Result<()> {
        let op = "stream.download";
        if src.len() != dst.len() {
            return Err(Error::LengthMismatch { op, src: src.len() as u64, dst: dst.len() as u64 });
        }
        self.enter_synchronous(op)?;
        if !dst.is_empty() {
            // SAFETY: `dst` is exclusively borrowed for the whole call, and the call does not return before
            // the copy ran (the synchronize below).
            unsafe {
                result::memory::copy_dtoh_async(op, dst.as_mut_ptr().cast(), src.ptr().0, src.len(), self.shared.raw)
            }
            .map_err(|e| self.fault(op, e))?;
        }
        self.wait_idle(op)
    }

    unsafe fn launch(&self, kernel: &CudaKernel, config: &LaunchConfig, args: &[KernelArg]) -> Result<()> {
        let op = "stream.launch";
        kernel.signature().check_args(args)?;
        config.check(kernel.name())?;
        kernel.check_limits(config)?;
        if kernel.ordinal() != self.ordinal() {
            return Err(Error::DeviceMismatch { op, ordinal: self.ordinal(), other: kernel.ordinal() });
        }
        self.enter(op)?;
        // Each argument's bytes live in an 8-byte-aligned inline slot for the duration of the call; the
        // driver reads each parameter's size from the kernel and copies the value before returning.
        let mut slots: SmallVec<[ArgSlot; 12]> = args.iter().map(|a| ArgSlot(a.to_bytes())).collect();
        let mut params: SmallVec<[*mut c_void; 12]> =
            slots.iter_mut().map(|slot| slot.0.as_mut_ptr().cast::<c_void>()).collect();
        if self.shared.capturing.load(Ordering::Acquire) {
            self.shared.keep_alive([kernel.module()]);
        }
        // SAFETY: the kernel belongs to a module kept alive by `kernel`; arguments match its signature in
        // number and kind (checked above), so each pointer names a slot at least as large as the
        // parameter; the slots outlive the call. What the kernel does with its pointer arguments is the
        // caller's promise (this function's contract).
        unsafe {
            result::launch::kernel(
                op,
                kernel.raw_handle(),
                config.grid,
                config.block,
                config.shared_mem_bytes,
                self.shared.raw,
                params.as_mut_ptr(),
            )
        }
        .map_err(|e| self.fault(op, e))
    }

    unsafe fn launch_graph(&self, exec: &CudaGraphExec) -> Result<()> {
        let op = "stream.launch_graph";
        let raw = exec.launchable(op)?;
        if exec.ordinal() != self.ordinal() {
            return Err(Error::DeviceMismatch { op, ordinal: self.ordinal(), other: exec.ordinal() });
        }
        self.enter(op)?;
        if self.shared.capturing.load(Ordering::Acquire) {
            self.shared.keep_alive(exec.modules());
        }
        // An empty graph has no executable form (see `CudaGraphExec`): replaying it does nothing.
        let Some(raw) = raw else { return Ok(()) };
        let _serialised = exec.lock_for_launch();
        // SAFETY: `raw` is live while `exec` is and not destroyed (checked by `launchable`); launches of
        // one executable graph are serialised by its lock and `update` needs `&mut`; the addresses it
        // replays are the caller's promise (this function's contract).
        unsafe { result::graph::launch(op, raw, self.shared.raw) }.map_err(|e| self.fault(op, e))
    }

    fn record(&self, event: &CudaEvent) -> Result<()> {
        let op = "stream.record";
        if event.ordinal() != self.ordinal() {
            return Err(Error::DeviceMismatch { op, ordinal: self.ordinal(), other: event.ordinal() });
        }
        self.enter(op)?;
        // SAFETY: both handles are live while their owners are.
        unsafe { result::event::record(op, event.raw_handle(), self.shared.raw) }.map_err(|e| self.fault(op, e))?;
        event.mark_recorded(self.shared.capturing.load(Ordering::Acquire), &self.shared.progress);
        Ok(())
    }

    fn wait(&self, event: &CudaEvent) -> Result<()> {
        let op = "stream.wait";
        self.enter(op)?;
        if !event.ever_recorded() {
            // Waiting on an event that was never recorded completes at once (CUDA and host alike).
            return Ok(());
        }
        // SAFETY: both handles are live while their owners are. Cross-device waits are allowed by CUDA.
        unsafe { result::stream::wait_event(op, self.shared.raw, event.raw_handle()) }.map_err(|e| self.fault(op, e))
    }

    fn synchronize(&self) -> Result<()> {
        let op = "stream.synchronize";
        self.enter(op)?;
        self.forbid_own_capture(op)?;
        self.wait_idle(op)
    }

    fn begin_capture(&self, mode: CaptureMode) -> Result<()> {
        let op = "stream.begin_capture";
        self.enter(op)?;
        {
            let mut capture = self.shared.capture.lock();
            if capture.is_some() {
                return Err(Error::CaptureState { op, reason: "the stream is already capturing" });
            }
            let cu_mode = match mode {
                CaptureMode::Global => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
                CaptureMode::ThreadLocal => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                CaptureMode::Relaxed => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            };
            // SAFETY: `raw` is live while `self` is.
            unsafe { result::stream::begin_capture(op, self.shared.raw, cu_mode) }.map_err(|e| self.fault(op, e))?;
            *capture =
                Some(Capture { mode, thread: std::thread::current().id(), invalidated: None, modules: Vec::new() });
            self.shared.capturing.store(true, Ordering::Release);
        }
        // Registered after the stream's lock is released (the registry's lock order).
        CAPTURES.register(&self.shared, mode);
        Ok(())
    }

    fn end_capture(&self) -> Result<CudaGraph> {
        let op = "stream.end_capture";
        self.enter(op)?;
        let cap = {
            let mut capture = self.shared.capture.lock();
            let Some(cap) = capture.as_mut() else {
                return Err(Error::CaptureState { op, reason: "no capture is active on this stream" });
            };
            if cap.mode != CaptureMode::Relaxed && cap.thread != std::thread::current().id() {
                cap.invalidated.get_or_insert_with(|| {
                    "end_capture was called from a thread other than the one that began the capture".into()
                });
                return Err(Error::CaptureState {
                    op,
                    reason: "a thread-local or global capture must end on the thread that began it",
                });
            }
            let cap = capture.take().expect("checked above");
            self.shared.capturing.store(false, Ordering::Release);
            cap
        };
        let me = Arc::as_ptr(&self.shared);
        CAPTURES.unregister(me);
        // SAFETY: `raw` is live while `self` is.
        let ended = unsafe { result::stream::end_capture(op, self.shared.raw) };
        device::flush_postponed_releases();
        match ended {
            Ok(raw) => {
                let graph = CudaGraph::from_capture(self.shared.device.clone(), raw, cap.modules)?;
                match cap.invalidated {
                    // The driver accepted a capture that saggar had refused a call in: discard its graph.
                    Some(reason) => Err(Error::CaptureInvalidated { reason }),
                    None => Ok(graph),
                }
            }
            Err(e) if has_code(&e, CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) => {
                Err(Error::CaptureInvalidated { reason: cap.invalidated.unwrap_or_else(|| e.to_string()) })
            }
            Err(e) => {
                // The driver may have ended the capture anyway (it does for an unjoined fork); if it did
                // not, keep saggar's record so a later end_capture can finish it.
                // SAFETY: `raw` is live while `self` is.
                let still = unsafe { result::stream::is_capturing(op, self.shared.raw) };
                if matches!(still, Ok(s) if s != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE) {
                    let mode = cap.mode;
                    *self.shared.capture.lock() = Some(cap);
                    self.shared.capturing.store(true, Ordering::Release);
                    CAPTURES.register(&self.shared, mode);
                }
                Err(self.fault(op, e))
            }
        }
    }

    fn capture_status(&self) -> CaptureStatus {
        let saggar_view = match self.shared.capture.lock().as_ref() {
            None => CaptureStatus::Idle,
            Some(cap) if cap.invalidated.is_some() => return CaptureStatus::Invalidated,
            Some(_) => CaptureStatus::Active,
        };
        // The driver may have invalidated a capture on its own (a call made outside saggar).
        // SAFETY: `raw` is live while `self` is.
        match unsafe { result::stream::is_capturing("stream.capture_status", self.shared.raw) } {
            Ok(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED) => CaptureStatus::Invalidated,
            Ok(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE) => CaptureStatus::Active,
            Ok(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE) => CaptureStatus::Idle,
            Err(_) => saggar_view,
        }
    }
}

/// One kernel argument's bytes, aligned for any parameter type saggar passes.
#[repr(align(8))]
struct ArgSlot([u8; 8]);
