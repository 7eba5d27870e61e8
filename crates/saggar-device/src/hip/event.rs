//! Events of the HIP backend: `hipEventCreateWithFlags`, timing enabled (`hipEventDefault`) or (for
//! fences) disabled, destroyed on drop.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use crate::api::Event;
use crate::error::{Error, Result};
use crate::hip::device::{self, DeviceShared, SendHandle};
use crate::hip::result::{self, has_code};
use crate::hip::stream::map_fault;
use crate::hip::sys::{self, code};
use crate::stream_progress::{LastRecord, StreamProgress};

/// Never recorded.
const NEVER: u8 = 0;
/// Last recorded outside a capture.
const RECORDED: u8 = 1;
/// Last recorded during a capture: it completes only when the graph runs.
const CAPTURED: u8 = 2;

/// An event of the HIP backend: timing enabled (`hipEventDefault`) from `create_event`, disabled
/// (`hipEventDisableTiming`) from `create_untimed_event`.
///
/// # Thread safety
/// `Send + Sync`: an event may be recorded, waited on and queried from any thread. HIP follows CUDA in
/// refusing to query or synchronise an event last recorded inside a capture (`hipErrorCapturedEvent`:
/// "the operation is not permitted on an event which was last recorded in a capturing stream"); saggar
/// refuses that with [`Error::Event`] before HIP sees it. `hipEventDestroy` on an event that has not
/// completed does not block; HIP releases it when it completes.
pub struct HipEvent {
    device: Arc<DeviceShared>,
    raw: sys::hipEvent_t,
    state: AtomicU8,
    /// Created with timing enabled, so [`Event::elapsed_since`] can use it.
    timed: bool,
    /// Which record of which stream it last was, so a synchronized stream answers for it.
    last_record: LastRecord,
}

// SAFETY: a `hipEvent_t` is an opaque handle the runtime accepts from any thread; saggar's own state is an
// atomic.
unsafe impl Send for HipEvent {}
// SAFETY: as above.
unsafe impl Sync for HipEvent {}

impl std::fmt::Debug for HipEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipEvent").field("device", &self.ordinal()).finish_non_exhaustive()
    }
}

impl HipEvent {
    /// A new event; the device is current (the caller entered it).
    pub(crate) fn new(device: Arc<DeviceShared>, timed: bool) -> Result<HipEvent> {
        let op = if timed { "device.create_event" } else { "device.create_untimed_event" };
        let raw = result::event::create(op, timed)?;
        Ok(HipEvent { device, raw, state: AtomicU8::new(NEVER), timed, last_record: LastRecord::default() })
    }

    pub(crate) fn ordinal(&self) -> usize {
        self.device.ordinal()
    }

    /// The raw HIP handle, for interop and benchmarks. saggar keeps ownership: do not destroy it.
    pub fn raw_handle(&self) -> sys::hipEvent_t {
        self.raw
    }

    /// Notes a record just enqueued on the stream of `progress`.
    pub(crate) fn mark_recorded(&self, during_capture: bool, progress: &Arc<StreamProgress>) {
        if during_capture {
            self.last_record.forget();
        } else {
            self.last_record.recorded(progress);
        }
        self.state.store(if during_capture { CAPTURED } else { RECORDED }, Ordering::Release);
    }

    pub(crate) fn ever_recorded(&self) -> bool {
        self.state.load(Ordering::Acquire) != NEVER
    }

    pub(crate) fn last_recorded_in_capture(&self) -> bool {
        self.state.load(Ordering::Acquire) == CAPTURED
    }

    fn refuse_captured(&self, op: &'static str) -> Result<()> {
        if self.last_recorded_in_capture() {
            return Err(Error::Event {
                op,
                reason: "the event was last recorded during a capture; it completes only when the graph runs",
            });
        }
        Ok(())
    }

    fn fault(&self, op: &'static str, error: Error) -> Error {
        map_fault(op, error, None, 0)
    }
}

impl Event for HipEvent {
    fn synchronize(&self) -> Result<()> {
        let op = "event.synchronize";
        self.refuse_captured(op)?;
        if self.last_record.known_complete() {
            return Ok(());
        }
        self.device.touch(op)?;
        // SAFETY: `raw` is live while `self` is.
        unsafe { result::event::synchronize(op, self.raw) }.map_err(|e| self.fault(op, e))
    }

    fn is_complete(&self) -> Result<bool> {
        let op = "event.is_complete";
        self.refuse_captured(op)?;
        if self.last_record.known_complete() {
            return Ok(true);
        }
        self.device.touch(op)?;
        // SAFETY: `raw` is live while `self` is.
        unsafe { result::event::query(op, self.raw) }.map_err(|e| self.fault(op, e))
    }

    fn elapsed_since(&self, start: &HipEvent) -> Result<Duration> {
        let op = "event.elapsed_since";
        for event in [start, self] {
            if !event.timed {
                return Err(Error::Event { op, reason: "the event was created without timing (create_untimed_event)" });
            }
            match event.state.load(Ordering::Acquire) {
                NEVER => return Err(Error::Event { op, reason: "the event was never recorded" }),
                CAPTURED => event.refuse_captured(op)?,
                _ => {}
            }
        }
        if start.ordinal() != self.ordinal() {
            return Err(Error::DeviceMismatch { op, ordinal: self.ordinal(), other: start.ordinal() });
        }
        self.device.touch(op)?;
        // SAFETY: both handles are live while their owners are.
        match unsafe { result::event::elapsed_ms(op, start.raw, self.raw) } {
            Ok(ms) => Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1000.0)),
            Err(e) if has_code(&e, code::NOT_READY) => {
                Err(Error::Event { op, reason: "the event has not completed yet; synchronize it first" })
            }
            Err(e) => Err(self.fault(op, e)),
        }
    }
}

impl Drop for HipEvent {
    fn drop(&mut self) {
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if !raw.is_null() {
            let raw = SendHandle::new(raw);
            device::release(&self.device, "event.drop", move || {
                // SAFETY: `raw` was swapped out, so it is destroyed once.
                unsafe { result::event::destroy("event.drop", raw.into_inner()) }
            });
        }
    }
}
