//! `saggar perf --onnx FILE`: a trace of requests through a `Session` of the model, on loaded or
//! generated inputs (`--shapes` fixing symbolic dimensions besides the batch), run by the same
//! request loop as the built-in models ([`crate::bench`]), checked against the model's eager
//! evaluation and, with `--check-outputs`, against expected outputs.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use saggar_device::{Backend, BackendVisitor};
use saggar_dispatch::{BucketSpec, HostTensor};
use saggar_onnx::{OnnxModel, Tensor};
use saggar_shape::TensorSpec;

use super::check::{Check, compare, compare_with};
use super::{LoadedOnnx, batch_of, generate, load, read_tensors};
use crate::bench;
use crate::buckets::Buckets;
use crate::cli::PerfArgs;
use crate::environment::Environment;
use crate::error::{CliError, Result};
use crate::measure::{self, Described, Snapshots};
use crate::perf::{VERIFY_TOLERANCE, first_of_each_batch, keep_mask};
use crate::report::{self, PerfReport, Verify};
use crate::runners::{self, Sets};

/// `saggar perf --onnx FILE`.
pub fn perf(args: &PerfArgs, env: &Environment, path: &Path) -> Result<()> {
    let imported = Instant::now();
    let loaded = load(path, super::options(&args.model))?;
    let import_s = imported.elapsed().as_secs_f64();
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
    if let (Some(inputs), Some(batch)) = (&loaded_inputs, args.dump_profile_batch)
        && batch != batch_of(model, inputs)
    {
        return Err(CliError::usage(
            format!("--dump-profile-batch {batch}: the loaded inputs are batch {}", batch_of(model, inputs)),
            "leave --dump-profile-batch out with --load-inputs (the loaded inputs' batch is profiled)",
        ));
    }
    let buckets = args.buckets.buckets.resolve(args.buckets.max_batch, &trace)?;
    let cache = crate::cache::open_cache(&env.cache_dir(args.cache_dir.as_deref())?)?;
    let backend = saggar_device::resolve(args.backend.choice())?;
    let plan = PerfPlan {
        args,
        env,
        loaded: &loaded,
        trace: &trace,
        inputs: loaded_inputs,
        buckets: &buckets,
        cache,
        import_s,
    };
    let (mut perf, outputs, records) = saggar_device::visit_backend(backend, plan)??;
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
    report::emit(args.json.as_deref(), &perf, || match &perf.profile {
        Some(profile) => format!("{}\n{}", perf.table(), profile.table()),
        None => perf.table(),
    })?;
    if let Some(path) = &args.export_times {
        bench::export_times(path, &records)?;
    }
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
    import_s: f64,
}

impl BackendVisitor for PerfPlan<'_> {
    /// The report (without `check`), the outputs of the first request, and every timed request.
    type Output = Result<(PerfReport, Vec<Tensor>, Vec<bench::Record>)>;

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

