//! The one request loop of `saggar perf`, for every model source and binding: untimed warmup runs,
//! then the timed runs (`--iterations` and/or `--duration`), on `--concurrency` threads sharing one
//! session, each request timed with [`Instant`] around the session call alone, with progress and the
//! per-request records `--export-times` writes.
//!
//! What a request is (pinned host tensors, a staged `Request`, device tensors; built-in or ONNX model)
//! is a [`Runner`]'s business; this module only schedules, times and collects.

use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use saggar_dispatch::{RunPath, StageTimes};
use serde::Serialize;

use crate::error::{CliError, Result};
use crate::progress::{Bar, ProgressMode};

/// One request of a [`Runner`], as the loop asks for it.
#[derive(Debug, Clone, Copy)]
pub struct Ask {
    /// The index of the request's batch in the runner's distinct batches.
    pub set: usize,
    /// Whether to keep its outputs (for verification or export).
    pub keep: bool,
    /// Whether to time its stages (`--stage-every`).
    pub stages: bool,
}

/// What one request did.
#[derive(Debug)]
pub struct Ran {
    /// The run path, when the session said.
    pub path: Option<RunPath>,
    /// The bucket that served it, when the session said.
    pub bucket: Option<u64>,
    /// Its stages, when timed.
    pub stages: Option<StageTimes>,
}

/// Runs one kind of request; shared by the loop's threads, each with its own worker state.
pub trait Runner: Sync {
    /// A thread's state: its output buffers, its stage timer, a leased staged request.
    type Worker<'w>
    where
        Self: 'w;
    /// Kept outputs.
    type Kept: Send;
    /// A thread's state, made before the clock starts.
    fn worker(&self) -> Result<Self::Worker<'_>>;
    /// Runs one request; only this call is timed.
    fn run<'w>(&'w self, worker: &mut Self::Worker<'w>, ask: Ask) -> Result<Ran>;
    /// The outputs of the request [`Runner::run`] just ran for `ask` (one with `ask.keep`), copied
    /// out after the clock stopped: copying BERT's or a segmentation model's outputs (tens of MB)
    /// is no part of serving the request.
    fn keep<'w>(&'w self, worker: &mut Self::Worker<'w>, ask: Ask) -> Result<Self::Kept>;
}

/// How the loop runs.
#[derive(Debug, Clone)]
pub struct LoopPlan<'a> {
    /// For each trace position, the index of its batch among the distinct batches.
    pub set_of: &'a [usize],
    /// The distinct batches (for records and errors).
    pub distinct: &'a [u64],
    /// For each trace position, whether to keep its outputs (only the first pass over the trace).
    pub keep: &'a [bool],
    /// Untimed runs before the clock starts (at least), each distinct batch in turn.
    pub warmup_runs: u64,
    /// Untimed time before the clock starts (at least).
    pub warmup_time: Duration,
    /// Timed requests (at least).
    pub iterations: u64,
    /// Timed seconds (at least): the trace is replayed from its start until both minimums are met.
    pub duration: Option<Duration>,
    /// Worker threads.
    pub concurrency: usize,
    /// Time the stages of every K-th request (0: none).
    pub stage_every: u64,
    /// Progress display.
    pub progress: ProgressMode,
}

/// One timed request, as `--export-times` writes it (one JSON object per line).
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// Position in the timed sequence.
    pub request: u64,
    /// Rows.
    pub batch: u64,
    /// The worker thread that ran it.
    pub thread: usize,
    /// Start, in microseconds since the first timed request started.
    pub start_us: f64,
    /// Latency in microseconds, around the session call.
    pub latency_us: f64,
    /// The same in nanoseconds, for the percentiles.
    #[serde(skip)]
    pub latency_ns: u64,
    /// `ultra_fast`, `fast` or `standard`, when the session said.
    pub path: Option<&'static str>,
    /// The bucket that served it (the first, for a split request), when the session said.
    pub bucket: Option<u64>,
    /// Its stages, in microseconds, when timed.
    pub stages: Option<StageRecord>,
}

/// [`StageTimes`] in microseconds.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct StageRecord {
    /// Waiting for a free run context.
    pub queue_wait_us: f64,
    /// Request checks and planning.
    pub check_us: f64,
    /// Gather into pinned staging.
    pub gather_us: f64,
    /// Host time enqueueing the device work.
    pub enqueue_us: f64,
    /// Host time waiting for the device.
    pub sync_us: f64,
    /// Scatter of the outputs.
    pub scatter_us: f64,
    /// Device events around the device work (upload + compute + download).
    pub device_us: Option<f64>,
}

