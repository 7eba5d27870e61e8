//! Runs one backend test through a real `Session` (import, compile, run-context arenas, the standard
//! run path) and compares every output with the ONNX runner's rule.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use prost::Message as _;

use saggar_device::Backend;
use saggar_dispatch::{BucketSpec, HostTensor, Session, SessionConfig};
use saggar_onnx::proto::ModelProto;
use saggar_onnx::tensor_pb::tensor_to_proto;
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData, read_tensor_pb};
use saggar_shape::DType;

use crate::applicable::data_set_dirs;

/// The ONNX backend runner's tolerances (`onnx.backend.test.runner`: rtol 1e-3, atol 1e-7).
pub const RTOL: f64 = 1e-3;
/// See [`RTOL`].
pub const ATOL: f64 = 1e-7;

/// Largest program (scratch or one tensor) a test may compile: the size guard at run time.
const MAX_PROGRAM_BYTES: u64 = 256 << 20;

/// Reads `prefix_0.pb`, `prefix_1.pb`, ... of a data set.
fn read_all(set: &Path, prefix: &str) -> Result<Vec<Tensor>, String> {
    (0..)
        .map(|k| set.join(format!("{prefix}_{k}.pb")))
        .take_while(|p| p.exists())
        .map(|p| read_tensor_pb(&p).map(|t| t.tensor).map_err(|e| format!("reading {}: {e}", p.display())))
        .collect()
}

/// How a passing test was run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The model as shipped, every input fed at run time.
    Direct,
    /// The model's shapes depend on the values of some inputs (a Reshape `shape`, Slice `starts`, a
    /// reduction's `axes` fed as graph inputs): a compiled program's shapes cannot depend on run-time
    /// data, so each data set's integer and scalar inputs were bound as initializers and the rest fed.
    ShapeInputsBound,
}

/// Whether `error` is the refusal of a shape that depends on run-time data.
fn is_data_dependent(error: &str) -> bool {
    error.contains("depends on run-time data") || error.contains("must be a constant")
}

/// Imports the test's model, opens a session on a device from `open` and runs every data set; when
/// the model's shapes depend on input values, runs each data set again with those inputs bound.
pub fn run_test<B: Backend>(dir: &Path, open: &dyn Fn() -> Result<B::Device, String>) -> Result<Mode, String> {
    let sets = data_set_dirs(dir)?;
    let direct = (|| -> Result<Mode, String> {
        let model = OnnxModel::load(dir.join("model.onnx")).map_err(|e| format!("import: {e}"))?;
        let session = open_session::<B>(&model, open()?)?;
        for set in &sets {
            run_set(&session, &model, set, read_all(set, "input")?)?;
        }
        Ok(Mode::Direct)
    })();
    match direct {
        Err(e) if is_data_dependent(&e) => {
            let bytes = std::fs::read(dir.join("model.onnx")).map_err(|e| format!("model.onnx: {e}"))?;
            for set in &sets {
                let (model, fed) = bind_shape_inputs(&bytes, read_all(set, "input")?)?;
                let session = open_session::<B>(&model, open()?)?;
                run_set(&session, &model, set, fed)?;
            }
            Ok(Mode::ShapeInputsBound)
        }
        other => other,
    }
}

fn open_session<B: Backend>(model: &OnnxModel, device: B::Device) -> Result<Session<B, OnnxCompiler>, String> {
    let options = OnnxOptions::default().with_max_program_bytes(MAX_PROGRAM_BYTES);
    let compiler = Arc::new(OnnxCompiler::new(model.clone(), options));
    let config = SessionConfig::builder()
        .buckets(BucketSpec::PowersOfTwo { max: 4 })
        .build()
        .map_err(|e| format!("session config: {e}"))?;
    Session::new(device, compiler, config, &|_| {}).map_err(|e| format!("session: {e}"))
}

/// The model with every i64 or 0-D input of this data set made an initializer, and the inputs still
/// fed.
fn bind_shape_inputs(bytes: &[u8], inputs: Vec<Tensor>) -> Result<(OnnxModel, Vec<Tensor>), String> {
    let mut proto = ModelProto::decode(bytes).map_err(|e| format!("model.onnx: {e}"))?;
    let graph = proto.graph.as_mut().ok_or("model.onnx has no graph")?;
    let initialised: HashSet<String> = graph.initializer.iter().map(|t| t.name.clone()).collect();
    let declared: Vec<_> =
        std::mem::take(&mut graph.input).into_iter().filter(|i| !initialised.contains(&i.name)).collect();
    if declared.len() != inputs.len() {
        return Err(format!("{} inputs given, the model declares {}", inputs.len(), declared.len()));
    }
    let mut fed = Vec::new();
    for (info, t) in declared.into_iter().zip(inputs) {
        if t.dtype() == DType::I64 || t.dims().is_empty() {
            graph.initializer.push(tensor_to_proto(&info.name, &t));
        } else {
            graph.input.push(info);
            fed.push(t);
        }
    }
    let model = OnnxModel::from_bytes(&proto.encode_to_vec(), "model", &ImportLimits::default())
        .map_err(|e| format!("import (shape inputs bound): {e}"))?;
    Ok((model, fed))
}

