//! `IOBinding`: inputs and outputs bound once and run many times
//! (`session.io_binding()`, `session.run_with_iobinding(binding)`), as in ONNX Runtime.
//!
//! `bind_input(name, tensor)` takes a numpy array (host memory) or any DLPack tensor (a torch or
//! cupy tensor on the session's device, or on the CPU); ONNX Runtime's long form
//! `bind_input(name, device_type, device_id, element_type, shape, buffer_ptr)` takes a raw device
//! pointer. A device tensor on another device than the session's is refused when it is bound,
//! naming both devices. Device tensors are read and written in place: the run goes through
//! saggar's device path (`Session::bind_device`, a graph with the caller's pointers baked in),
//! never through the host. The run itself is in `binding_run.rs`.

use std::sync::Arc;

use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyString;
use saggar_device::DevicePtr;
use saggar_shape::{DType, TensorSpec};

use crate::dlpack::{self, Imported, Place};
use crate::dtypes::onnx_type;
use crate::engine::{Bound as BoundRequest, DeviceMemory, Engine};
use crate::errors::invalid;
use crate::feeds::{self, spec_shape};
use crate::value::{OrtValue, Storage, device_place};

/// A bound input.
pub(crate) enum Input {
    /// A C-contiguous numpy array.
    Host(Py<PyUntypedArray>),
    /// Device memory of the session's device, read in place.
    Device { memory: Arc<DeviceMemory>, dims: Vec<u64> },
}

/// A bound output.
pub(crate) enum Output {
    /// A new numpy array each run (`bind_output(name)`, `bind_output(name, "cpu")`).
    HostNew,
    /// The caller's numpy array, written in place.
    Host(Py<PyUntypedArray>),
    /// Device memory saggar allocates (`bind_output(name, "cuda")`), reused run after run while no
    /// earlier result still holds it.
    DeviceNew,
    /// The caller's device memory, written in place.
    Device { memory: Arc<DeviceMemory>, dims: Vec<u64> },
}

/// A validated device request kept between runs, and what it was made for.
pub(crate) struct Cached {
    pub(crate) input_dims: Vec<Vec<u64>>,
    pub(crate) output_dims: Vec<Vec<u64>>,
    pub(crate) inputs: Vec<saggar_device::DeviceSlice>,
    pub(crate) outputs: Vec<saggar_device::DeviceSlice>,
    pub(crate) request: Box<dyn BoundRequest>,
}

/// Inputs and outputs bound to a session.
///
/// # Thread safety
/// One binding is used by one thread at a time (Python raises if another thread uses it during a
/// run); make one binding per thread, all on the same session.
#[pyclass(module = "saggar")]
pub struct IOBinding {
    pub(crate) engine: Arc<dyn Engine>,
    pub(crate) inputs: Vec<Option<Input>>,
    pub(crate) outputs: Vec<Option<Output>>,
    /// Output indices in the order they were bound (the order `get_outputs` returns).
    pub(crate) order: Vec<usize>,
    /// The last run's outputs, in `order`.
    pub(crate) results: Vec<Py<OrtValue>>,
    /// Device copies of host inputs, for runs on the device.
    pub(crate) staging: Vec<Option<Arc<DeviceMemory>>>,
    /// Device memory of outputs saggar allocates.
    pub(crate) out_memory: Vec<Option<Arc<DeviceMemory>>>,
    pub(crate) cached: Option<Cached>,
    /// How the last run bound its tensors.
    pub(crate) last_mode: Option<saggar_dispatch::BindingMode>,
}

impl std::fmt::Debug for IOBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IOBinding")
            .field("inputs_bound", &self.inputs.iter().filter(|x| x.is_some()).count())
            .field("outputs_bound", &self.order.len())
            .field("validated", &self.cached.is_some())
            .finish_non_exhaustive()
    }
}

