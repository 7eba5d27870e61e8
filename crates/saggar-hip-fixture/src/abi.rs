//! The HIP ABI the fixture exports: status codes, flag values, and the structs saggar's HIP backend passes
//! by pointer, all in hip-runtime-sys 0.1.2's layout (bindgen over ROCm 5.4's `hip_runtime_api.h`).
//!
//! The fixture does not depend on hip-runtime-sys: that crate links libamdhip64, which is what this
//! library stands in for. The structs are copied field for field, and the tests below check every field
//! offset against the numbers in hip-runtime-sys's own bindgen layout tests.
//!
//! HIP's handle types (`hipStream_t`, `hipEvent_t`, `hipModule_t`, `hipFunction_t`, `hipGraph_t`,
//! `hipGraphExec_t`, `hipGraphNode_t`) are opaque pointers; the fixture hands out the CUDA driver's own
//! handles (`CUstream`, `CUevent`, ...) as them, so no translation table is needed. Device pointers are
//! `CUdeviceptr` values cast to `void*`.

use std::ffi::{c_char, c_int, c_uint, c_void};

/// A `hipError_t` as returned across the C ABI.
pub type HipStatus = c_int;
/// An `hiprtcResult` as returned across the C ABI.
pub type HiprtcStatus = c_int;

/// `hipError_t` values (hip-runtime-sys 0.1.2, the same numbers as ROCm 5.2's header).
#[allow(missing_docs)]
pub mod code {
    use super::HipStatus;

