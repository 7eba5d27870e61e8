//! The one `saggar perf` pipeline, for every model source ([`ModelSource`]): the source says what
//! the model is, which batches the requests have, what their inputs are and what their outputs are
//! checked against; the pipeline does the rest the same way for all.
//!
//! Order of work, so only the requests themselves are timed:
//! 1. take the trace from the source, resolve buckets, open the cache and the device (the source
//!    has imported the model already: `startup.import_s`);
//! 2. create the session (precompile: cache loads and compiles, with progress): `startup.session_s`;
//! 3. take the inputs of each distinct batch from the source, and each one's output shapes (one
//!    untimed run where the source cannot tell); for `--binding direct`, upload one device copy per
//!    distinct batch (`--binding request` writes them into each request's pinned staging as part of
//!    the timed request);
//! 4. run the untimed warmup and then the timed requests through [`super::bench`], the one request
//!    loop; the outputs of the `--verify` sampled requests (and, with `--export-outputs`, of the first
//!    request of each distinct batch) are kept;
//! 5. time each used bucket's copies on their own, have the source verify the kept outputs, write
//!    the exported ones, and assemble the report from the counters of the timed requests, with the
//!    source's `--check-outputs` and `--dump-profile` sections.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use saggar_cache::CompileCache;
use saggar_device::{Backend, BackendVisitor, Device as _};
use saggar_dispatch::{HostTensor, ProgramCompiler, Session, StatsSnapshot};
use saggar_onnx::Tensor;
use saggar_shape::TensorSpec;

use super::bench::{LoopPlan, Record};
use super::report::{Compute, DeviceShare, PerfReport, RunFacts, Snapshots};
use super::runners::{self, Sets};
use super::session;
use crate::buckets::Buckets;
use crate::cli::{BindingArg, PerfArgs};
use crate::environment::Environment;
use crate::error::{CliError, Result};
use crate::progress::ProgressMode;
use crate::source::inputs::{self, InputSets};
use crate::source::{KeptRun, ModelSource, Trace};

/// Runs `saggar perf` on `source`: its report (with `check` and `profile` where the source has them)
/// and every timed request.
pub fn run<S: ModelSource>(source: &S, args: &PerfArgs, env: &Environment) -> Result<(PerfReport, Vec<Record>)> {
    if args.devices.is_some() && !matches!(args.binding, BindingArg::Pinned | BindingArg::Auto) {
        return Err(CliError::usage(
            "--devices runs host tensors through pinned staging only",
            "drop --binding, or time one device with --device N --binding direct|request",
        ));
    }
    let trace = source.trace(&args.trace)?;
    let buckets = args.buckets.buckets.resolve(args.buckets.max_batch, &trace.batches)?;
    let cache = env.open_cache(args.cache_dir.as_deref())?;
    let backend = saggar_device::resolve(args.backend.choice())?;
    saggar_device::visit_backend(backend, Pipeline { source, args, env, trace: &trace, buckets: &buckets, cache })?
}

/// Everything a run needs, handed to the backend chosen at run time.
struct Pipeline<'a, S> {
    source: &'a S,
    args: &'a PerfArgs,
    env: &'a Environment,
    trace: &'a Trace,
    buckets: &'a Buckets,
    cache: Arc<CompileCache>,
}

impl<S: ModelSource> BackendVisitor for Pipeline<'_, S> {
    type Output = Result<(PerfReport, Vec<Record>)>;

    fn visit<B: Backend>(self) -> Self::Output {
        execute::<B, S>(self)
    }
}

/// The trace's distinct batches and, for each request, its batch's index among them and whether
/// its outputs are kept.
struct Batches {
    distinct: Vec<u64>,
    set_of: Vec<usize>,
    /// Requests whose outputs are kept: those checked and those exported.
    keep: Vec<bool>,
    /// The `--verify` requests among them.
    check: Vec<bool>,
}