impl IOBinding {
    pub(crate) fn new(engine: Arc<dyn Engine>) -> IOBinding {
        let (n_in, n_out) = (engine.signature().inputs().len(), engine.signature().outputs().len());
        IOBinding {
            engine,
            inputs: (0..n_in).map(|_| None).collect(),
            outputs: (0..n_out).map(|_| None).collect(),
            order: Vec::new(),
            results: Vec::new(),
            staging: vec![None; n_in],
            out_memory: vec![None; n_out],
            cached: None,
            last_mode: None,
        }
    }

    fn spec(&self, role: &str, name: &str) -> PyResult<(usize, TensorSpec)> {
        let signature = self.engine.signature();
        let (specs, index) = match role {
            "input" => (signature.inputs(), signature.input_index(name)),
            _ => (signature.outputs(), signature.outputs().iter().position(|s| s.name() == name)),
        };
        let index = index.ok_or_else(|| {
            let names: Vec<&str> = specs.iter().map(TensorSpec::name).collect();
            invalid(format!("the model has no {role} named '{name}'; its {role}s are: {}", names.join(", ")))
        })?;
        Ok((index, specs[index].clone()))
    }

    /// Checks that `place` is the session's device, for tensor `name`.
    fn check_place(&self, role: &str, name: &str, place: Place) -> PyResult<()> {
        let session = device_place(&*self.engine);
        let on_device = session.device_type != dlpack::KDL_CPU;
        let same = on_device
            && (place.device_type == session.device_type
                || (place.device_type == dlpack::KDL_CUDA_MANAGED && session.device_type == dlpack::KDL_CUDA))
            && place.device_id == session.device_id;
        if same || place.is_host() {
            return Ok(());
        }
        let runs_on = if on_device { session.to_string() } else { "the CPU (CPUExecutionProvider)".to_string() };
        Err(invalid(format!(
            "{role} '{name}' is on {place}, another device than this session's: the session runs on {runs_on}; move \
             the tensor there (tensor.to(...)) or make a session on its device"
        )))
    }

    /// A DLPack tensor `value` for `name`, checked: on the session's device (or the host), element
    /// type and rank of `spec`. Host tensors come back as numpy arrays (`numpy.from_dlpack`).
    fn take(&self, role: &str, name: &str, spec: &TensorSpec, value: &Bound<'_, PyAny>) -> PyResult<Taken> {
        if let Some(place) = dlpack::place_of(value)? {
            self.check_place(role, name, place)?;
            if place.is_host() {
                let array = value.py().import("numpy")?.call_method1("from_dlpack", (value,))?;
                return Ok(Taken::Host(feeds::array_of(&array, spec)?.0.unbind()));
            }
        }
        let imported = dlpack::import(value, name)?;
        self.check_place(role, name, imported.place)?;
        if imported.place.is_host() {
            return Err(invalid(format!("{role} '{name}': pass host tensors as numpy arrays")));
        }
        check_type(role, name, spec, imported.dtype, imported.dims.len())?;
        if role == "output" && imported.read_only {
            return Err(invalid(format!("output '{name}' is a read-only tensor")));
        }
        Ok(device_memory(imported))
    }

    /// ONNX Runtime's long form: a raw device pointer with its device, element type and shape.
    fn raw(
        &self,
        role: &str,
        name: &str,
        spec: &TensorSpec,
        raw: Raw<'_, '_>,
    ) -> PyResult<(Arc<DeviceMemory>, Vec<u64>)> {
        let Raw { device_type, device_id, element_type, shape, buffer_ptr } = raw;
        let place = Place { device_type: device_type_code(device_type)?, device_id: device_id as i32 };
        if place.is_host() {
            return Err(invalid(format!(
                "{role} '{name}': bind host memory as a numpy array (bind_cpu_input / bind_output(name, array))"
            )));
        }
        self.check_place(role, name, place)?;
        let dtype = match element_type {
            Some(t) => element_type_of(t)?,
            None => spec.dtype(),
        };
        let shape = shape.ok_or_else(|| invalid(format!("{role} '{name}': a buffer_ptr needs its shape")))?;
        let dims = shape
            .iter()
            .map(|&d| u64::try_from(d).map_err(|_| invalid(format!("{role} '{name}' has extent {d}"))))
            .collect::<PyResult<Vec<u64>>>()?;
        check_type(role, name, spec, dtype, dims.len())?;
        let bytes = saggar_shape::byte_size(&dims, dtype)
            .ok()
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| invalid(format!("{role} '{name}': shape {dims:?} is larger than memory")))?;
        let memory = DeviceMemory::external(DevicePtr(buffer_ptr as u64), bytes, Box::new(()));
        Ok((Arc::new(memory), dims))
    }

    /// Binds output `index`, last in the order `get_outputs` returns.
    fn set_output(&mut self, index: usize, output: Output) {
        self.outputs[index] = Some(output);
        self.order.retain(|&o| o != index);
        self.order.push(index);
        self.changed();
    }

    /// Forgets the validated request (a binding changed shape or kind).
    fn changed(&mut self) {
        self.cached = None;
    }
}

