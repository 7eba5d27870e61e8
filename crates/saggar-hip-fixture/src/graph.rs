//! The exported HIP entry points for graphs and executable graphs, and the AMD-only entry points the
//! fixture refuses loudly, each in the order `runtime.rs` describes.

use std::ffi::{c_int, c_uint, c_void};
use std::mem::MaybeUninit;
use std::ptr;

use cudarc::driver::sys::{self};

use crate::abi::{
    HIP_GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH, HipKernelNodeParams, HipStatus, code, node_type, update_result,
};
use crate::driver::{HipResult, cu, enter};
use crate::errors::not_supported;
use crate::runtime::{ffi, out};

/// `hipGraphGetNodes` → `cuGraphGetNodes` (same contract: a null array asks for the count).
///
/// # Safety
/// `graph` must be live; `nodes` null or room for `*count` handles; `count` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphGetNodes(
    graph: sys::CUgraph,
    nodes: *mut sys::CUgraphNode,
    count: *mut usize,
) -> HipStatus {
    ffi("hipGraphGetNodes", || {
        enter()?;
        let count = out(count)?;
        // SAFETY: the caller guarantees `graph` and the array; `count` is non-null and writable.
        cu("cuGraphGetNodes", unsafe { sys::cuGraphGetNodes(graph, nodes, count) })
    })
}

/// A CUDA node type as `hipGraphNodeType` (hip-runtime-sys 0.1.2's numbering), by name. CUDA types HIP
/// has no counterpart for are not supported.
pub(crate) fn hip_node_type(raw: u32) -> HipResult<c_int> {
    use sys::CUgraphNodeType::*;
    Ok(match raw {
        r if r == CU_GRAPH_NODE_TYPE_KERNEL as u32 => node_type::KERNEL,
        r if r == CU_GRAPH_NODE_TYPE_MEMCPY as u32 => node_type::MEMCPY,
        r if r == CU_GRAPH_NODE_TYPE_MEMSET as u32 => node_type::MEMSET,
        r if r == CU_GRAPH_NODE_TYPE_HOST as u32 => node_type::HOST,
        r if r == CU_GRAPH_NODE_TYPE_GRAPH as u32 => node_type::GRAPH,
        r if r == CU_GRAPH_NODE_TYPE_EMPTY as u32 => node_type::EMPTY,
        r if r == CU_GRAPH_NODE_TYPE_WAIT_EVENT as u32 => node_type::WAIT_EVENT,
        r if r == CU_GRAPH_NODE_TYPE_EVENT_RECORD as u32 => node_type::EVENT_RECORD,
        r if r == CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL as u32 => node_type::EXT_SEMAPHORE_SIGNAL,
        r if r == CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT as u32 => node_type::EXT_SEMAPHORE_WAIT,
        _ => return Err(not_supported("hipGraphNodeGetType on a CUDA node type HIP 5.x has no counterpart for")),
    })
}

/// `hipGraphNodeGetType` → `cuGraphNodeGetType`, the type mapped by name ([`hip_node_type`]).
///
/// # Safety
/// `node` must belong to a live graph; `kind` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphNodeGetType(node: sys::CUgraphNode, kind: *mut c_int) -> HipStatus {
    ffi("hipGraphNodeGetType", || {
        enter()?;
        let out = out(kind)?;
        let mut raw: u32 = u32::MAX;
        // SAFETY: the caller guarantees `node`; `raw` is a writable 32-bit slot, the size of the C enum the
        // driver writes (read as the integer it is).
        cu("cuGraphNodeGetType", unsafe {
            sys::cuGraphNodeGetType(node, (&mut raw as *mut u32).cast::<sys::CUgraphNodeType>())
        })?;
        let hip = hip_node_type(raw)?;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { out.write(hip) };
        Ok(())
    })
}

