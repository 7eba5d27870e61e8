//! The sessions of one model behind one object-safe trait, so the server is written once and the
//! backend is chosen at run time: [`start`] picks the backend type once (saggar-device's
//! `visit_backend`) and returns an [`Executor`] over one session per device (a `SessionGroup`:
//! the first device compiles, the others load what it published). A batch runs either written in
//! place ([`Executor::request`], the dispatcher's staged request: the inputs merged straight into
//! pinned staging, the outputs read straight from the pinned read-back buffer) or, where the
//! session cannot serve it that way, through [`Executor::run`] (which pads, gathers and scatters).

use std::sync::Arc;

use saggar_device::{Backend, BackendKind, BackendVisitor, Device};
use saggar_dispatch::{
    DispatchError, HostTensor, OwnedTensor, Request, Routing, Session, SessionConfig, SessionGroup, StatsSnapshot,
};
use saggar_onnx::OnnxCompiler;

/// One device's memory, for the metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceMemory {
    /// `backend:ordinal`, such as `cuda:0`.
    pub device: String,
    /// The device's name.
    pub name: String,
    /// Bytes in use (total less free).
    pub used: u64,
    /// Bytes in total.
    pub total: u64,
}

/// A model's sessions, one per device.
///
/// # Thread safety
/// `Send + Sync`: every method may be called from any number of threads at once (each run leases
/// its own run context in its session).
pub trait Executor: Send + Sync {
    /// How many devices (sessions).
    fn devices(&self) -> usize;
    /// Runs a request on device `device` (`< devices()`).
    fn run(&self, device: usize, inputs: &[HostTensor<'_>]) -> Result<Vec<OwnedTensor>, DispatchError>;
    /// Leases a batch written in place on device `device` (`< devices()`) for inputs of
    /// `input_dims` (in the model's order; a padded axis at one of its buckets). Fails where the
    /// session cannot serve those dimensions in place (a model served per shape, an extent above
    /// the axis's buckets); [`Executor::run`] serves them.
    fn request(&self, device: usize, input_dims: &[Vec<u64>]) -> Result<Box<dyn StagedBatch + '_>, DispatchError>;
    /// Each session's counters.
    fn stats(&self) -> Vec<StatsSnapshot>;
    /// Each device's memory.
    fn memory(&self) -> Vec<DeviceMemory>;
    /// The batch buckets served.
    fn buckets(&self) -> Vec<u64>;
    /// The padded axis's buckets (empty without one).
    fn axis_buckets(&self) -> Vec<u64>;
}

impl std::fmt::Debug for dyn Executor + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").field("devices", &self.devices()).finish_non_exhaustive()
    }
}

/// A batch written in place ([`saggar_dispatch::Request`]) as bytes, behind an object-safe trait.
/// Views are of the real rows: the batch's rows, the padded axis at the extent it was made for.
pub trait StagedBatch {
    /// Input `input`'s bytes in pinned staging, to be written whole before [`StagedBatch::run`].
    fn input_mut(&mut self, input: usize) -> Result<&mut [u8], DispatchError>;
    /// Runs the batch and waits for its outputs.
    fn run(&mut self) -> Result<(), DispatchError>;
    /// Output `output`'s bytes in the pinned read-back buffer (after a successful run).
    fn output(&self, output: usize) -> Result<&[u8], DispatchError>;
    /// Every output's dimensions, in the model's order.
    fn output_dims(&self) -> &[Vec<u64>];
}

impl<B: Backend> StagedBatch for Request<'_, B, OnnxCompiler> {
    fn input_mut(&mut self, input: usize) -> Result<&mut [u8], DispatchError> {
        self.input_bytes_mut(input)
    }

    fn run(&mut self) -> Result<(), DispatchError> {
        Request::run(self).map(drop)
    }

    fn output(&self, output: usize) -> Result<&[u8], DispatchError> {
        self.output_bytes(output)
    }

    fn output_dims(&self) -> &[Vec<u64>] {
        Request::output_dims(self)
    }
}

struct Sessions<B: Backend> {
    sessions: Vec<Session<B, OnnxCompiler>>,
}

impl<B: Backend> Executor for Sessions<B> {
    fn devices(&self) -> usize {
        self.sessions.len()
    }

    fn run(&self, device: usize, inputs: &[HostTensor<'_>]) -> Result<Vec<OwnedTensor>, DispatchError> {
        self.sessions[device % self.sessions.len()].run(inputs)
    }

    fn request(&self, device: usize, input_dims: &[Vec<u64>]) -> Result<Box<dyn StagedBatch + '_>, DispatchError> {
        Ok(Box::new(self.sessions[device % self.sessions.len()].request_shaped(input_dims)?))
    }

    fn stats(&self) -> Vec<StatsSnapshot> {
        self.sessions.iter().map(Session::stats).collect()
    }

    fn memory(&self) -> Vec<DeviceMemory> {
        self.sessions
            .iter()
            .filter_map(|s| {
                let device = s.device();
                let _pin = device.pin().ok()?;
                let m = device.memory_info().ok()?;
                let info = device.info();
                Some(DeviceMemory {
                    device: format!("{}:{}", B::KIND.name(), info.ordinal),
                    name: info.name.clone(),
                    used: m.total.saturating_sub(m.free),
                    total: m.total,
                })
            })
            .collect()
    }

    fn buckets(&self) -> Vec<u64> {
        self.sessions.first().map(Session::buckets).unwrap_or_default()
    }

    fn axis_buckets(&self) -> Vec<u64> {
        self.sessions.first().map(Session::axis_buckets).unwrap_or_default()
    }
}

struct Start {
    ordinals: Vec<usize>,
    compiler: Arc<OnnxCompiler>,
    config: SessionConfig,
}

impl BackendVisitor for Start {
    type Output = Result<Arc<dyn Executor>, String>;

    fn visit<B: Backend>(self) -> Self::Output {
        let devices: Vec<B::Device> = self
            .ordinals
            .iter()
            .map(|&o| B::open(o).map_err(|e| format!("{} device {o}: {e}", B::KIND.name())))
            .collect::<Result<_, _>>()?;
        let sessions = if devices.len() == 1 {
            let device = devices.into_iter().next().expect("one device");
            vec![Session::builder(device, self.compiler).config(self.config).build().map_err(|e| e.to_string())?]
        } else {
            let group = SessionGroup::<B, OnnxCompiler>::new(
                devices,
                self.compiler,
                self.config,
                Routing::RoundRobin,
                &|_, _| {},
            )
            .map_err(|e| e.to_string())?;
            group.sessions().to_vec()
        };
        Ok(Arc::new(Sessions { sessions }))
    }
}

/// Creates the sessions of `compiler` on `ordinals` of `backend` (every bucket compiled or loaded
/// from the cache before it returns). An empty `ordinals` means every device of the backend.
pub fn start(
    backend: BackendKind,
    ordinals: &[usize],
    compiler: Arc<OnnxCompiler>,
    config: SessionConfig,
) -> Result<Arc<dyn Executor>, String> {
    let ordinals = if ordinals.is_empty() {
        let n = saggar_device::enumerate(backend).map_err(|e| e.to_string())?.len();
        (0..n).collect()
    } else {
        ordinals.to_vec()
    };
    if ordinals.is_empty() {
        return Err(format!("the {} backend has no devices", backend.name()));
    }
    saggar_device::visit_backend(backend, Start { ordinals, compiler, config }).map_err(|e| e.to_string())?
}
