//! The exported HIP runtime entry points, each over the CUDA driver call of the same meaning.
//!
//! Every function follows one order: first the arguments the fixture cannot map are refused with
//! [`not_supported`] (before any driver call, so the refusal is the same on every machine); then the
//! driver is loaded and the thread's device made current ([`enter`]); then out-pointers are checked;
//! then the CUDA call is made and its result mapped ([`cu`]). A panic inside becomes `hipErrorUnknown`
//! instead of unwinding into C ([`ffi`]).
//!
//! HIP handles are CUDA handles here: a `hipStream_t` is the `CUstream`, a `hipModule_t` the `CUmodule`,
//! and so on, so the signatures below use the CUDA handle types, which are the same pointers.
//!
//! This file holds the runtime, device, stream, memory and event entry points; `launch.rs` the
//! module and launch ones, `graph.rs` the graph ones and the AMD-only refusals.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::ptr;

use cudarc::driver::sys::{self, CUresult};

use crate::abi::{
    self, HIP_EVENT_BLOCKING_SYNC, HIP_EVENT_DISABLE_TIMING, HIP_EVENT_INTERPROCESS, HIP_HOST_MALLOC_MAPPED,
    HIP_HOST_MALLOC_PORTABLE, HIP_HOST_MALLOC_WRITE_COMBINED, HIP_STREAM_NON_BLOCKING, HipDeviceProp, HipStatus,
    capture_mode, capture_status, code, memcpy_kind,
};
use crate::driver::{self, HipResult, cu, enter};
use crate::errors::{not_supported, say_once};

/// Runs an entry point's body and returns its status; a panic becomes `hipErrorUnknown` (said once on
/// standard error) rather than unwinding across the C ABI.
pub(crate) fn ffi(name: &'static str, body: impl FnOnce() -> HipResult<()>) -> HipStatus {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => code::SUCCESS,
        Ok(Err(status)) => status,
        Err(_) => {
            say_once(format!("panic in {name}"), || format!("{name} panicked; returning hipErrorUnknown"));
            code::UNKNOWN
        }
    }
}

/// An out-pointer HIP requires: null is `hipErrorInvalidValue`.
pub(crate) fn out<T>(p: *mut T) -> HipResult<*mut T> {
    if p.is_null() { Err(code::INVALID_VALUE) } else { Ok(p) }
}

// ---------------------------------------------------------------------------------------------------
// Runtime and devices
// ---------------------------------------------------------------------------------------------------

/// `hipRuntimeGetVersion`: the CUDA driver's version (`cuDriverGetVersion`, e.g. 12080) written in HIP's
/// encoding, `major * 10^7 + minor * 10^5` (so saggar prints "12.8.0"). It is the CUDA driver's version,
/// not a HIP runtime's.
///
/// # Safety
/// `version` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipRuntimeGetVersion(version: *mut c_int) -> HipStatus {
    ffi("hipRuntimeGetVersion", || {
        let cuda = driver::driver()?.version;
        let out = out(version)?;
        // SAFETY: non-null, and writable by the caller's contract.
        unsafe { out.write((cuda / 1000) * 10_000_000 + ((cuda % 1000) / 10) * 100_000) };
        Ok(())
    })
}

/// `hipGetDeviceCount` → `cuDeviceGetCount` (read once at initialisation). Without a driver:
/// `hipErrorInsufficientDriver`; without a GPU: `hipErrorNoDevice`, as HIP answers on a machine without
/// one.
///
/// # Safety
/// `count` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetDeviceCount(count: *mut c_int) -> HipStatus {
    ffi("hipGetDeviceCount", || {
        let n = driver::driver()?.device_count;
        let out = out(count)?;
        // SAFETY: non-null, and writable by the caller's contract.
        unsafe { out.write(n) };
        if n == 0 { Err(code::NO_DEVICE) } else { Ok(()) }
    })
}

/// `hipSetDevice`: the thread's device becomes `device`, and its primary context current
/// (`cuDevicePrimaryCtxRetain` + `cuCtxSetCurrent`).
#[unsafe(no_mangle)]
pub extern "C" fn hipSetDevice(device: c_int) -> HipStatus {
    ffi("hipSetDevice", || driver::set_device(device))
}

