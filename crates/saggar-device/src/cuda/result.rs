//! A thin layer over the CUDA driver and NVRTC: every call saggar makes becomes one function that returns
//! `Result<_, Error>`, grouped by the object it acts on (`result::stream::create`,
//! `result::memory::alloc`, ...), in the manner of cudarc's own `result` module.
//!
//! A failed driver call becomes [`Error::Vendor`] with the driver's own name for the code
//! (`cuGetErrorName`: `CUDA_ERROR_OUT_OF_MEMORY`) and its description (`cuGetErrorString`), plus the saggar
//! operation that made the call. The codes saggar gives a meaning of its own (out of memory, a capture
//! violation, an event not yet complete) are listed in `driver.rs`.
//!
//! Nothing here decides policy: no pinning checks, no capture bookkeeping, no current-context handling.
//! Functions that take raw handles are `unsafe`, and their `# Safety` sections say which handles must be
//! live; functions that take only plain values are safe, because the driver validates those itself.
//!
//! [`library`] holds the one place that loads libcuda and libnvrtc, so that a missing or too-old library
//! is reported as [`Error::BackendUnavailable`] instead of the panic cudarc's loader raises.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::ptr;

use cudarc::driver::sys;
use cudarc::nvrtc::sys as nvrtc_sys;

use crate::error::{Error, Result};
use crate::types::BackendKind;

pub(crate) use sys::CUresult;

/// The driver's name of a result code, e.g. `CUDA_ERROR_OUT_OF_MEMORY`.
fn error_name(res: CUresult) -> String {
    let mut name: *const c_char = ptr::null();
    // SAFETY: `cuGetErrorName` may be called before `cuInit` and only writes a pointer to a static string
    // into `name`. It is reached only with a code a driver call returned, so libcuda is loaded and the
    // symbol was checked by `library::driver`.
    let res_name = unsafe { sys::cuGetErrorName(res, &mut name) };
    if res_name == CUresult::CUDA_SUCCESS && !name.is_null() {
        // SAFETY: on success `name` points to a NUL-terminated string with static lifetime owned by libcuda.
        unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
    } else {
        format!("{res:?}")
    }
}

/// The driver's description of a result code.
fn error_string(res: CUresult) -> String {
    let mut text: *const c_char = ptr::null();
    // SAFETY: as in `error_name`.
    let res_text = unsafe { sys::cuGetErrorString(res, &mut text) };
    if res_text == CUresult::CUDA_SUCCESS && !text.is_null() {
        // SAFETY: on success `text` points to a NUL-terminated static string owned by libcuda.
        unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
    } else {
        "no description (cuGetErrorString does not know this code)".to_string()
    }
}

/// [`Error::Vendor`] for a failed driver call made by saggar operation `op`.
#[cold]
pub(crate) fn vendor(op: &'static str, res: CUresult) -> Error {
    Error::Vendor {
        backend: BackendKind::Cuda,
        op,
        name: error_name(res),
        code: res as u32 as i64,
        message: error_string(res),
    }
}

/// `Ok(())` for `CUDA_SUCCESS`, [`vendor`] otherwise.
#[inline]
pub(crate) fn check(op: &'static str, res: CUresult) -> Result<()> {
    if res == CUresult::CUDA_SUCCESS { Ok(()) } else { Err(vendor(op, res)) }
}

/// Loading libcuda and libnvrtc, and checking them before any call can reach cudarc's loader.
///
/// cudarc (feature `fallback-dynamic-loading`) resolves every symbol on first use and panics if the
/// library or the symbol is missing. So saggar asks cudarc's own `is_culib_present` (a `dlopen` of the same
/// candidate names its loader tries, no panic) first, then checks every symbol saggar calls, and only then
/// makes the first call. After a successful check no call of this module can panic in the loader.
pub(crate) mod library {
    use std::sync::OnceLock;

    use super::*;

    /// `cuEventElapsedTime` and `cuEventElapsedTime_v2` have the same signature; CUDA 13 bindings only
    /// name the second, which drivers older than 12.8 lack.
    pub(crate) type ElapsedTimeFn = unsafe extern "C" fn(*mut f32, sys::CUevent, sys::CUevent) -> CUresult;

    /// The loaded driver.
    #[derive(Debug)]
    pub(crate) struct Driver {
        /// `cuDriverGetVersion`, e.g. 13000 for CUDA 13.0.
        pub(crate) version: i32,
        /// The elapsed-time entry point this driver has.
        pub(crate) elapsed_time: ElapsedTimeFn,
    }

