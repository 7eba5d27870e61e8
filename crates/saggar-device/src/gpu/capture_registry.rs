//! Which streams are capturing, on this thread and in the whole process: the bookkeeping behind the
//! rule CUDA and HIP share (`cuThreadExchangeStreamCaptureMode`): "If the local thread has an ongoing
//! capture sequence that was not initiated with [relaxed mode], or if any other thread has a
//! concurrent capture sequence initiated with [global mode], this thread is prohibited from
//! potentially unsafe API calls." Each GPU backend keeps one [`CaptureRegistry`] in its globals; a
//! refused call invalidates the captures that forbade it, as the driver would. The registry also gives driver errors their saggar meaning ([`CaptureRegistry::map_fault`]), once the driver has
//! read its own error codes into a [`DriverFault`].

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::LocalKey;

use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::types::CaptureMode;

/// A stream whose active capture can be invalidated.
pub(crate) trait CapturingStream: Send + Sync + 'static {
    /// Marks the active capture invalidated with `reason` (the first reason wins); returns its mode,
    /// or `None` if no capture is active.
    fn invalidate(&self, reason: &dyn Fn() -> String) -> Option<CaptureMode>;
    /// The reason the active capture was invalidated, if it was.
    fn invalidation(&self) -> Option<String>;
}

/// What a driver error means, read by the backend from its own error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverFault {
    /// A call stream capture does not allow.
    CaptureViolation,
    /// Work on a capture that was already invalidated.
    CaptureInvalidated,
    /// A query of, or wait on, an event last recorded during a capture.
    CapturedEvent,
    /// An asynchronous device fault (a kernel or copy failed on the device), reported late.
    Sticky,
    /// Anything else: returned as it is.
    Other,
}

/// The captures of one backend: those begun on each thread (thread-local or global mode, in a
/// thread-local list) and those begun in global mode anywhere.
pub(crate) struct CaptureRegistry<S: 'static> {
    thread: &'static LocalKey<RefCell<Vec<Weak<S>>>>,
    global: Mutex<Vec<Weak<S>>>,
    /// `global.len()`, readable without the lock.
    global_count: AtomicUsize,
}

/// The streams that forbid a call, gathered without allocating in the usual case.
pub(crate) type Forbidding<S> = SmallVec<[Arc<S>; 4]>;

impl<S: CapturingStream> CaptureRegistry<S> {
    /// A registry whose per-thread list is `thread` (declared by the backend with `thread_local!`).
    pub(crate) const fn new(thread: &'static LocalKey<RefCell<Vec<Weak<S>>>>) -> Self {
        CaptureRegistry { thread, global: Mutex::new(Vec::new()), global_count: AtomicUsize::new(0) }
    }

    /// Records a capture begun on this thread in `mode`. Call it after releasing the stream's own
    /// lock: [`CaptureRegistry::forbid_during_capture`] takes the global list's lock and then
    /// streams' locks, never the other way round.
    pub(crate) fn register(&self, stream: &Arc<S>, mode: CaptureMode) {
        let weak = Arc::downgrade(stream);
        if mode != CaptureMode::Relaxed {
            self.thread.with(|c| c.borrow_mut().push(weak.clone()));
        }
        if mode == CaptureMode::Global {
            let mut list = self.global.lock();
            list.push(weak);
            self.global_count.store(list.len(), Ordering::Release);
        }
    }

