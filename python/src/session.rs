//! `InferenceSession`: ONNX Runtime's session class over a saggar session.
//!
//! Creation imports the model (a path or bytes), reads the options, chooses the provider (the
//! first of `providers` with a device here, CPU last) and creates the session with every bucket
//! precompiled, the GIL released throughout. A provider that refuses the model (an op its backend
//! does not lower) hands over to the next with a warning, as ONNX Runtime falls back to the CPU for
//! nodes its providers lack. `run` checks the feeds, allocates the outputs once the request is
//! known to be valid and within the session's limits, and runs with the GIL released, so one
//! session serves many Python threads at once.

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyUserWarning;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use saggar_dispatch::DispatchError;
use saggar_onnx::{ImportLimits, OnnxError, OnnxModel, Tensor};
use saggar_shape::Signature;

use crate::binding::IOBinding;
use crate::engine::{self, CreateError, Engine, Recipe};
use crate::errors::{self, dispatch, invalid};
use crate::feeds;
use crate::meta::{ModelMetadata, NodeArg};
use crate::options::{self, Settings};
use crate::providers::{self, Candidate};

/// Where the model comes from.
enum Source {
    Path(PathBuf),
    Bytes(Vec<u8>),
}

/// An ONNX model served by saggar, with ONNX Runtime's API.
///
/// # Thread safety
/// Shared by any number of Python threads: `run` releases the GIL and each run leases its own
/// run context in the dispatcher.
#[pyclass(module = "saggar", subclass)]
pub struct InferenceSession {
    engine: Arc<dyn Engine>,
    inputs: Vec<NodeArg>,
    outputs: Vec<NodeArg>,
    metadata: ModelMetadata,
    provider: Candidate,
    sess_options: Option<Py<PyAny>>,
}

impl std::fmt::Debug for InferenceSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InferenceSession")
            .field("provider", &self.provider.provider.name)
            .field("device_id", &self.provider.device_id)
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish_non_exhaustive()
    }
}

/// Shows a warning as ONNX Runtime does (a `UserWarning`).
fn warn(py: Python<'_>, message: &str) -> PyResult<()> {
    let message = CString::new(message.replace('\0', " ")).expect("no NUL left");
    PyErr::warn(py, &py.get_type::<PyUserWarning>(), &message, 1)
}

/// A provider asked for, by name, with the device its options name.
type Requested = (String, Option<usize>);

/// The `providers` argument (names, or `(name, options)` pairs) with `provider_options`, as names
/// with the device each asks for.
fn requested(
    providers: Option<&Bound<'_, PyAny>>,
    provider_options: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Vec<Requested>>> {
    let Some(providers) = providers else { return Ok(None) };
    let items: Vec<Bound<'_, PyAny>> =
        providers.extract().map_err(|_| invalid("providers must be a list of provider names"))?;
    let extra: Vec<Option<Bound<'_, PyDict>>> = match provider_options {
        Some(o) => o.extract().map_err(|_| invalid("provider_options must be a list of dicts, one per provider"))?,
        None => Vec::new(),
    };
    if !extra.is_empty() && extra.len() != items.len() {
        return Err(invalid(format!("{} providers but {} provider_options", items.len(), extra.len())));
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let (name, options): (String, Option<Bound<'_, PyDict>>) = match item.extract::<String>() {
            Ok(name) => (name, extra.get(i).cloned().flatten()),
            Err(_) => item.extract().map_err(|_| invalid("each provider is a name or a (name, options dict) pair"))?,
        };
        let device = match options.as_ref().map(|o| o.get_item("device_id")).transpose()?.flatten() {
            Some(v) => Some(match v.extract::<usize>() {
                Ok(n) => n,
                Err(_) => v
                    .extract::<String>()
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| invalid(format!("{name}: device_id must be a device ordinal, not {v}")))?,
            }),
            None => None,
        };
        out.push((name, device));
    }
    Ok(Some(out))
}

/// The model at `source`, with `constants` (name to array) bound as constant inputs.
fn load(source: Source, constants: Vec<(String, Tensor)>) -> Result<OnnxModel, OnnxError> {
    let model = match source {
        Source::Path(path) => OnnxModel::load(path)?,
        Source::Bytes(bytes) => OnnxModel::from_bytes(&bytes, "model", &ImportLimits::default())?,
    };
    if constants.is_empty() {
        return Ok(model);
    }
    let mut values = Vec::with_capacity(constants.len());
    for (name, tensor) in constants {
        let index = model.inputs().iter().position(|s| s.name() == name).ok_or_else(|| OnnxError::Request {
            model: model.name().to_string(),
            reason: format!("no input named `{name}` to bind as a constant"),
        })?;
        values.push((index, tensor));
    }
    model.with_constant_inputs(&values)
}