    /// Every driver entry point saggar calls through cudarc. Checked once, before the first call.
    /// `cuGraphExecUpdate_v2` (CUDA 12.0) is the newest; `cuEventElapsedTime(_v2)` is resolved apart.
    pub(crate) const DRIVER_SYMBOLS: &[&str] = &[
        "cuInit",
        "cuDriverGetVersion",
        "cuGetErrorName",
        "cuGetErrorString",
        "cuDeviceGetCount",
        "cuDeviceGet",
        "cuDeviceGetName",
        "cuDeviceTotalMem_v2",
        "cuDeviceGetAttribute",
        "cuDevicePrimaryCtxRetain",
        "cuDevicePrimaryCtxRelease_v2",
        "cuCtxGetCurrent",
        "cuCtxSetCurrent",
        "cuCtxSynchronize",
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
        "cuMemcpyHtoDAsync_v2",
        "cuMemcpyDtoHAsync_v2",
        "cuMemcpyDtoDAsync_v2",
        "cuMemsetD8Async",
        "cuMemGetInfo_v2",
        "cuEventCreate",
        "cuEventDestroy_v2",
        "cuEventRecord",
        "cuEventQuery",
        "cuEventSynchronize",
        "cuModuleLoadDataEx",
        "cuModuleGetFunction",
        "cuModuleUnload",
        "cuFuncGetAttribute",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuGraphGetNodes",
        "cuGraphInstantiateWithFlags",
        "cuGraphLaunch",
        "cuGraphExecUpdate_v2",
        "cuGraphExecDestroy",
        "cuGraphDestroy",
    ];

    /// Every NVRTC entry point saggar calls.
    pub(crate) const NVRTC_SYMBOLS: &[&str] = &[
        "nvrtcVersion",
        "nvrtcGetErrorString",
        "nvrtcCreateProgram",
        "nvrtcCompileProgram",
        "nvrtcGetProgramLogSize",
        "nvrtcGetProgramLog",
        "nvrtcGetCUBINSize",
        "nvrtcGetCUBIN",
        "nvrtcDestroyProgram",
    ];

    fn unavailable(reason: String) -> Error {
        Error::BackendUnavailable { backend: BackendKind::Cuda, reason }
    }

    /// The driver, loaded, checked and initialised (`cuInit`) once per process; or why it cannot be.
    pub(crate) fn driver() -> Result<&'static Driver> {
        static DRIVER: OnceLock<Result<Driver>> = OnceLock::new();
        DRIVER.get_or_init(load_driver).as_ref().map_err(Clone::clone)
    }

    fn load_driver() -> Result<Driver> {
        // SAFETY: `is_culib_present` only `dlopen`s candidate library names and closes what it opened.
        if !unsafe { sys::is_culib_present() } {
            let tried = cudarc::get_lib_name_candidates("cuda").len() + cudarc::get_lib_name_candidates("nvcuda").len();
            return Err(unavailable(format!(
                "no CUDA driver found: libcuda.so.1 could not be loaded (nor any of the {} other library names \
                 cudarc tries, such as libcuda.so); install the NVIDIA driver or put libcuda.so.1 on the loader path",
                tried.saturating_sub(1),
            )));
        }
        // SAFETY: `culib` loads the library that `is_culib_present` just found; it only panics when no
        // candidate loads, which the guard turns into an error should the library vanish in between.
        let lib = std::panic::catch_unwind(|| unsafe { sys::culib() }).map_err(|_| {
            unavailable("no CUDA driver found: libcuda was found but could not be loaded a second time".into())
        })?;
        for name in DRIVER_SYMBOLS {
            // SAFETY: looking a symbol up has no side effects; the pointer is not used.
            if unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_err() {
                return Err(unavailable(format!(
                    "the CUDA driver is too old: libcuda lacks `{name}`; saggar needs a driver for CUDA 12.0 or newer"
                )));
            }
        }
        // SAFETY: both names have the signature `ElapsedTimeFn` (CUDA driver API); the library stays loaded
        // for the life of the process (cudarc keeps it in a static), so the copied pointer stays valid.
        let elapsed_time = unsafe {
            match lib.get::<ElapsedTimeFn>(b"cuEventElapsedTime_v2".as_slice()) {
                Ok(f) => *f,
                Err(_) => *lib.get::<ElapsedTimeFn>(b"cuEventElapsedTime".as_slice()).map_err(|_| {
                    unavailable("the CUDA driver is too old: libcuda lacks `cuEventElapsedTime`".into())
                })?,
            }
        };
        // SAFETY: every symbol was checked above; `cuInit(0)` has no other precondition.
        let res = unsafe { sys::cuInit(0) };
        match res {
            CUresult::CUDA_SUCCESS => {}
            CUresult::CUDA_ERROR_STUB_LIBRARY => {
                return Err(unavailable(
                    "no CUDA driver found: the libcuda that loaded is the CUDA toolkit's stub library \
                     (CUDA_ERROR_STUB_LIBRARY); install the NVIDIA driver"
                        .into(),
                ));
            }
            CUresult::CUDA_ERROR_NO_DEVICE => {
                return Err(unavailable("no CUDA device found: cuInit reported CUDA_ERROR_NO_DEVICE".into()));
            }
            other => {
                return Err(unavailable(format!(
                    "the CUDA driver failed to initialise: {}",
                    vendor("cuda.init", other)
                )));
            }
        }
        let mut version: c_int = 0;
        // SAFETY: `cuDriverGetVersion` writes one int.
        check("cuda.init", unsafe { sys::cuDriverGetVersion(&mut version) })
            .map_err(|e| unavailable(format!("the CUDA driver failed to report its version: {e}")))?;
        Ok(Driver { version, elapsed_time })
    }

    /// NVRTC, loaded and checked once per process; or why it cannot be.
    pub(crate) fn nvrtc() -> Result<()> {
        static NVRTC: OnceLock<Result<()>> = OnceLock::new();
        NVRTC.get_or_init(load_nvrtc).clone()
    }

    fn load_nvrtc() -> Result<()> {
        // SAFETY: as for the driver: only `dlopen`s candidate names.
        if !unsafe { nvrtc_sys::is_culib_present() } {
            return Err(unavailable(
                "NVRTC not found: libnvrtc could not be loaded; runtime compilation needs the CUDA toolkit's \
                 NVRTC (libnvrtc.so.13 or .12) on the loader path. Precompiled PTX or cubin loads without it"
                    .into(),
            ));
        }
        // SAFETY: as for the driver.
        let lib = std::panic::catch_unwind(|| unsafe { nvrtc_sys::culib() })
            .map_err(|_| unavailable("NVRTC not found: libnvrtc could not be loaded a second time".into()))?;
        for name in NVRTC_SYMBOLS {
            // SAFETY: looking a symbol up has no side effects.
            if unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_err() {
                return Err(unavailable(format!("NVRTC is unusable: libnvrtc lacks `{name}`")));
            }
        }
        Ok(())
    }
}

