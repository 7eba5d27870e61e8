//! `saggar perf --onnx FILE`: a trace of requests through a `Session` of the model, on loaded or
//! generated inputs, checked against the model's eager evaluation and, with `--check-outputs`,
//! against expected outputs.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use saggar_device::{Backend, BackendVisitor, Device as _};
use saggar_dispatch::{HostTensor, Session};
use saggar_onnx::{OnnxModel, Tensor};
use saggar_shape::TensorSpec;

use super::check::{Check, compare, compare_with};
use super::{LoadedOnnx, batch_of, generate, load, read_tensors};
use crate::buckets::Buckets;
use crate::cli::{BindingArg, PerfArgs, Toggle};
use crate::environment::Environment;
use crate::error::{CliError, Result};
use crate::perf::{Counters, VERIFY_TOLERANCE, session_config, verify_mask};
use crate::progress::Bar;
use crate::report::{self, Latency, PerfReport, Verify};

/// `saggar perf --onnx FILE`.
pub fn perf(args: &PerfArgs, env: &Environment, path: &Path) -> Result<()> {
    let loaded = load(path)?;
    if matches!(args.binding, BindingArg::Direct | BindingArg::Request) {
        let flag = if args.binding == BindingArg::Direct { "direct" } else { "request" };
        return Err(CliError::usage(
            format!("--binding {flag} is not available with --onnx"),
            "drop --binding (ONNX models run with pinned host tensors)",
        ));
    }
    let model = loaded.model();
    let loaded_inputs = match &args.load_inputs {
        Some(dir) => Some(read_tensors(dir, model.inputs(), "input", "--load-inputs")?),
        None => None,
    };
    let expected = match &args.check_outputs {
        Some(dir) => Some((dir, read_tensors(dir, model.outputs(), "output", "--check-outputs")?)),
        None => None,
    };
    let trace = match &loaded_inputs {
        // Every request runs the loaded inputs: the trace is their batch, repeated.
        Some(inputs) => vec![batch_of(model, inputs); args.trace.requests.unwrap_or(2000) as usize],
        None => args.trace.trace.generate(args.trace.requests, args.trace.seed)?,
    };
    let buckets = args.buckets.buckets.resolve(args.buckets.max_batch, &trace)?;
    let cache = crate::cache::open_cache(&env.cache_dir(args.cache_dir.as_deref())?)?;
    let backend = saggar_device::resolve(args.backend.choice())?;
    let plan = PerfPlan { args, env, loaded: &loaded, trace: &trace, inputs: loaded_inputs, buckets: &buckets, cache };
    let (mut perf, outputs) = saggar_device::visit_backend(backend, plan)??;
    let check = expected.map(|(dir, want)| {
        let names: Vec<&str> = model.outputs().iter().map(|s| s.name()).collect();
        let outputs = compare(&names, &outputs, &want, args.rtol, args.atol);
        Check {
            dir: dir.display().to_string(),
            rtol: args.rtol,
            atol: args.atol,
            max_abs_error: outputs.iter().map(|o| o.max_abs_error).fold(0.0, f64::max),
            max_rel_error: outputs.iter().map(|o| o.max_rel_error).fold(0.0, f64::max),
            passed: outputs.iter().all(|o| o.mismatches == 0),
            outputs,
        }
    });
    perf.check = check.clone();
    report::emit(args.json.as_deref(), &perf, || perf.table())?;
    if let Some(check) = check.filter(|c| !c.passed) {
        let bad: Vec<String> = check
            .outputs
            .iter()
            .filter(|o| o.mismatches > 0)
            .map(|o| match &o.problem {
                Some(problem) => format!("{} ({problem})", o.name),
                None => format!("{} ({} of {} elements)", o.name, o.mismatches, o.elements),
            })
            .collect();
        return Err(CliError::failure(
            format!(
                "--check-outputs: {} differ from {} (max abs error {:.3e}, max rel error {:.3e}, rtol {:e}, atol {:e})",
                bad.join(", "),
                check.dir,
                check.max_abs_error,
                check.max_rel_error,
                check.rtol,
                check.atol
            ),
            "compare with --backend host; loosen --rtol/--atol only if the expected outputs come from another precision",
        ));
    }
    if perf.verify.mismatches > 0 {
        return Err(CliError::failure(
            format!(
                "{} of {} checked requests differ from the model's eager evaluation (max relative error {:.3e})",
                perf.verify.mismatches, perf.verify.checked, perf.verify.max_rel_error
            ),
            "the runtime computed wrong outputs; rerun with --graphs off and --backend host to narrow it down, and report it",
        ));
    }
    Ok(())
}

