//! `saggar perf`: runs a batch-size trace through one session and reports what the runtime did.
//!
//! Order of work, so only the requests themselves are timed:
//! 1. load the model (`startup.import_s`), generate the trace, resolve buckets, open the cache and
//!    the device;
//! 2. create the session (precompile: cache loads and compiles, with progress): `startup.session_s`;
//! 3. generate inputs once for the trace's largest batch (smaller batches use its first rows, which
//!    [`generate_inputs`] makes identical to a smaller generation) and, for `--binding direct`,
//!    upload one device copy per distinct batch (`--binding request` writes them into each
//!    request's pinned staging as part of the timed request);
//! 4. run the untimed warmup and then the timed requests through [`crate::bench`], the one request
//!    loop every model source shares; the outputs of the `--verify` sampled requests are kept;
//! 5. time each used bucket's copies on their own, compare the kept outputs with
//!    [`reference_forward`], and read the counters of the timed requests.

use std::sync::Arc;
use std::time::Instant;

use saggar_cache::CompileCache;
use saggar_device::{Backend, BackendVisitor};
use saggar_dispatch::{CaptureWhen, GraphConfig, HostTensor, LiveBuckets, PaddedAxis, SessionConfig, StatsSnapshot};
use saggar_models::{compare_outputs, generate_inputs, reference_forward};

use crate::bench;
use crate::buckets::Buckets;
use crate::cli::{CaptureArg, PerfArgs, Toggle};
use crate::environment::Environment;
use crate::error::{CliError, Result};
use crate::measure::{self, Described, Snapshots};
use crate::model::{self, LoadedModel};
use crate::report::{self, CacheCounters, Failures, Graphs, Padding, Paths, PerfReport, Verify};
use crate::runners::{self, Sets};

/// The relative tolerance of `--verify`: a value matches when
/// `|actual - expected| <= VERIFY_TOLERANCE * max(1, |expected|)`.
pub const VERIFY_TOLERANCE: f64 = 1e-3;

/// Runs `saggar perf`.
pub fn run(args: &PerfArgs, env: &Environment) -> Result<()> {
    if let Some(path) = &args.model.onnx {
        return crate::onnx::perf(args, env, path);
    }
    if args.dump_profile {
        return Err(CliError::usage(
            "--dump-profile needs --onnx",
            "the per-step profile is of ONNX programs; export the model to ONNX and pass --onnx FILE",
        ));
    }
    if !args.shapes.is_empty() || args.pad_axis.is_some() {
        let flag = if args.shapes.is_empty() { "--pad-axis" } else { "--shapes" };
        return Err(CliError::usage(
            format!("{flag} needs --onnx"),
            "the built-in models have no symbolic dimensions besides the batch",
        ));
    }
    let imported = Instant::now();
    let model = model::load(&args.model)?;
    let import_s = imported.elapsed().as_secs_f64();
    let trace = args.trace.trace.generate(args.trace.requests, args.trace.seed)?;
    let buckets = args.buckets.buckets.resolve(args.buckets.max_batch, &trace)?;
    let cache_dir = env.cache_dir(args.cache_dir.as_deref())?;
    let cache = crate::cache::open_cache(&cache_dir)?;
    let backend = saggar_device::resolve(args.backend.choice())?;
    let plan = PerfPlan { args, env, model: &model, trace: &trace, buckets: &buckets, cache, import_s };
    let (report, records) = saggar_device::visit_backend(backend, plan)??;
    report::emit(args.json.as_deref(), &report, || report.table())?;
    if let Some(path) = &args.export_times {
        bench::export_times(path, &records)?;
    }
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
    import_s: f64,
}

