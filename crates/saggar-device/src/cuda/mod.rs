//! The CUDA backend: NVIDIA GPUs through the CUDA driver API and NVRTC, by way of cudarc's `sys` and
//! `result` layers, loaded at run time.
//!
//! # Design
//! The backend is the shared GPU layer ([`crate::gpu`]) over [`CudaDriver`]: `result` turns each driver
//! and NVRTC call into a `Result` grouped by object, in the manner of cudarc's own `result` module;
//! `driver` implements [`crate::gpu::Driver`] with those calls; `device` describes devices and holds
//! the primary context; `rtc` compiles with NVRTC. Devices, streams, events, memory, modules and graphs
//! are the shared layer's, with the semantics the host backend defines and the conformance suite checks.
//!
//! - **Loading.** libcuda and libnvrtc are opened at run time (cudarc's `fallback-dynamic-loading`), so
//!   saggar builds and runs where CUDA is absent. cudarc's loader panics when a library or symbol is
//!   missing; saggar never lets it get that far: it first asks cudarc whether the library loads
//!   (`is_culib_present`, a plain `dlopen`), then checks every symbol it will call, and only then calls
//!   `cuInit`. Without a driver, `CudaBackend::enumerate` ([`crate::Backend::enumerate`]) returns [`Error::BackendUnavailable`] with a
//!   reason that starts "no CUDA driver found"; a driver older than CUDA 12.0 is reported the same way.
//! - **Only the raw layers of cudarc.** cudarc's safe types (`CudaContext`, `CudaStream`, `CudaSlice`)
//!   record events on every use of a buffer to track dependencies; inside a stream capture such a wait
//!   on an event recorded outside it is illegal ("dependency created on uncaptured work"). saggar needs no
//!   tracking (its slices carry no lifetime on purpose), so it calls `sys`/`result` directly.
//! - **Contexts.** Each device uses its primary context, retained while any object of the device lives.
//!   Every operation checks the device pinned to the thread ([`crate::check_pinned`]) and makes its
//!   context current if saggar has not already (a thread-local compare on the launch path). That cache
//!   is saggar's view of the thread: code outside saggar that changes the current context on a thread
//!   saggar also uses must restore it.
//!   [`crate::Device::pin`] makes the context current with `cuCtxSetCurrent` and restores the previous
//!   one when the guard drops. Destructors switch to their object's context for the call only.
//! - **Capture.** saggar's capture modes are CUDA's. Calls CUDA forbids during capture are refused before
//!   they reach the driver and invalidate the capture; see [`crate::gpu`] for the rules and their source.
//!   An empty capture instantiates to a marker that replays as a no-op.
//! - **Errors.** A failed call is [`Error::Vendor`] with the driver's code name (`CUDA_ERROR_...`) and
//!   description, except where saggar gives the code a meaning: out of memory is [`Error::OutOfMemory`],
//!   capture violations are [`Error::IllegalDuringCapture`] / [`Error::CaptureInvalidated`], a refused
//!   graph update is [`Error::GraphUpdate`], and CUDA's sticky asynchronous faults (an illegal address in
//!   a kernel) are [`Error::Async`] when a later call or synchronisation reports them. Destructors record
//!   their errors on the device ([`crate::Device::take_deferred_errors`]); the last handle of a device
//!   leaves its own in [`take_orphaned_errors`].
//!
//! # Thread safety
//! Every handle type is `Send + Sync`; each type's documentation gives the CUDA rule it follows. In
//! short: CUDA's driver API is thread-safe for streams, events, memory and modules; graphs are not
//! ("Graph objects (cudaGraph_t, CUgraph) are not internally synchronized and must not be accessed
//! concurrently from multiple threads"), so saggar serialises every call on one graph, and the launches
//! of one executable graph, with locks of its own; a thread-local or global capture must end on the
//! thread that began it.
//!
//! # Safety
//! Every `unsafe` block carries a `// SAFETY:` comment. Raw handles are owned by exactly one value and
//! released once, from its destructor; objects hold their device by `Arc`, so no handle outlives the
//! context it belongs to.

mod blas;
mod device;
mod driver;
mod result;
mod rtc;

pub use device::PrimaryContext;
pub use driver::CudaDriver;
pub use rtc::{compile_for, nvrtc_version};

use cudarc::driver::sys;

use crate::error::{Error, Result};
use crate::gpu;

// The public names: `CudaBackend` is `gpu::GpuBackend<CudaDriver>`, `CudaStream` is `gpu::Stream<CudaDriver>`, and so on.
crate::gpu_aliases!(CudaDriver => CudaBackend, CudaDevice, CudaStream, CudaEvent, CudaDeviceBuffer, CudaPinnedBuffer, CudaModule, CudaKernel, CudaGraph, CudaGraphExec);

