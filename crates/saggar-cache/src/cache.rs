//! [`CompileCache`]: memory, then disk, then compile, with the locking protocol of the crate
//! documentation.

use std::fs::{self, DirBuilder, File, FileTimes, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use crate::config::{CacheConfig, DirTrust, LockingMode};
use crate::error::{CacheError, Corruption, io_err};
use crate::fault::{FaultInjector, FaultPoint};
use crate::format::{self, ReadFailure};
use crate::key::{CacheKey, EntryId};
use crate::layout;
use crate::locks::{self, CompileGuard, FileLock, KeyGuard, KeyLocks, LockFailure};
use crate::memory::{Artifact, MemoryTier};
use crate::publish::{self, Publisher};
use crate::stats::{Stats, StatsSnapshot};

/// Where a [`Fetched`] artifact came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Origin {
    /// The memory tier, without waiting.
    Memory,
    /// A verified disk entry, without waiting.
    Disk,
    /// Another thread or process was compiling this key; this lookup waited for it and then
    /// loaded its result.
    AfterWait,
    /// Compiled by this call and published.
    Compiled,
    /// Compiled by this call; publishing failed (logged and counted), so only this process has it.
    CompiledUnpublished,
}

/// What a compile on a cache miss excludes besides other compiles of the same key (which the
/// per-key and cross-process locks always exclude).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CompileExclusion {
    /// Every other compile in the process: the process-wide compile lock is held around it.
    #[default]
    Process,
    /// Nothing more: compiles of different keys run in parallel (thread-safe compilers).
    Key,
}

/// The result of [`CompileCache::get_or_compile`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Fetched {
    /// The artifact bytes.
    pub artifact: Artifact,
    /// Where they came from.
    pub origin: Origin,
}

/// A compile cache over one directory: compile once, load everywhere.
///
/// # Thread safety
///
/// `CompileCache` is `Send + Sync`; share it (for example in an `Arc`) between all threads of a
/// process. Several instances over the same directory, in one process or many, coordinate
/// through lock files; only counters and the memory tier are per instance.
#[derive(Debug)]
pub struct CompileCache {
    pub(crate) config: CacheConfig,
    pub(crate) file_mode: u32,
    euid: u32,
    pub(crate) key_locks: KeyLocks,
    pub(crate) memory: MemoryTier,
    pub(crate) stats: Stats,
    /// Cross-process locking was found unsupported and abandoned (only under `BestEffort`).
    unlocked: AtomicBool,
    warned_cannot_lock: AtomicBool,
}

/// Outcome of reading an entry from disk.
#[derive(Debug)]
pub(crate) enum DiskRead {
    Hit(Artifact),
    Missing,
    Corrupt(Corruption),
}

/// The per-key lock and, where locking works, the cross-process lock of one entry. Fields drop
/// in declaration order, so the file lock is released before the per-key lock: the reverse of
/// the order they were taken in.
#[derive(Debug)]
pub(crate) struct Held<'a> {
    pub(crate) file: Option<FileLock>,
    pub(crate) waited: bool,
    _key: KeyGuard<'a>,
}

