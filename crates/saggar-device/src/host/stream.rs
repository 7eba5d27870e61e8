//! Streams, events and stream capture of the host backend.
//!
//! Each stream owns a worker thread that executes its operations in order, asynchronously with respect
//! to the caller: results are visible only after [`Stream::synchronize`] or an event. A failure is
//! kept and reported at the next synchronisation, like a GPU's asynchronous errors, and the stream
//! goes on serving later work.
//!
//! Capture records operations, with the pointers they were given, instead of running them. The calls
//! CUDA and HIP forbid during capture fail here too and invalidate the capture: synchronising the
//! capturing stream, synchronous copies and allocations on the capturing thread (thread-local and
//! global modes) or on any thread (global mode), waiting on an event recorded outside the capture
//! ("dependency created on uncaptured work"), and recording work that touches another device.

use std::cell::RefCell;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use smallvec::SmallVec;

use crate::api::{CaptureStatus, Event, Kernel as _, Stream};
use crate::error::{Error, Result};
use crate::host::counters::Counters;
use crate::host::device::DeviceShared;
use crate::host::graph::{HostGraph, HostGraphExec};
use crate::host::kernels::{KernelContext, RegisteredKernel};
use crate::host::memory::owner_of;
use crate::host::pinned::{HostPinnedBuffer, PinnedAlloc};
use crate::host::{HostBackend, HostKernel};
use crate::pinning::check_pinned;
use crate::rules;
use crate::types::{BackendKind, CaptureMode, DevicePtr, DeviceSlice, KernelArg, LaunchConfig};

/// An operation that can run on a stream or be recorded into a graph.
#[derive(Clone)]
pub(crate) enum Op {
    CopyH2D { src: Arc<PinnedAlloc>, src_offset: usize, dst: DevicePtr, len: usize },
    CopyD2H { src: DevicePtr, len: usize, dst: Arc<PinnedAlloc>, dst_offset: usize },
    CopyD2D { src: DevicePtr, dst: DevicePtr, len: usize },
    Memset { dst: DevicePtr, len: usize, value: u8 },
    Launch { kernel: RegisteredKernel, config: LaunchConfig, args: SmallVec<[KernelArg; 8]> },
    Graph(Arc<[Op]>),
}

impl Op {
    /// The device addresses the operation touches (for the cross-device check during capture).
    fn pointers(&self) -> SmallVec<[DevicePtr; 8]> {
        match self {
            Op::CopyH2D { dst, .. } => SmallVec::from_slice(&[*dst]),
            Op::CopyD2H { src, .. } => SmallVec::from_slice(&[*src]),
            Op::CopyD2D { src, dst, .. } => SmallVec::from_slice(&[*src, *dst]),
            Op::Memset { dst, .. } => SmallVec::from_slice(&[*dst]),
            Op::Launch { args, .. } => {
                args.iter().filter_map(KernelArg::as_ptr).filter(|p| *p != DevicePtr::NULL).collect()
            }
            Op::Graph(_) => SmallVec::new(),
        }
    }

