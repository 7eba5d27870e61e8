//! Opt-in per-stage timing of host requests, for benchmark tools: [`Session::run_into_timed`] runs a
//! request exactly as [`Session::run_into`] does and says where its time went, and
//! [`Session::copy_times`] measures one bucket's single upload and single download on their own.
//!
//! A request served by one main program (the ultra-fast and fast paths) is split into host stages,
//! each timed with the host clock (waiting for a run context, checking and planning, gathering into
//! pinned staging, enqueueing the device work, waiting for the device, scattering the outputs), and
//! its device work is timed with a pair of device events recorded around it. In pinned-copy mode that
//! device work is ONE graph holding the upload, the program and the download, so the events measure
//! the three together; [`Session::copy_times`] times the two copies of a bucket with events around each
//! (same bytes, same arena, same stream), which splits the span into H2D, compute and D2H.
//!
//! A timed request runs through the same host path as an untimed one, which takes an optional
//! [`StageClock`]: untimed requests pass none and pay one untaken branch per stage for it (no clock
//! read, no allocation, no lock); the events belong to the caller's [`StageTimer`], created once per
//! caller thread.

use std::time::{Duration, Instant};

use saggar_device::{Backend, Device as _, Event as _, Stream as _};

use crate::compiler::ProgramCompiler;
use crate::context::RunContext;
use crate::error::Result;
use crate::session::Session;
use crate::tensors::{HostTensor, RunInfo};

/// The device events a timed run records, created once per caller thread ([`Session::stage_timer`]).
///
/// # Thread safety
/// `Send` and `Sync` as the backend's events are, but one timer must serve one request at a time:
/// two requests recording the same events at once would read each other's times.
#[derive(Debug)]
pub struct StageTimer<B: Backend> {
    start: B::Event,
    middle: B::Event,
    end: B::Event,
}

/// Where one timed request's time went. Host stages are measured with the host clock; `device` with
/// device events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StageTimes {
    /// Waiting for a free run context (queue wait under concurrency).
    pub queue_wait: Duration,
    /// Checking the request and planning its padding and slicing (host).
    pub check: Duration,
    /// Gathering the inputs into pinned staging (host).
    pub gather: Duration,
    /// Enqueueing the device work: a graph replay, or a capture on a bucket's first request (host).
    pub enqueue: Duration,
    /// Host time waiting for the device after enqueueing.
    pub sync: Duration,
    /// Scattering the outputs from pinned read-back into the caller's buffers (host).
    pub scatter: Duration,
    /// Device time between events recorded before and after the device work: the upload, the
    /// program and the download together. `None` when the request did not run as one main program
    /// (split or per-shape requests), whose stages are not separated.
    pub device: Option<Duration>,
}

/// One bucket's copies timed on their own with device events ([`Session::copy_times`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CopyTimes {
    /// Bytes of the single upload (the staging span of the bucket).
    pub upload_bytes: usize,
    /// Bytes of the single download (the output span of the bucket).
    pub download_bytes: usize,
    /// Median device time of the upload.
    pub h2d: Duration,
    /// Median device time of the download.
    pub d2h: Duration,
}

impl<B: Backend, C: ProgramCompiler<B>> Session<B, C> {
    /// The device events one caller thread needs for [`Session::run_into_timed`] and
    /// [`Session::copy_times`].
    pub fn stage_timer(&self) -> Result<StageTimer<B>> {
        let device = &self.inner.device;
        let _pin = device.pin()?;
        Ok(StageTimer { start: device.create_event()?, middle: device.create_event()?, end: device.create_event()? })
    }

