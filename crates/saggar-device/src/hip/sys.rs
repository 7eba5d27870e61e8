//! Raw declarations of the HIP runtime and hipRTC entry points saggar calls, on top of hip-runtime-sys.
//!
//! # What comes from hip-runtime-sys, and why saggar declares the functions itself
//! hip-runtime-sys (bindgen over ROCm 5.4's `hip_runtime_api.h`) provides the link to libamdhip64 (its
//! build script finds HIP under `HIP_PATH` or `ROCM_PATH`), the opaque handle types, the plain structs
//! saggar passes by pointer (`hipDeviceProp_t`, `hipKernelNodeParams`, `dim3`) and the enums saggar *passes
//! in* (`hipMemcpyKind`, `hipStreamCaptureMode`), and the numeric values of the error codes saggar gives a
//! meaning to. Those are stable across ROCm 5.x and 6.x (checked against ROCm 5.2's header, the one
//! Debian ships; see the assertions below).
//!
//! Its function declarations, however, *return* `hipError_t` as a Rust enum (bindgen's
//! `rustified_non_exhaustive_enum`), and a few write enums through out-pointers. A newer runtime may
//! return a code that ROCm 5.4 did not have (ROCm 6 added several), and a Rust enum holding a value
//! that is not one of its variants is undefined behaviour the moment it is produced. So saggar declares
//! every function it calls here again, with the status as a plain `c_int` ([`HipStatus`]) and every
//! enum it *reads* as a plain integer. The symbols are the same; only the Rust types differ.
//!
//! One enum saggar reads has even changed its numbering between ROCm releases: `hipGraphNodeType`
//! (ROCm 5.2: `hipGraphNodeTypeKernel = 1`; ROCm 5.4 and later: `= 0`, and later releases renumbered
//! the tail again). saggar therefore never interprets a node type number; it only compares node types of
//! two graphs made by the same runtime (see `graph.rs`).
//!
//! # ABI notes
//! - `hipGetDeviceProperties` is declared with the pre-6.0 `hipDeviceProp_t` layout (ROCm 6 calls it
//!   `hipDeviceProp_tR0000`). ROCm 6 headers map the name to `hipGetDevicePropertiesR0600`, but the
//!   library keeps exporting the plain symbol (version `hip_4.2`) with the old layout for binaries like
//!   this one. saggar hands it a buffer with spare room at the end ([`DevicePropBuffer`]) in case a 5.x
//!   release between 5.4 and 6.0 grew the struct, and reads only fields whose offsets never moved.
//! - `hipGraphInstantiateWithFlags` is used instead of `hipGraphInstantiate`, whose parameter list
//!   follows CUDA's and is the one most likely to change.
//! - hipRTC is never linked: it lives in libamdhip64 up to ROCm 5.x and in a separate libhiprtc from
//!   ROCm 6, so [`Hiprtc::load`] finds it at run time with libloading.

#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void};

pub use hip_runtime_sys::{
    dim3, hipDeviceProp_t, hipError_t, hipEvent_t, hipFunction_t, hipGraph_t, hipGraphExec_t, hipGraphNode_t,
    hipKernelNodeParams, hipMemcpyKind, hipModule_t, hipStream_t, hipStreamCaptureMode,
};

/// A `hipError_t` as the runtime returns it: a C enum, read as the `int` it is.
pub type HipStatus = c_int;

/// The error codes saggar gives a meaning of its own, with hip-runtime-sys's values.
pub mod code {
    use super::{HipStatus, hipError_t};