fn execute_perf<B: Backend>(plan: PerfPlan<'_>) -> Result<(PerfReport, Vec<Tensor>, Vec<bench::Record>)> {
    let PerfPlan { args, env, loaded, trace, inputs, buckets, cache, import_s } = plan;
    let model = loaded.model();
    let device = B::open(args.device)?;
    let mode = measure::progress_mode(args, env.stderr_is_terminal);
    let padded_axis = args
        .pad_axis
        .as_ref()
        .map(|axis| loaded.compiler.padded_axis(&axis.symbol, BucketSpec::List(axis.sizes.clone()), 0));
    let built = measure::build_session::<B, _>(
        args,
        mode,
        device,
        loaded.compiler.clone(),
        buckets,
        cache.clone(),
        padded_axis,
    )?;
    let session = &built.session;
    let after_build = session.stats();

    let mut distinct = trace.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let requests: Vec<Request> = match inputs {
        Some(tensors) => vec![Request::new(tensors)],
        None => distinct
            .iter()
            .map(|&b| generate(model, b, args.trace.seed, &args.shapes).map(Request::new))
            .collect::<Result<_>>()?,
    };
    let set_of: Vec<usize> =
        trace.iter().map(|b| distinct.binary_search(b).unwrap_or(0).min(requests.len() - 1)).collect();
    let keep = keep_mask(trace, &set_of, args);
    let specs = model.inputs();
    let hosts: Vec<Vec<HostTensor<'_>>> = requests.iter().map(|r| r.host(specs)).collect();
    // Each set's output shapes, from the inputs' symbolic dimensions; one untimed run where the
    // model's declared output shapes do not say.
    let output_dims: Vec<Vec<Vec<u64>>> = requests
        .iter()
        .zip(&hosts)
        .map(|(request, host)| match declared_output_dims(model, request) {
            Some(dims) => Ok(dims),
            None => Ok(session.run(host)?.into_iter().map(|o| o.dims).collect()),
        })
        .collect::<Result<_>>()?;
    let output_bytes: Vec<Vec<usize>> = output_dims
        .iter()
        .map(|set| {
            set.iter()
                .zip(model.outputs())
                .map(|(dims, spec)| dims.iter().product::<u64>() as usize * spec.dtype().size_bytes())
                .collect()
        })
        .collect();
    let sets = Sets { inputs: &hosts, output_dims: &output_dims, output_bytes: &output_bytes };
    let loop_plan = measure::loop_plan(args, mode, &distinct, &set_of, &keep, args.stage_every);
    let warm = std::cell::Cell::new(after_build);
    let bound = runners::run(args.binding, session, sets, loop_plan, || warm.set(session.stats()))?;
    let measured = bound.measured;
    let snapshots = Snapshots { built: after_build, warm: warm.get(), done: session.stats() };
    let copies = measure::bucket_copies(session, &measured)?;
    // The kept outputs' bytes as tensors of their set's shapes.
    let kept: Vec<(usize, Vec<Tensor>)> = measured
        .kept
        .iter()
        .map(|(i, outputs)| {
            let set = set_of[i % set_of.len()];
            let tensors = outputs
                .iter()
                .zip(model.outputs())
                .zip(&output_dims[set])
                .map(|((bytes, spec), dims)| {
                    Tensor::from_le_bytes(spec.dtype(), dims.iter().map(|&d| d as usize).collect(), bytes)
                        .map_err(|e| CliError::failure(format!("request {i}: {e}"), "this is a bug in saggar"))
                })
                .collect::<Result<Vec<_>>>()?;
            Ok((*i, tensors))
        })
        .collect::<Result<_>>()?;
    let first = kept.first().map(|(_, t)| t.clone()).unwrap_or_default();
    let verify = verify_eager(model, &requests, &set_of, &keep, &kept)?;
    if let Some(dir) = &args.export_outputs {
        let names: Vec<&str> = model.outputs().iter().map(|s| s.name()).collect();
        let input_names: Vec<&str> = specs.iter().map(|s| s.name()).collect();
        for (i, tensors) in first_of_each_batch(trace, &kept) {
            let set = set_of[i % set_of.len()];
            let batch = distinct[set];
            measure::write_outputs(dir, batch, &names, tensors)?;
            measure::write_inputs(dir, batch, &input_names, &requests[set].tensors)?;
        }
    }
    let described = Described {
        model: model.name().to_string(),
        model_source: loaded.source.clone(),
        model_inputs: specs.len(),
        trace: match &args.load_inputs {
            Some(dir) => format!("inputs:{}", dir.display()),
            None => args.trace.trace.to_string(),
        },
        binding: bound.binding.to_string(),
        stages_unavailable: bound.stages_unavailable,
    };
    let mut report =
        measure::report(args, &built, &cache, import_s, described, &measured, &distinct, &snapshots, copies, verify);
    if args.dump_profile {
        let batch = match &args.load_inputs {
            Some(_) => batch_of(model, &requests[0].tensors),
            None => args.dump_profile_batch.or(trace.first().copied()).unwrap_or(1),
        };
        let generated;
        let inputs = match distinct.binary_search(&batch) {
            Ok(set) if set < requests.len() => &requests[set].tensors,
            _ => {
                generated = generate(model, batch, args.trace.seed, &args.shapes)?;
                &generated
            }
        };
        report.profile = Some(super::profile::run::<B>(loaded, args.device, batch, inputs, args.trace.requests)?);
    }
    Ok((report, first, measured.records))
}

/// The output shapes of `request` from the model's declared output dimensions, each symbol taken
/// from the inputs; `None` when an output has a symbol no input carries.
fn declared_output_dims(model: &OnnxModel, request: &Request) -> Option<Vec<Vec<u64>>> {
    let mut symbols: HashMap<&str, u64> = HashMap::new();
    for (spec, dims) in model.inputs().iter().zip(&request.dims) {
        for (d, &extent) in spec.dims().iter().zip(dims) {
            if let Some(symbol) = d.symbol() {
                symbols.insert(symbol, extent);
            }
        }
    }
    model
        .outputs()
        .iter()
        .map(|spec| spec.dims().iter().map(|d| d.as_fixed().or_else(|| symbols.get(d.symbol()?).copied())).collect())
        .collect()
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
