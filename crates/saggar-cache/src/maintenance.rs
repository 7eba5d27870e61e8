//! Listing, verification, garbage collection, the size bound and imports: what `saggar cache
//! ls|verify|gc` and pre-seeding need.

use std::fs::{self, File, Metadata};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::cache::{CompileCache, DiskRead, Opened, open_entry};
use crate::error::{CacheError, Corruption, io_err};
use crate::format::{self, Header, ReadFailure};
use crate::key::{CacheKey, EntryId};
use crate::layout::{self, ENTRY_EXTENSION, Item};
use crate::memory::Artifact;
use crate::publish;
use crate::stats::Stats;

/// What an entry's header says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EntrySummary {
    /// The full key (backend, arch, compiler version, options, …).
    pub key: CacheKey,
    /// Payload length in bytes.
    pub payload_len: u64,
    /// BLAKE3 of the payload, as `b3sum` prints it.
    pub payload_blake3: String,
}

/// One entry of a [`CompileCache::list`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EntryInfo {
    /// Id from the file name.
    pub id: EntryId,
    /// The entry file.
    pub path: PathBuf,
    /// File length in bytes (header and payload).
    pub file_len: u64,
    /// When it was published (modification time).
    pub published: SystemTime,
    /// When it was last loaded from disk (access time; see
    /// [`touch_interval`](crate::CacheConfigBuilder::touch_interval)).
    pub last_used: SystemTime,
    /// The header, or why it could not be read. Listing reads headers only; use
    /// [`CompileCache::verify`] to check payloads.
    pub header: Result<EntrySummary, Corruption>,
}

impl EntryInfo {
    /// Time since publication.
    pub fn age(&self) -> Duration {
        SystemTime::now().duration_since(self.published).unwrap_or_default()
    }
}

/// A corrupt entry found by [`CompileCache::verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CorruptEntry {
    /// Id from the file name.
    pub id: EntryId,
    /// The entry file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub reason: Corruption,
}

/// Result of [`CompileCache::verify`].
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Entries examined.
    pub checked: usize,
    /// Entries whose header, name, key and payload checksum are all valid.
    pub ok: Vec<EntryId>,
    /// Entries that failed.
    pub corrupt: Vec<CorruptEntry>,
    /// Entries other users can write (not read, not evicted: fix or delete them by hand).
    pub untrusted: Vec<PathBuf>,
    /// Corrupt entries removed (with `repair`).
    pub evicted: usize,
}

/// Result of [`CompileCache::gc`] and [`CompileCache::trim_to`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct GcReport {
    /// Temp files of dead writers removed.
    pub stale_temps_removed: usize,
    /// Lock files without an entry removed.
    pub orphan_locks_removed: usize,
    /// Entries evicted by the size bound.
    pub lru_evicted: usize,
    /// Bytes freed by the size bound.
    pub lru_evicted_bytes: u64,
    /// Total size of entry files afterwards.
    pub remaining_bytes: u64,
}

/// What [`CompileCache::import_file`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ImportStatus {
    /// No entry existed; the file was imported.
    Imported,
    /// An entry with different (or corrupt, or untrusted) content was replaced.
    Replaced,
    /// An identical entry was already present; nothing was written.
    AlreadyPresent,
}

/// One imported file.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ImportOutcome {
    /// The file imported.
    pub source: PathBuf,
    /// The key from its header.
    pub key: CacheKey,
    /// What happened.
    pub status: ImportStatus,
}

/// Result of [`CompileCache::import_dir`].
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ImportReport {
    /// Files imported (or already present).
    pub imported: Vec<ImportOutcome>,
    /// Files that failed verification or could not be imported, with the reason.
    pub failed: Vec<(PathBuf, CacheError)>,
}

/// A file examined by name and content.
struct Inspected {
    meta: Metadata,
    result: Result<(Header, Option<Vec<u8>>), Corruption>,
}

