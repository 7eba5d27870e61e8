//! Device memory (`hipMalloc`) and page-locked host memory (`hipHostMalloc`) of the HIP backend.
//!
//! Both are freed on drop. A free is one of the calls that stream capture forbids in thread-local and
//! global mode (HIP follows CUDA here: `hipFree` synchronises the device and is not captured), so a
//! buffer dropped on a thread that is capturing is freed at the next point where such calls are allowed
//! again ([`device::release`]). Failures are recorded on the device
//! ([`crate::Device::take_deferred_errors`]), never swallowed.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::api::{DeviceBuffer, PinnedBuffer};
use crate::error::{Error, Result};
use crate::hip::device::{self, DeviceShared, SendHandle};
use crate::hip::result::{self, has_code};
use crate::hip::stream;
use crate::hip::sys::code;
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

pub(crate) fn alloc(device: &Arc<DeviceShared>, bytes: usize) -> Result<HipDeviceBuffer> {
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
        Ok(ptr) => Ok(HipDeviceBuffer { device: device.clone(), ptr, len: bytes }),
        Err(e) if has_code(&e, code::OUT_OF_MEMORY) => Err(out_of_memory(op, bytes)),
        Err(e) => Err(stream::map_fault(op, e, None, 0)),
    }
}

pub(crate) fn alloc_pinned(device: &Arc<DeviceShared>, bytes: usize) -> Result<HipPinnedBuffer> {
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
    // before HIP tries (pinning that much can stall the whole machine).
    if bytes as u64 > device.info.total_memory {
        return Err(Error::OutOfMemory { op, requested: bytes as u64, available: device.info.total_memory });
    }
    device::flush_postponed_releases();
    let ptr = match result::memory::alloc_host(op, bytes) {
        Ok(ptr) => ptr,
        Err(e) if has_code(&e, code::OUT_OF_MEMORY) => {
            return Err(Error::OutOfMemory { op, requested: bytes as u64, available: 0 });
        }
        Err(e) => return Err(stream::map_fault(op, e, None, 0)),
    };
    let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| result::vendor(op, code::OUT_OF_MEMORY))?;
    // SAFETY: HIP returned `bytes` writable bytes at `ptr`; zeroing them makes every byte initialised
    // before any `&[u8]` is formed over them.
    unsafe { ptr.as_ptr().write_bytes(0, bytes) };
    Ok(HipPinnedBuffer { device: device.clone(), ptr: Some(ptr), len: bytes })
}

/// Device memory of the HIP backend (`hipMalloc`), freed on drop.
///
/// # Thread safety
/// `Send + Sync`: the handle is an address. HIP orders access to the memory behind it by streams, not by
/// threads; the free on drop may run on any thread (it is issued with the buffer's device current).
pub struct HipDeviceBuffer {
    device: Arc<DeviceShared>,
    ptr: u64,
    len: usize,
}

impl std::fmt::Debug for HipDeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipDeviceBuffer")
            .field("device", &self.device.ordinal())
            .field("ptr", &DevicePtr(self.ptr))
            .field("len", &self.len)
            .finish()
    }
}

impl DeviceBuffer for HipDeviceBuffer {
    fn ptr(&self) -> DevicePtr {
        DevicePtr(self.ptr)
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for HipDeviceBuffer {
    fn drop(&mut self) {
        let ptr = std::mem::replace(&mut self.ptr, 0);
        if ptr != 0 {
            device::release(&self.device, "device_buffer.drop", move || {
                // SAFETY: `ptr` came from `hipMalloc` and was swapped out of the buffer, so it is freed once.
                unsafe { result::memory::free("device_buffer.drop", ptr) }
            });
        }
    }
}

/// Page-locked host memory (`hipHostMalloc` with `hipHostMallocDefault`, which HIP documents as mapped
/// and portable, so every device can copy to and from it asynchronously), zeroed at allocation and
/// freed on drop.
///
/// # Thread safety
/// `Send + Sync`. Host access through [`PinnedBuffer::as_slice`] / [`PinnedBuffer::as_mut_slice`] follows
/// Rust's borrow rules; the device's asynchronous access is the caller's promise when it enqueues a
/// copy (the copy functions are `unsafe`).
pub struct HipPinnedBuffer {
    device: Arc<DeviceShared>,
    ptr: Option<NonNull<u8>>,
    len: usize,
}

// SAFETY: the buffer owns its allocation exclusively; pinned host memory may be read, written and freed
// from any thread.
unsafe impl Send for HipPinnedBuffer {}
// SAFETY: shared access only reads (`as_slice`); writes need `&mut self`.
unsafe impl Sync for HipPinnedBuffer {}

impl std::fmt::Debug for HipPinnedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipPinnedBuffer").field("device", &self.device.ordinal()).field("len", &self.len).finish()
    }
}

impl HipPinnedBuffer {
    /// The first byte, for the copy functions.
    pub(crate) fn host_ptr(&self) -> *mut u8 {
        self.ptr.map_or(std::ptr::null_mut(), NonNull::as_ptr)
    }
}

impl PinnedBuffer for HipPinnedBuffer {
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

impl Drop for HipPinnedBuffer {
    fn drop(&mut self) {
        if let Some(ptr) = self.ptr.take() {
            let ptr = SendHandle::new(ptr.as_ptr().cast::<c_void>());
            device::release(&self.device, "pinned_buffer.drop", move || {
                // SAFETY: the pointer came from `hipHostMalloc` and was taken out of the buffer, so it is
                // freed once.
                unsafe { result::memory::free_host("pinned_buffer.drop", ptr.into_inner()) }
            });
        }
    }
}
