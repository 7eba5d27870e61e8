//! The host backend: a CPU simulator of a GPU that reproduces the hazards GPU runtimes must handle.
//!
//! - Device memory is a simulated address space ([`AddressReuse`]): pointers are numbers, freed memory
//!   is unmapped, and a freed address can be handed to the next allocation at once.
//! - Streams run asynchronously on worker threads; results are visible after a synchronisation.
//! - Capture records operations with their pointers; replay uses those pointers.
//! - Calls CUDA and HIP forbid during capture fail here too.
//! - Kernels are host functions registered by name ([`register_kernel`]).
//! - Matmuls ([`HostBlas`]) run the BLAS-Lt descriptions in `f32` on the stream's worker.
//! - Counters ([`HostCounters`]) show launches, copies, allocations and live bytes, for leak tests.

mod blas;
mod counters;
mod device;
mod graph;
mod kernels;
mod memory;
mod pinned;
mod stream;

use std::sync::Arc;

pub use blas::{HostBlas, MATMUL_KERNEL};
pub use counters::HostCounters;
pub use device::{HOST_ARCH, HOST_DEVICE_COUNT, HostConfig, HostDevice, HostDeviceBuffer, HostModule};
pub use graph::{HOST_GRAPH_NODE_BYTES, HostGraph, HostGraphExec};
pub use kernels::{HostKernelFn, KernelContext, register_kernel};
pub use memory::{ALIGNMENT, AddressReuse, POISON};
pub use pinned::HostPinnedBuffer;
pub use stream::{HostEvent, HostStream};

use crate::api::{Backend, Kernel};
use crate::error::Result;
use crate::types::{BackendKind, DeviceInfo, KernelSignature};

/// The host backend. See the module documentation.
#[derive(Debug)]
pub enum HostBackend {}

impl Backend for HostBackend {
    const KIND: BackendKind = BackendKind::Host;
    type Device = HostDevice;
    type Stream = HostStream;
    type Event = HostEvent;
    type DeviceBuffer = HostDeviceBuffer;
    type PinnedBuffer = HostPinnedBuffer;
    type Module = HostModule;
    type Kernel = HostKernel;
    type Graph = HostGraph;
    type GraphExec = HostGraphExec;
    type Blas = HostBlas;

    fn enumerate() -> Result<Vec<DeviceInfo>> {
        let memory = HostConfig::default().memory_bytes;
        Ok((0..HOST_DEVICE_COUNT).map(|i| device::host_info(i, memory)).collect())
    }

    fn open(ordinal: usize) -> Result<HostDevice> {
        HostDevice::with_config(ordinal, HostConfig::default())
    }
}

/// A kernel of a host module.
#[derive(Clone)]
pub struct HostKernel {
    pub(crate) ordinal: usize,
    pub(crate) registered: kernels::RegisteredKernel,
}

impl std::fmt::Debug for HostKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostKernel")
            .field("name", &self.registered.signature.name)
            .field("device", &self.ordinal)
            .finish()
    }
}

impl Kernel for HostKernel {
    fn signature(&self) -> &KernelSignature {
        &self.registered.signature
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<HostDevice>();
    check::<HostStream>();
    check::<HostEvent>();
    check::<HostGraphExec>();
    check::<HostPinnedBuffer>();
    check::<Arc<HostDeviceBuffer>>();
}
