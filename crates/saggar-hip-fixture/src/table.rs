//! The table of every hip*/hiprtc* symbol the fixture exports, and what each is: mapped onto CUDA
//! (naming the driver or NVRTC calls it makes) or not supported (it returns `hipErrorNotSupported` and
//! says so on standard error).
//!
//! The tests hold the table to the truth from three sides: every symbol saggar's HIP backend declares
//! (parsed from `crates/saggar-device/src/hip/sys.rs` at test time) is in it; every symbol the built library
//! exports is in it and vice versa (`tests/exports.rs`, reading the library's dynamic symbol table and
//! [`saggar_hip_fixture_symbols`]); and every entry marked not supported is called and must return
//! `hipErrorNotSupported`.

use std::ffi::{CStr, CString, c_char};
use std::sync::OnceLock;

/// What an exported symbol does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapping {
    /// Implemented by these CUDA driver / NVRTC calls (or, for error strings, the fixture's own tables).
    Mapped(&'static str),
    /// Always `hipErrorNotSupported`, for this reason.
    NotSupported(&'static str),
}

use Mapping::{Mapped, NotSupported};

/// Every hip*/hiprtc* symbol the library exports.
pub const EXPORTS: &[(&str, Mapping)] = &[
    // Errors.
    ("hipGetErrorName", Mapped("HIP's error-name table (no CUDA call)")),
    ("hipGetErrorString", Mapped("HIP's error-description table (no CUDA call)")),
    // Runtime and devices.
    ("hipRuntimeGetVersion", Mapped("cuDriverGetVersion")),
    ("hipGetDeviceCount", Mapped("cuInit, cuDeviceGetCount")),
    ("hipSetDevice", Mapped("cuDevicePrimaryCtxRetain, cuCtxSetCurrent")),
    ("hipGetDevice", Mapped("the thread's device (fixture state)")),
    ("hipGetDeviceProperties", Mapped("cuDeviceGetName, cuDeviceTotalMem_v2, cuDeviceGetAttribute")),
    ("hipDeviceTotalMem", Mapped("cuDeviceTotalMem_v2")),
    ("hipDeviceSynchronize", Mapped("cuCtxSynchronize")),
    ("hipMemGetInfo", Mapped("cuMemGetInfo_v2")),
    // Streams and capture.
    ("hipStreamCreateWithFlags", Mapped("cuStreamCreate")),
    ("hipStreamDestroy", Mapped("cuStreamDestroy_v2")),
    ("hipStreamSynchronize", Mapped("cuStreamSynchronize")),
    ("hipStreamWaitEvent", Mapped("cuStreamWaitEvent")),
    ("hipStreamBeginCapture", Mapped("cuStreamBeginCapture_v2")),
    ("hipStreamEndCapture", Mapped("cuStreamEndCapture")),
    ("hipStreamIsCapturing", Mapped("cuStreamIsCapturing")),
    // Memory and copies.
    ("hipMalloc", Mapped("cuMemAlloc_v2")),
    ("hipFree", Mapped("cuMemFree_v2")),
    ("hipHostMalloc", Mapped("cuMemHostAlloc")),
    ("hipHostFree", Mapped("cuMemFreeHost")),
    ("hipHostGetDevicePointer", Mapped("cuMemHostGetDevicePointer_v2")),
    ("hipMemcpyAsync", Mapped("cuMemcpyHtoDAsync_v2, cuMemcpyDtoHAsync_v2, cuMemcpyDtoDAsync_v2, cuMemcpyAsync")),
    ("hipMemcpy", Mapped("cuMemcpyHtoD_v2, cuMemcpyDtoH_v2, cuMemcpyDtoD_v2, cuMemcpy")),
    ("hipMemsetAsync", Mapped("cuMemsetD8Async")),
    ("hipMemset", Mapped("cuMemsetD8_v2")),
    // Events.
    ("hipEventCreateWithFlags", Mapped("cuEventCreate")),
    ("hipEventDestroy", Mapped("cuEventDestroy_v2")),
    ("hipEventRecord", Mapped("cuEventRecord")),
    ("hipEventQuery", Mapped("cuEventQuery")),
    ("hipEventSynchronize", Mapped("cuEventSynchronize")),
    ("hipEventElapsedTime", Mapped("cuEventElapsedTime_v2 (cuEventElapsedTime before CUDA 12.8)")),
    // Modules and launches.
    ("hipModuleLoadData", Mapped("cuModuleLoadData (PTX from the fixture's envelope)")),
    ("hipModuleUnload", Mapped("cuModuleUnload")),
    ("hipModuleGetFunction", Mapped("cuModuleGetFunction")),
    ("hipFuncGetAttribute", Mapped("cuFuncGetAttribute")),
    ("hipModuleLaunchKernel", Mapped("cuLaunchKernel")),
    // Graphs.
    ("hipGraphGetNodes", Mapped("cuGraphGetNodes")),
    ("hipGraphNodeGetType", Mapped("cuGraphNodeGetType")),
    ("hipGraphInstantiateWithFlags", Mapped("cuGraphInstantiateWithFlags")),
    ("hipGraphLaunch", Mapped("cuGraphLaunch")),
    ("hipGraphExecUpdate", Mapped("cuGraphExecUpdate_v2")),
    ("hipGraphExecKernelNodeSetParams", Mapped("cuGraphExecKernelNodeSetParams_v2")),
    ("hipGraphExecDestroy", Mapped("cuGraphExecDestroy")),
    ("hipGraphDestroy", Mapped("cuGraphDestroy")),
    // hipBLASLt (the HIP backend's BLAS; the bundle also installs the fixture as libhipblaslt.so.1).
    ("hipblasLtCreate", Mapped("cublasLtCreate")),
    ("hipblasLtDestroy", Mapped("cublasLtDestroy")),
    ("hipblasLtMatmulDescCreate", Mapped("cublasLtMatmulDescCreate (compute types renumbered)")),
    ("hipblasLtMatmulDescDestroy", Mapped("cublasLtMatmulDescDestroy")),
    ("hipblasLtMatmulDescSetAttribute", Mapped("cublasLtMatmulDescSetAttribute (attributes, operations renumbered)")),
    ("hipblasLtMatrixLayoutCreate", Mapped("cublasLtMatrixLayoutCreate (f32, f16, bf16)")),
    ("hipblasLtMatrixLayoutDestroy", Mapped("cublasLtMatrixLayoutDestroy")),
    ("hipblasLtMatrixLayoutSetAttribute", Mapped("cublasLtMatrixLayoutSetAttribute (attributes renumbered)")),
    ("hipblasLtMatmulPreferenceCreate", Mapped("cublasLtMatmulPreferenceCreate")),
    ("hipblasLtMatmulPreferenceDestroy", Mapped("cublasLtMatmulPreferenceDestroy")),
    ("hipblasLtMatmulPreferenceSetAttribute", Mapped("cublasLtMatmulPreferenceSetAttribute")),
    (
        "hipblasLtMatmulAlgoGetHeuristic",
        Mapped("cublasLtMatmulAlgoGetHeuristic (element-aligned matrices; algorithms kept in a table)"),
    ),
    ("hipblasLtMatmul", Mapped("cublasLtMatmul")),
    // AMD-only.
    ("hipExtStreamCreateWithCUMask", NotSupported("AMD compute-unit masks have no CUDA counterpart")),
    ("hipExtMallocWithFlags", NotSupported("AMD fine-grained memory has no CUDA counterpart")),
    // hipRTC.
    ("hiprtcGetErrorString", Mapped("hipRTC's result-name table (no NVRTC call)")),
    ("hiprtcVersion", Mapped("nvrtcVersion")),
    ("hiprtcCreateProgram", Mapped("nvrtcCreateProgram")),
    ("hiprtcCompileProgram", Mapped("nvrtcCompileProgram, nvrtcGetPTXSize, nvrtcGetPTX (options mapped)")),
    ("hiprtcGetProgramLogSize", Mapped("nvrtcGetProgramLogSize")),
    ("hiprtcGetProgramLog", Mapped("nvrtcGetProgramLog")),
    ("hiprtcGetCodeSize", Mapped("the envelope's size (fixture state)")),
    ("hiprtcGetCode", Mapped("the envelope (fixture state)")),
    ("hiprtcDestroyProgram", Mapped("nvrtcDestroyProgram")),
];

/// The entry of `name`, if the fixture exports it.
#[cfg(test)]
pub fn mapping(name: &str) -> Option<Mapping> {
    EXPORTS.iter().find(|(n, _)| *n == name).map(|&(_, m)| m)
}

/// The fixture's version, e.g. `"0.1.0"`. This symbol is the fixture's *marker*: saggar's HIP backend
/// (`crates/saggar-device/src/hip/rtc.rs`) looks for it in the library hipRTC was loaded from, and only
/// there does it accept NVIDIA targets and skip the AMD-only comgr probe. No ROCm library exports it.
#[unsafe(no_mangle)]
pub extern "C" fn saggar_hip_fixture_version() -> *const c_char {
    const VERSION: &CStr = match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(version) => version,
        Err(_) => panic!("the version has no NUL inside"),
    };
    VERSION.as_ptr()
}