/// Opens `path` and reads its header, and its payload too if `full`. `Ok(None)`: it vanished.
fn inspect(path: &Path, full: bool, threads: usize) -> Result<Option<Inspected>, CacheError> {
    let (file, meta) = match open_entry(path) {
        Ok(Opened::Regular(file, meta)) => (file, meta),
        Ok(Opened::Missing) => return Ok(None),
        Ok(Opened::NotRegular(meta)) => {
            let meta = match meta {
                Some(meta) => meta,
                None => fs::symlink_metadata(path).map_err(|e| io_err("inspecting", path, e))?,
            };
            return Ok(Some(Inspected { meta, result: Err(Corruption::NotARegularFile) }));
        }
        Err(e) => return Err(io_err("opening cache entry", path, e)),
    };
    let result = read(&file, &meta, full, threads);
    match result {
        Ok(ok) => Ok(Some(Inspected { meta, result: Ok(ok) })),
        Err(ReadFailure::Corrupt(c)) => Ok(Some(Inspected { meta, result: Err(c) })),
        Err(ReadFailure::Io(e)) => Err(io_err("reading cache entry", path, e)),
    }
}

fn read(file: &File, meta: &Metadata, full: bool, threads: usize) -> Result<(Header, Option<Vec<u8>>), ReadFailure> {
    let header = format::read_header(file, meta.len())?;
    let payload = if full { Some(format::read_payload(file, &header, meta.len(), threads)?) } else { None };
    Ok((header, payload))
}

impl CompileCache {
    fn read_dir_items(&self) -> Result<Vec<(Item, PathBuf)>, CacheError> {
        let dir = &self.config.dir;
        let mut items = Vec::new();
        for item in fs::read_dir(dir).map_err(|e| io_err("listing cache directory", dir, e))? {
            let item = item.map_err(|e| io_err("listing cache directory", dir, e))?;
            items.push((layout::classify(&item.file_name()), item.path()));
        }
        items.sort_by(|a, b| a.1.cmp(&b.1));
        Ok(items)
    }

    /// Lists the entries (never temp or lock files), sorted by id, with their header fields,
    /// size and times. Reads headers only.
    pub fn list(&self) -> Result<Vec<EntryInfo>, CacheError> {
        let mut out = Vec::new();
        for (item, path) in self.read_dir_items()? {
            let Item::Entry(id) = item else { continue };
            let Some(found) = inspect(&path, false, 1)? else {
                continue;
            };
            let header = found.result.and_then(|(h, _)| {
                if h.key.id() == id {
                    Ok(EntrySummary {
                        payload_len: h.payload_len,
                        payload_blake3: blake3::Hash::from_bytes(h.payload_checksum).to_hex().to_string(),
                        key: h.key,
                    })
                } else {
                    Err(Corruption::MisnamedEntry { found: h.key.id() })
                }
            });
            out.push(EntryInfo {
                id,
                file_len: found.meta.len(),
                published: found.meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                last_used: found.meta.accessed().unwrap_or(SystemTime::UNIX_EPOCH),
                path,
                header,
            });
        }
        Ok(out)
    }

    /// Fully verifies every entry: header, file name against key, payload checksum, and
    /// permissions. With `repair`, corrupt entries are evicted (re-checked under their locks
    /// first, so an entry republished meanwhile is kept).
    pub fn verify(&self, repair: bool) -> Result<VerifyReport, CacheError> {
        self.check_dir_trust()?;
        let threads = self.config.load_threads;
        let mut report = VerifyReport::default();
        for (item, path) in self.read_dir_items()? {
            let Item::Entry(id) = item else { continue };
            let Some(found) = inspect(&path, true, threads)? else {
                continue;
            };
            report.checked += 1;
            if found.meta.is_file() && self.check_entry_trust(&path, id, &found.meta).is_err() {
                report.untrusted.push(path);
                continue;
            }
            let verdict =
                |r: Result<(Header, Option<Vec<u8>>), Corruption>| {
                    r.and_then(|(h, _)| {
                        if h.key.id() == id { Ok(()) } else { Err(Corruption::MisnamedEntry { found: h.key.id() }) }
                    })
                };
            match verdict(found.result) {
                Ok(()) => report.ok.push(id),
                Err(reason) => {
                    if repair {
                        let _held = self.lock_entry(id)?;
                        if let Some(again) = inspect(&path, true, threads)?
                            && let Err(reason) = verdict(again.result)
                        {
                            self.evict_corrupt(&path, id, &reason);
                            report.evicted += 1;
                        }
                    }
                    report.corrupt.push(CorruptEntry { id, path, reason });
                }
            }
        }
        Ok(report)
    }

