//! [`HipDriver`]: the HIP runtime API as a [`Driver`] of the shared GPU layer. Each entry is one call
//! of `result`; the rest is what only HIP decides: which status codes mean what, checking an AMD code
//! object before `hipModuleLoadData` (which takes no length) reads it, a kernel's limits, and updating
//! executable graphs node by node (`graph`), because `hipGraphExecUpdate` is slow and not atomic.

use std::ffi::{CStr, c_int, c_void};

use crate::api::CaptureStatus;
use crate::code::{CodeObject, KernelSource};
#[cfg(test)]
use crate::error::Error;
use crate::error::Result;
use crate::gpu::{
    CapturedOp, DeviceShared, Driver, DriverFault, ErrorClass, GraphInner, LoadedModule, Opened, UpdateFailure,
};
use crate::hip::device::{self, HipOrdinal};
use crate::hip::graph::{self, HipGraphData};
use crate::hip::result;
use crate::hip::sys::{self, HipStatus, capture_status, code};
use crate::hip::{module, rtc};
use crate::pinning::check_pinned;
use crate::rules::{DeviceLimits, KernelLimits};
use crate::types::{BackendKind, CaptureMode, DeviceInfo, LaunchConfig};

/// The HIP runtime API (libamdhip64, by way of hip-runtime-sys and saggar's own declarations).
#[derive(Debug)]
pub enum HipDriver {}

/// No device is known to be current (HIP's default is device 0, but saggar does not assume it).
const UNKNOWN_DEVICE: c_int = -1;

const fn fault(status: HipStatus, fault: DriverFault) -> (i64, ErrorClass) {
    (status as i64, ErrorClass::Fault(fault))
}

const fn class(status: HipStatus, class: ErrorClass) -> (i64, ErrorClass) {
    (status as i64, class)
}

/// What HIP's codes mean to saggar. Capture violations: calls stream capture does not allow. Sticky
/// faults: a kernel or copy failed on the device, and HIP reports it at a later call. ROCm releases
/// differ in which code they report for a missing kernel, hence three.
const ERROR_CLASSES: &[(i64, ErrorClass)] = {
    use DriverFault::{CaptureViolation as Violation, Sticky};
    &[
        class(code::OUT_OF_MEMORY, ErrorClass::OutOfMemory),
        class(code::NOT_READY, ErrorClass::NotReady),
        class(code::LAUNCH_OUT_OF_RESOURCES, ErrorClass::LaunchOutOfResources),
        class(code::NOT_FOUND, ErrorClass::NotFound),
        class(code::INVALID_SYMBOL, ErrorClass::NotFound),
        class(code::INVALID_DEVICE_FUNCTION, ErrorClass::NotFound),
        class(code::INVALID_IMAGE, ErrorClass::BadImage),
        class(code::NO_BINARY_FOR_GPU, ErrorClass::BadImage),
        class(code::INVALID_KERNEL_FILE, ErrorClass::BadImage),
        class(code::SHARED_OBJECT_INIT_FAILED, ErrorClass::BadImage),
        fault(code::STREAM_CAPTURE_UNSUPPORTED, Violation),
        fault(code::STREAM_CAPTURE_IMPLICIT, Violation),
        fault(code::STREAM_CAPTURE_ISOLATION, Violation),
        fault(code::STREAM_CAPTURE_MERGE, Violation),
        fault(code::STREAM_CAPTURE_UNMATCHED, Violation),
        fault(code::STREAM_CAPTURE_WRONG_THREAD, Violation),
        fault(code::STREAM_CAPTURE_INVALIDATED, DriverFault::CaptureInvalidated),
        fault(code::CAPTURED_EVENT, DriverFault::CapturedEvent),
        fault(code::ILLEGAL_ADDRESS, Sticky),
        fault(code::LAUNCH_FAILURE, Sticky),
        fault(code::LAUNCH_TIMEOUT, Sticky),
        fault(code::ASSERT, Sticky),
        fault(code::ECC_NOT_CORRECTABLE, Sticky),
    ]
};

/// saggar's capture mode as HIP's.
pub(crate) fn capture_mode(mode: CaptureMode) -> sys::hipStreamCaptureMode {
    match mode {
        CaptureMode::Global => sys::hipStreamCaptureMode::hipStreamCaptureModeGlobal,
        CaptureMode::ThreadLocal => sys::hipStreamCaptureMode::hipStreamCaptureModeThreadLocal,
        CaptureMode::Relaxed => sys::hipStreamCaptureMode::hipStreamCaptureModeRelaxed,
    }
}

impl Driver for HipDriver {
    const KIND: BackendKind = BackendKind::Hip;
    const BLAS_LT: &'static crate::gpu::LtSpec = &crate::hip::blas::HIPBLASLT;
    const RECORDS_CAPTURED_OPS: bool = true;
    const NO_CURRENT: c_int = UNKNOWN_DEVICE;