struct PerfPlan<'a> {
    args: &'a PerfArgs,
    env: &'a Environment,
    loaded: &'a LoadedOnnx,
    trace: &'a [u64],
    inputs: Option<Vec<Tensor>>,
    buckets: &'a Buckets,
    cache: Arc<saggar_cache::CompileCache>,
}

impl BackendVisitor for PerfPlan<'_> {
    /// The report (without `check`) and the outputs of the first request.
    type Output = Result<(PerfReport, Vec<Tensor>)>;

    fn visit<B: Backend>(self) -> Self::Output {
        execute_perf::<B>(self)
    }
}

/// One distinct batch's request: its tensors and bytes.
struct Request {
    tensors: Vec<Tensor>,
    dims: Vec<Vec<u64>>,
    /// Bytes in u64 words, so every tensor is aligned for its element type.
    words: Vec<(Vec<u64>, usize)>,
}

impl Request {
    fn new(tensors: Vec<Tensor>) -> Request {
        let dims = tensors.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
        let words = tensors
            .iter()
            .map(|t| {
                let bytes = t.to_le_bytes();
                let mut words = vec![0u64; bytes.len().div_ceil(8).max(1)];
                bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(&bytes);
                (words, bytes.len())
            })
            .collect();
        Request { tensors, dims, words }
    }

    fn host<'a>(&'a self, specs: &'a [TensorSpec]) -> Vec<HostTensor<'a>> {
        specs
            .iter()
            .enumerate()
            .map(|(i, s)| HostTensor {
                name: s.name(),
                dtype: s.dtype(),
                dims: &self.dims[i],
                data: &bytemuck::cast_slice::<u64, u8>(&self.words[i].0)[..self.words[i].1],
            })
            .collect()
    }
}

