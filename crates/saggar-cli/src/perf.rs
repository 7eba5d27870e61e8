//! `saggar perf`: runs a batch-size trace through one session and reports what the runtime did.
//!
//! Order of work, so only the requests themselves are timed:
//! 1. load the model, generate the trace, resolve buckets, open the cache and the device;
//! 2. create the session (precompile: cache loads and compiles, with a progress bar): `warmup_s`;
//! 3. generate inputs once for the trace's largest batch (smaller batches use its first rows, which
//!    [`generate_inputs`] makes identical to a smaller generation) and, for `--binding direct`,
//!    upload one device copy per distinct batch (`--binding request` writes them into each
//!    request's pinned staging as part of the timed request);
//! 4. run the trace on `--concurrency` threads sharing the session, each request timed with
//!    [`Instant`] around the session call alone; the outputs of the `--verify` sampled requests
//!    are kept: `wall_s`;
//! 5. compare the kept outputs with [`reference_forward`] and read the session's counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use saggar_cache::CompileCache;
use saggar_device::{Backend, BackendVisitor, Device as _, DeviceBuffer as _, Stream as _};
use saggar_dispatch::{
    CaptureWhen, DeviceTensor, GraphConfig, HostTensor, LiveBuckets, Session, SessionConfig, StatsSnapshot,
};
use saggar_models::{ReferenceCompiler, compare_outputs, generate_inputs, reference_forward};

use crate::buckets::Buckets;
use crate::cli::{BindingArg, CaptureArg, PerfArgs, Toggle};
use crate::environment::Environment;
use crate::error::{CliError, Result};
use crate::model::{self, LoadedModel};
use crate::progress::Bar;
use crate::report::{self, CacheCounters, Failures, Graphs, Latency, Padding, Paths, PerfReport, Verify};

/// The relative tolerance of `--verify`: a value matches when
/// `|actual - expected| <= VERIFY_TOLERANCE * max(1, |expected|)`.
pub const VERIFY_TOLERANCE: f64 = 1e-3;

/// Runs `saggar perf`.
pub fn run(args: &PerfArgs, env: &Environment) -> Result<()> {
    if let Some(path) = &args.model.onnx {
        return crate::onnx::perf(args, env, path);
    }
    let model = model::load(&args.model)?;
    let trace = args.trace.trace.generate(args.trace.requests, args.trace.seed)?;
    let buckets = args.buckets.buckets.resolve(args.buckets.max_batch, &trace)?;
    let cache_dir = env.cache_dir(args.cache_dir.as_deref())?;
    let cache = crate::cache::open_cache(&cache_dir)?;
    let backend = saggar_device::resolve(args.backend.choice())?;
    let plan = PerfPlan { args, env, model: &model, trace: &trace, buckets: &buckets, cache };
    let report = saggar_device::visit_backend(backend, plan)??;
    report::emit(args.json.as_deref(), &report, || report.table())?;
    if report.verify.mismatches > 0 {
        return Err(CliError::failure(
            format!(
                "{} of {} checked requests differ from the eager reference (max relative error {:.3e}, tolerance {:e})",
                report.verify.mismatches, report.verify.checked, report.verify.max_rel_error, VERIFY_TOLERANCE
            ),
            "the runtime computed wrong outputs; rerun with --graphs off and --backend host to narrow it down, and report it",
        ));
    }
    Ok(())
}

/// Everything a run needs, handed to the backend chosen at run time.
struct PerfPlan<'a> {
    args: &'a PerfArgs,
    env: &'a Environment,
    model: &'a LoadedModel,
    trace: &'a [u64],
    buckets: &'a Buckets,
    cache: Arc<CompileCache>,
}

impl BackendVisitor for PerfPlan<'_> {
    type Output = Result<PerfReport>;

    fn visit<B: Backend>(self) -> Result<PerfReport> {
        execute::<B>(self)
    }
}

/// Input bytes kept in `u32` words, so every tensor is 4-byte aligned as the session requires
/// (every tensor of saggar-models is f32 or i32).
struct Words(Vec<u32>);