    type DeviceState = HipOrdinal;
    type Current = c_int;
    type Stream = sys::hipStream_t;
    type Event = sys::hipEvent_t;
    type Module = sys::hipModule_t;
    type Function = sys::hipFunction_t;
    type Graph = sys::hipGraph_t;
    type GraphExec = sys::hipGraphExec_t;
    type GraphData = HipGraphData;

    const ERROR_CLASSES: &'static [(i64, ErrorClass)] = ERROR_CLASSES;

    crate::gpu_driver_statics!(HipDriver);

    fn blas_stream(stream: sys::hipStream_t) -> *mut std::ffi::c_void {
        stream.cast()
    }

    fn enumerate() -> Result<Vec<DeviceInfo>> {
        device::enumerate()
    }

    fn open(ordinal: usize) -> Result<Opened<Self>> {
        device::open(ordinal)
    }

    #[inline]
    fn current_of(state: &HipOrdinal) -> c_int {
        state.0
    }

    fn get_current(op: &'static str) -> Result<c_int> {
        result::device::get(op)
    }

    #[inline]
    unsafe fn set_current(op: &'static str, current: c_int) -> Result<()> {
        result::device::set(op, current)
    }

    fn synchronize_device(op: &'static str) -> Result<()> {
        result::device::synchronize(op)
    }

    fn memory_info(op: &'static str) -> Result<(usize, usize)> {
        result::memory::info(op)
    }

    fn compile(device: &DeviceShared<Self>, source: &KernelSource) -> Result<CodeObject> {
        check_pinned("device.compile", BackendKind::Hip, device.info.ordinal)?;
        rtc::compile_for_arch(source, &device.info.arch)
    }

    fn alloc(op: &'static str, bytes: usize) -> Result<u64> {
        result::memory::alloc(op, bytes)
    }

    unsafe fn free(op: &'static str, ptr: u64) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::memory::free(op, ptr) }
    }

    fn alloc_host(op: &'static str, bytes: usize) -> Result<*mut c_void> {
        result::memory::alloc_host(op, bytes)
    }

    unsafe fn free_host(op: &'static str, ptr: *mut c_void) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::memory::free_host(op, ptr) }
    }

    unsafe fn device_pointer_of_host(op: &'static str, ptr: *mut c_void) -> Result<u64> {
        // SAFETY: the caller's contract.
        unsafe { result::memory::device_pointer_of_host(op, ptr) }
    }