/// Driver-wide queries.
pub(crate) mod driver {
    use super::*;

    /// The number of CUDA devices.
    pub(crate) fn device_count(op: &'static str) -> Result<usize> {
        let mut count: c_int = 0;
        // SAFETY: writes one int; the driver was initialised by `library::driver`.
        check(op, unsafe { sys::cuDeviceGetCount(&mut count) })?;
        Ok(count.max(0) as usize)
    }
}

/// `cuDevice*`: devices by ordinal.
pub(crate) mod device {
    use super::*;

    /// The handle of device `ordinal` (which the caller checked against the device count).
    pub(crate) fn get(op: &'static str, ordinal: usize) -> Result<sys::CUdevice> {
        let ordinal = c_int::try_from(ordinal).map_err(|_| vendor(op, CUresult::CUDA_ERROR_INVALID_DEVICE))?;
        let mut device: sys::CUdevice = 0;
        // SAFETY: writes one device handle; an invalid ordinal is reported by the driver.
        check(op, unsafe { sys::cuDeviceGet(&mut device, ordinal) })?;
        Ok(device)
    }

    /// The device's marketing name.
    pub(crate) fn name(op: &'static str, device: sys::CUdevice) -> Result<String> {
        let mut buf = [0 as c_char; 256];
        // SAFETY: the driver writes at most `buf.len()` bytes, NUL-terminated.
        check(op, unsafe { sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, device) })?;
        // SAFETY: the buffer is NUL-terminated by the driver and zero-initialised before.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
    }

    /// Total device memory in bytes.
    pub(crate) fn total_mem(op: &'static str, device: sys::CUdevice) -> Result<usize> {
        let mut bytes = 0usize;
        // SAFETY: writes one size.
        check(op, unsafe { sys::cuDeviceTotalMem_v2(&mut bytes, device) })?;
        Ok(bytes)
    }

    /// One device attribute.
    pub(crate) fn attribute(op: &'static str, device: sys::CUdevice, attr: sys::CUdevice_attribute) -> Result<i32> {
        let mut value: c_int = 0;
        // SAFETY: writes one int.
        check(op, unsafe { sys::cuDeviceGetAttribute(&mut value, attr, device) })?;
        Ok(value)
    }
}

/// `cuDevicePrimaryCtx*`: the device's primary context, shared with the CUDA runtime.
pub(crate) mod primary_ctx {
    use super::*;

