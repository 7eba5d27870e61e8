//! Pinned host memory of the host backend.
//!
//! The bytes are real host memory shared between the buffer and any operation that uses them, so an
//! operation that outlives its buffer still reads valid memory (and the drop is counted in
//! [`super::HostCounters::pinned_released_while_pending`]): the host backend reports the hazard that
//! on a GPU would be a use-after-free of host memory.

use std::cell::UnsafeCell;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use crate::api::PinnedBuffer;
use crate::error::{Error, Result};
use crate::host::counters::Counters;
use crate::host::device::DeviceShared;
use crate::types::DevicePtr;

/// One page of pinned memory: real pinned allocations (`cuMemHostAlloc`, `hipHostMalloc`) start on a
/// page boundary, so offsets that are aligned inside a buffer are aligned in memory, and the host
/// backend keeps that promise too (a `Vec<u8>` of that size starts 16 bytes past a page).
#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Page([u8; PAGE]);

const PAGE: usize = 4096;

pub(crate) struct PinnedAlloc {
    pages: UnsafeCell<Box<[Page]>>,
    len: usize,
    counters: Arc<Counters>,
}

// SAFETY: the bytes are only reached through `PinnedAlloc::bytes` / `bytes_mut`, whose callers (the
// stream worker, executing copies the user enqueued under the `unsafe` contract of
// `copy_h2d_async` / `copy_d2h_async`, and the owning `HostPinnedBuffer` under `&`/`&mut self`) never
// access the same range at the same time unless that contract was broken.
unsafe impl Sync for PinnedAlloc {}
// SAFETY: a boxed byte slice and an `Arc` may move between threads.
unsafe impl Send for PinnedAlloc {}

impl PinnedAlloc {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// # Safety
    /// No one may write these bytes for the lifetime of the returned slice.
    pub(crate) unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: the caller guarantees there is no concurrent writer; the pages hold at least `len`
        // initialised bytes, and `Page` is plain bytes.
        unsafe { std::slice::from_raw_parts((*self.pages.get()).as_ptr().cast::<u8>(), self.len) }
    }

    /// # Safety
    /// No one else may access these bytes for the lifetime of the returned slice.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: the caller guarantees exclusive access; as in `bytes`.
        unsafe { std::slice::from_raw_parts_mut((*self.pages.get()).as_mut_ptr().cast::<u8>(), self.len) }
    }
}

impl Drop for PinnedAlloc {
    fn drop(&mut self) {
        self.counters.live_pinned_bytes.fetch_sub(self.len as u64, Relaxed);
    }
}

/// Pinned host memory of the host backend.
///
/// # Thread safety
/// `Send + Sync`; see [`PinnedBuffer`].
pub struct HostPinnedBuffer {
    pub(crate) alloc: Arc<PinnedAlloc>,
    /// The allocating device, whose address space maps the buffer at `mapped` until drop.
    device: Arc<DeviceShared>,
    mapped: DevicePtr,
}

impl std::fmt::Debug for HostPinnedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostPinnedBuffer").field("len", &self.alloc.len()).finish()
    }
}

impl HostPinnedBuffer {
    /// `len` zeroed bytes, mapped into `device`'s address space; out of memory when the host has not
    /// the bytes or the space has no room for the mapping.
    pub(crate) fn new(len: usize, device: &Arc<DeviceShared>) -> Result<HostPinnedBuffer> {
        let oom = || Error::OutOfMemory { op: "device.alloc_pinned", requested: len as u64, available: 0 };
        let mut pages = Vec::new();
        let count = len.div_ceil(PAGE);
        pages.try_reserve_exact(count).map_err(|_| oom())?;
        pages.resize(count, Page([0; PAGE]));
        let counters = device.counters.clone();
        counters.live_pinned_bytes.fetch_add(len as u64, Relaxed);
        let alloc = Arc::new(PinnedAlloc { pages: UnsafeCell::new(pages.into_boxed_slice()), len, counters });
        let mapped = device.memory.lock().map_host(alloc.clone())?;
        Ok(HostPinnedBuffer { alloc, device: device.clone(), mapped })
    }
}

impl PinnedBuffer for HostPinnedBuffer {
    fn len(&self) -> usize {
        self.alloc.len()
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: `&self` excludes `as_mut_slice`; asynchronous device writes into this range while the
        // host reads it are excluded by the contract of `copy_d2h_async`.
        unsafe { self.alloc.bytes() }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `&mut self` excludes other host access; asynchronous device access to this range is
        // excluded by the contracts of `copy_h2d_async` / `copy_d2h_async`.
        unsafe { self.alloc.bytes_mut() }
    }

    fn device_ptr(&self) -> Option<DevicePtr> {
        Some(self.mapped)
    }
}

impl Drop for HostPinnedBuffer {
    fn drop(&mut self) {
        if let Err(e) = self.device.memory.lock().unmap_host(self.mapped) {
            self.device.defer(e);
        }
        if Arc::strong_count(&self.alloc) > 1 {
            self.alloc.counters.pinned_released_while_pending.fetch_add(1, Relaxed);
        }
    }
}