impl Words {
    fn from_bytes(bytes: &[u8]) -> Words {
        Words(bytes.chunks_exact(4).map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}

/// What one worker thread measured.
struct WorkerResult {
    latencies_ns: Vec<u64>,
    /// Outputs of sampled requests: (request index, bytes per output).
    kept: Vec<(usize, Vec<Vec<u8>>)>,
}

/// The request schedule shared by the workers.
struct Schedule<'a> {
    /// Distinct batch sizes, ascending.
    distinct: &'a [u64],
    /// For each request, the index of its batch in `distinct`.
    set_of: &'a [usize],
    /// For each request, whether its outputs are kept for verification.
    keep: &'a [bool],
    next: AtomicUsize,
    stop: AtomicBool,
    bar: &'a Bar,
}

impl Schedule<'_> {
    /// The next request to run, or `None` when the trace is done or a worker failed.
    fn next(&self) -> Option<usize> {
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        (i < self.set_of.len()).then_some(i)
    }

    fn done(&self) {
        if self.bar.is_visible() {
            self.bar.inc(1);
        }
    }

    fn fail(&self, request: usize, error: impl Into<CliError>) -> CliError {
        self.stop.store(true, Ordering::Relaxed);
        let batch = self.distinct[self.set_of[request]];
        error.into().context(format_args!("request {request} (batch {batch})"))
    }
}

