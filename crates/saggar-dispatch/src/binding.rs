//! Device bindings: a device request validated once and kept, so repeated runs skip validation.
//!
//! [`crate::Session::run_device`] checks every input's name, dtype, shape and buffer on every call:
//! for a 190-input model that is most of the CPU cost of an ultra-fast run. A [`DeviceBinding`]
//! (ONNX Runtime calls the idea IoBinding) does those checks once, when it is made, and checks each
//! buffer as it is changed; a run then compares the binding's pointers with those the context's graph
//! baked and replays it. Everything else is the session's: paths, graph entries, drift handling,
//! padding and slicing, stats.

use saggar_device::{Backend, DeviceSlice};

use crate::compiler::ProgramCompiler;
use crate::context::DeviceIo;
use crate::error::{DispatchError, Result};
use crate::session::{DeviceRoute, Pending, Session, checked_device_buffer, request_bytes};
use crate::tensors::{BindingMode, RunInfo};

/// A request kept by a [`DeviceBinding`]: its route, shapes and checked buffers, in binding order.
pub(crate) struct BoundRequest {
    /// `None` for requests that are split or run by a per-shape program.
    pub(crate) route: Option<DeviceRoute>,
    /// The request's batch (also for split requests).
    pub(crate) batch: Option<u64>,
    pub(crate) input_dims: Vec<Vec<u64>>,
    pub(crate) output_dims: Vec<Vec<u64>>,
    pub(crate) io: DeviceIo,
}

/// A device request validated once, made by [`Session::bind_device`]. Its shapes are fixed; its
/// buffers can be changed, each checked as it is set. Runs take the same paths as
/// [`Session::run_device`] (ultra-fast when the run context's last run matches), count in the same
/// stats, and bind the same way (direct bind at an exact bucket, stabilized otherwise).
///
/// # Thread safety
/// `Send + Sync`: `run` takes `&self`, so threads may share a binding; concurrent runs of one binding
/// write the same output buffers, which is the caller's to avoid (as with `run_device`).
pub struct DeviceBinding<B: Backend, C: ProgramCompiler<B>> {
    session: Session<B, C>,
    request: BoundRequest,
}

impl<B: Backend, C: ProgramCompiler<B>> std::fmt::Debug for DeviceBinding<B, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBinding")
            .field("mode", &self.mode())
            .field("batch", &self.batch())
            .field("input_dims", &self.request.input_dims)
            .finish_non_exhaustive()
    }
}

impl<B: Backend, C: ProgramCompiler<B>> DeviceBinding<B, C> {
    pub(crate) fn new(session: Session<B, C>, request: BoundRequest) -> Self {
        DeviceBinding { session, request }
    }

    /// The session it runs on.
    pub fn session(&self) -> &Session<B, C> {
        &self.session
    }

    /// The request's batch, if the model has one.
    pub fn batch(&self) -> Option<u64> {
        self.request.batch
    }

    /// How the request binds: [`BindingMode::DirectBind`] at an exact bucket, otherwise
    /// [`BindingMode::Stabilized`].
    pub fn mode(&self) -> BindingMode {
        self.request.route.map_or(BindingMode::Stabilized, |r| r.mode)
    }

    /// The inputs' dimensions, in binding order.
    pub fn input_dims(&self) -> &[Vec<u64>] {
        &self.request.input_dims
    }

    /// The outputs' dimensions, in binding order.
    pub fn output_dims(&self) -> &[Vec<u64>] {
        &self.request.output_dims
    }

    /// Replaces input `index`'s buffer (binding order; see [`Session::signature`]). It must hold the
    /// input's bytes and be aligned for its element type; on error the binding is unchanged.
    pub fn set_input(&mut self, index: usize, data: DeviceSlice) -> Result<()> {
        let specs = self.session.signature().inputs();
        let spec = specs.get(index).ok_or(DispatchError::NoSuchTensor { role: "input", index, count: specs.len() })?;
        let needed = request_bytes(spec, &self.request.input_dims[index])?;
        let slice = checked_device_buffer("input", spec, needed, data)?;
        self.request.io.set(index, slice);
        Ok(())
    }

    /// Replaces output `index`'s buffer, checked as [`DeviceBinding::set_input`].
    pub fn set_output(&mut self, index: usize, data: DeviceSlice) -> Result<()> {
        let specs = self.session.signature().outputs();
        let spec = specs.get(index).ok_or(DispatchError::NoSuchTensor { role: "output", index, count: specs.len() })?;
        let needed = request_bytes(spec, &self.request.output_dims[index])?;
        let slice = checked_device_buffer("output", spec, needed, data)?;
        self.request.io.set(self.request.io.inputs + index, slice);
        Ok(())
    }

    /// Runs the request and waits for it.
    pub fn run(&self) -> Result<RunInfo> {
        self.enqueue()?.wait()
    }

    /// Enqueues the request; the outputs are ready when the returned [`Pending`] is waited for (or
    /// dropped). The bound device memory must stay valid until then.
    pub fn enqueue(&self) -> Result<Pending<B>> {
        self.session.enqueue_with(|inner, ctx| inner.run_bound(ctx, &self.request))
    }
}
