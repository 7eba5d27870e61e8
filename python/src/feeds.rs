//! numpy arrays as saggar tensors: inputs read in place (an array that is not C-contiguous and
//! aligned is copied once), checked by name, element type and rank with messages naming the input,
//! the expected and the actual; outputs allocated as numpy arrays only after the request was
//! checked, so an untrusted feed never makes saggar allocate what its shapes claim.

use numpy::npyffi::{NPY_ARRAY_ALIGNED, NPY_ORDER, PY_ARRAY_API, npy_intp};
use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use saggar_dispatch::HostTensor;
use saggar_shape::{DType, Dim, Signature, TensorSpec};

use crate::dtypes::{numpy_type, onnx_type};
use crate::errors::{NotImplemented, invalid};

/// One input of a request: its binding index, array (C-contiguous and aligned once settled) and
/// shape.
pub(crate) struct Feed<'py> {
    pub(crate) index: usize,
    pub(crate) array: Bound<'py, PyUntypedArray>,
    pub(crate) dtype: DType,
    pub(crate) dims: Vec<u64>,
}

impl Feed<'_> {
    /// The array's bytes.
    ///
    /// The slice aliases numpy's buffer, which Python code may write while `run` reads it with the
    /// GIL released. As in ONNX Runtime, writing a feed array during a run of it is the caller's
    /// error: saggar only copies the bytes into staging, so such a write leaves the request's
    /// contents unspecified and nothing else.
    pub(crate) fn bytes(&self) -> &[u8] {
        let len = self.array.len() * self.dtype.size_bytes();
        if len == 0 {
            return &[];
        }
        debug_assert!(in_place(&self.array), "feeds are settled before their bytes are read");
        // SAFETY: the array is C-contiguous (settled by `settle_all` or `settle`), so its data pointer
        // starts `len` readable bytes (elements times item size); `self.array` holds a reference
        // that keeps the buffer alive as long as the returned borrow of `self`.
        unsafe { std::slice::from_raw_parts((*self.array.as_array_ptr()).fields.data.cast::<u8>(), len) }
    }
}

/// Shape of a spec as ONNX Runtime shows it (`['batch', 128]`).
pub(crate) fn spec_shape(spec: &TensorSpec) -> String {
    let dims: Vec<String> = spec
        .dims()
        .iter()
        .map(|d| match d {
            Dim::Fixed(n) => n.to_string(),
            Dim::Symbolic(s) => format!("'{s}'"),
        })
        .collect();
    format!("[{}]", dims.join(", "))
}

/// The model's input names, for messages.
pub(crate) fn input_names(signature: &Signature) -> String {
    let names: Vec<&str> = signature.inputs().iter().map(TensorSpec::name).collect();
    names.join(", ")
}

/// `value` as a numpy array (anything else through `numpy.asarray`) with its element type; `name`
/// is the tensor's, for messages. Nothing is copied.
pub(crate) fn array<'py>(value: &Bound<'py, PyAny>, name: &str) -> PyResult<(Bound<'py, PyUntypedArray>, DType)> {
    let array = match value.cast::<PyUntypedArray>() {
        Ok(a) => a.clone(),
        Err(_) => value
            .py()
            .import("numpy")?
            .call_method1("asarray", (value,))?
            .cast_into::<PyUntypedArray>()
            .map_err(|_| invalid(format!("'{name}' must be a numpy array, not {}", value.get_type())))?,
    };
    let descr = array.dtype();
    let dtype = crate::dtypes::from_numpy(descr.kind(), descr.itemsize(), descr.byteorder())
        .or_else(|| is_bfloat16(&descr).then_some(DType::BF16))
        .ok_or_else(|| invalid(format!("'{name}' is numpy {descr}, which has no ONNX element type saggar takes")))?;
    Ok((array, dtype))
}

