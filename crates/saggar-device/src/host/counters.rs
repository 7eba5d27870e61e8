//! Counters of the host backend: what ran, what was allocated, and what is still alive.
//!
//! Plain relaxed atomics: they are bumped on every operation and read only by tests and reports.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A snapshot of a host device's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostCounters {
    /// Kernel launches executed (eagerly or as graph nodes).
    pub launches: u64,
    /// Graph replays executed.
    pub graph_launches: u64,
    /// Host-to-device copies executed (async and upload).
    pub copies_h2d: u64,
    /// Device-to-host copies executed (async and download).
    pub copies_d2h: u64,
    /// Bytes the host-to-device copies executed moved.
    pub bytes_h2d: u64,
    /// Bytes the device-to-host copies executed moved.
    pub bytes_d2h: u64,
    /// Events recorded on a stream outside a capture.
    pub event_records: u64,
    /// `Stream::synchronize` calls that waited (not refused).
    pub stream_synchronizes: u64,
    /// Device-to-device copies executed.
    pub copies_d2d: u64,
    /// Memsets executed.
    pub memsets: u64,
    /// Device allocations made.
    pub allocations: u64,
    /// Device allocations freed.
    pub frees: u64,
    /// Device bytes currently allocated.
    pub live_device_bytes: u64,
    /// Pinned host bytes currently allocated.
    pub live_pinned_bytes: u64,
    /// Pinned buffers dropped while an operation still referenced them. The host backend keeps the
    /// memory alive until the operation ran; on a GPU this is a use-after-free of host memory.
    pub pinned_released_while_pending: u64,
    /// Captures ended successfully.
    pub captures: u64,
    /// Executable graphs alive.
    pub live_graph_execs: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) launches: AtomicU64,
    pub(crate) graph_launches: AtomicU64,
    pub(crate) copies_h2d: AtomicU64,
    pub(crate) copies_d2h: AtomicU64,
    pub(crate) bytes_h2d: AtomicU64,
    pub(crate) bytes_d2h: AtomicU64,
    pub(crate) event_records: AtomicU64,
    pub(crate) stream_synchronizes: AtomicU64,
    pub(crate) copies_d2d: AtomicU64,
    pub(crate) memsets: AtomicU64,
    allocations: AtomicU64,
    frees: AtomicU64,
    live_device_bytes: AtomicU64,
    pub(crate) live_pinned_bytes: AtomicU64,
    pub(crate) pinned_released_while_pending: AtomicU64,
    pub(crate) captures: AtomicU64,
    pub(crate) live_graph_execs: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    pub(crate) fn add(counter: &AtomicU64, amount: usize) {
        counter.fetch_add(amount as u64, Relaxed);
    }

    pub(crate) fn on_alloc(&self, bytes: u64) {
        self.allocations.fetch_add(1, Relaxed);
        self.live_device_bytes.fetch_add(bytes, Relaxed);
    }

    pub(crate) fn on_free(&self, bytes: u64) {
        self.frees.fetch_add(1, Relaxed);
        self.live_device_bytes.fetch_sub(bytes, Relaxed);
    }

    pub(crate) fn snapshot(&self) -> HostCounters {
        HostCounters {
            launches: self.launches.load(Relaxed),
            graph_launches: self.graph_launches.load(Relaxed),
            copies_h2d: self.copies_h2d.load(Relaxed),
            copies_d2h: self.copies_d2h.load(Relaxed),
            bytes_h2d: self.bytes_h2d.load(Relaxed),
            bytes_d2h: self.bytes_d2h.load(Relaxed),
            event_records: self.event_records.load(Relaxed),
            stream_synchronizes: self.stream_synchronizes.load(Relaxed),
            copies_d2d: self.copies_d2d.load(Relaxed),
            memsets: self.memsets.load(Relaxed),
            allocations: self.allocations.load(Relaxed),
            frees: self.frees.load(Relaxed),
            live_device_bytes: self.live_device_bytes.load(Relaxed),
            live_pinned_bytes: self.live_pinned_bytes.load(Relaxed),
            pinned_released_while_pending: self.pinned_released_while_pending.load(Relaxed),
            captures: self.captures.load(Relaxed),
            live_graph_execs: self.live_graph_execs.load(Relaxed),
        }
    }
}
