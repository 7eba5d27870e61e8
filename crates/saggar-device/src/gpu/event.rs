//! Events of a GPU backend: timing enabled or (for fences) disabled, destroyed on drop.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use crate::api;
use crate::error::{Error, Result};
use crate::gpu::device::{self, DeviceShared, SendHandle};
use crate::gpu::driver::{Driver, ErrorClass};
use crate::gpu::progress::{LastRecord, StreamProgress};
use crate::rules;

/// Never recorded.
const NEVER: u8 = 0;
/// Last recorded outside a capture.
const RECORDED: u8 = 1;
/// Last recorded during a capture: it completes only when the graph runs.
const CAPTURED: u8 = 2;

/// An event of a GPU backend: timing enabled (`CU_EVENT_DEFAULT`, `hipEventDefault`) from
/// `create_event`, disabled (`CU_EVENT_DISABLE_TIMING`, `hipEventDisableTiming`) from
/// `create_untimed_event`.
///
/// # Thread safety
/// `Send + Sync`: an event may be recorded, waited on and queried from any thread. CUDA forbids
/// querying or synchronising an event last recorded inside a capture ("attempting cuEventQuery on an
/// event that was last recorded inside a capture sequence", `cuThreadExchangeStreamCaptureMode`), and
/// HIP follows (`hipErrorCapturedEvent`); saggar refuses that with [`Error::Event`] before the driver
/// sees it. On drop, CUDA: "An event may be destroyed before it is complete [...]. In this case, the
/// call does not block on completion of the event, and any associated resources will automatically be
/// released asynchronously at completion"; HIP does the same.
pub struct Event<D: Driver> {
    device: Arc<DeviceShared<D>>,
    raw: D::Event,
    state: AtomicU8,
    /// Created with timing enabled, so [`api::Event::elapsed_since`] can use it.
    timed: bool,
    /// Which record of which stream it last was, so a synchronized stream answers for it.
    last_record: LastRecord,
}

// SAFETY: an event handle is opaque and the vendors accept it from any thread; saggar's own state is
// atomic or behind a lock.
unsafe impl<D: Driver> Send for Event<D> {}
// SAFETY: as above.
unsafe impl<D: Driver> Sync for Event<D> {}

impl<D: Driver> std::fmt::Debug for Event<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event").field("device", &self.ordinal()).finish_non_exhaustive()
    }
}

impl<D: Driver> Event<D> {
    /// A new event; the device is current (the caller entered it).
    pub(crate) fn new(device: Arc<DeviceShared<D>>, timed: bool) -> Result<Event<D>> {
        let op = if timed { "device.create_event" } else { "device.create_untimed_event" };
        let raw = D::event_create(op, timed)?;
        Ok(Event { device, raw, state: AtomicU8::new(NEVER), timed, last_record: LastRecord::default() })
    }

    #[inline]
    pub(crate) fn ordinal(&self) -> usize {
        self.device.ordinal()
    }

    /// The raw driver handle, for interop and benchmarks. saggar keeps ownership: do not destroy it.
    #[inline]
    pub fn raw_handle(&self) -> D::Event {
        self.raw
    }

    /// Notes a record just enqueued on the stream of `progress`.
    #[inline]
    pub(crate) fn mark_recorded(&self, during_capture: bool, progress: &Arc<StreamProgress>) {
        if during_capture {
            self.last_record.forget();
        } else {
            self.last_record.recorded(progress);
        }
        self.state.store(if during_capture { CAPTURED } else { RECORDED }, Ordering::Release);
    }

    #[inline]
    pub(crate) fn ever_recorded(&self) -> bool {
        self.state.load(Ordering::Acquire) != NEVER
    }

    #[inline]
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
}

impl<D: Driver> api::Event for Event<D> {
    fn synchronize(&self) -> Result<()> {
        let op = "event.synchronize";
        self.refuse_captured(op)?;
        if self.last_record.known_complete() {
            return Ok(());
        }
        self.device.touch(op)?;
        // SAFETY: `raw` is live while `self` is.
        unsafe { D::event_synchronize(op, self.raw) }.map_err(|e| device::map_fault::<D>(op, e, None, 0))
    }

    fn is_complete(&self) -> Result<bool> {
        let op = "event.is_complete";
        self.refuse_captured(op)?;
        if self.last_record.known_complete() {
            return Ok(true);
        }
        self.device.touch(op)?;
        // SAFETY: `raw` is live while `self` is.
        unsafe { D::event_query(op, self.raw) }.map_err(|e| device::map_fault::<D>(op, e, None, 0))
    }

    fn elapsed_since(&self, start: &Event<D>) -> Result<Duration> {
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
        rules::check_same_device(op, self.ordinal(), start.ordinal())?;
        self.device.touch(op)?;
        // SAFETY: both handles are live while their owners are.
        match unsafe { D::event_elapsed_ms(op, start.raw, self.raw) } {
            Ok(ms) => Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1000.0)),
            Err(e) if D::classify(&e) == ErrorClass::NotReady => {
                Err(Error::Event { op, reason: "the event has not completed yet; synchronize it first" })
            }
            Err(e) => Err(device::map_fault::<D>(op, e, None, 0)),
        }
    }
}

impl<D: Driver> Drop for Event<D> {
    fn drop(&mut self) {
        let raw = SendHandle::new(self.raw);
        device::release(&self.device, "event.drop", move || {
            // SAFETY: `drop` runs once, so `raw` is destroyed once.
            unsafe { D::event_destroy("event.drop", raw.into_inner()) }
        });
    }
}
