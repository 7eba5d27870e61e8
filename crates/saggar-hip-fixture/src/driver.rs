//! The CUDA driver and NVRTC, loaded at run time through cudarc, and HIP's per-thread current device.
//!
//! cudarc (feature `fallback-dynamic-loading`) panics when a library or symbol is missing. As in saggar's
//! CUDA backend, the fixture first asks cudarc whether the library loads (`is_culib_present`), then checks
//! every symbol it calls, and only then calls `cuInit`. Without a driver every entry point that needs one
//! fails with `hipErrorInsufficientDriver` (what the CUDA runtime answers when libcuda is missing), and the
//! reason is said once on standard error.
//!
//! # Devices and contexts
//! HIP acts on the calling thread's current device (`hipSetDevice`; device 0 until a thread sets one).
//! The fixture keeps that device per thread and makes the device's *primary context* current
//! (`cuDevicePrimaryCtxRetain` once per device, kept for the life of the process, then `cuCtxSetCurrent`)
//! before every call that needs a context. It checks `cuCtxGetCurrent` each time rather than trusting its
//! own record, because other code in the process (saggar's CUDA backend) may switch the thread's context.

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys::{self, CUresult};
use cudarc::nvrtc::sys as nvrtc_sys;

use crate::abi::{HipStatus, code};
use crate::errors::{hip_from_cuda, say_once};

/// A HIP result inside the fixture: the error is the `hipError_t` to return.
pub type HipResult<T> = Result<T, HipStatus>;

/// `Ok(())` for `CUDA_SUCCESS`, the mapped HIP code otherwise.
#[inline]
pub fn cu(call: &'static str, result: CUresult) -> HipResult<()> {
    if result == CUresult::CUDA_SUCCESS { Ok(()) } else { Err(hip_from_cuda(call, result)) }
}

/// `cuEventElapsedTime` and `cuEventElapsedTime_v2` share this signature; CUDA 13 bindings name only the
/// second, which drivers older than 12.8 lack.
pub type ElapsedTimeFn = unsafe extern "C" fn(*mut f32, sys::CUevent, sys::CUevent) -> CUresult;

/// The loaded, checked and initialised driver.
#[derive(Debug)]
pub struct Driver {
    /// `cuDriverGetVersion`, e.g. 12080.
    pub version: c_int,
    /// `cuDeviceGetCount` at initialisation.
    pub device_count: c_int,
    /// The elapsed-time entry point this driver has.
    pub elapsed_time: ElapsedTimeFn,
}

/// Every driver entry point the fixture calls through cudarc (`cuEventElapsedTime(_v2)` is resolved
/// apart). Checked once, before the first call.
pub const DRIVER_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceTotalMem_v2",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuMemGetInfo_v2",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuStreamBeginCapture_v2",
    "cuStreamEndCapture",
    "cuStreamIsCapturing",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemHostGetDevicePointer_v2",
    "cuMemcpy",
    "cuMemcpyAsync",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyDtoD_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemsetD8_v2",
    "cuMemsetD8Async",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuModuleLoadData",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuFuncGetAttribute",
    "cuLaunchKernel",
    "cuGraphGetNodes",
    "cuGraphNodeGetType",
    "cuGraphInstantiateWithFlags",
    "cuGraphLaunch",
    "cuGraphExecUpdate_v2",
    "cuGraphExecKernelNodeSetParams_v2",
    "cuGraphExecDestroy",
    "cuGraphDestroy",
];

/// Every NVRTC entry point the fixture calls.
pub const NVRTC_SYMBOLS: &[&str] = &[
    "nvrtcVersion",
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetPTXSize",
    "nvrtcGetPTX",
    "nvrtcDestroyProgram",
];

/// The driver, loaded, checked and initialised once per process; or the HIP code to fail with (the
/// reason is said once on standard error).
pub fn driver() -> HipResult<&'static Driver> {
    static DRIVER: OnceLock<Result<Driver, (HipStatus, String)>> = OnceLock::new();
    match DRIVER.get_or_init(load_driver) {
        Ok(driver) => Ok(driver),
        Err((status, reason)) => {
            say_once("driver".into(), || reason.clone());
            Err(*status)
        }
    }
}

