//! A thin layer over the HIP runtime and hipRTC: every call saggar makes becomes one function that returns
//! `Result<_, Error>`, grouped by the object it acts on (`result::stream::create`,
//! `result::memory::alloc`, `result::graph::instantiate`, ...), in the manner of cudarc's `result` module
//! and of the CUDA backend's `result.rs`, which this file mirrors section for section.
//!
//! A failed call becomes [`Error::Vendor`] with HIP's own name for the code (`hipGetErrorName`:
//! `hipErrorOutOfMemory`) and its description (`hipGetErrorString`), plus the saggar operation that made
//! the call. The codes saggar gives a meaning of its own (out of memory, a capture violation, an event
//! not yet complete) are listed in `driver.rs`.
//!
//! Nothing here decides policy: no pinning checks, no capture bookkeeping, no current-device handling.
//! Functions that take raw handles are `unsafe`, and their `# Safety` sections say which handles must be
//! live; functions that take only plain values are safe, because the runtime validates those itself.
//!
//! [`library`] holds the one place that loads hipRTC, so that a missing hipRTC is reported as
//! [`Error::BackendUnavailable`].

use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr;

use crate::error::{Error, Result};
use crate::hip::sys::{self, HipStatus, code};
use crate::types::{BackendKind, Dim3};

/// HIP's name of a status code, e.g. `hipErrorOutOfMemory`.
pub(crate) fn error_name(status: HipStatus) -> String {
    let name = sys::hipGetErrorName(status);
    if name.is_null() {
        return format!("hipError_t({status})");
    }
    // SAFETY: non-null: a NUL-terminated string with static lifetime owned by libamdhip64.
    let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
    // Runtimes answer `hipErrorUnknown` for codes newer than themselves; keep the number then.
    if name == "hipErrorUnknown" && status != sys::hipError_t::hipErrorUnknown as HipStatus {
        format!("hipError_t({status})")
    } else {
        name
    }
}

/// HIP's description of a status code. (ROCm 5.x returns the code's name here too.)
pub(crate) fn error_string(status: HipStatus) -> String {
    let text = sys::hipGetErrorString(status);
    if text.is_null() {
        return "no description (hipGetErrorString does not know this code)".to_string();
    }
    // SAFETY: non-null: a NUL-terminated string with static lifetime owned by libamdhip64.
    unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
}

/// [`Error::Vendor`] for a failed HIP call made by saggar operation `op`.
#[cold]
pub(crate) fn vendor(op: &'static str, status: HipStatus) -> Error {
    Error::Vendor {
        backend: BackendKind::Hip,
        op,
        name: error_name(status),
        code: i64::from(status),
        message: error_string(status),
    }
}

/// `Ok(())` for `hipSuccess`, [`vendor`] otherwise.
#[inline]
pub(crate) fn check(op: &'static str, status: HipStatus) -> Result<()> {
    if status == code::SUCCESS { Ok(()) } else { Err(vendor(op, status)) }
}

/// Loading hipRTC, once per process.
pub(crate) mod library {
    use std::sync::OnceLock;

    use super::*;
    use crate::hip::sys::Hiprtc;

