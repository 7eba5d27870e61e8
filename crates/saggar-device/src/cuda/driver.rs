//! [`CudaDriver`]: the CUDA driver API as a [`Driver`] of the shared GPU layer. Each entry is one
//! call of `result`; the rest is what only CUDA decides: which error codes mean what, how a PTX or
//! cubin image is handed to `cuModuleLoadDataEx`, a kernel's own limits, and `cuGraphExecUpdate_v2`,
//! which is atomic (a refused update leaves the executable graph as it was).

use std::borrow::Cow;
use std::ffi::{CStr, c_void};

use cudarc::driver::sys;
use cudarc::driver::sys::CUfunction_attribute as FuncAttr;

use crate::api::CaptureStatus;
use crate::code::{CodeFormat, CodeObject, KernelSource};
use crate::cuda::device::{self, PrimaryContext};
use crate::cuda::result::{self, CUresult};
use crate::cuda::rtc;
use crate::error::{Error, Result};
use crate::gpu::{
    CapturedOp, DeviceShared, Driver, DriverFault, ErrorClass, GraphInner, LoadedModule, Opened, UpdateFailure,
};
use crate::rules::{DeviceLimits, KernelLimits};
use crate::types::{BackendKind, CaptureMode, DeviceInfo, LaunchConfig};

/// The CUDA driver API, by way of cudarc's `sys` and `result` layers, loaded at run time.
#[derive(Debug)]
pub enum CudaDriver {}

/// A result code as [`Error::Vendor`] holds it.
const fn code(res: CUresult) -> i64 {
    res as u32 as i64
}

const fn fault(res: CUresult, fault: DriverFault) -> (i64, ErrorClass) {
    (code(res), ErrorClass::Fault(fault))
}

const fn class(res: CUresult, class: ErrorClass) -> (i64, ErrorClass) {
    (code(res), class)
}

/// What CUDA's codes mean to saggar. Capture violations: calls stream capture does not allow. Sticky
/// faults: a kernel or copy failed on the device, the context is unusable, and every later call reports
/// the same error. Bad images: "this image cannot be loaded here", reported as a bad code object.
const ERROR_CLASSES: &[(i64, ErrorClass)] = {
    use CUresult as R;
    use DriverFault::{CaptureViolation as Violation, Sticky};
    &[
        class(R::CUDA_ERROR_OUT_OF_MEMORY, ErrorClass::OutOfMemory),
        class(R::CUDA_ERROR_NOT_READY, ErrorClass::NotReady),
        class(R::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, ErrorClass::LaunchOutOfResources),
        class(R::CUDA_ERROR_NOT_FOUND, ErrorClass::NotFound),
        class(R::CUDA_ERROR_INVALID_IMAGE, ErrorClass::BadImage),
        class(R::CUDA_ERROR_INVALID_PTX, ErrorClass::BadImage),
        class(R::CUDA_ERROR_UNSUPPORTED_PTX_VERSION, ErrorClass::BadImage),
        class(R::CUDA_ERROR_NO_BINARY_FOR_GPU, ErrorClass::BadImage),
        class(R::CUDA_ERROR_JIT_COMPILER_NOT_FOUND, ErrorClass::BadImage),
        class(R::CUDA_ERROR_INVALID_SOURCE, ErrorClass::BadImage),
        class(R::CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, ErrorClass::BadImage),
        fault(R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, Violation),
        fault(R::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, Violation),
        fault(R::CUDA_ERROR_STREAM_CAPTURE_ISOLATION, Violation),
        fault(R::CUDA_ERROR_STREAM_CAPTURE_MERGE, Violation),
        fault(R::CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, Violation),
        fault(R::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, Violation),
        fault(R::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, DriverFault::CaptureInvalidated),
        fault(R::CUDA_ERROR_CAPTURED_EVENT, DriverFault::CapturedEvent),
        fault(R::CUDA_ERROR_ILLEGAL_ADDRESS, Sticky),
        fault(R::CUDA_ERROR_LAUNCH_TIMEOUT, Sticky),
        fault(R::CUDA_ERROR_HARDWARE_STACK_ERROR, Sticky),
        fault(R::CUDA_ERROR_ILLEGAL_INSTRUCTION, Sticky),
        fault(R::CUDA_ERROR_MISALIGNED_ADDRESS, Sticky),
        fault(R::CUDA_ERROR_INVALID_ADDRESS_SPACE, Sticky),
        fault(R::CUDA_ERROR_INVALID_PC, Sticky),
        fault(R::CUDA_ERROR_LAUNCH_FAILED, Sticky),
        fault(R::CUDA_ERROR_ASSERT, Sticky),
        fault(R::CUDA_ERROR_ECC_UNCORRECTABLE, Sticky),
        fault(R::CUDA_ERROR_CONTAINED, Sticky),
    ]
};

impl Driver for CudaDriver {
    const KIND: BackendKind = BackendKind::Cuda;
    const BLAS_LT: &'static crate::gpu::LtSpec = &crate::cuda::blas::CUBLASLT;
    const RECORDS_CAPTURED_OPS: bool = false;
    const NO_CURRENT: sys::CUcontext = std::ptr::null_mut();

