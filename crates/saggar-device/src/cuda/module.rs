//! Modules and kernels of the CUDA backend: `cuModuleLoadDataEx` from PTX or a cubin, kernel handles
//! from `cuModuleGetFunction`, each with the signature its code object declares and the limits the
//! driver reports for it, so every launch is checked before it reaches the driver.

use std::ffi::{CString, c_void};
use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::sys::CUfunction_attribute as FuncAttr;

use crate::api::{Kernel, Module};
use crate::code::{CodeFormat, CodeObject};
use crate::cuda::CudaBackend;
use crate::cuda::device::{self, DeviceShared, SendHandle};
use crate::cuda::result::{self, CUresult, has_code};
use crate::error::{Error, Result};
use crate::types::{KernelSignature, LaunchConfig};

/// A loaded module, shared by its kernels and by every graph that launched one of them.
pub(crate) struct ModuleShared {
    device: Arc<DeviceShared>,
    raw: sys::CUmodule,
    format: CodeFormat,
    signatures: Vec<Arc<KernelSignature>>,
}

// SAFETY: a `CUmodule` is an opaque handle the driver accepts from any thread; the rest is immutable.
unsafe impl Send for ModuleShared {}
// SAFETY: as above.
unsafe impl Sync for ModuleShared {}

impl Drop for ModuleShared {
    fn drop(&mut self) {
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if !raw.is_null() {
            let raw = SendHandle::new(raw);
            device::release(&self.device, "module.drop", move || {
                // SAFETY: `raw` was swapped out, so it is unloaded once. No kernel of it can be launched any
                // more: kernels and graphs hold this module by `Arc`, so this runs after the last of them is
                // gone (work they enqueued may still run, which the launch contracts leave to the caller).
                unsafe { result::module::unload("module.drop", raw.into_inner()) }
            });
        }
    }
}

impl std::fmt::Debug for ModuleShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaModule")
            .field("device", &self.device.ordinal())
            .field("format", &self.format)
            .field("kernels", &self.signatures.iter().map(|s| s.name.as_str()).collect::<Vec<_>>())
            .finish()
    }
}

/// A loaded module of the CUDA backend (`cuModuleLoadDataEx`), unloaded when the module, its kernels and
/// every graph that launched one of its kernels are gone.
///
/// # Thread safety
/// `Send + Sync`: a module is immutable once loaded; kernels may be looked up from any thread.
#[derive(Debug)]
pub struct CudaModule {
    shared: Arc<ModuleShared>,
}

impl CudaModule {
    /// Loads `code`; the device's context is current (the caller entered it).
    pub(crate) fn load(device: Arc<DeviceShared>, code: &CodeObject) -> Result<CudaModule> {
        let op = "device.load_module";
        let image: std::borrow::Cow<'_, [u8]> = match code.format {
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
        // SAFETY: `image` is a complete image (NUL-terminated when it is PTX) that outlives the call.
        let raw = match unsafe { result::module::load_data(op, image.as_ptr().cast::<c_void>()) } {
            Ok(raw) => raw,
            Err(e) if is_bad_image(&e) => return Err(Error::CodeObject { reason: e.to_string() }),
            Err(e) => return Err(e),
        };
        Ok(CudaModule {
            shared: Arc::new(ModuleShared {
                device,
                raw,
                format: code.format,
                signatures: code.kernels.iter().cloned().map(Arc::new).collect(),
            }),
        })
    }
}

/// Driver errors that mean "this image cannot be loaded here", which saggar reports as a bad code object.
fn is_bad_image(error: &Error) -> bool {
    [
        CUresult::CUDA_ERROR_INVALID_IMAGE,
        CUresult::CUDA_ERROR_INVALID_PTX,
        CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
        CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU,
        CUresult::CUDA_ERROR_JIT_COMPILER_NOT_FOUND,
        CUresult::CUDA_ERROR_INVALID_SOURCE,
        CUresult::CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND,
    ]
    .into_iter()
    .any(|code| has_code(error, code))
}

impl Module for CudaModule {
    type Backend = CudaBackend;