    /// `hipSuccess`.
    pub const SUCCESS: HipStatus = hipError_t::hipSuccess as HipStatus;
    /// `hipErrorInvalidValue` (the tests' example of a code saggar gives no meaning of its own).
    #[cfg(test)]
    pub const INVALID_VALUE: HipStatus = hipError_t::hipErrorInvalidValue as HipStatus;
    /// `hipErrorOutOfMemory`.
    pub const OUT_OF_MEMORY: HipStatus = hipError_t::hipErrorOutOfMemory as HipStatus;
    /// `hipErrorInvalidDevice`.
    pub const INVALID_DEVICE: HipStatus = hipError_t::hipErrorInvalidDevice as HipStatus;
    /// `hipErrorNoDevice`.
    pub const NO_DEVICE: HipStatus = hipError_t::hipErrorNoDevice as HipStatus;
    /// `hipErrorInsufficientDriver`.
    pub const INSUFFICIENT_DRIVER: HipStatus = hipError_t::hipErrorInsufficientDriver as HipStatus;
    /// `hipErrorNotInitialized`.
    pub const NOT_INITIALIZED: HipStatus = hipError_t::hipErrorNotInitialized as HipStatus;
    /// `hipErrorInvalidImage`.
    pub const INVALID_IMAGE: HipStatus = hipError_t::hipErrorInvalidImage as HipStatus;
    /// `hipErrorNoBinaryForGpu`.
    pub const NO_BINARY_FOR_GPU: HipStatus = hipError_t::hipErrorNoBinaryForGpu as HipStatus;
    /// `hipErrorInvalidKernelFile`.
    pub const INVALID_KERNEL_FILE: HipStatus = hipError_t::hipErrorInvalidKernelFile as HipStatus;
    /// `hipErrorSharedObjectInitFailed`.
    pub const SHARED_OBJECT_INIT_FAILED: HipStatus = hipError_t::hipErrorSharedObjectInitFailed as HipStatus;
    /// `hipErrorNotFound`.
    pub const NOT_FOUND: HipStatus = hipError_t::hipErrorNotFound as HipStatus;
    /// `hipErrorInvalidSymbol`.
    pub const INVALID_SYMBOL: HipStatus = hipError_t::hipErrorInvalidSymbol as HipStatus;
    /// `hipErrorInvalidDeviceFunction`.
    pub const INVALID_DEVICE_FUNCTION: HipStatus = hipError_t::hipErrorInvalidDeviceFunction as HipStatus;
    /// `hipErrorNotReady`.
    pub const NOT_READY: HipStatus = hipError_t::hipErrorNotReady as HipStatus;
    /// `hipErrorIllegalAddress`.
    pub const ILLEGAL_ADDRESS: HipStatus = hipError_t::hipErrorIllegalAddress as HipStatus;
    /// `hipErrorLaunchOutOfResources`.
    pub const LAUNCH_OUT_OF_RESOURCES: HipStatus = hipError_t::hipErrorLaunchOutOfResources as HipStatus;
    /// `hipErrorLaunchTimeOut`.
    pub const LAUNCH_TIMEOUT: HipStatus = hipError_t::hipErrorLaunchTimeOut as HipStatus;
    /// `hipErrorLaunchFailure`.
    pub const LAUNCH_FAILURE: HipStatus = hipError_t::hipErrorLaunchFailure as HipStatus;
    /// `hipErrorAssert`.
    pub const ASSERT: HipStatus = hipError_t::hipErrorAssert as HipStatus;
    /// `hipErrorECCNotCorrectable`.
    pub const ECC_NOT_CORRECTABLE: HipStatus = hipError_t::hipErrorECCNotCorrectable as HipStatus;
    /// `hipErrorStreamCaptureUnsupported`.
    pub const STREAM_CAPTURE_UNSUPPORTED: HipStatus = hipError_t::hipErrorStreamCaptureUnsupported as HipStatus;
    /// `hipErrorStreamCaptureInvalidated`.
    pub const STREAM_CAPTURE_INVALIDATED: HipStatus = hipError_t::hipErrorStreamCaptureInvalidated as HipStatus;
    /// `hipErrorStreamCaptureMerge`.
    pub const STREAM_CAPTURE_MERGE: HipStatus = hipError_t::hipErrorStreamCaptureMerge as HipStatus;
    /// `hipErrorStreamCaptureUnmatched`.
    pub const STREAM_CAPTURE_UNMATCHED: HipStatus = hipError_t::hipErrorStreamCaptureUnmatched as HipStatus;
    /// `hipErrorStreamCaptureIsolation`.
    pub const STREAM_CAPTURE_ISOLATION: HipStatus = hipError_t::hipErrorStreamCaptureIsolation as HipStatus;
    /// `hipErrorStreamCaptureImplicit`.
    pub const STREAM_CAPTURE_IMPLICIT: HipStatus = hipError_t::hipErrorStreamCaptureImplicit as HipStatus;
    /// `hipErrorCapturedEvent`.
    pub const CAPTURED_EVENT: HipStatus = hipError_t::hipErrorCapturedEvent as HipStatus;
    /// `hipErrorStreamCaptureWrongThread`.
    pub const STREAM_CAPTURE_WRONG_THREAD: HipStatus = hipError_t::hipErrorStreamCaptureWrongThread as HipStatus;
    /// `hipErrorGraphExecUpdateFailure`.
    pub const GRAPH_EXEC_UPDATE_FAILURE: HipStatus = hipError_t::hipErrorGraphExecUpdateFailure as HipStatus;
}

