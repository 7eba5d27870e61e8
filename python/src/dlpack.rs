//! DLPack: tensors of other libraries (torch, cupy, numpy) taken in place, and saggar's outputs
//! handed out as DLPack capsules.
//!
//! Import follows the Python array API's protocol: the producer's `__dlpack_device__()` says where
//! the tensor lives (checked against the session's device before anything else), then
//! `__dlpack__(max_version=(1, 0))` returns a capsule (`dltensor_versioned`, or `dltensor` from
//! producers older than DLPack 1.0); the capsule is renamed `used_...` and its deleter is called
//! when the [`Imported`] tensor is dropped, which keeps the producer's memory alive while bound.
//! No stream is passed (`stream=-1`): a run that reads device tensors first waits for the whole
//! device (ONNX Runtime's `run_with_iobinding` synchronizes its inputs the same way).
//!
//! Export makes a `dltensor` (or `dltensor_versioned`) capsule whose manager context owns a
//! reference to the memory, freed by the deleter the consumer calls.

use std::ffi::{CStr, c_void};
use std::sync::Arc;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyTuple};
use saggar_shape::DType;

use crate::dtypes;
use crate::engine::DeviceMemory;
use crate::errors::invalid;

/// DLPack's device types (`DLDeviceType`) saggar knows.
pub(crate) const KDL_CPU: i32 = 1;
pub(crate) const KDL_CUDA: i32 = 2;
pub(crate) const KDL_CUDA_HOST: i32 = 3;
pub(crate) const KDL_ROCM: i32 = 10;
pub(crate) const KDL_ROCM_HOST: i32 = 11;
pub(crate) const KDL_CUDA_MANAGED: i32 = 13;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
#[derive(Debug)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

const DLTENSOR: &CStr = c"dltensor";
const USED_DLTENSOR: &CStr = c"used_dltensor";
const DLTENSOR_VERSIONED: &CStr = c"dltensor_versioned";
const USED_DLTENSOR_VERSIONED: &CStr = c"used_dltensor_versioned";
/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
const READ_ONLY: u64 = 1;

/// Where a tensor lives: DLPack's device type and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) device_type: i32,
    pub(crate) device_id: i32,
}

impl Place {
    /// Host memory (CPU, or pinned host memory of a GPU runtime).
    pub(crate) fn is_host(self) -> bool {
        matches!(self.device_type, KDL_CPU | KDL_CUDA_HOST | KDL_ROCM_HOST)
    }
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.device_type {
            KDL_CPU => return f.write_str("cpu"),
            KDL_CUDA => "cuda",
            KDL_CUDA_HOST => "cuda_host",
            KDL_CUDA_MANAGED => "cuda_managed",
            KDL_ROCM => "rocm",
            KDL_ROCM_HOST => "rocm_host",
            other => return write!(f, "DLPack device type {other}:{}", self.device_id),
        };
        write!(f, "{name}:{}", self.device_id)
    }
}

/// The managed tensor an [`Imported`] owns, with the deleter to call.
enum Managed {
    Legacy(*mut DLManagedTensor),
    Versioned(*mut DLManagedTensorVersioned),
}

/// A tensor taken from a DLPack producer: where it is, its element type, extents, first byte and
/// byte length. Dropping it calls the producer's deleter.
pub(crate) struct Imported {
    pub(crate) place: Place,
    pub(crate) dtype: DType,
    pub(crate) dims: Vec<u64>,
    pub(crate) address: u64,
    pub(crate) bytes: usize,
    pub(crate) read_only: bool,
    managed: Managed,
}

// SAFETY: an `Imported` only holds the address of the producer's memory and its managed tensor;
// DLPack requires the deleter to be callable from any thread (producers that need the GIL take it
// in their deleter, as numpy's does), and nothing else touches the managed tensor.
unsafe impl Send for Imported {}
// SAFETY: shared references read only the plain fields copied out at import.
unsafe impl Sync for Imported {}

