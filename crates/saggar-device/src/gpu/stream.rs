//! Streams and stream capture of a GPU backend.
//!
//! A stream is a non-blocking vendor stream of its device. Work is enqueued with the asynchronous
//! calls; `upload` and `download` are an asynchronous copy plus a stream synchronize, so they are
//! ordered after earlier work on the stream, as on the host backend.
//!
//! # Capture
//! `begin_capture` / `end_capture` are the vendor's, with saggar's [`CaptureMode`] mapped one to one
//! onto the vendor's mode. saggar also keeps its own record of every capture (mode, thread, whether an
//! illegal call broke it), for these reasons:
//! - the calls the vendors forbid during capture are refused *before* they reach the driver, with
//!   [`Error::IllegalDuringCapture`], and the capture is marked invalidated, so `end_capture` fails with
//!   [`Error::CaptureInvalidated`] exactly as on the host backend, whichever way a driver release would
//!   have reacted. The rule is CUDA's, which HIP follows (`cuThreadExchangeStreamCaptureMode`): "If the
//!   local thread has an ongoing capture sequence that was not initiated with
//!   `CU_STREAM_CAPTURE_MODE_RELAXED` [...], or if any other thread has a concurrent capture sequence
//!   initiated with `CU_STREAM_CAPTURE_MODE_GLOBAL`, this thread is prohibited from potentially unsafe
//!   API calls." saggar applies it to allocations, synchronous copies and device synchronisation;
//!   synchronising the capturing stream itself is refused in every mode, and so is waiting on an event
//!   recorded outside the capture ("dependency created on uncaptured work");
//! - a driver refusal that saggar did not foresee (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`,
//!   `hipErrorStreamCaptureUnsupported`, `_IMPLICIT`, `_ISOLATION`, ...) is mapped to the same two errors;
//! - the modules whose kernels a capture launched are kept alive by the graph and its executable graphs,
//!   so unloading a module cannot leave a graph pointing at freed code;
//! - where the driver asks for it ([`Driver::RECORDS_CAPTURED_OPS`]), the list of enqueued operations
//!   lets an executable graph be updated kernel node by kernel node.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::ThreadId;

use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::api::{self, CaptureStatus, Kernel as _};
use crate::error::{Error, Result};
use crate::gpu::GpuBackend;
use crate::gpu::capture_registry::CapturingStream;
use crate::gpu::device::{self, DeviceShared, SendHandle};
use crate::gpu::driver::{Driver, ErrorClass};
use crate::gpu::event::Event;
use crate::gpu::graph::{Graph, GraphExec};
use crate::gpu::launch::{CapturedOp, KernelLaunch, PackedArgs};
use crate::gpu::memory::PinnedBuffer;
use crate::gpu::module::{Kernel, ModuleShared};
use crate::gpu::progress::StreamProgress;
use crate::rules;
use crate::types::{CaptureMode, DeviceSlice, KernelArg, LaunchConfig};

/// saggar's record of an active capture.
struct Capture<D: Driver> {
    mode: CaptureMode,
    thread: ThreadId,
    /// Why the capture is broken, if an illegal call broke it.
    invalidated: Option<String>,
    /// Modules whose kernels were launched into the capture (deduplicated by address).
    modules: Vec<Arc<ModuleShared<D>>>,
    /// The operations enqueued through this stream, in order (only if the driver records them).
    ops: Vec<CapturedOp>,
}

/// A stream's state, shared with the backend's capture registry.
pub struct StreamShared<D: Driver> {
    pub(crate) id: u64,
    pub(crate) device: Arc<DeviceShared<D>>,
    raw: D::Stream,
    /// Whether `capture` is `Some`, readable on the launch path without the lock.
    capturing: AtomicBool,
    capture: Mutex<Option<Capture<D>>>,
    /// Event records enqueued and covered by a successful synchronize.
    pub(crate) progress: Arc<StreamProgress>,
}

// SAFETY: a stream handle is opaque and the vendors accept it from any thread; their APIs are
// thread-safe and serialise calls that enqueue into the same stream. saggar's own state is behind a
// mutex and atomics.
unsafe impl<D: Driver> Send for StreamShared<D> {}
// SAFETY: as above.
unsafe impl<D: Driver> Sync for StreamShared<D> {}

impl<D: Driver> std::fmt::Debug for StreamShared<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamShared").field("id", &self.id).field("device", &self.device.ordinal()).finish()
    }
}

impl<D: Driver> StreamShared<D> {
    #[inline]
    fn capturing(&self) -> bool {
        self.capturing.load(Ordering::Acquire)
    }

