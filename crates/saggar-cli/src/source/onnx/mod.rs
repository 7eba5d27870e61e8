//! ONNX models on the command line: `--onnx FILE` for `saggar perf`, `saggar warmup` and
//! `saggar cache key`, with `--load-inputs DIR` (ONNX `TensorProto` files `input_N.pb` or
//! `NAME.pb`) and `--check-outputs DIR` (`output_N.pb`, compared within `--rtol`/`--atol`).
//!
//! A model is imported with saggar-onnx ([`OnnxModel::load`]) and served through a `Session` of its
//! [`OnnxCompiler`] exactly as the built-in families are. Without `--load-inputs`, `saggar perf`
//! generates inputs per trace batch ([`tensors::generate`]); `--verify` compares sampled requests
//! with the model's eager evaluation ([`OnnxModel::run_once`]).

pub mod tensors;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use saggar_device::Backend;
use saggar_device::host::HostBackend;
use saggar_dispatch::{BucketSpec, PaddedAxis, ProgramCompiler};
use saggar_onnx::{
    AttentionKernel, Calibration, ConvEngine, OnnxCompiler, OnnxError, OnnxModel, OnnxOptions, Precision, Tensor,
};
use saggar_shape::TensorSpec;

use self::tensors::{batch_of, declared_output_dims, generate, read_data_sets, read_tensors};
use super::check::{Check, compare, compare_with};
use super::inputs::{self, InputSets};
use super::profile::{self, ProfileReport};
use super::{KeptRun, ModelInfo, ModelSource, Trace, VERIFY_TOLERANCE, Verify};
use crate::cli::{AttentionArg, ConvArg, ModelArgs, PadAxisArg, PerfArgs, ShapeArg, TraceArgs};
use crate::error::{CliError, Result};
use crate::trace::DEFAULT_REQUESTS;

/// An imported model with its compiler, and what `saggar perf` asks of it besides the model.
#[derive(Debug)]
pub struct Onnx {
    /// The compiler (holds the model and its constants).
    pub compiler: Arc<OnnxCompiler>,
    info: ModelInfo,
    run: RunFlags,
}

/// The ONNX-only flags of `saggar perf`, with the files they name read.
#[derive(Debug, Default)]
struct RunFlags {
    /// `--shapes`.
    shapes: Vec<ShapeArg>,
    /// `--pad-axis`.
    pad_axis: Option<PadAxisArg>,
    /// `--load-inputs`: the folder and the tensors every request runs on.
    given: Option<(PathBuf, Vec<Tensor>)>,
    /// `--check-outputs` with `--rtol` and `--atol`.
    expected: Option<Expected>,
    /// `--dump-profile`.
    profile: Option<ProfileFlags>,
}

#[derive(Debug)]
struct Expected {
    dir: PathBuf,
    outputs: Vec<Tensor>,
    rtol: f64,
    atol: f64,
}

#[derive(Debug)]
struct ProfileFlags {
    /// `--dump-profile-batch`.
    batch: Option<u64>,
    /// `--iterations`.
    iterations: Option<u64>,
    /// `--seed`, for inputs of a batch the trace does not have.
    seed: u64,
}

impl Onnx {
    /// Imports `path` for a compiler with `options`. A missing file, one that is not an ONNX model,
    /// or a model outside the declared op set is a usage error (exit 2) naming the file.
    pub fn load(path: &Path, args: &ModelArgs) -> Result<Onnx> {
        let imported = Instant::now();
        if !path.is_file() {
            return Err(CliError::usage(
                format!("--onnx {}: no such file", path.display()),
                "give the path of an ONNX model file (model.onnx)",
            ));
        }
        let model = OnnxModel::load(path).map_err(|e| import_error(path, &e))?;
        let mut options = options(args);
        if let Some(dir) = &args.calibration_inputs {
            let sets = read_data_sets(dir, model.inputs(), "--calibration-inputs")?;
            options = options.with_calibration(Calibration::new(sets));
        }
        let compiler = Arc::new(OnnxCompiler::try_new(model, options).map_err(|e| {
            CliError::usage(
                format!("--onnx {}: {e}", path.display()),
                "fix --precision/--keep-fp32/--calibration-inputs: keep lists name op types or nodes of the model; int8 on an f32 model needs calibration data",
            )
        })?);
        let model = compiler.onnx_model();
        let info = ModelInfo {
            name: model.name().to_string(),
            origin: path.display().to_string(),
            inputs: model.inputs().len(),
            import_s: imported.elapsed().as_secs_f64(),
            reference: "the model's eager evaluation in strict f32",
            precision: compiler.options().precision.name(),
        };
        Ok(Onnx { compiler, info, run: RunFlags::default() })
    }

