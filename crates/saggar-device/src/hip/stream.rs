//! Streams and stream capture of the HIP backend.
//!
//! A stream is a `hipStreamNonBlocking` stream of its device. Work is enqueued with the asynchronous
//! calls (`hipMemcpyAsync`, `hipMemsetAsync`, `hipModuleLaunchKernel`, `hipGraphLaunch`); `upload` and
//! `download` are an asynchronous copy plus a `hipStreamSynchronize`, so they are ordered after earlier
//! work on the stream, as on the host backend.
//!
//! # Capture
//! `begin_capture` / `end_capture` are `hipStreamBeginCapture` / `hipStreamEndCapture`, with saggar's
//! [`CaptureMode`] mapped one to one onto `hipStreamCaptureMode` ([`capture_mode`]); saggar's default,
//! and what its dispatcher uses, is thread-local mode. saggar also keeps its own record of every capture
//! (mode, thread, whether an illegal call broke it, and the operations it enqueued), for four reasons:
//! - the calls HIP forbids during capture are refused *before* they reach HIP, with
//!   [`Error::IllegalDuringCapture`], and the capture is marked invalidated, so `end_capture` fails with
//!   [`Error::CaptureInvalidated`] exactly as on the host backend, whichever way a given ROCm release
//!   would have reacted. HIP follows CUDA's rule (`hipThreadExchangeStreamCaptureMode`): a thread with
//!   an ongoing capture that was not begun in relaxed mode, or any thread while a global-mode capture is
//!   ongoing, is "prohibited from potentially unsafe API calls". saggar applies it to allocations,
//!   synchronous copies and device synchronisation; synchronising the capturing stream itself is refused
//!   in every mode.
//! - a HIP refusal that saggar did not foresee (`hipErrorStreamCaptureUnsupported`, `_Implicit`,
//!   `_Isolation`, ...) is mapped to the same two errors;
//! - the modules whose kernels a capture launched are kept alive by the graph and its executable graphs,
//!   so unloading a module cannot leave a graph pointing at freed code;
//! - the list of enqueued operations (kernel, function, launch configuration and arguments; copy;
//!   memset) lets an executable graph be updated kernel node by kernel node instead of through
//!   `hipGraphExecUpdate` (see `graph.rs`).
//!
//! ROCm pitfall: on some ROCm releases a captured graph loses the concurrency of work that was captured
//! on several streams (forked with events and joined back), and replays it one node after another
//! (the XLA seed measured this on ROCm). saggar captures on one stream, whose work is a chain anyway, so
//! nothing is lost; a caller that forks a capture onto other streams with events gets a correct graph
//! that may run more serially than the same work run eagerly.

use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::ThreadId;

use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::api::{CaptureStatus, Kernel as _, Stream};
use crate::capture_registry::{CaptureRegistry, CapturingStream, DriverFault};
use crate::error::{Error, Result};
use crate::hip::HipBackend;
use crate::hip::device::{self, DeviceShared, SendHandle};
use crate::hip::event::HipEvent;
use crate::hip::graph::{CapturedOp, HipGraph, HipGraphExec, KernelLaunch};
use crate::hip::memory::HipPinnedBuffer;
use crate::hip::module::{HipKernel, ModuleShared};
use crate::hip::result::{self, has_code};
use crate::hip::sys::{self, capture_status, code};
use crate::stream_progress::StreamProgress;
use crate::types::{CaptureMode, DeviceSlice, KernelArg, LaunchConfig};

/// saggar's capture mode as HIP's.
pub(crate) fn capture_mode(mode: CaptureMode) -> sys::hipStreamCaptureMode {
    match mode {
        CaptureMode::Global => sys::hipStreamCaptureMode::hipStreamCaptureModeGlobal,
        CaptureMode::ThreadLocal => sys::hipStreamCaptureMode::hipStreamCaptureModeThreadLocal,
        CaptureMode::Relaxed => sys::hipStreamCaptureMode::hipStreamCaptureModeRelaxed,
    }
}

/// saggar's record of an active capture.
struct Capture {
    mode: CaptureMode,
    thread: ThreadId,
    /// Why the capture is broken, if an illegal call broke it.
    invalidated: Option<String>,
    /// Modules whose kernels were launched into the capture (deduplicated by address).
    modules: Vec<Arc<ModuleShared>>,
    /// The operations enqueued into the capture through this stream, in order.
    ops: Vec<CapturedOp>,
}

