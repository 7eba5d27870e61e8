//! Device memory (`cuMemAlloc`) and page-locked host memory (`cuMemHostAlloc`) of the CUDA backend.
//!
//! Both are freed on drop. A free is one of the calls CUDA forbids during stream capture (it may
//! synchronise the device, and is not captured), so a buffer dropped on a thread that is capturing is
//! freed at the next point where unsafe calls are allowed again ([`device::release`]). Failures are
//! recorded on the device ([`crate::Device::take_deferred_errors`]), never swallowed.

use std::ptr::NonNull;
use std::sync::Arc;

use cudarc::driver::sys;

use crate::api::{DeviceBuffer, PinnedBuffer};
use crate::cuda::device::{self, DeviceShared, SendHandle};
use crate::cuda::result::{self, CUresult, has_code};
use crate::cuda::stream;
use crate::error::{Error, Result};
use crate::types::DevicePtr;

/// Rust allocations are limited to `isize::MAX` bytes; sizes past it cannot be addressed.
const MAX_BYTES: usize = isize::MAX as usize;

fn invalid_size(op: &'static str, bytes: usize, reason: &'static str) -> Error {
    Error::InvalidSize { op, bytes: bytes as u128, reason }
}

/// Out of memory, with what the device still has free (0 if that cannot be read).
fn out_of_memory(op: &'static str, bytes: usize) -> Error {
    let available = result::memory::info(op).map(|(free, _)| free as u64).unwrap_or(0);
    Error::OutOfMemory { op, requested: bytes as u64, available }
}

pub(crate) fn alloc(device: &Arc<DeviceShared>, bytes: usize) -> Result<CudaDeviceBuffer> {
    let op = "device.alloc";
    device.enter(op)?;
    stream::forbid_during_capture(op)?;
    if bytes == 0 {
        return Err(invalid_size(op, bytes, "zero-sized allocations are not allowed"));
    }
    if bytes > MAX_BYTES {
        return Err(invalid_size(op, bytes, "larger than the address space"));
    }
    if bytes as u64 > device.info.total_memory {
        return Err(out_of_memory(op, bytes));
    }
    device::flush_postponed_releases();
    match result::memory::alloc(op, bytes) {
        Ok(ptr) => Ok(CudaDeviceBuffer { device: device.clone(), ptr, len: bytes }),
        Err(e) if has_code(&e, CUresult::CUDA_ERROR_OUT_OF_MEMORY) => Err(out_of_memory(op, bytes)),
        Err(e) => Err(stream::map_fault(op, e, None, 0)),
    }
}

pub(crate) fn alloc_pinned(device: &Arc<DeviceShared>, bytes: usize) -> Result<CudaPinnedBuffer> {
    let op = "device.alloc_pinned";
    device.enter(op)?;
    stream::forbid_during_capture(op)?;
    if bytes == 0 {
        return Err(invalid_size(op, bytes, "zero-sized allocations are not allowed"));
    }
    if bytes > MAX_BYTES {
        return Err(invalid_size(op, bytes, "larger than the address space"));
    }
    // The host backend's rule, kept here too: pinning more host memory than the device holds is refused
    // before the driver tries (pinning that much can stall the whole machine).
    if bytes as u64 > device.info.total_memory {
        return Err(Error::OutOfMemory { op, requested: bytes as u64, available: device.info.total_memory });
    }
    device::flush_postponed_releases();
    let ptr = match result::memory::alloc_host(op, bytes) {
        Ok(ptr) => ptr,
        Err(e) if has_code(&e, CUresult::CUDA_ERROR_OUT_OF_MEMORY) => {
            return Err(Error::OutOfMemory { op, requested: bytes as u64, available: 0 });
        }
        Err(e) => return Err(stream::map_fault(op, e, None, 0)),
    };
    let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| result::vendor(op, CUresult::CUDA_ERROR_OUT_OF_MEMORY))?;
    // SAFETY: the driver returned `bytes` writable bytes at `ptr`; zeroing them makes every byte
    // initialised before any `&[u8]` is formed over them.
    unsafe { ptr.as_ptr().write_bytes(0, bytes) };
    Ok(CudaPinnedBuffer { device: device.clone(), ptr: Some(ptr), len: bytes })
}

