//! Error codes: HIP's names and descriptions, the table that maps each CUDA driver result onto the HIP
//! code of the same meaning, and NVRTC results onto hipRTC's.
//!
//! HIP numbered its runtime errors after CUDA's, so every pair in [`CUDA_TO_HIP`] has the same number on
//! both sides (a test checks it): the table is a list of meanings HIP also has, not an arithmetic trick.
//! A CUDA result that HIP has no code for becomes `hipErrorUnknown`, and the fixture says once on
//! standard error which CUDA result it was, so nothing is lost silently.

use std::collections::HashSet;
use std::ffi::{CStr, c_char};
use std::sync::Mutex;

use cudarc::driver::sys::CUresult;
use cudarc::nvrtc::sys::nvrtcResult;

use crate::abi::{HipStatus, HiprtcStatus, code, rtc_code};

/// One `hipError_t`: its value, HIP's name for it, and a description.
#[derive(Debug, Clone, Copy)]
pub struct HipError {
    /// The value.
    pub code: HipStatus,
    /// HIP's name, e.g. `hipErrorOutOfMemory`.
    pub name: &'static CStr,
    /// What it means.
    pub description: &'static CStr,
}

const fn e(code: HipStatus, name: &'static CStr, description: &'static CStr) -> HipError {
    HipError { code, name, description }
}

