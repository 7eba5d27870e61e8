//! The host backend's device.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::api::{Device, DeviceBuffer};
use crate::code::{CodeObject, KernelSource};
use crate::error::{Error, Result};
use crate::host::counters::{Counters, HostCounters};
use crate::host::graph::{HostGraph, HostGraphExec};
use crate::host::kernels::{self, RegisteredKernel};
use crate::host::memory::{AddressReuse, AddressSpace};
use crate::host::pinned::HostPinnedBuffer;
use crate::host::stream::{HostEvent, HostStream, StreamShared, forbid_during_capture};
use crate::host::{HostBackend, HostKernel};
use crate::pinning::{PinGuard, check_pinned};
use crate::types::{BackendKind, DeviceInfo, DevicePtr, MemoryInfo};

/// How a host device behaves. Built once, passed to [`HostDevice::with_config`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    /// Whether freed device addresses are handed out again.
    pub address_reuse: AddressReuse,
    /// Simulated device memory, in bytes; allocations past it fail with out-of-memory.
    pub memory_bytes: u64,
    /// An injected fault: after this many kernel and graph launches the device is lost, as a GPU is
    /// after an illegal address, and every later launch, copy and synchronize on it fails with
    /// [`Error::DeviceLost`]. `None` (the default): the device never faults.
    pub lose_after_launches: Option<u64>,
}

impl Default for HostConfig {
    fn default() -> HostConfig {
        HostConfig { address_reuse: AddressReuse::Immediate, memory_bytes: 16 << 30, lose_after_launches: None }
    }
}

pub(crate) struct DeviceShared {
    pub(crate) info: DeviceInfo,
    pub(crate) memory: Mutex<AddressSpace>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) next_id: AtomicU64,
    pub(crate) streams: Mutex<Vec<Weak<StreamShared>>>,
    pub(crate) global_captures: Mutex<Vec<Weak<StreamShared>>>,
    deferred: Mutex<Vec<Error>>,
    /// Launches left before the injected fault ([`HostConfig::lose_after_launches`]); `u64::MAX`: never.
    launches_left: AtomicU64,
}

impl DeviceShared {
    /// Records an error met where it cannot be returned (a destructor).
    pub(crate) fn defer(&self, error: Error) {
        self.deferred.lock().push(error);
    }

    /// Fails with [`Error::DeviceLost`] once the injected fault has happened.
    pub(crate) fn check_alive(&self) -> Result<()> {
        match self.launches_left.load(Ordering::Relaxed) {
            0 => Err(self.lost()),
            _ => Ok(()),
        }
    }

    /// Counts one launch towards the injected fault; fails if the device is (now) lost.
    pub(crate) fn count_launch(&self) -> Result<()> {
        let counted = self.launches_left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| match left {
            0 | u64::MAX => None,
            n => Some(n - 1),
        });
        match counted {
            Err(0) | Ok(1) => Err(self.lost()),
            _ => Ok(()),
        }
    }

    fn lost(&self) -> Error {
        Error::DeviceLost {
            backend: BackendKind::Host,
            ordinal: self.info.ordinal,
            reason: "injected fault (HostConfig::lose_after_launches)".into(),
        }
    }
}

/// A device of the host backend: a simulated GPU with its own address space, streams and graphs.
/// Each [`HostDevice::with_config`] (and each [`crate::Backend::open`]) makes an independent device,
/// so tests do not share memory or counters.
///
/// # Thread safety
/// `Send + Sync`, cheap to clone.
#[derive(Clone)]
pub struct HostDevice {
    pub(crate) shared: Arc<DeviceShared>,
}

impl std::fmt::Debug for HostDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostDevice").field("ordinal", &self.shared.info.ordinal).finish_non_exhaustive()
    }
}

/// How many simulated devices the host backend offers.
pub const HOST_DEVICE_COUNT: usize = 4;

/// The architecture string of host devices, as used in cache keys.
pub const HOST_ARCH: &str = "host-v1";

pub(crate) fn host_info(ordinal: usize, memory_bytes: u64) -> DeviceInfo {
    DeviceInfo {
        backend: BackendKind::Host,
        ordinal,
        name: format!("saggar host device {ordinal}"),
        arch: HOST_ARCH.to_string(),
        total_memory: memory_bytes,
        driver_version: concat!("saggar-host ", env!("CARGO_PKG_VERSION")).to_string(),
    }
}

impl HostDevice {
    /// Opens simulated device `ordinal` with `config`.
    pub fn with_config(ordinal: usize, config: HostConfig) -> Result<HostDevice> {
        if ordinal >= HOST_DEVICE_COUNT {
            return Err(Error::NoSuchDevice { backend: BackendKind::Host, ordinal, count: HOST_DEVICE_COUNT });
        }
        let counters = Arc::new(Counters::default());
        Ok(HostDevice {
            shared: Arc::new(DeviceShared {
                info: host_info(ordinal, config.memory_bytes),
                memory: Mutex::new(AddressSpace::new(
                    ordinal,
                    config.address_reuse,
                    config.memory_bytes,
                    counters.clone(),
                )),
                counters,
                next_id: AtomicU64::new(1),
                streams: Mutex::new(Vec::new()),
                global_captures: Mutex::new(Vec::new()),
                deferred: Mutex::new(Vec::new()),
                launches_left: AtomicU64::new(match config.lose_after_launches {
                    Some(n) => n.saturating_add(1).min(u64::MAX - 1),
                    None => u64::MAX,
                }),
            }),
        })
    }