/// The `_constant_inputs` keyword (saggar.backend's): name to numpy array, as tensors.
fn constants(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<(String, Tensor)>> {
    let Some(dict) = kwargs.map(|k| k.get_item("_constant_inputs")).transpose()?.flatten() else {
        return Ok(Vec::new());
    };
    let dict = dict.cast_into::<PyDict>().map_err(|_| invalid("_constant_inputs must be a dict"))?;
    let mut out = Vec::new();
    for (name, value) in dict.iter() {
        let name: String = name.extract()?;
        let (array, dtype) = feeds::contiguous(&value, &name)?;
        let dims = numpy::PyUntypedArrayMethods::shape(&array).to_vec();
        let feed = feeds::Feed { index: 0, dtype, dims: Vec::new(), array };
        let tensor = Tensor::from_le_bytes(dtype, dims, feed.bytes()).map_err(|e| invalid(e.to_string()))?;
        out.push((name, tensor));
    }
    Ok(out)
}

/// Whether a session error is a backend refusing the model (the next provider may take it).
fn refused(error: &CreateError) -> bool {
    let CreateError::Session(e) = error else { return false };
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(OnnxError::UnsupportedOnBackend { .. } | OnnxError::Nodes { .. }) = c.downcast_ref::<OnnxError>() {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Creates the session on the first candidate that takes the model.
fn create(
    py: Python<'_>,
    model: OnnxModel,
    settings: &Settings,
    candidates: &[Candidate],
) -> PyResult<(Arc<dyn Engine>, Candidate)> {
    for (k, candidate) in candidates.iter().enumerate() {
        let recipe = Recipe { model: model.clone(), settings, device_id: candidate.device_id };
        match py.detach(|| engine::create(candidate.provider.kind, recipe)) {
            Ok(engine) => return Ok((engine, *candidate)),
            Err(e) if k + 1 < candidates.len() && refused(&e) => {
                if settings.warns() {
                    let CreateError::Session(session) = &e else { unreachable!("refused is a session error") };
                    warn(
                        py,
                        &format!(
                            "{} refused the model ({session}); the next provider is used",
                            candidate.provider.name
                        ),
                    )?;
                }
            }
            Err(CreateError::Settings(e)) => return Err(e),
            Err(CreateError::Session(e)) => return Err(dispatch(e)),
        }
    }
    unreachable!("the CPU provider ends every candidate list and either takes the model or raises")
}

#[pymethods]
impl InferenceSession {
    #[new]
    #[pyo3(signature = (path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs))]
    fn new(
        py: Python<'_>,
        path_or_bytes: &Bound<'_, PyAny>,
        sess_options: Option<&Bound<'_, PyAny>>,
        providers: Option<&Bound<'_, PyAny>>,
        provider_options: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<InferenceSession> {
        let settings = options::read(sess_options)?;
        let source = if let Ok(bytes) = path_or_bytes.cast::<PyBytes>() {
            Source::Bytes(bytes.as_bytes().to_vec())
        } else {
            let path = py.import("os")?.call_method1("fspath", (path_or_bytes,)).map_err(|_| {
                invalid(format!(
                    "path_or_bytes must be a model path or the model's bytes, not {}",
                    path_or_bytes.get_type()
                ))
            })?;
            Source::Path(path.extract::<PathBuf>().map_err(|_| invalid("the model path must be a str"))?)
        };
        let requested = requested(providers, provider_options)?;
        let (candidates, warnings) =
            providers::candidates(requested.as_deref(), settings.device_id, &providers::device_count)
                .map_err(invalid)?;
        if settings.warns() {
            for w in &warnings {
                warn(py, w)?;
            }
        }
        let constants = constants(kwargs)?;
        let model = py.detach(|| load(source, constants)).map_err(|e| errors::onnx(&e))?;
        let metadata = ModelMetadata::of(model.metadata());
        let (engine, provider) = create(py, model, &settings, &candidates)?;
        let signature = engine.signature();
        Ok(InferenceSession {
            inputs: signature.inputs().iter().map(NodeArg::of).collect(),
            outputs: signature.outputs().iter().map(NodeArg::of).collect(),
            engine,
            metadata,
            provider,
            sess_options: sess_options.map(|o| o.clone().unbind()),
        })
    }

    /// Runs the model: `output_names` (`None` or empty: every output) of the request in
    /// `input_feed` (input name to numpy array), as a list of numpy arrays.
    #[pyo3(signature = (output_names, input_feed, run_options=None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        output_names: Option<Vec<String>>,
        input_feed: &Bound<'py, PyDict>,
        run_options: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let _ = run_options;
        let signature = self.engine.signature();
        let wanted = wanted_outputs(signature, output_names)?;
        let mut feeds = feeds::collect(signature, input_feed)?;
        let dims = match self.engine.output_dims(&feeds::shapes(signature, &feeds)) {
            Ok(dims) => dims,
            // Extents the model computes: the session allocates, and the outputs are copied out.
            Err(DispatchError::ExtentsDependOnValues { .. }) => {
                feeds::settle_all(&mut feeds)?;
                let hosts = feeds::host_tensors(signature, &feeds);
                let engine = &self.engine;
                let outputs = py.detach(|| engine.run_owned(&hosts)).map_err(dispatch)?;
                let arrays = signature
                    .outputs()
                    .iter()
                    .zip(&outputs)
                    .map(|(spec, out)| {
                        let array = feeds::empty(py, spec, &out.dims)?;
                        // SAFETY: the array was just made by `empty`, C-contiguous with the output's
                        // element type and `out.dims` extents, and nothing else refers to it yet.
                        unsafe { feeds::bytes_mut(&array, spec.dtype().size_bytes()) }.copy_from_slice(&out.data);
                        Ok(array)
                    })
                    .collect::<PyResult<Vec<_>>>()?;
                return PyList::new(py, wanted.iter().map(|&o| &arrays[o]));
            }
            Err(e) => return Err(dispatch(e)),
        };
        feeds::settle_all(&mut feeds)?;
        let hosts = feeds::host_tensors(signature, &feeds);
        let arrays = signature
            .outputs()
            .iter()
            .zip(&dims)
            .map(|(spec, d)| feeds::empty(py, spec, d))
            .collect::<PyResult<Vec<_>>>()?;
        let mut buffers: Vec<&mut [u8]> = arrays
            .iter()
            .zip(signature.outputs())
            // SAFETY: each array was just made by `empty`, C-contiguous with the output's element
            // type, and no other reference to it exists until this function returns it.
            .map(|(a, spec)| unsafe { feeds::bytes_mut(a, spec.dtype().size_bytes()) })
            .collect();
        let engine = &self.engine;
        py.detach(|| engine.run_into(&hosts, &mut buffers)).map_err(dispatch)?;
        drop(buffers);
        PyList::new(py, wanted.iter().map(|&o| &arrays[o]))
    }

    /// The model's inputs (`name`, `shape`, `type`), in order.
    fn get_inputs(&self) -> Vec<NodeArg> {
        self.inputs.clone()
    }

    /// The model's outputs, in order.
    fn get_outputs(&self) -> Vec<NodeArg> {
        self.outputs.clone()
    }

    /// Initializers a feed may override: none (saggar folds initializers into its programs).
    fn get_overridable_initializers(&self) -> Vec<NodeArg> {
        Vec::new()
    }

    /// What the model file says about itself.
    fn get_modelmeta(&self) -> ModelMetadata {
        self.metadata.clone()
    }

    /// The provider in effect, by ONNX Runtime's name.
    fn get_providers(&self) -> Vec<&'static str> {
        vec![self.provider.provider.name]
    }

    /// The provider in effect with its options (`device_id`), as ONNX Runtime shows them.
    fn get_provider_options<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let options = PyDict::new(py);
        options.set_item("device_id", self.engine.device_id().to_string())?;
        let all = PyDict::new(py);
        all.set_item(self.provider.provider.name, options)?;
        Ok(all)
    }

    /// The options the session was made with (`None` when it was given none).
    fn get_session_options(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.sess_options.as_ref().map(|o| o.clone_ref(py))
    }

    /// A new binding of this session's inputs and outputs.
    fn io_binding(&self) -> IOBinding {
        IOBinding::new(self.engine.clone())
    }

    /// Runs the request `iobinding` holds; its outputs are then in `iobinding.get_outputs()`.
    #[pyo3(signature = (iobinding, run_options=None))]
    fn run_with_iobinding(
        &self,
        py: Python<'_>,
        iobinding: &Bound<'_, IOBinding>,
        run_options: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let _ = run_options;
        let mut binding = iobinding.borrow_mut();
        if !Arc::ptr_eq(&binding.engine, &self.engine) {
            return Err(invalid("the io_binding belongs to another session"));
        }
        binding.run(py)
    }

    /// ONNX Runtime's profiling is not kept: an empty file name.
    fn end_profiling(&self) -> &'static str {
        ""
    }

    /// saggar's batch buckets (empty for models served per shape).
    #[getter]
    fn buckets(&self) -> Vec<u64> {
        self.engine.buckets()
    }

    /// saggar's counters (requests, paths, graph captures and replays, compiles), summed over the
    /// session's devices.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        let all = self.engine.stats();
        let sum = |f: fn(&saggar_dispatch::StatsSnapshot) -> u64| all.iter().map(f).sum::<u64>();
        dict.set_item("requests", sum(|s| s.requests))?;
        dict.set_item("failed", sum(|s| s.failed))?;
        dict.set_item("ultra_fast", sum(|s| s.ultra_fast))?;
        dict.set_item("fast", sum(|s| s.fast))?;
        dict.set_item("standard", sum(|s| s.standard))?;
        dict.set_item("captures", sum(|s| s.captures))?;
        dict.set_item("replays", sum(|s| s.replays))?;
        dict.set_item("eager_runs", sum(|s| s.eager_runs))?;
        dict.set_item("compiles", sum(|s| s.compiles))?;
        Ok(dict)
    }

    /// Seconds per run of the same request through Rust's `Session::run_into` alone, timed over
    /// `iterations` runs after `warmup` (no Python in the loop): the baseline Python's overhead per
    /// `run` is measured against.
    #[pyo3(signature = (input_feed, iterations, warmup=100))]
    fn _rust_run_into_seconds(
        &self,
        py: Python<'_>,
        input_feed: &Bound<'_, PyDict>,
        iterations: u32,
        warmup: u32,
    ) -> PyResult<f64> {
        let signature = self.engine.signature();
        let mut feeds = feeds::collect(signature, input_feed)?;
        let dims = self.engine.output_dims(&feeds::shapes(signature, &feeds)).map_err(dispatch)?;
        feeds::settle_all(&mut feeds)?;
        let hosts = feeds::host_tensors(signature, &feeds);
        let mut owned: Vec<Vec<u64>> = signature
            .outputs()
            .iter()
            .zip(&dims)
            .map(|(spec, d)| vec![0u64; feeds_bytes(spec, d).div_ceil(8)])
            .collect();
        let lengths: Vec<usize> = signature.outputs().iter().zip(&dims).map(|(s, d)| feeds_bytes(s, d)).collect();
        let engine = &self.engine;
        py.detach(|| {
            let mut buffers: Vec<&mut [u8]> =
                owned.iter_mut().zip(&lengths).map(|(w, &n)| &mut bytemuck_bytes(w)[..n]).collect();
            for _ in 0..warmup {
                engine.run_into(&hosts, &mut buffers)?;
            }
            let started = std::time::Instant::now();
            for _ in 0..iterations {
                engine.run_into(&hosts, &mut buffers)?;
            }
            Ok(started.elapsed().as_secs_f64() / f64::from(iterations.max(1)))
        })
        .map_err(dispatch)
    }
}

fn feeds_bytes(spec: &saggar_shape::TensorSpec, dims: &[u64]) -> usize {
    saggar_shape::byte_size(dims, spec.dtype()).ok().and_then(|b| usize::try_from(b).ok()).unwrap_or(0)
}

/// The bytes of a word buffer (8-byte aligned, for outputs of any element type).
fn bytemuck_bytes(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64 words are initialised, u8 has no alignment requirement, and the slice borrows
    // `words` mutably for its whole life.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8) }
}

/// The output indices `output_names` asks for: every output for `None` or an empty list.
fn wanted_outputs(signature: &Signature, output_names: Option<Vec<String>>) -> PyResult<Vec<usize>> {
    let outputs = signature.outputs();
    match output_names {
        None => Ok((0..outputs.len()).collect()),
        Some(names) if names.is_empty() => Ok((0..outputs.len()).collect()),
        Some(names) => names
            .iter()
            .map(|name| {
                outputs.iter().position(|s| s.name() == name).ok_or_else(|| {
                    let all: Vec<&str> = outputs.iter().map(|s| s.name()).collect();
                    invalid(format!("the model has no output named '{name}'; its outputs are: {}", all.join(", ")))
                })
            })
            .collect(),
    }
}