/// `hipGraphInstantiateWithFlags` → `cuGraphInstantiateWithFlags`. Flags 0 and
/// `hipGraphInstantiateFlagAutoFreeOnLaunch` (CUDA's flag 1 of the same name) are mapped; others are not
/// supported.
///
/// # Safety
/// `graph` must be live; `exec` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphInstantiateWithFlags(
    exec: *mut sys::CUgraphExec,
    graph: sys::CUgraph,
    flags: u64,
) -> HipStatus {
    ffi("hipGraphInstantiateWithFlags", || {
        if flags & !HIP_GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH != 0 {
            return Err(not_supported("hipGraphInstantiateWithFlags with flags other than AutoFreeOnLaunch"));
        }
        enter()?;
        let out = out(exec)?;
        // SAFETY: the caller guarantees `graph`; `out` is non-null and writable.
        cu("cuGraphInstantiateWithFlags", unsafe { sys::cuGraphInstantiateWithFlags(out, graph, flags) })
    })
}

/// `hipGraphLaunch` → `cuGraphLaunch`.
///
/// # Safety
/// Both handles must be live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphLaunch(exec: sys::CUgraphExec, stream: sys::CUstream) -> HipStatus {
    ffi("hipGraphLaunch", || {
        enter()?;
        // SAFETY: the caller guarantees both handles.
        cu("cuGraphLaunch", unsafe { sys::cuGraphLaunch(exec, stream) })
    })
}

/// A `CUgraphExecUpdateResult` as `hipGraphExecUpdateResult`, by name. CUDA 12's
/// `ATTRIBUTES_CHANGED`, which HIP does not have, is `hipGraphExecUpdateError` ("failed for an unexpected
/// reason"), the closest HIP says.
pub(crate) fn hip_update_result(raw: u32) -> c_int {
    use sys::CUgraphExecUpdateResult::*;
    match raw {
        r if r == CU_GRAPH_EXEC_UPDATE_SUCCESS as u32 => update_result::SUCCESS,
        r if r == CU_GRAPH_EXEC_UPDATE_ERROR as u32 => update_result::ERROR,
        r if r == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED as u32 => update_result::TOPOLOGY_CHANGED,
        r if r == CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED as u32 => update_result::NODE_TYPE_CHANGED,
        r if r == CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED as u32 => update_result::FUNCTION_CHANGED,
        r if r == CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED as u32 => update_result::PARAMETERS_CHANGED,
        r if r == CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED as u32 => update_result::NOT_SUPPORTED,
        r if r == CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE as u32 => {
            update_result::UNSUPPORTED_FUNCTION_CHANGE
        }
        _ => update_result::ERROR,
    }
}

/// `hipGraphExecUpdate` → `cuGraphExecUpdate_v2`: the result info's node and result are written to HIP's
/// two out-parameters, the result mapped by name ([`hip_update_result`]); a refusal is
/// `hipErrorGraphExecUpdateFailure`. (CUDA's update is atomic, HIP's is not: see the README.)
///
/// # Safety
/// Both handles must be live; `error_node` and `result` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphExecUpdate(
    exec: sys::CUgraphExec,
    graph: sys::CUgraph,
    error_node: *mut sys::CUgraphNode,
    result: *mut c_int,
) -> HipStatus {
    ffi("hipGraphExecUpdate", || {
        enter()?;
        let (error_node, result) = (out(error_node)?, out(result)?);
        let mut info = MaybeUninit::<sys::CUgraphExecUpdateResultInfo>::zeroed();
        // SAFETY: the caller guarantees both handles; `info` is a writable result-info struct.
        let status = unsafe { sys::cuGraphExecUpdate_v2(exec, graph, info.as_mut_ptr()) };
        let info = info.as_ptr();
        // SAFETY: `info` was zero-initialised and then written by the driver; the result field is read as
        // the 32-bit integer the driver wrote (never as a Rust enum), the node as the pointer it is.
        let (raw, node) =
            unsafe { (ptr::addr_of!((*info).result).cast::<u32>().read(), ptr::addr_of!((*info).errorNode).read()) };
        // SAFETY: both out-pointers are non-null and writable by the caller's contract.
        unsafe {
            error_node.write(node);
            result.write(hip_update_result(raw));
        }
        cu("cuGraphExecUpdate_v2", status)
    })
}