    /// What must stay the same for a graph update to be accepted.
    pub(crate) fn same_topology(&self, other: &Op) -> bool {
        match (self, other) {
            (Op::CopyH2D { .. }, Op::CopyH2D { .. })
            | (Op::CopyD2H { .. }, Op::CopyD2H { .. })
            | (Op::CopyD2D { .. }, Op::CopyD2D { .. })
            | (Op::Memset { .. }, Op::Memset { .. }) => true,
            (Op::Launch { kernel: a, .. }, Op::Launch { kernel: b, .. }) => a.signature.name == b.signature.name,
            (Op::Graph(a), Op::Graph(b)) => {
                a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| x.same_topology(y))
            }
            _ => false,
        }
    }

    pub(crate) fn execute(&self, device: &DeviceShared) -> Result<()> {
        let counters: &Counters = &device.counters;
        match self {
            Op::CopyH2D { src, src_offset, dst, len } => {
                // SAFETY: the user promised (copy_h2d_async's contract) not to write this range until the
                // stream passed this copy; the `Arc` keeps the memory alive.
                let bytes = unsafe { &src.bytes()[*src_offset..*src_offset + *len] };
                device.memory.lock().region_mut("copy_h2d_async", *dst, *len)?.copy_from_slice(bytes);
                Counters::bump(&counters.copies_h2d);
                Counters::add(&counters.bytes_h2d, *len);
            }
            Op::CopyD2H { src, len, dst, dst_offset } => {
                let memory = device.memory.lock();
                let bytes = memory.region("copy_d2h_async", *src, *len)?;
                // SAFETY: the user promised (copy_d2h_async's contract) not to access this range until
                // the stream passed this copy; the `Arc` keeps the memory alive.
                unsafe { dst.bytes_mut()[*dst_offset..*dst_offset + *len].copy_from_slice(bytes) };
                Counters::bump(&counters.copies_d2h);
                Counters::add(&counters.bytes_d2h, *len);
            }
            Op::CopyD2D { src, dst, len } => {
                device.memory.lock().copy("copy_d2d", *src, *dst, *len)?;
                Counters::bump(&counters.copies_d2d);
            }
            Op::Memset { dst, len, value } => {
                device.memory.lock().region_mut("memset", *dst, *len)?.fill(*value);
                Counters::bump(&counters.memsets);
            }
            Op::Launch { kernel, config, args } => {
                let mut memory = device.memory.lock();
                let mut ctx = KernelContext { space: &mut memory, kernel: &kernel.signature.name };
                (kernel.func)(&mut ctx, config, args)?;
                Counters::bump(&counters.launches);
            }
            Op::Graph(ops) => {
                for op in ops.iter() {
                    op.execute(device)?;
                }
                Counters::bump(&counters.graph_launches);
            }
        }
        Ok(())
    }
}

enum Job {
    Run(Op),
    Signal(Arc<EventShared>, u64),
    Wait(Arc<EventShared>, u64),
    Upload { data: Vec<u8>, dst: DevicePtr, reply: Sender<Result<()>> },
    Download { src: DevicePtr, len: usize, reply: Sender<Result<Vec<u8>>> },
}

pub(crate) struct Capture {
    id: u64,
    mode: CaptureMode,
    thread: ThreadId,
    ops: Vec<Op>,
    invalidated: Option<String>,
}

struct StreamState {
    submitted: u64,
    completed: u64,
    error: Option<Error>,
    capture: Option<Capture>,
}

pub(crate) struct StreamShared {
    pub(crate) id: u64,
    device: Arc<DeviceShared>,
    state: Mutex<StreamState>,
    done: Condvar,
}

impl StreamShared {
    /// Invalidates an active capture with `reason`; returns its mode if one was active.
    fn invalidate_capture(&self, reason: &str) -> Option<CaptureMode> {
        let mut st = self.state.lock();
        let cap = st.capture.as_mut()?;
        cap.invalidated.get_or_insert_with(|| reason.to_string());
        Some(cap.mode)
    }

    /// Waits for all submitted work and takes the first asynchronous error.
    pub(crate) fn wait_idle(&self) -> Result<()> {
        let mut st = self.state.lock();
        while st.completed < st.submitted {
            self.done.wait(&mut st);
        }
        match st.error.take() {
            Some(e) => Err(Error::Async { stream: self.id, source: Box::new(e) }),
            None => Ok(()),
        }
    }
}

thread_local! {
    /// Captures begun on this thread in thread-local or global mode.
    static THREAD_CAPTURES: RefCell<Vec<Weak<StreamShared>>> = const { RefCell::new(Vec::new()) };
}

/// Fails, and invalidates the captures concerned, if `op` is forbidden by an active capture: one begun
/// on this thread in thread-local or global mode, or one in global mode on `device` from any thread.
pub(crate) fn forbid_during_capture(device: &DeviceShared, op: &'static str) -> Result<()> {
    let reason = format!("{op} was called during capture");
    let mut hit = None;
    THREAD_CAPTURES.with(|c| {
        for stream in c.borrow().iter().filter_map(Weak::upgrade) {
            hit = hit.or(stream.invalidate_capture(&reason));
        }
    });
    for stream in device.global_captures.lock().iter().filter_map(Weak::upgrade) {
        hit = hit.or(stream.invalidate_capture(&reason));
    }
    match hit {
        Some(mode) => Err(Error::IllegalDuringCapture { op, mode: mode.name() }),
        None => Ok(()),
    }
}