fn execute<B: Backend>(plan: PerfPlan<'_>) -> Result<PerfReport> {
    let PerfPlan { args, env, model, trace, buckets, cache } = plan;
    let config = &model.config;
    let device = B::open(args.device)?;
    let info = device.info().clone();
    let concurrency = args.concurrency as usize;
    let session_config = session_config(args, buckets, cache.clone())?;

    let bar = Bar::new(env.stderr_is_terminal, "warmup", buckets.list.len() as u64);
    let started = Instant::now();
    let session = Session::builder(device.clone(), model.compiler.clone())
        .config(session_config)
        .on_progress(|p| bar.program_ready(None, p))
        .build();
    bar.finish();
    let session = session?;
    let warmup_s = started.elapsed().as_secs_f64();

    // Inputs, generated once for the largest batch; batch b uses the first b rows of each.
    let max_batch = trace.iter().copied().max().unwrap_or(1);
    let generated: Vec<Words> =
        generate_inputs(config, max_batch as usize, args.trace.seed).iter().map(|b| Words::from_bytes(b)).collect();
    let input_rows = config.input_row_bytes();
    let output_rows = config.output_row_bytes();
    let mut distinct = trace.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let set_of: Vec<usize> =
        trace.iter().map(|b| distinct.binary_search(b).expect("every batch is in the distinct list")).collect();
    let input_dims: Vec<Vec<Vec<u64>>> = distinct.iter().map(|&b| config.input_dims(b)).collect();
    let output_dims: Vec<Vec<Vec<u64>>> = distinct.iter().map(|&b| config.output_dims(b)).collect();
    let keep = verify_mask(trace.len(), args.verify);

    let bar = Bar::new(env.stderr_is_terminal, "run", trace.len() as u64);
    let schedule = Schedule {
        distinct: &distinct,
        set_of: &set_of,
        keep: &keep,
        next: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        bar: &bar,
    };
    let signature = session.signature();
    let binding = match args.binding {
        BindingArg::Direct => "direct",
        BindingArg::Request => "request",
        BindingArg::Pinned | BindingArg::Auto => "pinned",
    };
    let (results, wall) = match args.binding {
        BindingArg::Pinned | BindingArg::Auto => {
            let sets: Vec<Vec<HostTensor<'_>>> = distinct
                .iter()
                .enumerate()
                .map(|(d, &b)| {
                    signature
                        .inputs()
                        .iter()
                        .enumerate()
                        .map(|(i, spec)| HostTensor {
                            name: spec.name(),
                            dtype: spec.dtype(),
                            dims: &input_dims[d][i],
                            data: &generated[i].bytes()[..input_rows[i] * b as usize],
                        })
                        .collect()
                })
                .collect();
            run_workers(concurrency, || pinned_worker(&session, &sets, &schedule, &output_rows, max_batch))
        }
        BindingArg::Request => {
            let inputs = RequestInputs { generated: &generated, input_rows: &input_rows, output_rows: &output_rows };
            run_workers(concurrency, || request_worker(&session, &inputs, &schedule))
        }
        BindingArg::Direct => {
            let _pin = device.pin()?;
            let stream = device.create_stream()?;
            // One device copy of each distinct batch's inputs, shared (read-only) by every worker.
            let buffers: Vec<Vec<B::DeviceBuffer>> = distinct
                .iter()
                .map(|&b| {
                    generated
                        .iter()
                        .zip(&input_rows)
                        .map(|(data, row)| {
                            let bytes = &data.bytes()[..row * b as usize];
                            let buffer = device.alloc(bytes.len())?;
                            stream.upload(bytes, buffer.as_slice())?;
                            Ok(buffer)
                        })
                        .collect::<Result<Vec<_>>>()
                })
                .collect::<Result<_>>()?;
            let sets: Vec<Vec<DeviceTensor<'_>>> = buffers
                .iter()
                .enumerate()
                .map(|(d, set)| {
                    signature
                        .inputs()
                        .iter()
                        .zip(set)
                        .enumerate()
                        .map(|(i, (spec, buffer))| DeviceTensor {
                            name: spec.name(),
                            dtype: spec.dtype(),
                            dims: &input_dims[d][i],
                            data: buffer.as_slice(),
                        })
                        .collect()
                })
                .collect();
            let direct = DirectInputs { sets: &sets, output_dims: &output_dims, output_rows: &output_rows };
            run_workers(concurrency, || direct_worker(&session, &direct, &schedule))
        }
    };
    bar.finish();
    let results = results?;
    let wall_s = wall.as_secs_f64();

    let mut latencies: Vec<u64> = results.iter().flat_map(|r| r.latencies_ns.iter().copied()).collect();
    let kept: Vec<(usize, Vec<Vec<u8>>)> = results.into_iter().flat_map(|r| r.kept).collect();
    let verify = check_outputs(model, &generated, trace, &kept, &output_rows)?;
    let latency_us = Latency::from_nanos(&mut latencies);

    let Counters { paths, split_requests, failures, padding, cache, graphs } =
        Counters::read(&session.stats(), &cache, args.graphs == Toggle::On);
    let requests = trace.len() as u64;
    let rows: u64 = trace.iter().sum();
    Ok(PerfReport {
        backend: B::KIND.name().to_string(),
        device: info.name,
        device_ordinal: info.ordinal,
        arch: info.arch,
        model: model.name().to_string(),
        model_source: model.source.clone(),
        model_inputs: model.input_count(),
        requests,
        concurrency: args.concurrency,
        trace: args.trace.trace.to_string(),
        seed: args.trace.seed,
        binding: binding.to_string(),
        bucket_policy: args.buckets.buckets.to_string(),
        buckets: session.buckets(),
        warmup_s,
        wall_s,
        throughput_rps: requests as f64 / wall_s.max(1e-9),
        rows_per_s: rows as f64 / wall_s.max(1e-9),
        latency_us,
        paths,
        split_requests,
        failures,
        padding,
        cache,
        graphs,
        verify,
        check: None,
    })
}

