//! ONNX models on the command line: `--onnx FILE` for `saggar perf`, `saggar warmup` and
//! `saggar cache key`, with `--load-inputs DIR` (ONNX `TensorProto` files `input_N.pb` or
//! `NAME.pb`) and `--check-outputs DIR` (`output_N.pb`, compared within `--rtol`/`--atol`).
//!
//! A model is imported with saggar-onnx ([`OnnxModel::load`]) and served through a `Session` of its
//! [`OnnxCompiler`] exactly as the built-in families are. Without `--load-inputs`, `saggar perf`
//! generates inputs per trace batch (f32 uniform in [-1, 1), integers 0 or 1, so every index input is
//! in range, booleans alternating); `--verify` compares sampled requests with the model's eager
//! evaluation ([`OnnxModel::run_once`]).

mod check;
mod perf;
mod profile;

use std::path::Path;
use std::sync::Arc;

use saggar_dispatch::ProgramCompiler;
use saggar_onnx::{
    AttentionKernel, OnnxCompiler, OnnxError, OnnxModel, OnnxOptions, Tensor, TensorData, read_tensor_pb,
};
use saggar_shape::{DType, TensorSpec};

pub use check::Check;
pub use perf::perf;
pub use profile::ProfileReport;

use crate::cli::{AttentionArg, ModelArgs, ShapeArg};
use crate::error::{CliError, Result};

/// An imported model with its compiler.
#[derive(Debug)]
pub struct LoadedOnnx {
    /// The compiler (holds the model and its constants).
    pub compiler: Arc<OnnxCompiler>,
    /// The file, for reports.
    pub source: String,
}

impl LoadedOnnx {
    /// The imported model.
    pub fn model(&self) -> &OnnxModel {
        self.compiler.onnx_model()
    }
}

/// Refuses `--attention`, `--blas-tune` and `--blas-workspace` for a model that is not `--onnx`
/// (they set the ONNX compiler's options).
pub fn reject_onnx_options(args: &ModelArgs) -> Result<()> {
    let flag = if args.attention != AttentionArg::Auto {
        "--attention"
    } else if args.blas_tune != 1 {
        "--blas-tune"
    } else if args.blas_workspace != crate::cli::DEFAULT_BLAS_WORKSPACE_MIB {
        "--blas-workspace"
    } else {
        return Ok(());
    };
    Err(CliError::usage(
        format!("{flag} needs --onnx"),
        "the built-in models run saggar-models' reference kernels, which have no attention or BLAS-Lt steps",
    ))
}

/// The compiler options the model flags ask for (`--attention`, `--blas-tune`, `--blas-workspace`).
pub fn options(args: &ModelArgs) -> OnnxOptions {
    let attention = match args.attention {
        AttentionArg::Auto => AttentionKernel::Auto,
        AttentionArg::Rows => AttentionKernel::Rows,
        AttentionArg::Tiled => AttentionKernel::Tiled,
    };
    OnnxOptions::default()
        .with_attention(attention)
        .with_blas_tuning(args.blas_tune as usize)
        .with_blas_workspace((args.blas_workspace << 20) as usize)
}

/// Imports `path` for a compiler with `options`. A missing file, one that is not an ONNX model, or a
/// model outside the declared op set is a usage error (exit 2) naming the file.
pub fn load(path: &Path, options: OnnxOptions) -> Result<LoadedOnnx> {
    if !path.is_file() {
        return Err(CliError::usage(
            format!("--onnx {}: no such file", path.display()),
            "give the path of an ONNX model file (model.onnx)",
        ));
    }
    let model = OnnxModel::load(path).map_err(|e| import_error(path, &e))?;
    Ok(LoadedOnnx { compiler: Arc::new(OnnxCompiler::new(model, options)), source: path.display().to_string() })
}

fn import_error(path: &Path, error: &OnnxError) -> CliError {
    let hint = match error {
        OnnxError::Decode { .. } => {
            "the file is not an ONNX model (a serialized ModelProto); export one with torch.onnx.export or check the path"
        }
        OnnxError::UnsupportedOp { .. } | OnnxError::Node { .. } => {
            "the model uses an op or attribute outside saggar-onnx's declared op set (docs/onnx.md lists it)"
        }
        _ => "check that the file is a complete ONNX model (with its external data files next to it)",
    };
    CliError::usage(format!("--onnx {}: {error}", path.display()), hint)
}

/// Reads the `.pb` tensors of `dir` for `specs`: `<prefix>_N.pb` by position, or else `NAME.pb`.
pub(super) fn read_tensors(dir: &Path, specs: &[TensorSpec], prefix: &str, flag: &str) -> Result<Vec<Tensor>> {
    if !dir.is_dir() {
        return Err(CliError::usage(
            format!("{flag} {}: no such folder", dir.display()),
            format!("give a folder holding {prefix}_0.pb, {prefix}_1.pb, ... (ONNX TensorProto files)"),
        ));
    }
    specs
        .iter()
        .enumerate()
        .map(|(n, spec)| {
            let by_index = dir.join(format!("{prefix}_{n}.pb"));
            let by_name = dir.join(format!("{}.pb", spec.name()));
            let path = if by_index.is_file() { by_index } else { by_name };
            if !path.is_file() {
                return Err(CliError::usage(
                    format!("{flag} {}: neither {prefix}_{n}.pb nor {}.pb is there", dir.display(), spec.name()),
                    format!("write one TensorProto file per model {prefix} (see the ONNX backend test data layout)"),
                ));
            }
            let tensor = read_tensor_pb(&path)
                .map_err(|e| {
                    CliError::usage(
                        format!("{flag} {}: {e}", path.display()),
                        "each file must be one serialized ONNX TensorProto (onnx.numpy_helper.from_array(...).SerializeToString())",
                    )
                })?
                .tensor;
            if tensor.dtype() != spec.dtype() {
                return Err(CliError::usage(
                    format!("{flag} {}: {} tensor, the model's `{}` is {}", path.display(), tensor.dtype(), spec.name(), spec.dtype()),
                    "write the tensor with the element type the model declares",
                ));
            }
            Ok(tensor)
        })
        .collect()
}