/// How long an idle worker polls for the next job before it parks. A parked worker must be woken by a
/// futex call on the submitting thread (a microsecond or more on a VM), which would make the host
/// backend's enqueue cost unlike a GPU's; a short poll keeps back-to-back requests off that path.
const IDLE_POLL: std::time::Duration = std::time::Duration::from_micros(50);

/// The next job: polls for [`IDLE_POLL`], then blocks. `None` when the stream is dropped.
fn next_job(jobs: &Receiver<Job>) -> Option<Job> {
    let started = Instant::now();
    loop {
        match jobs.try_recv() {
            Ok(job) => return Some(job),
            Err(crossbeam_channel::TryRecvError::Disconnected) => return None,
            Err(crossbeam_channel::TryRecvError::Empty) if started.elapsed() < IDLE_POLL => std::hint::spin_loop(),
            Err(crossbeam_channel::TryRecvError::Empty) => return jobs.recv().ok(),
        }
    }
}

fn worker(device: Arc<DeviceShared>, shared: Weak<StreamShared>, jobs: Receiver<Job>) {
    while let Some(job) = next_job(&jobs) {
        let result = match job {
            Job::Run(op) => op.execute(&device),
            Job::Signal(event, generation) => {
                event.signal(generation);
                Ok(())
            }
            Job::Wait(event, generation) => {
                event.wait_for(generation);
                Ok(())
            }
            Job::Upload { data, dst, reply } => {
                let r = device.memory.lock().region_mut("upload", dst, data.len()).map(|m| m.copy_from_slice(&data));
                if r.is_ok() {
                    Counters::bump(&device.counters.copies_h2d);
                }
                let _ = reply.send(r);
                Ok(())
            }
            Job::Download { src, len, reply } => {
                let r = device.memory.lock().region("download", src, len).map(<[u8]>::to_vec);
                if r.is_ok() {
                    Counters::bump(&device.counters.copies_d2h);
                }
                let _ = reply.send(r);
                Ok(())
            }
        };
        let Some(shared) = shared.upgrade() else { continue };
        let mut st = shared.state.lock();
        st.completed += 1;
        if let Err(e) = result {
            st.error.get_or_insert(e);
        }
        shared.done.notify_all();
    }
}

/// A stream of the host backend: an in-order queue executed by its own worker thread.
///
/// # Thread safety
/// `Send + Sync`; see [`Stream`].
pub struct HostStream {
    shared: Arc<StreamShared>,
    jobs: Option<Sender<Job>>,
    worker: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for HostStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostStream")
            .field("id", &self.shared.id)
            .field("device", &self.shared.device.info.ordinal)
            .finish()
    }
}

impl HostStream {
    pub(crate) fn new(device: Arc<DeviceShared>) -> Result<HostStream> {
        let id = device.next_id.fetch_add(1, Relaxed);
        let shared = Arc::new(StreamShared {
            id,
            device: device.clone(),
            state: Mutex::new(StreamState { submitted: 0, completed: 0, error: None, capture: None }),
            done: Condvar::new(),
        });
        let (tx, rx) = crossbeam_channel::unbounded();
        let weak = Arc::downgrade(&shared);
        let worker = std::thread::Builder::new()
            .name(format!("saggar-host-stream-{}-{id}", device.info.ordinal))
            .spawn(move || worker(device, weak, rx))
            .map_err(|e| Error::Vendor {
                backend: BackendKind::Host,
                op: "device.create_stream",
                name: "ThreadSpawn".into(),
                code: -1,
                message: e.to_string(),
            })?;
        shared.device.streams.lock().push(Arc::downgrade(&shared));
        Ok(HostStream { shared, jobs: Some(tx), worker: Some(worker) })
    }

    fn ordinal(&self) -> usize {
        self.shared.device.info.ordinal
    }

    fn send(&self, st: &mut StreamState, job: Job) {
        st.submitted += 1;
        // The worker only stops after `jobs` is dropped in `Drop`, so the channel is open here.
        self.jobs.as_ref().expect("stream is open").send(job).expect("stream worker is alive");
    }