/// The session configuration of `saggar perf` (every model source): buckets, graphs, the cache, and
/// one prewarmed run context per worker thread.
pub(crate) fn session_config(args: &PerfArgs, buckets: &Buckets, cache: Arc<CompileCache>) -> Result<SessionConfig> {
    let concurrency = args.concurrency as usize;
    let mut builder = SessionConfig::builder();
    if let Some(live) = args.live_buckets {
        builder = builder.live_buckets(LiveBuckets::new(live.every, live.budget));
    }
    Ok(builder
        .buckets(buckets.spec.clone())
        .graphs(GraphConfig::default().with_enabled(args.graphs == Toggle::On).with_capture(match args.capture {
            CaptureArg::Lazy => CaptureWhen::Lazy,
            CaptureArg::Eager => CaptureWhen::Eager,
        }))
        .cache(cache)
        .max_concurrency(concurrency)
        .prewarm_contexts(concurrency)
        .build()?)
}

/// The counters every perf report carries, read once after the run from the session and its cache.
pub(crate) struct Counters {
    pub(crate) paths: Paths,
    pub(crate) split_requests: u64,
    pub(crate) failures: Failures,
    pub(crate) padding: Padding,
    pub(crate) cache: CacheCounters,
    pub(crate) graphs: Graphs,
}

impl Counters {
    pub(crate) fn read(stats: &StatsSnapshot, cache: &CompileCache, graphs_enabled: bool) -> Counters {
        let cache_stats = cache.stats();
        Counters {
            paths: Paths { ultra_fast: stats.ultra_fast, fast: stats.fast, standard: stats.standard },
            split_requests: stats.split_requests,
            failures: Failures::from(stats),
            padding: Padding {
                useful_rows: stats.useful_rows,
                padded_rows: stats.padded_rows,
                waste_ratio: stats.padding_waste_ratio(),
                refits: stats.refits,
                refit_failures: stats.refit_failures,
            },
            cache: CacheCounters {
                memory_hits: stats.memory_hits,
                disk_loads: stats.disk_loads,
                compiles: stats.compiles,
                corrupt_evicted: cache_stats.corrupt_evicted,
                publish_failures: cache_stats.publish_failures,
                dir_sync_failures: cache_stats.dir_sync_failures,
                dir: cache.dir().display().to_string(),
            },
            graphs: Graphs {
                enabled: graphs_enabled,
                captures: stats.captures,
                replays: stats.replays,
                updates: stats.updates,
                recaptures: stats.recaptures,
                eager_fallbacks: stats.eager_fallbacks,
                eager_runs: stats.eager_runs,
                evicted: stats.evicted_graphs,
                memory_bytes: stats.graph_bytes,
                peak_memory_bytes: stats.graph_bytes_peak,
                over_budget: stats.graphs_over_budget,
                shape_programs: stats.shape_programs,
                shape_program_evictions: stats.shape_program_evictions,
                shape_overflow_runs: stats.shape_overflow_runs,
            },
        }
    }
}

/// Which requests to verify: `n` of `requests`, evenly spread, the first and the last included.
pub fn verify_mask(requests: usize, n: u64) -> Vec<bool> {
    let mut keep = vec![false; requests];
    let n = (n as usize).min(requests);
    match n {
        0 => {}
        1 => keep[0] = true,
        _ => {
            for k in 0..n {
                keep[k * (requests - 1) / (n - 1)] = true;
            }
        }
    }
    keep
}

/// Runs `worker` on `threads` scoped threads; returns their results (or the first error) and the
/// wall time from start to the last thread's end.
fn run_workers<F>(threads: usize, worker: F) -> (Result<Vec<WorkerResult>>, std::time::Duration)
where
    F: Fn() -> Result<WorkerResult> + Sync,
{
    let started = Instant::now();
    let results: Vec<Result<WorkerResult>> = if threads == 1 {
        vec![worker()]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads).map(|_| scope.spawn(&worker)).collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
        })
    };
    let wall = started.elapsed();
    (results.into_iter().collect(), wall)
}