impl Batches {
    /// Keeps `--verify` requests spread over the trace and, with `--export-outputs`, the first
    /// request of each distinct batch.
    fn new(trace: &[u64], args: &PerfArgs) -> Batches {
        let mut distinct = trace.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        let set_of: Vec<usize> =
            trace.iter().map(|b| distinct.binary_search(b).expect("every batch is in the distinct list")).collect();
        let check = verify_mask(trace.len(), args.verify);
        let mut keep = check.clone();
        if args.export_outputs.is_some() {
            let mut seen = vec![false; distinct.len()];
            for (i, &set) in set_of.iter().enumerate() {
                keep[i] |= !std::mem::replace(&mut seen[set], true);
            }
        }
        Batches { distinct, set_of, keep, check }
    }

    /// The positions of the kept requests that are the first of their batch.
    fn firsts<'k>(&self, kept: &'k [(usize, Vec<Vec<u8>>)]) -> impl Iterator<Item = &'k (usize, Vec<Vec<u8>>)> {
        let mut seen = vec![false; self.distinct.len()];
        kept.iter().filter(move |(i, _)| !std::mem::replace(&mut seen[self.set_of[*i]], true))
    }
}

fn execute<B: Backend, S: ModelSource>(pipeline: Pipeline<'_, S>) -> Result<(PerfReport, Vec<Record>)> {
    let Pipeline { source, args, env, trace, buckets, cache } = pipeline;
    let ordinals = match &args.devices {
        Some(list) => list.ordinals::<B>()?,
        None => vec![args.device],
    };
    let devices = crate::cli::open_devices::<B>(&ordinals)?;
    let mode = ProgressMode::new(env.stderr_is_terminal, args.progress);
    let compiler = source.compiler::<B>();
    let built = session::build::<B, _>(args, mode, devices, compiler, buckets, cache.clone(), source.padded_axis())?;
    let served = &built.served;
    let session = served.primary();
    let after_build = served.snapshots();

    let batches = Batches::new(&trace.batches, args);
    let inputs = source.inputs(&batches.distinct, args.trace.seed)?;
    let hosts: Vec<Vec<HostTensor<'_>>> = (0..inputs.count()).map(|set| inputs.host(set)).collect();
    let output_dims = output_dims(session, &inputs, &hosts)?;
    let output_bytes = output_bytes(session.signature().outputs(), &output_dims);
    let sets = Sets { inputs: &hosts, output_dims: &output_dims, output_bytes: &output_bytes };
    let warm = std::cell::Cell::new(Vec::new());
    let plan = loop_plan(args, mode, &batches);
    let bound = runners::run(args.binding, served, sets, plan, || warm.set(served.snapshots()))?;
    let measured = bound.measured;
    let (warm, done) = (warm.into_inner(), served.snapshots());
    let total = |s: &[StatsSnapshot]| StatsSnapshot::total(s).expect("one snapshot per device");
    let snapshots = Snapshots { built: total(&after_build), warm: total(&warm), done: total(&done) };
    let devices_used: Vec<DeviceShare> = served
        .sessions()
        .iter()
        .zip(warm.iter().zip(&done))
        .map(|(s, (w, d))| DeviceShare::new(s.device().info(), d.requests.saturating_sub(w.requests)))
        .collect();
    let copies = session::bucket_copies(session, &measured)?;

    // Only the `--verify` requests are checked: an exported one is kept for its outputs alone.
    let kept: Vec<KeptRun<'_>> = measured
        .kept
        .iter()
        .filter(|(i, _)| batches.check[*i])
        .map(|(i, outputs)| {
            let set = batches.set_of[*i];
            KeptRun { set, outputs, dims: &output_dims[set] }
        })
        .collect();
    let verify = source.verify(&inputs, &kept)?;
    let output_specs = session.signature().outputs();
    if let Some(dir) = &args.export_outputs {
        for (i, outputs) in batches.firsts(&measured.kept) {
            let set = batches.set_of[*i];
            let batch = batches.distinct[set];
            write_tensors(
                dir,
                batch,
                "output",
                output_specs,
                &inputs::tensors(output_specs, &output_dims[set], outputs)?,
            )?;
            if source.exports_inputs() {
                write_tensors(dir, batch, "input", inputs.specs(), &inputs.tensors(set)?)?;
            }
        }
    }
    let first = match kept.first() {
        Some(k) => inputs::tensors(output_specs, k.dims, k.outputs)?,
        None => Vec::new(),
    };
    let mut report = PerfReport::new(
        args,
        RunFacts {
            device: session.device().info(),
            devices: devices_used,
            buckets: session.buckets(),
            session_s: built.session_s,
            programs: &built.programs,
            cache: &cache,
            model: source.info(),
            trace: &trace.label,
            binding: bound.binding,
            stages_unavailable: bound.stages_unavailable,
            measured: &measured,
            distinct: &batches.distinct,
            snapshots,
            copies,
            verify,
        },
    );
    report.check = source.check(&first);
    report.compute = Compute::of(&measured.records, &batches.distinct, |set| source.flops(&inputs, set));
    report.profile = source.profile::<B>(ordinals[0], &inputs, &trace.batches)?;
    Ok((report, measured.records))
}