    /// Keeps `modules` alive for as long as the graph being captured (a no-op when not capturing).
    fn keep_alive<'a>(&self, modules: impl IntoIterator<Item = &'a Arc<ModuleShared<D>>>) {
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
        D::globals().captures.unregister_global(self);
        D::globals().loads.capture_ends();
        self.device.release_with("stream.drop", || {
            // SAFETY: `raw` is live until this stream's destructor finishes.
            match unsafe { D::end_capture("stream.drop", self.raw) } {
                // SAFETY: the graph was just returned to us and is used by no one else.
                Ok(Some(graph)) => unsafe { D::graph_destroy("stream.drop", graph) },
                Ok(None) => Ok(()),
                Err(e) if D::classify(&e) == ErrorClass::Fault(crate::gpu::DriverFault::CaptureInvalidated) => Ok(()),
                Err(e) => Err(e),
            }
        });
    }
}

impl<D: Driver> Drop for StreamShared<D> {
    fn drop(&mut self) {
        self.abandon_capture();
        let raw = SendHandle::new(self.raw);
        device::release(&self.device, "stream.drop", move || {
            // SAFETY: `drop` runs once, so `raw` is destroyed once; CUDA: "In case the device is still
            // doing work in the stream hStream when cuStreamDestroy() is called, the function will return
            // immediately and the resources associated with hStream will be released automatically once
            // the device has completed all work in hStream"; `hipStreamDestroy` waits for the work.
            unsafe { D::stream_destroy("stream.drop", raw.into_inner()) }
        });
        device::flush_postponed_releases::<D>();
    }
}

impl<D: Driver> CapturingStream for StreamShared<D> {
    fn invalidate(&self, reason: &dyn Fn() -> String) -> Option<CaptureMode> {
        let mut capture = self.capture.lock();
        let cap = capture.as_mut()?;
        if cap.invalidated.is_none() {
            cap.invalidated = Some(reason());
        }
        Some(cap.mode)
    }

    fn invalidation(&self) -> Option<String> {
        self.capture.lock().as_ref().and_then(|c| c.invalidated.clone())
    }
}

/// A stream of a GPU backend: an in-order queue of device work (`cuStreamCreate` with
/// `CU_STREAM_NON_BLOCKING`, `hipStreamCreateWithFlags` with `hipStreamNonBlocking`), destroyed on drop.
///
/// # Thread safety
/// `Send + Sync`: work may be enqueued from any thread, in the order the enqueue calls return. A capture
/// in [`CaptureMode::ThreadLocal`] or [`CaptureMode::Global`] must end on the thread that began it
/// (CUDA: `CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD`, "A stream capture sequence not initiated with the
/// `CU_STREAM_CAPTURE_MODE_RELAXED` argument to `cuStreamBeginCapture` was passed to
/// `cuStreamEndCapture` in a different thread"; HIP: `hipErrorStreamCaptureWrongThread`); saggar refuses
/// it with [`Error::CaptureState`] first.
pub struct Stream<D: Driver> {
    shared: Arc<StreamShared<D>>,
}

impl<D: Driver> std::fmt::Debug for Stream<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").field("id", &self.shared.id).field("device", &self.ordinal()).finish()
    }
}