pub(crate) struct StreamShared {
    pub(crate) id: u64,
    pub(crate) device: Arc<DeviceShared>,
    raw: sys::hipStream_t,
    /// Whether `capture` is `Some`, readable on the launch path without the lock.
    capturing: AtomicBool,
    capture: Mutex<Option<Capture>>,
    /// Event records enqueued and covered by a successful synchronize.
    pub(crate) progress: Arc<StreamProgress>,
}

// SAFETY: a `hipStream_t` is an opaque handle the runtime accepts from any thread; HIP's runtime API is
// thread-safe and serialises calls that enqueue into the same stream. saggar's own state is behind a mutex
// and atomics.
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
                Err(e) if has_code(&e, code::STREAM_CAPTURE_INVALIDATED) => Ok(()),
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
                // SAFETY: `raw` was swapped out, so it is destroyed once. `hipStreamDestroy` waits for the
                // stream's pending work to complete before it releases the stream.
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

/// Whether HIP forbids "potentially unsafe" calls on this thread right now: a capture begun here in
/// thread-local or global mode, or a global-mode capture anywhere.
pub(crate) fn unsafe_calls_forbidden() -> bool {
    CAPTURES.unsafe_calls_forbidden()
}

/// Fails, and invalidates the captures concerned, if HIP forbids `op` on this thread right now (see
/// [`unsafe_calls_forbidden`]). Called by every operation HIP counts as potentially unsafe.
pub(crate) fn forbid_during_capture(op: &'static str) -> Result<()> {
    CAPTURES.forbid_during_capture(op)
}

/// Whether a HIP error means "a call that stream capture does not allow".
fn is_capture_violation(error: &Error) -> bool {
    [
        code::STREAM_CAPTURE_UNSUPPORTED,
        code::STREAM_CAPTURE_IMPLICIT,
        code::STREAM_CAPTURE_ISOLATION,
        code::STREAM_CAPTURE_MERGE,
        code::STREAM_CAPTURE_UNMATCHED,
        code::STREAM_CAPTURE_WRONG_THREAD,
    ]
    .into_iter()
    .any(|c| has_code(error, c))
}

/// Whether a HIP error is an asynchronous device fault: a kernel or copy failed on the device, and HIP
/// reports it at a later call.
fn is_sticky(error: &Error) -> bool {
    [code::ILLEGAL_ADDRESS, code::LAUNCH_FAILURE, code::LAUNCH_TIMEOUT, code::ASSERT, code::ECC_NOT_CORRECTABLE]
        .into_iter()
        .any(|c| has_code(error, c))
}

/// Gives a HIP error its saggar meaning (see [`CaptureRegistry::map_fault`]), naming `stream_id` (0 for
/// the device as a whole) in an asynchronous fault.
#[cold]
pub(crate) fn map_fault(op: &'static str, error: Error, stream: Option<&StreamShared>, stream_id: u64) -> Error {
    let fault = if is_capture_violation(&error) {
        DriverFault::CaptureViolation
    } else if has_code(&error, code::STREAM_CAPTURE_INVALIDATED) {
        DriverFault::CaptureInvalidated
    } else if has_code(&error, code::CAPTURED_EVENT) {
        DriverFault::CapturedEvent
    } else if is_sticky(&error) {
        DriverFault::Sticky
    } else {
        DriverFault::Other
    };
    CAPTURES.map_fault(op, error, fault, stream, stream_id)
}

/// A stream of the HIP backend: an in-order queue of device work (`hipStreamCreateWithFlags` with
/// `hipStreamNonBlocking`), destroyed on drop.
///
/// # Thread safety
/// `Send + Sync`: work may be enqueued from any thread, in the order the enqueue calls return. A capture
/// in [`CaptureMode::ThreadLocal`] or [`CaptureMode::Global`] must end on the thread that began it
/// (HIP: `hipErrorStreamCaptureWrongThread`, "A stream capture sequence not initiated with the
/// hipStreamCaptureModeRelaxed argument to hipStreamBeginCapture was passed to hipStreamEndCapture in a
/// different thread"); saggar refuses it with [`Error::CaptureState`] first.
pub struct HipStream {
    shared: Arc<StreamShared>,
}

