//! Device memory (`hipMalloc`) and page-locked host memory (`hipHostMalloc`) of the HIP backend.
//!
//! Both are freed on drop. A free is one of the calls that stream capture forbids in thread-local and
//! global mode (HIP follows CUDA here: `hipFree` synchronises the device and is not captured), so
//! dropping a buffer on a thread that is capturing would fail the free or break the capture. The free is
//! postponed instead: it runs at the next point where such calls are allowed again (the end of the
//! capture, the next allocation, a device synchronisation or a stream's drop). Failures are recorded on
//! the device ([`crate::Device::take_deferred_errors`]), never swallowed. The CUDA backend's
//! `memory.rs` does the same.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::api::{DeviceBuffer, PinnedBuffer};
use crate::error::{Error, Result};
use crate::hip::device::DeviceShared;
use crate::hip::result::{self, has_code};
use crate::hip::stream;
use crate::hip::sys::code;
use crate::types::DevicePtr;

/// Rust allocations are limited to `isize::MAX` bytes; sizes past it cannot be addressed.
const MAX_BYTES: usize = isize::MAX as usize;

enum Postponed {
    Device(u64),
    Host(HostPtr),
}

/// A pinned host pointer waiting to be freed.
struct HostPtr(*mut c_void);

// SAFETY: the pointer is only handed back to `hipHostFree`, which may be called from any thread.
unsafe impl Send for HostPtr {}

/// Frees postponed because they were requested during a capture, with the device each belongs to.
static POSTPONED: Mutex<Vec<(Arc<DeviceShared>, Postponed)>> = Mutex::new(Vec::new());
/// `POSTPONED.len()`, readable without the lock.
static POSTPONED_COUNT: AtomicUsize = AtomicUsize::new(0);

fn free_now(device: &DeviceShared, what: Postponed) {
    match what {
        Postponed::Device(ptr) => device.release_with("device_buffer.drop", || {
            // SAFETY: `ptr` came from `hipMalloc` and was swapped out of its buffer, so it is freed once.
            unsafe { result::memory::free("device_buffer.drop", ptr) }
        }),
        Postponed::Host(ptr) => device.release_with("pinned_buffer.drop", || {
            // SAFETY: `ptr` came from `hipHostMalloc` and was swapped out of its buffer, so it is freed once.
            unsafe { result::memory::free_host("pinned_buffer.drop", ptr.0) }
        }),
    }
}

/// Frees now, or postpones while this thread may not make unsafe calls.
fn free_or_postpone(device: &Arc<DeviceShared>, what: Postponed) {
    if stream::unsafe_calls_forbidden() {
        POSTPONED.lock().push((device.clone(), what));
        POSTPONED_COUNT.fetch_add(1, Ordering::Release);
    } else {
        free_now(device, what);
    }
}

/// Runs the postponed frees, if this thread may make unsafe calls. Cheap when there are none.
pub(crate) fn flush_postponed_frees() {
    if POSTPONED_COUNT.load(Ordering::Acquire) == 0 || stream::unsafe_calls_forbidden() {
        return;
    }
    let pending = std::mem::take(&mut *POSTPONED.lock());
    POSTPONED_COUNT.fetch_sub(pending.len(), Ordering::Release);
    for (device, what) in pending {
        free_now(&device, what);
    }
}

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
    flush_postponed_frees();
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
    flush_postponed_frees();
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
            free_or_postpone(&self.device, Postponed::Device(ptr));
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
            free_or_postpone(&self.device, Postponed::Host(HostPtr(ptr.as_ptr().cast())));
        }
    }
}
