//! Failure injection: a hook that tests install in the configuration to make a step fail, stall
//! or kill the process, so crash and disk-full behaviour is tested rather than hoped for.
//!
//! The hook is public only with the `failpoints` feature (tests enable it through a
//! dev-dependency); without it no injector can be installed. Production code pays one `Option`
//! check per step: with no injector configured nothing else runs. There is no global state; each
//! cache carries its own injector.

use std::fmt;
use std::io;
use std::path::Path;

/// A step at which a [`FaultInjector`] is consulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultPoint {
    /// Before `flock` on a lock file (`path` is the lock file). An error here is treated as the
    /// error `flock` would have returned (for example `ENOLCK` to simulate a filesystem without
    /// locking).
    LockAcquire,
    /// Before the temp file is created (`path` is the temp file). An error simulates a read-only
    /// or full directory.
    PublishCreateTemp,
    /// The temp file exists and is empty (`path` is the temp file).
    PublishBeforeWrite,
    /// The header and half of the payload are written (`path` is the temp file). An error
    /// simulates `ENOSPC`/`EIO` during the write.
    PublishMidWrite,
    /// The temp file is complete and `fsync`ed but not yet renamed (`path` is the temp file).
    PublishAfterFsync,
    /// The entry has been renamed into place; the directory is not yet `fsync`ed (`path` is the
    /// entry). An error is treated as a failed directory `fsync`.
    PublishAfterRename,
    /// A reader has opened an entry and checked its metadata, and has not read anything yet
    /// (`path` is the entry).
    LoadOpened,
}

/// Test hook consulted at each [`FaultPoint`]. Returning an error makes that step fail with it;
/// the hook may also block (to widen a race) or end the process (to simulate a crash).
pub trait FaultInjector: Send + Sync + fmt::Debug {
    /// Called at `point` for `path`.
    fn inject(&self, point: FaultPoint, path: &Path) -> io::Result<()>;
}