/// Every `hipError_t` of hip-runtime-sys 0.1.2 (ROCm 5.4), with a description.
pub const HIP_ERRORS: &[HipError] = &[
    e(code::SUCCESS, c"hipSuccess", c"no error"),
    e(code::INVALID_VALUE, c"hipErrorInvalidValue", c"invalid argument"),
    e(code::OUT_OF_MEMORY, c"hipErrorOutOfMemory", c"out of memory"),
    e(code::NOT_INITIALIZED, c"hipErrorNotInitialized", c"initialization error"),
    e(code::DEINITIALIZED, c"hipErrorDeinitialized", c"driver shutting down"),
    e(code::PROFILER_DISABLED, c"hipErrorProfilerDisabled", c"profiler disabled while using external profiling tool"),
    e(code::PROFILER_NOT_INITIALIZED, c"hipErrorProfilerNotInitialized", c"profiler not initialized"),
    e(code::PROFILER_ALREADY_STARTED, c"hipErrorProfilerAlreadyStarted", c"profiler already started"),
    e(code::PROFILER_ALREADY_STOPPED, c"hipErrorProfilerAlreadyStopped", c"profiler already stopped"),
    e(code::INVALID_CONFIGURATION, c"hipErrorInvalidConfiguration", c"invalid configuration argument"),
    e(code::INVALID_PITCH_VALUE, c"hipErrorInvalidPitchValue", c"invalid pitch argument"),
    e(code::INVALID_SYMBOL, c"hipErrorInvalidSymbol", c"invalid device symbol"),
    e(code::INVALID_DEVICE_POINTER, c"hipErrorInvalidDevicePointer", c"invalid device pointer"),
    e(code::INVALID_MEMCPY_DIRECTION, c"hipErrorInvalidMemcpyDirection", c"invalid copy direction for memcpy"),
    e(code::INSUFFICIENT_DRIVER, c"hipErrorInsufficientDriver", c"driver version is insufficient for runtime version"),
    e(code::MISSING_CONFIGURATION, c"hipErrorMissingConfiguration", c"__global__ function call is not configured"),
    e(code::PRIOR_LAUNCH_FAILURE, c"hipErrorPriorLaunchFailure", c"unspecified launch failure in prior launch"),
    e(code::INVALID_DEVICE_FUNCTION, c"hipErrorInvalidDeviceFunction", c"invalid device function"),
    e(code::NO_DEVICE, c"hipErrorNoDevice", c"no GPU device is detected"),
    e(code::INVALID_DEVICE, c"hipErrorInvalidDevice", c"invalid device ordinal"),
    e(code::INVALID_IMAGE, c"hipErrorInvalidImage", c"device kernel image is invalid"),
    e(code::INVALID_CONTEXT, c"hipErrorInvalidContext", c"invalid device context"),
    e(code::CONTEXT_ALREADY_CURRENT, c"hipErrorContextAlreadyCurrent", c"context already current"),
    e(code::MAP_FAILED, c"hipErrorMapFailed", c"mapping of buffer object failed"),
    e(code::UNMAP_FAILED, c"hipErrorUnmapFailed", c"unmapping of buffer object failed"),
    e(code::ARRAY_IS_MAPPED, c"hipErrorArrayIsMapped", c"array is mapped"),
    e(code::ALREADY_MAPPED, c"hipErrorAlreadyMapped", c"resource already mapped"),
    e(code::NO_BINARY_FOR_GPU, c"hipErrorNoBinaryForGpu", c"no kernel image is available for execution on the device"),
    e(code::ALREADY_ACQUIRED, c"hipErrorAlreadyAcquired", c"resource already acquired"),
    e(code::NOT_MAPPED, c"hipErrorNotMapped", c"resource not mapped"),
    e(code::NOT_MAPPED_AS_ARRAY, c"hipErrorNotMappedAsArray", c"resource not mapped as array"),
    e(code::NOT_MAPPED_AS_POINTER, c"hipErrorNotMappedAsPointer", c"resource not mapped as pointer"),
    e(code::ECC_NOT_CORRECTABLE, c"hipErrorECCNotCorrectable", c"uncorrectable ECC error encountered"),
    e(code::UNSUPPORTED_LIMIT, c"hipErrorUnsupportedLimit", c"limit is not supported on this architecture"),
    e(code::CONTEXT_ALREADY_IN_USE, c"hipErrorContextAlreadyInUse", c"exclusive-thread device already in use"),
    e(code::PEER_ACCESS_UNSUPPORTED, c"hipErrorPeerAccessUnsupported", c"peer access is not supported"),
    e(code::INVALID_KERNEL_FILE, c"hipErrorInvalidKernelFile", c"a device kernel image (PTX here) is invalid"),
    e(code::INVALID_GRAPHICS_CONTEXT, c"hipErrorInvalidGraphicsContext", c"invalid graphics context"),
    e(code::INVALID_SOURCE, c"hipErrorInvalidSource", c"device kernel image source is invalid"),
    e(code::FILE_NOT_FOUND, c"hipErrorFileNotFound", c"file not found"),
    e(code::SHARED_OBJECT_SYMBOL_NOT_FOUND, c"hipErrorSharedObjectSymbolNotFound", c"shared object symbol not found"),
    e(code::SHARED_OBJECT_INIT_FAILED, c"hipErrorSharedObjectInitFailed", c"shared object initialization failed"),
    e(code::OPERATING_SYSTEM, c"hipErrorOperatingSystem", c"OS call failed or operation not supported on this OS"),
    e(code::INVALID_HANDLE, c"hipErrorInvalidHandle", c"invalid resource handle"),
    e(code::ILLEGAL_STATE, c"hipErrorIllegalState", c"the operation is not permitted in the resource's current state"),
    e(code::NOT_FOUND, c"hipErrorNotFound", c"named symbol not found"),
    e(code::NOT_READY, c"hipErrorNotReady", c"device not ready"),
    e(code::ILLEGAL_ADDRESS, c"hipErrorIllegalAddress", c"an illegal memory access was encountered"),
    e(code::LAUNCH_OUT_OF_RESOURCES, c"hipErrorLaunchOutOfResources", c"too many resources requested for launch"),
    e(code::LAUNCH_TIME_OUT, c"hipErrorLaunchTimeOut", c"the launch timed out and was terminated"),
    e(code::PEER_ACCESS_ALREADY_ENABLED, c"hipErrorPeerAccessAlreadyEnabled", c"peer access is already enabled"),
    e(code::PEER_ACCESS_NOT_ENABLED, c"hipErrorPeerAccessNotEnabled", c"peer access has not been enabled"),
    e(code::SET_ON_ACTIVE_PROCESS, c"hipErrorSetOnActiveProcess", c"cannot set while device is active in this process"),
    e(code::CONTEXT_IS_DESTROYED, c"hipErrorContextIsDestroyed", c"context is destroyed"),
    e(code::ASSERT, c"hipErrorAssert", c"device-side assert triggered"),
    e(
        code::HOST_MEMORY_ALREADY_REGISTERED,
        c"hipErrorHostMemoryAlreadyRegistered",
        c"part or all of the requested memory range is already mapped",
    ),
    e(
        code::HOST_MEMORY_NOT_REGISTERED,
        c"hipErrorHostMemoryNotRegistered",
        c"pointer does not correspond to a registered memory region",
    ),
    e(code::LAUNCH_FAILURE, c"hipErrorLaunchFailure", c"unspecified launch failure"),
    e(
        code::COOPERATIVE_LAUNCH_TOO_LARGE,
        c"hipErrorCooperativeLaunchTooLarge",
        c"too many blocks in cooperative launch",
    ),
    e(code::NOT_SUPPORTED, c"hipErrorNotSupported", c"operation not supported"),
    e(
        code::STREAM_CAPTURE_UNSUPPORTED,
        c"hipErrorStreamCaptureUnsupported",
        c"operation not permitted when stream is capturing",
    ),
    e(
        code::STREAM_CAPTURE_INVALIDATED,
        c"hipErrorStreamCaptureInvalidated",
        c"operation failed due to a previous error during capture",
    ),
    e(code::STREAM_CAPTURE_MERGE, c"hipErrorStreamCaptureMerge", c"operation would result in a merge of separate capture sequences"),
    e(code::STREAM_CAPTURE_UNMATCHED, c"hipErrorStreamCaptureUnmatched", c"capture was not ended in the same stream as it began"),
    e(code::STREAM_CAPTURE_UNJOINED, c"hipErrorStreamCaptureUnjoined", c"capturing stream has unjoined work"),
    e(
        code::STREAM_CAPTURE_ISOLATION,
        c"hipErrorStreamCaptureIsolation",
        c"dependency created on uncaptured work in another stream",
    ),
    e(code::STREAM_CAPTURE_IMPLICIT, c"hipErrorStreamCaptureImplicit", c"operation would make the legacy stream depend on a capturing blocking stream"),
    e(code::CAPTURED_EVENT, c"hipErrorCapturedEvent", c"operation not permitted on an event last recorded in a capturing stream"),
    e(
        code::STREAM_CAPTURE_WRONG_THREAD,
        c"hipErrorStreamCaptureWrongThread",
        c"attempt to terminate a thread-local capture sequence from another thread",
    ),
    e(code::GRAPH_EXEC_UPDATE_FAILURE, c"hipErrorGraphExecUpdateFailure", c"the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"),
    e(code::UNKNOWN, c"hipErrorUnknown", c"unknown error"),
    e(code::RUNTIME_MEMORY, c"hipErrorRuntimeMemory", c"runtime memory call returned error"),
    e(code::RUNTIME_OTHER, c"hipErrorRuntimeOther", c"runtime call other than memory returned error"),
    e(code::TBD, c"hipErrorTbd", c"marker that more error codes are needed"),
];