    /// The model `path` of `saggar perf`, with the files its flags name read.
    pub fn for_perf(args: &PerfArgs, path: &Path) -> Result<Onnx> {
        let mut onnx = Onnx::load(path, &args.model)?;
        let model = onnx.model();
        let given = match &args.load_inputs {
            Some(dir) => Some((dir.clone(), read_tensors(dir, model.inputs(), "input", "--load-inputs")?)),
            None => None,
        };
        let expected = match &args.check_outputs {
            Some(dir) => Some(Expected {
                dir: dir.clone(),
                outputs: read_tensors(dir, model.outputs(), "output", "--check-outputs")?,
                rtol: args.rtol,
                atol: args.atol,
            }),
            None => None,
        };
        if let (Some((_, inputs)), Some(batch)) = (&given, args.dump_profile_batch)
            && batch != batch_of(model, inputs)
        {
            return Err(CliError::usage(
                format!("--dump-profile-batch {batch}: the loaded inputs are batch {}", batch_of(model, inputs)),
                "leave --dump-profile-batch out with --load-inputs (the loaded inputs' batch is profiled)",
            ));
        }
        let profile = args.dump_profile.then_some(ProfileFlags {
            batch: args.dump_profile_batch,
            iterations: args.trace.requests,
            seed: args.trace.seed,
        });
        onnx.run = RunFlags { shapes: args.shapes.clone(), pad_axis: args.pad_axis.clone(), given, expected, profile };
        Ok(onnx)
    }

    /// The imported model.
    pub fn model(&self) -> &OnnxModel {
        self.compiler.onnx_model()
    }
}

impl ModelSource for Onnx {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn compiler<B: Backend>(&self) -> Arc<impl ProgramCompiler<B>> {
        self.compiler.clone()
    }

    fn padded_axis(&self) -> Option<PaddedAxis> {
        let axis = self.run.pad_axis.as_ref()?;
        Some(self.compiler.padded_axis(&axis.symbol, BucketSpec::List(axis.sizes.clone()), 0))
    }

    /// With `--load-inputs`, every request runs the loaded inputs: the trace is their batch, repeated.
    fn trace(&self, args: &TraceArgs) -> Result<Trace> {
        match &self.run.given {
            Some((dir, inputs)) => Ok(Trace {
                batches: vec![batch_of(self.model(), inputs); args.requests.unwrap_or(DEFAULT_REQUESTS) as usize],
                label: format!("inputs:{}", dir.display()),
            }),
            None => Trace::generated(args),
        }
    }

    fn inputs(&self, batches: &[u64], seed: u64) -> Result<InputSets> {
        let model = self.model();
        let mut sets = InputSets::new(model.inputs().to_vec());
        match &self.run.given {
            Some((_, tensors)) => {
                sets.add_tensors(batch_of(model, tensors), tensors, declared_output_dims(model, tensors));
            }
            None => {
                for &batch in batches {
                    let tensors = generate(model, batch, seed, &self.run.shapes)?;
                    sets.add_tensors(batch, &tensors, declared_output_dims(model, &tensors));
                }
            }
        }
        Ok(sets)
    }

