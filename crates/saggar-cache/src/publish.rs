//! Atomic publish: write a temp file in the cache directory, `fsync` it, `rename` it over the
//! entry, `fsync` the directory. A reader opens either the old inode or the new one, never a
//! partial file; on any failure before the rename the temp file is removed and the old entry
//! is untouched.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::fault::{FaultInjector, FaultPoint};
use crate::format;
use crate::key::{CacheKey, EntryId};
use crate::layout::{self, Item};
use crate::payload;
use crate::stats::Stats;

/// What a publish needs from the cache.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Publisher<'a> {
    pub(crate) dir: &'a Path,
    pub(crate) file_mode: u32,
    pub(crate) faults: Option<&'a Arc<dyn FaultInjector>>,
    pub(crate) threads: usize,
    /// Where a failed directory fsync is counted.
    pub(crate) stats: &'a Stats,
}

impl Publisher<'_> {
    fn fault(&self, point: FaultPoint, path: &Path) -> io::Result<()> {
        match self.faults {
            Some(f) => f.inject(point, path),
            None => Ok(()),
        }
    }

    /// Publishes `payload` as the entry for `key`. Returns the entry path.
    pub(crate) fn publish(&self, key: &CacheKey, payload: &[u8]) -> io::Result<PathBuf> {
        let id = key.id();
        let entry = self.dir.join(layout::entry_name(id));
        let temp = self.dir.join(layout::temp_name(id));
        let checksum = payload::checksum(payload, self.threads);
        let header = format::encode_header(key, payload.len() as u64, &checksum);

        self.fault(FaultPoint::PublishCreateTemp, &temp)?;
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(self.file_mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temp)?;
        if let Err(e) = self.write_and_rename(file, &temp, &entry, &header, payload) {
            remove_quietly(&temp);
            return Err(e);
        }
        // The entry is complete and in place. A failed directory fsync only means the rename
        // might not survive a power cut, leaving the old entry or none: never a partial one.
        if let Err(e) = self.fault(FaultPoint::PublishAfterRename, &entry).and_then(|()| sync_dir(self.dir)) {
            Stats::bump(&self.stats.dir_sync_failures);
            tracing::warn!(
                path = %entry.display(),
                error = %e,
                "cache entry published but the directory fsync failed; it may not survive a power loss"
            );
        }
        Ok(entry)
    }

    fn write_and_rename(
        &self,
        mut file: File,
        temp: &Path,
        entry: &Path,
        header: &[u8],
        payload: &[u8],
    ) -> io::Result<()> {
        self.fault(FaultPoint::PublishBeforeWrite, temp)?;
        file.write_all(header)?;
        let (first, second) = payload.split_at(payload.len() / 2);
        file.write_all(first)?;
        self.fault(FaultPoint::PublishMidWrite, temp)?;
        file.write_all(second)?;
        file.sync_all()?;
        drop(file);
        self.fault(FaultPoint::PublishAfterFsync, temp)?;
        std::fs::rename(temp, entry)
    }
}

fn remove_quietly(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "could not remove temp file");
    }
}

/// `fsync` of a directory, making renames and unlinks in it durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_NONBLOCK).open(dir)?.sync_all()
}

/// Temp files in `dir` (of entry `only`, if given) last modified at least `min_age` ago.
pub(crate) fn stale_temps(dir: &Path, only: Option<EntryId>, min_age: Duration) -> io::Result<Vec<(EntryId, PathBuf)>> {
    let now = SystemTime::now();
    let mut out = Vec::new();
    for item in std::fs::read_dir(dir)? {
        let item = item?;
        let Item::Temp(id) = layout::classify(&item.file_name()) else {
            continue;
        };
        if only.is_some_and(|o| o != id) {
            continue;
        }
        let Ok(meta) = item.metadata() else { continue };
        let age = meta.modified().ok().and_then(|m| now.duration_since(m).ok()).unwrap_or_default();
        if age >= min_age {
            out.push((id, item.path()));
        }
    }
    Ok(out)
}

/// Removes a temp file of a dead writer; the caller holds the entry's lock.
pub(crate) fn remove_stale_temp(path: &Path) -> bool {
    match std::fs::remove_file(path) {
        Ok(()) => {
            tracing::info!(path = %path.display(), "removed temp file of a dead writer");
            true
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "could not remove stale temp file");
            false
        }
    }
}