impl<D: Driver> Stream<D> {
    /// A new stream; the device is current (the caller entered it).
    pub(crate) fn new(device: Arc<DeviceShared<D>>) -> Result<Stream<D>> {
        let raw = D::stream_create("device.create_stream")?;
        let id = device.next_id.fetch_add(1, Ordering::Relaxed);
        Ok(Stream {
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
    #[inline]
    pub fn raw_handle(&self) -> D::Stream {
        self.shared.raw
    }

    /// This stream's id, as used in [`Error::Async`].
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    #[inline]
    fn ordinal(&self) -> usize {
        self.shared.device.ordinal()
    }

    #[inline]
    fn enter(&self, op: &'static str) -> Result<()> {
        self.shared.device.enter(op)
    }

    #[cold]
    fn fault(&self, op: &'static str, error: Error) -> Error {
        device::map_fault::<D>(op, error, Some(&self.shared), self.shared.id)
    }

    /// A failure reported by a synchronisation is the failure of earlier asynchronous work.
    #[cold]
    fn sync_fault(&self, op: &'static str, error: Error) -> Error {
        match self.fault(op, error) {
            e @ Error::Vendor { .. } => Error::Async { stream: self.shared.id, source: Box::new(e) },
            other => other,
        }
    }

    /// Enqueues work with `call`. While the stream captures for a driver that records captured
    /// operations, the call is made under the capture's lock and, when the driver accepts it, `record`
    /// describes it in the capture's list, so the list and the driver's nodes are in the same order even
    /// when several threads enqueue (relaxed mode). Otherwise this is `call` and one atomic load.
    #[inline]
    fn enqueue(
        &self,
        op: &'static str,
        record: impl FnOnce() -> CapturedOp,
        call: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let outcome = if D::RECORDS_CAPTURED_OPS && self.shared.capturing() {
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

    /// Shared by the copies and the memset: enters the device and enqueues `call`, which moves `bytes`
    /// bytes (nothing is enqueued for zero).
    #[inline]
    fn enqueue_async(
        &self,
        op: &'static str,
        bytes: usize,
        captured: CapturedOp,
        call: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        self.enter(op)?;
        if bytes == 0 {
            return Ok(());
        }
        self.enqueue(op, || captured, call)
    }

    /// Enqueues work a vendor library makes on this stream (a BLAS-Lt call): enters the device and runs
    /// `call` with the raw stream, mapping a failure as any enqueue's. The library's nodes are not in a
    /// capture's list of operations, so a graph holding them no longer pairs its nodes with that list
    /// and is updated as a whole, never node by node.
    pub(crate) fn enqueue_library(&self, op: &'static str, call: impl FnOnce(D::Stream) -> Result<()>) -> Result<()> {
        self.enter(op)?;
        call(self.shared.raw).map_err(|e| self.fault(op, e))
    }

    /// Fails, invalidating it, if this stream is capturing: synchronous work cannot be captured.
    fn forbid_own_capture(&self, op: &'static str) -> Result<()> {
        if !self.shared.capturing() {
            return Ok(());
        }
        match self.shared.invalidate(&|| format!("{op} was called on the capturing stream")) {
            Some(mode) => Err(Error::IllegalDuringCapture { op, mode: mode.name() }),
            None => Ok(()),
        }
    }

    /// Shared by `upload` and `download`: the checks of a synchronous call.
    fn enter_synchronous(&self, op: &'static str) -> Result<()> {
        self.enter(op)?;
        device::forbid_during_capture::<D>(op)?;
        self.forbid_own_capture(op)
    }

    /// Waits for everything enqueued so far; on success, every event recorded here before is known
    /// complete.
    fn wait_idle(&self, op: &'static str) -> Result<()> {
        let records = self.shared.progress.before_synchronize();
        // SAFETY: `raw` is live while `self` is.
        unsafe { D::stream_synchronize(op, self.shared.raw) }.map_err(|e| self.sync_fault(op, e))?;
        self.shared.progress.synchronized(records);
        Ok(())
    }

    /// Puts saggar's record of a capture back after the driver failed to end it without ending it.
    fn restore_capture(&self, cap: Capture<D>) {
        let mode = cap.mode;
        *self.shared.capture.lock() = Some(cap);
        self.shared.capturing.store(true, Ordering::Release);
        D::globals().captures.register(&self.shared, mode);
        D::globals().loads.capture_resumes();
    }
}

impl<D: Driver> api::Stream for Stream<D> {
    type Backend = GpuBackend<D>;

    fn device_ordinal(&self) -> usize {
        self.ordinal()
    }

    #[inline]
    unsafe fn copy_h2d_async(&self, src: &PinnedBuffer<D>, src_offset: usize, dst: DeviceSlice) -> Result<()> {
        let op = "stream.copy_h2d_async";
        rules::check_pinned_range(op, api::PinnedBuffer::len(src), src_offset, dst.len())?;
        self.enqueue_async(op, dst.len(), CapturedOp::Copy, || {
            // SAFETY: the range was checked against the pinned buffer; the caller promised (this function's
            // contract) that `dst` is live and that `src` stays allocated and unwritten until the copy ran.
            unsafe {
                let host = src.host_ptr().add(src_offset).cast_const().cast();
                D::copy_htod_async(op, dst.ptr().0, host, dst.len(), self.shared.raw)
            }
        })
    }

    #[inline]
    unsafe fn copy_d2h_async(&self, src: DeviceSlice, dst: &PinnedBuffer<D>, dst_offset: usize) -> Result<()> {
        let op = "stream.copy_d2h_async";
        rules::check_pinned_range(op, api::PinnedBuffer::len(dst), dst_offset, src.len())?;
        self.enqueue_async(op, src.len(), CapturedOp::Copy, || {
            // SAFETY: the range was checked against the pinned buffer; the caller promised that `src` is
            // live and that the host does not access `dst` until the copy ran.
            unsafe {
                let host = dst.host_ptr().add(dst_offset).cast();
                D::copy_dtoh_async(op, host, src.ptr().0, src.len(), self.shared.raw)
            }
        })
    }

    // Device ranges are not checked again here: a `DeviceSlice` is bounds-checked when it is made
    // (`DeviceBuffer::slice`, `DeviceSlice::sub`), and a range of freed memory faults the device, not
    // the host.
    #[inline]
    fn copy_d2d(&self, src: DeviceSlice, dst: DeviceSlice) -> Result<()> {
        let op = "stream.copy_d2d";
        rules::check_same_len(op, src.len(), dst.len())?;
        self.enqueue_async(op, src.len(), CapturedOp::Copy, || {
            // SAFETY: only device memory is touched; a bad device range faults the device (reported
            // asynchronously), never host memory. The stream is live.
            unsafe { D::copy_dtod_async(op, dst.ptr().0, src.ptr().0, src.len(), self.shared.raw) }
        })
    }

    #[inline]
    fn memset(&self, dst: DeviceSlice, value: u8) -> Result<()> {
        let op = "stream.memset";
        self.enqueue_async(op, dst.len(), CapturedOp::Memset, || {
            // SAFETY: as for `copy_d2d`.
            unsafe { D::memset_async(op, dst.ptr().0, value, dst.len(), self.shared.raw) }
        })
    }

    fn upload(&self, src: &[u8], dst: DeviceSlice) -> Result<()> {
        let op = "stream.upload";
        rules::check_same_len(op, src.len(), dst.len())?;
        self.enter_synchronous(op)?;
        if !src.is_empty() {
            // SAFETY: `src` is borrowed for the whole call and the call does not return before the copy
            // ran (the synchronize below); for pageable memory the driver stages the bytes itself.
            unsafe { D::copy_htod_async(op, dst.ptr().0, src.as_ptr().cast(), src.len(), self.shared.raw) }
                .map_err(|e| self.fault(op, e))?;
        }
        self.wait_idle(op)
    }

    fn download(&self, src: DeviceSlice, dst: &mut [u8]) -> Result<()> {
        let op = "stream.download";
        rules::check_same_len(op, src.len(), dst.len())?;
        self.enter_synchronous(op)?;
        if !dst.is_empty() {
            // SAFETY: `dst` is exclusively borrowed for the whole call, and the call does not return
            // before the copy ran (the synchronize below).
            unsafe { D::copy_dtoh_async(op, dst.as_mut_ptr().cast(), src.ptr().0, src.len(), self.shared.raw) }
                .map_err(|e| self.fault(op, e))?;
        }
        self.wait_idle(op)
    }

    #[inline]
    unsafe fn launch(&self, kernel: &Kernel<D>, config: &LaunchConfig, args: &[KernelArg]) -> Result<()> {
        let op = "stream.launch";
        // Stays on every launch: see `rules::check_launch` for why a validated request does not cover it.
        rules::check_launch(kernel.signature(), Some(kernel.limits()), config, args)?;
        rules::check_same_device(op, self.ordinal(), kernel.ordinal())?;
        self.enter(op)?;
        let mut packed = PackedArgs::new(args);
        if self.shared.capturing() {
            self.shared.keep_alive([kernel.module()]);
        }
        // A programmatic launch only where the device takes one.
        let config =
            &LaunchConfig { programmatic: config.programmatic && kernel.limits().programmatic_launch, ..*config };
        self.enqueue(
            op,
            || {
                CapturedOp::Kernel(KernelLaunch {
                    function: D::function_address(kernel.raw_handle()),
                    signature: kernel.signature_arc().clone(),
                    config: *config,
                    args: SmallVec::from_slice(args),
                })
            },
            || {
                // SAFETY: the kernel belongs to a module kept alive by `kernel`; arguments match its
                // signature in number and kind (checked above), so each pointer names a slot at least as
                // large as the parameter; the slots outlive the call (the driver copies the values, also
                // into the kernel node while capturing). What the kernel does with its pointer arguments
                // is the caller's promise (this function's contract).
                unsafe { D::launch_kernel(op, kernel.raw_handle(), config, self.shared.raw, packed.as_params()) }
            },
        )
        .map_err(|e| launch_fault::<D>(kernel, config, e))
    }

    #[inline]
    unsafe fn launch_graph(&self, exec: &GraphExec<D>) -> Result<()> {
        let op = "stream.launch_graph";
        // Only liveness and the device are checked here: the replayed launches were checked when they were
        // captured (`launch`), and their addresses are the caller's promise, which no check could confirm.
        let raw = exec.launchable(op)?;
        rules::check_same_device(op, self.ordinal(), exec.ordinal())?;
        self.enter(op)?;
        if self.shared.capturing() {
            self.shared.keep_alive(exec.modules());
        }
        // An empty graph has no executable form (see `GraphExec`): replaying it does nothing.
        let Some(raw) = raw else { return Ok(()) };
        let _serialised = exec.lock_for_launch();
        self.enqueue(
            op,
            || CapturedOp::Graph,
            || {
                // SAFETY: `raw` is live while `exec` is and not destroyed (checked by `launchable`); launches
                // of one executable graph are serialised by its lock and `update` needs `&mut`; the
                // addresses it replays are the caller's promise (this function's contract).
                unsafe { D::graph_launch(op, raw, self.shared.raw) }
            },
        )
    }

    fn record(&self, event: &Event<D>) -> Result<()> {
        let op = "stream.record";
        rules::check_same_device(op, self.ordinal(), event.ordinal())?;
        self.enter(op)?;
        // SAFETY: both handles are live while their owners are.
        unsafe { D::event_record(op, event.raw_handle(), self.shared.raw) }.map_err(|e| self.fault(op, e))?;
        event.mark_recorded(self.shared.capturing(), &self.shared.progress);
        Ok(())
    }

    fn wait(&self, event: &Event<D>) -> Result<()> {
        let op = "stream.wait";
        self.enter(op)?;
        if !event.ever_recorded() {
            // Waiting on an event that was never recorded completes at once (on every backend).
            return Ok(());
        }
        if self.shared.capturing() && !event.last_recorded_in_capture() {
            // "Dependency created on uncaptured work": the host backend's rule, kept on every driver
            // release whatever the driver itself would do with it.
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
        // SAFETY: both handles are live while their owners are. Cross-device waits are allowed.
        unsafe { D::stream_wait_event(op, self.shared.raw, event.raw_handle()) }.map_err(|e| self.fault(op, e))
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
        // Before the stream's lock: a load being waited for may look at capturing streams.
        D::globals().loads.capture_begins();
        {
            let mut capture = self.shared.capture.lock();
            if capture.is_some() {
                D::globals().loads.capture_ends();
                return Err(Error::CaptureState { op, reason: "the stream is already capturing" });
            }
            // SAFETY: `raw` is live while `self` is.
            if let Err(e) = unsafe { D::begin_capture(op, self.shared.raw, mode) } {
                D::globals().loads.capture_ends();
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
        D::globals().captures.register(&self.shared, mode);
        Ok(())
    }

    fn end_capture(&self) -> Result<Graph<D>> {
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
        D::globals().captures.unregister(Arc::as_ptr(&self.shared));
        D::globals().loads.capture_ends();
        // SAFETY: `raw` is live while `self` is.
        let ended = unsafe { D::end_capture(op, self.shared.raw) };
        device::flush_postponed_releases::<D>();
        match ended {
            Ok(raw) => {
                let graph = Graph::from_capture(self.shared.device.clone(), raw, cap.modules, cap.ops)?;
                match cap.invalidated {
                    // The driver accepted a capture that saggar had refused a call in: discard its graph.
                    Some(reason) => Err(Error::CaptureInvalidated { reason }),
                    None => Ok(graph),
                }
            }
            Err(e) if D::classify(&e) == ErrorClass::Fault(crate::gpu::DriverFault::CaptureInvalidated) => {
                Err(Error::CaptureInvalidated { reason: cap.invalidated.unwrap_or_else(|| e.to_string()) })
            }
            Err(e) => {
                // The driver may have ended the capture anyway (CUDA does for an unjoined fork); if it did
                // not, keep saggar's record so a later end_capture can finish it.
                // SAFETY: `raw` is live while `self` is.
                let still = unsafe { D::capture_status(op, self.shared.raw) };
                if matches!(still, Ok(Some(s)) if s != CaptureStatus::Idle) {
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
        // The driver may have invalidated a capture on its own (a call made outside saggar).
        // SAFETY: `raw` is live while `self` is.
        match unsafe { D::capture_status("stream.capture_status", self.shared.raw) } {
            Ok(Some(status)) => status,
            Ok(None) | Err(_) => saggar_view,
        }
    }
}

/// A launch the driver refused for lack of registers or shared memory is an invalid configuration.
#[cold]
fn launch_fault<D: Driver>(kernel: &Kernel<D>, config: &LaunchConfig, e: Error) -> Error {
    if D::classify(&e) == ErrorClass::LaunchOutOfResources {
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
}