    pub const SUCCESS: HipStatus = 0;
    pub const INVALID_VALUE: HipStatus = 1;
    pub const OUT_OF_MEMORY: HipStatus = 2;
    pub const NOT_INITIALIZED: HipStatus = 3;
    pub const DEINITIALIZED: HipStatus = 4;
    pub const PROFILER_DISABLED: HipStatus = 5;
    pub const PROFILER_NOT_INITIALIZED: HipStatus = 6;
    pub const PROFILER_ALREADY_STARTED: HipStatus = 7;
    pub const PROFILER_ALREADY_STOPPED: HipStatus = 8;
    pub const INVALID_CONFIGURATION: HipStatus = 9;
    pub const INVALID_PITCH_VALUE: HipStatus = 12;
    pub const INVALID_SYMBOL: HipStatus = 13;
    pub const INVALID_DEVICE_POINTER: HipStatus = 17;
    pub const INVALID_MEMCPY_DIRECTION: HipStatus = 21;
    pub const INSUFFICIENT_DRIVER: HipStatus = 35;
    pub const MISSING_CONFIGURATION: HipStatus = 52;
    pub const PRIOR_LAUNCH_FAILURE: HipStatus = 53;
    pub const INVALID_DEVICE_FUNCTION: HipStatus = 98;
    pub const NO_DEVICE: HipStatus = 100;
    pub const INVALID_DEVICE: HipStatus = 101;
    pub const INVALID_IMAGE: HipStatus = 200;
    pub const INVALID_CONTEXT: HipStatus = 201;
    pub const CONTEXT_ALREADY_CURRENT: HipStatus = 202;
    pub const MAP_FAILED: HipStatus = 205;
    pub const UNMAP_FAILED: HipStatus = 206;
    pub const ARRAY_IS_MAPPED: HipStatus = 207;
    pub const ALREADY_MAPPED: HipStatus = 208;
    pub const NO_BINARY_FOR_GPU: HipStatus = 209;
    pub const ALREADY_ACQUIRED: HipStatus = 210;
    pub const NOT_MAPPED: HipStatus = 211;
    pub const NOT_MAPPED_AS_ARRAY: HipStatus = 212;
    pub const NOT_MAPPED_AS_POINTER: HipStatus = 213;
    pub const ECC_NOT_CORRECTABLE: HipStatus = 214;
    pub const UNSUPPORTED_LIMIT: HipStatus = 215;
    pub const CONTEXT_ALREADY_IN_USE: HipStatus = 216;
    pub const PEER_ACCESS_UNSUPPORTED: HipStatus = 217;
    pub const INVALID_KERNEL_FILE: HipStatus = 218;
    pub const INVALID_GRAPHICS_CONTEXT: HipStatus = 219;
    pub const INVALID_SOURCE: HipStatus = 300;
    pub const FILE_NOT_FOUND: HipStatus = 301;
    pub const SHARED_OBJECT_SYMBOL_NOT_FOUND: HipStatus = 302;
    pub const SHARED_OBJECT_INIT_FAILED: HipStatus = 303;
    pub const OPERATING_SYSTEM: HipStatus = 304;
    pub const INVALID_HANDLE: HipStatus = 400;
    pub const ILLEGAL_STATE: HipStatus = 401;
    pub const NOT_FOUND: HipStatus = 500;
    pub const NOT_READY: HipStatus = 600;
    pub const ILLEGAL_ADDRESS: HipStatus = 700;
    pub const LAUNCH_OUT_OF_RESOURCES: HipStatus = 701;
    pub const LAUNCH_TIME_OUT: HipStatus = 702;
    pub const PEER_ACCESS_ALREADY_ENABLED: HipStatus = 704;
    pub const PEER_ACCESS_NOT_ENABLED: HipStatus = 705;
    pub const SET_ON_ACTIVE_PROCESS: HipStatus = 708;
    pub const CONTEXT_IS_DESTROYED: HipStatus = 709;
    pub const ASSERT: HipStatus = 710;
    pub const HOST_MEMORY_ALREADY_REGISTERED: HipStatus = 712;
    pub const HOST_MEMORY_NOT_REGISTERED: HipStatus = 713;
    pub const LAUNCH_FAILURE: HipStatus = 719;
    pub const COOPERATIVE_LAUNCH_TOO_LARGE: HipStatus = 720;
    pub const NOT_SUPPORTED: HipStatus = 801;
    pub const STREAM_CAPTURE_UNSUPPORTED: HipStatus = 900;
    pub const STREAM_CAPTURE_INVALIDATED: HipStatus = 901;
    pub const STREAM_CAPTURE_MERGE: HipStatus = 902;
    pub const STREAM_CAPTURE_UNMATCHED: HipStatus = 903;
    pub const STREAM_CAPTURE_UNJOINED: HipStatus = 904;
    pub const STREAM_CAPTURE_ISOLATION: HipStatus = 905;
    pub const STREAM_CAPTURE_IMPLICIT: HipStatus = 906;
    pub const CAPTURED_EVENT: HipStatus = 907;
    pub const STREAM_CAPTURE_WRONG_THREAD: HipStatus = 908;
    pub const GRAPH_EXEC_UPDATE_FAILURE: HipStatus = 910;
    pub const UNKNOWN: HipStatus = 999;
    pub const RUNTIME_MEMORY: HipStatus = 1052;
    pub const RUNTIME_OTHER: HipStatus = 1053;
    pub const TBD: HipStatus = 1054;
}

/// `hiprtcResult` values (hiprtc.h; NVRTC's `nvrtcResult` has the same numbers for 0..=11).
#[allow(missing_docs)]
pub mod rtc_code {
    use super::HiprtcStatus;

    pub const SUCCESS: HiprtcStatus = 0;
    pub const OUT_OF_MEMORY: HiprtcStatus = 1;
    pub const PROGRAM_CREATION_FAILURE: HiprtcStatus = 2;
    pub const INVALID_INPUT: HiprtcStatus = 3;
    pub const INVALID_PROGRAM: HiprtcStatus = 4;
    pub const INVALID_OPTION: HiprtcStatus = 5;
    pub const COMPILATION: HiprtcStatus = 6;
    pub const BUILTIN_OPERATION_FAILURE: HiprtcStatus = 7;
    pub const NO_NAME_EXPRESSIONS_AFTER_COMPILATION: HiprtcStatus = 8;
    pub const NO_LOWERED_NAMES_BEFORE_COMPILATION: HiprtcStatus = 9;
    pub const NAME_EXPRESSION_NOT_VALID: HiprtcStatus = 10;
    pub const INTERNAL_ERROR: HiprtcStatus = 11;
    /// `HIPRTC_ERROR_LINKING` (hipRTC's linker API, which the fixture does not export).
    pub const LINKING: HiprtcStatus = 100;
}