impl CudaDevice {
    /// The compute capability, e.g. `(9, 0)` for an H100 or H200.
    pub fn compute_capability(&self) -> (u32, u32) {
        self.shared.state.compute_capability
    }

    /// The raw primary-context handle, for interop and benchmarks. saggar keeps ownership: do not release it.
    pub fn raw_context(&self) -> sys::CUcontext {
        self.shared.state.raw
    }
}

/// Errors met while tearing down the last handle of a device (releasing its primary context, or errors
/// its objects deferred that nobody took before the device went away), oldest first. Every other
/// destructor error is on its device: [`crate::Device::take_deferred_errors`].
pub fn take_orphaned_errors() -> Vec<Error> {
    gpu::take_orphaned_errors::<CudaDriver>()
}

/// The version of the CUDA driver API the loaded driver implements, e.g. `13000` for CUDA 13.0, or why
/// there is no usable driver.
pub fn driver_version() -> Result<i32> {
    result::library::driver().map(|d| d.version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::BackendKind;

    /// Whether libcuda loads here, asked the way cudarc's loader would find it, independently of saggar.
    fn driver_library_present() -> bool {
        // SAFETY: only `dlopen`s candidate names.
        unsafe { cudarc::driver::sys::is_culib_present() }
    }

    /// The CI path: no driver is a typed error with a reason, never a panic, on every entry point.
    #[test]
    fn no_driver_is_backend_unavailable_not_a_panic() {
        let (enumerated, opened, selected) = gpu::call_entry_points::<CudaDriver>();
        if driver_library_present() {
            eprintln!("NOTE cuda: libcuda is present here; the no-driver path is not exercised");
            for r in [&enumerated, &selected] {
                match r {
                    Ok(devices) => assert!(!devices.is_empty()),
                    Err(e) => assert!(e.is_unavailable(), "a present driver gave {e:?}"),
                }
            }
            return;
        }
        let errors = [enumerated.unwrap_err(), opened.unwrap_err(), selected.unwrap_err()];
        gpu::assert_all_unavailable(errors, BackendKind::Cuda, "no CUDA driver found: ");
        assert!(driver_version().is_err());
    }

    /// Without NVRTC, compiling is a typed error, never a panic.
    #[test]
    fn no_nvrtc_is_backend_unavailable_not_a_panic() {
        // SAFETY: only `dlopen`s candidate names.
        let present = unsafe { cudarc::nvrtc::sys::is_culib_present() };
        let compiled =
            std::panic::catch_unwind(|| compile_for(&crate::builtin::source(), (9, 0))).expect("compile panicked");
        if present {
            eprintln!("NOTE cuda: libnvrtc is present here; compiled the built-in kernels");
            let code = compiled.expect("the built-in kernels compile");
            assert_eq!(code.format, crate::CodeFormat::Cubin);
            assert!(code.image.starts_with(b"\x7fELF"), "a cubin is an ELF image");
            return;
        }
        match compiled.unwrap_err() {
            Error::BackendUnavailable { backend: BackendKind::Cuda, reason } => {
                assert!(reason.starts_with("NVRTC not found"), "reason: {reason}")
            }
            other => panic!("expected BackendUnavailable, got {other:?}"),
        }
    }

    /// Every symbol saggar calls is in the checked lists, so no call can reach cudarc's panicking loader.
    #[test]
    fn every_called_driver_symbol_is_checked() {
        let sources =
            [include_str!("result.rs"), include_str!("device.rs"), include_str!("driver.rs"), include_str!("rtc.rs")];
        let mut checked = 0;
        for source in sources {
            for (prefix, list) in
                [("sys::cu", result::library::DRIVER_SYMBOLS), ("nvrtc_sys::nvrtc", result::library::NVRTC_SYMBOLS)]
            {
                for (at, _) in source.match_indices(prefix) {
                    let tail: String = source[at + prefix.len()..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    // Entry points continue with a capital (`cuMemAlloc_v2`); `sys::culib` and the
                    // `nvrtcResult` / `nvrtcProgram` types are not entry points.
                    if !tail.starts_with(|c: char| c.is_ascii_uppercase()) || tail == "Result" || tail == "Program" {
                        continue;
                    }
                    let name =
                        format!("{}{tail}", &prefix[prefix.len() - if prefix.ends_with("cu") { 2 } else { 5 }..]);
                    assert!(list.contains(&name.as_str()), "`{name}` is called but not in the checked symbol list");
                    checked += 1;
                }
            }
        }
        assert!(checked > 40, "the scan found only {checked} calls");
    }
}