/// The entry of `status`, or `hipErrorUnknown`'s for a code HIP (hip-runtime-sys 0.1.2) does not have,
/// as ROCm's own `hipGetErrorName` answers.
pub fn hip_error(status: HipStatus) -> &'static HipError {
    HIP_ERRORS.iter().find(|e| e.code == status).unwrap_or_else(|| {
        HIP_ERRORS.iter().find(|e| e.code == code::UNKNOWN).expect("hipErrorUnknown is in the table")
    })
}

/// Each CUDA driver result that has a HIP counterpart, and that counterpart. Anything else is
/// `hipErrorUnknown` ([`hip_from_cuda`]).
pub const CUDA_TO_HIP: &[(CUresult, HipStatus)] = {
    use CUresult::*;
    &[
        (CUDA_SUCCESS, code::SUCCESS),
        (CUDA_ERROR_INVALID_VALUE, code::INVALID_VALUE),
        (CUDA_ERROR_OUT_OF_MEMORY, code::OUT_OF_MEMORY),
        (CUDA_ERROR_NOT_INITIALIZED, code::NOT_INITIALIZED),
        (CUDA_ERROR_DEINITIALIZED, code::DEINITIALIZED),
        (CUDA_ERROR_PROFILER_DISABLED, code::PROFILER_DISABLED),
        (CUDA_ERROR_PROFILER_NOT_INITIALIZED, code::PROFILER_NOT_INITIALIZED),
        (CUDA_ERROR_PROFILER_ALREADY_STARTED, code::PROFILER_ALREADY_STARTED),
        (CUDA_ERROR_PROFILER_ALREADY_STOPPED, code::PROFILER_ALREADY_STOPPED),
        (CUDA_ERROR_NO_DEVICE, code::NO_DEVICE),
        (CUDA_ERROR_INVALID_DEVICE, code::INVALID_DEVICE),
        (CUDA_ERROR_INVALID_IMAGE, code::INVALID_IMAGE),
        (CUDA_ERROR_INVALID_CONTEXT, code::INVALID_CONTEXT),
        (CUDA_ERROR_CONTEXT_ALREADY_CURRENT, code::CONTEXT_ALREADY_CURRENT),
        (CUDA_ERROR_MAP_FAILED, code::MAP_FAILED),
        (CUDA_ERROR_UNMAP_FAILED, code::UNMAP_FAILED),
        (CUDA_ERROR_ARRAY_IS_MAPPED, code::ARRAY_IS_MAPPED),
        (CUDA_ERROR_ALREADY_MAPPED, code::ALREADY_MAPPED),
        (CUDA_ERROR_NO_BINARY_FOR_GPU, code::NO_BINARY_FOR_GPU),
        (CUDA_ERROR_ALREADY_ACQUIRED, code::ALREADY_ACQUIRED),
        (CUDA_ERROR_NOT_MAPPED, code::NOT_MAPPED),
        (CUDA_ERROR_NOT_MAPPED_AS_ARRAY, code::NOT_MAPPED_AS_ARRAY),
        (CUDA_ERROR_NOT_MAPPED_AS_POINTER, code::NOT_MAPPED_AS_POINTER),
        (CUDA_ERROR_ECC_UNCORRECTABLE, code::ECC_NOT_CORRECTABLE),
        (CUDA_ERROR_UNSUPPORTED_LIMIT, code::UNSUPPORTED_LIMIT),
        (CUDA_ERROR_CONTEXT_ALREADY_IN_USE, code::CONTEXT_ALREADY_IN_USE),
        (CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, code::PEER_ACCESS_UNSUPPORTED),
        // HIP's 218 is "invalid kernel file", CUDA's "invalid PTX": the same slot and meaning.
        (CUDA_ERROR_INVALID_PTX, code::INVALID_KERNEL_FILE),
        (CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, code::INVALID_GRAPHICS_CONTEXT),
        (CUDA_ERROR_INVALID_SOURCE, code::INVALID_SOURCE),
        (CUDA_ERROR_FILE_NOT_FOUND, code::FILE_NOT_FOUND),
        (CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, code::SHARED_OBJECT_SYMBOL_NOT_FOUND),
        (CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, code::SHARED_OBJECT_INIT_FAILED),
        (CUDA_ERROR_OPERATING_SYSTEM, code::OPERATING_SYSTEM),
        (CUDA_ERROR_INVALID_HANDLE, code::INVALID_HANDLE),
        (CUDA_ERROR_ILLEGAL_STATE, code::ILLEGAL_STATE),
        (CUDA_ERROR_NOT_FOUND, code::NOT_FOUND),
        (CUDA_ERROR_NOT_READY, code::NOT_READY),
        (CUDA_ERROR_ILLEGAL_ADDRESS, code::ILLEGAL_ADDRESS),
        (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, code::LAUNCH_OUT_OF_RESOURCES),
        (CUDA_ERROR_LAUNCH_TIMEOUT, code::LAUNCH_TIME_OUT),
        (CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, code::PEER_ACCESS_ALREADY_ENABLED),
        (CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, code::PEER_ACCESS_NOT_ENABLED),
        // HIP's 708 is CUDA runtime's "set on active process", the driver's "primary context active".
        (CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, code::SET_ON_ACTIVE_PROCESS),
        (CUDA_ERROR_CONTEXT_IS_DESTROYED, code::CONTEXT_IS_DESTROYED),
        (CUDA_ERROR_ASSERT, code::ASSERT),
        (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, code::HOST_MEMORY_ALREADY_REGISTERED),
        (CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, code::HOST_MEMORY_NOT_REGISTERED),
        (CUDA_ERROR_LAUNCH_FAILED, code::LAUNCH_FAILURE),
        (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, code::COOPERATIVE_LAUNCH_TOO_LARGE),
        (CUDA_ERROR_NOT_SUPPORTED, code::NOT_SUPPORTED),
        (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, code::STREAM_CAPTURE_UNSUPPORTED),
        (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, code::STREAM_CAPTURE_INVALIDATED),
        (CUDA_ERROR_STREAM_CAPTURE_MERGE, code::STREAM_CAPTURE_MERGE),
        (CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, code::STREAM_CAPTURE_UNMATCHED),
        (CUDA_ERROR_STREAM_CAPTURE_UNJOINED, code::STREAM_CAPTURE_UNJOINED),
        (CUDA_ERROR_STREAM_CAPTURE_ISOLATION, code::STREAM_CAPTURE_ISOLATION),
        (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, code::STREAM_CAPTURE_IMPLICIT),
        (CUDA_ERROR_CAPTURED_EVENT, code::CAPTURED_EVENT),
        (CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, code::STREAM_CAPTURE_WRONG_THREAD),
        (CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, code::GRAPH_EXEC_UPDATE_FAILURE),
        (CUDA_ERROR_UNKNOWN, code::UNKNOWN),
    ]
};