/// `hipStreamNonBlocking`.
pub const HIP_STREAM_NON_BLOCKING: c_uint = 1;
/// `hipEventBlockingSync`.
pub const HIP_EVENT_BLOCKING_SYNC: c_uint = 1;
/// `hipEventDisableTiming`.
pub const HIP_EVENT_DISABLE_TIMING: c_uint = 2;
/// `hipEventInterprocess`.
pub const HIP_EVENT_INTERPROCESS: c_uint = 4;
/// `hipHostMallocPortable`.
pub const HIP_HOST_MALLOC_PORTABLE: c_uint = 1;
/// `hipHostMallocMapped`.
pub const HIP_HOST_MALLOC_MAPPED: c_uint = 2;
/// `hipHostMallocWriteCombined`.
pub const HIP_HOST_MALLOC_WRITE_COMBINED: c_uint = 4;
/// `hipGraphInstantiateFlagAutoFreeOnLaunch` (the only instantiate flag HIP had in ROCm 5.x).
pub const HIP_GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH: u64 = 1;

/// `hipMemcpyKind`.
#[allow(missing_docs)]
pub mod memcpy_kind {
    use std::ffi::c_int;

    pub const HOST_TO_HOST: c_int = 0;
    pub const HOST_TO_DEVICE: c_int = 1;
    pub const DEVICE_TO_HOST: c_int = 2;
    pub const DEVICE_TO_DEVICE: c_int = 3;
    pub const DEFAULT: c_int = 4;
}

/// `hipStreamCaptureMode` (CUDA's numbering: the fixture still maps each value by name).
#[allow(missing_docs)]
pub mod capture_mode {
    use std::ffi::c_int;

    pub const GLOBAL: c_int = 0;
    pub const THREAD_LOCAL: c_int = 1;
    pub const RELAXED: c_int = 2;
}

/// `hipStreamCaptureStatus`.
#[allow(missing_docs)]
pub mod capture_status {
    use std::ffi::c_int;

    pub const NONE: c_int = 0;
    pub const ACTIVE: c_int = 1;
    pub const INVALIDATED: c_int = 2;
}

/// `hipGraphNodeType` in hip-runtime-sys 0.1.2's (ROCm 5.4 and later) numbering.
#[allow(missing_docs)]
pub mod node_type {
    use std::ffi::c_int;

    pub const KERNEL: c_int = 0;
    pub const MEMCPY: c_int = 1;
    pub const MEMSET: c_int = 2;
    pub const HOST: c_int = 3;
    pub const GRAPH: c_int = 4;
    pub const EMPTY: c_int = 5;
    pub const WAIT_EVENT: c_int = 6;
    pub const EVENT_RECORD: c_int = 7;
    pub const EXT_SEMAPHORE_SIGNAL: c_int = 8;
    pub const EXT_SEMAPHORE_WAIT: c_int = 9;
}

/// `hipGraphExecUpdateResult`.
#[allow(missing_docs)]
pub mod update_result {
    use std::ffi::c_int;

    pub const SUCCESS: c_int = 0;
    pub const ERROR: c_int = 1;
    pub const TOPOLOGY_CHANGED: c_int = 2;
    pub const NODE_TYPE_CHANGED: c_int = 3;
    pub const FUNCTION_CHANGED: c_int = 4;
    pub const PARAMETERS_CHANGED: c_int = 5;
    pub const NOT_SUPPORTED: c_int = 6;
    pub const UNSUPPORTED_FUNCTION_CHANGE: c_int = 7;
}

/// `HIP_FUNC_ATTRIBUTE_MAX`: `hipFunction_attribute` values below it are CUDA's `CU_FUNC_ATTRIBUTE_*`
/// 0..=9 with the same meanings.
pub const HIP_FUNC_ATTRIBUTE_MAX: c_int = 10;

/// `dim3`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dim3 {
    /// x.
    pub x: u32,
    /// y.
    pub y: u32,
    /// z.
    pub z: u32,
}