    /// Compares by the same rule as the built-in families, |actual - expected| <= 1e-3 *
    /// max(1, |expected|), evaluating each input set eagerly once.
    fn verify(&self, inputs: &InputSets, kept: &[KeptRun<'_>]) -> Result<Verify> {
        let model = self.model();
        let names: Vec<&str> = model.outputs().iter().map(|s| s.name()).collect();
        let tolerance = verify_tolerance(self.compiler.options().precision);
        let mut verify = Verify { tolerance, ..Verify::default() };
        let mut eager: Vec<Option<Vec<Tensor>>> = vec![None; inputs.count()];
        for k in kept {
            if eager[k.set].is_none() {
                let reference = model.run_once(&inputs.tensors(k.set)?).map_err(|e| {
                    CliError::failure(
                        format!("eager evaluation of `{}`: {e}", model.name()),
                        "report this with the model file",
                    )
                })?;
                eager[k.set] = Some(reference);
            }
            let reference = eager[k.set].as_ref().expect("computed above");
            let outputs = inputs::tensors(model.outputs(), k.dims, k.outputs)?;
            let compared = compare_with(&names, &outputs, reference, &|e: f64| tolerance * e.abs().max(1.0));
            let max_rel_error = compared.iter().map(|c| c.max_rel_error).fold(0.0, f64::max);
            for (c, r) in compared.iter().zip(reference) {
                let scale = r.to_f32s().map_or(0.0, |v| v.iter().fold(0f64, |m, x| m.max(f64::from(x.abs()))));
                verify.add_accuracy(&c.name, c.max_abs_error, scale);
            }
            verify.add(
                compared.iter().map(|c| c.elements).sum(),
                compared.iter().map(|c| c.mismatches).sum(),
                max_rel_error,
            );
        }
        Ok(verify)
    }

    fn exports_inputs(&self) -> bool {
        true
    }

    /// The matmul steps' FLOPs of the program for the set's shapes (lowered again, nothing compiled).
    fn flops(&self, inputs: &InputSets, set: usize) -> Option<u64> {
        let dims: Vec<Vec<u64>> =
            inputs.tensors(set).ok()?.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
        Some(self.compiler.plan_summary(&dims, saggar_device::BackendKind::Host).ok()?.matmul_flops)
    }

    fn check(&self, first: &[Tensor]) -> Option<Check> {
        let expected = self.run.expected.as_ref()?;
        let names: Vec<&str> = self.model().outputs().iter().map(|s| s.name()).collect();
        let outputs = compare(&names, first, &expected.outputs, expected.rtol, expected.atol);
        Some(Check {
            dir: expected.dir.display().to_string(),
            rtol: expected.rtol,
            atol: expected.atol,
            max_abs_error: outputs.iter().map(|o| o.max_abs_error).fold(0.0, f64::max),
            max_rel_error: outputs.iter().map(|o| o.max_rel_error).fold(0.0, f64::max),
            passed: outputs.iter().all(|o| o.mismatches == 0),
            outputs,
        })
    }

    /// Profiles the batch `--dump-profile-batch` names, else the trace's first, on the inputs of
    /// its set (or inputs generated for it when the trace has no such batch).
    fn profile<B: Backend>(&self, ordinal: usize, inputs: &InputSets, trace: &[u64]) -> Result<Option<ProfileReport>> {
        let Some(flags) = &self.run.profile else { return Ok(None) };
        let batch = flags.batch.or(trace.first().copied()).unwrap_or(1);
        let tensors = match (0..inputs.count()).find(|&set| inputs.batch(set) == batch) {
            Some(set) => inputs.tensors(set)?,
            None => generate(self.model(), batch, flags.seed, &self.run.shapes)?,
        };
        Ok(Some(profile::run::<B>(&self.compiler, ordinal, batch, &tensors, flags.iterations)?))
    }
}

/// The `--verify` tolerance at `precision` (docs/precision.md): [`VERIFY_TOLERANCE`] in strict f32;
/// at reduced precisions, what rounding the products' inputs to TF32 (10 mantissa bits), f16 (10)
/// or bf16 (7) leaves after a deep network, relative to `max(1, |expected|)`.
pub fn verify_tolerance(precision: Precision) -> f64 {
    match precision {
        Precision::Fp32 => VERIFY_TOLERANCE,
        Precision::Tf32 | Precision::Fp16 => 3e-2,
        Precision::Bf16 | Precision::Int8 => 1.5e-1,
    }
}

/// The compiler options the model flags ask for (`--attention`, `--conv`, `--blas-tune`, `--blas-workspace`,
/// `--precision`, `--keep-fp32`).
pub fn options(args: &ModelArgs) -> OnnxOptions {
    let attention = match args.attention {
        AttentionArg::Auto => AttentionKernel::Auto,
        AttentionArg::Rows => AttentionKernel::Rows,
        AttentionArg::Tiled => AttentionKernel::Tiled,
    };
    let conv = match args.conv {
        ConvArg::Auto => ConvEngine::Auto,
        ConvArg::Nhwc => ConvEngine::Nhwc,
        ConvArg::Nchw => ConvEngine::Im2col,
        ConvArg::Direct => ConvEngine::Direct,
    };
    OnnxOptions::default()
        .with_attention(attention)
        .with_conv(conv)
        .with_blas_tuning(args.blas_tune as usize)
        .with_blas_workspace((args.blas_workspace << 20) as usize)
        .with_precision(args.precision)
        .with_keep_fp32(args.keep_fp32.iter().cloned())
}

fn import_error(path: &Path, error: &OnnxError) -> CliError {
    let hint = match error {
        OnnxError::Decode { .. } => {
            "the file is not an ONNX model (a serialized ModelProto); export one with torch.onnx.export or check the path"
        }
        OnnxError::UnsupportedOp { .. } | OnnxError::Node { .. } | OnnxError::Nodes { .. } => {
            "the model uses ops or attributes outside saggar-onnx's declared op set (docs/onnx.md lists it); `saggar check --onnx FILE` lists every such node per backend"
        }
        _ => "check that the file is a complete ONNX model (with its external data files next to it)",
    };
    CliError::usage(format!("--onnx {}: {error}", path.display()), hint)
}

/// The model's name, compiler identity, input specs and input dimensions a cache key is made of.
pub type KeyParts = (String, saggar_dispatch::CompilerIdentity, Vec<TensorSpec>, Vec<Vec<u64>>);

/// What `saggar cache key --onnx FILE --bucket B` keys on: the model's name, the compiler identity
/// (the same for every backend), the input specs and the input dimensions of bucket `B`, with every
/// other symbolic dimension taken from the inputs in `load_inputs`.
pub fn key_parts(args: &ModelArgs, path: &Path, bucket: u64, load_inputs: Option<&Path>) -> Result<KeyParts> {
    let loaded = Onnx::load(path, args)?;
    let model = loaded.model();
    let identity = ProgramCompiler::<HostBackend>::identity(&*loaded.compiler);
    let inputs = match load_inputs {
        Some(dir) => Some(read_tensors(dir, model.inputs(), "input", "--load-inputs")?),
        None => None,
    };
    let layout = model.batch_layout();
    let dims = model
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            spec.dims()
                .iter()
                .enumerate()
                .map(|(axis, d)| match (d.as_fixed(), d.symbol()) {
                    (Some(v), _) => Ok(v),
                    (None, s) if s.is_some() && s == layout.symbol() => Ok(bucket),
                    (None, s) => match inputs.as_ref().and_then(|t| t[i].dims().get(axis)) {
                        Some(&extent) => Ok(extent as u64),
                        None => Err(CliError::usage(
                            format!(
                                "--onnx {}: input `{}` has the symbolic dimension `{}` besides the batch",
                                path.display(),
                                spec.name(),
                                s.unwrap_or("?")
                            ),
                            "such models compile per input shape: give the inputs with --load-inputs DIR",
                        )),
                    },
                })
                .collect::<Result<Vec<u64>>>()
        })
        .collect::<Result<_>>()?;
    Ok((model.name().to_string(), identity, model.inputs().to_vec(), dims))
}
