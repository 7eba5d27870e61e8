//! What every `saggar perf` run shares, whatever the model source and binding: creating the session
//! with its progress and per-program startup times, the loop plan from the flags, the counters of
//! the timed requests alone, each used bucket's copies timed on their own, and the report.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use saggar_cache::CompileCache;
use saggar_device::{Backend, Device as _};
use saggar_dispatch::{PaddedAxis, ProgramCompiler, ProgramSource, Session, StatsSnapshot};

use crate::bench::{LoopPlan, Measured};
use crate::buckets::Buckets;
use crate::cli::{PerfArgs, Toggle};
use crate::error::Result;
use crate::perf::{Counters, session_config};
use crate::progress::{Bar, ProgressMode};
use crate::report::{Latency, PerfReport, Verify};
use crate::stages::{BucketCopies, ProgramReady, Stages, Startup, first_runs, secs};

/// Device-event samples per bucket when its copies are timed on their own.
const COPY_SAMPLES: usize = 21;

/// A session and how its creation went.
pub struct Built<B: Backend, C: ProgramCompiler<B>> {
    /// The session.
    pub session: Session<B, C>,
    /// Each program as it became ready.
    pub programs: Vec<ProgramReady>,
    /// Session creation time.
    pub session_s: f64,
}

/// The progress mode of `saggar perf`.
pub fn progress_mode(args: &PerfArgs, stderr_is_terminal: bool) -> ProgressMode {
    ProgressMode::new(stderr_is_terminal, args.progress)
}

/// Creates the session of `saggar perf` on `device`, with a progress bar and the time each program
/// became ready.
pub fn build_session<B: Backend, C: ProgramCompiler<B>>(
    args: &PerfArgs,
    mode: ProgressMode,
    device: B::Device,
    compiler: Arc<C>,
    buckets: &Buckets,
    cache: Arc<CompileCache>,
    padded_axis: Option<PaddedAxis>,
) -> Result<Built<B, C>> {
    let config = session_config(args, buckets, cache, padded_axis)?;
    let bar = Bar::new(mode, "compile", buckets.list.len() as u64);
    let programs = Mutex::new(Vec::new());
    let started = Instant::now();
    let session = Session::builder(device, compiler)
        .config(config)
        .on_progress(|p| {
            if let Ok(mut programs) = programs.lock() {
                programs.push(ProgramReady {
                    bucket: p.bucket,
                    source: match p.source {
                        ProgramSource::Loaded => "loaded",
                        ProgramSource::Compiled => "compiled",
                    },
                    ready_at_s: started.elapsed().as_secs_f64(),
                });
            }
            bar.program_ready(None, p);
        })
        .build();
    let session_s = started.elapsed().as_secs_f64();
    bar.finish();
    let programs = programs.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok(Built { session: session?, programs, session_s })
}

/// The default `--warmup-runs`: two per distinct batch and worker thread.
pub fn warmup_runs(args: &PerfArgs, distinct: usize) -> u64 {
    args.warmup_runs.unwrap_or(2 * distinct as u64 * args.concurrency)
}

/// The loop plan of the flags.
pub fn loop_plan<'a>(
    args: &PerfArgs,
    mode: ProgressMode,
    distinct: &'a [u64],
    set_of: &'a [usize],
    keep: &'a [bool],
    stage_every: u64,
) -> LoopPlan<'a> {
    LoopPlan {
        set_of,
        distinct,
        keep,
        warmup_runs: warmup_runs(args, distinct.len()),
        warmup_time: Duration::from_secs_f64(args.warmup_time),
        iterations: match (args.trace.requests, args.duration) {
            (Some(n), _) => n,
            (None, Some(_)) => 1,
            (None, None) => set_of.len() as u64,
        },
        duration: args.duration.map(Duration::from_secs_f64),
        concurrency: args.concurrency as usize,
        stage_every,
        progress: mode,
    }
}

/// Each bucket that served a timed request with stages, its copies timed on their own.
pub fn bucket_copies<B: Backend, C: ProgramCompiler<B>, K>(
    session: &Session<B, C>,
    measured: &Measured<K>,
) -> Result<Vec<BucketCopies>> {
    let mut buckets: Vec<u64> =
        measured.records.iter().filter(|r| r.stages.is_some()).filter_map(|r| r.bucket).collect();
    buckets.sort_unstable();
    buckets.dedup();
    if buckets.is_empty() {
        return Ok(Vec::new());
    }
    let timer = session.stage_timer()?;
    let mut copies = Vec::with_capacity(buckets.len());
    for bucket in buckets {
        if let Some(t) = session.copy_times(&timer, bucket, COPY_SAMPLES)? {
            copies.push(BucketCopies {
                bucket,
                upload_bytes: t.upload_bytes,
                download_bytes: t.download_bytes,
                h2d_us: secs(t.h2d) * 1e6,
                d2h_us: secs(t.d2h) * 1e6,
            });
        }
    }
    Ok(copies)
}