/// Whether a numpy dtype is ml_dtypes' `bfloat16` (the type onnx and JAX give bfloat16 arrays; numpy
/// has none of its own).
fn is_bfloat16(descr: &Bound<'_, numpy::PyArrayDescr>) -> bool {
    descr.itemsize() == 2 && descr.to_string() == "bfloat16"
}

/// Whether saggar reads `array` in place: C-contiguous and aligned.
pub(crate) fn in_place(array: &Bound<'_, PyUntypedArray>) -> bool {
    // SAFETY: `as_array_ptr` points at the live array object `array` holds.
    let aligned = unsafe { (*array.as_array_ptr()).fields.flags } & NPY_ARRAY_ALIGNED != 0;
    array.is_c_contiguous() && aligned
}

/// `array` itself when saggar reads it in place, else its one C-contiguous copy.
pub(crate) fn settle<'py>(array: Bound<'py, PyUntypedArray>) -> PyResult<Bound<'py, PyUntypedArray>> {
    if in_place(&array) {
        return Ok(array);
    }
    let py = array.py();
    // SAFETY: the array pointer is valid (held by `array`); PyArray_NewCopy returns a new reference
    // (or null with an exception set, which `from_owned_ptr_or_err` turns into the error).
    let copy = unsafe {
        Bound::from_owned_ptr_or_err(py, PY_ARRAY_API.PyArray_NewCopy(py, array.as_array_ptr(), NPY_ORDER::NPY_CORDER))?
    };
    Ok(copy.cast_into::<PyUntypedArray>()?)
}

/// `value` as [`array`] makes it, C-contiguous and aligned (copied once when it is not).
pub(crate) fn contiguous<'py>(value: &Bound<'py, PyAny>, name: &str) -> PyResult<(Bound<'py, PyUntypedArray>, DType)> {
    let (array, dtype) = array(value, name)?;
    Ok((settle(array)?, dtype))
}

/// `value` as [`array`] makes it (nothing copied), checked against input `spec`: element type and
/// rank.
pub(crate) fn array_of<'py>(
    value: &Bound<'py, PyAny>,
    spec: &TensorSpec,
) -> PyResult<(Bound<'py, PyUntypedArray>, DType)> {
    let name = spec.name();
    let (array, dtype) = array(value, name)?;
    if dtype != spec.dtype() {
        return Err(invalid(format!(
            "input '{name}': expected {}, got {} (numpy {})",
            onnx_type(spec.dtype()),
            onnx_type(dtype),
            array.dtype()
        )));
    }
    if array.ndim() != spec.rank() {
        return Err(invalid(format!(
            "input '{name}': expected rank {} (shape {}), got rank {} (shape {:?})",
            spec.rank(),
            spec_shape(spec),
            array.ndim(),
            array.shape()
        )));
    }
    Ok((array, dtype))
}

/// The request in `input_feed` (a dict of input name to array), in binding order, checked by
/// name, element type and rank. Nothing is copied yet: see [`settle_all`].
pub(crate) fn collect<'py>(signature: &Signature, input_feed: &Bound<'py, PyDict>) -> PyResult<Vec<Feed<'py>>> {
    let mut feeds = Vec::with_capacity(input_feed.len());
    for (key, value) in input_feed.iter() {
        let key = key.cast_into::<PyString>().map_err(|_| invalid("input_feed's keys must be input names (str)"))?;
        let name = key.to_cow()?;
        let name = &*name;
        let index = signature.input_index(name).ok_or_else(|| {
            invalid(format!("the model has no input named '{name}'; its inputs are: {}", input_names(signature)))
        })?;
        let spec = &signature.inputs()[index];
        let (array, dtype) = array_of(&value, spec)?;
        let dims = array.shape().iter().map(|&d| d as u64).collect();
        feeds.push(Feed { index, array, dtype, dims });
    }
    feeds.sort_by_key(|f| f.index);
    Ok(feeds)
}