    type DeviceState = PrimaryContext;
    type Current = sys::CUcontext;
    type Stream = sys::CUstream;
    type Event = sys::CUevent;
    type Module = sys::CUmodule;
    type Function = sys::CUfunction;
    type Graph = sys::CUgraph;
    type GraphExec = sys::CUgraphExec;
    type GraphData = ();

    const ERROR_CLASSES: &'static [(i64, ErrorClass)] = ERROR_CLASSES;

    crate::gpu_driver_statics!(CudaDriver);

    fn blas_stream(stream: sys::CUstream) -> *mut std::ffi::c_void {
        stream.cast()
    }

    fn enumerate() -> Result<Vec<DeviceInfo>> {
        device::enumerate()
    }

    fn open(ordinal: usize) -> Result<Opened<Self>> {
        device::open(ordinal)
    }

    #[inline]
    fn current_of(state: &PrimaryContext) -> sys::CUcontext {
        state.raw
    }

    fn get_current(op: &'static str) -> Result<sys::CUcontext> {
        result::ctx::get_current(op)
    }

    #[inline]
    unsafe fn set_current(op: &'static str, current: sys::CUcontext) -> Result<()> {
        // SAFETY: the caller guarantees `current` is live (or null).
        unsafe { result::ctx::set_current(op, current) }
    }

    fn synchronize_device(op: &'static str) -> Result<()> {
        result::ctx::synchronize(op)
    }

    fn memory_info(op: &'static str) -> Result<(usize, usize)> {
        result::memory::info(op)
    }