    /// Retains the primary context of `device`, creating it if needed.
    pub(crate) fn retain(op: &'static str, device: sys::CUdevice) -> Result<sys::CUcontext> {
        let mut ctx: sys::CUcontext = ptr::null_mut();
        // SAFETY: writes one context handle.
        check(op, unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, device) })?;
        Ok(ctx)
    }

    /// Releases one retain of the primary context of `device`.
    ///
    /// # Safety
    /// Must balance exactly one successful [`retain`].
    pub(crate) unsafe fn release(op: &'static str, device: sys::CUdevice) -> Result<()> {
        // SAFETY: the caller balances a retain.
        check(op, unsafe { sys::cuDevicePrimaryCtxRelease_v2(device) })
    }
}

/// `cuCtx*`: the context current on the calling thread.
pub(crate) mod ctx {
    use super::*;

    /// The context current on this thread (null if none).
    pub(crate) fn get_current(op: &'static str) -> Result<sys::CUcontext> {
        let mut ctx: sys::CUcontext = ptr::null_mut();
        // SAFETY: writes one context handle.
        check(op, unsafe { sys::cuCtxGetCurrent(&mut ctx) })?;
        Ok(ctx)
    }

    /// Binds `ctx` to this thread (null unbinds).
    ///
    /// # Safety
    /// `ctx` must be null or a live (retained) context.
    pub(crate) unsafe fn set_current(op: &'static str, ctx: sys::CUcontext) -> Result<()> {
        // SAFETY: the caller guarantees `ctx` is null or live.
        check(op, unsafe { sys::cuCtxSetCurrent(ctx) })
    }

    /// Waits for all work of the current context.
    pub(crate) fn synchronize(op: &'static str) -> Result<()> {
        // SAFETY: no arguments; with no current context the driver reports an error.
        check(op, unsafe { sys::cuCtxSynchronize() })
    }
}

/// `cuStream*`: streams and stream capture.
pub(crate) mod stream {
    use super::*;

    /// A new stream of the current context that does not synchronise with the legacy default stream
    /// (`CU_STREAM_NON_BLOCKING`), so that no implicit dependency reaches into a capture.
    pub(crate) fn create(op: &'static str) -> Result<sys::CUstream> {
        let mut stream: sys::CUstream = ptr::null_mut();
        // SAFETY: writes one stream handle; with no current context the driver reports an error.
        check(op, unsafe { sys::cuStreamCreate(&mut stream, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint) })?;
        Ok(stream)
    }

    /// Destroys a stream; pending work still completes.
    ///
    /// # Safety
    /// `stream` must be live and not used afterwards.
    pub(crate) unsafe fn destroy(op: &'static str, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the caller guarantees `stream` is live and unused afterwards.
        check(op, unsafe { sys::cuStreamDestroy_v2(stream) })
    }

    /// Waits for all work enqueued on `stream`.
    ///
    /// # Safety
    /// `stream` must be live.
    pub(crate) unsafe fn synchronize(op: &'static str, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the caller guarantees `stream` is live.
        check(op, unsafe { sys::cuStreamSynchronize(stream) })
    }

    /// Makes later work on `stream` wait for `event`.
    ///
    /// # Safety
    /// Both handles must be live.
    pub(crate) unsafe fn wait_event(op: &'static str, stream: sys::CUstream, event: sys::CUevent) -> Result<()> {
        // SAFETY: the caller guarantees both handles are live.
        check(op, unsafe { sys::cuStreamWaitEvent(stream, event, 0) })
    }

    /// Starts capturing `stream` in `mode`.
    ///
    /// # Safety
    /// `stream` must be live.
    pub(crate) unsafe fn begin_capture(
        op: &'static str,
        stream: sys::CUstream,
        mode: sys::CUstreamCaptureMode,
    ) -> Result<()> {
        // SAFETY: the caller guarantees `stream` is live.
        check(op, unsafe { sys::cuStreamBeginCapture_v2(stream, mode) })
    }

    /// Ends the capture of `stream` and returns the captured graph, which the caller owns.
    ///
    /// # Safety
    /// `stream` must be live.
    pub(crate) unsafe fn end_capture(op: &'static str, stream: sys::CUstream) -> Result<sys::CUgraph> {
        let mut graph: sys::CUgraph = ptr::null_mut();
        // SAFETY: the caller guarantees `stream` is live; the driver writes one graph handle (null on failure).
        check(op, unsafe { sys::cuStreamEndCapture(stream, &mut graph) })?;
        Ok(graph)
    }