    /// Removes temp files of dead writers (older than
    /// [`stale_temp_age`](crate::CacheConfigBuilder::stale_temp_age), each under its entry's
    /// lock), lock files without an entry (while holding them), and applies the size bound.
    /// Busy entries are skipped.
    pub fn gc(&self) -> Result<GcReport, CacheError> {
        let mut report = GcReport::default();
        let dir = &self.config.dir;
        let temps = publish::stale_temps(dir, None, self.config.stale_temp_age)
            .map_err(|e| io_err("listing cache directory", dir, e))?;
        for (id, path) in temps {
            if let Some(_held) = self.try_lock_entry(id)?
                && publish::remove_stale_temp(&path)
            {
                Stats::bump(&self.stats.stale_temps_removed);
                report.stale_temps_removed += 1;
            }
        }
        for (item, _) in self.read_dir_items()? {
            let Item::Lock(id) = item else { continue };
            if self.entry_path_of(id).exists() {
                continue;
            }
            if let Some(mut held) = self.try_lock_entry(id)?
                && !self.entry_path_of(id).exists()
                && let Some(lock) = held.file.take()
            {
                lock.remove_file();
                report.orphan_locks_removed += 1;
            }
        }
        let trimmed = match self.config.max_disk_bytes {
            Some(max) => self.trim(max, None)?,
            None => self.trim(u64::MAX, None)?,
        };
        report.lru_evicted = trimmed.lru_evicted;
        report.lru_evicted_bytes = trimmed.lru_evicted_bytes;
        report.remaining_bytes = trimmed.remaining_bytes;
        Ok(report)
    }

    /// Evicts least recently used entries until entry files total at most `max_bytes`.
    pub fn trim_to(&self, max_bytes: u64) -> Result<GcReport, CacheError> {
        self.trim(max_bytes, None)
    }

    /// Applies the configured size bound after a publish, keeping `keep`. Errors are logged:
    /// the publish itself succeeded.
    pub(crate) fn enforce_size_bound(&self, keep: Option<EntryId>) {
        if let Some(max) = self.config.max_disk_bytes
            && let Err(e) = self.trim(max, keep)
        {
            tracing::warn!(error = %e, "could not apply the cache size bound");
        }
    }