    #[inline]
    unsafe fn copy_htod_async(
        op: &'static str,
        dst: u64,
        src: *const c_void,
        bytes: usize,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::memory::copy_htod_async(op, dst, src, bytes, stream) }
    }

    #[inline]
    unsafe fn copy_dtoh_async(
        op: &'static str,
        dst: *mut c_void,
        src: u64,
        bytes: usize,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::memory::copy_dtoh_async(op, dst, src, bytes, stream) }
    }

    #[inline]
    unsafe fn copy_dtod_async(
        op: &'static str,
        dst: u64,
        src: u64,
        bytes: usize,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::memory::copy_dtod_async(op, dst, src, bytes, stream) }
    }

    #[inline]
    unsafe fn memset_async(
        op: &'static str,
        dst: u64,
        value: u8,
        bytes: usize,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::memory::memset_async(op, dst, value, bytes, stream) }
    }

    fn stream_create(op: &'static str) -> Result<sys::hipStream_t> {
        result::stream::create(op)
    }

    unsafe fn stream_destroy(op: &'static str, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::stream::destroy(op, stream) }
    }

    unsafe fn stream_synchronize(op: &'static str, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::stream::synchronize(op, stream) }
    }

    unsafe fn stream_wait_event(op: &'static str, stream: sys::hipStream_t, event: sys::hipEvent_t) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::stream::wait_event(op, stream, event) }
    }

    unsafe fn begin_capture(op: &'static str, stream: sys::hipStream_t, mode: CaptureMode) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::stream::begin_capture(op, stream, capture_mode(mode)) }
    }

    unsafe fn end_capture(op: &'static str, stream: sys::hipStream_t) -> Result<Option<sys::hipGraph_t>> {
        // SAFETY: the caller's contract. HIP may return no graph for a capture of no work.
        let graph = unsafe { result::stream::end_capture(op, stream) }?;
        Ok((!graph.is_null()).then_some(graph))
    }

    unsafe fn capture_status(op: &'static str, stream: sys::hipStream_t) -> Result<Option<CaptureStatus>> {
        // SAFETY: the caller's contract.
        Ok(match unsafe { result::stream::is_capturing(op, stream) }? {
            capture_status::NONE => Some(CaptureStatus::Idle),
            capture_status::ACTIVE => Some(CaptureStatus::Active),
            capture_status::INVALIDATED => Some(CaptureStatus::Invalidated),
            _ => None,
        })
    }

    fn event_create(op: &'static str, timed: bool) -> Result<sys::hipEvent_t> {
        result::event::create(op, timed)
    }

    unsafe fn event_destroy(op: &'static str, event: sys::hipEvent_t) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::event::destroy(op, event) }
    }

    #[inline]
    unsafe fn event_record(op: &'static str, event: sys::hipEvent_t, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::event::record(op, event, stream) }
    }

    unsafe fn event_query(op: &'static str, event: sys::hipEvent_t) -> Result<bool> {
        // SAFETY: the caller's contract.
        unsafe { result::event::query(op, event) }
    }

    unsafe fn event_synchronize(op: &'static str, event: sys::hipEvent_t) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::event::synchronize(op, event) }
    }

    unsafe fn event_elapsed_ms(op: &'static str, start: sys::hipEvent_t, end: sys::hipEvent_t) -> Result<f32> {
        // SAFETY: the caller's contract.
        unsafe { result::event::elapsed_ms(op, start, end) }
    }

    fn load_module(op: &'static str, code: &CodeObject) -> Result<LoadedModule<sys::hipModule_t>> {
        module::load(op, code)
    }

    unsafe fn unload_module(op: &'static str, module: sys::hipModule_t) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::module::unload(op, module) }
    }

    unsafe fn get_function(op: &'static str, module: sys::hipModule_t, name: &CStr) -> Result<sys::hipFunction_t> {
        // SAFETY: the caller's contract.
        unsafe { result::function::get(op, module, name) }
    }

    unsafe fn kernel_limits(
        op: &'static str,
        function: sys::hipFunction_t,
        device: &DeviceLimits,
    ) -> Result<KernelLimits> {
        // SAFETY: the caller's contract.
        Ok(unsafe { module::kernel_limits(op, function, device) })
    }

    fn module_name(_code: &CodeObject) -> String {
        "HIP code object module".into()
    }

    #[inline]
    fn function_address(function: sys::hipFunction_t) -> usize {
        function as usize
    }

    #[inline]
    unsafe fn launch_kernel(
        op: &'static str,
        function: sys::hipFunction_t,
        config: &LaunchConfig,
        stream: sys::hipStream_t,
        params: *mut *mut c_void,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe {
            result::launch::kernel(op, function, config.grid, config.block, config.shared_mem_bytes, stream, params)
        }
    }

    unsafe fn read_graph(
        op: &'static str,
        graph: sys::hipGraph_t,
        ops: Vec<CapturedOp>,
    ) -> Result<(usize, HipGraphData)> {
        // SAFETY: the caller's contract.
        unsafe { graph::read(op, graph, ops) }
    }

    fn empty_graph_data() -> HipGraphData {
        graph::empty()
    }

    unsafe fn graph_destroy(op: &'static str, graph: sys::hipGraph_t) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::graph::destroy(op, graph) }
    }

    unsafe fn graph_instantiate(op: &'static str, graph: sys::hipGraph_t) -> Result<sys::hipGraphExec_t> {
        // SAFETY: the caller's contract.
        unsafe { result::graph::instantiate(op, graph) }
    }

    #[inline]
    unsafe fn graph_launch(op: &'static str, exec: sys::hipGraphExec_t, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::graph::launch(op, exec, stream) }
    }

    unsafe fn graph_exec_destroy(op: &'static str, exec: sys::hipGraphExec_t) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::graph::exec_destroy(op, exec) }
    }

    unsafe fn update_exec(
        op: &'static str,
        exec: sys::hipGraphExec_t,
        source: &GraphInner<Self>,
        applied: &GraphInner<Self>,
        new: &GraphInner<Self>,
    ) -> Result<(), UpdateFailure> {
        // SAFETY: the caller's contract.
        unsafe { graph::update_exec(op, exec, source, applied, new) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::map_fault;

    #[test]
    fn capture_modes_map_one_to_one() {
        use sys::hipStreamCaptureMode as M;
        assert_eq!(capture_mode(CaptureMode::Global), M::hipStreamCaptureModeGlobal);
        assert_eq!(capture_mode(CaptureMode::ThreadLocal), M::hipStreamCaptureModeThreadLocal);
        assert_eq!(capture_mode(CaptureMode::Relaxed), M::hipStreamCaptureModeRelaxed);
        assert_eq!(capture_mode(CaptureMode::default()) as c_int, 1, "thread-local is saggar's default");
    }

    #[test]
    fn capture_violations_become_illegal_during_capture() {
        let fault = |op, status| map_fault::<HipDriver>(op, result::vendor(op, status), None, 3);
        let e = fault("stream.memset", code::STREAM_CAPTURE_UNSUPPORTED);
        assert!(matches!(e, Error::IllegalDuringCapture { op: "stream.memset", .. }), "{e:?}");
        let e = fault("stream.end_capture", code::STREAM_CAPTURE_INVALIDATED);
        assert!(matches!(e, Error::CaptureInvalidated { .. }), "{e:?}");
        let e = fault("stream.synchronize", code::ILLEGAL_ADDRESS);
        assert!(matches!(e, Error::Async { stream: 3, .. }), "{e:?}");
        let e = map_fault::<HipDriver>("device.alloc", result::vendor("x", code::INVALID_VALUE), None, 0);
        assert!(matches!(e, Error::Vendor { .. }), "{e:?}");
        assert!(!crate::gpu::unsafe_calls_forbidden::<HipDriver>());
    }
}