    /// A snapshot of this device's counters.
    pub fn counters(&self) -> HostCounters {
        self.shared.counters.snapshot()
    }

    fn check(&self, op: &'static str) -> Result<()> {
        check_pinned(op, BackendKind::Host, self.shared.info.ordinal)
    }
}

/// Device memory of the host backend; freed on drop.
pub struct HostDeviceBuffer {
    device: Arc<DeviceShared>,
    ptr: DevicePtr,
    len: usize,
}

impl std::fmt::Debug for HostDeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostDeviceBuffer").field("ptr", &self.ptr).field("len", &self.len).finish()
    }
}

impl DeviceBuffer for HostDeviceBuffer {
    fn ptr(&self) -> DevicePtr {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for HostDeviceBuffer {
    fn drop(&mut self) {
        if let Err(e) = self.device.memory.lock().free(self.ptr) {
            self.device.defer(e);
        }
    }
}

/// A loaded module of the host backend.
pub struct HostModule {
    ordinal: usize,
    kernels: HashMap<String, RegisteredKernel>,
}

impl std::fmt::Debug for HostModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostModule")
            .field("device", &self.ordinal)
            .field("kernels", &self.kernels.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl crate::api::Module for HostModule {
    type Backend = HostBackend;

    fn kernel(&self, name: &str) -> Result<HostKernel> {
        match self.kernels.get(name) {
            Some(registered) => Ok(HostKernel { ordinal: self.ordinal, registered: registered.clone() }),
            None => {
                let mut names: Vec<_> = self.kernels.keys().map(String::as_str).collect();
                names.sort_unstable();
                Err(Error::NoSuchKernel {
                    kernel: name.to_string(),
                    module: "host plan".into(),
                    available: names.join(", "),
                })
            }
        }
    }
}

impl Device for HostDevice {
    type Backend = HostBackend;

    fn info(&self) -> &DeviceInfo {
        &self.shared.info
    }

    fn pin(&self) -> Result<PinGuard> {
        Ok(PinGuard::push(BackendKind::Host, self.shared.info.ordinal, None))
    }

    fn memory_info(&self) -> Result<MemoryInfo> {
        let memory = self.shared.memory.lock();
        Ok(MemoryInfo { free: memory.capacity() - memory.used(), total: memory.capacity() })
    }

    fn create_stream(&self) -> Result<HostStream> {
        self.check("device.create_stream")?;
        HostStream::new(self.shared.clone())
    }

    fn create_event(&self) -> Result<HostEvent> {
        self.check("device.create_event")?;
        Ok(HostEvent::new(self.shared.info.ordinal, true))
    }

    fn create_untimed_event(&self) -> Result<HostEvent> {
        self.check("device.create_untimed_event")?;
        Ok(HostEvent::new(self.shared.info.ordinal, false))
    }

    fn alloc(&self, bytes: usize) -> Result<HostDeviceBuffer> {
        self.check("device.alloc")?;
        forbid_during_capture(&self.shared, "device.alloc")?;
        let ptr = self.shared.memory.lock().alloc(bytes)?;
        Ok(HostDeviceBuffer { device: self.shared.clone(), ptr, len: bytes })
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<HostPinnedBuffer> {
        self.check("device.alloc_pinned")?;
        forbid_during_capture(&self.shared, "device.alloc_pinned")?;
        crate::rules::check_pinned_size("device.alloc_pinned", bytes, self.shared.info.total_memory)?;
        HostPinnedBuffer::new(bytes, &self.shared)
    }

    fn compile(&self, source: &KernelSource) -> Result<CodeObject> {
        kernels::compile(source)
    }

    fn load_module(&self, code: &CodeObject) -> Result<HostModule> {
        self.check("device.load_module")?;
        Ok(HostModule { ordinal: self.shared.info.ordinal, kernels: kernels::load(code)? })
    }

    fn create_blas(&self, config: &crate::blas::BlasConfig) -> Result<crate::host::HostBlas> {
        self.check("device.create_blas")?;
        crate::host::HostBlas::new(self, config)
    }

    fn instantiate(&self, graph: &HostGraph) -> Result<HostGraphExec> {
        self.check("device.instantiate")?;
        HostGraphExec::instantiate(self.shared.clone(), graph)
    }

    fn synchronize(&self) -> Result<()> {
        self.check("device.synchronize")?;
        forbid_during_capture(&self.shared, "device.synchronize")?;
        let streams: Vec<_> = {
            let mut list = self.shared.streams.lock();
            list.retain(|w| w.strong_count() > 0);
            list.iter().filter_map(Weak::upgrade).collect()
        };
        let mut first = Ok(());
        for stream in streams {
            let r = stream.wait_idle();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    fn take_deferred_errors(&self) -> Vec<Error> {
        std::mem::take(&mut *self.shared.deferred.lock())
    }
}