/// The HIP code for a CUDA driver result, by [`CUDA_TO_HIP`]; `hipErrorUnknown` (said once on standard
/// error, naming the CUDA result and the call) for a result HIP has no code for.
pub fn hip_from_cuda(call: &'static str, result: CUresult) -> HipStatus {
    if let Some(&(_, hip)) = CUDA_TO_HIP.iter().find(|(cuda, _)| *cuda == result) {
        return hip;
    }
    say_once(format!("unmapped {result:?}"), || {
        format!(
            "{call} returned {result:?} ({}), which HIP has no error code for; the fixture returns hipErrorUnknown \
             (further occurrences are not reported)",
            result as u32
        )
    });
    code::UNKNOWN
}

/// The hipRTC code for an NVRTC result: the same number for the codes both have (0..=11), otherwise
/// `HIPRTC_ERROR_INTERNAL_ERROR`, said once on standard error.
pub fn hiprtc_from_nvrtc(call: &'static str, result: nvrtcResult) -> HiprtcStatus {
    let value = result as u32 as HiprtcStatus;
    if (rtc_code::SUCCESS..=rtc_code::INTERNAL_ERROR).contains(&value) {
        return value;
    }
    say_once(format!("unmapped {result:?}"), || {
        format!(
            "{call} returned {result:?} ({value}), which hipRTC has no code for; returning HIPRTC_ERROR_INTERNAL_ERROR"
        )
    });
    rtc_code::INTERNAL_ERROR
}

