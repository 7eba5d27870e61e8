//! The three locks of the miss path, always taken in this order and released in reverse:
//!
//! 1. the per-key in-process lock ([`KeyLocks`]),
//! 2. the cross-process lock on `<entry>.lock` ([`FileLock`]),
//! 3. the process-wide compile lock ([`CompileGuard`]).
//!
//! Nobody waits for a lower-numbered lock while holding a higher one. The only code that runs
//! while the compile lock is held is the caller's compile closure; a cache call from inside it
//! is refused with [`CacheError::Reentrant`](crate::CacheError::Reentrant) instead of
//! deadlocking, which enforces the order at run time.

use std::cell::Cell;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::fault::{FaultInjector, FaultPoint};
use crate::key::EntryId;

/// Registry of per-key in-process locks.
///
/// A slot exists only while some thread holds or waits for that key: the last guard to leave
/// removes it, so the registry's size is bounded by the number of keys in flight, not by the
/// number of keys ever seen.
#[derive(Debug, Default)]
pub(crate) struct KeyLocks {
    slots: Mutex<HashMap<EntryId, Arc<KeySlot>>>,
}

#[derive(Debug, Default)]
struct KeySlot {
    busy: Mutex<bool>,
    freed: Condvar,
}

/// Holds one key's in-process lock; releasing it also prunes the registry.
#[derive(Debug)]
pub(crate) struct KeyGuard<'a> {
    registry: &'a KeyLocks,
    id: EntryId,
    slot: Arc<KeySlot>,
}

impl KeyLocks {
    fn slot(&self, id: EntryId) -> Arc<KeySlot> {
        // Clones of a slot are only made under the registry lock; `KeyGuard::drop` relies on it.
        self.slots.lock().entry(id).or_default().clone()
    }

    /// Blocks until `id` is free. Returns the guard and whether another thread held it.
    pub(crate) fn lock(&self, id: EntryId) -> (KeyGuard<'_>, bool) {
        let slot = self.slot(id);
        let mut busy = slot.busy.lock();
        let waited = *busy;
        while *busy {
            slot.freed.wait(&mut busy);
        }
        *busy = true;
        drop(busy);
        (KeyGuard { registry: self, id, slot }, waited)
    }

    /// Takes `id` if it is free.
    pub(crate) fn try_lock(&self, id: EntryId) -> Option<KeyGuard<'_>> {
        let slot = self.slot(id);
        let acquired = {
            let mut busy = slot.busy.lock();
            !std::mem::replace(&mut *busy, true)
        };
        if acquired {
            Some(KeyGuard { registry: self, id, slot })
        } else {
            // The holder keeps its slot alive; this only drops the entry if it is idle.
            self.prune(id, &slot);
            None
        }
    }

    /// Number of keys with a lock held or awaited.
    pub(crate) fn len(&self) -> usize {
        self.slots.lock().len()
    }
}

impl KeyLocks {
    fn prune(&self, id: EntryId, slot: &Arc<KeySlot>) {
        let mut slots = self.slots.lock();
        // Under the registry lock nobody can clone the slot, so a count of 2 (the map's and
        // ours) means no other thread holds or waits for it.
        if Arc::strong_count(slot) == 2 {
            slots.remove(&id);
        }
    }
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        *self.slot.busy.lock() = false;
        self.slot.freed.notify_one();
        self.registry.prune(self.id, &self.slot);
    }
}

static COMPILE_LOCK: Mutex<()> = parking_lot::const_mutex(());

thread_local! {
    static IN_COMPILE: Cell<bool> = const { Cell::new(false) };
}

/// Holds the process-wide compile lock and marks this thread as compiling.
#[derive(Debug)]
pub(crate) struct CompileGuard {
    _guard: parking_lot::MutexGuard<'static, ()>,
}

impl CompileGuard {
    pub(crate) fn acquire() -> CompileGuard {
        let guard = COMPILE_LOCK.lock();
        IN_COMPILE.with(|c| c.set(true));
        CompileGuard { _guard: guard }
    }
}

impl Drop for CompileGuard {
    fn drop(&mut self) {
        IN_COMPILE.with(|c| c.set(false));
    }
}

/// Whether this thread holds the compile lock (and so must not take a per-key lock).
pub(crate) fn in_compile() -> bool {
    IN_COMPILE.with(Cell::get)
}