/// `hipKernelNodeParams`, field for field as hip-runtime-sys 0.1.2 declares it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_snake_case)]
pub struct HipKernelNodeParams {
    /// Block dimensions.
    pub blockDim: Dim3,
    /// `HIP_LAUNCH_PARAM_*` list (not supported by the fixture).
    pub extra: *mut *mut c_void,
    /// The kernel: a `hipFunction_t` (here a `CUfunction`).
    pub func: *mut c_void,
    /// Grid dimensions.
    pub gridDim: Dim3,
    /// One pointer per kernel parameter.
    pub kernelParams: *mut *mut c_void,
    /// Dynamic shared memory.
    pub sharedMemBytes: c_uint,
}

/// `hipDeviceProp_t` in its pre-6.0 layout, field for field as hip-runtime-sys 0.1.2 declares it (792
/// bytes). `arch` is `hipDeviceArch_t`, a 32-bit bitfield of AMD feature flags, left zero here.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_snake_case, missing_docs)]
pub struct HipDeviceProp {
    pub name: [c_char; 256],
    pub totalGlobalMem: usize,
    pub sharedMemPerBlock: usize,
    pub regsPerBlock: c_int,
    pub warpSize: c_int,
    pub maxThreadsPerBlock: c_int,
    pub maxThreadsDim: [c_int; 3],
    pub maxGridSize: [c_int; 3],
    pub clockRate: c_int,
    pub memoryClockRate: c_int,
    pub memoryBusWidth: c_int,
    pub totalConstMem: usize,
    pub major: c_int,
    pub minor: c_int,
    pub multiProcessorCount: c_int,
    pub l2CacheSize: c_int,
    pub maxThreadsPerMultiProcessor: c_int,
    pub computeMode: c_int,
    pub clockInstructionRate: c_int,
    pub arch: u32,
    pub concurrentKernels: c_int,
    pub pciDomainID: c_int,
    pub pciBusID: c_int,
    pub pciDeviceID: c_int,
    pub maxSharedMemoryPerMultiProcessor: usize,
    pub isMultiGpuBoard: c_int,
    pub canMapHostMemory: c_int,
    pub gcnArch: c_int,
    pub gcnArchName: [c_char; 256],
    pub integrated: c_int,
    pub cooperativeLaunch: c_int,
    pub cooperativeMultiDeviceLaunch: c_int,
    pub maxTexture1DLinear: c_int,
    pub maxTexture1D: c_int,
    pub maxTexture2D: [c_int; 2],
    pub maxTexture3D: [c_int; 3],
    pub hdpMemFlushCntl: *mut c_uint,
    pub hdpRegFlushCntl: *mut c_uint,
    pub memPitch: usize,
    pub textureAlignment: usize,
    pub texturePitchAlignment: usize,
    pub kernelExecTimeoutEnabled: c_int,
    pub ECCEnabled: c_int,
    pub tccDriver: c_int,
    pub cooperativeMultiDeviceUnmatchedFunc: c_int,
    pub cooperativeMultiDeviceUnmatchedGridDim: c_int,
    pub cooperativeMultiDeviceUnmatchedBlockDim: c_int,
    pub cooperativeMultiDeviceUnmatchedSharedMem: c_int,
    pub isLargeBar: c_int,
    pub asicRevision: c_int,
    pub managedMemory: c_int,
    pub directManagedMemAccessFromHost: c_int,
    pub concurrentManagedAccess: c_int,
    pub pageableMemoryAccess: c_int,
    pub pageableMemoryAccessUsesHostPageTables: c_int,
}

// The sizes saggar's HIP backend asserts for the same structs (crates/saggar-device/src/hip/sys.rs).
const _: () = assert!(std::mem::size_of::<HipDeviceProp>() == 792);
const _: () = assert!(std::mem::offset_of!(HipDeviceProp, gcnArchName) == 396);
const _: () = assert!(std::mem::size_of::<HipKernelNodeParams>() == 64);

impl HipDeviceProp {
    /// All zero: every field is an integer, an array of integers or a raw pointer.
    pub fn zeroed() -> HipDeviceProp {
        // SAFETY: all-zero bytes are a valid value of every field (see above).
        unsafe { std::mem::zeroed() }
    }
}

