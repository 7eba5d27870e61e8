//! Device memory and page-locked host memory of a GPU backend.
//!
//! Both are freed on drop. A free is one of the calls stream capture forbids in thread-local and
//! global mode (it may synchronise the device, and is not captured), so a buffer dropped on a thread
//! that is capturing is freed at the next point where such calls are allowed again
//! ([`device::release`]). Failures are recorded on the device ([`crate::Device::take_deferred_errors`]),
//! never swallowed.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::api;
use crate::error::{Error, Result};
use crate::gpu::device::{self, DeviceShared, SendHandle};
use crate::gpu::driver::{Driver, ErrorClass};
use crate::rules;
use crate::types::DevicePtr;

/// Out of memory, with what the device still has free (0 if that cannot be read).
#[cold]
fn out_of_memory<D: Driver>(op: &'static str, bytes: usize) -> Error {
    let available = D::memory_info(op).map(|(free, _)| free as u64).unwrap_or(0);
    Error::OutOfMemory { op, requested: bytes as u64, available }
}

pub(crate) fn alloc<D: Driver>(device: &Arc<DeviceShared<D>>, bytes: usize) -> Result<DeviceBuffer<D>> {
    let op = "device.alloc";
    device.enter(op)?;
    device::forbid_during_capture::<D>(op)?;
    rules::check_alloc_size(op, bytes, rules::MAX_BYTES)?;
    if bytes as u64 > device.info.total_memory {
        return Err(out_of_memory::<D>(op, bytes));
    }
    device::flush_postponed_releases::<D>();
    match D::alloc(op, bytes) {
        Ok(ptr) => Ok(DeviceBuffer { device: device.clone(), ptr, len: bytes }),
        Err(e) if D::classify(&e) == ErrorClass::OutOfMemory => Err(out_of_memory::<D>(op, bytes)),
        Err(e) => Err(device::map_fault::<D>(op, e, None, 0)),
    }
}

pub(crate) fn alloc_pinned<D: Driver>(device: &Arc<DeviceShared<D>>, bytes: usize) -> Result<PinnedBuffer<D>> {
    let op = "device.alloc_pinned";
    device.enter(op)?;
    device::forbid_during_capture::<D>(op)?;
    rules::check_pinned_size(op, bytes, device.info.total_memory)?;
    device::flush_postponed_releases::<D>();
    let oom = || Error::OutOfMemory { op, requested: bytes as u64, available: 0 };
    let ptr = match D::alloc_host(op, bytes) {
        Ok(ptr) => ptr,
        Err(e) if D::classify(&e) == ErrorClass::OutOfMemory => return Err(oom()),
        Err(e) => return Err(device::map_fault::<D>(op, e, None, 0)),
    };
    let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(oom)?;
    // SAFETY: the driver returned `bytes` writable bytes at `ptr`; zeroing them makes every byte
    // initialised before any `&[u8]` is formed over them.
    unsafe { ptr.as_ptr().write_bytes(0, bytes) };
    // Unmapped memory is still usable by copies: only kernels that would reach it directly lose it
    // (`device_ptr` is `None`, and callers fall back to a copy).
    // SAFETY: `ptr` is the live allocation made above.
    let mapped = unsafe { D::device_pointer_of_host(op, ptr.as_ptr().cast::<c_void>()) }.ok();
    Ok(PinnedBuffer { device: device.clone(), ptr, len: bytes, mapped })
}

/// Device memory of a GPU backend (`cuMemAlloc`, `hipMalloc`), freed on drop.
///
/// # Thread safety
/// `Send + Sync`: the handle is an address. The vendors order access to the memory behind it by
/// streams, not by threads; the free on drop may run on any thread (it is issued with the buffer's
/// device current).
pub struct DeviceBuffer<D: Driver> {
    device: Arc<DeviceShared<D>>,
    ptr: u64,
    len: usize,
}

impl<D: Driver> std::fmt::Debug for DeviceBuffer<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("device", &self.device.ordinal())
            .field("ptr", &DevicePtr(self.ptr))
            .field("len", &self.len)
            .finish()
    }
}

impl<D: Driver> api::DeviceBuffer for DeviceBuffer<D> {
    #[inline]
    fn ptr(&self) -> DevicePtr {
        DevicePtr(self.ptr)
    }
    #[inline]
    fn len(&self) -> usize {
        self.len
    }
}

impl<D: Driver> Drop for DeviceBuffer<D> {
    fn drop(&mut self) {
        let ptr = self.ptr;
        device::release(&self.device, "device_buffer.drop", move || {
            // SAFETY: `ptr` came from the driver's allocation and `drop` runs once, so it is freed once.
            unsafe { D::free("device_buffer.drop", ptr) }
        });
    }
}

/// Page-locked host memory (`cuMemHostAlloc` with `CU_MEMHOSTALLOC_PORTABLE | DEVICEMAP`,
/// `hipHostMalloc` with `hipHostMallocDefault`: portable, so every device can copy to and from it
/// asynchronously, and mapped, so the allocating device's kernels can also read and write it
/// directly), zeroed at allocation and freed on drop.
///
/// # Thread safety
/// `Send + Sync`. Host access through [`api::PinnedBuffer::as_slice`] /
/// [`api::PinnedBuffer::as_mut_slice`] follows Rust's borrow rules; the device's asynchronous access
/// is the caller's promise when it enqueues a copy (the copy functions are `unsafe`).
pub struct PinnedBuffer<D: Driver> {
    device: Arc<DeviceShared<D>>,
    ptr: NonNull<u8>,
    len: usize,
    /// The device address of the mapping, where the driver gave one.
    mapped: Option<u64>,
}

// SAFETY: the buffer owns its allocation exclusively; pinned host memory may be read, written and freed
// from any thread.
unsafe impl<D: Driver> Send for PinnedBuffer<D> {}
// SAFETY: shared access only reads (`as_slice`); writes need `&mut self`.
unsafe impl<D: Driver> Sync for PinnedBuffer<D> {}

impl<D: Driver> std::fmt::Debug for PinnedBuffer<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedBuffer").field("device", &self.device.ordinal()).field("len", &self.len).finish()
    }
}

impl<D: Driver> PinnedBuffer<D> {
    /// The first byte, for the copy functions.
    #[inline]
    pub(crate) fn host_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl<D: Driver> api::PinnedBuffer for PinnedBuffer<D> {
    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes at `ptr` are allocated, initialised (zeroed at allocation) and live until
        // drop; `&self` excludes `as_mut_slice`. Device writes into this range while it is borrowed are
        // excluded by the contract of `copy_d2h_async`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` excludes every other host access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    #[inline]
    fn device_ptr(&self) -> Option<DevicePtr> {
        self.mapped.map(DevicePtr)
    }
}

impl<D: Driver> Drop for PinnedBuffer<D> {
    fn drop(&mut self) {
        let ptr = SendHandle::new(self.ptr.as_ptr().cast::<c_void>());
        device::release(&self.device, "pinned_buffer.drop", move || {
            // SAFETY: the pointer came from the driver's pinned allocation and `drop` runs once, so it is
            // freed once.
            unsafe { D::free_host("pinned_buffer.drop", ptr.into_inner()) }
        });
    }
}