/// [`EXPORTS`] as text, for tests and reports: one line per symbol, `name<TAB>mapped<TAB>calls` or
/// `name<TAB>not-supported<TAB>reason`. The string is static.
#[unsafe(no_mangle)]
pub extern "C" fn saggar_hip_fixture_symbols() -> *const c_char {
    static TEXT: OnceLock<CString> = OnceLock::new();
    TEXT.get_or_init(|| {
        let lines: Vec<String> = EXPORTS
            .iter()
            .map(|(name, mapping)| match mapping {
                Mapped(calls) => format!("{name}\tmapped\t{calls}"),
                NotSupported(why) => format!("{name}\tnot-supported\t{why}"),
            })
            .collect();
        CString::new(lines.join("\n")).expect("no NUL in the table")
    })
    .as_ptr()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::ffi::{c_int, c_void};
    use std::path::Path;

    use super::*;
    use crate::abi::{HipKernelNodeParams, HipStatus, code};
    use crate::{graph, launch, rtc, runtime};

    /// The hip* functions declared in saggar's HIP backend (`sys.rs`: its `extern "C"` block) and the
    /// hipRTC functions it resolves by name (`sys.rs` and `rtc.rs`), parsed from the source.
    pub(crate) fn backend_symbols() -> (BTreeSet<String>, BTreeSet<String>) {
        let hip_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../saggar-device/src/hip");
        let read = |file: &str| {
            std::fs::read_to_string(hip_dir.join(file))
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", hip_dir.join(file).display()))
        };
        let sys = read("sys.rs");
        let rtc = read("rtc.rs");
        let block_start = sys.find("unsafe extern \"C\" {").expect("sys.rs has an extern block");
        let block = &sys[block_start..];
        let block = &block[..block.find("\n}\n").expect("the extern block ends")];
        let mut runtime = BTreeSet::new();
        for line in block.lines() {
            let line = line.trim_start();
            let rest = line.strip_prefix("pub safe fn ").or_else(|| line.strip_prefix("pub fn "));
            if let Some(rest) = rest {
                let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                runtime.insert(name);
            }
        }
        let mut hiprtc = BTreeSet::new();
        for text in [&sys, &rtc] {
            for piece in text.split('"').skip(1).step_by(2) {
                if piece.starts_with("hiprtc") && piece.chars().all(|c| c.is_ascii_alphanumeric()) {
                    hiprtc.insert(piece.to_string());
                }
            }
        }
        (runtime, hiprtc)
    }

    /// Calls every export the table marks not supported, with null and zero arguments (which they do not
    /// read), and returns (name, status).
    fn call_not_supported() -> Vec<(&'static str, HipStatus)> {
        // SAFETY: both functions read none of their arguments; they only return hipErrorNotSupported.
        unsafe {
            vec![
                (
                    "hipExtStreamCreateWithCUMask",
                    graph::hipExtStreamCreateWithCUMask(std::ptr::null_mut(), 0, std::ptr::null()),
                ),
                ("hipExtMallocWithFlags", graph::hipExtMallocWithFlags(std::ptr::null_mut(), 0, 0)),
            ]
        }
    }

    /// The test the issue asks for: every symbol saggar's HIP backend imports is either mapped by the
    /// fixture or returns hipErrorNotSupported; nothing is accepted silently.
    #[test]
    fn every_backend_symbol_is_mapped_or_not_supported() {
        let (runtime, hiprtc) = backend_symbols();
        assert!(runtime.len() >= 40, "parsed only {} runtime functions from sys.rs: {runtime:?}", runtime.len());
        assert!(hiprtc.len() >= 9, "parsed only {} hipRTC functions: {hiprtc:?}", hiprtc.len());
        eprintln!("saggar's HIP backend imports {} runtime and {} hipRTC functions", runtime.len(), hiprtc.len());
        let probed: BTreeSet<&str> = call_not_supported().iter().map(|(n, _)| *n).collect();
        for name in runtime.iter().chain(&hiprtc) {
            match mapping(name) {
                Some(Mapped(_)) => {}
                Some(NotSupported(_)) => {
                    assert!(probed.contains(name.as_str()), "{name} is not supported but not probed")
                }
                None => panic!("saggar's HIP backend imports `{name}`, which the fixture does not export"),
            }
        }
    }

    #[test]
    fn not_supported_entry_points_say_so() {
        let calls = call_not_supported();
        let listed: BTreeSet<&str> =
            EXPORTS.iter().filter(|(_, m)| matches!(m, NotSupported(_))).map(|(n, _)| *n).collect();
        assert_eq!(calls.iter().map(|(n, _)| *n).collect::<BTreeSet<_>>(), listed, "probe every such entry");
        for (name, status) in calls {
            assert_eq!(status, code::NOT_SUPPORTED, "{name}");
        }
    }

    /// Arguments a mapped function cannot map are refused before any driver call, so this holds on every
    /// machine, with or without a GPU.
    #[test]
    fn unmappable_arguments_are_not_supported() {
        let mut slot: *mut c_void = std::ptr::null_mut();
        let mut stream: cudarc::driver::sys::CUstream = std::ptr::null_mut();
        let mut event: cudarc::driver::sys::CUevent = std::ptr::null_mut();
        let mut exec: cudarc::driver::sys::CUgraphExec = std::ptr::null_mut();
        let mut extra = [std::ptr::null_mut::<c_void>(); 1];
        let params = HipKernelNodeParams {
            blockDim: Default::default(),
            extra: extra.as_mut_ptr(),
            func: std::ptr::null_mut(),
            gridDim: Default::default(),
            kernelParams: std::ptr::null_mut(),
            sharedMemBytes: 0,
        };
        // SAFETY: each call is refused on its flags or `extra` before it reads a handle or writes through
        // a pointer; the pointers given are valid anyway.
        let statuses: Vec<(&str, HipStatus)> = unsafe {
            vec![
                ("hipStreamCreateWithFlags(flags=2)", runtime::hipStreamCreateWithFlags(&mut stream, 2)),
                ("hipHostMalloc(Coherent)", runtime::hipHostMalloc(&mut slot, 64, 0x4000_0000)),
                (
                    "hipHostGetDevicePointer(flags=1)",
                    runtime::hipHostGetDevicePointer(&mut slot, std::ptr::null_mut(), 1),
                ),
                ("hipEventCreateWithFlags(ReleaseToDevice)", runtime::hipEventCreateWithFlags(&mut event, 0x4000_0000)),
                ("hipStreamWaitEvent(flags=1)", runtime::hipStreamWaitEvent(stream, event, 1)),
                (
                    "hipGraphInstantiateWithFlags(Upload)",
                    graph::hipGraphInstantiateWithFlags(&mut exec, std::ptr::null_mut(), 2),
                ),
                (
                    "hipModuleLaunchKernel(extra)",
                    launch::hipModuleLaunchKernel(
                        std::ptr::null_mut(),
                        1,
                        1,
                        1,
                        1,
                        1,
                        1,
                        0,
                        stream,
                        std::ptr::null_mut(),
                        extra.as_mut_ptr(),
                    ),
                ),
                (
                    "hipGraphExecKernelNodeSetParams(extra)",
                    graph::hipGraphExecKernelNodeSetParams(exec, std::ptr::null_mut(), &params),
                ),
            ]
        };
        for (call, status) in statuses {
            assert_eq!(status, code::NOT_SUPPORTED, "{call}");
        }
    }

    /// Without a CUDA driver, every mapped entry point that needs one fails; none is a stub that answers
    /// success without doing the work. (On a machine with a driver this is skipped: the conformance
    /// suite through the fixture checks the real calls there.)
    #[test]
    fn without_a_driver_no_mapped_call_succeeds() {
        // SAFETY: `is_culib_present` only `dlopen`s candidate names and closes what it opened.
        if unsafe { cudarc::driver::sys::is_culib_present() } {
            eprintln!("SKIPPED saggar-hip-fixture::without_a_driver_no_mapped_call_succeeds: a CUDA driver is present");
            return;
        }
        use cudarc::driver::sys as cu;
        let (mut int, mut size, mut size2, mut ms) = (0 as c_int, 0usize, 0usize, 0f32);
        let mut slot: *mut c_void = std::ptr::null_mut();
        let mut stream: cu::CUstream = std::ptr::null_mut();
        let mut event: cu::CUevent = std::ptr::null_mut();
        let mut module: cu::CUmodule = std::ptr::null_mut();
        let mut function: cu::CUfunction = std::ptr::null_mut();
        let mut graph: cu::CUgraph = std::ptr::null_mut();
        let mut exec: cu::CUgraphExec = std::ptr::null_mut();
        let mut node: cu::CUgraphNode = std::ptr::null_mut();
        let mut props = crate::abi::HipDeviceProp::zeroed();
        let image = crate::envelope::build(b".version 8.0\n", "compute_90");
        let params = HipKernelNodeParams {
            blockDim: Default::default(),
            extra: std::ptr::null_mut(),
            func: std::ptr::null_mut(),
            gridDim: Default::default(),
            kernelParams: std::ptr::null_mut(),
            sharedMemBytes: 0,
        };
        let mut buffer = [0u8; 64];
        // SAFETY: without a driver each call fails at its first step (loading the driver) and touches none
        // of its arguments; every pointer given is valid for what the call would write anyway.
        let statuses: Vec<(&str, HipStatus)> = unsafe {
            vec![
                ("hipRuntimeGetVersion", runtime::hipRuntimeGetVersion(&mut int)),
                ("hipGetDeviceCount", runtime::hipGetDeviceCount(&mut int)),
                ("hipSetDevice", runtime::hipSetDevice(0)),
                ("hipGetDevice", runtime::hipGetDevice(&mut int)),
                ("hipGetDeviceProperties", runtime::hipGetDeviceProperties(&mut props, 0)),
                ("hipDeviceTotalMem", runtime::hipDeviceTotalMem(&mut size, 0)),
                ("hipDeviceSynchronize", runtime::hipDeviceSynchronize()),
                ("hipMemGetInfo", runtime::hipMemGetInfo(&mut size, &mut size2)),
                ("hipStreamCreateWithFlags", runtime::hipStreamCreateWithFlags(&mut stream, 1)),
                ("hipStreamDestroy", runtime::hipStreamDestroy(stream)),
                ("hipStreamSynchronize", runtime::hipStreamSynchronize(stream)),
                ("hipStreamWaitEvent", runtime::hipStreamWaitEvent(stream, event, 0)),
                ("hipStreamBeginCapture", runtime::hipStreamBeginCapture(stream, 1)),
                ("hipStreamEndCapture", runtime::hipStreamEndCapture(stream, &mut graph)),
                ("hipStreamIsCapturing", runtime::hipStreamIsCapturing(stream, &mut int)),
                ("hipMalloc", runtime::hipMalloc(&mut slot, 256)),
                ("hipFree", runtime::hipFree(buffer.as_mut_ptr().cast())),
                ("hipHostMalloc", runtime::hipHostMalloc(&mut slot, 256, 0)),
                ("hipHostFree", runtime::hipHostFree(buffer.as_mut_ptr().cast())),
                ("hipHostGetDevicePointer", runtime::hipHostGetDevicePointer(&mut slot, buffer.as_mut_ptr().cast(), 0)),
                ("hipMemcpyAsync", runtime::hipMemcpyAsync(slot, buffer.as_ptr().cast(), 4, 1, stream)),
                ("hipMemcpy", runtime::hipMemcpy(slot, buffer.as_ptr().cast(), 4, 1)),
                ("hipMemsetAsync", runtime::hipMemsetAsync(slot, 0, 4, stream)),
                ("hipMemset", runtime::hipMemset(slot, 0, 4)),
                ("hipEventCreateWithFlags", runtime::hipEventCreateWithFlags(&mut event, 0)),
                ("hipEventDestroy", runtime::hipEventDestroy(event)),
                ("hipEventRecord", runtime::hipEventRecord(event, stream)),
                ("hipEventQuery", runtime::hipEventQuery(event)),
                ("hipEventSynchronize", runtime::hipEventSynchronize(event)),
                ("hipEventElapsedTime", runtime::hipEventElapsedTime(&mut ms, event, event)),
                ("hipModuleLoadData", launch::hipModuleLoadData(&mut module, image.as_ptr().cast())),
                ("hipModuleUnload", launch::hipModuleUnload(module)),
                ("hipModuleGetFunction", launch::hipModuleGetFunction(&mut function, module, c"k".as_ptr())),
                ("hipFuncGetAttribute", launch::hipFuncGetAttribute(&mut int, 0, function)),
                (
                    "hipModuleLaunchKernel",
                    launch::hipModuleLaunchKernel(
                        function,
                        1,
                        1,
                        1,
                        1,
                        1,
                        1,
                        0,
                        stream,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    ),
                ),
                ("hipGraphGetNodes", graph::hipGraphGetNodes(graph, std::ptr::null_mut(), &mut size)),
                ("hipGraphNodeGetType", graph::hipGraphNodeGetType(node, &mut int)),
                ("hipGraphInstantiateWithFlags", graph::hipGraphInstantiateWithFlags(&mut exec, graph, 0)),
                ("hipGraphLaunch", graph::hipGraphLaunch(exec, stream)),
                ("hipGraphExecUpdate", graph::hipGraphExecUpdate(exec, graph, &mut node, &mut int)),
                ("hipGraphExecKernelNodeSetParams", graph::hipGraphExecKernelNodeSetParams(exec, node, &params)),
                ("hipGraphExecDestroy", graph::hipGraphExecDestroy(exec)),
                ("hipGraphDestroy", graph::hipGraphDestroy(graph)),
            ]
        };
        let needs_driver: BTreeSet<&str> = EXPORTS
            .iter()
            .filter(|(n, m)| {
                n.starts_with("hip")
                    && !n.starts_with("hiprtc")
                    && !n.starts_with("hipblasLt")
                    && matches!(m, Mapped(c) if c.starts_with("cu"))
            })
            .map(|(n, _)| *n)
            .collect();
        let called: BTreeSet<&str> = statuses.iter().map(|(n, _)| *n).collect();
        let uncalled: Vec<_> = needs_driver.difference(&called).collect();
        assert!(uncalled.is_empty(), "mapped entry points not exercised here: {uncalled:?}");
        for (name, status) in statuses {
            assert_eq!(status, code::INSUFFICIENT_DRIVER, "{name} without a CUDA driver");
        }
    }

    /// The same for hipRTC without NVRTC.
    #[test]
    fn without_nvrtc_no_hiprtc_call_succeeds() {
        // SAFETY: only `dlopen`s candidate names and closes what it opened.
        if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            eprintln!("SKIPPED saggar-hip-fixture::without_nvrtc_no_hiprtc_call_succeeds: NVRTC is present");
            return;
        }
        let internal = crate::abi::rtc_code::INTERNAL_ERROR;
        let (mut major, mut minor, mut size) = (0, 0, 0usize);
        let mut program: *mut c_void = std::ptr::null_mut();
        let mut buffer = [0 as c_char; 16];
        // SAFETY: without NVRTC each call fails at its first step and touches none of its arguments.
        unsafe {
            assert_eq!(rtc::hiprtcVersion(&mut major, &mut minor), internal);
            let created = rtc::hiprtcCreateProgram(
                &mut program,
                c"".as_ptr(),
                c"x".as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            );
            assert_eq!(created, internal);
            assert!(program.is_null());
            assert_eq!(rtc::hiprtcCompileProgram(program, 0, std::ptr::null()), internal);
            assert_eq!(rtc::hiprtcGetProgramLogSize(program, &mut size), internal);
            assert_eq!(rtc::hiprtcGetProgramLog(program, buffer.as_mut_ptr()), internal);
            assert_eq!(rtc::hiprtcGetCodeSize(program, &mut size), internal);
            assert_eq!(rtc::hiprtcGetCode(program, buffer.as_mut_ptr()), internal);
            assert_eq!(rtc::hiprtcDestroyProgram(&mut program), internal);
        }
    }

    #[test]
    fn the_table_is_well_formed_and_published() {
        let mut names = BTreeSet::new();
        for (name, _) in EXPORTS {
            assert!(names.insert(*name), "{name} is listed twice");
            assert!(name.starts_with("hip"), "{name}");
        }
        // SAFETY: both return pointers to static NUL-terminated strings.
        let (version, text) =
            unsafe { (CStr::from_ptr(saggar_hip_fixture_version()), CStr::from_ptr(saggar_hip_fixture_symbols())) };
        assert_eq!(version.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
        let text = text.to_str().unwrap();
        assert_eq!(text.lines().count(), EXPORTS.len());
        assert!(text.lines().any(|l| l == "hipMalloc\tmapped\tcuMemAlloc_v2"));
    }
}