/// `hipStreamNonBlocking`: no implicit synchronisation with the null stream.
pub const STREAM_NON_BLOCKING: c_uint = hip_runtime_sys::hipStreamNonBlocking;
/// `hipEventDefault`: timing enabled.
pub const EVENT_DEFAULT: c_uint = hip_runtime_sys::hipEventDefault;
pub const EVENT_DISABLE_TIMING: c_uint = hip_runtime_sys::hipEventDisableTiming;
/// `hipHostMallocDefault`.
pub const HOST_MALLOC_DEFAULT: c_uint = hip_runtime_sys::hipHostMallocDefault;

/// `hipStreamCaptureStatus` values (stable since HIP graphs appeared in ROCm 4.3).
pub mod capture_status {
    use std::ffi::c_int;

    /// `hipStreamCaptureStatusNone`.
    pub const NONE: c_int = 0;
    /// `hipStreamCaptureStatusActive`.
    pub const ACTIVE: c_int = 1;
    /// `hipStreamCaptureStatusInvalidated`.
    pub const INVALIDATED: c_int = 2;
}

/// `hipFunction_attribute` values (driver_types.h; CUDA's numbering, unchanged since ROCm 4).
pub mod func_attribute {
    use std::ffi::c_int;

    /// `HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`.
    pub const MAX_THREADS_PER_BLOCK: c_int = 0;
    /// `HIP_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
    pub const MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;
}

/// `hipGraphExecUpdateResult` values (the same in every ROCm release so far, and CUDA's).
pub mod update_result {
    use std::ffi::c_int;

    /// `hipGraphExecUpdateSuccess`.
    pub const SUCCESS: c_int = 0;
}

// ROCm 5.2's `hipDeviceProp_t` (the pre-6.0 layout) is 792 bytes, with `gcnArchName` at 396; the
// bindings must agree, or `hipGetDeviceProperties` would write past what saggar reads.
const _: () = assert!(std::mem::size_of::<hipDeviceProp_t>() == 792);
const _: () = assert!(std::mem::offset_of!(hipDeviceProp_t, gcnArchName) == 396);
const _: () = assert!(std::mem::size_of::<hipKernelNodeParams>() == 64);

/// A `hipDeviceProp_t` (pre-6.0 layout) with spare room after it, handed to `hipGetDeviceProperties`.
#[repr(C)]
pub struct DevicePropBuffer {
    /// The properties.
    pub props: hipDeviceProp_t,
    /// Room for fields a later 5.x release may have appended; never read.
    _spare: [u8; 1024],
}

impl DevicePropBuffer {
    /// An all-zero buffer (every field of `hipDeviceProp_t` is an integer, an array or a raw pointer,
    /// for which zero is a valid value).
    pub fn zeroed() -> Box<DevicePropBuffer> {
        // SAFETY: see above: all-zero bytes are a valid `DevicePropBuffer`.
        Box::new(unsafe { std::mem::zeroed() })
    }
}