impl std::fmt::Debug for HipStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipStream").field("id", &self.shared.id).field("device", &self.ordinal()).finish()
    }
}

impl HipStream {
    /// A new stream; the device is current (the caller entered it).
    pub(crate) fn new(device: Arc<DeviceShared>) -> Result<HipStream> {
        let raw = result::stream::create("device.create_stream")?;
        let id = device.next_id.fetch_add(1, Ordering::Relaxed);
        Ok(HipStream {
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

    /// The raw HIP handle, for interop and benchmarks. saggar keeps ownership: do not destroy it.
    pub fn raw_handle(&self) -> sys::hipStream_t {
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

    /// Enqueues work with `call`. While the stream captures, the call is made under the capture's lock
    /// and, when HIP accepts it, `record` describes it in saggar's list of the capture's operations, so
    /// the list and HIP's nodes are in the same order even when several threads enqueue (relaxed mode).
    #[inline]
    fn enqueue(
        &self,
        op: &'static str,
        record: impl FnOnce() -> CapturedOp,
        call: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let outcome = if self.shared.capturing.load(Ordering::Acquire) {
            let mut capture = self.shared.capture.lock();
            let outcome = call();
            if outcome.is_ok()
                && let Some(cap) = capture.as_mut()
            {
                cap.ops.push(record());
            }
            outcome
        } else {
            call()
        };
        // The lock is released before a fault is mapped: mapping may invalidate this very capture.
        outcome.map_err(|e| self.fault(op, e))
    }

    /// Keeps `modules` alive for as long as the graph being captured (a no-op when not capturing).
    fn keep_alive<'a>(&self, modules: impl IntoIterator<Item = &'a Arc<ModuleShared>>) {
        let mut capture = self.shared.capture.lock();
        if let Some(cap) = capture.as_mut() {
            for module in modules {
                if !cap.modules.iter().any(|m| Arc::ptr_eq(m, module)) {
                    cap.modules.push(module.clone());
                }
            }
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

    fn check_pinned_range(op: &'static str, buffer: &HipPinnedBuffer, offset: usize, len: usize) -> Result<()> {
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

    /// Puts saggar's record of a capture back after `hipStreamEndCapture` failed without ending it.
    fn restore_capture(&self, cap: Capture) {
        let mode = cap.mode;
        *self.shared.capture.lock() = Some(cap);
        self.shared.capturing.store(true, Ordering::Release);
        CAPTURES.register(&self.shared, mode);
    }
}

impl Stream for HipStream {
    type Backend = HipBackend;

    fn device_ordinal(&self) -> usize {
        self.ordinal()
    }

    unsafe fn copy_h2d_async(&self, src: &HipPinnedBuffer, src_offset: usize, dst: DeviceSlice) -> Result<()> {
        let op = "stream.copy_h2d_async";
        Self::check_pinned_range(op, src, src_offset, dst.len())?;
        self.enter(op)?;
        if dst.is_empty() {
            return Ok(());
        }
        self.enqueue(
            op,
            || CapturedOp::Copy,
            || {
                // SAFETY: the range was checked against the pinned buffer; the caller promised (this
                // function's contract) that `dst` is live and that `src` stays allocated and unwritten
                // until the copy ran.
                unsafe {
                    result::memory::copy_htod_async(
                        op,
                        dst.ptr().0,
                        src.host_ptr().add(src_offset).cast::<c_void>().cast_const(),
                        dst.len(),
                        self.shared.raw,
                    )
                }
            },
        )
    }

    unsafe fn copy_d2h_async(&self, src: DeviceSlice, dst: &HipPinnedBuffer, dst_offset: usize) -> Result<()> {
        let op = "stream.copy_d2h_async";
        Self::check_pinned_range(op, dst, dst_offset, src.len())?;
        self.enter(op)?;
        if src.is_empty() {
            return Ok(());
        }
        self.enqueue(
            op,
            || CapturedOp::Copy,
            || {
                // SAFETY: the range was checked against the pinned buffer; the caller promised that `src`
                // is live and that the host does not access `dst` until the copy ran.
                unsafe {
                    result::memory::copy_dtoh_async(
                        op,
                        dst.host_ptr().add(dst_offset).cast::<c_void>(),
                        src.ptr().0,
                        src.len(),
                        self.shared.raw,
                    )
                }
            },
        )
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
        self.enqueue(
            op,
            || CapturedOp::Copy,
            || {
                // SAFETY: only device memory is touched; a bad device range faults the device (reported
                // asynchronously), never host memory. The stream is live.
                unsafe { result::memory::copy_dtod_async(op, dst.ptr().0, src.ptr().0, src.len(), self.shared.raw) }
            },
        )
    }

    fn memset(&self, dst: DeviceSlice, value: u8) -> Result<()> {
        let op = "stream.memset";
        self.enter(op)?;
        if dst.is_empty() {
            return Ok(());
        }
        self.enqueue(
            op,
            || CapturedOp::Memset,
            || {
                // SAFETY: as for `copy_d2d`.
                unsafe { result::memory::memset_async(op, dst.ptr().0, value, dst.len(), self.shared.raw) }
            },
        )
    }

    fn upload(&self, src: &[u8], dst: DeviceSlice) -> Result<()> {
        let op = "stream.upload";
        if src.len() != dst.len() {
            return Err(Error::LengthMismatch { op, src: src.len() as u64, dst: dst.len() as u64 });
        }
        self.enter_synchronous(op)?;
        if !src.is_empty() {
            // SAFETY: `src` is borrowed for the whole call and the call does not return before the copy
            // ran (the synchronize below); for pageable memory HIP stages the bytes itself.
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

    unsafe fn launch(&self, kernel: &HipKernel, config: &LaunchConfig, args: &[KernelArg]) -> Result<()> {
        let op = "stream.launch";
        kernel.signature().check_args(args)?;
        config.check(kernel.name())?;
        kernel.check_limits(config)?;
        if kernel.ordinal() != self.ordinal() {
            return Err(Error::DeviceMismatch { op, ordinal: self.ordinal(), other: kernel.ordinal() });
        }
        self.enter(op)?;
        let mut packed = PackedArgs::new(args);
        let capturing = self.shared.capturing.load(Ordering::Acquire);
        if capturing {
            self.keep_alive([kernel.module()]);
        }
        self.enqueue(
            op,
            || {
                CapturedOp::Kernel(KernelLaunch {
                    function: kernel.raw_handle() as usize,
                    signature: kernel.signature_arc().clone(),
                    config: *config,
                    args: SmallVec::from_slice(args),
                })
            },
            || {
                // SAFETY: the kernel belongs to a module kept alive by `kernel`; arguments match its
                // signature in number and kind (checked above), so each pointer names a slot at least as
                // large as the parameter; the slots outlive the call (HIP copies the values, also into the
                // kernel node while capturing). What the kernel does with its pointer arguments is the
                // caller's promise (this function's contract).
                unsafe {
                    result::launch::kernel(
                        op,
                        kernel.raw_handle(),
                        config.grid,
                        config.block,
                        config.shared_mem_bytes,
                        self.shared.raw,
                        packed.as_params(),
                    )
                }
            },
        )
        .map_err(|e| {
            if has_code(&e, code::LAUNCH_OUT_OF_RESOURCES) {
                Error::InvalidLaunchConfig {
                    kernel: kernel.name().to_string(),
                    reason: format!(
                        "a block of {} threads needs more registers or shared memory than the device has ({e})",
                        config.block.volume()
                    ),
                }
            } else {
                e
            }
        })
    }

    unsafe fn launch_graph(&self, exec: &HipGraphExec) -> Result<()> {
        let op = "stream.launch_graph";
        let raw = exec.launchable(op)?;
        if exec.ordinal() != self.ordinal() {
            return Err(Error::DeviceMismatch { op, ordinal: self.ordinal(), other: exec.ordinal() });
        }
        self.enter(op)?;
        if self.shared.capturing.load(Ordering::Acquire) {
            self.keep_alive(exec.modules());
        }
        // An empty graph has no executable form (see `HipGraphExec`): replaying it does nothing.
        let Some(raw) = raw else { return Ok(()) };
        let _serialised = exec.lock_for_launch();
        self.enqueue(
            op,
            || CapturedOp::Graph,
            || {
                // SAFETY: `raw` is live while `exec` is and not destroyed (checked by `launchable`); launches
                // of one executable graph are serialised by its lock and `update` needs `&mut`; the
                // addresses it replays are the caller's promise (this function's contract).
                unsafe { result::graph::launch(op, raw, self.shared.raw) }
            },
        )
    }

    fn record(&self, event: &HipEvent) -> Result<()> {
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

    fn wait(&self, event: &HipEvent) -> Result<()> {
        let op = "stream.wait";
        self.enter(op)?;
        if !event.ever_recorded() {
            // Waiting on an event that was never recorded completes at once (HIP and host alike).
            return Ok(());
        }
        if self.shared.capturing.load(Ordering::Acquire) && !event.last_recorded_in_capture() {
            // "Dependency created on uncaptured work": the host backend's rule, kept on every ROCm
            // release whatever HIP itself would do with it.
            let mode = self.shared.invalidate(&|| {
                "dependency created on uncaptured work: waited on an event recorded outside the capture".into()
            });
            if let Some(mode) = mode {
                return Err(Error::IllegalDuringCapture {
                    op: "stream.wait on an event recorded outside the capture",
                    mode: mode.name(),
                });
            }
        }
        // SAFETY: both handles are live while their owners are. Cross-device waits are allowed by HIP.
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
            // SAFETY: `raw` is live while `self` is.
            if let Err(e) = unsafe { result::stream::begin_capture(op, self.shared.raw, capture_mode(mode)) } {
                drop(capture);
                return Err(self.fault(op, e));
            }
            *capture = Some(Capture {
                mode,
                thread: std::thread::current().id(),
                invalidated: None,
                modules: Vec::new(),
                ops: Vec::new(),
            });
            self.shared.capturing.store(true, Ordering::Release);
        }
        // Registered after the stream's lock is released: `forbid_during_capture` takes the global list's
        // lock and then streams' locks, never the other way round.
        CAPTURES.register(&self.shared, mode);
        Ok(())
    }

    fn end_capture(&self) -> Result<HipGraph> {
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
                let graph = HipGraph::from_capture(self.shared.device.clone(), raw, cap.modules, cap.ops)?;
                match cap.invalidated {
                    // HIP accepted a capture that saggar had refused a call in: discard its graph.
                    Some(reason) => Err(Error::CaptureInvalidated { reason }),
                    None => Ok(graph),
                }
            }
            Err(e) if has_code(&e, code::STREAM_CAPTURE_INVALIDATED) => {
                Err(Error::CaptureInvalidated { reason: cap.invalidated.unwrap_or_else(|| e.to_string()) })
            }
            Err(e) => {
                // HIP may have ended the capture anyway; if it did not, keep saggar's record so a later
                // end_capture can finish it.
                // SAFETY: `raw` is live while `self` is.
                let still = unsafe { result::stream::is_capturing(op, self.shared.raw) };
                if matches!(still, Ok(s) if s != capture_status::NONE) {
                    self.restore_capture(cap);
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
        // HIP may have invalidated a capture on its own (a call made outside saggar).
        // SAFETY: `raw` is live while `self` is.
        match unsafe { result::stream::is_capturing("stream.capture_status", self.shared.raw) } {
            Ok(capture_status::INVALIDATED) => CaptureStatus::Invalidated,
            Ok(capture_status::ACTIVE) => CaptureStatus::Active,
            Ok(capture_status::NONE) => CaptureStatus::Idle,
            Ok(_) | Err(_) => saggar_view,
        }
    }
}

/// One kernel argument's bytes, aligned for any parameter type saggar passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(align(8))]
pub(crate) struct ArgSlot(pub(crate) [u8; 8]);

/// A launch's arguments as `hipModuleLaunchKernel` and `hipKernelNodeParams::kernelParams` take them:
/// one pointer per parameter, each to that argument's little-endian bytes ([`KernelArg::to_bytes`]) in
/// an 8-byte slot. HIP reads each parameter's size from the kernel's metadata, so a 4-byte parameter
/// reads the first 4 bytes of its slot, which on a little-endian host are the value.
pub(crate) struct PackedArgs {
    slots: SmallVec<[ArgSlot; 12]>,
    params: SmallVec<[*mut c_void; 12]>,
}

impl PackedArgs {
    pub(crate) fn new(args: &[KernelArg]) -> PackedArgs {
        let slots: SmallVec<[ArgSlot; 12]> = args.iter().map(|a| ArgSlot(a.to_bytes())).collect();
        // Filled in by `as_params`, once `self` is where it stays.
        let params = std::iter::repeat_n(std::ptr::null_mut(), slots.len()).collect();
        PackedArgs { slots, params }
    }

    /// The pointer array; valid while `self` is neither moved nor dropped (the slots live in `self`,
    /// inline up to 12 arguments, so a move would leave the pointers behind; each call points them at
    /// the slots again).
    pub(crate) fn as_params(&mut self) -> *mut *mut c_void {
        for (param, slot) in self.params.iter_mut().zip(self.slots.iter_mut()) {
            *param = slot.0.as_mut_ptr().cast::<c_void>();
        }
        self.params.as_mut_ptr()
    }

    #[cfg(test)]
    fn slots(&self) -> &[ArgSlot] {
        &self.slots
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::DevicePtr;

    #[test]
    fn capture_modes_map_one_to_one() {
        use sys::hipStreamCaptureMode as M;
        assert_eq!(capture_mode(CaptureMode::Global), M::hipStreamCaptureModeGlobal);
        assert_eq!(capture_mode(CaptureMode::ThreadLocal), M::hipStreamCaptureModeThreadLocal);
        assert_eq!(capture_mode(CaptureMode::Relaxed), M::hipStreamCaptureModeRelaxed);
        assert_eq!(capture_mode(CaptureMode::default()) as std::ffi::c_int, 1, "thread-local is saggar's default");
    }

    #[test]
    fn arguments_are_packed_little_endian_one_slot_each() {
        let args = [
            KernelArg::Ptr(DevicePtr(0x1122_3344_5566_7788)),
            KernelArg::U64(7),
            KernelArg::U32(0xAABB_CCDD),
            KernelArg::F32(1.5),
            KernelArg::I32(-2),
        ];
        let mut packed = PackedArgs::new(&args);
        let params = packed.as_params();
        for (i, arg) in args.iter().enumerate() {
            // SAFETY: `params` has one pointer per argument, each to an 8-byte slot inside `packed`, which
            // is neither moved nor dropped while the pointers are read.
            let bytes = unsafe { std::slice::from_raw_parts((*params.add(i)).cast::<u8>(), arg.kind().size()) };
            assert_eq!(bytes, &arg.to_bytes()[..arg.kind().size()], "argument {i}");
        }
        assert_eq!(packed.slots().len(), args.len());
        assert!(packed.slots().iter().all(|s| (s as *const ArgSlot as usize).is_multiple_of(8)));
        // A move (out of a vector, say) is repaired by `as_params`.
        let mut moved = vec![PackedArgs::new(&args)].pop().unwrap();
        let params = moved.as_params();
        // SAFETY: as above.
        let first = unsafe { *(*params).cast::<u64>() };
        assert_eq!(first, 0x1122_3344_5566_7788);
    }

    #[test]
    fn capture_violations_become_illegal_during_capture() {
        let e = map_fault("stream.memset", result::vendor("stream.memset", code::STREAM_CAPTURE_UNSUPPORTED), None, 3);
        assert!(matches!(e, Error::IllegalDuringCapture { op: "stream.memset", .. }), "{e:?}");
        let e = map_fault("stream.end_capture", result::vendor("x", code::STREAM_CAPTURE_INVALIDATED), None, 3);
        assert!(matches!(e, Error::CaptureInvalidated { .. }), "{e:?}");
        let e = map_fault("stream.synchronize", result::vendor("x", code::ILLEGAL_ADDRESS), None, 3);
        assert!(matches!(e, Error::Async { stream: 3, .. }), "{e:?}");
        let e = map_fault("device.alloc", result::vendor("x", code::INVALID_VALUE), None, 0);
        assert!(matches!(e, Error::Vendor { .. }), "{e:?}");
        assert!(!unsafe_calls_forbidden());
    }
}