impl Drop for Imported {
    fn drop(&mut self) {
        // SAFETY: the capsule was renamed `used_...`, so this consumer owns the managed tensor and
        // calls its deleter exactly once, here.
        unsafe {
            match self.managed {
                Managed::Legacy(m) => {
                    if let Some(deleter) = (*m).deleter {
                        deleter(m);
                    }
                }
                Managed::Versioned(m) => {
                    if let Some(deleter) = (*m).deleter {
                        deleter(m);
                    }
                }
            }
        }
    }
}

impl std::fmt::Debug for Imported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Imported")
            .field("place", &self.place)
            .field("dtype", &self.dtype)
            .field("dims", &self.dims)
            .finish()
    }
}

/// Where a DLPack producer's tensor lives, from `__dlpack_device__()`; `None` for a capsule (or any
/// object without the method).
pub(crate) fn place_of(obj: &Bound<'_, PyAny>) -> PyResult<Option<Place>> {
    if !obj.hasattr("__dlpack_device__")? {
        return Ok(None);
    }
    let (device_type, device_id): (i32, i32) = obj.call_method0("__dlpack_device__")?.extract()?;
    Ok(Some(Place { device_type, device_id }))
}

/// The capsule of `obj`: `obj` itself when it is one, else `obj.__dlpack__(...)`.
fn capsule_of<'py>(obj: &Bound<'py, PyAny>, place: Option<Place>, name: &str) -> PyResult<Bound<'py, PyCapsule>> {
    if let Ok(capsule) = obj.cast::<PyCapsule>() {
        return Ok(capsule.clone());
    }
    if !obj.hasattr("__dlpack__")? {
        return Err(invalid(format!(
            "'{name}' must be a numpy array or a DLPack tensor (with __dlpack__), not {}",
            obj.get_type()
        )));
    }
    let py = obj.py();
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("max_version", PyTuple::new(py, [1, 0])?)?;
    if place.is_some_and(|p| !p.is_host()) {
        kwargs.set_item("stream", -1)?;
    }
    let capsule = match obj.call_method("__dlpack__", (), Some(&kwargs)) {
        Ok(c) => c,
        // Producers older than DLPack 1.0 take no `max_version`.
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyTypeError>(py) => {
            kwargs.del_item("max_version")?;
            obj.call_method("__dlpack__", (), Some(&kwargs))?
        }
        Err(e) => return Err(e),
    };
    capsule.cast_into::<PyCapsule>().map_err(|_| invalid(format!("'{name}'.__dlpack__() did not return a capsule")))
}

/// Takes the tensor of `obj` (a DLPack producer or capsule) for input or output `name`.
pub(crate) fn import(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Imported> {
    let place = place_of(obj)?;
    let capsule = capsule_of(obj, place, name)?;
    let raw = capsule.as_ptr();
    // SAFETY: `raw` is a live capsule (held by `capsule`). IsValid checks its name without setting
    // an error; the pointer of a `dltensor_versioned` / `dltensor` capsule is the producer's managed
    // tensor, valid until its deleter runs, which only the consumer that renamed the capsule calls.
    unsafe {
        let (tensor, flags, managed, used) = if ffi::PyCapsule_IsValid(raw, DLTENSOR_VERSIONED.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(raw, DLTENSOR_VERSIONED.as_ptr()).cast::<DLManagedTensorVersioned>();
            if (*m).version.major > 1 {
                return Err(invalid(format!("'{name}' is a DLPack {}.x tensor; saggar reads 1.x", (*m).version.major)));
            }
            (&(*m).dl_tensor as *const DLTensor, (*m).flags, Managed::Versioned(m), USED_DLTENSOR_VERSIONED)
        } else if ffi::PyCapsule_IsValid(raw, DLTENSOR.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(raw, DLTENSOR.as_ptr()).cast::<DLManagedTensor>();
            (&(*m).dl_tensor as *const DLTensor, 0, Managed::Legacy(m), USED_DLTENSOR)
        } else {
            return Err(invalid(format!("'{name}' is not an unused DLPack capsule (dltensor or dltensor_versioned)")));
        };
        if ffi::PyCapsule_SetName(raw, used.as_ptr()) != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        // From here the managed tensor is ours: `Imported`'s drop calls its deleter, also when the
        // checks below refuse it.
        let t = &*tensor;
        let mut imported = Imported {
            place: Place { device_type: t.device.device_type, device_id: t.device.device_id },
            dtype: DType::U8,
            dims: Vec::new(),
            address: (t.data as u64).wrapping_add(t.byte_offset),
            bytes: 0,
            read_only: flags & READ_ONLY != 0,
            managed,
        };
        let dtype = dtypes::from_dlpack(t.dtype.code, t.dtype.bits, t.dtype.lanes).ok_or_else(|| {
            invalid(format!(
                "'{name}' has DLPack type (code {}, bits {}, lanes {}), which saggar has no element type for",
                t.dtype.code, t.dtype.bits, t.dtype.lanes
            ))
        })?;
        let ndim = usize::try_from(t.ndim).map_err(|_| invalid(format!("'{name}' has rank {}", t.ndim)))?;
        let shape: &[i64] = if ndim == 0 { &[] } else { std::slice::from_raw_parts(t.shape, ndim) };
        let dims = shape
            .iter()
            .map(|&d| u64::try_from(d).map_err(|_| invalid(format!("'{name}' has extent {d}"))))
            .collect::<PyResult<Vec<u64>>>()?;
        if !t.strides.is_null() && ndim > 0 {
            let strides = std::slice::from_raw_parts(t.strides, ndim);
            if !is_row_major(&dims, strides) {
                return Err(invalid(format!(
                    "'{name}' is not contiguous (strides {strides:?} for shape {dims:?}): pass a contiguous tensor \
                     (tensor.contiguous())"
                )));
            }
        }
        let elements = dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
        let bytes = elements
            .and_then(|n| n.checked_mul(dtype.size_bytes() as u64))
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| invalid(format!("'{name}' claims {dims:?} elements, more than memory holds")))?;
        imported.dtype = dtype;
        imported.dims = dims;
        imported.bytes = bytes;
        Ok(imported)
    }
}