#[link(name = "amdhip64", kind = "dylib")]
unsafe extern "C" {
    pub safe fn hipGetErrorName(error: HipStatus) -> *const c_char;
    pub safe fn hipGetErrorString(error: HipStatus) -> *const c_char;
    pub fn hipGetDeviceCount(count: *mut c_int) -> HipStatus;
    pub fn hipRuntimeGetVersion(version: *mut c_int) -> HipStatus;
    pub safe fn hipSetDevice(device: c_int) -> HipStatus;
    pub fn hipGetDevice(device: *mut c_int) -> HipStatus;
    pub fn hipGetDeviceProperties(props: *mut hipDeviceProp_t, device: c_int) -> HipStatus;
    pub fn hipDeviceTotalMem(bytes: *mut usize, device: c_int) -> HipStatus;
    pub fn hipDeviceSynchronize() -> HipStatus;
    pub fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> HipStatus;

    pub fn hipStreamCreateWithFlags(stream: *mut hipStream_t, flags: c_uint) -> HipStatus;
    pub fn hipStreamDestroy(stream: hipStream_t) -> HipStatus;
    pub fn hipStreamSynchronize(stream: hipStream_t) -> HipStatus;
    pub fn hipStreamWaitEvent(stream: hipStream_t, event: hipEvent_t, flags: c_uint) -> HipStatus;
    pub fn hipStreamBeginCapture(stream: hipStream_t, mode: hipStreamCaptureMode) -> HipStatus;
    pub fn hipStreamEndCapture(stream: hipStream_t, graph: *mut hipGraph_t) -> HipStatus;
    pub fn hipStreamIsCapturing(stream: hipStream_t, status: *mut c_int) -> HipStatus;

    pub fn hipMalloc(ptr: *mut *mut c_void, bytes: usize) -> HipStatus;
    pub fn hipFree(ptr: *mut c_void) -> HipStatus;
    pub fn hipHostMalloc(ptr: *mut *mut c_void, bytes: usize, flags: c_uint) -> HipStatus;
    pub fn hipHostFree(ptr: *mut c_void) -> HipStatus;
    pub fn hipHostGetDevicePointer(device: *mut *mut c_void, host: *mut c_void, flags: c_uint) -> HipStatus;
    pub fn hipMemcpyAsync(
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: hipMemcpyKind,
        stream: hipStream_t,
    ) -> HipStatus;
    pub fn hipMemsetAsync(dst: *mut c_void, value: c_int, bytes: usize, stream: hipStream_t) -> HipStatus;

    pub fn hipEventCreateWithFlags(event: *mut hipEvent_t, flags: c_uint) -> HipStatus;
    pub fn hipEventDestroy(event: hipEvent_t) -> HipStatus;
    pub fn hipEventRecord(event: hipEvent_t, stream: hipStream_t) -> HipStatus;
    pub fn hipEventQuery(event: hipEvent_t) -> HipStatus;
    pub fn hipEventSynchronize(event: hipEvent_t) -> HipStatus;
    pub fn hipEventElapsedTime(ms: *mut f32, start: hipEvent_t, stop: hipEvent_t) -> HipStatus;

    pub fn hipModuleLoadData(module: *mut hipModule_t, image: *const c_void) -> HipStatus;
    pub fn hipModuleUnload(module: hipModule_t) -> HipStatus;
    pub fn hipModuleGetFunction(function: *mut hipFunction_t, module: hipModule_t, name: *const c_char) -> HipStatus;
    pub fn hipFuncGetAttribute(value: *mut c_int, attribute: c_int, function: hipFunction_t) -> HipStatus;
    pub fn hipModuleLaunchKernel(
        function: hipFunction_t,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared_mem_bytes: c_uint,
        stream: hipStream_t,
        kernel_params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> HipStatus;

    pub fn hipGraphGetNodes(graph: hipGraph_t, nodes: *mut hipGraphNode_t, count: *mut usize) -> HipStatus;
    pub fn hipGraphNodeGetType(node: hipGraphNode_t, kind: *mut c_int) -> HipStatus;
    pub fn hipGraphInstantiateWithFlags(exec: *mut hipGraphExec_t, graph: hipGraph_t, flags: u64) -> HipStatus;
    pub fn hipGraphLaunch(exec: hipGraphExec_t, stream: hipStream_t) -> HipStatus;
    pub fn hipGraphExecUpdate(
        exec: hipGraphExec_t,
        graph: hipGraph_t,
        error_node: *mut hipGraphNode_t,
        result: *mut c_int,
    ) -> HipStatus;
    pub fn hipGraphExecKernelNodeSetParams(
        exec: hipGraphExec_t,
        node: hipGraphNode_t,
        params: *const hipKernelNodeParams,
    ) -> HipStatus;
    pub fn hipGraphExecDestroy(exec: hipGraphExec_t) -> HipStatus;
    pub fn hipGraphDestroy(graph: hipGraph_t) -> HipStatus;
}

/// An `hiprtcProgram` (`struct _hiprtcProgram*`).
pub type hiprtcProgram = *mut c_void;
/// An `hiprtcResult` as returned: a C enum, read as the `int` it is.
pub type HiprtcStatus = c_int;

/// `HIPRTC_SUCCESS`.
pub const HIPRTC_SUCCESS: HiprtcStatus = 0;
/// `HIPRTC_ERROR_INVALID_INPUT`.
pub const HIPRTC_ERROR_INVALID_INPUT: HiprtcStatus = 3;
/// `HIPRTC_ERROR_COMPILATION`: the source did not compile; the log says why.
pub const HIPRTC_ERROR_COMPILATION: HiprtcStatus = 6;

/// The names of `hiprtcResult` codes (hiprtc.h), for runtimes whose `hiprtcGetErrorString` lacks one.
pub fn hiprtc_status_name(status: HiprtcStatus) -> Option<&'static str> {
    Some(match status {
        0 => "HIPRTC_SUCCESS",
        1 => "HIPRTC_ERROR_OUT_OF_MEMORY",
        2 => "HIPRTC_ERROR_PROGRAM_CREATION_FAILURE",
        3 => "HIPRTC_ERROR_INVALID_INPUT",
        4 => "HIPRTC_ERROR_INVALID_PROGRAM",
        5 => "HIPRTC_ERROR_INVALID_OPTION",
        6 => "HIPRTC_ERROR_COMPILATION",
        7 => "HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE",
        8 => "HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
        9 => "HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
        10 => "HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID",
        11 => "HIPRTC_ERROR_INTERNAL_ERROR",
        _ => return None,
    })
}

