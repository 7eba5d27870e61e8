//! The run of an [`IOBinding`]: on the device when any input is bound to device memory of a GPU
//! session, on the host otherwise.
//!
//! On the device, the request is validated once into a saggar `DeviceBinding` and kept while the
//! shapes stay the same; a run whose buffers moved only replaces their pointers, so a repeated run
//! is a pointer comparison and a graph replay on the caller's own memory (the direct-bind path).
//! Host inputs of a device run are uploaded into device memory the binding keeps; outputs bound to
//! the host are computed in device memory the binding keeps and copied down after the run. Before
//! reading the caller's device tensors the run waits for the device, so work other libraries
//! queued on their own streams (torch's current stream) is finished.
//!
//! On the host, the run is `Session::run_into` on the bound arrays; outputs bound to device memory
//! are uploaded after it.

use std::sync::Arc;

use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use saggar_device::DeviceSlice;
use saggar_dispatch::{DeviceTensor, HostTensor};
use saggar_shape::TensorSpec;

use crate::binding::{Cached, IOBinding, Input, Output};
use crate::engine::{DeviceMemory, Engine};
use crate::errors::{dispatch, invalid};
use crate::feeds::{self, Feed};
use crate::value::OrtValue;

/// Bytes of a tensor of `spec`'s element type with extents `dims` (checked by `output_dims` or
/// by the binding, so they fit).
fn bytes_of(spec: &TensorSpec, dims: &[u64]) -> usize {
    saggar_shape::byte_size(dims, spec.dtype()).ok().and_then(|b| usize::try_from(b).ok()).unwrap_or(usize::MAX)
}

/// `kept` when it is held by nobody else and large enough, otherwise new memory of `bytes`.
fn reuse_or_alloc(
    engine: &dyn Engine,
    kept: &mut Option<Arc<DeviceMemory>>,
    bytes: usize,
) -> PyResult<Arc<DeviceMemory>> {
    if let Some(memory) = kept
        && Arc::strong_count(memory) == 1
        && memory.len() >= bytes
    {
        return Ok(memory.clone());
    }
    let memory = Arc::new(engine.alloc(bytes).map_err(dispatch)?);
    *kept = Some(memory.clone());
    Ok(memory)
}

/// Device tensors of `specs` with extents `dims` in `slices`.
fn device_tensors<'a>(specs: &'a [TensorSpec], dims: &'a [Vec<u64>], slices: &[DeviceSlice]) -> Vec<DeviceTensor<'a>> {
    specs
        .iter()
        .zip(dims)
        .zip(slices)
        .map(|((s, d), &data)| DeviceTensor { name: s.name(), dtype: s.dtype(), dims: d, data })
        .collect()
}

/// Checks that a caller's output buffer has the shape the run produces.
fn check_output_dims(spec: &TensorSpec, bound: &[u64], produced: &[u64]) -> PyResult<()> {
    if bound != produced {
        return Err(invalid(format!(
            "output '{}' is bound to a tensor of shape {bound:?}; this run produces shape {produced:?}",
            spec.name()
        )));
    }
    Ok(())
}

fn array_dims(array: &Bound<'_, PyUntypedArray>) -> Vec<u64> {
    array.shape().iter().map(|&d| d as u64).collect()
}

impl IOBinding {
    /// Runs the bound request (`InferenceSession.run_with_iobinding`).
    pub(crate) fn run(&mut self, py: Python<'_>) -> PyResult<()> {
        let engine = self.engine.clone();
        let signature = engine.signature();
        if let Some(missing) = self.inputs.iter().position(Option::is_none) {
            return Err(invalid(format!(
                "input '{}' is not bound; bind every input before run_with_iobinding (inputs: {})",
                signature.inputs()[missing].name(),
                feeds::input_names(signature)
            )));
        }
        self.results.clear();
        let on_device = self.inputs.iter().any(|i| matches!(i, Some(Input::Device { .. })));
        if on_device { self.run_device(py, &engine) } else { self.run_host(py, &engine) }
    }