/// hipRTC's name of an `hiprtcResult` (what ROCm's `hiprtcGetErrorString` returns).
pub fn hiprtc_name(status: HiprtcStatus) -> &'static CStr {
    match status {
        rtc_code::SUCCESS => c"HIPRTC_SUCCESS",
        rtc_code::OUT_OF_MEMORY => c"HIPRTC_ERROR_OUT_OF_MEMORY",
        rtc_code::PROGRAM_CREATION_FAILURE => c"HIPRTC_ERROR_PROGRAM_CREATION_FAILURE",
        rtc_code::INVALID_INPUT => c"HIPRTC_ERROR_INVALID_INPUT",
        rtc_code::INVALID_PROGRAM => c"HIPRTC_ERROR_INVALID_PROGRAM",
        rtc_code::INVALID_OPTION => c"HIPRTC_ERROR_INVALID_OPTION",
        rtc_code::COMPILATION => c"HIPRTC_ERROR_COMPILATION",
        rtc_code::BUILTIN_OPERATION_FAILURE => c"HIPRTC_ERROR_BUILTIN_OPERATION_FAILURE",
        rtc_code::NO_NAME_EXPRESSIONS_AFTER_COMPILATION => c"HIPRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
        rtc_code::NO_LOWERED_NAMES_BEFORE_COMPILATION => c"HIPRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
        rtc_code::NAME_EXPRESSION_NOT_VALID => c"HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID",
        rtc_code::INTERNAL_ERROR => c"HIPRTC_ERROR_INTERNAL_ERROR",
        rtc_code::LINKING => c"HIPRTC_ERROR_LINKING",
        _ => c"Invalid HIPRTC error code",
    }
}

/// Messages already printed, by key.
static SAID: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Prints `saggar-hip-fixture: <message>` on standard error the first time `key` is seen in this process.
pub fn say_once(key: String, message: impl FnOnce() -> String) {
    let mut said = SAID.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if said.get_or_insert_with(HashSet::new).insert(key) {
        eprintln!("saggar-hip-fixture: {}", message());
    }
}

/// `hipErrorNotSupported`, after saying once on standard error what the fixture cannot map: every
/// entry point and argument the fixture does not implement ends here, never in a silent success.
#[cold]
pub fn not_supported(what: &'static str) -> HipStatus {
    say_once(format!("not supported: {what}"), || {
        format!(
            "NOT SUPPORTED: {what}; returning hipErrorNotSupported (the fixture maps only what saggar's HIP backend \
             uses; see crates/saggar-hip-fixture/README.md)"
        )
    });
    code::NOT_SUPPORTED
}