    /// [`Session::run_into`] with every stage timed (see the module docs). Costs two event records
    /// and one event wait more than an untimed run; allocates nothing on the ultra-fast and fast paths.
    pub fn run_into_timed<T: AsMut<[u8]>>(
        &self,
        timer: &StageTimer<B>,
        inputs: &[HostTensor<'_>],
        outputs: &mut [T],
    ) -> Result<(RunInfo, StageTimes)> {
        let inner = &*self.inner;
        inner.refuse_chain()?;
        let mut queue_wait = Duration::ZERO;
        let result = inner.counted(|| {
            let _pin = inner.device.pin()?;
            let waited = Instant::now();
            let mut ctx = inner.contexts.lease()?;
            queue_wait = waited.elapsed();
            inner.run_on(&mut ctx, |inner, ctx| {
                let mut clock = StageClock::start(timer);
                let info = inner.run_host_into(ctx, inputs, outputs, Some(&mut clock))?;
                Ok((info, clock.times))
            })
        });
        let (info, mut times) = result?;
        times.queue_wait = queue_wait;
        inner.stats.record_path(info.path);
        Ok((info, times))
    }

    /// The device time of `bucket`'s single upload and single download, each the median of
    /// `samples` runs timed with events on a run context's arena; `None` when no main program has
    /// that bucket. Not counted as a request; run it outside timed work.
    pub fn copy_times(&self, timer: &StageTimer<B>, bucket: u64, samples: usize) -> Result<Option<CopyTimes>> {
        let inner = &*self.inner;
        let Some(k) = (0..inner.main.len()).find(|&k| inner.main[k].bucket == Some(bucket)) else {
            return Ok(None);
        };
        let _pin = inner.device.pin()?;
        let mut ctx = inner.contexts.lease()?;
        let RunContext { slots: Some(slots), stream, .. } = &mut *ctx else { return Ok(None) };
        slots.arena.use_layout(inner.layout_of(k))?;
        let (up, down) = (inner.upload_span[k], inner.download_span[k]);
        let (mut h2d, mut d2h) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
        for _ in 0..samples.max(1) {
            stream.record(&timer.start)?;
            // SAFETY: the arena belongs to the leased context, whose stream is synchronized by
            // `timer.end.synchronize()` below before the arena is used again; the fence keeps the
            // host from touching the staging or read-back buffers while the copies may run.
            unsafe { slots.arena.enqueue_upload(stream, up)? };
            stream.record(&timer.middle)?;
            // SAFETY: as above.
            unsafe { slots.arena.enqueue_download(stream, down)? };
            stream.record(&timer.end)?;
            slots.arena.fence(stream)?;
            timer.end.synchronize()?;
            h2d.push(timer.middle.elapsed_since(&timer.start)?);
            d2h.push(timer.end.elapsed_since(&timer.middle)?);
        }
        // The next request must not take the ultra-fast path on plans these copies did not make.
        ctx.last = None;
        h2d.sort_unstable();
        d2h.sort_unstable();
        Ok(Some(CopyTimes { upload_bytes: up, download_bytes: down, h2d: h2d[h2d.len() / 2], d2h: d2h[d2h.len() / 2] }))
    }
}

/// The clock of one timed request on the host path ([`Session::run_into_timed`]): the caller's
/// events, the stages timed so far, and when the current stage started. Each stage ends where the
/// next begins, so the host stages add up to the time since the clock started.
pub(crate) struct StageClock<'t, B: Backend> {
    timer: &'t StageTimer<B>,
    times: StageTimes,
    stage_started: Instant,
}

impl<'t, B: Backend> StageClock<'t, B> {
    /// A clock whose first stage (the check) starts now.
    fn start(timer: &'t StageTimer<B>) -> StageClock<'t, B> {
        StageClock { timer, times: StageTimes::default(), stage_started: Instant::now() }
    }

    /// The time since the current stage started; the next stage starts now.
    fn lap(&mut self) -> Duration {
        let now = Instant::now();
        let stage = now - self.stage_started;
        self.stage_started = now;
        stage
    }

    /// Ends the check (and planning) stage.
    pub(crate) fn checked(&mut self) {
        self.times.check = self.lap();
    }

    /// Ends the gather stage and records the event before the device work on `stream`.
    pub(crate) fn gathered(&mut self, stream: &B::Stream) -> Result<()> {
        self.times.gather = self.lap();
        stream.record(&self.timer.start)?;
        Ok(())
    }

    /// Records the event after the device work on `stream`.
    pub(crate) fn enqueued(&mut self, stream: &B::Stream) -> Result<()> {
        stream.record(&self.timer.end)?;
        Ok(())
    }

    /// Ends the enqueue stage (the device work and the fence enqueued), waits for the device (the
    /// sync stage) and reads the device span between the two events.
    pub(crate) fn synchronize(&mut self) -> Result<()> {
        self.times.enqueue = self.lap();
        self.timer.end.synchronize()?;
        self.times.sync = self.lap();
        self.times.device = Some(self.timer.end.elapsed_since(&self.timer.start)?);
        Ok(())
    }

    /// Ends the scatter stage.
    pub(crate) fn scattered(&mut self) {
        self.times.scatter = self.lap();
    }
}