    /// The capture status of `stream` as the driver sees it.
    ///
    /// # Safety
    /// `stream` must be live.
    pub(crate) unsafe fn is_capturing(op: &'static str, stream: sys::CUstream) -> Result<sys::CUstreamCaptureStatus> {
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the caller guarantees `stream` is live; the driver writes one of the three status values.
        check(op, unsafe { sys::cuStreamIsCapturing(stream, &mut status) })?;
        Ok(status)
    }
}

/// `cuMem*`: device memory, pinned host memory and copies.
pub(crate) mod memory {
    use super::*;

    /// `bytes` of device memory in the current context.
    pub(crate) fn alloc(op: &'static str, bytes: usize) -> Result<sys::CUdeviceptr> {
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: writes one device address; the driver validates the size.
        check(op, unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes) })?;
        Ok(ptr)
    }

    /// Frees device memory.
    ///
    /// # Safety
    /// `ptr` must come from [`alloc`], not be freed yet, and not be used afterwards.
    pub(crate) unsafe fn free(op: &'static str, ptr: sys::CUdeviceptr) -> Result<()> {
        // SAFETY: the caller guarantees `ptr` is a live allocation.
        check(op, unsafe { sys::cuMemFree_v2(ptr) })
    }

    /// `bytes` of page-locked host memory usable by every context (`CU_MEMHOSTALLOC_PORTABLE`) and
    /// mapped into the device's address space (`CU_MEMHOSTALLOC_DEVICEMAP`), so kernels can read and
    /// write it directly ([`device_pointer_of_host`]).
    pub(crate) fn alloc_host(op: &'static str, bytes: usize) -> Result<*mut c_void> {
        let mut ptr: *mut c_void = ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: writes one host pointer; the driver validates the size.
        check(op, unsafe { sys::cuMemHostAlloc(&mut ptr, bytes, flags) })?;
        Ok(ptr)
    }

    /// The current context's device address of mapped page-locked host memory
    /// (`cuMemHostGetDevicePointer`).
    ///
    /// # Safety
    /// `ptr` must be a live allocation of [`alloc_host`].
    pub(crate) unsafe fn device_pointer_of_host(op: &'static str, ptr: *mut c_void) -> Result<sys::CUdeviceptr> {
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: writes one device pointer; `ptr` is live by the caller's contract.
        check(op, unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, ptr, 0) })?;
        Ok(device)
    }

    /// Frees page-locked host memory.
    ///
    /// # Safety
    /// `ptr` must come from [`alloc_host`], not be freed yet, and not be used afterwards.
    pub(crate) unsafe fn free_host(op: &'static str, ptr: *mut c_void) -> Result<()> {
        // SAFETY: the caller guarantees `ptr` is a live pinned allocation.
        check(op, unsafe { sys::cuMemFreeHost(ptr) })
    }

    /// Enqueues a host-to-device copy.
    ///
    /// # Safety
    /// `src..src + bytes` must be readable host memory and `dst..dst + bytes` device memory, both until
    /// the copy has run (for pageable `src`, until the call returns); `stream` must be live.
    pub(crate) unsafe fn copy_htod_async(
        op: &'static str,
        dst: sys::CUdeviceptr,
        src: *const c_void,
        bytes: usize,
        stream: sys::CUstream,
    ) -> Result<()> {
        // SAFETY: the caller guarantees both ranges and the stream.
        check(op, unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src, bytes, stream) })
    }

    /// Enqueues a device-to-host copy.
    ///
    /// # Safety
    /// `dst..dst + bytes` must be writable host memory, unaccessed by the host until the copy has run,
    /// and `src..src + bytes` device memory; `stream` must be live.
    pub(crate) unsafe fn copy_dtoh_async(
        op: &'static str,
        dst: *mut c_void,
        src: sys::CUdeviceptr,
        bytes: usize,
        stream: sys::CUstream,
    ) -> Result<()> {
        // SAFETY: the caller guarantees both ranges and the stream.
        check(op, unsafe { sys::cuMemcpyDtoHAsync_v2(dst, src, bytes, stream) })
    }

    /// Enqueues a device-to-device copy.
    ///
    /// # Safety
    /// `stream` must be live. (Device ranges are device memory: a bad one faults the device, not the host.)
    pub(crate) unsafe fn copy_dtod_async(
        op: &'static str,
        dst: sys::CUdeviceptr,
        src: sys::CUdeviceptr,
        bytes: usize,
        stream: sys::CUstream,
    ) -> Result<()> {
        // SAFETY: the caller guarantees the stream.
        check(op, unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, stream) })
    }

    /// Enqueues setting `bytes` bytes at `dst` to `value`.
    ///
    /// # Safety
    /// `stream` must be live.
    pub(crate) unsafe fn memset_d8_async(
        op: &'static str,
        dst: sys::CUdeviceptr,
        value: u8,
        bytes: usize,
        stream: sys::CUstream,
    ) -> Result<()> {
        // SAFETY: the caller guarantees the stream.
        check(op, unsafe { sys::cuMemsetD8Async(dst, value, bytes, stream) })
    }

    /// Free and total memory of the current context's device.
    pub(crate) fn info(op: &'static str) -> Result<(usize, usize)> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: writes two sizes.
        check(op, unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) })?;
        Ok((free, total))
    }
}