/// The batch of loaded inputs: the extent of the model's batch axis (1 for a static model).
pub(super) fn batch_of(model: &OnnxModel, inputs: &[Tensor]) -> u64 {
    let layout = model.batch_layout();
    let symbol = layout.symbol();
    model
        .inputs()
        .iter()
        .zip(inputs)
        .find_map(|(spec, t)| {
            let axis = spec.dims().iter().position(|d| d.symbol().is_some() && d.symbol() == symbol)?;
            t.dims().get(axis).map(|&d| d as u64)
        })
        .unwrap_or(1)
}

/// Generated inputs for `batch` rows (see the module docs), or a usage error for a symbolic
/// dimension other than the batch.
pub(super) fn generate(model: &OnnxModel, batch: u64, seed: u64, shapes: &[ShapeArg]) -> Result<Vec<Tensor>> {
    for shape in shapes {
        if !model.inputs().iter().any(|spec| spec.name() == shape.name) {
            let names: Vec<&str> = model.inputs().iter().map(|s| s.name()).collect();
            return Err(CliError::usage(
                format!("--shapes {}: the model has no input `{}`", shape.name, shape.name),
                format!("the model's inputs are {}", names.join(", ")),
            ));
        }
    }
    let layout = model.batch_layout();
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    model
        .inputs()
        .iter()
        .map(|spec| {
            let given = shapes.iter().find(|s| s.name == spec.name());
            if let Some(given) = given
                && given.dims.len() != spec.dims().len()
            {
                return Err(CliError::usage(
                    format!("--shapes {}: {} dimensions, the input has {}", given.name, given.dims.len(), spec.dims().len()),
                    "give one extent per dimension, such as input_ids:1x128",
                ));
            }
            let dims: Vec<usize> = spec
                .dims()
                .iter()
                .enumerate()
                .map(|(axis, d)| match (d.as_fixed(), d.symbol()) {
                    (Some(v), _) => Ok(v as usize),
                    (None, s) if s.is_some() && s == layout.symbol() => Ok(batch as usize),
                    (None, _) if given.is_some() => Ok(given.map_or(1, |g| g.dims[axis]) as usize),
                    (None, s) => Err(CliError::usage(
                        format!(
                            "input `{}` has the symbolic dimension `{}` besides the batch",
                            spec.name(),
                            s.unwrap_or("?")
                        ),
                        "give its shape with --shapes NAME:DIMS (such as input_ids:1x128) or the inputs with --load-inputs DIR",
                    )),
                })
                .collect::<Result<_>>()?;
            let n: usize = dims.iter().product();
            let data = match spec.dtype() {
                DType::F32 => {
                    TensorData::F32((0..n).map(|_| (next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0).collect())
                }
                DType::I64 => TensorData::I64((0..n).map(|_| (next() & 1) as i64).collect()),
                DType::I32 => TensorData::I32((0..n).map(|_| (next() & 1) as i32).collect()),
                DType::Bool => TensorData::Bool((0..n).map(|i| (i % 2) as u8).collect()),
                DType::F16 | DType::BF16 => {
                    let f32s = (0..n).map(|_| (next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0).collect();
                    let narrowed = Tensor::new(vec![n], TensorData::F32(f32s))
                        .and_then(|t| t.narrowed(spec.dtype()))
                        .map_err(|e| CliError::failure(format!("generating `{}`: {e}", spec.name()), "this is a bug in saggar"))?;
                    narrowed.data().clone()
                }
                other => {
                    return Err(CliError::usage(
                        format!("input `{}` is {other}, which saggar-onnx does not run", spec.name()),
                        "use a model whose inputs are f32, f16, bf16, i64, i32 or bool",
                    ));
                }
            };
            Tensor::new(dims, data)
                .map_err(|e| CliError::failure(format!("generating `{}`: {e}", spec.name()), "this is a bug in saggar"))
        })
        .collect()
}

/// The model's name, compiler identity, input specs and input dimensions a cache key is made of.
pub type KeyParts = (String, saggar_dispatch::CompilerIdentity, Vec<TensorSpec>, Vec<Vec<u64>>);

/// What `saggar cache key --onnx FILE --bucket B` keys on: the model's name, the compiler identity
/// (the same for every backend), the input specs and the input dimensions of bucket `B`, with every
/// other symbolic dimension taken from the inputs in `load_inputs`.
pub fn key_parts(args: &ModelArgs, path: &Path, bucket: u64, load_inputs: Option<&Path>) -> Result<KeyParts> {
    let loaded = load(path, options(args))?;
    let model = loaded.model();
    let identity = ProgramCompiler::<saggar_device::host::HostBackend>::identity(&*loaded.compiler);
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