    /// Runs `op` now (asynchronously) or records it into the active capture.
    fn enqueue(&self, op_name: &'static str, op: Op) -> Result<()> {
        check_pinned(op_name, BackendKind::Host, self.ordinal())?;
        self.shared.device.check_alive()?;
        let mut st = self.shared.state.lock();
        if let Some(cap) = st.capture.as_mut() {
            if let Some(other) = op.pointers().into_iter().filter_map(owner_of).find(|o| *o != self.ordinal()) {
                cap.invalidated
                    .get_or_insert_with(|| format!("{op_name} touched memory of device {other} during capture"));
                return Err(Error::DeviceMismatch { op: op_name, ordinal: self.ordinal(), other });
            }
            cap.ops.push(op);
            return Ok(());
        }
        if matches!(op, Op::Launch { .. } | Op::Graph(_)) {
            self.shared.device.count_launch()?;
        }
        self.send(&mut st, Job::Run(op));
        Ok(())
    }

    /// Fails if this stream is capturing (synchronous work cannot be captured), invalidating it.
    fn forbid_own_capture(&self, op: &'static str) -> Result<()> {
        match self.shared.invalidate_capture(&format!("{op} was called on the capturing stream")) {
            Some(mode) => Err(Error::IllegalDuringCapture { op, mode: mode.name() }),
            None => Ok(()),
        }
    }

    /// Synchronous work goes through the queue too, so it is ordered after what came before.
    fn synchronous<T>(&self, op: &'static str, make: impl FnOnce(Sender<Result<T>>) -> Job) -> Result<T> {
        check_pinned(op, BackendKind::Host, self.ordinal())?;
        self.shared.device.check_alive()?;
        forbid_during_capture(&self.shared.device, op)?;
        self.forbid_own_capture(op)?;
        let (tx, rx) = crossbeam_channel::bounded(1);
        {
            let mut st = self.shared.state.lock();
            self.send(&mut st, make(tx));
        }
        rx.recv().expect("stream worker replies to every synchronous job")
    }
}

impl Drop for HostStream {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(worker) = self.worker.take()
            && worker.join().is_err()
        {
            self.shared.device.defer(Error::Vendor {
                backend: BackendKind::Host,
                op: "stream.drop",
                name: "WorkerPanicked".into(),
                code: -1,
                message: format!("the worker thread of stream {} panicked", self.shared.id),
            });
        }
        if let Some(e) = self.shared.state.lock().error.take() {
            self.shared.device.defer(Error::Async { stream: self.shared.id, source: Box::new(e) });
        }
    }
}

impl Stream for HostStream {
    type Backend = HostBackend;

    fn device_ordinal(&self) -> usize {
        self.ordinal()
    }

    unsafe fn copy_h2d_async(&self, src: &HostPinnedBuffer, src_offset: usize, dst: DeviceSlice) -> Result<()> {
        rules::check_pinned_range("stream.copy_h2d_async", src.alloc.len(), src_offset, dst.len())?;
        self.enqueue(
            "stream.copy_h2d_async",
            Op::CopyH2D { src: src.alloc.clone(), src_offset, dst: dst.ptr(), len: dst.len() },
        )
    }

    unsafe fn copy_d2h_async(&self, src: DeviceSlice, dst: &HostPinnedBuffer, dst_offset: usize) -> Result<()> {
        rules::check_pinned_range("stream.copy_d2h_async", dst.alloc.len(), dst_offset, src.len())?;
        self.enqueue(
            "stream.copy_d2h_async",
            Op::CopyD2H { src: src.ptr(), len: src.len(), dst: dst.alloc.clone(), dst_offset },
        )
    }

    fn copy_d2d(&self, src: DeviceSlice, dst: DeviceSlice) -> Result<()> {
        rules::check_same_len("stream.copy_d2d", src.len(), dst.len())?;
        self.enqueue("stream.copy_d2d", Op::CopyD2D { src: src.ptr(), dst: dst.ptr(), len: src.len() })
    }

    fn memset(&self, dst: DeviceSlice, value: u8) -> Result<()> {
        self.enqueue("stream.memset", Op::Memset { dst: dst.ptr(), len: dst.len(), value })
    }

    fn upload(&self, src: &[u8], dst: DeviceSlice) -> Result<()> {
        rules::check_same_len("stream.upload", src.len(), dst.len())?;
        self.synchronous("stream.upload", |reply| Job::Upload { data: src.to_vec(), dst: dst.ptr(), reply })
    }