type GetErrorStringFn = unsafe extern "C" fn(HiprtcStatus) -> *const c_char;
type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> HiprtcStatus;
type CreateProgramFn = unsafe extern "C" fn(
    *mut hiprtcProgram,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> HiprtcStatus;
type CompileProgramFn = unsafe extern "C" fn(hiprtcProgram, c_int, *const *const c_char) -> HiprtcStatus;
type GetSizeFn = unsafe extern "C" fn(hiprtcProgram, *mut usize) -> HiprtcStatus;
type GetBytesFn = unsafe extern "C" fn(hiprtcProgram, *mut c_char) -> HiprtcStatus;
type DestroyProgramFn = unsafe extern "C" fn(*mut hiprtcProgram) -> HiprtcStatus;

/// The hipRTC entry points, resolved from the library that has them. The signatures are hiprtc.h's,
/// unchanged from ROCm 4.2 to 6.x.
#[derive(Debug)]
pub struct Hiprtc {
    /// The library the functions were found in, as it was opened (e.g. `libamdhip64.so`).
    pub library_name: String,
    /// `hiprtcGetErrorString`.
    pub get_error_string: GetErrorStringFn,
    /// `hiprtcVersion`.
    pub version: VersionFn,
    /// `hiprtcCreateProgram`.
    pub create_program: CreateProgramFn,
    /// `hiprtcCompileProgram`.
    pub compile_program: CompileProgramFn,
    /// `hiprtcGetProgramLogSize`.
    pub get_program_log_size: GetSizeFn,
    /// `hiprtcGetProgramLog`.
    pub get_program_log: GetBytesFn,
    /// `hiprtcGetCodeSize`.
    pub get_code_size: GetSizeFn,
    /// `hiprtcGetCode`.
    pub get_code: GetBytesFn,
    /// `hiprtcDestroyProgram`.
    pub destroy_program: DestroyProgramFn,
    /// Keeps the library loaded while the function pointers above are in use (for the process).
    _library: libloading::Library,
}

/// Where hipRTC is looked for, in order: its own library first (ROCm 6 and later ship only that, and
/// ROCm 5.3+ ship it beside libamdhip64), then libamdhip64 (ROCm up to 5.x has hipRTC inside; Debian's
/// ROCm 5.2 has only that). Versioned names come after the unversioned ones because runtime packages
/// often lack the `.so` development symlink; `/opt/rocm/lib` is ROCm's default prefix, for machines
/// where it is not on the loader path.
pub const HIPRTC_CANDIDATES: &[&str] = &[
    "libhiprtc.so",
    "libhiprtc.so.7",
    "libhiprtc.so.6",
    "libhiprtc.so.5",
    "/opt/rocm/lib/libhiprtc.so",
    "libamdhip64.so",
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
    "/opt/rocm/lib/libamdhip64.so",
];

impl Hiprtc {
    /// Loads hipRTC from the first of [`HIPRTC_CANDIDATES`] that opens and exports
    /// `hiprtcCreateProgram`. The error lists what was tried and why each candidate failed.
    pub fn load() -> Result<Hiprtc, String> {
        let mut tried = Vec::new();
        for &name in HIPRTC_CANDIDATES {
            // SAFETY: loading a ROCm library runs its initialisers, which have no preconditions; the
            // libamdhip64 candidates are the library this process is already linked against.
            let library = match unsafe { libloading::Library::new(name) } {
                Ok(library) => library,
                Err(e) => {
                    tried.push(format!("{name}: {}", short_dl_error(&e.to_string())));
                    continue;
                }
            };
            match Hiprtc::resolve(name, library) {
                Ok(api) => return Ok(api),
                Err(why) => tried.push(format!("{name}: {why}")),
            }
        }
        Err(format!("hipRTC not found: no library exports hiprtcCreateProgram (tried {})", tried.join("; ")))
    }

    fn resolve(name: &str, library: libloading::Library) -> Result<Hiprtc, String> {
        /// Copies a function pointer out of the library.
        ///
        /// # Safety
        /// `T` must be the symbol's true function type.
        unsafe fn get<T: Copy>(library: &libloading::Library, symbol: &str) -> Result<T, String> {
            // SAFETY: the caller names the symbol's true type; the pointer is used only while `library`
            // stays loaded (it is stored next to it in `Hiprtc`).
            unsafe { library.get::<T>(symbol.as_bytes()) }
                .map(|s| *s)
                .map_err(|_| format!("loaded, but it does not export {symbol}"))
        }
        // SAFETY: every type below is the function's signature in hiprtc.h (ROCm 4.2 to 6.x).
        unsafe {
            Ok(Hiprtc {
                library_name: name.to_string(),
                create_program: get(&library, "hiprtcCreateProgram")?,
                get_error_string: get(&library, "hiprtcGetErrorString")?,
                version: get(&library, "hiprtcVersion")?,
                compile_program: get(&library, "hiprtcCompileProgram")?,
                get_program_log_size: get(&library, "hiprtcGetProgramLogSize")?,
                get_program_log: get(&library, "hiprtcGetProgramLog")?,
                get_code_size: get(&library, "hiprtcGetCodeSize")?,
                get_code: get(&library, "hiprtcGetCode")?,
                destroy_program: get(&library, "hiprtcDestroyProgram")?,
                _library: library,
            })
        }
    }
}

/// `amd_comgr_metadata_node_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ComgrMetadataNode {
    /// The opaque handle.
    pub handle: u64,
}

