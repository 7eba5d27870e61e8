//! The shared GPU layer: devices, pinning, memory, pinned buffers, events, streams, capture rules,
//! modules, graphs and deferred releases, written once and generic over a vendor [`Driver`].
//!
//! # Design
//! The split is wgpu-core's over wgpu-hal, and cubecl-runtime's over its backends: a vendor implements
//! [`Driver`] with raw calls only (handle types, `unsafe` entry points returning `Result`, the mapping
//! of its error codes onto [`ErrorClass`], and the hooks where vendors really differ: loading a code
//! object, a kernel's limits, updating an executable graph). Everything else is here: the checks
//! ([`crate::rules`], shared with the host backend), the per-thread current context or device, pinning, the
//! capture registry and its rules, stream progress, and the releases destructors postpone during a
//! capture or record on their device. A backend is [`GpuBackend<D>`]; `cuda` and `hip` name their
//! types as aliases of this module's (`CudaStream = gpu::Stream<CudaDriver>`).
//!
//! Everything is monomorphised: no virtual call on the launch, copy or replay path; those paths make
//! exactly the driver call they enqueue, after checks that read no lock (pinning and the current
//! context are thread-local compares, capture state an atomic load).
//!
//! # Validation happens once
//! Each check sits at one layer. Arguments against the kernel's signature and the launch configuration
//! against the kernel's limits are checked in [`crate::rules::check_launch`] on every eager launch (the driver
//! would otherwise read past the argument array); a graph replay checks only that the executable graph
//! is live and of this device, because its launches were checked when they were captured; ranges of
//! device memory are checked when a [`crate::DeviceSlice`] is made, not again when a copy uses it.
//!
//! # Safety
//! Every `unsafe` block carries a `// SAFETY:` comment. Raw handles are owned by exactly one value and
//! released once, from its destructor; objects hold their device by `Arc`, so no handle outlives the
//! vendor state (context) it belongs to.

pub mod blas;
mod capture_registry;
mod device;
mod driver;
mod event;
mod graph;
mod launch;
mod load_gate;
mod memory;
mod module;
mod progress;
mod stream;

use std::fmt;
use std::marker::PhantomData;

pub use blas::{GpuBlas, LtSpec, probe_library};
pub use capture_registry::DriverFault;
pub use device::{Device, DeviceShared, take_orphaned_errors};
pub use driver::{Driver, ErrorClass, Globals, LoadedModule, Opened, ThreadCaptures, UpdateFailure};
pub use event::Event;
pub use graph::{Graph, GraphExec, GraphInner};
pub use launch::{CapturedOp, KernelLaunch, PackedArgs};
pub use memory::{DeviceBuffer, PinnedBuffer};
pub use module::{Kernel, Module};
pub use stream::{Stream, StreamShared};

#[cfg(feature = "cuda")]
pub(crate) use device::{forget_current, orphan};
#[cfg(all(test, feature = "hip"))]
pub(crate) use device::{map_fault, unsafe_calls_forbidden};

use crate::api::Backend;
use crate::error::Result;
use crate::types::{BackendKind, DeviceInfo};

/// Names a driver's backend types: `gpu_aliases!(CudaDriver => CudaBackend, CudaDevice, CudaStream,
/// CudaEvent, CudaDeviceBuffer, CudaPinnedBuffer, CudaModule, CudaKernel, CudaGraph, CudaGraphExec)`,
/// in that order, each an alias of this module's type of the same role.
#[macro_export]
#[doc(hidden)]
macro_rules! gpu_aliases {
    ($driver:ident => $($alias:ident),* $(,)?) => {
        $crate::gpu_aliases!(@ $driver; $($alias),*; GpuBackend, Device, Stream, Event, DeviceBuffer, PinnedBuffer,
            Module, Kernel, Graph, GraphExec);
    };
    (@ $driver:ident; $($alias:ident),*; $($ty:ident),*) => {
        $(
            #[doc = concat!("This backend's [`", stringify!($ty), "`](crate::gpu::", stringify!($ty), ").")]
            pub type $alias = $crate::gpu::$ty<$driver>;
        )*
    };
}

/// The backend of a GPU driver: a family of the types above. Never instantiated.
pub struct GpuBackend<D: Driver> {
    _never: std::convert::Infallible,
    _driver: PhantomData<fn() -> D>,
}

impl<D: Driver> fmt::Debug for GpuBackend<D> {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self._never {}
    }
}

impl<D: Driver> Backend for GpuBackend<D> {
    const KIND: BackendKind = D::KIND;
    type Device = Device<D>;
    type Stream = Stream<D>;
    type Event = Event<D>;
    type DeviceBuffer = DeviceBuffer<D>;
    type PinnedBuffer = PinnedBuffer<D>;
    type Module = Module<D>;
    type Kernel = Kernel<D>;
    type Graph = Graph<D>;
    type GraphExec = GraphExec<D>;
    type Blas = GpuBlas<D>;

    fn enumerate() -> Result<Vec<DeviceInfo>> {
        D::enumerate()
    }

    fn open(ordinal: usize) -> Result<Device<D>> {
        device::open(ordinal)
    }
}

/// Every handle type of every GPU backend is `Send + Sync` (each type's `# Thread safety` section says
/// why), checked once for all drivers.
#[allow(dead_code)]
fn _assert_send_sync<D: Driver>() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Device<D>>();
    send_sync::<Stream<D>>();
    send_sync::<Event<D>>();
    send_sync::<DeviceBuffer<D>>();
    send_sync::<PinnedBuffer<D>>();
    send_sync::<Module<D>>();
    send_sync::<Kernel<D>>();
    send_sync::<Graph<D>>();
    send_sync::<GraphExec<D>>();
    send_sync::<GpuBlas<D>>();
}

/// For the backends' no-driver tests: enumerating, opening device 0 and selecting the backend, each
/// checked not to panic.
#[cfg(test)]
#[allow(clippy::type_complexity)]
pub(crate) fn call_entry_points<D: Driver>() -> (Result<Vec<DeviceInfo>>, Result<Device<D>>, Result<Vec<DeviceInfo>>) {
    let enumerated = std::panic::catch_unwind(GpuBackend::<D>::enumerate).expect("enumerate panicked");
    let opened = std::panic::catch_unwind(|| GpuBackend::<D>::open(0)).expect("open panicked");
    let selected = std::panic::catch_unwind(|| crate::enumerate(D::KIND)).expect("select panicked");
    (enumerated, opened, selected)
}

/// For the backends' no-driver tests: every error is [`crate::Error::BackendUnavailable`] of `backend`
/// with a reason that starts with `reason`, and says so when displayed.
#[cfg(test)]
pub(crate) fn assert_all_unavailable(
    errors: impl IntoIterator<Item = crate::Error>,
    backend: BackendKind,
    reason: &str,
) {
    for err in errors {
        match &err {
            crate::Error::BackendUnavailable { backend: b, reason: r } if *b == backend => {
                assert!(r.starts_with(reason), "reason: {r}");
            }
            other => panic!("expected BackendUnavailable of {backend:?}, got {other:?}"),
        }
        assert!(err.is_unavailable());
        assert!(err.to_string().starts_with(&format!("{backend} backend unavailable: {reason}")), "{err}");
    }
}