/// Host tensors through pinned staging: `Session::run_into` into this worker's output buffers.
fn pinned_worker<B: Backend>(
    session: &Session<B, ReferenceCompiler>,
    sets: &[Vec<HostTensor<'_>>],
    schedule: &Schedule<'_>,
    output_rows: &[usize],
    max_batch: u64,
) -> Result<WorkerResult> {
    // Output buffers for the largest batch, in u32 words for alignment; each request uses a prefix.
    let mut outputs: Vec<Vec<u32>> = output_rows.iter().map(|r| vec![0u32; r * max_batch as usize / 4]).collect();
    let mut result = WorkerResult { latencies_ns: Vec::with_capacity(schedule.set_of.len()), kept: Vec::new() };
    while let Some(i) = schedule.next() {
        let d = schedule.set_of[i];
        let batch = schedule.distinct[d] as usize;
        let mut views: Vec<&mut [u8]> = outputs
            .iter_mut()
            .zip(output_rows)
            .map(|(o, row)| &mut bytemuck::cast_slice_mut::<u32, u8>(o)[..row * batch])
            .collect();
        let started = Instant::now();
        let run = session.run_into(&sets[d], &mut views);
        let elapsed = started.elapsed();
        run.map_err(|e| schedule.fail(i, e))?;
        result.latencies_ns.push(elapsed.as_nanos() as u64);
        if schedule.keep[i] {
            result.kept.push((i, views.iter().map(|v| v.to_vec()).collect()));
        }
        schedule.done();
    }
    Ok(result)
}

/// The generated inputs of `--binding request` (batch b is the first b rows of each) and the
/// bytes per row of every input and output.
struct RequestInputs<'a> {
    generated: &'a [Words],
    input_rows: &'a [usize],
    output_rows: &'a [usize],
}

/// Inputs written in place: one `Session::request` at a time per worker, leased again when the batch
/// changes (the previous one returned first, so workers never hold more run contexts than there
/// are). Each request's time covers the lease when there is one, writing its inputs, and the run.
fn request_worker<B: Backend>(
    session: &Session<B, ReferenceCompiler>,
    inputs: &RequestInputs<'_>,
    schedule: &Schedule<'_>,
) -> Result<WorkerResult> {
    let mut result = WorkerResult { latencies_ns: Vec::with_capacity(schedule.set_of.len()), kept: Vec::new() };
    let mut current: Option<(u64, saggar_dispatch::Request<'_, B, ReferenceCompiler>)> = None;
    while let Some(i) = schedule.next() {
        let batch = schedule.distinct[schedule.set_of[i]];
        let started = Instant::now();
        let run = (|| {
            if current.as_ref().is_none_or(|(b, _)| *b != batch) {
                current = None;
                current = Some((batch, session.request(batch)?));
            }
            let (_, request) = current.as_mut().expect("leased above");
            for (index, (data, row)) in inputs.generated.iter().zip(inputs.input_rows).enumerate() {
                request.input_bytes_mut(index)?.copy_from_slice(&data.bytes()[..row * batch as usize]);
            }
            request.run()
        })();
        let elapsed = started.elapsed();
        run.map_err(|e| schedule.fail(i, e))?;
        result.latencies_ns.push(elapsed.as_nanos() as u64);
        if schedule.keep[i] {
            let (_, request) = current.as_ref().expect("ran above");
            let kept = (0..inputs.output_rows.len())
                .map(|o| request.output_bytes(o).map(<[u8]>::to_vec))
                .collect::<saggar_dispatch::Result<Vec<_>>>()
                .map_err(|e| schedule.fail(i, e))?;
            result.kept.push((i, kept));
        }
        schedule.done();
    }
    Ok(result)
}

/// The device-resident inputs of `--binding direct`, per distinct batch.
struct DirectInputs<'a> {
    sets: &'a [Vec<DeviceTensor<'a>>],
    output_dims: &'a [Vec<Vec<u64>>],
    output_rows: &'a [usize],
}