/// `amd_comgr_status_t` as returned: a C enum, read as the `int` it is.
pub type ComgrStatus = c_int;
/// `AMD_COMGR_STATUS_SUCCESS`.
pub const COMGR_SUCCESS: ComgrStatus = 0;

type GetIsaMetadataFn = unsafe extern "C" fn(*const c_char, *mut ComgrMetadataNode) -> ComgrStatus;
type DestroyMetadataFn = unsafe extern "C" fn(ComgrMetadataNode) -> ComgrStatus;

/// The two entry points of ROCm's code-object manager (comgr) that saggar uses to check a target before
/// it reaches hipRTC: hipRTC (which compiles through comgr) aborts the whole process, in ROCm 5.2 at
/// least, when `--offload-arch` names a processor or feature it does not know ("gfx942" there, or a
/// typo), where comgr's own ISA lookup answers with an error.
#[derive(Debug)]
pub struct Comgr {
    /// `amd_comgr_get_isa_metadata` (comgr 1.8 and later).
    pub get_isa_metadata: GetIsaMetadataFn,
    /// `amd_comgr_destroy_metadata` (comgr 1.8 and later).
    pub destroy_metadata: DestroyMetadataFn,
    _library: libloading::Library,
}

/// Where comgr is looked for (ROCm 5.x and 6.x ship `libamd_comgr.so.2`, ROCm 7 `.so.3`).
pub const COMGR_CANDIDATES: &[&str] =
    &["libamd_comgr.so", "libamd_comgr.so.3", "libamd_comgr.so.2", "/opt/rocm/lib/libamd_comgr.so"];

