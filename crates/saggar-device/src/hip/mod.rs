//! The HIP backend: AMD GPUs through the HIP runtime API (libamdhip64, by way of hip-runtime-sys) and
//! hipRTC, loaded at run time.
//!
//! # Design
//! The backend is the shared GPU layer ([`crate::gpu`]) over [`HipDriver`]: `sys` declares the raw entry
//! points (what hip-runtime-sys provides and what saggar declares itself, and why); `result` turns each
//! HIP and hipRTC call into a `Result` grouped by object; `driver` implements [`crate::gpu::Driver`] with
//! those calls; `device` describes devices, `module` checks code objects before HIP reads them, `graph`
//! plans executable-graph updates, and `rtc` compiles with hipRTC. Devices, streams, events, memory,
//! modules and graphs are the shared layer's, with the semantics the host backend defines and the
//! conformance suite checks.
//!
//! - **Linking and loading.** The `hip` feature links libamdhip64 (hip-runtime-sys's build script finds
//!   it under `HIP_PATH`; `HIP_PATH=/usr` for Debian's `libamdhip64-dev`), so it is off by default.
//!   hipRTC is not linked: it is found at run time in libhiprtc (ROCm 6 and later) or libamdhip64
//!   (ROCm 5.x), whichever the installed ROCm ships ([`hiprtc_library`]).
//! - **No device is not a fault.** On a machine without an AMD GPU, `hipGetDeviceCount` fails with
//!   `hipErrorNoDevice` (or reports 0): `HipBackend::enumerate` and `HipBackend::open` ([`crate::Backend`]) return
//!   [`Error::BackendUnavailable`] with a reason that starts "no HIP device found", `auto` backend
//!   selection moves on, and the conformance suite reports every test skipped with that reason.
//! - **Devices.** HIP acts on the thread's current device. Every operation checks the device pinned to
//!   the thread ([`crate::check_pinned`]) and makes its device current with `hipSetDevice` if saggar has
//!   not already (a thread-local compare on the launch path). [`crate::Device::pin`] makes the device
//!   current and restores the previous one when the guard drops. Destructors switch to their object's
//!   device for the call only; one that runs on a thread that is capturing postpones its release (a
//!   free, an unload) to the end of the capture, where HIP allows it.
//! - **Capture.** saggar's capture modes are HIP's (thread-local by default). Calls HIP forbids during
//!   capture are refused before they reach HIP and invalidate the capture; see [`crate::gpu`] for the rules.
//!   An empty capture is valid and instantiates to a marker that replays as a no-op. Known ROCm graph
//!   pitfalls are handled where they arise: `hipGraphExecUpdate` is slow on large graphs and not atomic
//!   in ROCm, so updates that only change kernel parameters use `hipGraphExecKernelNodeSetParams`, and a
//!   failed update is rolled back (`graph`); graphs captured across several streams can lose their
//!   concurrency on some ROCm releases (work captured on several streams, forked with events and joined
//!   back, replays one node after another), which saggar avoids by capturing on one stream.
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
//! `hipSetDevice` on a thread saggar uses must restore the device it found.
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

mod blas;
mod device;
mod driver;
mod graph;
mod module;
mod result;
mod rtc;
mod sys;

pub use device::HipOrdinal;
pub use driver::HipDriver;
pub use graph::HipGraphData;
pub use rtc::{compile_for_arch, hiprtc_library, hiprtc_version};

use crate::error::{Error, Result};
use crate::gpu;

// The public names: `HipBackend` is `gpu::GpuBackend<HipDriver>`, `HipStream` is `gpu::Stream<HipDriver>`, and so on.
crate::gpu_aliases!(HipDriver => HipBackend, HipDevice, HipStream, HipEvent, HipDeviceBuffer, HipPinnedBuffer, HipModule, HipKernel, HipGraph, HipGraphExec);

impl HipDevice {
    /// The architecture as HIP names it, target features included (`gfx90a:sramecc+:xnack-`); the
    /// same string as [`crate::DeviceInfo::arch`], and what compilation targets.
    pub fn gcn_arch_name(&self) -> &str {
        &self.shared.info.arch
    }
}

/// Errors that destructors of HIP objects recorded after the last handle of their device was gone
/// (errors nobody took from the device before it went away), oldest first. Every other destructor error
/// is on its device: [`crate::Device::take_deferred_errors`].
pub fn take_orphaned_errors() -> Vec<Error> {
    gpu::take_orphaned_errors::<HipDriver>()
}

/// The HIP runtime's version as ROCm writes it, e.g. `"5.2.21153"` (`hipRuntimeGetVersion`). Works
/// without a device.
pub fn runtime_version() -> Result<String> {
    result::runtime::version("hip.runtime_version").map(device::format_runtime_version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::BackendKind;

    /// Whether this machine has a HIP device, asked of HIP directly.
    fn device_present() -> bool {
        result::runtime::device_count("test").is_ok_and(|n| n > 0)
    }

    /// The CI path: no device is a typed error with a reason, never a panic, on every entry point.
    #[test]
    fn no_device_is_backend_unavailable_not_a_panic() {
        let (enumerated, opened, selected) = gpu::call_entry_points::<HipDriver>();
        if device_present() {
            eprintln!("NOTE hip: a HIP device is present here; the no-device path is not exercised");
            assert!(!enumerated.expect("enumerate with a device").is_empty());
            return;
        }
        let errors = [enumerated.unwrap_err(), opened.unwrap_err(), selected.unwrap_err()];
        gpu::assert_all_unavailable(errors, BackendKind::Hip, "no HIP device found: ");
        let version = runtime_version().expect("hipRuntimeGetVersion works without a device");
        assert!(version.split('.').count() == 3, "{version}");
    }
}