/// `hipGetErrorName`: HIP's name of `status`, `"hipErrorUnknown"` for a code HIP does not have (as ROCm
/// answers). The string is static.
#[unsafe(no_mangle)]
pub extern "C" fn hipGetErrorName(status: HipStatus) -> *const c_char {
    hip_error(status).name.as_ptr()
}

/// `hipGetErrorString`: a description of `status`. The string is static.
#[unsafe(no_mangle)]
pub extern "C" fn hipGetErrorString(status: HipStatus) -> *const c_char {
    hip_error(status).description.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mapping_pairs_codes_of_the_same_number_and_meaning() {
        for &(cuda, hip) in CUDA_TO_HIP {
            assert_eq!(cuda as u32 as HipStatus, hip, "{cuda:?} maps to a HIP code of another number");
            if cuda != CUresult::CUDA_ERROR_UNKNOWN {
                assert_ne!(hip_error(hip).name, c"hipErrorUnknown", "{cuda:?} maps to a code without a name");
            }
        }
        let mut seen = HashSet::new();
        assert!(CUDA_TO_HIP.iter().all(|(cuda, _)| seen.insert(*cuda as u32)), "a CUDA result is listed twice");
    }

    #[test]
    fn unmapped_cuda_results_are_unknown_and_mapped_ones_keep_their_meaning() {
        use CUresult::*;
        assert_eq!(hip_from_cuda("test", CUDA_ERROR_OUT_OF_MEMORY), code::OUT_OF_MEMORY);
        assert_eq!(hip_from_cuda("test", CUDA_ERROR_STREAM_CAPTURE_INVALIDATED), code::STREAM_CAPTURE_INVALIDATED);
        assert_eq!(hip_from_cuda("test", CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE), code::GRAPH_EXEC_UPDATE_FAILURE);
        assert_eq!(hip_from_cuda("test", CUDA_ERROR_INVALID_PTX), code::INVALID_KERNEL_FILE);
        // HIP has no code for these: they are not dressed up as something they are not.
        assert_eq!(hip_from_cuda("test", CUDA_ERROR_MISALIGNED_ADDRESS), code::UNKNOWN);
        assert_eq!(hip_from_cuda("test", CUDA_ERROR_UNSUPPORTED_PTX_VERSION), code::UNKNOWN);
        assert_eq!(hip_from_cuda("test", CUDA_ERROR_STUB_LIBRARY), code::UNKNOWN);
    }

    #[test]
    fn names_and_descriptions() {
        let name = |s| {
            // SAFETY: `hipGetErrorName` returns a pointer to a static NUL-terminated string.
            unsafe { CStr::from_ptr(hipGetErrorName(s)) }.to_str().unwrap()
        };
        assert_eq!(name(code::OUT_OF_MEMORY), "hipErrorOutOfMemory");
        assert_eq!(name(code::NO_DEVICE), "hipErrorNoDevice");
        assert_eq!(name(code::GRAPH_EXEC_UPDATE_FAILURE), "hipErrorGraphExecUpdateFailure");
        assert_eq!(name(123_456), "hipErrorUnknown", "ROCm answers hipErrorUnknown for codes it does not have");
        // SAFETY: as above.
        let text = unsafe { CStr::from_ptr(hipGetErrorString(code::NOT_READY)) };
        assert_eq!(text, c"device not ready");
        let mut codes = HashSet::new();
        assert!(HIP_ERRORS.iter().all(|e| codes.insert(e.code)), "a HIP code is listed twice");
        assert!(HIP_ERRORS.iter().all(|e| e.name.to_bytes().starts_with(b"hip")));
    }

    #[test]
    fn nvrtc_results_keep_their_numbers() {
        assert_eq!(hiprtc_from_nvrtc("test", nvrtcResult::NVRTC_ERROR_COMPILATION), rtc_code::COMPILATION);
        assert_eq!(hiprtc_from_nvrtc("test", nvrtcResult::NVRTC_ERROR_INVALID_OPTION), rtc_code::INVALID_OPTION);
        assert_eq!(hiprtc_name(rtc_code::COMPILATION), c"HIPRTC_ERROR_COMPILATION");
        assert_eq!(hiprtc_name(77), c"Invalid HIPRTC error code");
    }
}
