//! The HIP backend: AMD GPUs through the HIP runtime API (libamdhip64, by way of hip-runtime-sys) and
//! hipRTC, loaded at run time.
//!
//! # Design
//! The module tree mirrors the CUDA backend file for file, so the two can be read side by side: `sys`
//! declares the raw entry points (what hip-runtime-sys provides and what saggar declares itself, and why);
//! `result` turns each HIP and hipRTC call into a `Result` grouped by object; `context` keeps the current
//! device per thread; `device`, `memory`, `stream`, `event`, `module`, `graph` and `rtc` implement the
//! traits of [`crate::api`] with the semantics the host backend defines and the conformance suite checks.
//!
//! - **Linking and loading.** The `hip` feature links libamdhip64 (hip-runtime-sys's build script finds
//!   it under `HIP_PATH`; `HIP_PATH=/usr` for Debian's `libamdhip64-dev`), so it is off by default.
//!   hipRTC is not linked: it is found at run time in libhiprtc (ROCm 6 and later) or libamdhip64
//!   (ROCm 5.x), whichever the installed ROCm ships ([`hiprtc_library`]).
//! - **No device is not a fault.** On a machine without an AMD GPU, `hipGetDeviceCount` fails with
//!   `hipErrorNoDevice` (or reports 0): [`HipBackend::enumerate`] and [`HipBackend::open`] return
//!   [`Error::BackendUnavailable`] with a reason that starts "no HIP device found", `auto` backend
//!   selection moves on, and the conformance suite reports every test skipped with that reason.
//! - **Devices.** HIP acts on the thread's current device. Every operation checks the device pinned to
//!   the thread ([`crate::check_pinned`]) and makes its device current with `hipSetDevice` if saggar has
//!   not already (a thread-local compare on the launch path). [`crate::Device::pin`] makes the device
//!   current and restores the previous one when the guard drops. Destructors switch to their object's
//!   device for the call only; one that runs on a thread that is capturing postpones its release (a
//!   free, an unload) to the end of the capture, where HIP allows it.
//! - **Capture.** saggar's capture modes are HIP's (thread-local by default). Calls HIP forbids during
//!   capture are refused before they reach HIP and invalidate the capture; see `stream` for the rules.
//!   An empty capture is valid and instantiates to a marker that replays as a no-op. Known ROCm graph
//!   pitfalls are handled where they arise: `hipGraphExecUpdate` is slow on large graphs and not atomic
//!   in ROCm, so updates that only change kernel parameters use `hipGraphExecKernelNodeSetParams`, and a
//!   failed update is rolled back (`graph`); graphs captured across several streams can lose their
//!   concurrency on some ROCm releases, which saggar avoids by capturing on one stream (`stream`).
//! - **Errors.** A failed call is [`Error::Vendor`] with HIP's code name (`hipErrorOutOfMemory`) and
//!   description, except where saggar gives the code a meaning: out of memory is [`Error::OutOfMemory`],
//!   capture violations are [`Error::IllegalDuringCapture`] / [`Error::CaptureInvalidated`], a refused
//!   graph update is [`Error::GraphUpdate`], and asynchronous device faults (an illegal address in a
//!   kernel) are [`Error::Async`] when a later call or synchronisation reports them. Destructors record
//!   their errors on the device ([`crate::Device::take_deferred_errors`]); the last handle of a device
//!   leaves its own in [`take_orphaned_errors`].
//!
//! # Thread safety
//! Every handle type is `Send + Sync`; each type's documentation gives the rule it follows. HIP's runtime
//! API is thread-safe for streams, events, memory and modules, and acts on a per-thread current device.
//! Graph objects follow CUDA's rule, which HIP inherits without documenting its own ("Graph objects are
//! not internally synchronized and must not be accessed concurrently from multiple threads"): saggar
//! serialises every call on one graph and the launches of one executable graph with locks of their own.
//! A thread-local or global capture must end on the thread that began it. Code outside saggar that calls
//! `hipSetDevice` on a thread saggar uses must restore the device it found (see `context`).
//!
//! # Safety
//! Every `unsafe` block carries a `// SAFETY:` comment. Raw handles are owned by exactly one value and
//! swapped out (`mem::replace` with null) before they are freed, so nothing is freed twice; objects hold
//! their device by `Arc`; a code object is checked to be whole before `hipModuleLoadData`, which takes no
//! length, reads it.
//!
//! # What is not verified without an AMD GPU
//! Everything that needs a device (memory, streams, launches, capture, graphs) is written against the
//! HIP documentation and ROCm's sources and exercised by the conformance suite on a machine with an AMD
//! GPU (`cargo xtask gpu` with `HIP_PATH` set); on a machine without one, only the no-device path, the
//! error mapping, hipRTC compilation and the pure logic (argument packing, update planning, code-object
//! checks) run. `docs/amd.md` lists the details.

