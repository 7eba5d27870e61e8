//! An ONNX model's input tensors: read from ONNX `TensorProto` files (`--load-inputs`,
//! `--check-outputs`), generated per batch (f32 uniform in [-1, 1), integers 0 or 1, so every index
//! input is in range, booleans alternating; `--shapes` fixing symbolic dimensions besides the batch),
//! and the output shapes they imply.

use std::collections::HashMap;
use std::path::Path;

use saggar_onnx::{OnnxModel, Tensor, TensorData, read_tensor_pb};
use saggar_shape::{DType, TensorSpec};

use crate::cli::ShapeArg;
use crate::error::{CliError, Result};

/// Reads the `.pb` tensors of `dir` for `specs`: `<prefix>_N.pb` by position, or else `NAME.pb`.
pub fn read_tensors(dir: &Path, specs: &[TensorSpec], prefix: &str, flag: &str) -> Result<Vec<Tensor>> {
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
pub fn batch_of(model: &OnnxModel, inputs: &[Tensor]) -> u64 {
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

/// The input dimensions of `batch` rows: fixed extents as declared, the batch symbol `batch`,
/// other symbols from `--shapes`, else `other_symbols` (or a usage error naming the flag when it is
/// `None`).
pub fn input_dims(
    model: &OnnxModel,
    batch: u64,
    shapes: &[ShapeArg],
    other_symbols: Option<u64>,
) -> Result<Vec<Vec<usize>>> {
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
            spec.dims()
                .iter()
                .enumerate()
                .map(|(axis, d)| match (d.as_fixed(), d.symbol()) {
                    (Some(v), _) => Ok(v as usize),
                    (None, s) if s.is_some() && s == layout.symbol() => Ok(batch as usize),
                    (None, _) if given.is_some() => Ok(given.map_or(1, |g| g.dims[axis]) as usize),
                    (None, s) => other_symbols.map(|v| v as usize).ok_or_else(|| {
                        CliError::usage(
                            format!(
                                "input `{}` has the symbolic dimension `{}` besides the batch",
                                spec.name(),
                                s.unwrap_or("?")
                            ),
                            "give its shape with --shapes NAME:DIMS (such as input_ids:1x128) or the inputs with --load-inputs DIR",
                        )
                    }),
                })
                .collect()
        })
        .collect()
}

/// Generated inputs for `batch` rows (see the module docs), or a usage error for a symbolic
/// dimension other than the batch.
pub fn generate(model: &OnnxModel, batch: u64, seed: u64, shapes: &[ShapeArg]) -> Result<Vec<Tensor>> {
    let all_dims = input_dims(model, batch, shapes, None)?;
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
        .zip(all_dims)
        .map(|(spec, dims)| {
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
                        .map_err(|e| {
                        CliError::failure(format!("generating `{}`: {e}", spec.name()), "this is a bug in saggar")
                    })?;
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

/// The output shapes for `inputs` from the model's declared output dimensions, each symbol taken
/// from the inputs; `None` when an output has a symbol no input carries.
pub fn declared_output_dims(model: &OnnxModel, inputs: &[Tensor]) -> Option<Vec<Vec<u64>>> {
    let mut symbols: HashMap<&str, u64> = HashMap::new();
    for (spec, tensor) in model.inputs().iter().zip(inputs) {
        for (d, &extent) in spec.dims().iter().zip(tensor.dims()) {
            if let Some(symbol) = d.symbol() {
                symbols.insert(symbol, extent as u64);
            }
        }
    }
    model
        .outputs()
        .iter()
        .map(|spec| spec.dims().iter().map(|d| d.as_fixed().or_else(|| symbols.get(d.symbol()?).copied())).collect())
        .collect()
}

/// Most data sets `--calibration-inputs` reads.
pub const MAX_DATA_SETS: usize = 64;

/// The data sets under `dir`: its own `input_N.pb` (or `NAME.pb`) files as one set, or each of its
/// folders (sorted by name, at most [`MAX_DATA_SETS`]) as one.
pub fn read_data_sets(dir: &Path, specs: &[TensorSpec], flag: &str) -> Result<Vec<Vec<Tensor>>> {
    let direct = dir.join("input_0.pb").is_file()
        || specs.first().is_some_and(|s| dir.join(format!("{}.pb", s.name())).is_file());
    if direct || !dir.is_dir() {
        return Ok(vec![read_tensors(dir, specs, "input", flag)?]);
    }
    let listing = std::fs::read_dir(dir)
        .map_err(|e| CliError::usage(format!("{flag} {}: {e}", dir.display()), "give a readable folder"))?;
    let mut sets: Vec<std::path::PathBuf> =
        listing.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_dir()).collect();
    sets.sort();
    if sets.is_empty() || sets.len() > MAX_DATA_SETS {
        return Err(CliError::usage(
            format!("{flag} {}: {} data-set folders and no input_0.pb", dir.display(), sets.len()),
            format!(
                "give a folder of input_N.pb files, or of 1 to {MAX_DATA_SETS} data-set folders (test_data_set_0, ...)"
            ),
        ));
    }
    sets.iter().map(|d| read_tensors(d, specs, "input", flag)).collect()
}