fn execute_perf<B: Backend>(plan: PerfPlan<'_>) -> Result<(PerfReport, Vec<Tensor>)> {
    let PerfPlan { args, env, loaded, trace, inputs, buckets, cache } = plan;
    let model = loaded.model();
    let device = B::open(args.device)?;
    let info = device.info().clone();
    let bar = Bar::new(env.stderr_is_terminal, "warmup", buckets.list.len() as u64);
    let started = Instant::now();
    let session = Session::builder(device, loaded.compiler.clone())
        .config(session_config(args, buckets, cache.clone())?)
        .on_progress(|p| bar.program_ready(None, p))
        .build();
    bar.finish();
    let session = session?;
    let warmup_s = started.elapsed().as_secs_f64();

    let mut distinct = trace.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let requests: Vec<Request> = match inputs {
        Some(tensors) => vec![Request::new(tensors)],
        None => {
            distinct.iter().map(|&b| generate(model, b, args.trace.seed).map(Request::new)).collect::<Result<_>>()?
        }
    };
    let set_of: Vec<usize> =
        trace.iter().map(|b| distinct.binary_search(b).unwrap_or(0).min(requests.len() - 1)).collect();
    let keep = verify_mask(trace.len(), args.verify);
    let specs = model.inputs();
    let hosts: Vec<Vec<HostTensor<'_>>> = requests.iter().map(|r| r.host(specs)).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let bar = Bar::new(env.stderr_is_terminal, "run", trace.len() as u64);
    let wall = Instant::now();
    type Kept = Vec<(usize, Vec<Tensor>)>;
    let worker = || -> Result<(Vec<u64>, Kept)> {
        let (mut latencies, mut kept) = (Vec::new(), Vec::new());
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(&set) = set_of.get(i) else { break };
            let started = Instant::now();
            let outputs =
                session.run(&hosts[set]).map_err(|e| CliError::from(e).context(format_args!("request {i}")))?;
            latencies.push(started.elapsed().as_nanos() as u64);
            if keep[i] || i == 0 {
                let tensors = outputs
                    .iter()
                    .map(|o| Tensor::from_le_bytes(o.dtype, o.dims.iter().map(|&d| d as usize).collect(), &o.data))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| CliError::failure(format!("request {i}: {e}"), "this is a bug in saggar"))?;
                kept.push((i, tensors));
            }
            if bar.is_visible() {
                bar.inc(1);
            }
        }
        Ok((latencies, kept))
    };
    let results: Vec<Result<(Vec<u64>, Kept)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.concurrency).map(|_| scope.spawn(worker)).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let wall_s = wall.elapsed().as_secs_f64();
    bar.finish();
    let (mut latencies, mut kept) = (Vec::new(), Vec::new());
    for r in results {
        let (l, k) = r?;
        latencies.extend(l);
        kept.extend(k);
    }
    kept.sort_by_key(|(i, _)| *i);
    let first = kept.first().map(|(_, t)| t.clone()).unwrap_or_default();
    let verify = verify_eager(model, &requests, &set_of, &keep, &kept)?;
    let Counters { paths, split_requests, failures, padding, cache, graphs } =
        Counters::read(&session.stats(), &cache, args.graphs == Toggle::On);
    let n = trace.len() as u64;
    let report = PerfReport {
        backend: B::KIND.name().to_string(),
        device: info.name,
        device_ordinal: info.ordinal,
        arch: info.arch,
        model: model.name().to_string(),
        model_source: loaded.source.clone(),
        model_inputs: specs.len(),
        requests: n,
        concurrency: args.concurrency,
        trace: match &args.load_inputs {
            Some(dir) => format!("inputs:{}", dir.display()),
            None => args.trace.trace.to_string(),
        },
        seed: args.trace.seed,
        binding: "pinned".to_string(),
        bucket_policy: args.buckets.buckets.to_string(),
        buckets: session.buckets(),
        warmup_s,
        wall_s,
        throughput_rps: n as f64 / wall_s.max(1e-9),
        rows_per_s: trace.iter().sum::<u64>() as f64 / wall_s.max(1e-9),
        latency_us: Latency::from_nanos(&mut latencies),
        paths,
        split_requests,
        failures,
        padding,
        cache,
        graphs,
        verify,
        check: None,
    };
    Ok((report, first))
}

/// Compares the `--verify` sampled requests with the model's eager evaluation, by the same rule as
/// the built-in families: |actual - expected| <= 1e-3 * max(1, |expected|).
fn verify_eager(
    model: &OnnxModel,
    requests: &[Request],
    set_of: &[usize],
    keep: &[bool],
    kept: &[(usize, Vec<Tensor>)],
) -> Result<Verify> {
    let mut verify = Verify {
        checked: 0,
        mismatches: 0,
        tolerance: VERIFY_TOLERANCE,
        values_checked: 0,
        value_mismatches: 0,
        max_rel_error: 0.0,
    };
    let mut eager: Vec<Option<Vec<Tensor>>> = vec![None; requests.len()];
    let names: Vec<&str> = model.outputs().iter().map(|s| s.name()).collect();
    for (i, outputs) in kept.iter().filter(|(i, _)| keep[*i]) {
        let set = set_of[*i];
        if eager[set].is_none() {
            let reference = model.run_once(&requests[set].tensors).map_err(|e| {
                CliError::failure(
                    format!("eager evaluation of `{}`: {e}", model.name()),
                    "report this with the model file",
                )
            })?;
            eager[set] = Some(reference);
        }
        let reference = eager[set].as_ref().expect("computed above");
        let compared = compare_with(&names, outputs, reference, &|e: f64| VERIFY_TOLERANCE * e.abs().max(1.0));
        verify.checked += 1;
        verify.values_checked += compared.iter().map(|c| c.elements).sum::<u64>();
        let bad: u64 = compared.iter().map(|c| c.mismatches).sum();
        verify.value_mismatches += bad;
        verify.mismatches += u64::from(bad > 0);
        verify.max_rel_error = compared.iter().map(|c| c.max_rel_error).fold(verify.max_rel_error, f64::max);
    }
    Ok(verify)
}