/// `hipGetDevice`: the thread's device (0 until the thread sets one).
///
/// # Safety
/// `device` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetDevice(device: *mut c_int) -> HipStatus {
    ffi("hipGetDevice", || {
        let current = driver::current_device()?;
        let out = out(device)?;
        // SAFETY: non-null, and writable by the caller's contract.
        unsafe { out.write(current) };
        Ok(())
    })
}

/// One device attribute; `None` when the driver does not report it.
fn attribute(device: sys::CUdevice, attribute: sys::CUdevice_attribute) -> Option<c_int> {
    let mut value: c_int = 0;
    // SAFETY: writes one int; `device` is a valid device handle.
    let result = unsafe { sys::cuDeviceGetAttribute(&mut value, attribute, device) };
    (result == CUresult::CUDA_SUCCESS).then_some(value)
}

/// The properties of `device` in `hipDeviceProp_t`'s pre-6.0 layout.
fn properties(ordinal: c_int) -> HipResult<HipDeviceProp> {
    use sys::CUdevice_attribute::*;
    let device = driver::check_ordinal(ordinal)?;
    let mut p = HipDeviceProp::zeroed();
    let mut name = [0 as c_char; 256];
    // SAFETY: the driver writes at most `name.len()` bytes, NUL-terminated.
    cu("cuDeviceGetName", unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, device) })?;
    p.name = name;
    p.name[255] = 0;
    let mut total = 0usize;
    // SAFETY: writes one size.
    cu("cuDeviceTotalMem_v2", unsafe { sys::cuDeviceTotalMem_v2(&mut total, device) })?;
    p.totalGlobalMem = total;
    // What saggar's HIP backend reads must be there; the rest is filled where CUDA has the same property.
    let required = |a| attribute(device, a).ok_or(code::INVALID_DEVICE);
    p.maxThreadsPerBlock = required(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?;
    p.maxThreadsDim = [
        required(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
        required(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
        required(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
    ];
    p.maxGridSize = [
        required(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
        required(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
        required(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
    ];
    p.sharedMemPerBlock = required(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?.max(0) as usize;
    p.major = required(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    p.minor = required(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let optional = |a| attribute(device, a).unwrap_or(0);
    p.regsPerBlock = optional(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
    p.warpSize = optional(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    p.clockRate = optional(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    p.memoryClockRate = optional(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
    p.memoryBusWidth = optional(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
    p.totalConstMem = optional(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY).max(0) as usize;
    p.multiProcessorCount = optional(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    p.l2CacheSize = optional(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    p.maxThreadsPerMultiProcessor = optional(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
    p.computeMode = optional(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE);
    p.concurrentKernels = optional(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS);
    p.pciDomainID = optional(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
    p.pciBusID = optional(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
    p.pciDeviceID = optional(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
    p.maxSharedMemoryPerMultiProcessor =
        optional(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR).max(0) as usize;
    p.isMultiGpuBoard = optional(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD);
    p.canMapHostMemory = optional(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY);
    p.integrated = optional(CU_DEVICE_ATTRIBUTE_INTEGRATED);
    p.cooperativeLaunch = optional(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH);
    p.memPitch = optional(CU_DEVICE_ATTRIBUTE_MAX_PITCH).max(0) as usize;
    p.textureAlignment = optional(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT).max(0) as usize;
    p.texturePitchAlignment = optional(CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT).max(0) as usize;
    p.kernelExecTimeoutEnabled = optional(CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT);
    p.ECCEnabled = optional(CU_DEVICE_ATTRIBUTE_ECC_ENABLED);
    p.tccDriver = optional(CU_DEVICE_ATTRIBUTE_TCC_DRIVER);
    p.managedMemory = optional(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY);
    p.concurrentManagedAccess = optional(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS);
    p.pageableMemoryAccess = optional(CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS);
    // The architecture, honestly: the NVIDIA compute capability, which saggar's HIP backend then uses as
    // the compile target and in cache keys. `gcnArch` (a GCN number) stays 0: there is none.
    abi::set_c_field(&mut p.gcnArchName, &format!("sm_{}{}", p.major, p.minor));
    Ok(p)
}

/// `hipGetDeviceProperties` (the plain, pre-6.0 symbol): fills `hipDeviceProp_t` from
/// `cuDeviceGetName`, `cuDeviceTotalMem` and `cuDeviceGetAttribute`. `gcnArchName` is the NVIDIA
/// architecture, e.g. `sm_90`; fields CUDA has no counterpart for are zero.
///
/// # Safety
/// `props` must be null or point to a writable `hipDeviceProp_t` (pre-6.0 layout, 792 bytes).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetDeviceProperties(props: *mut HipDeviceProp, device: c_int) -> HipStatus {
    ffi("hipGetDeviceProperties", || {
        let filled = properties(device)?;
        let out = out(props)?;
        // SAFETY: non-null and, by the caller's contract, a writable `hipDeviceProp_t` of this layout.
        unsafe { out.write(filled) };
        Ok(())
    })
}

/// `hipDeviceTotalMem` → `cuDeviceTotalMem_v2`.
///
/// # Safety
/// `bytes` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceTotalMem(bytes: *mut usize, device: c_int) -> HipStatus {
    ffi("hipDeviceTotalMem", || {
        let handle = driver::check_ordinal(device)?;
        let out = out(bytes)?;
        // SAFETY: `out` is non-null and writable by the caller's contract; `handle` is a valid device.
        cu("cuDeviceTotalMem_v2", unsafe { sys::cuDeviceTotalMem_v2(out, handle) })
    })
}

/// `hipDeviceSynchronize` → `cuCtxSynchronize` on the thread's device.
#[unsafe(no_mangle)]
pub extern "C" fn hipDeviceSynchronize() -> HipStatus {
    ffi("hipDeviceSynchronize", || {
        enter()?;
        // SAFETY: no arguments; a context is current.
        cu("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
    })
}

/// `hipMemGetInfo` → `cuMemGetInfo_v2` on the thread's device.
///
/// # Safety
/// `free` and `total` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> HipStatus {
    ffi("hipMemGetInfo", || {
        enter()?;
        let (free, total) = (out(free)?, out(total)?);
        // SAFETY: both non-null and writable by the caller's contract; a context is current.
        cu("cuMemGetInfo_v2", unsafe { sys::cuMemGetInfo_v2(free, total) })
    })
}

// ---------------------------------------------------------------------------------------------------
// Streams and capture
// ---------------------------------------------------------------------------------------------------

/// `hipStreamCreateWithFlags` → `cuStreamCreate`. `hipStreamDefault` (0) and `hipStreamNonBlocking` (1)
/// are CUDA's `CU_STREAM_DEFAULT` / `CU_STREAM_NON_BLOCKING`; any other flag is not supported.
///
/// # Safety
/// `stream` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreateWithFlags(stream: *mut sys::CUstream, flags: c_uint) -> HipStatus {
    ffi("hipStreamCreateWithFlags", || {
        if flags & !HIP_STREAM_NON_BLOCKING != 0 {
            return Err(not_supported("hipStreamCreateWithFlags with flags other than hipStreamNonBlocking"));
        }
        enter()?;
        let out = out(stream)?;
        let cu_flags = if flags & HIP_STREAM_NON_BLOCKING != 0 {
            sys::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint
        } else {
            sys::CUstream_flags::CU_STREAM_DEFAULT as c_uint
        };
        // SAFETY: `out` is non-null and writable; a context is current.
        cu("cuStreamCreate", unsafe { sys::cuStreamCreate(out, cu_flags) })
    })
}

/// `hipStreamDestroy` → `cuStreamDestroy_v2`.
///
/// # Safety
/// `stream` must be a live stream.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamDestroy(stream: sys::CUstream) -> HipStatus {
    ffi("hipStreamDestroy", || {
        enter()?;
        // SAFETY: the caller guarantees `stream` is live.
        cu("cuStreamDestroy_v2", unsafe { sys::cuStreamDestroy_v2(stream) })
    })
}

/// `hipStreamSynchronize` → `cuStreamSynchronize`.
///
/// # Safety
/// `stream` must be live (or null, the null stream).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamSynchronize(stream: sys::CUstream) -> HipStatus {
    ffi("hipStreamSynchronize", || {
        enter()?;
        // SAFETY: the caller guarantees `stream`.
        cu("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(stream) })
    })
}

/// `hipStreamWaitEvent` → `cuStreamWaitEvent` (flags must be 0, as HIP requires).
///
/// # Safety
/// Both handles must be live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamWaitEvent(stream: sys::CUstream, event: sys::CUevent, flags: c_uint) -> HipStatus {
    ffi("hipStreamWaitEvent", || {
        if flags != 0 {
            return Err(not_supported("hipStreamWaitEvent with non-zero flags"));
        }
        enter()?;
        // SAFETY: the caller guarantees both handles.
        cu("cuStreamWaitEvent", unsafe { sys::cuStreamWaitEvent(stream, event, 0) })
    })
}

/// `hipStreamBeginCapture` → `cuStreamBeginCapture_v2`, each `hipStreamCaptureMode` mapped to the CUDA
/// mode of the same name; an unknown mode is `hipErrorInvalidValue`, as in HIP.
///
/// # Safety
/// `stream` must be live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamBeginCapture(stream: sys::CUstream, mode: c_int) -> HipStatus {
    ffi("hipStreamBeginCapture", || {
        use sys::CUstreamCaptureMode::*;
        let mode = match mode {
            capture_mode::GLOBAL => CU_STREAM_CAPTURE_MODE_GLOBAL,
            capture_mode::THREAD_LOCAL => CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            capture_mode::RELAXED => CU_STREAM_CAPTURE_MODE_RELAXED,
            _ => return Err(code::INVALID_VALUE),
        };
        enter()?;
        // SAFETY: the caller guarantees `stream`; `mode` is a valid enumerator.
        cu("cuStreamBeginCapture_v2", unsafe { sys::cuStreamBeginCapture_v2(stream, mode) })
    })
}

/// `hipStreamEndCapture` → `cuStreamEndCapture`.
///
/// # Safety
/// `stream` must be live; `graph` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamEndCapture(stream: sys::CUstream, graph: *mut sys::CUgraph) -> HipStatus {
    ffi("hipStreamEndCapture", || {
        enter()?;
        let out = out(graph)?;
        // SAFETY: the caller guarantees `stream`; `out` is non-null and writable.
        cu("cuStreamEndCapture", unsafe { sys::cuStreamEndCapture(stream, out) })
    })
}

/// `hipStreamIsCapturing` → `cuStreamIsCapturing`, the status mapped by name onto
/// `hipStreamCaptureStatus`.
///
/// # Safety
/// `stream` must be live; `status` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamIsCapturing(stream: sys::CUstream, status: *mut c_int) -> HipStatus {
    ffi("hipStreamIsCapturing", || {
        enter()?;
        let out = out(status)?;
        // The driver writes a C enum; it is read as the integer it is, never as a Rust enum.
        let mut raw: u32 = u32::MAX;
        // SAFETY: the caller guarantees `stream`; `raw` is a writable 32-bit slot, the size of the enum.
        cu("cuStreamIsCapturing", unsafe {
            sys::cuStreamIsCapturing(stream, (&mut raw as *mut u32).cast::<sys::CUstreamCaptureStatus>())
        })?;
        use sys::CUstreamCaptureStatus::*;
        let hip = match raw {
            r if r == CU_STREAM_CAPTURE_STATUS_NONE as u32 => capture_status::NONE,
            r if r == CU_STREAM_CAPTURE_STATUS_ACTIVE as u32 => capture_status::ACTIVE,
            r if r == CU_STREAM_CAPTURE_STATUS_INVALIDATED as u32 => capture_status::INVALIDATED,
            _ => return Err(code::UNKNOWN),
        };
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { out.write(hip) };
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------------
// Memory and copies
// ---------------------------------------------------------------------------------------------------

/// `hipMalloc` → `cuMemAlloc_v2` on the thread's device. Zero bytes: a null pointer and success, as HIP.
///
/// # Safety
/// `ptr` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMalloc(ptr: *mut *mut c_void, bytes: usize) -> HipStatus {
    ffi("hipMalloc", || {
        enter()?;
        let out = out(ptr)?;
        let mut address: sys::CUdeviceptr = 0;
        if bytes > 0 {
            // SAFETY: writes one device address; a context is current.
            cu("cuMemAlloc_v2", unsafe { sys::cuMemAlloc_v2(&mut address, bytes) })?;
        }
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { out.write(address as usize as *mut c_void) };
        Ok(())
    })
}

/// `hipFree` → `cuMemFree_v2`. Null: success, as HIP.
///
/// # Safety
/// `ptr` must be null or a live allocation of [`hipMalloc`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipFree(ptr: *mut c_void) -> HipStatus {
    ffi("hipFree", || {
        enter()?;
        if ptr.is_null() {
            return Ok(());
        }
        // SAFETY: the caller guarantees `ptr` is a live device allocation.
        cu("cuMemFree_v2", unsafe { sys::cuMemFree_v2(ptr as usize as sys::CUdeviceptr) })
    })
}

/// `hipHostMalloc` → `cuMemHostAlloc`. `hipHostMallocDefault` becomes `CU_MEMHOSTALLOC_PORTABLE |
/// CU_MEMHOSTALLOC_DEVICEMAP`, which is what the default means on AMD (pinned for every device and
/// mapped); `Portable`, `Mapped` and `WriteCombined` map to CUDA's flags of the same name; the AMD-only
/// flags (`Coherent`, `NonCoherent`, `NumaUser`) are not supported. Zero bytes: null and success.
///
/// # Safety
/// `ptr` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostMalloc(ptr: *mut *mut c_void, bytes: usize, flags: c_uint) -> HipStatus {
    ffi("hipHostMalloc", || {
        let known = HIP_HOST_MALLOC_PORTABLE | HIP_HOST_MALLOC_MAPPED | HIP_HOST_MALLOC_WRITE_COMBINED;
        if flags & !known != 0 {
            return Err(not_supported("hipHostMalloc with AMD-only flags (Coherent, NonCoherent, NumaUser)"));
        }
        let cu_flags = if flags == 0 {
            sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP
        } else {
            let mut f = 0;
            if flags & HIP_HOST_MALLOC_PORTABLE != 0 {
                f |= sys::CU_MEMHOSTALLOC_PORTABLE;
            }
            if flags & HIP_HOST_MALLOC_MAPPED != 0 {
                f |= sys::CU_MEMHOSTALLOC_DEVICEMAP;
            }
            if flags & HIP_HOST_MALLOC_WRITE_COMBINED != 0 {
                f |= sys::CU_MEMHOSTALLOC_WRITECOMBINED;
            }
            f
        };
        enter()?;
        let out = out(ptr)?;
        if bytes == 0 {
            // SAFETY: non-null and writable by the caller's contract.
            unsafe { out.write(ptr::null_mut()) };
            return Ok(());
        }
        // SAFETY: `out` is non-null and writable; a context is current.
        cu("cuMemHostAlloc", unsafe { sys::cuMemHostAlloc(out, bytes, cu_flags) })
    })
}

/// `hipHostFree` → `cuMemFreeHost`. Null: success.
///
/// # Safety
/// `ptr` must be null or a live allocation of [`hipHostMalloc`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostFree(ptr: *mut c_void) -> HipStatus {
    ffi("hipHostFree", || {
        enter()?;
        if ptr.is_null() {
            return Ok(());
        }
        // SAFETY: the caller guarantees `ptr` is a live pinned allocation.
        cu("cuMemFreeHost", unsafe { sys::cuMemFreeHost(ptr) })
    })
}

/// `hipHostGetDevicePointer` → `cuMemHostGetDevicePointer_v2`: the current device's address of
/// mapped pinned memory (every allocation of [`hipHostMalloc`] with the default flags is mapped).
/// Flags must be 0, as on AMD.
///
/// # Safety
/// `device` must be null or writable; `host` must be null or a live allocation of [`hipHostMalloc`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostGetDevicePointer(
    device: *mut *mut c_void,
    host: *mut c_void,
    flags: c_uint,
) -> HipStatus {
    ffi("hipHostGetDevicePointer", || {
        if flags != 0 {
            return Err(not_supported("hipHostGetDevicePointer with non-zero flags"));
        }
        enter()?;
        let out = out(device)?;
        let mut address: sys::CUdeviceptr = 0;
        // SAFETY: writes one device pointer; the driver checks that `host` is mapped pinned memory.
        cu("cuMemHostGetDevicePointer_v2", unsafe { sys::cuMemHostGetDevicePointer_v2(&mut address, host, 0) })?;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { out.write(address as usize as *mut c_void) };
        Ok(())
    })
}

/// A copy direction, checked.
fn copy_kind(kind: c_int) -> HipResult<c_int> {
    match kind {
        memcpy_kind::HOST_TO_HOST
        | memcpy_kind::HOST_TO_DEVICE
        | memcpy_kind::DEVICE_TO_HOST
        | memcpy_kind::DEVICE_TO_DEVICE
        | memcpy_kind::DEFAULT => Ok(kind),
        _ => Err(code::INVALID_MEMCPY_DIRECTION),
    }
}

/// `hipMemcpyAsync` → `cuMemcpyHtoDAsync_v2` / `cuMemcpyDtoHAsync_v2` / `cuMemcpyDtoDAsync_v2` by
/// direction; `hipMemcpyHostToHost` and `hipMemcpyDefault` → `cuMemcpyAsync` (unified addressing).
///
/// # Safety
/// The ranges must be valid for the direction, and stay so until the copy has run; `stream` live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyAsync(
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: c_int,
    stream: sys::CUstream,
) -> HipStatus {
    ffi("hipMemcpyAsync", || {
        let kind = copy_kind(kind)?;
        enter()?;
        let (d, s) = (dst as usize as sys::CUdeviceptr, src as usize as sys::CUdeviceptr);
        // SAFETY: the caller guarantees both ranges for this direction, and the stream.
        let (call, result) = unsafe {
            match kind {
                memcpy_kind::HOST_TO_DEVICE => {
                    ("cuMemcpyHtoDAsync_v2", sys::cuMemcpyHtoDAsync_v2(d, src, bytes, stream))
                }
                memcpy_kind::DEVICE_TO_HOST => {
                    ("cuMemcpyDtoHAsync_v2", sys::cuMemcpyDtoHAsync_v2(dst, s, bytes, stream))
                }
                memcpy_kind::DEVICE_TO_DEVICE => {
                    ("cuMemcpyDtoDAsync_v2", sys::cuMemcpyDtoDAsync_v2(d, s, bytes, stream))
                }
                _ => ("cuMemcpyAsync", sys::cuMemcpyAsync(d, s, bytes, stream)),
            }
        };
        cu(call, result)
    })
}

/// `hipMemcpy` → `cuMemcpyHtoD_v2` / `cuMemcpyDtoH_v2` / `cuMemcpyDtoD_v2` / `cuMemcpy`, as
/// [`hipMemcpyAsync`] but synchronous. (saggar's HIP backend does not call it; it is here because HIP's
/// synchronous copy is the obvious next call a backend makes.)
///
/// # Safety
/// The ranges must be valid for the direction.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpy(dst: *mut c_void, src: *const c_void, bytes: usize, kind: c_int) -> HipStatus {
    ffi("hipMemcpy", || {
        let kind = copy_kind(kind)?;
        enter()?;
        let (d, s) = (dst as usize as sys::CUdeviceptr, src as usize as sys::CUdeviceptr);
        // SAFETY: the caller guarantees both ranges for this direction.
        let (call, result) = unsafe {
            match kind {
                memcpy_kind::HOST_TO_DEVICE => ("cuMemcpyHtoD_v2", sys::cuMemcpyHtoD_v2(d, src, bytes)),
                memcpy_kind::DEVICE_TO_HOST => ("cuMemcpyDtoH_v2", sys::cuMemcpyDtoH_v2(dst, s, bytes)),
                memcpy_kind::DEVICE_TO_DEVICE => ("cuMemcpyDtoD_v2", sys::cuMemcpyDtoD_v2(d, s, bytes)),
                _ => ("cuMemcpy", sys::cuMemcpy(d, s, bytes)),
            }
        };
        cu(call, result)
    })
}

/// `hipMemsetAsync` → `cuMemsetD8Async` (HIP sets bytes to the low 8 bits of `value`).
///
/// # Safety
/// `dst..dst + bytes` must be device memory; `stream` live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetAsync(
    dst: *mut c_void,
    value: c_int,
    bytes: usize,
    stream: sys::CUstream,
) -> HipStatus {
    ffi("hipMemsetAsync", || {
        enter()?;
        // SAFETY: the caller guarantees the range and the stream.
        cu("cuMemsetD8Async", unsafe {
            sys::cuMemsetD8Async(dst as usize as sys::CUdeviceptr, value as u8, bytes, stream)
        })
    })
}

/// `hipMemset` → `cuMemsetD8_v2` (synchronous; not called by saggar's HIP backend, see [`hipMemcpy`]).
///
/// # Safety
/// `dst..dst + bytes` must be device memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemset(dst: *mut c_void, value: c_int, bytes: usize) -> HipStatus {
    ffi("hipMemset", || {
        enter()?;
        // SAFETY: the caller guarantees the range.
        cu("cuMemsetD8_v2", unsafe { sys::cuMemsetD8_v2(dst as usize as sys::CUdeviceptr, value as u8, bytes) })
    })
}

// ---------------------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------------------

/// `hipEventCreateWithFlags` → `cuEventCreate`. `hipEventDefault`, `BlockingSync`, `DisableTiming` and
/// `Interprocess` are CUDA's flags of the same names and values; the AMD-only release flags
/// (`hipEventReleaseToDevice` / `ToSystem`) are not supported.
///
/// # Safety
/// `event` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventCreateWithFlags(event: *mut sys::CUevent, flags: c_uint) -> HipStatus {
    ffi("hipEventCreateWithFlags", || {
        let known = HIP_EVENT_BLOCKING_SYNC | HIP_EVENT_DISABLE_TIMING | HIP_EVENT_INTERPROCESS;
        if flags & !known != 0 {
            return Err(not_supported("hipEventCreateWithFlags with AMD-only flags (hipEventReleaseTo*)"));
        }
        let mut cu_flags = 0;
        if flags & HIP_EVENT_BLOCKING_SYNC != 0 {
            cu_flags |= sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as c_uint;
        }
        if flags & HIP_EVENT_DISABLE_TIMING != 0 {
            cu_flags |= sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint;
        }
        if flags & HIP_EVENT_INTERPROCESS != 0 {
            cu_flags |= sys::CUevent_flags::CU_EVENT_INTERPROCESS as c_uint;
        }
        enter()?;
        let out = out(event)?;
        // SAFETY: `out` is non-null and writable; a context is current.
        cu("cuEventCreate", unsafe { sys::cuEventCreate(out, cu_flags) })
    })
}

/// `hipEventDestroy` → `cuEventDestroy_v2`.
///
/// # Safety
/// `event` must be live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventDestroy(event: sys::CUevent) -> HipStatus {
    ffi("hipEventDestroy", || {
        enter()?;
        // SAFETY: the caller guarantees `event`.
        cu("cuEventDestroy_v2", unsafe { sys::cuEventDestroy_v2(event) })
    })
}

/// `hipEventRecord` → `cuEventRecord`.
///
/// # Safety
/// Both handles must be live (the stream may be null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventRecord(event: sys::CUevent, stream: sys::CUstream) -> HipStatus {
    ffi("hipEventRecord", || {
        enter()?;
        // SAFETY: the caller guarantees both handles.
        cu("cuEventRecord", unsafe { sys::cuEventRecord(event, stream) })
    })
}

/// `hipEventQuery` → `cuEventQuery` (`hipErrorNotReady` while pending, as CUDA's `NOT_READY`).
///
/// # Safety
/// `event` must be live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventQuery(event: sys::CUevent) -> HipStatus {
    ffi("hipEventQuery", || {
        enter()?;
        // SAFETY: the caller guarantees `event`.
        cu("cuEventQuery", unsafe { sys::cuEventQuery(event) })
    })
}

/// `hipEventSynchronize` → `cuEventSynchronize`.
///
/// # Safety
/// `event` must be live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventSynchronize(event: sys::CUevent) -> HipStatus {
    ffi("hipEventSynchronize", || {
        enter()?;
        // SAFETY: the caller guarantees `event`.
        cu("cuEventSynchronize", unsafe { sys::cuEventSynchronize(event) })
    })
}

/// `hipEventElapsedTime` → `cuEventElapsedTime_v2` (or `cuEventElapsedTime` on drivers before 12.8).
///
/// # Safety
/// Both events must be live; `ms` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventElapsedTime(ms: *mut f32, start: sys::CUevent, stop: sys::CUevent) -> HipStatus {
    ffi("hipEventElapsedTime", || {
        let elapsed_time = driver::driver()?.elapsed_time;
        enter()?;
        let out = out(ms)?;
        // SAFETY: `out` is non-null and writable; the caller guarantees both events; the function pointer
        // was resolved from the loaded driver with this signature.
        cu("cuEventElapsedTime", unsafe { elapsed_time(out, start, stop) })
    })
}
