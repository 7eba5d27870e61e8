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
//! Untimed requests pay nothing for this: the timed run is a separate entry point, and the events
//! belong to the caller's [`StageTimer`], created once per caller thread.

use std::time::{Duration, Instant};

use saggar_arena::InputSource;
use saggar_device::{Backend, Device as _, Event as _, Stream as _};

use crate::compiler::ProgramCompiler;
use crate::context::{LastRun, RunContext, Slots};
use crate::error::Result;
use crate::path_host::HostBuffers;
use crate::plan::{Model, Single};
use crate::request;
use crate::session::{Inner, Session};
use crate::tensors::{BindingMode, HostTensor, RunInfo, RunPath};

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
        let mut times = StageTimes::default();
        let result = inner.counted(|| {
            let _pin = inner.device.pin()?;
            let waited = Instant::now();
            let mut ctx = inner.contexts.lease()?;
            times.queue_wait = waited.elapsed();
            inner.run_on(&mut ctx, |inner, ctx| inner.run_host_timed(ctx, timer, inputs, outputs, &mut times))
        });
        let info = result?;
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

impl<B: Backend, C: ProgramCompiler<B>> Inner<B, C> {
    /// The timed twin of the host path's single-program branch; any other request runs untimed
    /// through the host path (only its check time and queue wait are filled in).
    fn run_host_timed<T: AsMut<[u8]>>(
        &self,
        ctx: &mut RunContext<B>,
        timer: &StageTimer<B>,
        inputs: &[HostTensor<'_>],
        outputs: &mut [T],
        times: &mut StageTimes,
    ) -> Result<RunInfo> {
        let checked = Instant::now();
        request::check_output_count(&self.signature, outputs.len())?;
        let request = request::check(&self.signature, &self.guard, inputs)?;
        let bindings = &request.bindings;
        if request.in_order
            && let Some(Single { k, chunk }) = self.single(bindings)
            && let RunContext { slots: Some(slots), last, stream, .. } = ctx
        {
            if let Model::Bucketed(grid) = &self.model {
                grid.observe(bindings);
            }
            let batch = bindings.batch();
            let this = LastRun { mode: BindingMode::PinnedCopy, batch, program: self.main[k].id };
            let path = if *last == Some(this) { RunPath::UltraFast } else { RunPath::Fast };
            if path == RunPath::Fast {
                self.plan_chunk(slots, &request.ordered, k, chunk)?;
            }
            *last = None;
            times.check = checked.elapsed();

            let gathered = Instant::now();
            {
                let Slots { arena, pad_plans, .. } = &mut *slots;
                let ordered = &request.ordered;
                arena.gather_host_with(|i| InputSource::Host { data: ordered[i].data, plan: pad_plans[i] })?;
            }
            times.gather = gathered.elapsed();

            let enqueued = Instant::now();
            stream.record(&timer.start)?;
            let replayed = self.run_on_slots(stream, slots, k, BindingMode::PinnedCopy)?;
            stream.record(&timer.end)?;
            slots.arena.fence(stream)?;
            times.enqueue = enqueued.elapsed();

            let synced = Instant::now();
            timer.end.synchronize()?;
            times.sync = synced.elapsed();
            times.device = Some(timer.end.elapsed_since(&timer.start)?);

            let scattered = Instant::now();
            let Slots { arena, slice_plans, .. } = slots;
            arena.scatter_outputs_with(outputs, |o| slice_plans[o])?;
            times.scatter = scattered.elapsed();
            *last = Some(this);
            self.count_chunk(chunk);
            return Ok(RunInfo {
                path,
                mode: BindingMode::PinnedCopy,
                batch,
                bucket: self.main[k].bucket,
                chunks: 1,
                replayed,
            });
        }
        times.check = checked.elapsed();
        self.run_host_checked(ctx, &request, outputs, HostBuffers::Unchecked)
    }
}