/// What a run says about itself besides what it measured.
pub struct Described {
    /// Model name.
    pub model: String,
    /// Where the model came from.
    pub model_source: String,
    /// Number of model inputs.
    pub model_inputs: usize,
    /// The trace as given.
    pub trace: String,
    /// The binding.
    pub binding: String,
    /// Why stages were not timed, if they were not.
    pub stages_unavailable: Option<String>,
}

/// The session's counters at three moments: after creation, after the warmup, after the timed runs.
pub struct Snapshots {
    /// After creation.
    pub built: StatsSnapshot,
    /// After the warmup.
    pub warm: StatsSnapshot,
    /// After the timed runs.
    pub done: StatsSnapshot,
}

/// Assembles the report (without `check`).
#[allow(clippy::too_many_arguments)]
pub fn report<B: Backend, C: ProgramCompiler<B>, K>(
    args: &PerfArgs,
    built: &Built<B, C>,
    cache: &CompileCache,
    import_s: f64,
    described: Described,
    measured: &Measured<K>,
    distinct: &[u64],
    snapshots: &Snapshots,
    copies: Vec<BucketCopies>,
    verify: Verify,
) -> PerfReport {
    let info = built.session.device().info().clone();
    let Counters { paths, split_requests, failures, padding, cache, graphs } =
        Counters::timed(&snapshots.done, &snapshots.warm, cache, args.graphs == Toggle::On);
    let mut latencies: Vec<u64> = measured.records.iter().map(|r| r.latency_ns).collect();
    let requests = measured.records.len() as u64;
    let rows: u64 = measured.records.iter().map(|r| r.batch).sum();
    let wall_s = measured.wall.as_secs_f64();
    let startup = Startup {
        import_s,
        session_s: built.session_s,
        programs: built.programs.clone(),
        warmup_runs: measured.warmup_runs,
        warmup_s: measured.warmup_wall.as_secs_f64(),
        warmup_captures: snapshots.warm.captures.saturating_sub(snapshots.built.captures),
        first_runs: first_runs(measured, distinct),
        timed_captures: snapshots.done.captures.saturating_sub(snapshots.warm.captures),
    };
    let stages = Stages::summarize(args.stage_every, &measured.records, copies, described.stages_unavailable);
    PerfReport {
        backend: B::KIND.name().to_string(),
        device: info.name,
        device_ordinal: info.ordinal,
        arch: info.arch,
        model: described.model,
        model_source: described.model_source,
        model_inputs: described.model_inputs,
        requests,
        concurrency: args.concurrency,
        trace: described.trace,
        seed: args.trace.seed,
        binding: described.binding,
        kernel_copies_up_to: args.kernel_copies_up_to,
        bucket_policy: args.buckets.buckets.to_string(),
        buckets: built.session.buckets(),
        warmup_s: built.session_s,
        duration_s: args.duration,
        startup,
        stages,
        wall_s,
        throughput_rps: requests as f64 / wall_s.max(1e-9),
        rows_per_s: rows as f64 / wall_s.max(1e-9),
        latency_us: Latency::from_nanos(&mut latencies),
        paths,
        split_requests,
        failures,
        padding,
        cache,
        graphs,
        verify,
        check: None,
        profile: None,
    }
}

/// Writes one request's outputs to `dir/batch_B/output_K.pb` (ONNX TensorProto files).
pub fn write_outputs(dir: &std::path::Path, batch: u64, names: &[&str], tensors: &[saggar_onnx::Tensor]) -> Result<()> {
    write_tensors(dir, batch, "output", names, tensors)
}

/// Writes one request's inputs to `dir/batch_B/input_K.pb`.
pub fn write_inputs(dir: &std::path::Path, batch: u64, names: &[&str], tensors: &[saggar_onnx::Tensor]) -> Result<()> {
    write_tensors(dir, batch, "input", names, tensors)
}

fn write_tensors(
    dir: &std::path::Path,
    batch: u64,
    prefix: &str,
    names: &[&str],
    tensors: &[saggar_onnx::Tensor],
) -> Result<()> {
    let folder = dir.join(format!("batch_{batch}"));
    std::fs::create_dir_all(&folder).map_err(|e| {
        crate::error::CliError::failure(
            format!("--export-outputs {}: {e}", folder.display()),
            "check that the folder can be created and written",
        )
    })?;
    for (k, (name, tensor)) in names.iter().zip(tensors).enumerate() {
        let path = folder.join(format!("{prefix}_{k}.pb"));
        saggar_onnx::write_tensor_pb(&path, name, tensor).map_err(|e| {
            crate::error::CliError::failure(
                format!("--export-outputs {}: {e}", path.display()),
                "check that the folder is writable",
            )
        })?;
    }
    Ok(())
}