/// `hipGraphExecKernelNodeSetParams` → `cuGraphExecKernelNodeSetParams_v2`, `hipKernelNodeParams`
/// copied field by field into `CUDA_KERNEL_NODE_PARAMS` (`func` is the `CUfunction`; `kern` and `ctx`
/// stay null, which CUDA reads as "use `func`"). `extra` is not supported (see [`hipModuleLaunchKernel`]).
///
/// # Safety
/// `exec` must be live, `node` a kernel node of the graph it was instantiated from, `params` a readable
/// `hipKernelNodeParams` whose function and argument pointers are valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphExecKernelNodeSetParams(
    exec: sys::CUgraphExec,
    node: sys::CUgraphNode,
    params: *const HipKernelNodeParams,
) -> HipStatus {
    ffi("hipGraphExecKernelNodeSetParams", || {
        if params.is_null() {
            return Err(code::INVALID_VALUE);
        }
        // SAFETY: non-null and readable by the caller's contract.
        let p = unsafe { params.read() };
        if !p.extra.is_null() {
            return Err(not_supported("hipGraphExecKernelNodeSetParams with `extra` (HIP_LAUNCH_PARAM_*) arguments"));
        }
        enter()?;
        // SAFETY: every field of the CUDA struct is an integer or a raw pointer, for which zero is valid.
        let mut cuda: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
        cuda.func = p.func.cast();
        cuda.gridDimX = p.gridDim.x;
        cuda.gridDimY = p.gridDim.y;
        cuda.gridDimZ = p.gridDim.z;
        cuda.blockDimX = p.blockDim.x;
        cuda.blockDimY = p.blockDim.y;
        cuda.blockDimZ = p.blockDim.z;
        cuda.sharedMemBytes = p.sharedMemBytes;
        cuda.kernelParams = p.kernelParams;
        // SAFETY: the caller guarantees the handles, the function and the argument pointers; `cuda` is a
        // complete parameter block that outlives the call (CUDA copies the argument values).
        cu("cuGraphExecKernelNodeSetParams_v2", unsafe { sys::cuGraphExecKernelNodeSetParams_v2(exec, node, &cuda) })
    })
}

/// `hipGraphExecDestroy` → `cuGraphExecDestroy`.
///
/// # Safety
/// `exec` must be live and unused afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphExecDestroy(exec: sys::CUgraphExec) -> HipStatus {
    ffi("hipGraphExecDestroy", || {
        enter()?;
        // SAFETY: the caller guarantees `exec`.
        cu("cuGraphExecDestroy", unsafe { sys::cuGraphExecDestroy(exec) })
    })
}

/// `hipGraphDestroy` → `cuGraphDestroy`.
///
/// # Safety
/// `graph` must be live and unused afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphDestroy(graph: sys::CUgraph) -> HipStatus {
    ffi("hipGraphDestroy", || {
        enter()?;
        // SAFETY: the caller guarantees `graph`.
        cu("cuGraphDestroy", unsafe { sys::cuGraphDestroy(graph) })
    })
}

// ---------------------------------------------------------------------------------------------------
// AMD-only entry points: exported so that a backend calling them gets a loud hipErrorNotSupported
// rather than a silent success or a failure to load.
// ---------------------------------------------------------------------------------------------------

/// `hipExtStreamCreateWithCUMask` (AMD compute-unit masks; CUDA has none): not supported.
///
/// # Safety
/// None needed: the arguments are not read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipExtStreamCreateWithCUMask(
    _stream: *mut sys::CUstream,
    _cu_mask_size: u32,
    _cu_mask: *const u32,
) -> HipStatus {
    ffi("hipExtStreamCreateWithCUMask", || {
        Err(not_supported("hipExtStreamCreateWithCUMask (AMD compute-unit masks have no CUDA counterpart)"))
    })
}

/// `hipExtMallocWithFlags` (AMD fine-grained / uncached memory; CUDA has none): not supported.
///
/// # Safety
/// None needed: the arguments are not read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipExtMallocWithFlags(_ptr: *mut *mut c_void, _bytes: usize, _flags: c_uint) -> HipStatus {
    ffi("hipExtMallocWithFlags", || {
        Err(not_supported("hipExtMallocWithFlags (AMD fine-grained memory has no CUDA counterpart)"))
    })
}
