//! Compile once, load everywhere: a locked, atomically published, integrity-checked compile
//! cache over a directory.
#![doc = include_str!("../README.md")]
//!
//! # Design
//!
//! When N GPUs (a process or a session each) start at once, a model must be compiled exactly
//! once and loaded N-1 times. [`CompileCache::get_or_compile`] looks in memory, then on disk,
//! and only then calls the caller's compiler, whose output (opaque bytes) it publishes for
//! everyone else. A crash, a full disk or a corrupt file never leaves an entry that someone
//! later loads, and since compiled artifacts are code, loading one is a trust decision
//! ([`DirTrust`]).
//!
//! # The miss path and its lock order
//!
//! ```text
//! memory hit? ── yes ─▶ return
//! disk hit (no lock; entries appear only by rename)? ── yes ─▶ return
//! 1. per-key in-process lock      (KeyLocks: slots exist only while in flight)
//! 2. cross-process flock on <entry>.lock
//!    double-checked load: memory, then disk ── hit ─▶ return (the winner published it)
//!    corrupt entry? evict it; remove temp files of dead writers of this key
//! 3. process-wide compile lock ─▶ compile() ─▶ release 3
//!    publish: temp file, write, fsync, rename over the entry, fsync the directory
//! release 2, release 1; apply the optional size bound
//! ```
//!
//! The locks are always taken in the order 1, 2, 3 and nobody waits for a lower-numbered
//! lock while holding a higher one, so there is no deadlock: not between threads, and not
//! between processes (taking the compile lock before the file lock could deadlock two
//! processes). A cache call from inside a compile closure would reverse the order; it fails
//! with [`CacheError::Reentrant`] instead.
//!
//! Lock files are never deleted by anyone who does not hold them, and every locker checks
//! after locking that the path still names the inode it locked (retrying otherwise), so
//! deleting a held lock file is safe. A lock file left behind by a dead process blocks nobody:
//! `flock` locks die with their process.
//!
//! # Guarantees
//!
//! - A reader sees a complete old entry, a complete new one, or none; never partial bytes
//!   (publish is a rename of an `fsync`ed temp file; readers read through one descriptor,
//!   so an eviction that unlinks the file under them is harmless).
//! - Every load checks the magic, format version, the full key text (a hash collision is a
//!   miss, never the wrong program), the header checksum and the payload's BLAKE3. A failing
//!   entry is evicted, counted ([`StatsSnapshot::corrupt_evicted`]) and recompiled.
//! - A failed publish (disk full, read-only directory) removes its temp file, keeps the old
//!   entry, is logged (`tracing` warning) and counted; the compiled artifact is still returned.
//! - Where `flock` is unsupported, [`LockingMode`] chooses between failing loudly and running
//!   without cross-process locks (duplicate compiles possible, publishing still atomic).
//!
//! The key is documented in `docs/cache-key.md`, so it can be computed outside the process;
//! the entry format is described in the `format` module source and in the same document.
//!
//! # Example
//!
//! ```
//! use saggar_cache::{CacheConfig, CacheKey, CompileCache, Origin};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let tmp = tempfile::tempdir()?;
//! let cache = CompileCache::open(CacheConfig::builder(tmp.path().join("saggar")).build())?;
//! let key = CacheKey::builder()
//!     .model_hash(CacheKey::hash_model_bytes(b"model bytes"))
//!     .shape("batch=4")
//!     .backend("hip")
//!     .arch("gfx942")
//!     .compiler("migraphx")
//!     .compiler_version("2.12.0")
//!     .option("fp16", "true")
//!     .build()?;
//! let first = cache.get_or_compile(&key, || Ok::<_, std::io::Error>(b"code".to_vec()))?;
//! assert_eq!(first.origin, Origin::Compiled);
//! let again = cache.get_or_compile(&key, || -> Result<Vec<u8>, std::io::Error> {
//!     unreachable!("already cached")
//! })?;
//! assert_eq!(again.artifact.as_bytes(), b"code");
//! # Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(not(unix))]
compile_error!("saggar-cache supports Unix-like systems only (it relies on flock, pread and Unix permissions)");

mod cache;
mod config;
mod error;
mod fault;
mod format;
mod key;
mod layout;
mod locks;
mod maintenance;
mod memory;
mod model_hash;
mod payload;
mod publish;
mod stats;

pub use cache::{CompileCache, CompileExclusion, Fetched, Origin};
pub use config::{CacheConfig, CacheConfigBuilder, DirTrust, LockingMode};
pub use error::{CacheError, Corruption};
#[cfg(feature = "failpoints")]
#[cfg_attr(docsrs, doc(cfg(feature = "failpoints")))]
pub use fault::{FaultInjector, FaultPoint};
pub use key::{
    CacheKey, CacheKeyBuilder, ENTRY_ID_LEN, EntryId, KEY_TEXT_HEADER, KeyError, MAX_FIELD_LEN, MAX_KEY_TEXT_LEN,
    ParseEntryIdError,
};
pub use layout::ENTRY_EXTENSION;
pub use locks::with_compile_lock;
pub use maintenance::{
    CorruptEntry, EntryInfo, EntrySummary, GcReport, ImportOutcome, ImportReport, ImportStatus, VerifyReport,
};
pub use memory::Artifact;
pub use model_hash::{MAX_MODEL_HASH_LEN, MIN_MODEL_HASH_LEN, ModelHash};
pub use stats::StatsSnapshot;

/// Version of the entry file format, written in every header and part of every key. Entries of
/// another version are never loaded. Version 1 was written when the project was named kiln (magic
/// `KILNCACH`); version 2 is the first of saggar, so an old entry is a clean miss, never a misread.
pub const FORMAT_VERSION: u32 = 2;