/// Runs `f` while holding saggar's process-wide compile lock, the same lock
/// [`CompileCache::get_or_compile`](crate::CompileCache::get_or_compile) holds around its
/// compile closure. Use it for compiler calls that do not go through a cache, so that at most
/// one compile runs in the process at a time. Cache calls from inside `f` that would take a lock
/// fail with [`CacheError::Reentrant`](crate::CacheError::Reentrant). Called on a thread that
/// already holds the lock (from inside a compile closure), it just runs `f`.
pub fn with_compile_lock<R>(f: impl FnOnce() -> R) -> R {
    if in_compile() {
        return f();
    }
    let _guard = CompileGuard::acquire();
    f()
}

/// An exclusive `flock` on a lock file, released when dropped (or when the process dies).
#[derive(Debug)]
pub(crate) struct FileLock {
    file: File,
    path: PathBuf,
}

impl FileLock {
    /// Deletes the lock file while holding it. Safe because every locker checks, after
    /// locking, that the path still names the inode it locked, and retries otherwise.
    pub(crate) fn remove_file(self) {
        if let Err(e) = std::fs::remove_file(&self.path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::debug!(path = %self.path.display(), error = %e, "could not remove lock file");
        }
        // Dropping `self` unlocks, then closes.
    }
}

impl Drop for FileLock {
    /// Unlocks explicitly before the descriptor closes. Closing alone is not enough: a child process
    /// forked by any thread of this process shares the open file description until it execs, and
    /// an `flock` lives as long as any descriptor of it does, so the lock would outlive this guard.
    fn drop(&mut self) {
        if let Err(e) = <File as fs4::FileExt>::unlock(&self.file) {
            tracing::warn!(path = %self.path.display(), error = %e, "could not unlock cache lock file");
        }
    }
}

/// Why a lock file could not be locked.
#[derive(Debug)]
pub(crate) enum LockFailure {
    /// `flock` is not supported here.
    Unsupported(io::Error),
    /// The lock file cannot be created (read-only or foreign directory).
    CannotCreate(io::Error),
    /// Anything else.
    Other(io::Error),
}

fn classify(e: io::Error) -> LockFailure {
    match e.raw_os_error() {
        Some(libc::ENOLCK | libc::EOPNOTSUPP | libc::ENOSYS) => LockFailure::Unsupported(e),
        #[allow(unreachable_patterns)] // ENOTSUP == EOPNOTSUPP on Linux, not everywhere.
        Some(libc::ENOTSUP) => LockFailure::Unsupported(e),
        Some(libc::EACCES | libc::EROFS | libc::EPERM) => LockFailure::CannotCreate(e),
        _ => LockFailure::Other(e),
    }
}

/// Takes an exclusive lock on `path`, creating the file if needed. With `blocking == false`
/// returns `Ok(None)` when another holder has it. The `bool` is whether it had to wait.
pub(crate) fn lock_file(
    path: &Path,
    mode: u32,
    faults: Option<&Arc<dyn FaultInjector>>,
    blocking: bool,
) -> Result<Option<(FileLock, bool)>, LockFailure> {
    let mut waited = false;
    loop {
        if let Some(f) = faults {
            f.inject(FaultPoint::LockAcquire, path).map_err(classify)?;
        }
        let file = open_lock_file(path, mode).map_err(classify)?;
        match <File as fs4::FileExt>::try_lock(&file) {
            Ok(()) => {}
            Err(fs4::TryLockError::WouldBlock) => {
                if !blocking {
                    return Ok(None);
                }
                waited = true;
                <File as fs4::FileExt>::lock(&file).map_err(classify)?;
            }
            Err(fs4::TryLockError::Error(e)) => return Err(classify(e)),
        }
        // The file may have been deleted (by a holder) between our open and our lock; then we
        // hold a lock on an orphaned inode that nobody else will ever see. Retry on a fresh one.
        let held = file.metadata().map_err(LockFailure::Other)?;
        match std::fs::metadata(path) {
            Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                return Ok(Some((FileLock { file, path: path.to_owned() }, waited)));
            }
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(LockFailure::Other(e)),
        }
    }
}