impl BackendVisitor for PerfPlan<'_> {
    type Output = Result<(PerfReport, Vec<bench::Record>)>;

    fn visit<B: Backend>(self) -> Self::Output {
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

fn execute<B: Backend>(plan: PerfPlan<'_>) -> Result<(PerfReport, Vec<bench::Record>)> {
    let PerfPlan { args, env, model, trace, buckets, cache, import_s } = plan;
    let config = &model.config;
    let device = B::open(args.device)?;
    let mode = measure::progress_mode(args, env.stderr_is_terminal);
    let built = measure::build_session::<B, _>(
        args,
        mode,
        device.clone(),
        model.compiler.clone(),
        buckets,
        cache.clone(),
        None,
    )?;
    let session = &built.session;
    let after_build = session.stats();

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
    let keep = keep_mask(trace, &set_of, args);
    let signature = session.signature();
    let inputs: Vec<Vec<HostTensor<'_>>> = distinct
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
    let output_bytes: Vec<Vec<usize>> =
        distinct.iter().map(|&b| output_rows.iter().map(|row| row * b as usize).collect()).collect();
    let sets = Sets { inputs: &inputs, output_dims: &output_dims, output_bytes: &output_bytes };
    let loop_plan = measure::loop_plan(args, mode, &distinct, &set_of, &keep, args.stage_every);
    let warm = std::cell::Cell::new(after_build);
    let bound = runners::run(args.binding, session, sets, loop_plan, || warm.set(session.stats()))?;
    let measured = bound.measured;
    let snapshots = Snapshots { built: after_build, warm: warm.get(), done: session.stats() };
    let copies = measure::bucket_copies(session, &measured)?;
    let verify = check_outputs(model, &generated, trace, &measured.kept, &output_rows)?;
    if let Some(dir) = &args.export_outputs {
        let names: Vec<&str> = signature.outputs().iter().map(|s| s.name()).collect();
        let dtypes: Vec<_> = signature.outputs().iter().map(|s| s.dtype()).collect();
        for (i, outputs) in first_of_each_batch(trace, &measured.kept) {
            let d = set_of[i];
            let tensors = outputs
                .iter()
                .zip(&dtypes)
                .zip(&output_dims[d])
                .map(|((bytes, &dtype), dims)| {
                    saggar_onnx::Tensor::from_le_bytes(dtype, dims.iter().map(|&x| x as usize).collect(), bytes)
                        .map_err(|e| CliError::failure(format!("--export-outputs: {e}"), "this is a bug in saggar"))
                })
                .collect::<Result<Vec<_>>>()?;
            measure::write_outputs(dir, distinct[d], &names, &tensors)?;
        }
    }
    let described = Described {
        model: model.name().to_string(),
        model_source: model.source.clone(),
        model_inputs: model.input_count(),
        trace: args.trace.trace.to_string(),
        binding: bound.binding.to_string(),
        stages_unavailable: bound.stages_unavailable,
    };
    let report =
        measure::report(args, &built, &cache, import_s, described, &measured, &distinct, &snapshots, copies, verify);
    Ok((report, measured.records))
}

/// Which trace positions keep their outputs: `--verify` spread over the trace and, with
/// `--export-outputs`, the first request of each distinct batch.
pub(crate) fn keep_mask(trace: &[u64], set_of: &[usize], args: &PerfArgs) -> Vec<bool> {
    let mut keep = verify_mask(trace.len(), args.verify);
    if args.export_outputs.is_some() {
        let mut seen = vec![false; set_of.iter().copied().max().map_or(0, |m| m + 1)];
        for (i, &d) in set_of.iter().enumerate() {
            if !seen[d] {
                seen[d] = true;
                keep[i] = true;
            }
        }
    }
    keep
}

/// The kept outputs of the first request of each distinct batch, with their trace positions.
pub(crate) fn first_of_each_batch<'k, K>(trace: &[u64], kept: &'k [(usize, K)]) -> Vec<(usize, &'k K)> {
    let mut seen = std::collections::HashSet::new();
    kept.iter().filter(|(i, _)| seen.insert(trace[*i % trace.len()])).map(|(i, k)| (*i, k)).collect()
}

/// The session configuration of `saggar perf` (every model source): buckets, graphs, the cache, and
/// one prewarmed run context per worker thread.
pub(crate) fn session_config(
    args: &PerfArgs,
    buckets: &Buckets,
    cache: Arc<CompileCache>,
    padded_axis: Option<PaddedAxis>,
) -> Result<SessionConfig> {
    let concurrency = args.concurrency as usize;
    let mut builder = SessionConfig::builder();
    if let Some(live) = args.live_buckets {
        builder = builder.live_buckets(LiveBuckets::new(live.every, live.budget));
    }
    if let Some(axis) = padded_axis {
        builder = builder.padded_axis(axis);
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
        .kernel_copies_up_to(usize::try_from(args.kernel_copies_up_to).unwrap_or(usize::MAX))
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
    /// The counters of the work between `before` and `after` (the timed requests), with the cache's
    /// counters for the whole session.
    pub(crate) fn timed(
        after: &StatsSnapshot,
        before: &StatsSnapshot,
        cache: &CompileCache,
        graphs_enabled: bool,
    ) -> Counters {
        let cache_stats = cache.stats();
        let d = |f: fn(&StatsSnapshot) -> u64| f(after).saturating_sub(f(before));
        let (useful_rows, padded_rows) = (d(|s| s.useful_rows), d(|s| s.padded_rows));
        let total_rows = useful_rows + padded_rows;
        Counters {
            paths: Paths { ultra_fast: d(|s| s.ultra_fast), fast: d(|s| s.fast), standard: d(|s| s.standard) },
            split_requests: d(|s| s.split_requests),
            failures: Failures {
                failed: d(|s| s.failed),
                request: d(|s| s.failures.request),
                limit: d(|s| s.failures.limit),
                device: d(|s| s.failures.device),
                compile: d(|s| s.failures.compile),
                other: d(|s| s.failures.other),
            },
            padding: Padding {
                useful_rows,
                padded_rows,
                waste_ratio: if total_rows == 0 { 0.0 } else { padded_rows as f64 / total_rows as f64 },
                refits: d(|s| s.refits),
                refit_failures: d(|s| s.refit_failures),
            },
            cache: CacheCounters {
                memory_hits: after.memory_hits,
                disk_loads: after.disk_loads,
                compiles: after.compiles,
                corrupt_evicted: cache_stats.corrupt_evicted,
                publish_failures: cache_stats.publish_failures,
                dir_sync_failures: cache_stats.dir_sync_failures,
                dir: cache.dir().display().to_string(),
            },
            graphs: Graphs {
                enabled: graphs_enabled,
                captures: d(|s| s.captures),
                replays: d(|s| s.replays),
                updates: d(|s| s.updates),
                recaptures: d(|s| s.recaptures),
                eager_fallbacks: d(|s| s.eager_fallbacks),
                eager_runs: d(|s| s.eager_runs),
                evicted: d(|s| s.evicted_graphs),
                memory_bytes: after.graph_bytes,
                peak_memory_bytes: after.graph_bytes_peak,
                over_budget: d(|s| s.graphs_over_budget),
                shape_programs: after.shape_programs,
                shape_program_evictions: d(|s| s.shape_program_evictions),
                shape_overflow_runs: d(|s| s.shape_overflow_runs),
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