/// ONNX Runtime's long form of a binding: `device_type, device_id, element_type, shape,
/// buffer_ptr`.
struct Raw<'a, 'py> {
    device_type: &'a str,
    device_id: i64,
    element_type: Option<&'a Bound<'py, PyAny>>,
    shape: Option<Vec<i64>>,
    buffer_ptr: usize,
}

/// A tensor taken for a binding.
enum Taken {
    Host(Py<PyUntypedArray>),
    Device(Arc<DeviceMemory>, Vec<u64>),
}

fn device_memory(imported: Imported) -> Taken {
    let dims = imported.dims.clone();
    let memory = DeviceMemory::external(DevicePtr(imported.address), imported.bytes, Box::new(imported));
    Taken::Device(Arc::new(memory), dims)
}

fn check_type(role: &str, name: &str, spec: &TensorSpec, dtype: DType, rank: usize) -> PyResult<()> {
    if dtype != spec.dtype() {
        return Err(invalid(format!(
            "{role} '{name}': expected {}, got {}",
            onnx_type(spec.dtype()),
            onnx_type(dtype)
        )));
    }
    if rank != spec.rank() {
        return Err(invalid(format!(
            "{role} '{name}': expected rank {} (shape {}), got rank {rank}",
            spec.rank(),
            spec_shape(spec)
        )));
    }
    Ok(())
}

fn device_type_code(device_type: &str) -> PyResult<i32> {
    Ok(match device_type.to_ascii_lowercase().as_str() {
        "cpu" => dlpack::KDL_CPU,
        "cuda" | "gpu" => dlpack::KDL_CUDA,
        "rocm" | "hip" => dlpack::KDL_ROCM,
        "cuda_pinned" => dlpack::KDL_CUDA_HOST,
        other => return Err(invalid(format!("unknown device type '{other}' (cpu, cuda, rocm)"))),
    })
}

/// ONNX Runtime's `element_type` (`np.float32`, `"float32"`, a numpy dtype) as an element type.
fn element_type_of(value: &Bound<'_, PyAny>) -> PyResult<DType> {
    let name: String = value.py().import("numpy")?.call_method1("dtype", (value,))?.getattr("name")?.extract()?;
    crate::dtypes::from_numpy_name(&name)
        .ok_or_else(|| invalid(format!("element_type {name} has no ONNX element type")))
}