    fn kernel(&self, name: &str) -> Result<CudaKernel> {
        let op = "module.kernel";
        let shared = &self.shared;
        let no_such = || {
            let mut names: Vec<_> = shared.signatures.iter().map(|s| s.name.as_str()).collect();
            names.sort_unstable();
            Error::NoSuchKernel {
                kernel: name.to_string(),
                module: format!("CUDA {:?} module", shared.format),
                available: names.join(", "),
            }
        };
        let signature = shared.signatures.iter().find(|s| s.name == name).cloned().ok_or_else(no_such)?;
        let c_name = CString::new(name).map_err(|_| no_such())?;
        shared.device.enter(op)?;
        // SAFETY: the module is live while `shared` is.
        let raw = match unsafe { result::function::get(op, shared.raw, &c_name) } {
            Ok(raw) => raw,
            Err(e) if has_code(&e, CUresult::CUDA_ERROR_NOT_FOUND) => return Err(no_such()),
            Err(e) => return Err(e),
        };
        // SAFETY: `raw` belongs to the live module.
        let attr = |a: FuncAttr| unsafe { result::function::attribute(op, raw, a) }.map(|v| v.max(0) as u32);
        let device = &shared.device.limits;
        let limits = KernelLimits {
            max_threads_per_block: attr(FuncAttr::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?
                .min(device.max_threads_per_block),
            max_dynamic_shared_bytes: attr(FuncAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)?,
            max_block: device.max_block,
            max_grid: device.max_grid,
        };
        Ok(CudaKernel { module: shared.clone(), raw, signature, limits })
    }
}

/// What one kernel may be launched with: the device's limits, narrowed by the kernel's own (register use
/// lowers the threads a block may have; dynamic shared memory beyond 48 KiB needs an opt-in).
#[derive(Debug, Clone, Copy)]
pub(crate) struct KernelLimits {
    max_threads_per_block: u32,
    max_dynamic_shared_bytes: u32,
    max_block: [u32; 3],
    max_grid: [u32; 3],
}

/// A kernel of a loaded CUDA module; it keeps its module loaded.
///
/// # Thread safety
/// `Send + Sync`, cheap to clone: a kernel handle is immutable, and CUDA allows launching the same
/// function from several threads and streams at once.
#[derive(Clone)]
pub struct CudaKernel {
    module: Arc<ModuleShared>,
    raw: sys::CUfunction,
    signature: Arc<KernelSignature>,
    limits: KernelLimits,
}

// SAFETY: a `CUfunction` is an opaque handle, valid while its module (held by `module`) is loaded, and
// usable from any thread.
unsafe impl Send for CudaKernel {}
// SAFETY: as above; the handle is immutable.
unsafe impl Sync for CudaKernel {}

impl std::fmt::Debug for CudaKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaKernel")
            .field("name", &self.signature.name)
            .field("device", &self.module.device.ordinal())
            .field("max_threads_per_block", &self.limits.max_threads_per_block)
            .finish()
    }
}

impl CudaKernel {
    /// The raw driver handle, for interop and benchmarks; valid while this kernel (or a clone) lives.
    pub fn raw_handle(&self) -> sys::CUfunction {
        self.raw
    }

    pub(crate) fn ordinal(&self) -> usize {
        self.module.device.ordinal()
    }

    pub(crate) fn module(&self) -> &Arc<ModuleShared> {
        &self.module
    }

    /// Checks `config` against this kernel's and its device's limits (after [`LaunchConfig::check`]).
    #[inline]
    pub(crate) fn check_limits(&self, config: &LaunchConfig) -> Result<()> {
        let l = &self.limits;
        let (b, g) = (config.block, config.grid);
        let fits = b.x <= l.max_block[0]
            && b.y <= l.max_block[1]
            && b.z <= l.max_block[2]
            && b.volume() <= u64::from(l.max_threads_per_block)
            && g.x <= l.max_grid[0]
            && g.y <= l.max_grid[1]
            && g.z <= l.max_grid[2]
            && config.shared_mem_bytes <= l.max_dynamic_shared_bytes;
        if fits { Ok(()) } else { Err(self.limit_error(config)) }
    }

    #[cold]
    fn limit_error(&self, config: &LaunchConfig) -> Error {
        let l = &self.limits;
        let (b, g) = (config.block, config.grid);
        let reason = if b.x > l.max_block[0] || b.y > l.max_block[1] || b.z > l.max_block[2] {
            format!(
                "block ({}, {}, {}) exceeds the device's maximum block dimensions ({}, {}, {})",
                b.x, b.y, b.z, l.max_block[0], l.max_block[1], l.max_block[2]
            )
        } else if b.volume() > u64::from(l.max_threads_per_block) {
            format!("{} threads per block exceeds this kernel's limit of {}", b.volume(), l.max_threads_per_block)
        } else if g.x > l.max_grid[0] || g.y > l.max_grid[1] || g.z > l.max_grid[2] {
            format!(
                "grid ({}, {}, {}) exceeds the device's maximum grid dimensions ({}, {}, {})",
                g.x, g.y, g.z, l.max_grid[0], l.max_grid[1], l.max_grid[2]
            )
        } else {
            format!(
                "{} bytes of dynamic shared memory exceed this kernel's limit of {}",
                config.shared_mem_bytes, l.max_dynamic_shared_bytes
            )
        };
        Error::InvalidLaunchConfig { kernel: self.signature.name.clone(), reason }
    }
}

impl Kernel for CudaKernel {
    fn signature(&self) -> &KernelSignature {
        &self.signature
    }
}