/// Device tensors: `Session::run_device` with this worker's output buffers, one set per distinct
/// batch, so exact-bucket requests are direct-bound with stable pointers.
fn direct_worker<B: Backend>(
    session: &Session<B, ReferenceCompiler>,
    inputs: &DirectInputs<'_>,
    schedule: &Schedule<'_>,
) -> Result<WorkerResult> {
    let device = session.device();
    let _pin = device.pin()?;
    let stream = device.create_stream()?;
    let specs = session.signature().outputs();
    let buffers: Vec<Vec<B::DeviceBuffer>> = schedule
        .distinct
        .iter()
        .map(|&b| inputs.output_rows.iter().map(|row| device.alloc(row * b as usize)).collect())
        .collect::<saggar_device::Result<_>>()?;
    let outputs: Vec<Vec<DeviceTensor<'_>>> = buffers
        .iter()
        .enumerate()
        .map(|(d, set)| {
            specs
                .iter()
                .zip(set)
                .enumerate()
                .map(|(o, (spec, buffer))| DeviceTensor {
                    name: spec.name(),
                    dtype: spec.dtype(),
                    dims: &inputs.output_dims[d][o],
                    data: buffer.as_slice(),
                })
                .collect()
        })
        .collect();
    let mut result = WorkerResult { latencies_ns: Vec::with_capacity(schedule.set_of.len()), kept: Vec::new() };
    while let Some(i) = schedule.next() {
        let d = schedule.set_of[i];
        let started = Instant::now();
        let run = session.run_device(&inputs.sets[d], &outputs[d]);
        let elapsed = started.elapsed();
        run.map_err(|e| schedule.fail(i, e))?;
        result.latencies_ns.push(elapsed.as_nanos() as u64);
        if schedule.keep[i] {
            let mut kept = Vec::with_capacity(buffers[d].len());
            for buffer in &buffers[d] {
                let mut bytes = vec![0u8; buffer.len()];
                stream.download(buffer.as_slice(), &mut bytes).map_err(|e| schedule.fail(i, e))?;
                kept.push(bytes);
            }
            result.kept.push((i, kept));
        }
        schedule.done();
    }
    Ok(result)
}

/// Compares the kept outputs with the eager reference, run once for the largest kept batch (the
/// reference of a smaller batch is its first rows, since the inputs are).
fn check_outputs(
    model: &LoadedModel,
    generated: &[Words],
    trace: &[u64],
    kept: &[(usize, Vec<Vec<u8>>)],
    output_rows: &[usize],
) -> Result<Verify> {
    let mut verify = Verify {
        checked: 0,
        mismatches: 0,
        tolerance: VERIFY_TOLERANCE,
        values_checked: 0,
        value_mismatches: 0,
        max_rel_error: 0.0,
    };
    let Some(largest) = kept.iter().map(|(i, _)| trace[*i]).max() else {
        return Ok(verify);
    };
    let inputs: Vec<&[u8]> = generated.iter().map(Words::bytes).collect();
    let reference = reference_forward(&model.config, model.compiler.weights(), &inputs, largest as usize)?;
    for (i, outputs) in kept {
        let batch = trace[*i] as usize;
        let expected: Vec<Vec<f32>> =
            reference.iter().zip(output_rows).map(|(r, row)| r[..batch * row / 4].to_vec()).collect();
        let comparison = compare_outputs(&expected, outputs, VERIFY_TOLERANCE)?;
        verify.checked += 1;
        verify.values_checked += comparison.checked as u64;
        verify.value_mismatches += comparison.mismatches as u64;
        if comparison.mismatches > 0 {
            verify.mismatches += 1;
        }
        verify.max_rel_error = verify.max_rel_error.max(comparison.max_rel_error);
    }
    Ok(verify)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verification_samples_are_spread_and_bounded() {
        let mask = verify_mask(10, 4);
        let picked: Vec<usize> = (0..10).filter(|&i| mask[i]).collect();
        assert_eq!(picked, [0, 3, 6, 9]);
        assert_eq!(verify_mask(3, 16).iter().filter(|&&k| k).count(), 3);
        assert_eq!(verify_mask(5, 1), [true, false, false, false, false]);
        assert!(verify_mask(5, 0).iter().all(|&k| !k));
        assert_eq!(verify_mask(2000, 16).iter().filter(|&&k| k).count(), 16);
    }
}