    fn run_host(&mut self, py: Python<'_>, engine: &Arc<dyn Engine>) -> PyResult<()> {
        let signature = engine.signature();
        let mut feeds: Vec<Feed<'_>> = self
            .inputs
            .iter()
            .enumerate()
            .map(|(index, input)| match input {
                Some(Input::Host(array)) => {
                    let array = array.bind(py).clone();
                    let dims = array_dims(&array);
                    Feed { index, array, dtype: signature.inputs()[index].dtype(), dims }
                }
                _ => unreachable!("a host run has only host inputs"),
            })
            .collect();
        let out_dims = engine.output_dims(&feeds::shapes(signature, &feeds)).map_err(dispatch)?;
        feeds::settle_all(&mut feeds)?;
        let hosts = feeds::host_tensors(signature, &feeds);
        let mut arrays = Vec::with_capacity(out_dims.len());
        for (o, (spec, dims)) in signature.outputs().iter().zip(&out_dims).enumerate() {
            arrays.push(match &self.outputs[o] {
                Some(Output::Host(array)) => {
                    let array = array.bind(py).clone();
                    check_output_dims(spec, &array_dims(&array), dims)?;
                    array
                }
                Some(Output::Device { dims: bound, .. }) => {
                    check_output_dims(spec, bound, dims)?;
                    feeds::empty(py, spec, dims)?
                }
                _ => feeds::empty(py, spec, dims)?,
            });
        }
        let mut buffers: Vec<&mut [u8]> = arrays
            .iter()
            .zip(signature.outputs())
            // SAFETY: each array is C-contiguous with the output's element type (made by `empty`,
            // or checked when bound), and nothing else reads or writes it during the run.
            .map(|(a, spec)| unsafe { feeds::bytes_mut(a, spec.dtype().size_bytes()) })
            .collect();
        let info = py.detach(|| engine.run_into(&hosts, &mut buffers)).map_err(dispatch)?;
        self.last_mode = Some(info.mode);
        self.cached = None;
        drop(buffers);
        for &o in &self.order.clone() {
            let spec = &signature.outputs()[o];
            let value = match &self.outputs[o] {
                Some(Output::DeviceNew) => {
                    let bytes = bytes_of(spec, &out_dims[o]);
                    let memory = reuse_or_alloc(&**engine, &mut self.out_memory[o], bytes)?;
                    self.upload(py, engine, &arrays[o], spec, memory.slice(bytes))?;
                    OrtValue::device(memory, engine.clone(), spec.dtype(), out_dims[o].clone())
                }
                Some(Output::Device { memory, .. }) => {
                    let bytes = bytes_of(spec, &out_dims[o]);
                    self.upload(py, engine, &arrays[o], spec, memory.slice(bytes))?;
                    OrtValue::device(memory.clone(), engine.clone(), spec.dtype(), out_dims[o].clone())
                }
                _ => OrtValue::host(&arrays[o], spec.dtype()),
            };
            self.results.push(Py::new(py, value)?);
        }
        Ok(())
    }

    fn upload(
        &self,
        py: Python<'_>,
        engine: &Arc<dyn Engine>,
        array: &Bound<'_, PyUntypedArray>,
        spec: &TensorSpec,
        dst: DeviceSlice,
    ) -> PyResult<()> {
        let feed =
            Feed { index: 0, array: feeds::settle(array.clone())?, dtype: spec.dtype(), dims: array_dims(array) };
        let src = feed.bytes();
        py.detach(|| engine.upload(src, dst)).map_err(dispatch)
    }

    /// The extents of the bound inputs.
    fn input_dims(&self, py: Python<'_>) -> Vec<Vec<u64>> {
        self.inputs
            .iter()
            .map(|input| match input {
                Some(Input::Device { dims, .. }) => dims.clone(),
                Some(Input::Host(array)) => array_dims(array.bind(py)),
                None => unreachable!("checked by run"),
            })
            .collect()
    }

    /// The device slices of the bound inputs, uploading host inputs into staging, and whether any
    /// is the caller's device memory.
    fn device_inputs(
        &mut self,
        py: Python<'_>,
        engine: &Arc<dyn Engine>,
        in_dims: &[Vec<u64>],
    ) -> PyResult<(Vec<DeviceSlice>, bool)> {
        let signature = engine.signature();
        let (mut slices, mut external) = (Vec::new(), false);
        for (i, spec) in signature.inputs().iter().enumerate() {
            let bytes = bytes_of(spec, &in_dims[i]);
            match &self.inputs[i] {
                Some(Input::Device { memory, .. }) => {
                    external = true;
                    slices.push(memory.slice(bytes));
                }
                Some(Input::Host(array)) => {
                    let array = array.bind(py).clone();
                    let memory = reuse_or_alloc(&**engine, &mut self.staging[i], bytes)?;
                    self.upload(py, engine, &array, spec, memory.slice(bytes))?;
                    slices.push(memory.slice(bytes));
                }
                None => unreachable!("checked by run"),
            }
        }
        Ok((slices, external))
    }