impl From<&StageTimes> for StageRecord {
    fn from(t: &StageTimes) -> StageRecord {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        StageRecord {
            queue_wait_us: us(t.queue_wait),
            check_us: us(t.check),
            gather_us: us(t.gather),
            enqueue_us: us(t.enqueue),
            sync_us: us(t.sync),
            scatter_us: us(t.scatter),
            device_us: t.device.map(us),
        }
    }
}

/// Everything the loop measured.
#[derive(Debug)]
pub struct Measured<K> {
    /// Every timed request, in start order.
    pub records: Vec<Record>,
    /// Kept outputs by trace position.
    pub kept: Vec<(usize, K)>,
    /// From the first timed request's start to the last one's end.
    pub wall: Duration,
    /// Untimed runs and their wall time.
    pub warmup_runs: u64,
    /// Wall time of the warmup.
    pub warmup_wall: Duration,
    /// The first warmup run of each distinct batch, in microseconds (capture plus first replay on
    /// one run context), by set index; `None` where no warmup run had that batch.
    pub first_run_us: Vec<Option<f64>>,
}

/// What one thread of the timed phase measured: its records and kept outputs.
type Timed<K> = (Vec<Record>, Vec<(usize, K)>);

/// The shared counters of one phase.
struct Phase<'a> {
    next: AtomicUsize,
    stop: AtomicBool,
    started: Instant,
    bar: &'a Bar,
}

impl Phase<'_> {
    /// The next request's position, or `None` when the phase is over (`enough` says when both
    /// minimums are met) or a worker failed.
    fn next(&self, enough: &dyn Fn(usize, Duration) -> bool) -> Option<usize> {
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        (!enough(i, self.started.elapsed())).then_some(i)
    }
}

/// Runs the warmup, then `warm` (between the phases: read counters there), then the timed phase.
pub fn run<R: Runner>(runner: &R, plan: &LoopPlan<'_>, warm: impl FnOnce()) -> Result<Measured<R::Kept>> {
    let distinct = plan.distinct.len().max(1);
    let warmup_first = Mutex::new(vec![None; plan.distinct.len()]);
    let (warmup_runs, warmup_wall) = if plan.warmup_runs > 0 || !plan.warmup_time.is_zero() {
        // A warmup bounded by time has no known length.
        let bar = Bar::new(plan.progress, "warmup", if plan.warmup_time.is_zero() { plan.warmup_runs } else { 0 });
        let phase =
            Phase { next: AtomicUsize::new(0), stop: AtomicBool::new(false), started: Instant::now(), bar: &bar };
        let enough = |i: usize, elapsed: Duration| i as u64 >= plan.warmup_runs && elapsed >= plan.warmup_time;
        let results = threads(plan.concurrency, |_| -> Result<u64> {
            let mut worker = runner.worker()?;
            let mut runs = 0;
            while let Some(i) = phase.next(&enough) {
                // Each distinct batch in turn, so every bucket is captured early.
                let set = i % distinct;
                let started = Instant::now();
                runner
                    .run(&mut worker, Ask { set, keep: false, stages: false })
                    .map_err(|e| fail(&phase, e, "warmup run", i, plan.distinct.get(set)))?;
                let us = started.elapsed().as_secs_f64() * 1e6;
                if let Ok(mut first) = warmup_first.lock()
                    && let Some(slot) = first.get_mut(set)
                    && slot.is_none()
                {
                    *slot = Some(us);
                }
                runs += 1;
                if phase.bar.is_visible() {
                    phase.bar.inc(1);
                }
            }
            Ok(runs)
        });
        let wall = phase.started.elapsed();
        bar.finish();
        let mut runs = 0;
        for r in results {
            runs += r?;
        }
        (runs, wall)
    } else {
        (0, Duration::ZERO)
    };

    warm();
    let len = plan.set_of.len();
    let bar = Bar::new(plan.progress, "run", if plan.duration.is_some() { 0 } else { plan.iterations });
    let phase = Phase { next: AtomicUsize::new(0), stop: AtomicBool::new(false), started: Instant::now(), bar: &bar };
    let enough = |i: usize, elapsed: Duration| {
        i as u64 >= plan.iterations && plan.duration.is_none_or(|d| elapsed >= d)
            || i as u64 >= crate::trace::MAX_REQUESTS
    };
    let results = threads(plan.concurrency, |thread| -> Result<Timed<R::Kept>> {
        let mut worker = runner.worker()?;
        let (mut records, mut kept) = (Vec::new(), Vec::new());
        while let Some(i) = phase.next(&enough) {
            let position = i % len.max(1);
            let set = plan.set_of[position];
            let ask = Ask {
                set,
                keep: i < len && plan.keep[position],
                stages: plan.stage_every > 0 && (i as u64).is_multiple_of(plan.stage_every),
            };
            let started = Instant::now();
            let ran = runner.run(&mut worker, ask);
            let latency = started.elapsed();
            let ran = ran.map_err(|e| fail(&phase, e, "request", i, plan.distinct.get(set)))?;
            records.push(Record {
                request: i as u64,
                batch: plan.distinct.get(set).copied().unwrap_or(0),
                thread,
                start_us: started.duration_since(phase.started).as_secs_f64() * 1e6,
                latency_us: latency.as_secs_f64() * 1e6,
                latency_ns: u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX),
                path: ran.path.map(path_name),
                bucket: ran.bucket,
                stages: ran.stages.as_ref().map(StageRecord::from),
            });
            if ask.keep {
                let outputs = runner.keep(&mut worker, ask);
                kept.push((i, outputs.map_err(|e| fail(&phase, e, "request", i, plan.distinct.get(set)))?));
            }
            if phase.bar.is_visible() {
                phase.bar.inc(1);
            }
        }
        Ok((records, kept))
    });
    let wall = phase.started.elapsed();
    bar.finish();
    let (mut records, mut kept) = (Vec::new(), Vec::new());
    for r in results {
        let (rs, ks) = r?;
        records.extend(rs);
        kept.extend(ks);
    }
    records.sort_by_key(|r| r.request);
    kept.sort_by_key(|(i, _)| *i);
    let first_run_us = warmup_first.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok(Measured { records, kept, wall, warmup_runs, warmup_wall, first_run_us })
}