/// Each set's output shapes: the source's, or those of one untimed run where it cannot tell.
fn output_dims<B: Backend, C: ProgramCompiler<B>>(
    session: &Session<B, C>,
    inputs: &InputSets,
    hosts: &[Vec<HostTensor<'_>>],
) -> Result<Vec<Vec<Vec<u64>>>> {
    hosts
        .iter()
        .enumerate()
        .map(|(set, host)| match inputs.output_dims(set) {
            Some(dims) => Ok(dims.to_vec()),
            None => Ok(session.run(host)?.into_iter().map(|o| o.dims).collect()),
        })
        .collect()
}

/// Each set's output sizes in bytes.
fn output_bytes(specs: &[TensorSpec], output_dims: &[Vec<Vec<u64>>]) -> Vec<Vec<usize>> {
    output_dims
        .iter()
        .map(|set| {
            set.iter()
                .zip(specs)
                .map(|(dims, spec)| dims.iter().product::<u64>() as usize * spec.dtype().size_bytes())
                .collect()
        })
        .collect()
}

/// The request loop's plan from the flags.
fn loop_plan<'a>(args: &PerfArgs, mode: ProgressMode, batches: &'a Batches) -> LoopPlan<'a> {
    LoopPlan {
        set_of: &batches.set_of,
        distinct: &batches.distinct,
        keep: &batches.keep,
        // By default two per distinct batch and worker thread.
        warmup_runs: args.warmup_runs.unwrap_or(2 * batches.distinct.len() as u64 * args.concurrency),
        warmup_time: Duration::from_secs_f64(args.warmup_time),
        iterations: match (args.trace.requests, args.duration) {
            (Some(n), _) => n,
            (None, Some(_)) => 1,
            (None, None) => batches.set_of.len() as u64,
        },
        duration: args.duration.map(Duration::from_secs_f64),
        concurrency: args.concurrency as usize,
        stage_every: args.stage_every,
        progress: mode,
    }
}

/// Which requests to verify: `n` of `requests`, evenly spread, the first and the last included.
fn verify_mask(requests: usize, n: u64) -> Vec<bool> {
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

/// Writes one request's tensors to `dir/batch_B/PREFIX_K.pb` (ONNX TensorProto files).
fn write_tensors(dir: &Path, batch: u64, prefix: &str, specs: &[TensorSpec], tensors: &[Tensor]) -> Result<()> {
    let folder = dir.join(format!("batch_{batch}"));
    std::fs::create_dir_all(&folder).map_err(|e| {
        CliError::failure(
            format!("--export-outputs {}: {e}", folder.display()),
            "check that the folder can be created and written",
        )
    })?;
    for (k, (spec, tensor)) in specs.iter().zip(tensors).enumerate() {
        let path = folder.join(format!("{prefix}_{k}.pb"));
        saggar_onnx::write_tensor_pb(&path, spec.name(), tensor).map_err(|e| {
            CliError::failure(format!("--export-outputs {}: {e}", path.display()), "check that the folder is writable")
        })?;
    }
    Ok(())
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
