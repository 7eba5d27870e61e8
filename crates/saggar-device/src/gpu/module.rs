//! Modules and kernels of a GPU backend: a code object loaded by the driver, kernel handles looked up
//! by name, each with the signature its code object declares and the limits the driver reports for it,
//! so every launch is checked before it reaches the driver.

use std::ffi::CString;
use std::sync::Arc;

use crate::api;
use crate::code::CodeObject;
use crate::error::{Error, Result};
use crate::gpu::GpuBackend;
use crate::gpu::device::{self, DeviceShared, SendHandle};
use crate::gpu::driver::{Driver, ErrorClass};
use crate::rules::KernelLimits;
use crate::types::KernelSignature;

/// A loaded module, shared by its kernels and by every graph that launched one of them.
pub struct ModuleShared<D: Driver> {
    device: Arc<DeviceShared<D>>,
    raw: D::Module,
    /// What [`Error::NoSuchKernel`] calls it.
    name: String,
    signatures: Vec<Arc<KernelSignature>>,
    /// The image, where the driver may read it after loading (HIP documents no promise to copy it):
    /// kept for as long as the module is loaded.
    _image: Option<Box<[u8]>>,
}

// SAFETY: a module handle is opaque and the vendors accept it from any thread; the rest is immutable.
unsafe impl<D: Driver> Send for ModuleShared<D> {}
// SAFETY: as above.
unsafe impl<D: Driver> Sync for ModuleShared<D> {}

impl<D: Driver> Drop for ModuleShared<D> {
    fn drop(&mut self) {
        let raw = SendHandle::new(self.raw);
        device::release(&self.device, "module.drop", move || {
            // SAFETY: `drop` runs once, so `raw` is unloaded once. No kernel of it can be launched any more:
            // kernels and graphs hold this module by `Arc`, so this runs after the last of them is gone
            // (work they enqueued may still run, which the launch contracts leave to the caller).
            unsafe { D::unload_module("module.drop", raw.into_inner()) }
        });
    }
}

impl<D: Driver> std::fmt::Debug for ModuleShared<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("device", &self.device.ordinal())
            .field("name", &self.name)
            .field("kernels", &self.signatures.iter().map(|s| s.name.as_str()).collect::<Vec<_>>())
            .finish()
    }
}

/// A loaded module of a GPU backend (`cuModuleLoadDataEx`, `hipModuleLoadData`), unloaded when the
/// module, its kernels and every graph that launched one of its kernels are gone.
///
/// # Thread safety
/// `Send + Sync`: a module is immutable once loaded; kernels may be looked up from any thread.
pub struct Module<D: Driver> {
    shared: Arc<ModuleShared<D>>,
}

impl<D: Driver> std::fmt::Debug for Module<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.shared.fmt(f)
    }
}

impl<D: Driver> Module<D> {
    /// Loads `code`; the device is current (the caller entered it).
    pub(crate) fn load(device: Arc<DeviceShared<D>>, code: &CodeObject) -> Result<Module<D>> {
        let (raw, image) = D::load_module("device.load_module", code)?;
        Ok(Module {
            shared: Arc::new(ModuleShared {
                device,
                raw,
                name: D::module_name(code),
                signatures: code.kernels.iter().cloned().map(Arc::new).collect(),
                _image: image,
            }),
        })
    }
}

impl<D: Driver> api::Module for Module<D> {
    type Backend = GpuBackend<D>;

    fn kernel(&self, name: &str) -> Result<Kernel<D>> {
        let op = "module.kernel";
        let shared = &self.shared;
        let no_such = || {
            let mut names: Vec<_> = shared.signatures.iter().map(|s| s.name.as_str()).collect();
            names.sort_unstable();
            Error::NoSuchKernel { kernel: name.to_string(), module: shared.name.clone(), available: names.join(", ") }
        };
        let signature = shared.signatures.iter().find(|s| s.name == name).cloned().ok_or_else(no_such)?;
        let c_name = CString::new(name).map_err(|_| no_such())?;
        shared.device.enter(op)?;
        // Lazy module loading loads the function here.
        let (raw, limits) = device::loading_code::<D, _>(|| {
            // SAFETY: the module is live while `shared` is.
            let raw = match unsafe { D::get_function(op, shared.raw, &c_name) } {
                Ok(raw) => raw,
                Err(e) if D::classify(&e) == ErrorClass::NotFound => return Err(no_such()),
                Err(e) => return Err(e),
            };
            // SAFETY: `raw` belongs to the live module.
            let limits = unsafe { D::kernel_limits(op, raw, &shared.device.limits) }?;
            Ok((raw, limits))
        })?;
        Ok(Kernel { module: shared.clone(), raw, signature, limits })
    }
}

/// A kernel of a loaded module; it keeps its module loaded.
///
/// # Thread safety
/// `Send + Sync`, cheap to clone: a kernel handle is immutable, and the vendors allow launching the
/// same function from several threads and streams at once.
pub struct Kernel<D: Driver> {
    module: Arc<ModuleShared<D>>,
    raw: D::Function,
    signature: Arc<KernelSignature>,
    limits: KernelLimits,
}

impl<D: Driver> Clone for Kernel<D> {
    fn clone(&self) -> Self {
        Kernel { module: self.module.clone(), raw: self.raw, signature: self.signature.clone(), limits: self.limits }
    }
}

// SAFETY: a function handle is opaque, valid while its module (held by `module`) is loaded, and usable
// from any thread.
unsafe impl<D: Driver> Send for Kernel<D> {}
// SAFETY: as above; the handle is immutable.
unsafe impl<D: Driver> Sync for Kernel<D> {}

impl<D: Driver> std::fmt::Debug for Kernel<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.signature.name)
            .field("device", &self.module.device.ordinal())
            .field("max_threads_per_block", &self.limits.max_threads_per_block)
            .finish()
    }
}

impl<D: Driver> Kernel<D> {
    /// The raw driver handle, for interop and benchmarks; valid while this kernel (or a clone) lives.
    #[inline]
    pub fn raw_handle(&self) -> D::Function {
        self.raw
    }

    #[inline]
    pub(crate) fn ordinal(&self) -> usize {
        self.module.device.ordinal()
    }

    #[inline]
    pub(crate) fn module(&self) -> &Arc<ModuleShared<D>> {
        &self.module
    }

    #[inline]
    pub(crate) fn signature_arc(&self) -> &Arc<KernelSignature> {
        &self.signature
    }

    /// What launches of this kernel must keep.
    #[inline]
    pub(crate) fn limits(&self) -> &KernelLimits {
        &self.limits
    }
}

impl<D: Driver> api::Kernel for Kernel<D> {
    #[inline]
    fn signature(&self) -> &KernelSignature {
        &self.signature
    }
}
