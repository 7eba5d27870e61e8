//! [`Engine`]: a saggar session of an ONNX model on a backend chosen at run time, behind one
//! object-safe trait, so the Python classes hold `Arc<dyn Engine>` and never name a backend.
//!
//! A session is made through `saggar_device::visit_backend` (the backend becomes a type once);
//! one virtual call per run reaches the session's own generic code. A session group
//! (`SessionOptions.devices`) serves host tensors only: device tensors belong to one device.

use std::any::Any;
use std::sync::Arc;

use parking_lot::Mutex;
use saggar_device::{Backend, BackendKind, BackendVisitor, Device, DeviceBuffer, DevicePtr, DeviceSlice, Stream};
use saggar_dispatch::{
    DeviceBinding, DeviceTensor, DispatchError, HostTensor, OwnedTensor, Routing, RunInfo, Session, SessionGroup,
    StatsSnapshot,
};
use saggar_onnx::{OnnxCompiler, OnnxModel};
use saggar_shape::Signature;

use crate::options::Settings;

type Result<T> = std::result::Result<T, DispatchError>;

/// A session of one ONNX model, on one device or a group of devices.
///
/// # Thread safety
/// `Send + Sync`: every method takes `&self`; runs from many threads go to the dispatcher's
/// concurrent run contexts.
pub(crate) trait Engine: Send + Sync {
    /// The backend.
    fn backend(&self) -> BackendKind;
    /// The device ordinal (the first device of a group).
    fn device_id(&self) -> usize;
    /// The model's inputs and outputs in binding order.
    fn signature(&self) -> &Signature;
    /// The model's batch buckets.
    fn buckets(&self) -> Vec<u64>;
    /// The output dimensions of a request with these input shapes, checked as a run checks them.
    fn output_dims(&self, inputs: &[HostTensor<'_>]) -> Result<Vec<Vec<u64>>>;
    /// Runs host tensors into host buffers (binding order).
    fn run_into(&self, inputs: &[HostTensor<'_>], outputs: &mut [&mut [u8]]) -> Result<RunInfo>;
    /// Runs a host request into outputs the session allocates (a model whose output extents depend
    /// on values it computes: see `Session::run`).
    fn run_owned(&self, inputs: &[HostTensor<'_>]) -> Result<Vec<OwnedTensor>>;
    /// Validates a device request once (see `Session::bind_device`).
    fn bind(&self, inputs: &[DeviceTensor<'_>], outputs: &[DeviceTensor<'_>]) -> Result<Box<dyn Bound>>;
    /// Device memory of `bytes` bytes on the session's device.
    fn alloc(&self, bytes: usize) -> Result<DeviceMemory>;
    /// Copies device memory to the host and waits.
    fn download(&self, src: DeviceSlice, dst: &mut [u8]) -> Result<()>;
    /// Copies host memory to the device and waits.
    fn upload(&self, src: &[u8], dst: DeviceSlice) -> Result<()>;
    /// Waits for all work on the session's device (other libraries' streams included).
    fn synchronize(&self) -> Result<()>;
    /// Counters, one snapshot per device.
    fn stats(&self) -> Vec<StatsSnapshot>;
}

/// A device request validated once ([`DeviceBinding`]), its buffers replaceable.
pub(crate) trait Bound: Send + Sync {
    fn set_input(&mut self, index: usize, data: DeviceSlice) -> Result<()>;
    fn set_output(&mut self, index: usize, data: DeviceSlice) -> Result<()>;
    fn run(&self) -> Result<RunInfo>;
}

/// Device memory a session allocated for the caller, freed when the last holder lets go.
pub(crate) struct DeviceMemory {
    ptr: DevicePtr,
    len: usize,
    _buffer: Box<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for DeviceMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceMemory").field("ptr", &self.ptr).field("len", &self.len).finish()
    }
}

impl DeviceMemory {
    /// Memory the caller owns (a DLPack tensor, a raw pointer), kept alive by `owner` (if any) as
    /// long as this lives.
    pub(crate) fn external(ptr: DevicePtr, len: usize, owner: Box<dyn Any + Send + Sync>) -> DeviceMemory {
        DeviceMemory { ptr, len, _buffer: owner }
    }

    /// The first address.
    pub(crate) fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// The first `len` bytes (at most the allocation's).
    pub(crate) fn slice(&self, len: usize) -> DeviceSlice {
        DeviceSlice::from_raw(self.ptr, len.min(self.len))
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// One session on one device, with a stream for the caller's own copies.
struct Single<B: Backend> {
    session: Session<B, OnnxCompiler>,
    copies: Mutex<Option<B::Stream>>,
}

impl<B: Backend> Single<B> {
    /// Runs `f` on the copy stream (created on first use), pinned to the device.
    fn with_stream<R>(&self, f: impl FnOnce(&B::Stream) -> saggar_device::Result<R>) -> Result<R> {
        let device = self.session.device();
        let _pin = device.pin()?;
        let mut stream = self.copies.lock();
        let stream = match &mut *stream {
            Some(s) => s,
            none => none.insert(device.create_stream()?),
        };
        Ok(f(stream)?)
    }
}

impl<B: Backend> Engine for Single<B> {
    fn backend(&self) -> BackendKind {
        B::KIND
    }

    fn device_id(&self) -> usize {
        self.session.device().info().ordinal
    }

    fn signature(&self) -> &Signature {
        self.session.signature()
    }

    fn buckets(&self) -> Vec<u64> {
        self.session.buckets()
    }

    fn output_dims(&self, inputs: &[HostTensor<'_>]) -> Result<Vec<Vec<u64>>> {
        self.session.output_dims(inputs)
    }

    fn run_into(&self, inputs: &[HostTensor<'_>], outputs: &mut [&mut [u8]]) -> Result<RunInfo> {
        self.session.run_into(inputs, outputs)
    }

    fn run_owned(&self, inputs: &[HostTensor<'_>]) -> Result<Vec<OwnedTensor>> {
        self.session.run(inputs)
    }

    fn bind(&self, inputs: &[DeviceTensor<'_>], outputs: &[DeviceTensor<'_>]) -> Result<Box<dyn Bound>> {
        Ok(Box::new(self.session.bind_device(inputs, outputs)?))
    }

    fn alloc(&self, bytes: usize) -> Result<DeviceMemory> {
        let device = self.session.device();
        let _pin = device.pin()?;
        let buffer = device.alloc(bytes.max(1))?;
        Ok(DeviceMemory { ptr: buffer.ptr(), len: buffer.len(), _buffer: Box::new(buffer) })
    }

    fn download(&self, src: DeviceSlice, dst: &mut [u8]) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        self.with_stream(|s| s.download(src, dst))
    }

    fn upload(&self, src: &[u8], dst: DeviceSlice) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.with_stream(|s| s.upload(src, dst))
    }

    fn synchronize(&self) -> Result<()> {
        let device = self.session.device();
        let _pin = device.pin()?;
        Ok(device.synchronize()?)
    }

    fn stats(&self) -> Vec<StatsSnapshot> {
        vec![self.session.stats()]
    }
}

impl<B: Backend> Bound for DeviceBinding<B, OnnxCompiler> {
    fn set_input(&mut self, index: usize, data: DeviceSlice) -> Result<()> {
        DeviceBinding::set_input(self, index, data)
    }

    fn set_output(&mut self, index: usize, data: DeviceSlice) -> Result<()> {
        DeviceBinding::set_output(self, index, data)
    }

    fn run(&self) -> Result<RunInfo> {
        DeviceBinding::run(self)
    }
}

/// One session per device; host tensors only.
struct Group<B: Backend> {
    group: SessionGroup<B, OnnxCompiler>,
}

fn group_only_hosts() -> DispatchError {
    DispatchError::Config(
        "a session over several devices (SessionOptions.devices) serves host tensors only: run io_binding on a \
         session of one device"
            .into(),
    )
}

impl<B: Backend> Engine for Group<B> {
    fn backend(&self) -> BackendKind {
        B::KIND
    }

    fn device_id(&self) -> usize {
        self.group.sessions()[0].device().info().ordinal
    }

    fn signature(&self) -> &Signature {
        self.group.sessions()[0].signature()
    }

    fn buckets(&self) -> Vec<u64> {
        self.group.sessions()[0].buckets()
    }

    fn output_dims(&self, inputs: &[HostTensor<'_>]) -> Result<Vec<Vec<u64>>> {
        self.group.sessions()[0].output_dims(inputs)
    }

    fn run_into(&self, inputs: &[HostTensor<'_>], outputs: &mut [&mut [u8]]) -> Result<RunInfo> {
        Ok(self.group.run_into(inputs, outputs)?.1)
    }

    fn run_owned(&self, inputs: &[HostTensor<'_>]) -> Result<Vec<OwnedTensor>> {
        Ok(self.group.run(inputs)?.1)
    }

    fn bind(&self, _: &[DeviceTensor<'_>], _: &[DeviceTensor<'_>]) -> Result<Box<dyn Bound>> {
        Err(group_only_hosts())
    }

    fn alloc(&self, _: usize) -> Result<DeviceMemory> {
        Err(group_only_hosts())
    }

    fn download(&self, _: DeviceSlice, _: &mut [u8]) -> Result<()> {
        Err(group_only_hosts())
    }

    fn upload(&self, _: &[u8], _: DeviceSlice) -> Result<()> {
        Err(group_only_hosts())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn stats(&self) -> Vec<StatsSnapshot> {
        self.group.stats()
    }
}

/// What a session is made of: the model, its settings, and the device(s) of the chosen backend.
pub(crate) struct Recipe<'a> {
    pub(crate) model: OnnxModel,
    pub(crate) settings: &'a Settings,
    pub(crate) device_id: usize,
}

/// An error before or during session creation: invalid settings (raised as they are) or the
/// session's own error.
pub(crate) enum CreateError {
    Settings(pyo3::PyErr),
    Session(DispatchError),
}

impl From<DispatchError> for CreateError {
    fn from(e: DispatchError) -> CreateError {
        CreateError::Session(e)
    }
}

impl From<saggar_device::Error> for CreateError {
    fn from(e: saggar_device::Error) -> CreateError {
        CreateError::Session(e.into())
    }
}

impl BackendVisitor for Recipe<'_> {
    type Output = std::result::Result<Arc<dyn Engine>, CreateError>;

    fn visit<B: Backend>(self) -> Self::Output {
        let compiler = Arc::new(OnnxCompiler::new(self.model, self.settings.onnx_options()));
        let config = self.settings.session_config(&compiler).map_err(CreateError::Settings)?;
        match &self.settings.devices {
            Some(ordinals) if B::KIND != BackendKind::Host => {
                let devices = ordinals.iter().map(|&o| B::open(o)).collect::<saggar_device::Result<Vec<_>>>()?;
                let group = SessionGroup::<B, _>::new(devices, compiler, config, Routing::LeastLoaded, &|_, _| {})?;
                Ok(Arc::new(Group { group }))
            }
            _ => {
                let device = B::open(self.device_id)?;
                let session = Session::builder(device, compiler).config(config).build()?;
                Ok(Arc::new(Single { session, copies: Mutex::new(None) }))
            }
        }
    }
}

/// Creates the session `recipe` describes on backend `kind`.
pub(crate) fn create(kind: BackendKind, recipe: Recipe<'_>) -> std::result::Result<Arc<dyn Engine>, CreateError> {
    saggar_device::visit_backend(kind, recipe)?
}