    fn download(&self, src: DeviceSlice, dst: &mut [u8]) -> Result<()> {
        rules::check_same_len("stream.download", src.len(), dst.len())?;
        let bytes =
            self.synchronous("stream.download", |reply| Job::Download { src: src.ptr(), len: src.len(), reply })?;
        dst.copy_from_slice(&bytes);
        Ok(())
    }

    unsafe fn launch(&self, kernel: &HostKernel, config: &LaunchConfig, args: &[KernelArg]) -> Result<()> {
        // The host backend knows no per-kernel limits beyond the common ones.
        rules::check_launch(kernel.signature(), None, config, args)?;
        rules::check_same_device("stream.launch", self.ordinal(), kernel.ordinal)?;
        self.enqueue(
            "stream.launch",
            Op::Launch { kernel: kernel.registered.clone(), config: *config, args: SmallVec::from_slice(args) },
        )
    }

    unsafe fn launch_graph(&self, exec: &HostGraphExec) -> Result<()> {
        let body = exec.body("stream.launch_graph")?;
        rules::check_same_device("stream.launch_graph", self.ordinal(), exec.ordinal())?;
        self.enqueue("stream.launch_graph", Op::Graph(body))
    }

    fn record(&self, event: &HostEvent) -> Result<()> {
        check_pinned("stream.record", BackendKind::Host, self.ordinal())?;
        rules::check_same_device("stream.record", self.ordinal(), event.shared.ordinal)?;
        let mut st = self.shared.state.lock();
        let mut ev = event.shared.state.lock();
        if let Some(cap) = st.capture.as_ref() {
            // Inside a capture an event only orders work within the graph; it completes when the graph runs.
            ev.capture_id = Some(cap.id);
            return Ok(());
        }
        ev.recorded += 1;
        ev.capture_id = None;
        let generation = ev.recorded;
        drop(ev);
        Counters::bump(&self.shared.device.counters.event_records);
        self.send(&mut st, Job::Signal(event.shared.clone(), generation));
        Ok(())
    }

    fn wait(&self, event: &HostEvent) -> Result<()> {
        check_pinned("stream.wait", BackendKind::Host, self.ordinal())?;
        let mut st = self.shared.state.lock();
        let ev = event.shared.state.lock();
        if let Some(cap) = st.capture.as_mut() {
            if ev.recorded == 0 || ev.capture_id == Some(cap.id) {
                return Ok(());
            }
            cap.invalidated.get_or_insert_with(|| {
                "dependency created on uncaptured work: waited on an event recorded outside the capture".into()
            });
            return Err(Error::IllegalDuringCapture {
                op: "stream.wait on an event recorded outside the capture",
                mode: cap.mode.name(),
            });
        }
        let generation = ev.recorded;
        drop(ev);
        if generation > 0 {
            self.send(&mut st, Job::Wait(event.shared.clone(), generation));
        }
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        check_pinned("stream.synchronize", BackendKind::Host, self.ordinal())?;
        self.forbid_own_capture("stream.synchronize")?;
        Counters::bump(&self.shared.device.counters.stream_synchronizes);
        self.shared.wait_idle()?;
        self.shared.device.check_alive()
    }

    fn begin_capture(&self, mode: CaptureMode) -> Result<()> {
        check_pinned("stream.begin_capture", BackendKind::Host, self.ordinal())?;
        let mut st = self.shared.state.lock();
        if st.capture.is_some() {
            return Err(Error::CaptureState { op: "stream.begin_capture", reason: "the stream is already capturing" });
        }
        let id = self.shared.device.next_id.fetch_add(1, Relaxed);
        st.capture =
            Some(Capture { id, mode, thread: std::thread::current().id(), ops: Vec::new(), invalidated: None });
        drop(st);
        let weak = Arc::downgrade(&self.shared);
        match mode {
            CaptureMode::ThreadLocal => THREAD_CAPTURES.with(|c| c.borrow_mut().push(weak)),
            CaptureMode::Global => {
                THREAD_CAPTURES.with(|c| c.borrow_mut().push(weak.clone()));
                self.shared.device.global_captures.lock().push(weak);
            }
            CaptureMode::Relaxed => {}
        }
        Ok(())
    }