fn load_driver() -> Result<Driver, (HipStatus, String)> {
    let no_driver = |why: String| (code::INSUFFICIENT_DRIVER, format!("no usable CUDA driver: {why}"));
    // SAFETY: `is_culib_present` only `dlopen`s candidate library names and closes what it opened.
    if !unsafe { sys::is_culib_present() } {
        return Err(no_driver("libcuda.so.1 (or another name cudarc tries) could not be loaded".into()));
    }
    // SAFETY: `culib` loads the library `is_culib_present` just found; it panics only if no candidate
    // loads, which the guard turns into an error should the library vanish in between.
    let lib = std::panic::catch_unwind(|| unsafe { sys::culib() })
        .map_err(|_| no_driver("libcuda was found but could not be loaded a second time".into()))?;
    for name in DRIVER_SYMBOLS {
        // SAFETY: looking a symbol up has no side effects; the pointer is not used.
        if unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_err() {
            return Err(no_driver(format!("libcuda lacks `{name}` (a driver for CUDA 12.0 or newer is needed)")));
        }
    }
    // SAFETY: both names have the signature `ElapsedTimeFn`; cudarc keeps the library loaded in a static
    // for the life of the process, so the copied pointer stays valid.
    let elapsed_time = unsafe {
        match lib.get::<ElapsedTimeFn>(b"cuEventElapsedTime_v2") {
            Ok(f) => *f,
            Err(_) => *lib
                .get::<ElapsedTimeFn>(b"cuEventElapsedTime")
                .map_err(|_| no_driver("libcuda lacks `cuEventElapsedTime`".into()))?,
        }
    };
    // SAFETY: every symbol was checked above; `cuInit(0)` has no other precondition.
    match unsafe { sys::cuInit(0) } {
        CUresult::CUDA_SUCCESS => {}
        CUresult::CUDA_ERROR_NO_DEVICE => {
            return Err((code::NO_DEVICE, "cuInit reported CUDA_ERROR_NO_DEVICE: no NVIDIA GPU is visible".into()));
        }
        CUresult::CUDA_ERROR_STUB_LIBRARY => {
            return Err(no_driver("the libcuda that loaded is the CUDA toolkit's stub library".into()));
        }
        other => return Err((hip_from_cuda("cuInit", other), format!("cuInit failed with {other:?}"))),
    }
    let mut version: c_int = 0;
    // SAFETY: writes one int; the driver is initialised.
    cu("cuDriverGetVersion", unsafe { sys::cuDriverGetVersion(&mut version) })
        .map_err(|s| (s, "cuDriverGetVersion failed".to_string()))?;
    let mut device_count: c_int = 0;
    // SAFETY: writes one int; the driver is initialised.
    cu("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut device_count) })
        .map_err(|s| (s, "cuDeviceGetCount failed".to_string()))?;
    Ok(Driver { version, device_count, elapsed_time })
}

/// NVRTC, loaded and checked once per process; `Err` with the reason (also said once on standard error).
pub fn nvrtc() -> Result<(), String> {
    static NVRTC: OnceLock<Result<(), String>> = OnceLock::new();
    let loaded = NVRTC.get_or_init(|| {
        // SAFETY: as for the driver: only `dlopen`s candidate names.
        if !unsafe { nvrtc_sys::is_culib_present() } {
            return Err("NVRTC (libnvrtc.so.13 / .12 or another name cudarc tries) could not be loaded".into());
        }
        // SAFETY: as for the driver.
        let lib = std::panic::catch_unwind(|| unsafe { nvrtc_sys::culib() })
            .map_err(|_| "libnvrtc was found but could not be loaded a second time".to_string())?;
        for name in NVRTC_SYMBOLS {
            // SAFETY: looking a symbol up has no side effects.
            if unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_err() {
                return Err(format!("libnvrtc lacks `{name}`"));
            }
        }
        Ok(())
    });
    if let Err(reason) = loaded {
        say_once("nvrtc".into(), || format!("hipRTC is unavailable: {reason}"));
    }
    loaded.clone()
}

/// A primary context, shareable between threads (a `CUcontext` is usable from any thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Context(sys::CUcontext);

// SAFETY: a CUDA context handle may be made current on, and used from, any thread.
unsafe impl Send for Context {}

/// The primary context of every device used so far, retained once and kept for the life of the process.
static PRIMARY: Mutex<Vec<(c_int, Context)>> = Mutex::new(Vec::new());

thread_local! {
    /// The thread's HIP device and its primary context (`None`: the thread has not chosen one; HIP's
    /// default is device 0).
    static CURRENT: Cell<Option<(c_int, sys::CUcontext)>> = const { Cell::new(None) };
}

/// Checks `ordinal` against the device count: `hipErrorInvalidDevice` when out of range.
pub fn check_ordinal(ordinal: c_int) -> HipResult<sys::CUdevice> {
    let driver = driver()?;
    if !(0..driver.device_count).contains(&ordinal) {
        return Err(code::INVALID_DEVICE);
    }
    let mut device: sys::CUdevice = 0;
    // SAFETY: writes one device handle; the ordinal is in range.
    cu("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut device, ordinal) })?;
    Ok(device)
}

fn primary_context(ordinal: c_int) -> HipResult<sys::CUcontext> {
    let device = check_ordinal(ordinal)?;
    let mut primary = PRIMARY.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(&(_, Context(ctx))) = primary.iter().find(|(o, _)| *o == ordinal) {
        return Ok(ctx);
    }
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: writes one context handle; `device` is valid. The retain is never released: the fixture keeps
    // each primary context for the life of the process, as HIP keeps its devices initialised.
    cu("cuDevicePrimaryCtxRetain", unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, device) })?;
    primary.push((ordinal, Context(ctx)));
    Ok(ctx)
}

/// `hipSetDevice`: makes `ordinal` the thread's device and its primary context current.
pub fn set_device(ordinal: c_int) -> HipResult<()> {
    let ctx = primary_context(ordinal)?;
    // SAFETY: `ctx` is a retained primary context.
    cu("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx) })?;
    CURRENT.set(Some((ordinal, ctx)));
    Ok(())
}

/// `hipGetDevice`: the thread's device (0 until the thread sets one, as in HIP).
pub fn current_device() -> HipResult<c_int> {
    driver()?;
    Ok(CURRENT.get().map_or(0, |(ordinal, _)| ordinal))
}

/// The entry of every call that needs a context: the driver is initialised and the primary context of
/// the thread's device is current.
pub fn enter() -> HipResult<()> {
    driver()?;
    let ctx = match CURRENT.get() {
        Some((_, ctx)) => ctx,
        None => {
            let ctx = primary_context(0)?;
            CURRENT.set(Some((0, ctx)));
            ctx
        }
    };
    let mut current: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: writes one context handle.
    cu("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut current) })?;
    if current != ctx {
        // SAFETY: `ctx` is a retained primary context.
        cu("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx) })?;
    }
    Ok(())
}