mod context;
mod device;
mod event;
mod graph;
mod memory;
mod module;
mod result;
mod rtc;
mod stream;
mod sys;

pub use device::{HipDevice, take_orphaned_errors};
pub use event::HipEvent;
pub use graph::{HipGraph, HipGraphExec};
pub use memory::{HipDeviceBuffer, HipPinnedBuffer};
pub use module::{HipKernel, HipModule};
pub use rtc::{compile_for_arch, hiprtc_library, hiprtc_version};
pub use stream::HipStream;

use crate::api::Backend;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::types::{BackendKind, DeviceInfo};

/// The HIP backend. See the module documentation.
#[derive(Debug)]
pub enum HipBackend {}

impl Backend for HipBackend {
    const KIND: BackendKind = BackendKind::Hip;
    type Device = HipDevice;
    type Stream = HipStream;
    type Event = HipEvent;
    type DeviceBuffer = HipDeviceBuffer;
    type PinnedBuffer = HipPinnedBuffer;
    type Module = HipModule;
    type Kernel = HipKernel;
    type Graph = HipGraph;
    type GraphExec = HipGraphExec;

    fn enumerate() -> Result<Vec<DeviceInfo>> {
        device::enumerate()
    }

    fn open(ordinal: usize) -> Result<HipDevice> {
        device::open(ordinal)
    }
}

/// The HIP runtime's version as ROCm writes it, e.g. `"5.2.21153"` (`hipRuntimeGetVersion`). Works
/// without a device.
pub fn runtime_version() -> Result<String> {
    result::runtime::version("hip.runtime_version").map(device::format_runtime_version)
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<HipDevice>();
    send_sync::<HipStream>();
    send_sync::<HipEvent>();
    send_sync::<HipDeviceBuffer>();
    send_sync::<HipPinnedBuffer>();
    send_sync::<HipModule>();
    send_sync::<HipKernel>();
    send_sync::<HipGraph>();
    send_sync::<HipGraphExec>();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    /// Whether this machine has a HIP device, asked of HIP directly.
    fn device_present() -> bool {
        result::runtime::device_count("test").is_ok_and(|n| n > 0)
    }

    /// The CI path: no device is a typed error with a reason, never a panic, on every entry point.
    #[test]
    fn no_device_is_backend_unavailable_not_a_panic() {
        let enumerated = std::panic::catch_unwind(HipBackend::enumerate).expect("enumerate panicked");
        let opened = std::panic::catch_unwind(|| HipBackend::open(0)).expect("open panicked");
        let selected = std::panic::catch_unwind(|| crate::enumerate(BackendKind::Hip)).expect("select panicked");
        if device_present() {
            eprintln!("NOTE hip: a HIP device is present here; the no-device path is not exercised");
            assert!(!enumerated.expect("enumerate with a device").is_empty());
            return;
        }
        for err in [enumerated.unwrap_err(), opened.unwrap_err(), selected.unwrap_err()] {
            match &err {
                Error::BackendUnavailable { backend: BackendKind::Hip, reason } => {
                    assert!(reason.starts_with("no HIP device found: "), "reason: {reason}");
                }
                other => panic!("expected BackendUnavailable, got {other:?}"),
            }
            assert!(err.is_unavailable());
            assert!(err.to_string().starts_with("hip backend unavailable: no HIP device found"), "{err}");
        }
        let version = runtime_version().expect("hipRuntimeGetVersion works without a device");
        assert!(version.split('.').count() == 3, "{version}");
    }
}