    fn end_capture(&self) -> Result<HostGraph> {
        let mut st = self.shared.state.lock();
        let cap = st
            .capture
            .as_mut()
            .ok_or(Error::CaptureState { op: "stream.end_capture", reason: "no capture is active on this stream" })?;
        if cap.mode != CaptureMode::Relaxed && cap.thread != std::thread::current().id() {
            cap.invalidated.get_or_insert_with(|| {
                "end_capture was called from a thread other than the one that began the capture".into()
            });
            return Err(Error::CaptureState {
                op: "stream.end_capture",
                reason: "a thread-local or global capture must end on the thread that began it",
            });
        }
        let cap = st.capture.take().expect("checked above");
        drop(st);
        let me = Arc::as_ptr(&self.shared);
        let keep = |w: &Weak<StreamShared>| w.strong_count() > 0 && w.as_ptr() != me;
        THREAD_CAPTURES.with(|c| c.borrow_mut().retain(keep));
        self.shared.device.global_captures.lock().retain(keep);
        if let Some(reason) = cap.invalidated {
            return Err(Error::CaptureInvalidated { reason });
        }
        Counters::bump(&self.shared.device.counters.captures);
        Ok(HostGraph { ordinal: self.ordinal(), ops: cap.ops })
    }

    fn capture_status(&self) -> CaptureStatus {
        match &self.shared.state.lock().capture {
            None => CaptureStatus::Idle,
            Some(cap) if cap.invalidated.is_some() => CaptureStatus::Invalidated,
            Some(_) => CaptureStatus::Active,
        }
    }
}

struct EventState {
    recorded: u64,
    completed: u64,
    time: Option<Instant>,
    capture_id: Option<u64>,
}

pub(crate) struct EventShared {
    ordinal: usize,
    /// Created with timing enabled, so `elapsed_since` can use it.
    timed: bool,
    state: Mutex<EventState>,
    cv: Condvar,
}

impl EventShared {
    fn signal(&self, generation: u64) {
        let mut st = self.state.lock();
        if generation > st.completed {
            st.completed = generation;
            st.time = Some(Instant::now());
        }
        self.cv.notify_all();
    }

    fn wait_for(&self, generation: u64) {
        let mut st = self.state.lock();
        while st.completed < generation {
            self.cv.wait(&mut st);
        }
    }
}

/// An event of the host backend.
///
/// # Thread safety
/// `Send + Sync`.
pub struct HostEvent {
    pub(crate) shared: Arc<EventShared>,
}

impl std::fmt::Debug for HostEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostEvent").field("device", &self.shared.ordinal).finish_non_exhaustive()
    }
}

impl HostEvent {
    pub(crate) fn new(ordinal: usize, timed: bool) -> HostEvent {
        HostEvent {
            shared: Arc::new(EventShared {
                ordinal,
                timed,
                state: Mutex::new(EventState { recorded: 0, completed: 0, time: None, capture_id: None }),
                cv: Condvar::new(),
            }),
        }
    }

    fn time(&self, op: &'static str) -> Result<Instant> {
        if !self.shared.timed {
            return Err(Error::Event { op, reason: "the event was created without timing (create_untimed_event)" });
        }
        let st = self.shared.state.lock();
        if st.recorded == 0 {
            return Err(Error::Event { op, reason: "the event was never recorded" });
        }
        if st.completed < st.recorded {
            return Err(Error::Event { op, reason: "the event has not completed yet; synchronize it first" });
        }
        st.time.ok_or(Error::Event { op, reason: "the event has no timestamp" })
    }
}

impl Event for HostEvent {
    fn synchronize(&self) -> Result<()> {
        let st = self.shared.state.lock();
        if st.capture_id.is_some() {
            return Err(Error::Event {
                op: "event.synchronize",
                reason: "the event was last recorded during a capture; it completes only when the graph runs",
            });
        }
        let generation = st.recorded;
        drop(st);
        self.shared.wait_for(generation);
        Ok(())
    }

    fn is_complete(&self) -> Result<bool> {
        let st = self.shared.state.lock();
        Ok(st.completed >= st.recorded)
    }

    fn elapsed_since(&self, start: &HostEvent) -> Result<Duration> {
        let end = self.time("event.elapsed_since")?;
        let begin = start.time("event.elapsed_since")?;
        Ok(end.saturating_duration_since(begin))
    }
}
