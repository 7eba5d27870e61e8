//! Counters: plain relaxed atomics bumped where the event happens, read as one snapshot.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        #[derive(Debug, Default)]
        pub(crate) struct Stats {
            $( pub(crate) $name: AtomicU64, )*
        }

        /// A point-in-time copy of a cache's counters (see
        /// [`CompileCache::stats`](crate::CompileCache::stats)). Counters are per cache instance
        /// and only ever increase.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct StatsSnapshot {
            $( $(#[$doc])* pub $name: u64, )*
            /// Keys with a lookup in flight (the size of the per-key lock registry).
            pub keys_in_flight: u64,
            /// Artifacts held by the memory tier.
            pub memory_entries: u64,
            /// Bytes held by the memory tier.
            pub memory_bytes: u64,
        }

        impl Stats {
            pub(crate) fn snapshot(&self) -> StatsSnapshot {
                StatsSnapshot {
                    $( $name: self.$name.load(Ordering::Relaxed), )*
                    keys_in_flight: 0,
                    memory_entries: 0,
                    memory_bytes: 0,
                }
            }
        }
    };
}

counters! {
    /// Calls of `get_or_compile`, `get` and `read_disk`.
    lookups,
    /// Lookups answered by the memory tier.
    memory_hits,
    /// Entries loaded and verified from disk.
    disk_loads,
    /// Lookups that waited for another thread or process working on the same key and then
    /// found its result (memory or disk) instead of compiling.
    loads_after_wait,
    /// Times a lookup found the key's in-process or cross-process lock held by another
    /// compiler and waited for it.
    compile_waits,
    /// Calls of the compile closure.
    compiles,
    /// Compile closures that returned an error.
    compile_failures,
    /// Entries written successfully (by a miss, `put` or an import).
    publishes,
    /// Publishes that failed (disk full, read-only directory, …); the artifact was still
    /// returned and the previous entry, if any, kept.
    publish_failures,
    /// Publishes whose entry was renamed into place but whose directory fsync failed: the entry
    /// is complete, but its rename might not survive a power loss.
    dir_sync_failures,
    /// Entries that failed the header, key or checksum check and were evicted.
    corrupt_evicted,
    /// Entries refused because other users could write them.
    untrusted_refused,
    /// Misses handled without a cross-process lock (locking unsupported or directory not
    /// writable).
    unlocked_misses,
    /// Entries evicted by the size bound.
    lru_evictions,
    /// Bytes freed by the size bound.
    lru_evicted_bytes,
    /// Temp files of dead writers removed.
    stale_temps_removed,
    /// Files imported.
    imports,
    /// Files refused by import verification.
    imports_rejected,
}

impl Stats {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}
