//! Device bindings: a device request validated once and kept, so repeated runs skip validation.
//!
//! [`crate::Session::run_device`] checks every input's name, dtype, shape and buffer on every call:
//! for a 190-input model that is most of the CPU cost of an ultra-fast run. A [`DeviceBinding`]
//! (ONNX Runtime calls the idea IoBinding) does those checks once, when it is made, and checks each
//! buffer as it is changed; a run then compares the binding's pointers with those the context's graph
//! baked and replays it. Everything else is the session's: paths, graph entries, drift handling,
//! padding and slicing, stats.

use saggar_device::{Backend, DeviceSlice};
use saggar_shape::TensorSpec;

use crate::compiler::ProgramCompiler;
use crate::context::{DeviceIo, RunContext};
use crate::error::{DispatchError, Result};
use crate::plan::DeviceRoute;
use crate::request::{checked_device_buffer, request_bytes};
use crate::session::{Inner, Pending, Session};
use crate::tensors::{BindingMode, DeviceTensor, RunInfo};

/// A request kept by a [`DeviceBinding`]: its route, shapes and checked buffers, in binding order.
struct BoundRequest {
    /// `None` for requests that are split or run by a per-shape program.
    route: Option<DeviceRoute>,
    /// The request's batch (also for split requests).
    batch: Option<u64>,
    input_dims: Vec<Vec<u64>>,
    output_dims: Vec<Vec<u64>>,
    io: DeviceIo,
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
    fn new(session: Session<B, C>, request: BoundRequest) -> Self {
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
        let slice = checked_buffer("input", self.session.signature().inputs(), &self.request.input_dims, index, data)?;
        self.request.io.set(index, slice);
        Ok(())
    }

    /// Replaces output `index`'s buffer, checked as [`DeviceBinding::set_input`].
    pub fn set_output(&mut self, index: usize, data: DeviceSlice) -> Result<()> {
        let slice =
            checked_buffer("output", self.session.signature().outputs(), &self.request.output_dims, index, data)?;
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

impl<B: Backend, C: ProgramCompiler<B>> Session<B, C> {
    /// Validates a device request once (names in any order, dtypes, shapes, buffer sizes and
    /// alignment) and keeps it as a [`DeviceBinding`]: runs of the binding skip that validation, so
    /// a repeated request costs a pointer comparison and a graph launch. Change its buffers with
    /// [`DeviceBinding::set_input`] / [`DeviceBinding::set_output`] (each checked as it is set).
    pub fn bind_device(
        &self,
        inputs: &[DeviceTensor<'_>],
        outputs: &[DeviceTensor<'_>],
    ) -> Result<DeviceBinding<B, C>> {
        let inner = &*self.inner;
        let mut io = DeviceIo::default();
        let (request, route) = inner.check_device_request(inputs, outputs, &mut io)?;
        if route.is_none() {
            // A batch no bucket can serve (splitting off) is refused here, not on every run.
            inner.chunks(&request.bindings)?;
        }
        let batch = request.bindings.batch();
        let input_dims = request.ordered.iter().map(|t| t.dims.to_vec()).collect();
        let output_dims = outputs.iter().map(|t| t.dims.to_vec()).collect();
        Ok(DeviceBinding::new(self.clone(), BoundRequest { route, batch, input_dims, output_dims, io }))
    }
}

impl<B: Backend, C: ProgramCompiler<B>> Inner<B, C> {
    /// Runs a [`DeviceBinding`]'s request: its shapes and buffers were checked when they were set.
    fn run_bound(&self, ctx: &mut RunContext<B>, request: &BoundRequest) -> Result<RunInfo> {
        // Split requests and per-shape models plan with the shapes' bindings, which borrow the
        // signature and so are made again here from the kept shapes (validated when the binding
        // was made: this finds their symbol values, it does not stand in for that validation).
        let bindings = || Ok(self.signature.check(&request.input_dims)?);
        self.run_device_checked(ctx, request.route, &request.input_dims, bindings, &request.io)
    }
}

/// `data` checked as the new buffer of tensor `index` of `specs` (with the binding's `dims`).
fn checked_buffer(
    role: &'static str,
    specs: &[TensorSpec],
    dims: &[Vec<u64>],
    index: usize,
    data: DeviceSlice,
) -> Result<DeviceSlice> {
    let spec = specs.get(index).ok_or(DispatchError::NoSuchTensor { role, index, count: specs.len() })?;
    checked_device_buffer(role, spec, request_bytes(spec, &dims[index])?, data)
}