    fn trim(&self, max_bytes: u64, keep: Option<EntryId>) -> Result<GcReport, CacheError> {
        let mut entries = Vec::new();
        for (item, path) in self.read_dir_items()? {
            let Item::Entry(id) = item else { continue };
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            let used = meta.accessed().unwrap_or(SystemTime::UNIX_EPOCH);
            entries.push((used, id, path, meta.len()));
        }
        let mut report = GcReport { remaining_bytes: entries.iter().map(|e| e.3).sum(), ..GcReport::default() };
        if report.remaining_bytes <= max_bytes {
            return Ok(report);
        }
        entries.sort();
        for (_, id, path, _) in entries {
            if report.remaining_bytes <= max_bytes {
                break;
            }
            if Some(id) == keep {
                continue;
            }
            // Skip entries someone is working on. Readers need no lock: one that has the file
            // open keeps reading the unlinked inode to the end.
            let Some(mut held) = self.try_lock_entry(id)? else {
                continue;
            };
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            match fs::remove_file(&path) {
                Ok(()) => {
                    report.lru_evicted += 1;
                    report.lru_evicted_bytes += meta.len();
                    report.remaining_bytes = report.remaining_bytes.saturating_sub(meta.len());
                    Stats::bump(&self.stats.lru_evictions);
                    Stats::add(&self.stats.lru_evicted_bytes, meta.len());
                    tracing::debug!(path = %path.display(), bytes = meta.len(), "evicted least recently used cache entry");
                    if let Some(lock) = held.file.take() {
                        lock.remove_file();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err("evicting cache entry", path, e)),
            }
        }
        Ok(report)
    }

    /// Imports an entry file built elsewhere (pre-seeding). The file is fully verified
    /// (header, key, payload checksum) before anything is written; the entry is then published
    /// atomically under its locks, owned by this process and named by its key.
    pub fn import_file(&self, source: &Path) -> Result<ImportOutcome, CacheError> {
        let rejected = |reason: Corruption| {
            Stats::bump(&self.stats.imports_rejected);
            tracing::warn!(path = %source.display(), reason = %reason, "rejected cache entry import");
            CacheError::ImportRejected { path: source.to_owned(), reason }
        };
        let (file, meta) = match open_entry(source) {
            Ok(Opened::Regular(file, meta)) => (file, meta),
            Ok(Opened::NotRegular(_)) => return Err(rejected(Corruption::NotARegularFile)),
            Ok(Opened::Missing) => {
                return Err(io_err("opening import", source, io::Error::from(io::ErrorKind::NotFound)));
            }
            Err(e) => return Err(io_err("opening import", source, e)),
        };
        let (header, payload) = match read(&file, &meta, true, self.config.load_threads) {
            Ok((h, Some(p))) => (h, p),
            Ok((_, None)) => unreachable!("full read returns the payload"),
            Err(ReadFailure::Corrupt(c)) => return Err(rejected(c)),
            Err(ReadFailure::Io(e)) => return Err(io_err("reading import", source, e)),
        };
        let key = header.key;
        let id = key.id();
        let held = self.lock_entry(id)?;
        let status = match self.load_disk(&key) {
            Ok(DiskRead::Hit(existing)) if existing.as_bytes() == payload.as_slice() => ImportStatus::AlreadyPresent,
            Ok(DiskRead::Missing) => ImportStatus::Imported,
            Ok(DiskRead::Hit(_) | DiskRead::Corrupt(_)) | Err(CacheError::UntrustedEntry { .. }) => {
                ImportStatus::Replaced
            }
            Err(e) => return Err(e),
        };
        let artifact = Artifact::from(payload);
        if status != ImportStatus::AlreadyPresent {
            self.publish_locked(&key, &artifact)?;
        }
        self.memory.insert(id, &artifact);
        Stats::bump(&self.stats.imports);
        drop(held);
        self.enforce_size_bound(Some(id));
        Ok(ImportOutcome { source: source.to_owned(), key, status })
    }

    /// Imports every `*.sce` file of `source_dir` (see [`import_file`](Self::import_file)).
    /// A bad file is reported and skipped; the others are still imported.
    pub fn import_dir(&self, source_dir: &Path) -> Result<ImportReport, CacheError> {
        let mut files = Vec::new();
        for item in fs::read_dir(source_dir).map_err(|e| io_err("listing import directory", source_dir, e))? {
            let item = item.map_err(|e| io_err("listing import directory", source_dir, e))?;
            let path = item.path();
            if path.extension().is_some_and(|e| e == ENTRY_EXTENSION) {
                files.push(path);
            }
        }
        files.sort();
        let mut report = ImportReport::default();
        for path in files {
            match self.import_file(&path) {
                Ok(outcome) => report.imported.push(outcome),
                Err(e) => report.failed.push((path, e)),
            }
        }
        Ok(report)
    }
}
