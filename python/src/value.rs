//! `OrtValue`: a tensor an io_binding run produced (or a caller bound), in host memory (a numpy
//! array) or device memory, readable as numpy (`numpy()`) and handed to other libraries through
//! DLPack (`torch.from_dlpack(value)`) without a copy.

use std::sync::Arc;

use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use saggar_device::BackendKind;
use saggar_shape::DType;

use crate::dlpack::{self, KDL_CPU, KDL_CUDA, KDL_ROCM, Place};
use crate::dtypes::onnx_type;
use crate::engine::{DeviceMemory, Engine};
use crate::errors::{NotImplemented, dispatch, invalid};
use crate::feeds;

/// Where an [`OrtValue`]'s bytes are.
pub(crate) enum Storage {
    /// A numpy array.
    Host(Py<PyUntypedArray>),
    /// Device memory of `engine`'s device.
    Device { memory: Arc<DeviceMemory>, engine: Arc<dyn Engine> },
}

/// A tensor: its element type, extents and storage.
#[pyclass(module = "saggar", frozen)]
pub struct OrtValue {
    pub(crate) dtype: DType,
    pub(crate) dims: Vec<u64>,
    pub(crate) storage: Storage,
}

impl std::fmt::Debug for OrtValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrtValue").field("dtype", &self.dtype).field("dims", &self.dims).finish_non_exhaustive()
    }
}

/// DLPack's place of `engine`'s device.
pub(crate) fn device_place(engine: &dyn Engine) -> Place {
    let device_type = match engine.backend() {
        BackendKind::Cuda => KDL_CUDA,
        BackendKind::Hip => KDL_ROCM,
        BackendKind::Host => KDL_CPU,
    };
    Place { device_type, device_id: engine.device_id() as i32 }
}

impl OrtValue {
    /// A value of host array `array`.
    pub(crate) fn host(array: &Bound<'_, PyUntypedArray>, dtype: DType) -> OrtValue {
        let dims = array.shape().iter().map(|&d| d as u64).collect();
        OrtValue { dtype, dims, storage: Storage::Host(array.clone().unbind()) }
    }

    /// A value in `engine`'s device memory.
    pub(crate) fn device(memory: Arc<DeviceMemory>, engine: Arc<dyn Engine>, dtype: DType, dims: Vec<u64>) -> OrtValue {
        OrtValue { dtype, dims, storage: Storage::Device { memory, engine } }
    }

    fn bytes(&self) -> usize {
        self.dims.iter().product::<u64>() as usize * self.dtype.size_bytes()
    }
}

#[pymethods]
impl OrtValue {
    /// The tensor as a numpy array: the array itself for host values, a copy for device values.
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyUntypedArray>> {
        match &self.storage {
            Storage::Host(array) => Ok(array.bind(py).clone()),
            Storage::Device { memory, engine } => {
                let spec = saggar_shape::TensorSpec::new("value", self.dtype, Vec::new());
                let array = feeds::empty(py, &spec, &self.dims)?;
                // SAFETY: `array` was just made, C-contiguous, with this value's element size; no
                // other reference to it exists yet.
                let bytes = unsafe { feeds::bytes_mut(&array, self.dtype.size_bytes()) };
                let src = memory.slice(self.bytes());
                py.detach(|| engine.download(src, bytes)).map_err(dispatch)?;
                Ok(array)
            }
        }
    }

    /// The extents.
    fn shape(&self) -> Vec<u64> {
        self.dims.clone()
    }

    /// ONNX Runtime's type string (`"tensor(float)"`).
    fn data_type(&self) -> &'static str {
        onnx_type(self.dtype)
    }

    /// `"cpu"`, `"cuda"` or `"rocm"`.
    fn device_name(&self) -> &'static str {
        match &self.storage {
            Storage::Host(_) => "cpu",
            Storage::Device { engine, .. } => match engine.backend() {
                BackendKind::Cuda => "cuda",
                BackendKind::Hip => "rocm",
                BackendKind::Host => "cpu",
            },
        }
    }

    /// The address of the first element (a device address for device values).
    fn data_ptr(&self, py: Python<'_>) -> usize {
        match &self.storage {
            // SAFETY: the array object is alive (held by `self`).
            Storage::Host(array) => unsafe { (*array.bind(py).as_array_ptr()).fields.data as usize },
            Storage::Device { memory, .. } => memory.ptr().0 as usize,
        }
    }

    fn is_tensor(&self) -> bool {
        true
    }

    fn has_value(&self) -> bool {
        true
    }

    /// DLPack's `(device type, device id)`.
    fn __dlpack_device__(&self) -> (i32, i32) {
        match &self.storage {
            Storage::Host(_) => (KDL_CPU, 0),
            Storage::Device { engine, .. } => {
                let place = device_place(&**engine);
                (place.device_type, place.device_id)
            }
        }
    }

    /// A DLPack capsule of the tensor, read in place. The run that made it has finished (runs wait
    /// for their work), so the consumer's stream needs no synchronization.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match &self.storage {
            Storage::Host(array) => {
                let kwargs = PyDict::new(py);
                kwargs.set_item("stream", stream)?;
                if max_version.is_some() {
                    kwargs.set_item("max_version", max_version)?;
                }
                if dl_device.is_some() {
                    kwargs.set_item("dl_device", dl_device)?;
                }
                if copy.is_some() {
                    kwargs.set_item("copy", copy)?;
                }
                array.bind(py).call_method("__dlpack__", (), Some(&kwargs))
            }
            Storage::Device { memory, engine } => {
                if copy == Some(true) {
                    return Err(invalid("saggar exports device tensors in place only (copy=True is not supported)"));
                }
                let _ = (stream, dl_device);
                let versioned = max_version.is_some_and(|(major, _)| major >= 1);
                dlpack::export(py, memory.clone(), device_place(&**engine), self.dtype, &self.dims, versioned)
            }
        }
    }

    /// ONNX Runtime's `OrtValue.to_dlpack()`: a legacy `dltensor` capsule.
    fn to_dlpack<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.__dlpack__(py, None, None, None, None)
    }

    /// An `OrtValue` of a numpy array in host memory (ONNX Runtime's `ortvalue_from_numpy`). Values
    /// on a device come from io_binding runs, or are bound directly as torch or cupy tensors.
    #[staticmethod]
    #[pyo3(signature = (array, device_type="cpu", device_id=0))]
    fn ortvalue_from_numpy(array: &Bound<'_, PyAny>, device_type: &str, device_id: i64) -> PyResult<OrtValue> {
        if device_type != "cpu" {
            return Err(NotImplemented::new_err(format!(
                "OrtValue.ortvalue_from_numpy on {device_type}:{device_id}: bind a torch or cupy tensor on the device \
                 to the io_binding instead (bind_input(name, tensor)), or bind the numpy array itself"
            )));
        }
        let array = array.cast::<PyUntypedArray>().map_err(|_| invalid("ortvalue_from_numpy takes a numpy array"))?;
        let descr = numpy::PyArrayDescrMethods::kind(&array.dtype());
        let dtype = crate::dtypes::from_numpy(
            descr,
            numpy::PyArrayDescrMethods::itemsize(&array.dtype()),
            numpy::PyArrayDescrMethods::byteorder(&array.dtype()),
        )
        .ok_or_else(|| invalid(format!("numpy {} has no ONNX element type saggar takes", array.dtype())))?;
        Ok(OrtValue::host(array, dtype))
    }

    fn __repr__(&self) -> String {
        format!("OrtValue({}, shape={:?}, device={})", onnx_type(self.dtype), self.dims, self.device_name())
    }
}