/// Opens (creating if needed) a lock file without following a final symbolic link and without
/// blocking on a special file, then checks on the descriptor that it is a regular file.
fn open_lock_file(path: &Path, mode: u32) -> io::Result<File> {
    let flags = libc::O_NOFOLLOW | libc::O_NONBLOCK;
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(mode)
        .custom_flags(flags)
        .open(path)
    {
        Ok(f) => f,
        // A lock file made by another user of a shared directory: `flock` needs only a
        // read-only descriptor.
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            OpenOptions::new().read(true).custom_flags(flags).open(path).map_err(|_| e)?
        }
        Err(e) => return Err(e),
    };
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "the lock file is not a regular file"));
    }
    Ok(file)
}

/// Checks that `flock` works in `dir` by taking and releasing a shared lock on `lock_path`.
pub(crate) fn probe(lock_path: &Path, mode: u32, faults: Option<&Arc<dyn FaultInjector>>) -> Result<(), LockFailure> {
    if let Some(f) = faults {
        f.inject(FaultPoint::LockAcquire, lock_path).map_err(classify)?;
    }
    let file = open_lock_file(lock_path, mode).map_err(classify)?;
    <File as fs4::FileExt>::lock_shared(&file).map_err(classify)?;
    <File as fs4::FileExt>::unlock(&file).map_err(classify)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn id(n: u8) -> EntryId {
        let hex: String = std::iter::repeat_n(format!("{n:02x}"), 16).collect();
        hex.parse().unwrap()
    }

    /// A child forked while a lock is held (any thread's `Command::spawn` does this; the child holds
    /// every descriptor until it execs) must not keep the lock alive after the guard is dropped.
    #[test]
    fn a_dropped_file_lock_is_free_even_while_a_forked_child_shares_its_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("entry.sce.lock");
        let (held, _) = lock_file(&path, 0o644, None, false).unwrap().unwrap();
        // SAFETY: the child calls only async-signal-safe functions (sleep, _exit) before exiting.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            // SAFETY: async-signal-safe calls only, see above.
            unsafe {
                libc::sleep(3);
                libc::_exit(0);
            }
        }
        drop(held);
        let again = lock_file(&path, 0o644, None, false).unwrap();
        let mut status = 0;
        // SAFETY: `child` is our own child process; `status` is a valid out-pointer.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, &mut status, 0);
        }
        assert!(again.is_some(), "the lock stayed held by the forked child's copy of the descriptor");
    }

    #[test]
    fn registry_is_empty_when_nothing_is_in_flight() {
        let locks = KeyLocks::default();
        for n in 0..200 {
            let (g, waited) = locks.lock(id(n as u8));
            assert!(!waited);
            assert_eq!(locks.len(), 1);
            drop(g);
        }
        assert_eq!(locks.len(), 0);
        let g = locks.try_lock(id(1)).unwrap();
        assert!(locks.try_lock(id(1)).is_none());
        assert_eq!(locks.len(), 1);
        drop(g);
        assert_eq!(locks.len(), 0);
    }

    #[test]
    fn key_lock_excludes_and_counts_waiters() {
        let locks = KeyLocks::default();
        let inside = AtomicUsize::new(0);
        let waits = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let (g, waited) = locks.lock(id(7));
                    if waited {
                        waits.fetch_add(1, Ordering::Relaxed);
                    }
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                    std::thread::sleep(Duration::from_millis(5));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    drop(g);
                });
            }
        });
        assert!(waits.load(Ordering::Relaxed) >= 1);
        assert_eq!(locks.len(), 0);
    }

    #[test]
    fn file_lock_survives_deletion_by_its_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let (held, _) = lock_file(&path, 0o600, None, true).unwrap().unwrap();
        assert!(lock_file(&path, 0o600, None, false).unwrap().is_none());
        std::thread::scope(|s| {
            let waiter = s.spawn(|| lock_file(&path, 0o600, None, true).unwrap().unwrap());
            std::thread::sleep(Duration::from_millis(50));
            held.remove_file();
            let (got, _) = waiter.join().unwrap();
            // The waiter must hold the lock on the file that now exists at the path.
            let at_path = std::fs::metadata(&path).unwrap();
            assert_eq!(got.file.metadata().unwrap().ino(), at_path.ino());
            assert!(lock_file(&path, 0o600, None, false).unwrap().is_none());
        });
    }

    #[test]
    fn reentrancy_flag_follows_the_compile_guard() {
        assert!(!in_compile());
        with_compile_lock(|| {
            assert!(in_compile());
            // Nested use on the holding thread must not deadlock, nor release the lock early.
            with_compile_lock(|| assert!(in_compile()));
            assert!(in_compile());
        });
        assert!(!in_compile());
    }
}
