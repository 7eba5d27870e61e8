//! `saggar._saggar`: the extension module of the `saggar` Python package, ONNX Runtime's Python API
//! over saggar sessions.
//!
//! # Design
//!
//! The classes keep ONNX Runtime's names and behaviour so inference code written for
//! `onnxruntime` runs with only its import changed: `InferenceSession` (`session.rs`: `run`,
//! `get_inputs`, `get_outputs`, `get_modelmeta`, `get_providers`, `io_binding`),
//! `NodeArg` and `ModelMetadata` (`meta.rs`), `IOBinding` (`binding.rs`) and `OrtValue`
//! (`value.rs`), and the error classes of `errors.rs` under `saggar.Error`. `SessionOptions` and
//! `RunOptions` are plain Python classes (`saggar/_options.py`), read here by attribute
//! (`options.rs`).
//!
//! A session holds an `Arc<dyn Engine>` (`engine.rs`): a saggar-dispatch `Session` (or
//! `SessionGroup`) of a saggar-onnx `OnnxCompiler`, on the backend the provider names
//! (`providers.rs`). Everything below that trait is saggar's own code, generic over the backend; the
//! Python layer adds one virtual call per run.
//!
//! - `run` takes numpy arrays in place (`feeds.rs`: a non-contiguous array is copied once), checks
//!   the request (names, element types, ranks, then the session's shape and size checks through
//!   `Session::output_dims`) before it allocates the outputs, and runs `Session::run_into` with the
//!   GIL released: one session serves many Python threads at once.
//! - `io_binding` takes DLPack tensors (`dlpack.rs`): device tensors of the session's device are read
//!   and written in place through the dispatcher's direct-bind path (`binding_run.rs`), host arrays
//!   through `run_into`; outputs come back as `OrtValue`s that export DLPack capsules.
//! - Every saggar error becomes a `saggar.Error` subclass whose message names the input, the
//!   expected and the actual; a failed call leaves the session serving.
//!
//! # Linking
//! The crate is a `cdylib` (the extension module) and an `rlib` (for its unit tests). maturin sets
//! `PYO3_BUILD_EXTENSION_MODULE` for the wheel, so the wheel's library does not link libpython
//! (manylinux), while `cargo test` builds ordinary test binaries linked against it.

mod binding;
mod binding_run;
mod dlpack;
mod dtypes;
mod engine;
mod errors;
mod feeds;
mod meta;
mod options;
mod providers;
mod session;
mod value;

use pyo3::prelude::*;

/// The providers with a device here, by ONNX Runtime's names, GPUs first, `CPUExecutionProvider`
/// last.
#[pyfunction]
fn get_available_providers() -> Vec<&'static str> {
    providers::available(&providers::device_count)
}

/// Every provider name saggar maps (`CUDAExecutionProvider`, `ROCMExecutionProvider`,
/// `MIGraphXExecutionProvider`, `CPUExecutionProvider`).
#[pyfunction]
fn get_all_providers() -> Vec<&'static str> {
    providers::ALL.to_vec()
}

/// `"GPU"` when a GPU provider has a device here, else `"CPU"` (ONNX Runtime's `get_device`).
#[pyfunction]
fn get_device() -> &'static str {
    if get_available_providers().len() > 1 { "GPU" } else { "CPU" }
}

#[pymodule]
fn _saggar(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    m.add_class::<session::InferenceSession>()?;
    m.add_class::<meta::NodeArg>()?;
    m.add_class::<meta::ModelMetadata>()?;
    m.add_class::<binding::IOBinding>()?;
    m.add_class::<value::OrtValue>()?;
    m.add_function(wrap_pyfunction!(get_available_providers, m)?)?;
    m.add_function(wrap_pyfunction!(get_all_providers, m)?)?;
    m.add_function(wrap_pyfunction!(get_device, m)?)?;
    Ok(())
}