    fn run_device(&mut self, py: Python<'_>, engine: &Arc<dyn Engine>) -> PyResult<()> {
        let signature = engine.signature();
        let in_dims = self.input_dims(py);
        let shapes: Vec<HostTensor<'_>> = signature
            .inputs()
            .iter()
            .zip(&in_dims)
            .map(|(s, d)| HostTensor { name: s.name(), dtype: s.dtype(), dims: d, data: &[] })
            .collect();
        // The request's shapes and sizes are checked before anything is uploaded or allocated.
        let out_dims = engine.output_dims(&shapes).map_err(dispatch)?;
        let (in_slices, external) = self.device_inputs(py, engine, &in_dims)?;
        let mut out_slices = Vec::with_capacity(out_dims.len());
        for (o, spec) in signature.outputs().iter().enumerate() {
            let bytes = bytes_of(spec, &out_dims[o]);
            out_slices.push(match &self.outputs[o] {
                Some(Output::Device { memory, dims }) => {
                    check_output_dims(spec, dims, &out_dims[o])?;
                    memory.slice(bytes)
                }
                Some(Output::Host(array)) => {
                    check_output_dims(spec, &array_dims(array.bind(py)), &out_dims[o])?;
                    reuse_or_alloc(&**engine, &mut self.out_memory[o], bytes)?.slice(bytes)
                }
                _ => reuse_or_alloc(&**engine, &mut self.out_memory[o], bytes)?.slice(bytes),
            });
        }
        self.prepare_request(engine, &in_slices, &in_dims, &out_slices, &out_dims)?;
        let request = &self.cached.as_ref().expect("prepared above").request;
        let info = py
            .detach(|| {
                if external {
                    engine.synchronize()?;
                }
                request.run()
            })
            .map_err(dispatch)?;
        self.last_mode = Some(info.mode);
        self.device_results(py, engine, &out_slices, &out_dims)
    }

    /// Keeps a validated request for these shapes, replacing the buffers that moved since the last
    /// run, or validates a new one.
    fn prepare_request(
        &mut self,
        engine: &Arc<dyn Engine>,
        in_slices: &[DeviceSlice],
        in_dims: &[Vec<u64>],
        out_slices: &[DeviceSlice],
        out_dims: &[Vec<u64>],
    ) -> PyResult<()> {
        if let Some(cached) = &mut self.cached
            && cached.input_dims == in_dims
            && cached.output_dims == out_dims
        {
            for (i, &slice) in in_slices.iter().enumerate() {
                if cached.inputs[i] != slice {
                    cached.request.set_input(i, slice).map_err(dispatch)?;
                    cached.inputs[i] = slice;
                }
            }
            for (o, &slice) in out_slices.iter().enumerate() {
                if cached.outputs[o] != slice {
                    cached.request.set_output(o, slice).map_err(dispatch)?;
                    cached.outputs[o] = slice;
                }
            }
            return Ok(());
        }
        self.cached = None;
        let signature = engine.signature();
        let ins = device_tensors(signature.inputs(), in_dims, in_slices);
        let outs = device_tensors(signature.outputs(), out_dims, out_slices);
        let request = engine.bind(&ins, &outs).map_err(dispatch)?;
        self.cached = Some(Cached {
            input_dims: in_dims.to_vec(),
            output_dims: out_dims.to_vec(),
            inputs: in_slices.to_vec(),
            outputs: out_slices.to_vec(),
            request,
        });
        Ok(())
    }

    /// The results of a device run, in bind order: device outputs as device values, host outputs
    /// copied down into their arrays.
    fn device_results(
        &mut self,
        py: Python<'_>,
        engine: &Arc<dyn Engine>,
        out_slices: &[DeviceSlice],
        out_dims: &[Vec<u64>],
    ) -> PyResult<()> {
        let signature = engine.signature();
        for &o in &self.order.clone() {
            let spec = &signature.outputs()[o];
            let value = match &self.outputs[o] {
                Some(Output::Device { memory, .. }) => {
                    OrtValue::device(memory.clone(), engine.clone(), spec.dtype(), out_dims[o].clone())
                }
                Some(Output::DeviceNew) => {
                    let memory = self.out_memory[o].clone().expect("allocated for the run");
                    OrtValue::device(memory, engine.clone(), spec.dtype(), out_dims[o].clone())
                }
                host => {
                    let array = match host {
                        Some(Output::Host(array)) => array.bind(py).clone(),
                        _ => feeds::empty(py, spec, &out_dims[o])?,
                    };
                    // SAFETY: the array is C-contiguous with the output's element type (made by
                    // `empty` or checked when bound), and nothing else uses it during the copy.
                    let dst = unsafe { feeds::bytes_mut(&array, spec.dtype().size_bytes()) };
                    py.detach(|| engine.download(out_slices[o], dst)).map_err(dispatch)?;
                    OrtValue::host(&array, spec.dtype())
                }
            };
            self.results.push(Py::new(py, value)?);
        }
        Ok(())
    }
}