#[pymethods]
impl IOBinding {
    /// Binds input `name` to a numpy array or DLPack tensor, or (ONNX Runtime's long form) to a raw
    /// buffer: `bind_input(name, device_type, device_id, element_type, shape, buffer_ptr)`.
    #[pyo3(signature = (name, tensor_or_device_type, device_id=0, element_type=None, shape=None, buffer_ptr=None))]
    fn bind_input(
        &mut self,
        name: &str,
        tensor_or_device_type: &Bound<'_, PyAny>,
        device_id: i64,
        element_type: Option<&Bound<'_, PyAny>>,
        shape: Option<Vec<i64>>,
        buffer_ptr: Option<usize>,
    ) -> PyResult<()> {
        let (index, spec) = self.spec("input", name)?;
        let input = if let Ok(device_type) = tensor_or_device_type.cast::<PyString>() {
            let ptr = buffer_ptr.ok_or_else(|| invalid(format!("input '{name}': the long form needs a buffer_ptr")))?;
            let device_type = device_type.to_cow()?;
            let raw = Raw { device_type: &device_type, device_id, element_type, shape, buffer_ptr: ptr };
            let (memory, dims) = self.raw("input", name, &spec, raw)?;
            Input::Device { memory, dims }
        } else if let Ok(array) = tensor_or_device_type.cast::<PyUntypedArray>() {
            Input::Host(feeds::array_of(array, &spec)?.0.unbind())
        } else if let Ok(value) = tensor_or_device_type.cast::<OrtValue>() {
            let v = value.get();
            check_type("input", name, &spec, v.dtype, v.dims.len())?;
            ortvalue_input(value.py(), v)
        } else {
            match self.take("input", name, &spec, tensor_or_device_type)? {
                Taken::Host(array) => Input::Host(array),
                Taken::Device(memory, dims) => Input::Device { memory, dims },
            }
        };
        self.inputs[index] = Some(input);
        self.changed();
        Ok(())
    }

    /// Binds input `name` to a numpy array (ONNX Runtime's `bind_cpu_input`).
    fn bind_cpu_input(&mut self, name: &str, array: &Bound<'_, PyAny>) -> PyResult<()> {
        let (index, spec) = self.spec("input", name)?;
        self.inputs[index] = Some(Input::Host(feeds::array_of(array, &spec)?.0.unbind()));
        self.changed();
        Ok(())
    }

    /// Binds input `name` to an `OrtValue` (a result of an earlier run, for example).
    fn bind_ortvalue_input(&mut self, name: &str, value: &Bound<'_, OrtValue>) -> PyResult<()> {
        let (index, spec) = self.spec("input", name)?;
        let v = value.get();
        check_type("input", name, &spec, v.dtype, v.dims.len())?;
        self.inputs[index] = Some(ortvalue_input(value.py(), v));
        self.changed();
        Ok(())
    }

    /// Binds output `name`: with nothing or `"cpu"`, to a new numpy array each run; with `"cuda"`
    /// (or `"rocm"`), to device memory saggar allocates; to a numpy array or DLPack tensor, written
    /// in place; or (the long form) to a raw device buffer.
    #[pyo3(signature = (name, tensor_or_device_type=None, device_id=0, element_type=None, shape=None, buffer_ptr=None))]
    fn bind_output(
        &mut self,
        name: &str,
        tensor_or_device_type: Option<&Bound<'_, PyAny>>,
        device_id: i64,
        element_type: Option<&Bound<'_, PyAny>>,
        shape: Option<Vec<i64>>,
        buffer_ptr: Option<usize>,
    ) -> PyResult<()> {
        let (index, spec) = self.spec("output", name)?;
        let output = match tensor_or_device_type {
            None => Output::HostNew,
            Some(v) if v.is_instance_of::<PyString>() => {
                let device_type: String = v.extract()?;
                let code = device_type_code(&device_type)?;
                match buffer_ptr {
                    _ if code == dlpack::KDL_CPU => Output::HostNew,
                    Some(ptr) => {
                        let raw = Raw { device_type: &device_type, device_id, element_type, shape, buffer_ptr: ptr };
                        let (memory, dims) = self.raw("output", name, &spec, raw)?;
                        Output::Device { memory, dims }
                    }
                    None => {
                        self.check_place("output", name, Place { device_type: code, device_id: device_id as i32 })?;
                        Output::DeviceNew
                    }
                }
            }
            Some(v) => {
                if let Ok(array) = v.cast::<PyUntypedArray>() {
                    Output::Host(host_output(name, &spec, array)?)
                } else {
                    match self.take("output", name, &spec, v)? {
                        Taken::Host(array) => Output::Host(host_output(name, &spec, array.bind(v.py()))?),
                        Taken::Device(memory, dims) => Output::Device { memory, dims },
                    }
                }
            }
        };
        self.set_output(index, output);
        Ok(())
    }