    /// Forgets `stream`'s capture, on this thread and globally.
    pub(crate) fn unregister(&self, stream: *const S) {
        let _ = self.thread.try_with(|c| {
            c.borrow_mut().retain(|w| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), stream));
        });
        self.unregister_global(stream);
    }

    /// Forgets `stream`'s global-mode capture (any thread may drop a stream).
    pub(crate) fn unregister_global(&self, stream: *const S) {
        if self.global_count.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut list = self.global.lock();
        list.retain(|w| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), stream));
        self.global_count.store(list.len(), Ordering::Release);
    }

    /// Whether "potentially unsafe" calls are forbidden on this thread right now: a capture begun here
    /// in thread-local or global mode, or a global-mode capture anywhere.
    pub(crate) fn unsafe_calls_forbidden(&self) -> bool {
        self.global_count.load(Ordering::Acquire) > 0
            || self.thread.try_with(|c| c.borrow().iter().any(|w| w.strong_count() > 0)).unwrap_or(false)
    }

    /// The streams whose captures forbid unsafe calls on this thread.
    pub(crate) fn forbidding_captures(&self) -> Forbidding<S> {
        let mut out: Forbidding<S> = SmallVec::new();
        let _ = self.thread.try_with(|c| {
            let mut list = c.borrow_mut();
            list.retain(|w| w.strong_count() > 0);
            out.extend(list.iter().filter_map(Weak::upgrade));
        });
        if self.global_count.load(Ordering::Acquire) > 0 {
            for stream in self.global.lock().iter().filter_map(Weak::upgrade) {
                if !out.iter().any(|s| Arc::ptr_eq(s, &stream)) {
                    out.push(stream);
                }
            }
        }
        out
    }

    /// Invalidates every capture that forbids calls on this thread with `reason`; returns the mode
    /// of the first one, if any.
    pub(crate) fn invalidate_forbidding(&self, reason: &dyn Fn() -> String) -> Option<CaptureMode> {
        let mut mode = None;
        for stream in self.forbidding_captures() {
            if let Some(m) = stream.invalidate(reason) {
                mode.get_or_insert(m);
            }
        }
        mode
    }

    /// Fails with [`Error::IllegalDuringCapture`], and invalidates the captures concerned, if `op`
    /// is forbidden on this thread right now. Called by every operation the driver counts as
    /// potentially unsafe, before it reaches the driver.
    pub(crate) fn forbid_during_capture(&self, op: &'static str) -> Result<()> {
        if !self.unsafe_calls_forbidden() {
            return Ok(());
        }
        match self.invalidate_forbidding(&|| format!("{op} was called during capture")) {
            Some(mode) => Err(Error::IllegalDuringCapture { op, mode: mode.name() }),
            None => Ok(()),
        }
    }

    /// Gives a driver error of kind `fault` its saggar meaning: a capture violation becomes
    /// [`Error::IllegalDuringCapture`] (invalidating `stream`'s capture and those that forbid calls
    /// here), work on a broken capture [`Error::CaptureInvalidated`], a use of an event recorded in a
    /// capture [`Error::Event`], and an asynchronous device fault [`Error::Async`] naming `stream_id`
    /// (0 for the device as a whole). Anything else is returned as it is.
    #[cold]
    pub(crate) fn map_fault(
        &self,
        op: &'static str,
        error: Error,
        fault: DriverFault,
        stream: Option<&S>,
        stream_id: u64,
    ) -> Error {
        match fault {
            DriverFault::CaptureViolation => {
                let reason = || format!("{op} failed during capture: {error}");
                let mut mode = stream.and_then(|s| s.invalidate(&reason));
                if let Some(m) = self.invalidate_forbidding(&reason) {
                    mode.get_or_insert(m);
                }
                // Nothing of saggar's is capturing here: the capture that forbids the call is another
                // thread's global-mode capture, or one begun outside saggar.
                Error::IllegalDuringCapture { op, mode: mode.unwrap_or(CaptureMode::Global).name() }
            }
            DriverFault::CaptureInvalidated => {
                let reason = stream.and_then(S::invalidation).unwrap_or_else(|| error.to_string());
                Error::CaptureInvalidated { reason }
            }
            DriverFault::CapturedEvent => Error::Event {
                op,
                reason: "the event was last recorded during a capture; it completes only when the graph runs",
            },
            DriverFault::Sticky => Error::Async { stream: stream_id, source: Box::new(error) },
            DriverFault::Other => error,
        }
    }
}
