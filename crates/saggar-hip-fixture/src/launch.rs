//! The exported HIP entry points for modules and kernel launches, each over the CUDA driver call of
//! the same meaning, in the order `runtime.rs` describes.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::ptr;

use cudarc::driver::sys::{self};

use crate::abi::{HIP_FUNC_ATTRIBUTE_MAX, HipStatus, code};
use crate::driver::{cu, enter};
use crate::envelope::{self, Image};
use crate::errors::{not_supported, say_once};
use crate::runtime::{ffi, out};

/// `hipModuleLoadData` → `cuModuleLoadData` with the PTX inside a fixture envelope (what the fixture's
/// hipRTC produced; see `envelope`). A real AMD code object is `hipErrorNoBinaryForGpu` (it is a valid
/// image, for another GPU); anything else is `hipErrorInvalidImage`. Both are said on standard error.
///
/// # Safety
/// `image` must point to a whole image: every range its headers name lies inside it (saggar's HIP backend
/// checks exactly this before the call); `module` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipModuleLoadData(module: *mut sys::CUmodule, image: *const c_void) -> HipStatus {
    ffi("hipModuleLoadData", || {
        enter()?;
        let out = out(module)?;
        if image.is_null() {
            return Err(code::INVALID_VALUE);
        }
        let base = image.cast::<u8>();
        let read = |range: std::ops::Range<usize>| {
            let mut bytes = vec![0u8; range.len()];
            // SAFETY: `classify` reads only the header and the ranges the image's own headers name, which
            // lie inside the image by the caller's contract.
            unsafe { ptr::copy_nonoverlapping(base.add(range.start), bytes.as_mut_ptr(), range.len()) };
            bytes
        };
        match envelope::classify(&read) {
            Image::Envelope { ptx } => {
                // SAFETY: `ptx` lies inside the image and ends with a NUL (checked by `classify`), which is
                // what `cuModuleLoadData` reads for PTX; a context is current; `out` is writable.
                cu("cuModuleLoadData", unsafe { sys::cuModuleLoadData(out, base.add(ptx.start).cast()) })
            }
            Image::Amd => {
                say_once("amd image".into(), || {
                    "hipModuleLoadData was given a real AMD GPU code object, which cannot run on an NVIDIA GPU; \
                     returning hipErrorNoBinaryForGpu"
                        .into()
                });
                Err(code::NO_BINARY_FOR_GPU)
            }
            Image::Invalid(why) => {
                say_once(format!("invalid image: {why}"), || format!("hipModuleLoadData: {why}; hipErrorInvalidImage"));
                Err(code::INVALID_IMAGE)
            }
        }
    })
}

/// `hipModuleUnload` → `cuModuleUnload`.
///
/// # Safety
/// `module` must be loaded.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipModuleUnload(module: sys::CUmodule) -> HipStatus {
    ffi("hipModuleUnload", || {
        enter()?;
        // SAFETY: the caller guarantees `module`.
        cu("cuModuleUnload", unsafe { sys::cuModuleUnload(module) })
    })
}

/// `hipModuleGetFunction` → `cuModuleGetFunction` (a missing kernel is `hipErrorNotFound`).
///
/// # Safety
/// `module` must be loaded, `name` NUL-terminated, `function` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipModuleGetFunction(
    function: *mut sys::CUfunction,
    module: sys::CUmodule,
    name: *const c_char,
) -> HipStatus {
    ffi("hipModuleGetFunction", || {
        enter()?;
        let out = out(function)?;
        if name.is_null() {
            return Err(code::INVALID_VALUE);
        }
        // SAFETY: the caller guarantees `module` and `name`; `out` is non-null and writable.
        cu("cuModuleGetFunction", unsafe { sys::cuModuleGetFunction(out, module, name) })
    })
}

/// `hipFuncGetAttribute` → `cuFuncGetAttribute`: `hipFunction_attribute` 0..=9 are CUDA's
/// `CU_FUNC_ATTRIBUTE_*` of the same names and numbers; others are `hipErrorInvalidValue`, as in HIP.
///
/// # Safety
/// `function` must belong to a loaded module; `value` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipFuncGetAttribute(
    value: *mut c_int,
    attribute: c_int,
    function: sys::CUfunction,
) -> HipStatus {
    ffi("hipFuncGetAttribute", || {
        use sys::CUfunction_attribute::*;
        let attribute = match attribute {
            0 => CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
            1 => CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
            2 => CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES,
            3 => CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
            4 => CU_FUNC_ATTRIBUTE_NUM_REGS,
            5 => CU_FUNC_ATTRIBUTE_PTX_VERSION,
            6 => CU_FUNC_ATTRIBUTE_BINARY_VERSION,
            7 => CU_FUNC_ATTRIBUTE_CACHE_MODE_CA,
            8 => CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            9 => CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
            _ => return Err(code::INVALID_VALUE),
        };
        debug_assert!((attribute as c_int) < HIP_FUNC_ATTRIBUTE_MAX);
        enter()?;
        let out = out(value)?;
        // SAFETY: the caller guarantees `function`; `out` is non-null and writable.
        cu("cuFuncGetAttribute", unsafe { sys::cuFuncGetAttribute(out, attribute, function) })
    })
}

/// `hipModuleLaunchKernel` → `cuLaunchKernel` (same parameters in the same order). `extra` launch
/// parameters are not supported: HIP's `HIP_LAUNCH_PARAM_END` is 3 where CUDA's is 0, and saggar passes
/// arguments through `kernelParams`.
///
/// # Safety
/// As `cuLaunchKernel`: a live function and stream, one pointer per kernel parameter.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipModuleLaunchKernel(
    function: sys::CUfunction,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_mem_bytes: c_uint,
    stream: sys::CUstream,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> HipStatus {
    ffi("hipModuleLaunchKernel", || {
        if !extra.is_null() {
            return Err(not_supported("hipModuleLaunchKernel with `extra` (HIP_LAUNCH_PARAM_*) arguments"));
        }
        enter()?;
        // SAFETY: the caller guarantees the function, the stream and the parameter array.
        cu("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                function,
                grid_x,
                grid_y,
                grid_z,
                block_x,
                block_y,
                block_z,
                shared_mem_bytes,
                stream,
                kernel_params,
                ptr::null_mut(),
            )
        })
    })
}

// ---------------------------------------------------------------------------------------------------