    /// Binds output `name` to an `OrtValue`'s memory, written in place.
    fn bind_ortvalue_output(&mut self, name: &str, value: &Bound<'_, OrtValue>) -> PyResult<()> {
        let (index, spec) = self.spec("output", name)?;
        let v = value.get();
        check_type("output", name, &spec, v.dtype, v.dims.len())?;
        let output = match &v.storage {
            Storage::Host(array) => Output::Host(host_output(name, &spec, array.bind(value.py()))?),
            Storage::Device { memory, .. } => Output::Device { memory: memory.clone(), dims: v.dims.clone() },
        };
        self.set_output(index, output);
        Ok(())
    }

    /// The last run's outputs as `OrtValue`s, in the order they were bound.
    fn get_outputs(&self, py: Python<'_>) -> Vec<Py<OrtValue>> {
        self.results.iter().map(|r| r.clone_ref(py)).collect()
    }

    /// The last run's outputs as numpy arrays (device outputs copied to the host).
    fn copy_outputs_to_cpu<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyUntypedArray>>> {
        self.results
            .iter()
            .map(|r| r.bind(py).call_method0("numpy")?.cast_into::<PyUntypedArray>().map_err(Into::into))
            .collect()
    }

    fn clear_binding_inputs(&mut self) {
        self.inputs.iter_mut().for_each(|i| *i = None);
        self.changed();
    }

    fn clear_binding_outputs(&mut self) {
        self.outputs.iter_mut().for_each(|o| *o = None);
        self.order.clear();
        self.results.clear();
        self.changed();
    }

    /// How the last run bound its tensors: `"DirectBind"` (the caller's device pointers baked into
    /// a replayed graph), `"Stabilized"` (copied into the session's slots, for padded batches),
    /// `"PinnedCopy"` (host arrays); `None` before a run. For tests and tuning.
    #[getter]
    fn _last_binding_mode(&self) -> Option<String> {
        self.last_mode.map(|m| format!("{m:?}"))
    }

    /// The device addresses the last device run gave the session, input and output name to
    /// address; empty for host runs. For tests: a device tensor is used in place when its
    /// `data_ptr()` is here.
    fn _device_pointers(&self) -> std::collections::HashMap<String, u64> {
        let Some(cached) = &self.cached else { return Default::default() };
        let signature = self.engine.signature();
        let inputs = signature.inputs().iter().zip(&cached.inputs);
        let outputs = signature.outputs().iter().zip(&cached.outputs);
        inputs.chain(outputs).map(|(s, slice)| (s.name().to_string(), slice.ptr().0)).collect()
    }

    /// Waits for every producer's work on the session's device (runs do this themselves).
    fn synchronize_inputs(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.engine.synchronize()).map_err(crate::errors::dispatch)
    }

    /// Runs wait for their own work before returning; this waits for the whole device.
    fn synchronize_outputs(&self, py: Python<'_>) -> PyResult<()> {
        self.synchronize_inputs(py)
    }
}

fn ortvalue_input(py: Python<'_>, v: &OrtValue) -> Input {
    match &v.storage {
        Storage::Host(array) => Input::Host(array.clone_ref(py)),
        Storage::Device { memory, .. } => Input::Device { memory: memory.clone(), dims: v.dims.clone() },
    }
}

/// A caller's numpy output array: C-contiguous, writable, of the output's element type and rank.
fn host_output(name: &str, spec: &TensorSpec, array: &Bound<'_, PyUntypedArray>) -> PyResult<Py<PyUntypedArray>> {
    let (checked, _) = feeds::array_of(array, spec)?;
    // SAFETY: the array object is alive (held by `checked`).
    let writable = unsafe { (*checked.as_array_ptr()).fields.flags } & numpy::npyffi::NPY_ARRAY_WRITEABLE != 0;
    if !feeds::in_place(&checked) || !writable {
        return Err(invalid(format!(
            "output '{name}' must be a writable C-contiguous numpy array to be written in place"
        )));
    }
    Ok(checked.unbind())
}