/// The feeds' shapes as host tensors without data, for the session's checks (`output_dims`), made
/// before anything is copied or allocated for the request.
pub(crate) fn shapes<'a>(signature: &'a Signature, feeds: &'a [Feed<'_>]) -> Vec<HostTensor<'a>> {
    feeds
        .iter()
        .map(|f| HostTensor { name: signature.inputs()[f.index].name(), dtype: f.dtype, dims: &f.dims, data: &[] })
        .collect()
}

/// Copies each feed saggar cannot read in place once (after the request was checked).
pub(crate) fn settle_all(feeds: &mut [Feed<'_>]) -> PyResult<()> {
    for feed in feeds {
        if !in_place(&feed.array) {
            feed.array = settle(feed.array.clone())?;
        }
    }
    Ok(())
}

/// The feeds as host tensors, named by the signature's own strings (the dispatcher compares names
/// by address first).
pub(crate) fn host_tensors<'a>(signature: &'a Signature, feeds: &'a [Feed<'_>]) -> Vec<HostTensor<'a>> {
    feeds
        .iter()
        .map(|f| HostTensor {
            name: signature.inputs()[f.index].name(),
            dtype: f.dtype,
            dims: &f.dims,
            data: f.bytes(),
        })
        .collect()
}

/// A new, uninitialised numpy array for output `spec` with extents `dims` (already checked against
/// the session's limits by `output_dims`).
pub(crate) fn empty<'py>(py: Python<'py>, spec: &TensorSpec, dims: &[u64]) -> PyResult<Bound<'py, PyUntypedArray>> {
    if spec.dtype() == DType::BF16
        && let Ok(ml_dtypes) = py.import("ml_dtypes")
    {
        // numpy has no bfloat16; ml_dtypes' (which onnx depends on) is what users compare against.
        let shape = pyo3::types::PyTuple::new(py, dims)?;
        let array = py.import("numpy")?.call_method1("empty", (shape, ml_dtypes.getattr("bfloat16")?))?;
        return Ok(array.cast_into::<PyUntypedArray>()?);
    }
    let typenum = numpy_type(spec.dtype()).ok_or_else(|| {
        NotImplemented::new_err(format!(
            "output '{}' is {}, which numpy has no type for",
            spec.name(),
            onnx_type(spec.dtype())
        ))
    })?;
    let mut extents = dims
        .iter()
        .map(|&d| npy_intp::try_from(d).map_err(|_| invalid(format!("output '{}' has extent {d}", spec.name()))))
        .collect::<PyResult<Vec<npy_intp>>>()?;
    let nd = extents.len() as std::os::raw::c_int;
    // SAFETY: DescrFromType returns a new reference to a built-in descriptor, which PyArray_Empty
    // steals; `extents` holds `nd` extents; the result is a new reference or null with an
    // exception set.
    let array = unsafe {
        let descr = PY_ARRAY_API.PyArray_DescrFromType(py, typenum as std::os::raw::c_int);
        Bound::from_owned_ptr_or_err(py, PY_ARRAY_API.PyArray_Empty(py, nd, extents.as_mut_ptr(), descr, 0))?
    };
    Ok(array.cast_into::<PyUntypedArray>()?)
}

/// The writable bytes of an array this module just made with [`empty`] (or a caller's C-contiguous
/// output array).
///
/// # Safety
/// `array` must be C-contiguous with element size `element_bytes`, and no other reference may
/// read or write its buffer while the returned slice lives.
#[expect(
    clippy::mut_from_ref,
    reason = "numpy owns the buffer behind a shared handle; the caller's contract makes the borrow exclusive"
)]
pub(crate) unsafe fn bytes_mut<'a>(array: &'a Bound<'_, PyUntypedArray>, element_bytes: usize) -> &'a mut [u8] {
    let len = array.len() * element_bytes;
    if len == 0 {
        return &mut [];
    }
    // SAFETY: the caller's promise: contiguous, `len` bytes, not aliased while the slice lives.
    unsafe { std::slice::from_raw_parts_mut((*array.as_array_ptr()).fields.data.cast::<u8>(), len) }
}