/// Copies `text` into a fixed C string field, truncated to leave room for the NUL.
pub fn set_c_field(field: &mut [c_char], text: &str) {
    field.fill(0);
    let room = field.len().saturating_sub(1);
    for (slot, byte) in field.iter_mut().zip(text.bytes().take(room)) {
        *slot = byte as c_char;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    /// Every field offset of `hipDeviceProp_t`, as hip-runtime-sys 0.1.2's bindgen layout test
    /// (`bindgen_test_layout_hipDeviceProp_t`) states it.
    #[test]
    fn device_prop_matches_hip_runtime_sys() {
        let expected: &[(&str, usize, usize)] = &[
            ("name", offset_of!(HipDeviceProp, name), 0),
            ("totalGlobalMem", offset_of!(HipDeviceProp, totalGlobalMem), 256),
            ("sharedMemPerBlock", offset_of!(HipDeviceProp, sharedMemPerBlock), 264),
            ("regsPerBlock", offset_of!(HipDeviceProp, regsPerBlock), 272),
            ("warpSize", offset_of!(HipDeviceProp, warpSize), 276),
            ("maxThreadsPerBlock", offset_of!(HipDeviceProp, maxThreadsPerBlock), 280),
            ("maxThreadsDim", offset_of!(HipDeviceProp, maxThreadsDim), 284),
            ("maxGridSize", offset_of!(HipDeviceProp, maxGridSize), 296),
            ("clockRate", offset_of!(HipDeviceProp, clockRate), 308),
            ("memoryClockRate", offset_of!(HipDeviceProp, memoryClockRate), 312),
            ("memoryBusWidth", offset_of!(HipDeviceProp, memoryBusWidth), 316),
            ("totalConstMem", offset_of!(HipDeviceProp, totalConstMem), 320),
            ("major", offset_of!(HipDeviceProp, major), 328),
            ("minor", offset_of!(HipDeviceProp, minor), 332),
            ("multiProcessorCount", offset_of!(HipDeviceProp, multiProcessorCount), 336),
            ("l2CacheSize", offset_of!(HipDeviceProp, l2CacheSize), 340),
            ("maxThreadsPerMultiProcessor", offset_of!(HipDeviceProp, maxThreadsPerMultiProcessor), 344),
            ("computeMode", offset_of!(HipDeviceProp, computeMode), 348),
            ("clockInstructionRate", offset_of!(HipDeviceProp, clockInstructionRate), 352),
            ("arch", offset_of!(HipDeviceProp, arch), 356),
            ("concurrentKernels", offset_of!(HipDeviceProp, concurrentKernels), 360),
            ("pciDomainID", offset_of!(HipDeviceProp, pciDomainID), 364),
            ("pciBusID", offset_of!(HipDeviceProp, pciBusID), 368),
            ("pciDeviceID", offset_of!(HipDeviceProp, pciDeviceID), 372),
            ("maxSharedMemoryPerMultiProcessor", offset_of!(HipDeviceProp, maxSharedMemoryPerMultiProcessor), 376),
            ("isMultiGpuBoard", offset_of!(HipDeviceProp, isMultiGpuBoard), 384),
            ("canMapHostMemory", offset_of!(HipDeviceProp, canMapHostMemory), 388),
            ("gcnArch", offset_of!(HipDeviceProp, gcnArch), 392),
            ("gcnArchName", offset_of!(HipDeviceProp, gcnArchName), 396),
            ("integrated", offset_of!(HipDeviceProp, integrated), 652),
            ("cooperativeLaunch", offset_of!(HipDeviceProp, cooperativeLaunch), 656),
            ("cooperativeMultiDeviceLaunch", offset_of!(HipDeviceProp, cooperativeMultiDeviceLaunch), 660),
            ("maxTexture1DLinear", offset_of!(HipDeviceProp, maxTexture1DLinear), 664),
            ("maxTexture1D", offset_of!(HipDeviceProp, maxTexture1D), 668),
            ("maxTexture2D", offset_of!(HipDeviceProp, maxTexture2D), 672),
            ("maxTexture3D", offset_of!(HipDeviceProp, maxTexture3D), 680),
            ("hdpMemFlushCntl", offset_of!(HipDeviceProp, hdpMemFlushCntl), 696),
            ("hdpRegFlushCntl", offset_of!(HipDeviceProp, hdpRegFlushCntl), 704),
            ("memPitch", offset_of!(HipDeviceProp, memPitch), 712),
            ("textureAlignment", offset_of!(HipDeviceProp, textureAlignment), 720),
            ("texturePitchAlignment", offset_of!(HipDeviceProp, texturePitchAlignment), 728),
            ("kernelExecTimeoutEnabled", offset_of!(HipDeviceProp, kernelExecTimeoutEnabled), 736),
            ("ECCEnabled", offset_of!(HipDeviceProp, ECCEnabled), 740),
            ("tccDriver", offset_of!(HipDeviceProp, tccDriver), 744),
            (
                "cooperativeMultiDeviceUnmatchedFunc",
                offset_of!(HipDeviceProp, cooperativeMultiDeviceUnmatchedFunc),
                748,
            ),
            (
                "cooperativeMultiDeviceUnmatchedGridDim",
                offset_of!(HipDeviceProp, cooperativeMultiDeviceUnmatchedGridDim),
                752,
            ),
            (
                "cooperativeMultiDeviceUnmatchedBlockDim",
                offset_of!(HipDeviceProp, cooperativeMultiDeviceUnmatchedBlockDim),
                756,
            ),
            (
                "cooperativeMultiDeviceUnmatchedSharedMem",
                offset_of!(HipDeviceProp, cooperativeMultiDeviceUnmatchedSharedMem),
                760,
            ),
            ("isLargeBar", offset_of!(HipDeviceProp, isLargeBar), 764),
            ("asicRevision", offset_of!(HipDeviceProp, asicRevision), 768),
            ("managedMemory", offset_of!(HipDeviceProp, managedMemory), 772),
            ("directManagedMemAccessFromHost", offset_of!(HipDeviceProp, directManagedMemAccessFromHost), 776),
            ("concurrentManagedAccess", offset_of!(HipDeviceProp, concurrentManagedAccess), 780),
            ("pageableMemoryAccess", offset_of!(HipDeviceProp, pageableMemoryAccess), 784),
            (
                "pageableMemoryAccessUsesHostPageTables",
                offset_of!(HipDeviceProp, pageableMemoryAccessUsesHostPageTables),
                788,
            ),
        ];
        for &(field, actual, offset) in expected {
            assert_eq!(actual, offset, "hipDeviceProp_t::{field}");
        }
        assert_eq!(std::mem::size_of::<HipDeviceProp>(), 792);
        assert_eq!(std::mem::align_of::<HipDeviceProp>(), 8);
    }

    /// `bindgen_test_layout_hipKernelNodeParams` in hip-runtime-sys 0.1.2.
    #[test]
    fn kernel_node_params_match_hip_runtime_sys() {
        assert_eq!(offset_of!(HipKernelNodeParams, blockDim), 0);
        assert_eq!(offset_of!(HipKernelNodeParams, extra), 16);
        assert_eq!(offset_of!(HipKernelNodeParams, func), 24);
        assert_eq!(offset_of!(HipKernelNodeParams, gridDim), 32);
        assert_eq!(offset_of!(HipKernelNodeParams, kernelParams), 48);
        assert_eq!(offset_of!(HipKernelNodeParams, sharedMemBytes), 56);
        assert_eq!(std::mem::size_of::<HipKernelNodeParams>(), 64);
        assert_eq!(std::mem::size_of::<Dim3>(), 12);
    }

    #[test]
    fn c_fields_are_truncated_and_terminated() {
        let mut field = [1 as c_char; 6];
        set_c_field(&mut field, "sm_90a!");
        assert_eq!(field.map(|c| c as u8), *b"sm_90\0");
        set_c_field(&mut field, "ab");
        assert_eq!(field.map(|c| c as u8), *b"ab\0\0\0\0");
    }
}
