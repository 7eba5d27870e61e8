//! The one configuration struct of a cache, built once with a builder. Nothing in this crate
//! reads environment variables.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::fault::FaultInjector;

/// Who may write the cache directory and its entries. Loading an entry is loading code, so this
/// is a trust decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DirTrust {
    /// The directory is created `0700` and entries `0600`. A directory or entry that is writable
    /// by group or others, or owned by another user (other than root), is refused with
    /// [`CacheError::UntrustedDirectory`](crate::CacheError::UntrustedDirectory) /
    /// [`CacheError::UntrustedEntry`](crate::CacheError::UntrustedEntry).
    #[default]
    OwnerOnly,
    /// The operator declares the directory shared (for example a group cache on a shared volume)
    /// and every user who can write it trusted. Ownership and mode checks are skipped; the
    /// directory is created `0775` and entries `0644` (subject to the umask). Integrity checks
    /// (header, key, checksum) still apply.
    SharedTrusted,
}

/// What to do where `flock` is unsupported or unreliable (some network filesystems answer
/// `ENOLCK`, `EOPNOTSUPP` or `ENOSYS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LockingMode {
    /// Fail loudly: [`CompileCache::open`](crate::CompileCache::open) and lookups return
    /// [`CacheError::LockingUnsupported`](crate::CacheError::LockingUnsupported).
    #[default]
    Required,
    /// Run without cross-process locks, with one warning per cache. Several processes may then
    /// compile the same key at once (threads of one process are still serialised by the
    /// in-process locks); publishing stays atomic, so nobody ever loads a partial entry.
    BestEffort,
}

/// Configuration of a [`CompileCache`](crate::CompileCache). Build it with
/// [`CacheConfig::builder`].
#[derive(Debug, Clone)]
pub struct CacheConfig {
    pub(crate) dir: PathBuf,
    pub(crate) trust: DirTrust,
    pub(crate) locking: LockingMode,
    pub(crate) max_disk_bytes: Option<u64>,
    pub(crate) memory_budget_bytes: u64,
    pub(crate) stale_temp_age: Duration,
    pub(crate) touch_interval: Duration,
    pub(crate) load_threads: usize,
    pub(crate) faults: Option<Arc<dyn FaultInjector>>,
}

impl CacheConfig {
    /// Starts a configuration for the cache directory `dir`.
    pub fn builder(dir: impl Into<PathBuf>) -> CacheConfigBuilder {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        CacheConfigBuilder {
            config: CacheConfig {
                dir: dir.into(),
                trust: DirTrust::default(),
                locking: LockingMode::default(),
                max_disk_bytes: None,
                memory_budget_bytes: 1 << 30,
                stale_temp_age: Duration::from_secs(10 * 60),
                touch_interval: Duration::from_secs(60),
                load_threads: threads.clamp(1, 4),
                faults: None,
            },
        }
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The trust setting.
    pub fn trust(&self) -> DirTrust {
        self.trust
    }

    /// The locking mode.
    pub fn locking(&self) -> LockingMode {
        self.locking
    }

    /// The disk size bound, if any.
    pub fn max_disk_bytes(&self) -> Option<u64> {
        self.max_disk_bytes
    }

    /// The memory tier budget in bytes (0: no memory tier).
    pub fn memory_budget_bytes(&self) -> u64 {
        self.memory_budget_bytes
    }

    /// Age after which a temp file of a killed writer is removed.
    pub fn stale_temp_age(&self) -> Duration {
        self.stale_temp_age
    }

    /// Threads used to read and checksum one large entry.
    pub fn load_threads(&self) -> usize {
        self.load_threads
    }
}

/// Builder for [`CacheConfig`].
#[derive(Debug, Clone)]
pub struct CacheConfigBuilder {
    config: CacheConfig,
}

impl CacheConfigBuilder {
    /// Who may write the directory (default [`DirTrust::OwnerOnly`]).
    pub fn trust(mut self, trust: DirTrust) -> Self {
        self.config.trust = trust;
        self
    }

    /// Behaviour where file locking is unsupported (default [`LockingMode::Required`]).
    pub fn locking(mut self, locking: LockingMode) -> Self {
        self.config.locking = locking;
        self
    }

    /// Bounds the total size of entry files; after each publish the least recently used entries
    /// are evicted until the total fits (the entry just published is kept). Default: unbounded.
    pub fn max_disk_bytes(mut self, bytes: Option<u64>) -> Self {
        self.config.max_disk_bytes = bytes;
        self
    }

    /// Bytes of artifacts kept in memory, least recently used dropped first; 0 disables the
    /// memory tier. Default 1 GiB.
    pub fn memory_budget_bytes(mut self, bytes: u64) -> Self {
        self.config.memory_budget_bytes = bytes;
        self
    }

    /// A temp file whose writer is gone is removed once it is older than this, by a process
    /// holding the entry's lock or by [`gc`](crate::CompileCache::gc). Default 10 minutes: a live
    /// writer touches its temp file with every write, and holds the lock while it does.
    pub fn stale_temp_age(mut self, age: Duration) -> Self {
        self.config.stale_temp_age = age;
        self
    }

    /// How stale an entry's recorded last use (its access time, which saggar sets explicitly on
    /// each disk hit) may get before a hit refreshes it; bounds metadata writes on hot entries.
    /// Default 60 s. LRU eviction orders entries by this time.
    pub fn touch_interval(mut self, interval: Duration) -> Self {
        self.config.touch_interval = interval;
        self
    }

    /// Threads used to read and checksum one large entry (default: available cores, at most 4).
    pub fn load_threads(mut self, threads: usize) -> Self {
        self.config.load_threads = threads.max(1);
        self
    }

    /// Installs a failure injector (tests only; see [`FaultInjector`]).
    #[cfg(feature = "failpoints")]
    #[cfg_attr(docsrs, doc(cfg(feature = "failpoints")))]
    pub fn fault_injector(mut self, injector: Arc<dyn FaultInjector>) -> Self {
        self.config.faults = Some(injector);
        self
    }

    /// Finishes the configuration.
    pub fn build(self) -> CacheConfig {
        self.config
    }
}