/// Runs one data set through `session` and compares the outputs.
fn run_set<B: Backend>(
    session: &Session<B, OnnxCompiler>,
    model: &OnnxModel,
    set: &Path,
    inputs: Vec<Tensor>,
) -> Result<(), String> {
    let set_name = set.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let expected = read_all(set, "output")?;
    if inputs.len() != model.inputs().len() {
        return Err(format!("{set_name}: {} inputs, the model takes {}", inputs.len(), model.inputs().len()));
    }
    let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
    // Element-aligned host memory (8-byte words), also for empty tensors: sessions check alignment.
    let words: Vec<(Vec<u64>, usize)> = inputs
        .iter()
        .map(|t| {
            let bytes = t.to_le_bytes();
            let mut words = vec![0u64; bytes.len().div_ceil(8).max(1)];
            bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(&bytes);
            (words, bytes.len())
        })
        .collect();
    let host: Vec<HostTensor<'_>> = model
        .inputs()
        .iter()
        .zip(&inputs)
        .zip(&words)
        .enumerate()
        .map(|(k, ((spec, t), (w, n)))| HostTensor {
            name: spec.name(),
            dtype: t.dtype(),
            dims: &dims[k],
            data: &bytemuck::cast_slice::<u64, u8>(w)[..*n],
        })
        .collect();
    let outputs = session.run(&host).map_err(|e| format!("{set_name}: run: {e}"))?;
    if outputs.len() != expected.len() {
        return Err(format!("{set_name}: {} outputs, {} expected", outputs.len(), expected.len()));
    }
    for (k, (got, want)) in outputs.iter().zip(&expected).enumerate() {
        let dims = got.dims.iter().map(|&d| d as usize).collect();
        let got =
            Tensor::from_le_bytes(got.dtype, dims, &got.data).map_err(|e| format!("{set_name}: output {k}: {e}"))?;
        compare(&got, want).map_err(|e| format!("{set_name}: output {k} (`{}`): {e}", model.outputs()[k].name()))?;
    }
    Ok(())
}

/// `Ok` when `got` equals `want` under the ONNX runner's rule: same element type and shape; floats
/// within `ATOL + RTOL * |want|` (NaN equals NaN, infinities equal themselves); others exactly.
pub fn compare(got: &Tensor, want: &Tensor) -> Result<(), String> {
    if got.dtype() != want.dtype() {
        return Err(format!("element type {}, expected {}", got.dtype(), want.dtype()));
    }
    if got.dims() != want.dims() {
        return Err(format!("shape {:?}, expected {:?}", got.dims(), want.dims()));
    }
    let mismatches = |at: Option<usize>, n: usize, show: &dyn Fn(usize) -> String| match at {
        None => Ok(()),
        Some(i) => Err(format!("{n} of {} elements differ; first at {i}: {}", want.len(), show(i))),
    };
    match (got.data(), want.data()) {
        (TensorData::F32(g), TensorData::F32(w)) => {
            let close = |a: f32, b: f32| {
                let (a, b) = (f64::from(a), f64::from(b));
                (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= ATOL + RTOL * b.abs()
            };
            let bad: Vec<usize> = (0..w.len()).filter(|&i| !close(g[i], w[i])).collect();
            mismatches(bad.first().copied(), bad.len(), &|i| format!("{} vs {}", g[i], w[i]))
        }
        (TensorData::I64(g), TensorData::I64(w)) => exact(g, w, &mismatches),
        (TensorData::I32(g), TensorData::I32(w)) => exact(g, w, &mismatches),
        (TensorData::Bool(g), TensorData::Bool(w)) => exact(g, w, &mismatches),
        (g, w) => Err(format!("element types {:?} and {:?}", g.dtype(), w.dtype())),
    }
}

type Mismatches<'a> = dyn Fn(Option<usize>, usize, &dyn Fn(usize) -> String) -> Result<(), String> + 'a;

fn exact<T: PartialEq + std::fmt::Debug>(g: &[T], w: &[T], mismatches: &Mismatches<'_>) -> Result<(), String> {
    let bad: Vec<usize> = (0..w.len()).filter(|&i| g[i] != w[i]).collect();
    mismatches(bad.first().copied(), bad.len(), &|i| format!("{:?} vs {:?}", g[i], w[i]))
}
