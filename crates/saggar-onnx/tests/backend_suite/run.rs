//! Runs one backend test through a real `Session` (import, compile, run-context arenas, the standard
//! run path) and compares every output with the ONNX runner's rule.

use std::path::Path;
use std::sync::Arc;

use saggar_device::Backend;
use saggar_dispatch::{BucketSpec, HostTensor, Session, SessionConfig};
use saggar_onnx::tensor::Wide;
use saggar_onnx::{OnnxCompiler, OnnxError, OnnxModel, OnnxOptions, Tensor, read_tensor_pb};
use saggar_shape::DType;

use crate::applicable::data_set_dirs;

/// The ONNX backend runner's tolerances (`onnx.backend.test.runner`: rtol 1e-3, atol 1e-7).
pub const RTOL: f64 = 1e-3;
/// See [`RTOL`].
pub const ATOL: f64 = 1e-7;

/// Largest program (scratch or one tensor) a test may compile: the size guard at run time (the
/// light VGG-19 makes its 548 MB of weights at run time).
const MAX_PROGRAM_BYTES: u64 = 1 << 30;

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
    /// The model as shipped, every input fed at run time, through one program.
    Direct,
    /// The model's shapes depend on the values of some inputs (a Reshape `shape`, Slice `starts`, a
    /// reduction's `axes` fed as graph inputs): the session kept a program per shape and values
    /// (`ModelSpec::value_inputs`), every input still fed at run time.
    ValueInputs,
    /// Some extents depend on values the model computes (a NonZero's count): the session ran it as a
    /// chain of segments, the computed counts read back between them.
    Segments,
}

/// Imports the test's model, opens a session on a device from `open` and runs every data set
/// through it, every input fed.
pub fn run_test<B: Backend>(dir: &Path, open: &dyn Fn() -> Result<B::Device, String>) -> Result<Mode, String> {
    let model = OnnxModel::load(dir.join("model.onnx")).map_err(|e| format!("import: {e}"))?;
    let options = OnnxOptions::default().with_max_program_bytes(MAX_PROGRAM_BYTES);
    let compiler = Arc::new(OnnxCompiler::new(model.clone(), options));
    let keyed = !compiler.value_inputs().is_empty();
    let session = open_session::<B>(compiler, open()?)?;
    let mode = match (session.is_segmented(), keyed) {
        (true, _) => Mode::Segments,
        (false, true) => Mode::ValueInputs,
        (false, false) => Mode::Direct,
    };
    for set in data_set_dirs(dir)? {
        let mut inputs = read_all(&set, "input")?;
        if inputs.is_empty() {
            inputs = zero_inputs(&model)?;
        }
        run_set(&session, &model, &set, inputs)?;
    }
    Ok(mode)
}

/// Zeros of each input's declared shape, for a data set without inputs (the `light` models: their
/// weights are constants, their outputs do not depend on the input).
fn zero_inputs(model: &OnnxModel) -> Result<Vec<Tensor>, String> {
    model
        .inputs()
        .iter()
        .map(|spec| {
            let dims = spec
                .dims()
                .iter()
                .map(|d| d.as_fixed().map(|v| v as usize))
                .collect::<Option<Vec<usize>>>()
                .ok_or_else(|| format!("the data set has no input `{}` and its shape is symbolic", spec.name()))?;
            Tensor::zeros(spec.dtype(), dims).map_err(|e| format!("a zero input `{}`: {e}", spec.name()))
        })
        .collect()
}

/// Marks an error that is the GPU backend's typed refusal of an op ([`OnnxError::UnsupportedOnBackend`]).
pub const REFUSED: &str = "refused: ";

/// `REFUSED` and `not lowered on <backend>: <op>` when `e` (or an error it wraps) is the typed
/// refusal of an op by the backend; otherwise `what: e`.
fn describe(what: &str, e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(OnnxError::UnsupportedOnBackend { backend, op, .. }) = c.downcast_ref::<OnnxError>() {
            return format!("{REFUSED}not lowered on {backend:?}: {op}");
        }
        cause = c.source();
    }
    format!("{what}: {e}")
}

fn open_session<B: Backend>(
    compiler: Arc<OnnxCompiler>,
    device: B::Device,
) -> Result<Session<B, OnnxCompiler>, String> {
    let config = SessionConfig::builder()
        .buckets(BucketSpec::PowersOfTwo { max: 4 })
        .build()
        .map_err(|e| format!("session config: {e}"))?;
    Session::new(device, compiler, config, &|_| {}).map_err(|e| describe("session", &e))
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
    let outputs = session.run(&host).map_err(|e| describe(&format!("{set_name}: run"), &e))?;
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
/// (f32, f64, f16, bf16, compared as f64) within `ATOL + RTOL * |want|` (NaN equals NaN, infinities
/// equal themselves); others exactly.
pub fn compare(got: &Tensor, want: &Tensor) -> Result<(), String> {
    if got.dtype() != want.dtype() {
        return Err(format!("element type {}, expected {}", got.dtype(), want.dtype()));
    }
    if got.dims() != want.dims() {
        return Err(format!("shape {:?}, expected {:?}", got.dims(), want.dims()));
    }
    let wides = |t: &Tensor| {
        let mut v = Vec::with_capacity(t.len());
        saggar_onnx::tensor::for_each_wide(t.data().as_ref(), |_, w| v.push(w));
        v
    };
    let (g, w) = (wides(got), wides(want));
    let float = matches!(want.dtype(), DType::F32 | DType::F64 | DType::F16 | DType::BF16);
    let close = |a: Wide, b: Wide| {
        let (a, b) = (a.to_f64(), b.to_f64());
        (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= ATOL + RTOL * b.abs()
    };
    let bad: Vec<usize> = (0..w.len()).filter(|&i| if float { !close(g[i], w[i]) } else { g[i] != w[i] }).collect();
    match bad.first() {
        None => Ok(()),
        Some(&i) => {
            Err(format!("{} of {} elements differ; first at {i}: {:?} vs {:?}", bad.len(), want.len(), g[i], w[i]))
        }
    }
}
