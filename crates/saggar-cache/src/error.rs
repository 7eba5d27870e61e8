//! Typed errors: what went wrong, where (path, key), and what the caller can do about it.

use std::io;
use std::path::PathBuf;

use crate::key::{EntryId, KeyError};

/// Everything a cache operation can fail with.
///
/// Variants name the path and, where there is one, the entry id, and their messages say what to
/// do. A failure to *publish* during [`get_or_compile`](crate::CompileCache::get_or_compile) is
/// not an error (the compiled artifact is still returned; the failure is logged and counted), but
/// it is one for the explicit [`put`](crate::CompileCache::put) and imports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// The key is invalid.
    #[error(transparent)]
    InvalidKey(#[from] KeyError),

    /// The cache directory could not be created or opened.
    #[error("cannot create or open the cache directory {path}: {source}; check that the parent exists and is writable")]
    CreateDir {
        /// The configured directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// The configured path exists and is not a directory.
    #[error("cache path {path} exists and is not a directory")]
    NotADirectory {
        /// The configured path.
        path: PathBuf,
    },

    /// The cache directory can be written by other users (or is owned by one), so any entry in it
    /// could have been planted. Entries are code: saggar refuses to load from it.
    #[error(
        "refusing to use cache directory {path}: it is writable by other users or owned by another user \
         (mode {mode:04o}, owner uid {owner}); run `chmod go-w {path}` and make it yours, or mark it \
         shared and trusted with CacheConfig::builder(..).trust(DirTrust::SharedTrusted)"
    )]
    UntrustedDirectory {
        /// The cache directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// Its owner.
        owner: u32,
    },

    /// An entry file can be written by other users (or is owned by one); it is not loaded.
    #[error(
        "refusing to load cache entry {path} (id {id}) as code: it is writable by other users or owned \
         by another user (mode {mode:04o}, owner uid {owner}); delete it (it will be recompiled), fix \
         its permissions, or mark the directory shared and trusted"
    )]
    UntrustedEntry {
        /// The entry file.
        path: PathBuf,
        /// The entry id.
        id: EntryId,
        /// Its permission bits.
        mode: u32,
        /// Its owner.
        owner: u32,
    },

    /// The filesystem does not support `flock` (for example some network filesystems) and the
    /// configuration requires cross-process locks.
    #[error(
        "file locking is not supported for {path}: {source}; move the cache to a local filesystem, or \
         set LockingMode::BestEffort to run without cross-process locks (duplicate compiles become \
         possible; publishing stays atomic)"
    )]
    LockingUnsupported {
        /// The lock file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// Taking a lock failed for another reason.
    #[error("cannot lock {path}: {source}")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// The compile closure called back into a cache while the compile lock was held, which
    /// would deadlock (the lock order is per-key lock, then file lock, then compile lock).
    #[error(
        "re-entrant cache call for entry {id} from inside a compile closure; the compile lock is held \
         and the call would deadlock: compile dependencies before, not inside, the closure"
    )]
    Reentrant {
        /// The entry the nested call asked for.
        id: EntryId,
    },

    /// The caller's compiler failed. Nothing was published.
    #[error("compiling entry {id} failed: {source}")]
    Compile {
        /// The entry being compiled.
        id: EntryId,
        /// The compiler's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// An entry could not be written (only returned by explicit `put`/import; see the type docs).
    #[error(
        "cannot publish cache entry {path}: {source}; the previous entry (if any) is unchanged; check \
         free space and that the directory is writable"
    )]
    Publish {
        /// The entry file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// A file offered for import failed verification; nothing was imported.
    #[error("refusing to import {path}: {reason}")]
    ImportRejected {
        /// The file offered for import.
        path: PathBuf,
        /// Why it was rejected.
        reason: Corruption,
    },

    /// Any other I/O failure, with the operation and the path.
    #[error("cache I/O error while {op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// Why an entry file failed verification. A corrupt entry is evicted and recompiled; these
/// reasons appear in logs, in [`verify`](crate::CompileCache::verify) reports and in listings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Corruption {
    /// The file is empty.
    #[error("the file is empty")]
    Empty,
    /// The file is shorter than its header says.
    #[error("the file is truncated: {actual} bytes, expected {expected}")]
    Truncated {
        /// Length the header promises.
        expected: u64,
        /// Actual length.
        actual: u64,
    },
    /// The file is longer than its header says.
    #[error("the file has trailing bytes: {actual} bytes, expected {expected}")]
    TrailingBytes {
        /// Length the header promises.
        expected: u64,
        /// Actual length.
        actual: u64,
    },
    /// The entry path is not a regular file (a symbolic link, a directory, a FIFO, …).
    #[error("the entry is not a regular file")]
    NotARegularFile,
    /// The file does not start with the entry magic.
    #[error("bad magic: not a saggar cache entry")]
    BadMagic,
    /// The entry was written in a format this build does not read.
    #[error("unsupported entry format version {found} (this build reads version {supported})")]
    UnsupportedVersion {
        /// Version found in the file.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// The header does not match its checksum.
    #[error("the header checksum does not match")]
    HeaderChecksum,
    /// The header is structurally invalid.
    #[error("malformed header: {0}")]
    MalformedHeader(&'static str),
    /// The key stored in the header is not the key asked for (an id collision or a misplaced file).
    #[error("the entry holds a different key (id {found})")]
    KeyMismatch {
        /// Id of the key stored in the entry.
        found: EntryId,
    },
    /// The file name does not match the id of the key in its header.
    #[error("the file name does not match the key in its header (id {found})")]
    MisnamedEntry {
        /// Id of the key stored in the entry.
        found: EntryId,
    },
    /// The payload does not match its checksum.
    #[error("the payload checksum does not match")]
    PayloadChecksum,
}

/// Builds an [`CacheError::Io`].
pub(crate) fn io_err(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> CacheError {
    CacheError::Io { op, path: path.into(), source }
}