    fn compile(device: &DeviceShared<Self>, source: &KernelSource) -> Result<CodeObject> {
        rtc::compile_for(source, device.state.compute_capability)
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
        stream: sys::CUstream,
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
        stream: sys::CUstream,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::memory::copy_dtoh_async(op, dst, src, bytes, stream) }
    }

    #[inline]
    unsafe fn copy_dtod_async(op: &'static str, dst: u64, src: u64, bytes: usize, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::memory::copy_dtod_async(op, dst, src, bytes, stream) }
    }

    #[inline]
    unsafe fn memset_async(op: &'static str, dst: u64, value: u8, bytes: usize, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::memory::memset_d8_async(op, dst, value, bytes, stream) }
    }

    fn stream_create(op: &'static str) -> Result<sys::CUstream> {
        result::stream::create(op)
    }

    unsafe fn stream_destroy(op: &'static str, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::stream::destroy(op, stream) }
    }

    unsafe fn stream_synchronize(op: &'static str, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::stream::synchronize(op, stream) }
    }

    unsafe fn stream_wait_event(op: &'static str, stream: sys::CUstream, event: sys::CUevent) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::stream::wait_event(op, stream, event) }
    }

    unsafe fn begin_capture(op: &'static str, stream: sys::CUstream, mode: CaptureMode) -> Result<()> {
        let mode = match mode {
            CaptureMode::Global => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        };
        // SAFETY: the caller's contract.
        unsafe { result::stream::begin_capture(op, stream, mode) }
    }

    unsafe fn end_capture(op: &'static str, stream: sys::CUstream) -> Result<Option<sys::CUgraph>> {
        // SAFETY: the caller's contract.
        let graph = unsafe { result::stream::end_capture(op, stream) }?;
        // CUDA returns a graph (of zero nodes) for a capture of no work; null would be a driver fault.
        if graph.is_null() { Err(result::vendor(op, CUresult::CUDA_ERROR_INVALID_VALUE)) } else { Ok(Some(graph)) }
    }

    unsafe fn capture_status(op: &'static str, stream: sys::CUstream) -> Result<Option<CaptureStatus>> {
        use sys::CUstreamCaptureStatus as S;
        // SAFETY: the caller's contract.
        Ok(Some(match unsafe { result::stream::is_capturing(op, stream) }? {
            S::CU_STREAM_CAPTURE_STATUS_NONE => CaptureStatus::Idle,
            S::CU_STREAM_CAPTURE_STATUS_ACTIVE => CaptureStatus::Active,
            S::CU_STREAM_CAPTURE_STATUS_INVALIDATED => CaptureStatus::Invalidated,
        }))
    }

    fn event_create(op: &'static str, timed: bool) -> Result<sys::CUevent> {
        result::event::create(op, timed)
    }

    unsafe fn event_destroy(op: &'static str, event: sys::CUevent) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::event::destroy(op, event) }
    }

    #[inline]
    unsafe fn event_record(op: &'static str, event: sys::CUevent, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::event::record(op, event, stream) }
    }

    unsafe fn event_query(op: &'static str, event: sys::CUevent) -> Result<bool> {
        // SAFETY: the caller's contract.
        unsafe { result::event::query(op, event) }
    }

    unsafe fn event_synchronize(op: &'static str, event: sys::CUevent) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::event::synchronize(op, event) }
    }

    unsafe fn event_elapsed_ms(op: &'static str, start: sys::CUevent, end: sys::CUevent) -> Result<f32> {
        // SAFETY: the caller's contract.
        unsafe { result::event::elapsed_ms(op, start, end) }
    }

    fn load_module(op: &'static str, code: &CodeObject) -> Result<LoadedModule<sys::CUmodule>> {
        let image: Cow<'_, [u8]> = match code.format {
            // `cuModuleLoadData` reads PTX as a C string: make sure it ends with a NUL.
            CodeFormat::Ptx if code.image.last() != Some(&0) => {
                let mut owned = code.image.clone();
                owned.push(0);
                owned.into()
            }
            CodeFormat::Ptx | CodeFormat::Cubin => code.image.as_slice().into(),
            other => {
                return Err(Error::CodeObject {
                    reason: format!("a CUDA device loads PTX or cubin code objects, not {other:?}"),
                });
            }
        };
        if image.is_empty() || image.iter().all(|&b| b == 0) {
            return Err(Error::CodeObject { reason: "the code object's image is empty".into() });
        }
        // SAFETY: `image` is a complete image (NUL-terminated when it is PTX) that outlives the call; the
        // driver copies what it needs before returning.
        match unsafe { result::module::load_data(op, image.as_ptr().cast::<c_void>()) } {
            Ok(raw) => Ok((raw, None)),
            Err(e) if Self::classify(&e) == ErrorClass::BadImage => Err(Error::CodeObject { reason: e.to_string() }),
            Err(e) => Err(e),
        }
    }

    unsafe fn unload_module(op: &'static str, module: sys::CUmodule) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::module::unload(op, module) }
    }

    unsafe fn get_function(op: &'static str, module: sys::CUmodule, name: &CStr) -> Result<sys::CUfunction> {
        // SAFETY: the caller's contract.
        unsafe { result::function::get(op, module, name) }
    }

    unsafe fn kernel_limits(
        op: &'static str,
        function: sys::CUfunction,
        device: &DeviceLimits,
    ) -> Result<KernelLimits> {
        // SAFETY: the caller guarantees `function` belongs to a live module.
        let attr = |a: FuncAttr| unsafe { result::function::attribute(op, function, a) }.map(|v| v.max(0) as u32);
        Ok(KernelLimits::narrow(
            device,
            Some(attr(FuncAttr::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?),
            Some(attr(FuncAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)?),
        ))
    }

    fn module_name(code: &CodeObject) -> String {
        format!("CUDA {:?} module", code.format)
    }

    #[inline]
    fn function_address(function: sys::CUfunction) -> usize {
        function as usize
    }

    #[inline]
    unsafe fn launch_kernel(
        op: &'static str,
        function: sys::CUfunction,
        config: &LaunchConfig,
        stream: sys::CUstream,
        params: *mut *mut c_void,
    ) -> Result<()> {
        // SAFETY: the caller's contract; a programmatic launch's kernel waits for the one before it
        // (`LaunchConfig::programmatic`'s contract, which the caller's extends to).
        unsafe { result::launch::kernel(op, function, config, stream, params) }
    }

    unsafe fn read_graph(op: &'static str, graph: sys::CUgraph, _ops: Vec<CapturedOp>) -> Result<(usize, ())> {
        // SAFETY: the caller's contract.
        Ok((unsafe { result::graph::node_count(op, graph) }?, ()))
    }

    fn empty_graph_data() {}

    unsafe fn graph_destroy(op: &'static str, graph: sys::CUgraph) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::graph::destroy(op, graph) }
    }

    unsafe fn graph_instantiate(op: &'static str, graph: sys::CUgraph) -> Result<sys::CUgraphExec> {
        // SAFETY: the caller's contract.
        unsafe { result::graph::instantiate(op, graph) }
    }

    #[inline]
    unsafe fn graph_launch(op: &'static str, exec: sys::CUgraphExec, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::graph::launch(op, exec, stream) }
    }

    unsafe fn graph_exec_destroy(op: &'static str, exec: sys::CUgraphExec) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { result::graph::exec_destroy(op, exec) }
    }

    unsafe fn update_exec(
        op: &'static str,
        exec: sys::CUgraphExec,
        _source: &GraphInner<Self>,
        _applied: &GraphInner<Self>,
        new: &GraphInner<Self>,
    ) -> Result<(), UpdateFailure> {
        // A graph of nodes always has a handle: CUDA returns one for every capture.
        let Some(graph) = new.raw else { return Ok(()) };
        let _serialised = new.lock.lock();
        // SAFETY: the caller's contract; `graph` is live with its lock held. `cuGraphExecUpdate_v2` is
        // atomic: on refusal or error the executable graph is unchanged.
        match unsafe { result::graph::exec_update(op, exec, graph) } {
            Ok(Ok(())) => Ok(()),
            Ok(Err(code)) => Err(UpdateFailure::Refused(result::graph::update_result_text(code))),
            Err(e) => Err(UpdateFailure::Failed(e)),
        }
    }
}

/// Whether programmatic dependent launches are used where the device takes them: yes unless
/// `SAGGAR_PROGRAMMATIC_LAUNCH=0` (to compare, or to rule them out when chasing a fault). Read once.
pub(crate) fn programmatic_launch_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var("SAGGAR_PROGRAMMATIC_LAUNCH").map_or(true, |v| v.trim() != "0"))
}
