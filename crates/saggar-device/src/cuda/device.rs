//! The CUDA device as the driver describes it, and the vendor state of an opened device: its primary
//! context, retained on open and released when the last object of the device is gone.

use std::ptr;

use cudarc::driver::sys;
use cudarc::driver::sys::CUdevice_attribute as Attr;

use crate::cuda::result;
use crate::error::{Error, Result};
use crate::gpu::Opened;
use crate::rules::DeviceLimits;
use crate::types::{BackendKind, DeviceInfo};

/// A device as the driver describes it, before any context exists.
struct Described {
    handle: sys::CUdevice,
    info: DeviceInfo,
    limits: DeviceLimits,
    compute_capability: (u32, u32),
}

fn describe(ordinal: usize, driver_version: i32) -> Result<Described> {
    let op = "cuda.describe_device";
    let handle = result::device::get(op, ordinal)?;
    let attr = |a: Attr| result::device::attribute(op, handle, a).map(|v| v.max(0) as u32);
    let compute_capability = (
        attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    );
    let limits = DeviceLimits {
        max_threads_per_block: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        max_block: [
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
        ],
        max_grid: [
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
        ],
        // A kernel's own limit (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`) is the one that binds.
        max_shared_bytes: u32::MAX,
        max_threads_per_dim: u64::MAX,
        // Programmatic dependent launch: Hopper and later, unless turned off.
        programmatic_launch: compute_capability.0 >= 9 && super::driver::programmatic_launch_enabled(),
    };
    let (major, minor) = compute_capability;
    let info = DeviceInfo {
        backend: BackendKind::Cuda,
        ordinal,
        name: result::device::name(op, handle)?,
        arch: format!("sm_{major}{minor}"),
        total_memory: result::device::total_mem(op, handle)? as u64,
        driver_version: format!(
            "CUDA driver API {}.{} ({driver_version})",
            driver_version / 1000,
            (driver_version % 1000) / 10
        ),
    };
    Ok(Described { handle, info, limits, compute_capability })
}

/// The devices the driver sees, or why there are none.
pub(crate) fn enumerate() -> Result<Vec<DeviceInfo>> {
    let driver = result::library::driver()?;
    let count = result::driver::device_count("cuda.enumerate")?;
    if count == 0 {
        return Err(Error::BackendUnavailable {
            backend: BackendKind::Cuda,
            reason: "no CUDA device found: the driver reports 0 devices".into(),
        });
    }
    (0..count).map(|ordinal| describe(ordinal, driver.version).map(|d| d.info)).collect()
}

/// Opens device `ordinal`: describes it and retains its primary context.
pub(crate) fn open(ordinal: usize) -> Result<Opened<super::CudaDriver>> {
    let driver = result::library::driver()?;
    let count = result::driver::device_count("cuda.open")?;
    if ordinal >= count {
        return Err(Error::NoSuchDevice { backend: BackendKind::Cuda, ordinal, count });
    }
    let described = describe(ordinal, driver.version)?;
    let raw = result::primary_ctx::retain("cuda.open", described.handle)?;
    let state = PrimaryContext { device: described.handle, raw, compute_capability: described.compute_capability };
    Ok(Opened { info: described.info, limits: described.limits, state })
}

/// A retain of a device's primary context, released on drop: the CUDA backend's per-device state.
/// Driver calls act on the context current on the calling thread, so every operation makes this one
/// current first (the shared layer caches which one it made current, per thread).
///
/// # Thread safety
/// `Send + Sync`. The CUDA documentation: "The primary context is unique per device and shared with the
/// CUDA runtime API." A context handle may be made current on any thread (`cuCtxSetCurrent`: "Binds the
/// specified CUDA context to the calling CPU thread"), on several threads at once.
#[derive(Debug)]
pub struct PrimaryContext {
    device: sys::CUdevice,
    pub(crate) raw: sys::CUcontext,
    pub(crate) compute_capability: (u32, u32),
}

// SAFETY: the handle is an opaque token the driver accepts from any thread (see the type's docs); saggar
// never dereferences it.
unsafe impl Send for PrimaryContext {}
// SAFETY: as above; every use is a driver call, and the driver API is thread-safe.
unsafe impl Sync for PrimaryContext {}

impl Drop for PrimaryContext {
    fn drop(&mut self) {
        let raw = std::mem::replace(&mut self.raw, ptr::null_mut());
        crate::gpu::forget_current::<super::CudaDriver>(raw);
        // SAFETY: balances the retain made in `open`; `drop` runs once, so it is released once.
        if let Err(e) = unsafe { result::primary_ctx::release("device.drop", self.device) } {
            crate::gpu::orphan::<super::CudaDriver>(e);
        }
    }
}