/// Whether `strides` (in elements) are those of a C-contiguous tensor of extents `dims`; axes of
/// extent 1 may have any stride, and an empty tensor is contiguous.
fn is_row_major(dims: &[u64], strides: &[i64]) -> bool {
    if dims.contains(&0) {
        return true;
    }
    let mut expected: i64 = 1;
    for (&d, &s) in dims.iter().zip(strides).rev() {
        if d != 1 && s != expected {
            return false;
        }
        expected = expected.saturating_mul(d as i64);
    }
    true
}

/// What an exported capsule's manager context owns: the managed tensor first (the consumer's
/// pointer), its shape, and the memory.
#[repr(C)]
struct Export<M> {
    managed: M,
    shape: Vec<i64>,
    _memory: Arc<DeviceMemory>,
}

/// A managed tensor of either DLPack layout, as `export` fills it in.
trait ManagedTensor {
    fn tensor_mut(&mut self) -> &mut DLTensor;
    fn set_context(&mut self, context: *mut c_void);
}

impl ManagedTensor for DLManagedTensor {
    fn tensor_mut(&mut self) -> &mut DLTensor {
        &mut self.dl_tensor
    }

    fn set_context(&mut self, context: *mut c_void) {
        self.manager_ctx = context;
    }
}

impl ManagedTensor for DLManagedTensorVersioned {
    fn tensor_mut(&mut self) -> &mut DLTensor {
        &mut self.dl_tensor
    }

    fn set_context(&mut self, context: *mut c_void) {
        self.manager_ctx = context;
    }
}

/// Boxes `managed` with its `shape` and `memory` and leaks the box: the managed tensor points at
/// the box's shape, and its context at the box, which its deleter frees.
fn leak<M: ManagedTensor>(managed: M, shape: Vec<i64>, memory: Arc<DeviceMemory>) -> *mut c_void {
    let mut b = Box::new(Export { managed, shape, _memory: memory });
    let shape = b.shape.as_mut_ptr();
    b.managed.tensor_mut().shape = shape;
    let raw = Box::into_raw(b);
    // SAFETY: `raw` is the box just leaked, valid and not aliased; its context points at itself.
    unsafe { (*raw).managed.set_context(raw.cast()) };
    raw.cast()
}

