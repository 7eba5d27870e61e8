//! Events of the CUDA backend: `cuEventCreate`, timing enabled or (for fences) disabled, destroyed
//! on drop.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use cudarc::driver::sys;

use crate::api::Event;
use crate::cuda::device::{self, DeviceShared, SendHandle};
use crate::cuda::result::{self, CUresult, has_code};
use crate::cuda::stream::map_fault;
use crate::error::{Error, Result};
use crate::stream_progress::{LastRecord, StreamProgress};

/// Never recorded.
const NEVER: u8 = 0;
/// Last recorded outside a capture.
const RECORDED: u8 = 1;
/// Last recorded during a capture: it completes only when the graph runs.
const CAPTURED: u8 = 2;

/// An event of the CUDA backend: timing enabled (`CU_EVENT_DEFAULT`) from `create_event`, disabled
/// (`CU_EVENT_DISABLE_TIMING`) from `create_untimed_event`.
///
/// # Thread safety
/// `Send + Sync`: an event may be recorded, waited on and queried from any thread. CUDA forbids
/// querying or synchronising an event last recorded inside a capture ("attempting cuEventQuery on an
/// event that was last recorded inside a capture sequence", `cuThreadExchangeStreamCaptureMode`); saggar
/// refuses that with [`Error::Event`]. On drop, CUDA: "An event may be destroyed before it is complete
/// [...]. In this case, the call does not block on completion of the event, and any associated resources
/// will automatically be released asynchronously at completion."
pub struct CudaEvent {
    device: Arc<DeviceShared>,
    raw: sys::CUevent,
    state: AtomicU8,
    /// Created with timing enabled, so [`Event::elapsed_since`] can use it.
    timed: bool,
    /// Which record of which stream it last was, so a synchronized stream answers for it.
    last_record: LastRecord,
}

// SAFETY: a `CUevent` is an opaque handle the driver accepts from any thread; saggar's own state is an atomic.
unsafe impl Send for CudaEvent {}
// SAFETY: as above.
unsafe impl Sync for CudaEvent {}

impl std::fmt::Debug for CudaEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaEvent").field("device", &self.ordinal()).finish_non_exhaustive()
    }
}

impl CudaEvent {
    /// A new event; the device's context is current (the caller entered it).
    pub(crate) fn new(device: Arc<DeviceShared>, timed: bool) -> Result<CudaEvent> {
        let op = if timed { "device.create_event" } else { "device.create_untimed_event" };
        let raw = result::event::create(op, timed)?;
        Ok(CudaEvent { device, raw, state: AtomicU8::new(NEVER), timed, last_record: LastRecord::default() })
    }

    pub(crate) fn ordinal(&self) -> usize {
        self.device.ordinal()
    }

    /// The raw driver handle, for interop and benchmarks. saggar keeps ownership: do not destroy it.
    pub fn raw_handle(&self) -> sys::CUevent {
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

    fn refuse_captured(&self, op: &'static str) -> Result<()> {
        if self.state.load(Ordering::Acquire) == CAPTURED {
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

impl Event for CudaEvent {
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

    fn elapsed_since(&self, start: &CudaEvent) -> Result<Duration> {
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
        self.device.touch(op)?;
        // SAFETY: both handles are live while their owners are.
        match unsafe { result::event::elapsed_ms(op, start.raw, self.raw) } {
            Ok(ms) => Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1000.0)),
            Err(e) if has_code(&e, CUresult::CUDA_ERROR_NOT_READY) => {
                Err(Error::Event { op, reason: "the event has not completed yet; synchronize it first" })
            }
            Err(e) => Err(self.fault(op, e)),
        }
    }
}

impl Drop for CudaEvent {
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