/// `cuEvent*`: events.
pub(crate) mod event {
    use super::*;

    /// A new event in the current context: timing enabled (`CU_EVENT_DEFAULT`) when `timed`, else
    /// `CU_EVENT_DISABLE_TIMING`.
    pub(crate) fn create(op: &'static str, timed: bool) -> Result<sys::CUevent> {
        let mut event: sys::CUevent = ptr::null_mut();
        let flags =
            if timed { sys::CUevent_flags::CU_EVENT_DEFAULT } else { sys::CUevent_flags::CU_EVENT_DISABLE_TIMING };
        // SAFETY: writes one event handle.
        check(op, unsafe { sys::cuEventCreate(&mut event, flags as c_uint) })?;
        Ok(event)
    }

    /// Destroys an event; if it is still pending, the driver frees it once it completes.
    ///
    /// # Safety
    /// `event` must be live and not used afterwards.
    pub(crate) unsafe fn destroy(op: &'static str, event: sys::CUevent) -> Result<()> {
        // SAFETY: the caller guarantees `event` is live and unused afterwards.
        check(op, unsafe { sys::cuEventDestroy_v2(event) })
    }

    /// Records `event` after the work enqueued on `stream` so far.
    ///
    /// # Safety
    /// Both handles must be live.
    pub(crate) unsafe fn record(op: &'static str, event: sys::CUevent, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the caller guarantees both handles.
        check(op, unsafe { sys::cuEventRecord(event, stream) })
    }

    /// Whether the work before the last record is done (`CUDA_ERROR_NOT_READY` is `false`).
    ///
    /// # Safety
    /// `event` must be live.
    pub(crate) unsafe fn query(op: &'static str, event: sys::CUevent) -> Result<bool> {
        // SAFETY: the caller guarantees `event`.
        match unsafe { sys::cuEventQuery(event) } {
            CUresult::CUDA_SUCCESS => Ok(true),
            CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => Err(vendor(op, other)),
        }
    }

    /// Waits for the work before the last record.
    ///
    /// # Safety
    /// `event` must be live.
    pub(crate) unsafe fn synchronize(op: &'static str, event: sys::CUevent) -> Result<()> {
        // SAFETY: the caller guarantees `event`.
        check(op, unsafe { sys::cuEventSynchronize(event) })
    }

    /// Milliseconds between two completed events.
    ///
    /// # Safety
    /// Both handles must be live.
    pub(crate) unsafe fn elapsed_ms(op: &'static str, start: sys::CUevent, end: sys::CUevent) -> Result<f32> {
        let driver = library::driver()?;
        let mut ms = 0f32;
        // SAFETY: `elapsed_time` is the driver's `cuEventElapsedTime(_v2)` (same signature); the caller
        // guarantees both handles; it writes one float.
        check(op, unsafe { (driver.elapsed_time)(&mut ms, start, end) })?;
        Ok(ms)
    }
}

/// `cuModule*`: loaded code.
pub(crate) mod module {
    use super::*;

    const JIT_LOG_BYTES: usize = 16 * 1024;

    /// Loads a PTX (NUL-terminated) or cubin image into the current context. On failure the JIT error log,
    /// if any, is appended to the error's message.
    ///
    /// # Safety
    /// `image` must point to a complete, readable image for the duration of the call (PTX must end with
    /// a NUL byte).
    pub(crate) unsafe fn load_data(op: &'static str, image: *const c_void) -> Result<sys::CUmodule> {
        let mut module: sys::CUmodule = ptr::null_mut();
        let mut log = vec![0u8; JIT_LOG_BYTES];
        let mut options =
            [sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER, sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
        // The driver reads a pointer and a size smuggled through `void*`, and writes back the log length.
        let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), JIT_LOG_BYTES as *mut c_void];
        // SAFETY: the caller guarantees the image; `log` is writable for `JIT_LOG_BYTES` bytes and outlives
        // the call; the option arrays hold two entries each.
        let res = unsafe {
            sys::cuModuleLoadDataEx(
                &mut module,
                image,
                options.len() as c_uint,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        if res == CUresult::CUDA_SUCCESS {
            return Ok(module);
        }
        let mut error = vendor(op, res);
        let written = (values[1] as usize).min(JIT_LOG_BYTES);
        let text = String::from_utf8_lossy(&log[..written]);
        let text = text.trim_end_matches('\0').trim();
        if let Error::Vendor { message, .. } = &mut error
            && !text.is_empty()
        {
            message.push_str("; JIT log: ");
            message.push_str(text);
        }
        Err(error)
    }

    /// Unloads a module.
    ///
    /// # Safety
    /// `module` must be live, and no kernel of it may run or be launched afterwards.
    pub(crate) unsafe fn unload(op: &'static str, module: sys::CUmodule) -> Result<()> {
        // SAFETY: the caller guarantees `module`.
        check(op, unsafe { sys::cuModuleUnload(module) })
    }
}

/// `cuModuleGetFunction`, `cuFuncGetAttribute`: kernels.
pub(crate) mod function {
    use super::*;