/// The deleter of an exported `dltensor`: frees the manager context.
unsafe extern "C" fn delete_legacy(m: *mut DLManagedTensor) {
    // SAFETY: `manager_ctx` is the `Box<Export<DLManagedTensor>>` made by `export`, leaked there;
    // DLPack calls the deleter once.
    unsafe { drop(Box::from_raw((*m).manager_ctx.cast::<Export<DLManagedTensor>>())) }
}

/// The deleter of an exported `dltensor_versioned`.
unsafe extern "C" fn delete_versioned(m: *mut DLManagedTensorVersioned) {
    // SAFETY: as `delete_legacy`, for the versioned box.
    unsafe { drop(Box::from_raw((*m).manager_ctx.cast::<Export<DLManagedTensorVersioned>>())) }
}

/// The capsule destructor: a capsule nobody consumed (still named `dltensor...`) frees its tensor;
/// a consumed one (`used_...`) belongs to its consumer.
unsafe extern "C" fn capsule_destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with the capsule being destroyed; IsValid sets no error, and a valid
    // capsule's pointer is the managed tensor `export` made.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, DLTENSOR_VERSIONED.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(capsule, DLTENSOR_VERSIONED.as_ptr()).cast::<DLManagedTensorVersioned>();
            delete_versioned(m);
        } else if ffi::PyCapsule_IsValid(capsule, DLTENSOR.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(capsule, DLTENSOR.as_ptr()).cast::<DLManagedTensor>();
            delete_legacy(m);
        }
    }
}

/// A DLPack capsule of device memory `memory` (its first bytes) holding a tensor of `dtype` and
/// `dims` on `place`: versioned when the consumer asked for `max_version` 1 or later.
pub(crate) fn export<'py>(
    py: Python<'py>,
    memory: Arc<DeviceMemory>,
    place: Place,
    dtype: DType,
    dims: &[u64],
    versioned: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let shape: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    let (code, bits) = dtypes::to_dlpack(dtype);
    let tensor = |shape: *mut i64| DLTensor {
        data: memory.ptr().0 as *mut c_void,
        device: DLDevice { device_type: place.device_type, device_id: place.device_id },
        ndim: dims.len() as i32,
        dtype: DLDataType { code, bits, lanes: 1 },
        shape,
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    };
    let (pointer, name): (*mut c_void, &CStr) = if versioned {
        let managed = DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 0 },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_versioned),
            flags: 0,
            dl_tensor: tensor(std::ptr::null_mut()),
        };
        (leak(managed, shape, memory), DLTENSOR_VERSIONED)
    } else {
        let managed = DLManagedTensor {
            dl_tensor: tensor(std::ptr::null_mut()),
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_legacy),
        };
        (leak(managed, shape, memory), DLTENSOR)
    };
    // SAFETY: `pointer` is the leaked box whose first field is the managed tensor (`#[repr(C)]`),
    // the name is a static C string, and the destructor frees the box unless a consumer renamed
    // the capsule (then the consumer calls the deleter). On failure the capsule was not made and
    // the box is freed here through the same destructor logic.
    unsafe {
        let capsule = ffi::PyCapsule_New(pointer, name.as_ptr(), Some(capsule_destructor));
        if capsule.is_null() {
            if versioned {
                delete_versioned(pointer.cast());
            } else {
                delete_legacy(pointer.cast());
            }
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, capsule))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_major_strides_are_recognised() {
        assert!(is_row_major(&[2, 3], &[3, 1]));
        assert!(is_row_major(&[2, 1, 3], &[3, 99, 1]), "a unit axis may have any stride");
        assert!(!is_row_major(&[2, 3], &[1, 2]), "column-major");
        assert!(!is_row_major(&[2, 3], &[6, 2]), "every other element");
        assert!(is_row_major(&[0, 3], &[7, 7]), "empty");
    }

    #[test]
    fn places_name_their_device() {
        assert_eq!(Place { device_type: KDL_CUDA, device_id: 1 }.to_string(), "cuda:1");
        assert_eq!(Place { device_type: KDL_CPU, device_id: 0 }.to_string(), "cpu");
        assert!(Place { device_type: KDL_CUDA_HOST, device_id: 0 }.is_host());
        assert!(!Place { device_type: KDL_ROCM, device_id: 0 }.is_host());
    }
}