fn current_euid() -> u32 {
    // SAFETY: geteuid has no preconditions, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

impl CompileCache {
    /// Opens (creating if needed) the cache directory of `config`.
    ///
    /// Checks the directory's trust (see [`DirTrust`]) and that file locking works (see
    /// [`LockingMode`]).
    pub fn open(config: CacheConfig) -> Result<CompileCache, CacheError> {
        let (dir_mode, file_mode) = match config.trust {
            DirTrust::OwnerOnly => (0o700, 0o600),
            DirTrust::SharedTrusted => (0o775, 0o644),
        };
        let dir = config.dir.clone();
        match fs::metadata(&dir) {
            Ok(m) if !m.is_dir() => return Err(CacheError::NotADirectory { path: dir }),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let create = |e| CacheError::CreateDir { path: dir.clone(), source: e };
                if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                    fs::create_dir_all(parent).map_err(create)?;
                }
                match DirBuilder::new().mode(dir_mode).create(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(create(e)),
                }
            }
            Err(e) => {
                return Err(CacheError::CreateDir { path: dir, source: e });
            }
        }
        let cache = CompileCache {
            memory: MemoryTier::new(config.memory_budget_bytes),
            config,
            file_mode,
            euid: current_euid(),
            key_locks: KeyLocks::default(),
            stats: Stats::default(),
            unlocked: AtomicBool::new(false),
            warned_cannot_lock: AtomicBool::new(false),
        };
        cache.check_dir_trust()?;
        cache.probe_locking()?;
        Ok(cache)
    }

    /// The configuration.
    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.config.dir
    }

    /// Path of the entry file for `key` (it may not exist).
    pub fn entry_path(&self, key: &CacheKey) -> PathBuf {
        self.entry_path_of(key.id())
    }

    pub(crate) fn entry_path_of(&self, id: EntryId) -> PathBuf {
        self.config.dir.join(layout::entry_name(id))
    }

    /// A copy of the counters.
    pub fn stats(&self) -> StatsSnapshot {
        let mut s = self.stats.snapshot();
        s.keys_in_flight = self.key_locks.len() as u64;
        (s.memory_entries, s.memory_bytes) = self.memory.usage();
        s
    }

    /// Returns the artifact for `key`: from memory, else from a verified disk entry, else by
    /// calling `compile` once and publishing its output.
    ///
    /// Concurrent calls for one key, in any number of threads and processes sharing the
    /// directory, run `compile` once; the others wait and load the published entry. Compiles of
    /// different keys are serialised by the process-wide compile lock. A corrupt entry is
    /// evicted and recompiled. If publishing fails (disk full, read-only directory) the
    /// artifact is still returned, with [`Origin::CompiledUnpublished`], and the failure is
    /// logged and counted.
    ///
    /// `compile` runs with the compile lock held and must not call back into a cache (such a
    /// call fails with [`CacheError::Reentrant`]). If it panics, the locks are released and the
    /// panic propagates; nothing is published.
    pub fn get_or_compile<F, E>(&self, key: &CacheKey, compile: F) -> Result<Fetched, CacheError>
    where
        F: FnOnce() -> Result<Vec<u8>, E>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.get_or_compile_with(key, CompileExclusion::Process, compile)
    }

    /// [`CompileCache::get_or_compile`] with the choice of what else `compile` excludes:
    /// [`CompileExclusion::Process`] is `get_or_compile`; [`CompileExclusion::Key`] takes only the
    /// key's locks (in-process and cross-process), so misses of different keys compile in parallel.
    /// Use it only for a compiler that is safe to run on several threads at once.
    pub fn get_or_compile_with<F, E>(
        &self,
        key: &CacheKey,
        exclusion: CompileExclusion,
        compile: F,
    ) -> Result<Fetched, CacheError>
    where
        F: FnOnce() -> Result<Vec<u8>, E>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        Stats::bump(&self.stats.lookups);
        let id = key.id();
        if let Some(artifact) = self.memory.get(id) {
            Stats::bump(&self.stats.memory_hits);
            return Ok(Fetched { artifact, origin: Origin::Memory });
        }
        // Entries are only ever published by rename, so a lock-free read sees a complete old
        // or new file. A corrupt one is left for the locked path below to evict.
        if let DiskRead::Hit(artifact) = self.load_disk(key)? {
            Stats::bump(&self.stats.disk_loads);
            self.memory.insert(id, &artifact);
            return Ok(Fetched { artifact, origin: Origin::Disk });
        }

        let held = self.lock_entry(id)?;
        if held.file.is_none() {
            Stats::bump(&self.stats.unlocked_misses);
        }
        let after = |origin| if held.waited { Origin::AfterWait } else { origin };
        // Double-checked load: a thread or process we waited for may have published it.
        if let Some(artifact) = self.memory.get(id) {
            Stats::bump(&self.stats.memory_hits);
            self.count_wait_hit(&held);
            return Ok(Fetched { artifact, origin: after(Origin::Memory) });
        }
        match self.load_disk(key)? {
            DiskRead::Hit(artifact) => {
                Stats::bump(&self.stats.disk_loads);
                self.count_wait_hit(&held);
                self.memory.insert(id, &artifact);
                return Ok(Fetched { artifact, origin: after(Origin::Disk) });
            }
            DiskRead::Corrupt(reason) => self.evict_corrupt(&self.entry_path_of(id), id, &reason),
            DiskRead::Missing => {}
        }
        if held.file.is_some() {
            self.remove_stale_temps_of(id);
        }

        let compiled = {
            let _compile = match exclusion {
                CompileExclusion::Process => Some(CompileGuard::acquire()),
                CompileExclusion::Key => None,
            };
            Stats::bump(&self.stats.compiles);
            compile()
        };
        let bytes = compiled.map_err(|e| {
            Stats::bump(&self.stats.compile_failures);
            CacheError::Compile { id, source: e.into() }
        })?;
        let artifact = Artifact::from(bytes);
        let origin = match self.publisher().publish(key, &artifact) {
            Ok(_) => {
                Stats::bump(&self.stats.publishes);
                Origin::Compiled
            }
            Err(e) => {
                Stats::bump(&self.stats.publish_failures);
                tracing::warn!(
                    path = %self.entry_path_of(id).display(),
                    key = %key,
                    error = %e,
                    "could not publish compiled artifact; returning it unpublished, previous entry (if any) unchanged"
                );
                Origin::CompiledUnpublished
            }
        };
        self.memory.insert(id, &artifact);
        drop(held);
        if origin == Origin::Compiled {
            self.enforce_size_bound(Some(id));
        }
        Ok(Fetched { artifact, origin })
    }

    /// Returns the artifact for `key` from memory or a verified disk entry, without compiling.
    /// A corrupt entry is evicted (under the entry's locks) and reported as a miss.
    pub fn get(&self, key: &CacheKey) -> Result<Option<Artifact>, CacheError> {
        Ok(self.lookup(key)?.map(|fetched| fetched.artifact))
    }

    /// Like [`CompileCache::get`], and says which tier answered ([`Origin::Memory`] or
    /// [`Origin::Disk`]).
    pub fn lookup(&self, key: &CacheKey) -> Result<Option<Fetched>, CacheError> {
        Stats::bump(&self.stats.lookups);
        if let Some(artifact) = self.memory.get(key.id()) {
            Stats::bump(&self.stats.memory_hits);
            return Ok(Some(Fetched { artifact, origin: Origin::Memory }));
        }
        let found = self.read_disk_counted(key)?;
        if let Some(a) = &found {
            self.memory.insert(key.id(), a);
        }
        Ok(found.map(|artifact| Fetched { artifact, origin: Origin::Disk }))
    }

    /// Reads and verifies the disk entry for `key`, bypassing the memory tier (neither read
    /// nor filled). A corrupt entry is evicted and reported as a miss.
    pub fn read_disk(&self, key: &CacheKey) -> Result<Option<Artifact>, CacheError> {
        Stats::bump(&self.stats.lookups);
        self.read_disk_counted(key)
    }

    fn read_disk_counted(&self, key: &CacheKey) -> Result<Option<Artifact>, CacheError> {
        let found = match self.load_disk(key)? {
            DiskRead::Hit(a) => Some(a),
            DiskRead::Missing => None,
            DiskRead::Corrupt(_) => {
                // Re-read under the locks so that an entry republished meanwhile is not evicted.
                let _held = self.lock_entry(key.id())?;
                match self.load_disk(key)? {
                    DiskRead::Hit(a) => Some(a),
                    DiskRead::Missing => None,
                    DiskRead::Corrupt(reason) => {
                        self.evict_corrupt(&self.entry_path(key), key.id(), &reason);
                        None
                    }
                }
            }
        };
        if found.is_some() {
            Stats::bump(&self.stats.disk_loads);
        }
        Ok(found)
    }

    /// Publishes `artifact` as the entry for `key` (pre-seeding from a compiler run elsewhere),
    /// replacing any existing entry atomically. Unlike a miss in
    /// [`get_or_compile`](Self::get_or_compile), a publish failure is an error here.
    pub fn put(&self, key: &CacheKey, artifact: Vec<u8>) -> Result<Artifact, CacheError> {
        let id = key.id();
        let held = self.lock_entry(id)?;
        let artifact = Artifact::from(artifact);
        self.publish_locked(key, &artifact)?;
        self.memory.insert(id, &artifact);
        drop(held);
        self.enforce_size_bound(Some(id));
        Ok(artifact)
    }

    pub(crate) fn publish_locked(&self, key: &CacheKey, artifact: &[u8]) -> Result<(), CacheError> {
        match self.publisher().publish(key, artifact) {
            Ok(_) => {
                Stats::bump(&self.stats.publishes);
                Ok(())
            }
            Err(e) => {
                Stats::bump(&self.stats.publish_failures);
                let path = self.entry_path(key);
                tracing::warn!(path = %path.display(), error = %e, "could not publish cache entry");
                Err(CacheError::Publish { path, source: e })
            }
        }
    }

    /// Removes the entry for `key` from memory and disk. Returns whether a disk entry existed.
    /// Readers that already opened it finish reading it normally.
    pub fn evict(&self, key: &CacheKey) -> Result<bool, CacheError> {
        let id = key.id();
        let mut held = self.lock_entry(id)?;
        self.memory.remove(id);
        let path = self.entry_path_of(id);
        let existed = match fs::remove_file(&path) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(io_err("removing cache entry", path, e)),
        };
        if let Some(lock) = held.file.take() {
            lock.remove_file();
        }
        Ok(existed)
    }

    pub(crate) fn publisher(&self) -> Publisher<'_> {
        Publisher {
            dir: &self.config.dir,
            file_mode: self.file_mode,
            faults: self.faults(),
            threads: self.config.load_threads,
            stats: &self.stats,
        }
    }

    pub(crate) fn faults(&self) -> Option<&Arc<dyn FaultInjector>> {
        self.config.faults.as_ref()
    }

    fn count_wait_hit(&self, held: &Held<'_>) {
        if held.waited {
            Stats::bump(&self.stats.loads_after_wait);
        }
    }

    /// Takes the per-key lock, then the entry's lock file, blocking.
    pub(crate) fn lock_entry(&self, id: EntryId) -> Result<Held<'_>, CacheError> {
        if locks::in_compile() {
            return Err(CacheError::Reentrant { id });
        }
        let (key, waited) = self.key_locks.lock(id);
        if waited {
            Stats::bump(&self.stats.compile_waits);
        }
        let (file, file_waited) = match self.lock_file_of(id, true)? {
            FileState::Locked(lock, w) => (Some(lock), w),
            FileState::Unlocked => (None, false),
            FileState::Busy => unreachable!("a blocking lock is never busy"),
        };
        if file_waited {
            Stats::bump(&self.stats.compile_waits);
        }
        Ok(Held { _key: key, file, waited: waited || file_waited })
    }

    /// Takes the per-key lock and the entry's lock file if both are free.
    pub(crate) fn try_lock_entry(&self, id: EntryId) -> Result<Option<Held<'_>>, CacheError> {
        if locks::in_compile() {
            return Err(CacheError::Reentrant { id });
        }
        let Some(key) = self.key_locks.try_lock(id) else {
            return Ok(None);
        };
        let file = match self.lock_file_of(id, false)? {
            FileState::Locked(lock, _) => Some(lock),
            FileState::Unlocked => None,
            FileState::Busy => return Ok(None),
        };
        Ok(Some(Held { _key: key, file, waited: false }))
    }

    fn lock_file_of(&self, id: EntryId, blocking: bool) -> Result<FileState, CacheError> {
        if self.unlocked.load(Ordering::Relaxed) {
            return Ok(FileState::Unlocked);
        }
        let path = self.config.dir.join(layout::lock_name(id));
        match locks::lock_file(&path, self.file_mode, self.faults(), blocking) {
            Ok(Some((lock, waited))) => Ok(FileState::Locked(lock, waited)),
            Ok(None) => Ok(FileState::Busy),
            Err(LockFailure::Unsupported(e)) => {
                self.locking_unsupported(&path, e)?;
                Ok(FileState::Unlocked)
            }
            Err(LockFailure::CannotCreate(e)) => {
                if !self.warned_cannot_lock.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        path = %path.display(),
                        error = %e,
                        "cannot create cache lock files (read-only directory?); misses compile \
                         without cross-process coordination and will not be published"
                    );
                }
                Ok(FileState::Unlocked)
            }
            Err(LockFailure::Other(e)) => Err(CacheError::Lock { path, source: e }),
        }
    }

    fn locking_unsupported(&self, path: &Path, e: io::Error) -> Result<(), CacheError> {
        match self.config.locking {
            LockingMode::Required => Err(CacheError::LockingUnsupported { path: path.to_owned(), source: e }),
            LockingMode::BestEffort => {
                if !self.unlocked.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        dir = %self.config.dir.display(),
                        error = %e,
                        "file locking is not supported here; running without cross-process locks \
                         (LockingMode::BestEffort): processes may compile the same key twice, \
                         publishing stays atomic"
                    );
                }
                Ok(())
            }
        }
    }

    fn probe_locking(&self) -> Result<(), CacheError> {
        let path = self.config.dir.join(layout::PROBE_LOCK_NAME);
        match locks::probe(&path, self.file_mode, self.faults()) {
            Ok(()) | Err(LockFailure::CannotCreate(_)) => Ok(()),
            Err(LockFailure::Unsupported(e)) => self.locking_unsupported(&path, e),
            Err(LockFailure::Other(e)) => Err(CacheError::Lock { path, source: e }),
        }
    }

    pub(crate) fn check_dir_trust(&self) -> Result<(), CacheError> {
        let dir = &self.config.dir;
        let meta = fs::metadata(dir).map_err(|e| io_err("inspecting cache directory", dir, e))?;
        if self.config.trust == DirTrust::OwnerOnly && !self.trusted(&meta) {
            return Err(CacheError::UntrustedDirectory {
                path: dir.clone(),
                mode: meta.mode() & 0o7777,
                owner: meta.uid(),
            });
        }
        Ok(())
    }

    fn trusted(&self, meta: &Metadata) -> bool {
        meta.mode() & 0o022 == 0 && (meta.uid() == self.euid || meta.uid() == 0)
    }

    /// Checks an opened entry's metadata against the trust setting.
    pub(crate) fn check_entry_trust(&self, path: &Path, id: EntryId, meta: &Metadata) -> Result<(), CacheError> {
        if self.config.trust == DirTrust::OwnerOnly && !self.trusted(meta) {
            Stats::bump(&self.stats.untrusted_refused);
            tracing::warn!(path = %path.display(), mode = meta.mode() & 0o7777, owner = meta.uid(),
                "refusing to load a cache entry other users can write");
            return Err(CacheError::UntrustedEntry {
                path: path.to_owned(),
                id,
                mode: meta.mode() & 0o7777,
                owner: meta.uid(),
            });
        }
        Ok(())
    }

    /// Reads and fully verifies the entry for `key`.
    pub(crate) fn load_disk(&self, key: &CacheKey) -> Result<DiskRead, CacheError> {
        let id = key.id();
        let path = self.entry_path_of(id);
        let (file, meta) = match open_entry(&path) {
            Ok(Opened::Regular(file, meta)) => (file, meta),
            Ok(Opened::Missing) => return Ok(DiskRead::Missing),
            Ok(Opened::NotRegular(_)) => return Ok(DiskRead::Corrupt(Corruption::NotARegularFile)),
            Err(e) => return Err(io_err("opening cache entry", path, e)),
        };
        self.check_entry_trust(&path, id, &meta)?;
        if let Some(f) = self.faults() {
            f.inject(FaultPoint::LoadOpened, &path).map_err(|e| io_err("reading cache entry", &path, e))?;
        }
        let read = format::read_header(&file, meta.len()).and_then(|header| {
            if header.key.canonical_text() != key.canonical_text() {
                return Err(ReadFailure::Corrupt(Corruption::KeyMismatch { found: header.key.id() }));
            }
            format::read_payload(&file, &header, meta.len(), self.config.load_threads)
        });
        match read {
            Ok(bytes) => {
                self.touch(&file, &meta);
                Ok(DiskRead::Hit(Artifact::from(bytes)))
            }
            Err(ReadFailure::Corrupt(c)) => Ok(DiskRead::Corrupt(c)),
            Err(ReadFailure::Io(e)) => Err(io_err("reading cache entry", path, e)),
        }
    }

    /// Records a use for LRU eviction by setting the entry's access time, at most once per
    /// `touch_interval`.
    fn touch(&self, file: &File, meta: &Metadata) {
        let now = SystemTime::now();
        let stale = meta
            .accessed()
            .ok()
            .and_then(|a| now.duration_since(a).ok())
            .is_none_or(|age| age >= self.config.touch_interval);
        if stale && let Err(e) = file.set_times(FileTimes::new().set_accessed(now)) {
            tracing::debug!(error = %e, "could not record cache entry use");
        }
    }

    pub(crate) fn evict_corrupt(&self, path: &Path, id: EntryId, reason: &Corruption) {
        match fs::remove_file(path) {
            Ok(()) => {
                Stats::bump(&self.stats.corrupt_evicted);
                tracing::warn!(path = %path.display(), id = %id, reason = %reason,
                    "evicted corrupt cache entry; it will be recompiled");
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), id = %id, reason = %reason, error = %e,
                    "could not evict corrupt cache entry");
            }
        }
    }

    /// Removes temp files of dead writers of `id`; the caller holds its lock file.
    fn remove_stale_temps_of(&self, id: EntryId) {
        match publish::stale_temps(&self.config.dir, Some(id), self.config.stale_temp_age) {
            Ok(temps) => {
                for (_, path) in temps {
                    if publish::remove_stale_temp(&path) {
                        Stats::bump(&self.stats.stale_temps_removed);
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "could not scan for stale temp files"),
        }
    }
}

enum FileState {
    Locked(FileLock, bool),
    Busy,
    Unlocked,
}

/// A file of the cache directory or of an import, opened by [`open_entry`].
pub(crate) enum Opened {
    /// A regular file, with the metadata of the open descriptor.
    Regular(File, Metadata),
    /// Something else: a symbolic link (`None`: not opened), a FIFO, a device, a directory.
    NotRegular(Option<Metadata>),
    /// Nothing at that path.
    Missing,
}

/// Opens a file for reading without following a final symbolic link and without blocking (a
/// FIFO with no writer would otherwise block the open forever), then checks the file type on
/// the open descriptor, so what is read is the file that was checked. Every read of an entry or
/// of an import goes through here.
pub(crate) fn open_entry(path: &Path) -> io::Result<Opened> {
    let file = match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Opened::Missing),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(Opened::NotRegular(None)),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    Ok(if meta.is_file() { Opened::Regular(file, meta) } else { Opened::NotRegular(Some(meta)) })
}