/// `RTLD_NOLOAD` (glibc and musl): open a library only if the process has already loaded it.
#[cfg(target_os = "linux")]
const RTLD_NOLOAD: c_int = 4;

impl Comgr {
    /// comgr as hipRTC uses it: first a copy the process has already loaded (hipRTC loads its own when
    /// it creates a program, so a machine with several ROCm installations checks targets against the
    /// compiler hipRTC will use), then the first of [`COMGR_CANDIDATES`] that loads and has both entry
    /// points.
    pub fn load() -> Option<Comgr> {
        #[cfg(target_os = "linux")]
        let already_loaded = COMGR_CANDIDATES.iter().find_map(|&name| {
            let flags = RTLD_NOLOAD | libloading::os::unix::RTLD_LAZY;
            // SAFETY: with RTLD_NOLOAD nothing is loaded and no initialiser runs; the handle names a
            // library the process already holds.
            let library = unsafe { libloading::os::unix::Library::open(Some(name), flags) }.ok()?;
            Comgr::resolve(library.into())
        });
        #[cfg(not(target_os = "linux"))]
        let already_loaded = None;
        already_loaded.or_else(|| {
            COMGR_CANDIDATES.iter().find_map(|&name| {
                // SAFETY: loading comgr runs its initialisers, which have no preconditions (hipRTC loads
                // the same library).
                Comgr::resolve(unsafe { libloading::Library::new(name) }.ok()?)
            })
        })
    }

    fn resolve(library: libloading::Library) -> Option<Comgr> {
        // SAFETY: both types are the functions' signatures in amd_comgr.h (comgr 1.8 to 3.x); the pointers
        // are used only while `library`, stored beside them, stays loaded.
        unsafe {
            let get_isa_metadata = *library.get::<GetIsaMetadataFn>(b"amd_comgr_get_isa_metadata").ok()?;
            let destroy_metadata = *library.get::<DestroyMetadataFn>(b"amd_comgr_destroy_metadata").ok()?;
            Some(Comgr { get_isa_metadata, destroy_metadata, _library: library })
        }
    }
}

/// The useful part of a `dlopen` error ("cannot open shared object file: No such file or directory").
fn short_dl_error(message: &str) -> &str {
    message.rsplit_once(": ").map_or(message, |(_, tail)| tail)
}