fn fail(phase: &Phase<'_>, error: CliError, what: &str, i: usize, batch: Option<&u64>) -> CliError {
    phase.stop.store(true, Ordering::Relaxed);
    match batch {
        Some(b) => error.context(format_args!("{what} {i} (batch {b})")),
        None => error.context(format_args!("{what} {i}")),
    }
}

/// `"ultra_fast"`, `"fast"` or `"standard"`.
pub fn path_name(path: RunPath) -> &'static str {
    match path {
        RunPath::UltraFast => "ultra_fast",
        RunPath::Fast => "fast",
        _ => "standard",
    }
}

/// Runs `worker(thread index)` on `n` scoped threads (on this thread when `n` is 1) and returns
/// their results.
fn threads<T: Send>(n: usize, worker: impl Fn(usize) -> T + Sync) -> Vec<T> {
    if n <= 1 {
        return vec![worker(0)];
    }
    std::thread::scope(|scope| {
        let worker = &worker;
        let handles: Vec<_> = (0..n).map(|t| scope.spawn(move || worker(t))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    })
}

/// Writes `records` to `path`, one JSON object per line.
pub fn export_times(path: &Path, records: &[Record]) -> Result<()> {
    let io = |e: std::io::Error| {
        CliError::failure(
            format!("--export-times {}: {e}", path.display()),
            "check that the folder exists and is writable",
        )
    };
    let file = std::fs::File::create(path).map_err(io)?;
    let mut out = std::io::BufWriter::new(file);
    for record in records {
        let line = serde_json::to_string(record)
            .map_err(|e| CliError::failure(format!("encoding a request record: {e}"), "this is a bug in saggar"))?;
        writeln!(out, "{line}").map_err(io)?;
    }
    out.flush().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests that take no time and outputs that take 30 ms to copy out.
    struct SlowToKeep;

    impl Runner for SlowToKeep {
        type Worker<'w> = ();
        type Kept = usize;

        fn worker(&self) -> Result<()> {
            Ok(())
        }

        fn run(&self, _: &mut (), _: Ask) -> Result<Ran> {
            Ok(Ran { path: None, bucket: None, stages: None })
        }

        fn keep(&self, _: &mut (), ask: Ask) -> Result<usize> {
            std::thread::sleep(Duration::from_millis(30));
            Ok(ask.set)
        }
    }

    /// Copying a kept request's outputs out (for `--verify` and `--export-outputs`) happens after
    /// its clock stopped: with every request kept, no latency holds the 30 ms copies.
    #[test]
    fn kept_outputs_are_copied_out_after_the_request_is_timed() {
        let keep = [true; 4];
        let plan = LoopPlan {
            set_of: &[0, 1, 0, 1],
            distinct: &[1, 2],
            keep: &keep,
            warmup_runs: 0,
            warmup_time: Duration::ZERO,
            iterations: 4,
            duration: None,
            concurrency: 1,
            stage_every: 0,
            progress: ProgressMode::Quiet,
        };
        let measured = run(&SlowToKeep, &plan, || {}).unwrap();
        assert_eq!(measured.kept, [(0, 0), (1, 1), (2, 0), (3, 1)]);
        assert_eq!(measured.records.len(), 4);
        let slowest = measured.records.iter().map(|r| r.latency_us).fold(0.0, f64::max);
        assert!(slowest < 20_000.0, "a latency held the copy: {slowest} us");
    }
}