    /// The kernel `name` of `module`.
    ///
    /// # Safety
    /// `module` must be live.
    pub(crate) unsafe fn get(op: &'static str, module: sys::CUmodule, name: &CStr) -> Result<sys::CUfunction> {
        let mut function: sys::CUfunction = ptr::null_mut();
        // SAFETY: the caller guarantees `module`; `name` is NUL-terminated.
        check(op, unsafe { sys::cuModuleGetFunction(&mut function, module, name.as_ptr()) })?;
        Ok(function)
    }

    /// One attribute of a kernel.
    ///
    /// # Safety
    /// `function` must belong to a live module.
    pub(crate) unsafe fn attribute(
        op: &'static str,
        function: sys::CUfunction,
        attr: sys::CUfunction_attribute,
    ) -> Result<i32> {
        let mut value: c_int = 0;
        // SAFETY: the caller guarantees `function`; writes one int.
        check(op, unsafe { sys::cuFuncGetAttribute(&mut value, attr, function) })?;
        Ok(value)
    }
}

/// `cuLaunchKernel`, and `cuLaunchKernelEx` for programmatic dependent launches.
pub(crate) mod launch {
    use super::*;
    use crate::types::LaunchConfig;

    /// Enqueues a kernel; a [`LaunchConfig::programmatic`] one through `cuLaunchKernelEx` with
    /// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`, so it may start while the kernel
    /// before it on `stream` finishes.
    ///
    /// # Safety
    /// `function` must belong to a live module and `stream` be live; `params` must hold one pointer per
    /// kernel parameter, each to a value of that parameter's size, valid for the duration of the call
    /// (the driver copies them); whatever the kernel does with its arguments must be sound. A
    /// programmatic launch's kernel waits (`griddepcontrol.wait`) before it touches memory that
    /// earlier work on the stream uses.
    #[inline]
    pub(crate) unsafe fn kernel(
        op: &'static str,
        function: sys::CUfunction,
        config: &LaunchConfig,
        stream: sys::CUstream,
        params: *mut *mut c_void,
    ) -> Result<()> {
        let (grid, block, shared) = (config.grid, config.block, config.shared_mem_bytes);
        if !config.programmatic {
            // SAFETY: the caller guarantees every handle and argument; `extra` is null.
            return check(op, unsafe {
                sys::cuLaunchKernel(
                    function,
                    grid.x,
                    grid.y,
                    grid.z,
                    block.x,
                    block.y,
                    block.z,
                    shared,
                    stream,
                    params,
                    ptr::null_mut(),
                )
            });
        }
        // SAFETY: an all-zero attribute is a valid plain-data value; its id and value are set below.
        let mut attribute: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attribute.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attribute.value.programmaticStreamSerializationAllowed = 1;
        let launch = sys::CUlaunchConfig {
            gridDimX: grid.x,
            gridDimY: grid.y,
            gridDimZ: grid.z,
            blockDimX: block.x,
            blockDimY: block.y,
            blockDimZ: block.z,
            sharedMemBytes: shared,
            hStream: stream,
            attrs: &mut attribute,
            numAttrs: 1,
        };
        // SAFETY: the caller guarantees every handle and argument; `launch` and its attribute live for
        // the call; `extra` is null.
        check(op, unsafe { sys::cuLaunchKernelEx(&launch, function, params, ptr::null_mut()) })
    }
}

/// `cuGraph*`: captured and executable graphs.
pub(crate) mod graph {
    use super::*;

    /// The number of nodes of a graph.
    ///
    /// # Safety
    /// `graph` must be live and not used by another thread during the call.
    pub(crate) unsafe fn node_count(op: &'static str, graph: sys::CUgraph) -> Result<usize> {
        let mut count = 0usize;
        // SAFETY: the caller guarantees `graph`; with a null node array the driver only writes the count.
        check(op, unsafe { sys::cuGraphGetNodes(graph, ptr::null_mut(), &mut count) })?;
        Ok(count)
    }