    /// hipRTC, loaded and checked once per process; or why it cannot be.
    pub(crate) fn hiprtc() -> Result<&'static Hiprtc> {
        static HIPRTC: OnceLock<Result<Hiprtc>> = OnceLock::new();
        HIPRTC
            .get_or_init(|| {
                Hiprtc::load().map_err(|reason| Error::BackendUnavailable {
                    backend: BackendKind::Hip,
                    reason: format!(
                        "{reason}. Runtime compilation needs hipRTC: libhiprtc.so (ROCm 6 and later) or a \
                         libamdhip64.so that contains it (ROCm 5.x). Precompiled HIP code objects load without it"
                    ),
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// comgr, loaded once per process if it can be (it is optional: see `rtc.rs`).
pub(crate) mod comgr {
    use std::ffi::CString;
    use std::sync::OnceLock;

    use crate::hip::sys::{COMGR_SUCCESS, Comgr, ComgrMetadataNode};

    /// comgr, or `None` where no candidate library loads.
    pub(crate) fn library() -> Option<&'static Comgr> {
        static COMGR: OnceLock<Option<Comgr>> = OnceLock::new();
        COMGR.get_or_init(Comgr::load).as_ref()
    }

    /// Whether comgr knows ISA `name` (`amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-`), processor and
    /// target features alike.
    pub(crate) fn isa_is_known(api: &Comgr, name: &str) -> bool {
        let Ok(name) = CString::new(name) else { return false };
        let mut node = ComgrMetadataNode { handle: 0 };
        // SAFETY: `name` is NUL-terminated; comgr writes one metadata handle.
        if unsafe { (api.get_isa_metadata)(name.as_ptr(), &mut node) } != COMGR_SUCCESS {
            return false;
        }
        // SAFETY: `node` was just returned by comgr and is destroyed once. A failed destroy leaks a few
        // bytes of comgr's metadata, nothing saggar can act on.
        let _ = unsafe { (api.destroy_metadata)(node) };
        true
    }
}

/// Runtime-wide queries.
pub(crate) mod runtime {
    use super::*;

    /// The number of HIP devices. Without a GPU the runtime answers `hipErrorNoDevice` (or 0).
    pub(crate) fn device_count(op: &'static str) -> Result<usize> {
        let mut count: c_int = 0;
        // SAFETY: writes one int.
        check(op, unsafe { sys::hipGetDeviceCount(&mut count) })?;
        Ok(count.max(0) as usize)
    }

    /// `hipRuntimeGetVersion`, e.g. 50221153 for ROCm 5.2 (`major * 10^7 + minor * 10^5 + patch`).
    pub(crate) fn version(op: &'static str) -> Result<i32> {
        let mut version: c_int = 0;
        // SAFETY: writes one int.
        check(op, unsafe { sys::hipRuntimeGetVersion(&mut version) })?;
        Ok(version)
    }
}

/// `hip*Device*`: devices by ordinal and the thread's current device.
pub(crate) mod device {
    use super::*;
    use crate::hip::sys::DevicePropBuffer;

    /// Makes device `ordinal` current on this thread.
    pub(crate) fn set(op: &'static str, ordinal: c_int) -> Result<()> {
        check(op, sys::hipSetDevice(ordinal))
    }

    /// The device current on this thread.
    pub(crate) fn get(op: &'static str) -> Result<c_int> {
        let mut ordinal: c_int = 0;
        // SAFETY: writes one int.
        check(op, unsafe { sys::hipGetDevice(&mut ordinal) })?;
        Ok(ordinal)
    }

    /// The properties of device `ordinal` (pre-6.0 layout, see `sys.rs`).
    pub(crate) fn properties(op: &'static str, ordinal: c_int) -> Result<Box<DevicePropBuffer>> {
        let mut buffer = DevicePropBuffer::zeroed();
        // SAFETY: `buffer.props` is a writable `hipDeviceProp_t` of the layout the plain
        // `hipGetDeviceProperties` symbol fills, with spare room after it.
        check(op, unsafe { sys::hipGetDeviceProperties(&mut buffer.props, ordinal) })?;
        Ok(buffer)
    }

    /// Total memory of device `ordinal` in bytes.
    pub(crate) fn total_mem(op: &'static str, ordinal: c_int) -> Result<usize> {
        let mut bytes = 0usize;
        // SAFETY: writes one size.
        check(op, unsafe { sys::hipDeviceTotalMem(&mut bytes, ordinal) })?;
        Ok(bytes)
    }

    /// Waits for all work of the current device.
    pub(crate) fn synchronize(op: &'static str) -> Result<()> {
        // SAFETY: no arguments.
        check(op, unsafe { sys::hipDeviceSynchronize() })
    }
}

/// `hipStream*`: streams and stream capture.
pub(crate) mod stream {
    use super::*;

    /// A new stream of the current device that does not synchronise with the null stream
    /// (`hipStreamNonBlocking`), so that no implicit dependency reaches into a capture.
    pub(crate) fn create(op: &'static str) -> Result<sys::hipStream_t> {
        let mut stream: sys::hipStream_t = ptr::null_mut();
        // SAFETY: writes one stream handle.
        check(op, unsafe { sys::hipStreamCreateWithFlags(&mut stream, sys::STREAM_NON_BLOCKING) })?;
        Ok(stream)
    }

    /// Destroys a stream; pending work still completes.
    ///
    /// # Safety
    /// `stream` must be live and not used afterwards.
    pub(crate) unsafe fn destroy(op: &'static str, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: the caller guarantees `stream` is live and unused afterwards.
        check(op, unsafe { sys::hipStreamDestroy(stream) })
    }

    /// Waits for all work enqueued on `stream`.
    ///
    /// # Safety
    /// `stream` must be live.
    pub(crate) unsafe fn synchronize(op: &'static str, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: the caller guarantees `stream` is live.
        check(op, unsafe { sys::hipStreamSynchronize(stream) })
    }

    /// Makes later work on `stream` wait for `event`.
    ///
    /// # Safety
    /// Both handles must be live.
    pub(crate) unsafe fn wait_event(op: &'static str, stream: sys::hipStream_t, event: sys::hipEvent_t) -> Result<()> {
        // SAFETY: the caller guarantees both handles are live.
        check(op, unsafe { sys::hipStreamWaitEvent(stream, event, 0) })
    }

    /// Starts capturing `stream` in `mode`.
    ///
    /// # Safety
    /// `stream` must be live.
    pub(crate) unsafe fn begin_capture(
        op: &'static str,
        stream: sys::hipStream_t,
        mode: sys::hipStreamCaptureMode,
    ) -> Result<()> {
        // SAFETY: the caller guarantees `stream` is live; `mode` is a valid enumerator.
        check(op, unsafe { sys::hipStreamBeginCapture(stream, mode) })
    }

    /// Ends the capture of `stream` and returns the captured graph, which the caller owns.
    ///
    /// # Safety
    /// `stream` must be live.
    pub(crate) unsafe fn end_capture(op: &'static str, stream: sys::hipStream_t) -> Result<sys::hipGraph_t> {
        let mut graph: sys::hipGraph_t = ptr::null_mut();
        // SAFETY: the caller guarantees `stream` is live; the runtime writes one graph handle.
        check(op, unsafe { sys::hipStreamEndCapture(stream, &mut graph) })?;
        Ok(graph)
    }

    /// The capture status of `stream` as HIP sees it (`sys::capture_status`).
    ///
    /// # Safety
    /// `stream` must be live.
    pub(crate) unsafe fn is_capturing(op: &'static str, stream: sys::hipStream_t) -> Result<c_int> {
        let mut status: c_int = sys::capture_status::NONE;
        // SAFETY: the caller guarantees `stream` is live; the runtime writes one enum value, which is read
        // as the int it is.
        check(op, unsafe { sys::hipStreamIsCapturing(stream, &mut status) })?;
        Ok(status)
    }
}

/// `hipMalloc`, `hipHostMalloc`, `hipMemcpyAsync`, `hipMemsetAsync`: memory and copies.
///
/// Copies and sets use `hipMemcpyAsync` / `hipMemsetAsync` with an explicit direction rather than the
/// `hipMemcpyHtoDAsync` family: those two are the calls HIP's stream capture has supported since graphs
/// appeared (ROCm 4.3), while capture of the driver-style variants came later.
pub(crate) mod memory {
    use super::*;
    use crate::hip::sys::hipMemcpyKind;

    /// `bytes` of device memory on the current device.
    pub(crate) fn alloc(op: &'static str, bytes: usize) -> Result<u64> {
        let mut ptr: *mut c_void = ptr::null_mut();
        // SAFETY: writes one device address; the runtime validates the size.
        check(op, unsafe { sys::hipMalloc(&mut ptr, bytes) })?;
        Ok(ptr as u64)
    }

    /// Frees device memory.
    ///
    /// # Safety
    /// `ptr` must come from [`alloc`], not be freed yet, and not be used afterwards.
    pub(crate) unsafe fn free(op: &'static str, ptr: u64) -> Result<()> {
        // SAFETY: the caller guarantees `ptr` is a live allocation.
        check(op, unsafe { sys::hipFree(ptr as *mut c_void) })
    }

    /// `bytes` of page-locked host memory (`hipHostMallocDefault`: mapped and portable, so every device
    /// can copy to and from it asynchronously).
    pub(crate) fn alloc_host(op: &'static str, bytes: usize) -> Result<*mut c_void> {
        let mut ptr: *mut c_void = ptr::null_mut();
        // SAFETY: writes one host pointer; the runtime validates the size.
        check(op, unsafe { sys::hipHostMalloc(&mut ptr, bytes, sys::HOST_MALLOC_DEFAULT) })?;
        Ok(ptr)
    }

    /// Frees page-locked host memory.
    ///
    /// # Safety
    /// `ptr` must come from [`alloc_host`], not be freed yet, and not be used afterwards.
    pub(crate) unsafe fn free_host(op: &'static str, ptr: *mut c_void) -> Result<()> {
        // SAFETY: the caller guarantees `ptr` is a live pinned allocation.
        check(op, unsafe { sys::hipHostFree(ptr) })
    }

    /// The current device's address of mapped page-locked host memory (`hipHostGetDevicePointer`).
    ///
    /// # Safety
    /// `ptr` must be a live allocation of [`alloc_host`].
    pub(crate) unsafe fn device_pointer_of_host(op: &'static str, ptr: *mut c_void) -> Result<u64> {
        let mut device: *mut c_void = ptr::null_mut();
        // SAFETY: writes one device pointer; `ptr` is live by the caller's contract.
        check(op, unsafe { sys::hipHostGetDevicePointer(&mut device, ptr, 0) })?;
        Ok(device as u64)
    }

    /// Enqueues a host-to-device copy.
    ///
    /// # Safety
    /// `src..src + bytes` must be readable host memory and `dst..dst + bytes` device memory, both until
    /// the copy has run (for pageable `src`, until the stream has passed the copy); `stream` must be live.
    pub(crate) unsafe fn copy_htod_async(
        op: &'static str,
        dst: u64,
        src: *const c_void,
        bytes: usize,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: the caller guarantees both ranges and the stream.
        check(op, unsafe {
            sys::hipMemcpyAsync(dst as *mut c_void, src, bytes, hipMemcpyKind::hipMemcpyHostToDevice, stream)
        })
    }

    /// Enqueues a device-to-host copy.
    ///
    /// # Safety
    /// `dst..dst + bytes` must be writable host memory, unaccessed by the host until the copy has run,
    /// and `src..src + bytes` device memory; `stream` must be live.
    pub(crate) unsafe fn copy_dtoh_async(
        op: &'static str,
        dst: *mut c_void,
        src: u64,
        bytes: usize,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: the caller guarantees both ranges and the stream.
        check(op, unsafe {
            sys::hipMemcpyAsync(dst, src as *const c_void, bytes, hipMemcpyKind::hipMemcpyDeviceToHost, stream)
        })
    }

    /// Enqueues a device-to-device copy.
    ///
    /// # Safety
    /// `stream` must be live. (Device ranges are device memory: a bad one faults the device, not the host.)
    pub(crate) unsafe fn copy_dtod_async(
        op: &'static str,
        dst: u64,
        src: u64,
        bytes: usize,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: the caller guarantees the stream; the direction is explicit, so the runtime does not
        // look the addresses up as host memory.
        check(op, unsafe {
            sys::hipMemcpyAsync(
                dst as *mut c_void,
                src as *const c_void,
                bytes,
                hipMemcpyKind::hipMemcpyDeviceToDevice,
                stream,
            )
        })
    }

    /// Enqueues setting `bytes` bytes at `dst` to `value`.
    ///
    /// # Safety
    /// `stream` must be live.
    pub(crate) unsafe fn memset_async(
        op: &'static str,
        dst: u64,
        value: u8,
        bytes: usize,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: the caller guarantees the stream.
        check(op, unsafe { sys::hipMemsetAsync(dst as *mut c_void, c_int::from(value), bytes, stream) })
    }

    /// Free and total memory of the current device.
    pub(crate) fn info(op: &'static str) -> Result<(usize, usize)> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: writes two sizes.
        check(op, unsafe { sys::hipMemGetInfo(&mut free, &mut total) })?;
        Ok((free, total))
    }
}

/// `hipEvent*`: events.
pub(crate) mod event {
    use super::*;

    /// A new event on the current device: timing enabled (`hipEventDefault`) when `timed`, else
    /// `hipEventDisableTiming`.
    pub(crate) fn create(op: &'static str, timed: bool) -> Result<sys::hipEvent_t> {
        let mut event: sys::hipEvent_t = ptr::null_mut();
        let flags = if timed { sys::EVENT_DEFAULT } else { sys::EVENT_DISABLE_TIMING };
        // SAFETY: writes one event handle.
        check(op, unsafe { sys::hipEventCreateWithFlags(&mut event, flags) })?;
        Ok(event)
    }

    /// Destroys an event.
    ///
    /// # Safety
    /// `event` must be live and not used afterwards.
    pub(crate) unsafe fn destroy(op: &'static str, event: sys::hipEvent_t) -> Result<()> {
        // SAFETY: the caller guarantees `event` is live and unused afterwards.
        check(op, unsafe { sys::hipEventDestroy(event) })
    }

    /// Records `event` after the work enqueued on `stream` so far.
    ///
    /// # Safety
    /// Both handles must be live.
    pub(crate) unsafe fn record(op: &'static str, event: sys::hipEvent_t, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: the caller guarantees both handles.
        check(op, unsafe { sys::hipEventRecord(event, stream) })
    }

    /// Whether the work before the last record is done (`hipErrorNotReady` is `false`).
    ///
    /// # Safety
    /// `event` must be live.
    pub(crate) unsafe fn query(op: &'static str, event: sys::hipEvent_t) -> Result<bool> {
        // SAFETY: the caller guarantees `event`.
        match unsafe { sys::hipEventQuery(event) } {
            code::SUCCESS => Ok(true),
            code::NOT_READY => Ok(false),
            other => Err(vendor(op, other)),
        }
    }

    /// Waits for the work before the last record.
    ///
    /// # Safety
    /// `event` must be live.
    pub(crate) unsafe fn synchronize(op: &'static str, event: sys::hipEvent_t) -> Result<()> {
        // SAFETY: the caller guarantees `event`.
        check(op, unsafe { sys::hipEventSynchronize(event) })
    }

    /// Milliseconds between two completed events.
    ///
    /// # Safety
    /// Both handles must be live.
    pub(crate) unsafe fn elapsed_ms(op: &'static str, start: sys::hipEvent_t, end: sys::hipEvent_t) -> Result<f32> {
        let mut ms = 0f32;
        // SAFETY: the caller guarantees both handles; writes one float.
        check(op, unsafe { sys::hipEventElapsedTime(&mut ms, start, end) })?;
        Ok(ms)
    }
}

/// `hipModule*`: loaded code.
pub(crate) mod module {
    use super::*;

    /// Loads an AMD code object (an ELF or a clang offload bundle) onto the current device.
    ///
    /// # Safety
    /// `image` must point to a complete, well-formed code object that stays readable for the duration of
    /// the call. `hipModuleLoadData` takes no length: it trusts the offsets inside the image, so a
    /// truncated image would be read past its end (`module.rs` checks the headers first).
    pub(crate) unsafe fn load_data(op: &'static str, image: *const c_void) -> Result<sys::hipModule_t> {
        let mut module: sys::hipModule_t = ptr::null_mut();
        // SAFETY: the caller guarantees the image; writes one module handle.
        check(op, unsafe { sys::hipModuleLoadData(&mut module, image) })?;
        Ok(module)
    }

    /// Unloads a module.
    ///
    /// # Safety
    /// `module` must be live, and no kernel of it may run or be launched afterwards.
    pub(crate) unsafe fn unload(op: &'static str, module: sys::hipModule_t) -> Result<()> {
        // SAFETY: the caller guarantees `module`.
        check(op, unsafe { sys::hipModuleUnload(module) })
    }
}

/// `hipModuleGetFunction`, `hipFuncGetAttribute`: kernels.
pub(crate) mod function {
    use super::*;

    /// The kernel `name` of `module`.
    ///
    /// # Safety
    /// `module` must be live.
    pub(crate) unsafe fn get(op: &'static str, module: sys::hipModule_t, name: &CStr) -> Result<sys::hipFunction_t> {
        let mut function: sys::hipFunction_t = ptr::null_mut();
        // SAFETY: the caller guarantees `module`; `name` is NUL-terminated.
        check(op, unsafe { sys::hipModuleGetFunction(&mut function, module, name.as_ptr()) })?;
        Ok(function)
    }

    /// One attribute of a kernel (`sys::func_attribute`).
    ///
    /// # Safety
    /// `function` must belong to a live module.
    pub(crate) unsafe fn attribute(op: &'static str, function: sys::hipFunction_t, attribute: c_int) -> Result<i32> {
        let mut value: c_int = 0;
        // SAFETY: the caller guarantees `function`; writes one int.
        check(op, unsafe { sys::hipFuncGetAttribute(&mut value, attribute, function) })?;
        Ok(value)
    }
}

/// `hipModuleLaunchKernel`.
pub(crate) mod launch {
    use super::*;

    /// Enqueues a kernel.
    ///
    /// # Safety
    /// `function` must belong to a live module and `stream` be live; `params` must hold one pointer per
    /// kernel parameter, each to a value of that parameter's size, valid for the duration of the call
    /// (HIP copies them, also into the kernel node when the stream is capturing); whatever the kernel
    /// does with its arguments must be sound.
    #[inline]
    pub(crate) unsafe fn kernel(
        op: &'static str,
        function: sys::hipFunction_t,
        grid: Dim3,
        block: Dim3,
        shared_mem_bytes: u32,
        stream: sys::hipStream_t,
        params: *mut *mut c_void,
    ) -> Result<()> {
        // SAFETY: the caller guarantees every handle and argument; `extra` is null.
        check(op, unsafe {
            sys::hipModuleLaunchKernel(
                function,
                grid.x,
                grid.y,
                grid.z,
                block.x,
                block.y,
                block.z,
                shared_mem_bytes,
                stream,
                params,
                ptr::null_mut(),
            )
        })
    }
}

/// `hipGraph*`: captured and executable graphs.
pub(crate) mod graph {
    use super::*;

    /// The nodes of a graph, in the order HIP created them (for a capture on one stream: the order
    /// the work was enqueued).
    ///
    /// # Safety
    /// `graph` must be live and not used by another thread during the call.
    pub(crate) unsafe fn nodes(op: &'static str, graph: sys::hipGraph_t) -> Result<Vec<sys::hipGraphNode_t>> {
        let mut count = 0usize;
        // SAFETY: the caller guarantees `graph`; with a null node array the runtime only writes the count.
        check(op, unsafe { sys::hipGraphGetNodes(graph, ptr::null_mut(), &mut count) })?;
        let mut nodes = vec![ptr::null_mut(); count];
        if count > 0 {
            let mut filled = count;
            // SAFETY: `nodes` has room for `filled` handles; the runtime writes at most that many and the
            // number it wrote.
            check(op, unsafe { sys::hipGraphGetNodes(graph, nodes.as_mut_ptr(), &mut filled) })?;
            nodes.truncate(filled.min(count));
        }
        Ok(nodes)
    }

    /// A node's `hipGraphNodeType`, as the plain number this runtime uses (numbering differs between
    /// ROCm releases: compare, never interpret).
    ///
    /// # Safety
    /// `node` must belong to a live graph not used by another thread during the call.
    pub(crate) unsafe fn node_type(op: &'static str, node: sys::hipGraphNode_t) -> Result<c_int> {
        let mut kind: c_int = -1;
        // SAFETY: the caller guarantees `node`; the runtime writes one enum value, read as the int it is.
        check(op, unsafe { sys::hipGraphNodeGetType(node, &mut kind) })?;
        Ok(kind)
    }

    /// Instantiates a graph (no flags).
    ///
    /// # Safety
    /// `graph` must be live and not used by another thread during the call.
    pub(crate) unsafe fn instantiate(op: &'static str, graph: sys::hipGraph_t) -> Result<sys::hipGraphExec_t> {
        let mut exec: sys::hipGraphExec_t = ptr::null_mut();
        // SAFETY: the caller guarantees `graph`; writes one executable-graph handle.
        check(op, unsafe { sys::hipGraphInstantiateWithFlags(&mut exec, graph, 0) })?;
        Ok(exec)
    }

    /// Enqueues one replay of `exec` on `stream`.
    ///
    /// # Safety
    /// Both handles must be live; `exec` must not be launched or updated concurrently from another
    /// thread; every address baked into it must be sound to use.
    #[inline]
    pub(crate) unsafe fn launch(op: &'static str, exec: sys::hipGraphExec_t, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: the caller guarantees both handles and the addresses.
        check(op, unsafe { sys::hipGraphLaunch(exec, stream) })
    }

    /// Updates `exec` in place from `graph` (`hipGraphExecUpdate`). `Ok(Err(code))` is a refusal
    /// (`hipErrorGraphExecUpdateFailure`) with HIP's `hipGraphExecUpdateResult` code.
    ///
    /// Unlike CUDA's, HIP's update is not atomic: it walks the nodes in order and sets each node's
    /// parameters as it goes, so a refusal at node k leaves nodes 0..k updated. The caller must restore
    /// the executable graph after a refusal (see `graph.rs`).
    ///
    /// # Safety
    /// Both handles must be live, and `exec` must not be launched or updated concurrently.
    pub(crate) unsafe fn exec_update(
        op: &'static str,
        exec: sys::hipGraphExec_t,
        graph: sys::hipGraph_t,
    ) -> Result<std::result::Result<(), c_int>> {
        let mut error_node: sys::hipGraphNode_t = ptr::null_mut();
        let mut result: c_int = sys::update_result::SUCCESS;
        // SAFETY: the caller guarantees both handles; the runtime writes one node handle and one enum
        // value, read as the int it is.
        let status = unsafe { sys::hipGraphExecUpdate(exec, graph, &mut error_node, &mut result) };
        match status {
            code::SUCCESS => Ok(Ok(())),
            code::GRAPH_EXEC_UPDATE_FAILURE => Ok(Err(result)),
            other => Err(vendor(op, other)),
        }
    }

    /// HIP's name of a `hipGraphExecUpdateResult` code, with what it means.
    pub(crate) fn update_result_text(code: c_int) -> String {
        let text = match code {
            1 => "hipGraphExecUpdateError: the update failed for an unexpected reason",
            2 => "hipGraphExecUpdateErrorTopologyChanged: the graph topology changed",
            3 => "hipGraphExecUpdateErrorNodeTypeChanged: a node changed type",
            4 => "hipGraphExecUpdateErrorFunctionChanged: a kernel node changed function",
            5 => "hipGraphExecUpdateErrorParametersChanged: a node's parameters changed in an unsupported way",
            6 => "hipGraphExecUpdateErrorNotSupported: something about a node is not supported by update",
            7 => "hipGraphExecUpdateErrorUnsupportedFunctionChange: the kernel changed in an unsupported way",
            other => return format!("hipGraphExecUpdateResult {other}"),
        };
        text.to_string()
    }

    /// Sets the parameters of one kernel node of `exec` (`hipGraphExecKernelNodeSetParams`).
    ///
    /// # Safety
    /// `exec` must be live and not launched or updated concurrently; `node` must be a kernel node of the
    /// graph `exec` was instantiated from, and that graph must be live; `params.kernelParams` must hold
    /// one pointer per kernel parameter, each to a value of that parameter's size, valid for the call
    /// (HIP copies the values); `params.func` must be a function of a live module.
    pub(crate) unsafe fn exec_kernel_node_set_params(
        op: &'static str,
        exec: sys::hipGraphExec_t,
        node: sys::hipGraphNode_t,
        params: &sys::hipKernelNodeParams,
    ) -> Result<()> {
        // SAFETY: the caller guarantees the handles and the parameter block.
        check(op, unsafe { sys::hipGraphExecKernelNodeSetParams(exec, node, params) })
    }

    /// Destroys an executable graph.
    ///
    /// # Safety
    /// `exec` must be live and not used afterwards.
    pub(crate) unsafe fn exec_destroy(op: &'static str, exec: sys::hipGraphExec_t) -> Result<()> {
        // SAFETY: the caller guarantees `exec`.
        check(op, unsafe { sys::hipGraphExecDestroy(exec) })
    }

    /// Destroys a graph.
    ///
    /// # Safety
    /// `graph` must be live and not used afterwards.
    pub(crate) unsafe fn destroy(op: &'static str, graph: sys::hipGraph_t) -> Result<()> {
        // SAFETY: the caller guarantees `graph`.
        check(op, unsafe { sys::hipGraphDestroy(graph) })
    }
}

/// `hiprtc*`: runtime compilation, through the table [`library::hiprtc`] loaded.
pub(crate) mod hiprtc {
    use super::*;
    use crate::hip::sys::{HIPRTC_ERROR_COMPILATION, HIPRTC_SUCCESS, Hiprtc, HiprtcStatus};

    pub(crate) use crate::hip::sys::hiprtcProgram as Program;

    /// hipRTC's name of a result code (`HIPRTC_ERROR_COMPILATION`).
    fn result_name(api: &Hiprtc, status: HiprtcStatus) -> String {
        if let Some(name) = sys::hiprtc_status_name(status) {
            return name.to_string();
        }
        // SAFETY: `hiprtcGetErrorString` returns a pointer to a static NUL-terminated string (or null).
        let text = unsafe { (api.get_error_string)(status) };
        if text.is_null() {
            format!("hiprtcResult({status})")
        } else {
            // SAFETY: non-null, NUL-terminated, static.
            unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
        }
    }

    /// [`Error::Vendor`] for a failed hipRTC call.
    #[cold]
    pub(crate) fn vendor(api: &Hiprtc, op: &'static str, status: HiprtcStatus) -> Error {
        let name = result_name(api, status);
        Error::Vendor {
            backend: BackendKind::Hip,
            op,
            message: format!("hipRTC ({}) returned {name}", api.library_name),
            name,
            code: i64::from(status),
        }
    }

    fn check(api: &Hiprtc, op: &'static str, status: HiprtcStatus) -> Result<()> {
        if status == HIPRTC_SUCCESS { Ok(()) } else { Err(vendor(api, op, status)) }
    }

    /// hipRTC's version.
    pub(crate) fn version(api: &Hiprtc, op: &'static str) -> Result<(i32, i32)> {
        let (mut major, mut minor): (c_int, c_int) = (0, 0);
        // SAFETY: writes two ints.
        check(api, op, unsafe { (api.version)(&mut major, &mut minor) })?;
        Ok((major, minor))
    }

    /// A new program from one source with no headers; the caller must [`destroy`] it.
    pub(crate) fn create(api: &Hiprtc, op: &'static str, source: &CStr, name: &CStr) -> Result<Program> {
        let mut program: Program = ptr::null_mut();
        // SAFETY: both strings are NUL-terminated; zero headers, so the header arrays may be null.
        check(api, op, unsafe {
            (api.create_program)(&mut program, source.as_ptr(), name.as_ptr(), 0, ptr::null(), ptr::null())
        })?;
        Ok(program)
    }

    /// Compiles. `Err` with `HIPRTC_ERROR_COMPILATION` means the source did not compile: read [`log`].
    ///
    /// # Safety
    /// `program` must be live; every option pointer must name a NUL-terminated string that outlives the call.
    pub(crate) unsafe fn compile(
        api: &Hiprtc,
        op: &'static str,
        program: Program,
        options: &[*const c_char],
    ) -> Result<()> {
        let count = c_int::try_from(options.len()).map_err(|_| vendor(api, op, sys::HIPRTC_ERROR_INVALID_INPUT))?;
        // SAFETY: the caller guarantees the program and the option strings.
        check(api, op, unsafe { (api.compile_program)(program, count, options.as_ptr()) })
    }

    /// Whether `error` is hipRTC's "the source did not compile".
    pub(crate) fn is_compilation_error(error: &Error) -> bool {
        matches!(error, Error::Vendor { backend: BackendKind::Hip, code, name, .. }
            if *code == i64::from(HIPRTC_ERROR_COMPILATION) && name.starts_with("HIPRTC"))
    }

    /// The compile log.
    ///
    /// # Safety
    /// `program` must be live.
    pub(crate) unsafe fn log(api: &Hiprtc, op: &'static str, program: Program) -> Result<String> {
        let mut size = 0usize;
        // SAFETY: the caller guarantees the program; writes one size.
        check(api, op, unsafe { (api.get_program_log_size)(program, &mut size) })?;
        if size == 0 {
            return Ok(String::new());
        }
        let mut buf = vec![0u8; size + 1];
        // SAFETY: `buf` holds more than `size` bytes (the size includes the NUL on every ROCm release;
        // the extra byte covers one that would not count it).
        check(api, op, unsafe { (api.get_program_log)(program, buf.as_mut_ptr().cast()) })?;
        Ok(String::from_utf8_lossy(&buf).trim_end_matches('\0').trim_end().to_string())
    }

    /// The compiled code object.
    ///
    /// # Safety
    /// `program` must be live and compiled.
    pub(crate) unsafe fn code(api: &Hiprtc, op: &'static str, program: Program) -> Result<Vec<u8>> {
        let mut size = 0usize;
        // SAFETY: the caller guarantees the program; writes one size.
        check(api, op, unsafe { (api.get_code_size)(program, &mut size) })?;
        let mut buf = vec![0u8; size];
        if size > 0 {
            // SAFETY: `buf` holds `size` bytes, which is what the runtime writes.
            check(api, op, unsafe { (api.get_code)(program, buf.as_mut_ptr().cast()) })?;
        }
        Ok(buf)
    }

    /// Destroys a program.
    ///
    /// # Safety
    /// `program` must be live and not used afterwards.
    pub(crate) unsafe fn destroy(api: &Hiprtc, op: &'static str, program: Program) -> Result<()> {
        let mut program = program;
        // SAFETY: the caller guarantees the program.
        check(api, op, unsafe { (api.destroy_program)(&mut program) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendor_error_carries_hips_name_code_and_op() {
        let e = vendor("device.alloc", code::OUT_OF_MEMORY);
        match &e {
            Error::Vendor { backend, op, name, code, message } => {
                assert_eq!(*backend, BackendKind::Hip);
                assert_eq!(*op, "device.alloc");
                assert_eq!(name, "hipErrorOutOfMemory");
                assert_eq!(*code, 2);
                assert!(!message.is_empty());
            }
            other => panic!("not a vendor error: {other:?}"),
        }
        use crate::gpu::{Driver, DriverFault, ErrorClass};
        assert_eq!(crate::hip::HipDriver::classify(&e), ErrorClass::OutOfMemory);
        let other = vendor("hip.enumerate", code::NO_DEVICE);
        assert_eq!(crate::hip::HipDriver::classify(&other), ErrorClass::Fault(DriverFault::Other));
        let text = e.to_string();
        assert!(text.starts_with("device.alloc failed on hip: hipErrorOutOfMemory (2)"), "{text}");
    }

    #[test]
    fn error_names_come_from_the_runtime() {
        assert_eq!(error_name(code::NO_DEVICE), "hipErrorNoDevice");
        assert_eq!(error_name(code::STREAM_CAPTURE_UNSUPPORTED), "hipErrorStreamCaptureUnsupported");
        assert_eq!(error_name(code::GRAPH_EXEC_UPDATE_FAILURE), "hipErrorGraphExecUpdateFailure");
        assert_eq!(error_name(code::NOT_READY), "hipErrorNotReady");
        // A code no runtime knows keeps its number instead of becoming `hipErrorUnknown`.
        assert_eq!(error_name(123_456), "hipError_t(123456)");
        assert_eq!(error_name(sys::hipError_t::hipErrorUnknown as HipStatus), "hipErrorUnknown");
        assert!(check("x", code::SUCCESS).is_ok());
    }

    #[test]
    fn update_results_are_named() {
        assert!(graph::update_result_text(2).contains("TopologyChanged"));
        assert!(graph::update_result_text(4).contains("FunctionChanged"));
        assert_eq!(graph::update_result_text(99), "hipGraphExecUpdateResult 99");
    }
}