/// Device memory of the CUDA backend (`cuMemAlloc`), freed on drop.
///
/// # Thread safety
/// `Send + Sync`: the handle is an address. CUDA orders access to the memory behind it by streams, not by
/// threads; the free on drop may run on any thread (it is issued in the device's context).
pub struct CudaDeviceBuffer {
    device: Arc<DeviceShared>,
    ptr: sys::CUdeviceptr,
    len: usize,
}

impl std::fmt::Debug for CudaDeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDeviceBuffer")
            .field("device", &self.device.ordinal())
            .field("ptr", &DevicePtr(self.ptr))
            .field("len", &self.len)
            .finish()
    }
}

impl DeviceBuffer for CudaDeviceBuffer {
    fn ptr(&self) -> DevicePtr {
        DevicePtr(self.ptr)
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for CudaDeviceBuffer {
    fn drop(&mut self) {
        let ptr = std::mem::replace(&mut self.ptr, 0);
        if ptr != 0 {
            device::release(&self.device, "device_buffer.drop", move || {
                // SAFETY: `ptr` came from `cuMemAlloc` and was swapped out of the buffer, so it is freed once.
                unsafe { result::memory::free("device_buffer.drop", ptr) }
            });
        }
    }
}

/// Page-locked host memory (`cuMemHostAlloc` with `CU_MEMHOSTALLOC_PORTABLE`, so every context can copy
/// to and from it asynchronously), zeroed at allocation and freed on drop.
///
/// # Thread safety
/// `Send + Sync`. Host access through [`PinnedBuffer::as_slice`] / [`PinnedBuffer::as_mut_slice`] follows
/// Rust's borrow rules; the device's asynchronous access is the caller's promise when it enqueues a
/// copy (the copy functions are `unsafe`).
pub struct CudaPinnedBuffer {
    device: Arc<DeviceShared>,
    ptr: Option<NonNull<u8>>,
    len: usize,
}

// SAFETY: the buffer owns its allocation exclusively; pinned host memory may be read, written and freed
// from any thread.
unsafe impl Send for CudaPinnedBuffer {}
// SAFETY: shared access only reads (`as_slice`); writes need `&mut self`.
unsafe impl Sync for CudaPinnedBuffer {}

impl std::fmt::Debug for CudaPinnedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaPinnedBuffer").field("device", &self.device.ordinal()).field("len", &self.len).finish()
    }
}

impl CudaPinnedBuffer {
    /// The first byte, for the copy functions.
    pub(crate) fn host_ptr(&self) -> *mut u8 {
        self.ptr.map_or(std::ptr::null_mut(), NonNull::as_ptr)
    }
}

impl PinnedBuffer for CudaPinnedBuffer {
    fn len(&self) -> usize {
        self.len
    }

    fn as_slice(&self) -> &[u8] {
        match self.ptr {
            // SAFETY: `len` bytes at `ptr` are allocated, initialised (zeroed at allocation) and live until
            // drop; `&self` excludes `as_mut_slice`. Device writes into this range while it is borrowed are
            // excluded by the contract of `copy_d2h_async`.
            Some(ptr) => unsafe { std::slice::from_raw_parts(ptr.as_ptr(), self.len) },
            None => &[],
        }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self.ptr {
            // SAFETY: as in `as_slice`; `&mut self` excludes every other host access.
            Some(ptr) => unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), self.len) },
            None => &mut [],
        }
    }
}

impl Drop for CudaPinnedBuffer {
    fn drop(&mut self) {
        if let Some(ptr) = self.ptr.take() {
            let ptr = SendHandle::new(ptr.as_ptr().cast::<std::ffi::c_void>());
            device::release(&self.device, "pinned_buffer.drop", move || {
                // SAFETY: the pointer came from `cuMemHostAlloc` and was taken out of the buffer, so it is
                // freed once.
                unsafe { result::memory::free_host("pinned_buffer.drop", ptr.into_inner()) }
            });
        }
    }
}