    /// Instantiates a graph (no flags).
    ///
    /// # Safety
    /// `graph` must be live and not used by another thread during the call.
    pub(crate) unsafe fn instantiate(op: &'static str, graph: sys::CUgraph) -> Result<sys::CUgraphExec> {
        let mut exec: sys::CUgraphExec = ptr::null_mut();
        // SAFETY: the caller guarantees `graph`; writes one executable-graph handle.
        check(op, unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) })?;
        Ok(exec)
    }

    /// Enqueues one replay of `exec` on `stream`.
    ///
    /// # Safety
    /// Both handles must be live; `exec` must not be launched or updated concurrently from another
    /// thread; every address baked into it must be sound to use.
    #[inline]
    pub(crate) unsafe fn launch(op: &'static str, exec: sys::CUgraphExec, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the caller guarantees both handles and the addresses.
        check(op, unsafe { sys::cuGraphLaunch(exec, stream) })
    }

    /// `CUgraphExecUpdateResultInfo` with the result read as a plain integer: a newer driver may report
    /// a result code the bindings' enum does not have, and reading that as the enum would be undefined.
    #[repr(C)]
    struct UpdateResultInfo {
        result: u32,
        error_node: sys::CUgraphNode,
        error_from_node: sys::CUgraphNode,
    }

    const _: () = assert!(
        std::mem::size_of::<UpdateResultInfo>() == std::mem::size_of::<sys::CUgraphExecUpdateResultInfo>()
            && std::mem::align_of::<UpdateResultInfo>() == std::mem::align_of::<sys::CUgraphExecUpdateResultInfo>()
    );

    /// Updates `exec` in place from `graph`. `Ok(Err(code))` is a refusal
    /// (`CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE`) with the driver's `CUgraphExecUpdateResult` code; the
    /// driver leaves `exec` unchanged then.
    ///
    /// # Safety
    /// Both handles must be live, and `exec` must not be launched or updated concurrently.
    pub(crate) unsafe fn exec_update(
        op: &'static str,
        exec: sys::CUgraphExec,
        graph: sys::CUgraph,
    ) -> Result<std::result::Result<(), u32>> {
        let mut info = UpdateResultInfo { result: 0, error_node: ptr::null_mut(), error_from_node: ptr::null_mut() };
        // SAFETY: the caller guarantees both handles; `UpdateResultInfo` has the layout of
        // `CUgraphExecUpdateResultInfo` (checked above: a `repr(u32)` enum and two pointers).
        let res = unsafe {
            sys::cuGraphExecUpdate_v2(
                exec,
                graph,
                (&mut info as *mut UpdateResultInfo).cast::<sys::CUgraphExecUpdateResultInfo>(),
            )
        };
        match res {
            CUresult::CUDA_SUCCESS => Ok(Ok(())),
            CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE => Ok(Err(info.result)),
            other => Err(vendor(op, other)),
        }
    }

    /// The driver's name of a `CUgraphExecUpdateResult` code, with what it means.
    pub(crate) fn update_result_text(code: u32) -> String {
        let text = match code {
            1 => "CU_GRAPH_EXEC_UPDATE_ERROR: invalid value",
            2 => "CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED: the graph topology changed",
            3 => "CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED: a node changed type",
            4 => "CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED: a kernel node changed function",
            5 => "CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED: a node's parameters changed in an unsupported way",
            6 => "CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED: something about a node is not supported by update",
            7 => "CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE: the kernel changed in an unsupported way",
            8 => "CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED: a node's attributes changed",
            other => return format!("CUgraphExecUpdateResult {other}"),
        };
        text.to_string()
    }

    /// Destroys an executable graph; if it is in flight, the driver frees it on completion.
    ///
    /// # Safety
    /// `exec` must be live and not used afterwards.
    pub(crate) unsafe fn exec_destroy(op: &'static str, exec: sys::CUgraphExec) -> Result<()> {
        // SAFETY: the caller guarantees `exec`.
        check(op, unsafe { sys::cuGraphExecDestroy(exec) })
    }

    /// Destroys a graph.
    ///
    /// # Safety
    /// `graph` must be live and not used afterwards.
    pub(crate) unsafe fn destroy(op: &'static str, graph: sys::CUgraph) -> Result<()> {
        // SAFETY: the caller guarantees `graph`.
        check(op, unsafe { sys::cuGraphDestroy(graph) })
    }
}

pub(crate) mod nvrtc;
