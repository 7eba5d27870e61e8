//! Damaged entries (truncated, empty, bit-flipped, wrong magic, wrong version, wrong key, …)
//! are detected, evicted, counted and recompiled; the run after that hits.

mod common;

use std::fs::OpenOptions;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{artifact_for, key};
use saggar_cache::{CacheKey, CompileCache, Corruption, FORMAT_VERSION, Origin};

const LEN: usize = 300 * 1024;

fn compile_counting(counter: &Arc<AtomicUsize>, k: &CacheKey) -> impl FnOnce() -> io::Result<Vec<u8>> {
    let counter = counter.clone();
    let k = k.clone();
    move || {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(artifact_for(&k, LEN))
    }
}

fn open(dir: &Path) -> CompileCache {
    CompileCache::open(common::config(dir).build()).unwrap()
}

fn flip(path: &Path, offset_from_end: Option<u64>, offset: u64) {
    let f = OpenOptions::new().read(true).write(true).open(path).unwrap();
    let at = match offset_from_end {
        Some(back) => f.metadata().unwrap().len() - back,
        None => offset,
    };
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 0x10;
    f.write_all_at(&b, at).unwrap();
}

/// Damages the entry at `path` in the way named by `kind`; returns what verify must report.
fn damage(kind: &str, path: &Path, dir: &Path) -> fn(&Corruption) -> bool {
    match kind {
        "truncated" => {
            let f = OpenOptions::new().write(true).open(path).unwrap();
            let len = f.metadata().unwrap().len();
            f.set_len(len / 2).unwrap();
            |c| matches!(c, Corruption::Truncated { .. })
        }
        "zero_length" => {
            OpenOptions::new().write(true).open(path).unwrap().set_len(0).unwrap();
            |c| *c == Corruption::Empty
        }
        "trailing_bytes" => {
            let mut f = OpenOptions::new().append(true).open(path).unwrap();
            f.write_all(b"junk").unwrap();
            |c| matches!(c, Corruption::TrailingBytes { .. })
        }
        "payload_bit_flip" => {
            flip(path, Some(1000), 0);
            |c| *c == Corruption::PayloadChecksum
        }
        "header_bit_flip" => {
            flip(path, None, 80);
            |c| *c == Corruption::HeaderChecksum
        }
        "wrong_magic" => {
            let mut f = OpenOptions::new().write(true).open(path).unwrap();
            f.seek(SeekFrom::Start(0)).unwrap();
            f.write_all(b"NOTSAGGAR!").unwrap();
            |c| *c == Corruption::BadMagic
        }
        "wrong_version" => {
            let f = OpenOptions::new().write(true).open(path).unwrap();
            f.write_all_at(&(FORMAT_VERSION + 1).to_le_bytes(), 8).unwrap();
            |c| matches!(c, Corruption::UnsupportedVersion { found, .. } if *found == FORMAT_VERSION + 1)
        }
        "wrong_key" => {
            // A valid entry of another key, at this key's path (a collision or a misplaced file).
            let other = key("someone-else");
            let cache = open(dir);
            cache.put(&other, artifact_for(&other, 100)).unwrap();
            std::fs::rename(cache.entry_path(&other), path).unwrap();
            |c| matches!(c, Corruption::MisnamedEntry { .. } | Corruption::KeyMismatch { .. })
        }
        "symlink" => {
            let target = dir.join("elsewhere.bin");
            std::fs::rename(path, &target).unwrap();
            std::os::unix::fs::symlink(&target, path).unwrap();
            |c| *c == Corruption::NotARegularFile
        }
        other => panic!("unknown damage {other}"),
    }
}

#[test]
fn damaged_entries_are_detected_evicted_counted_and_recompiled() {
    for kind in [
        "truncated",
        "zero_length",
        "trailing_bytes",
        "payload_bit_flip",
        "header_bit_flip",
        "wrong_magic",
        "wrong_version",
        "wrong_key",
        "symlink",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let k = key("victim");
        let compiles = Arc::new(AtomicUsize::new(0));
        let first = open(dir).get_or_compile(&k, compile_counting(&compiles, &k)).unwrap();
        assert_eq!(first.origin, Origin::Compiled);
        let path = open(dir).entry_path(&k);
        let expected_reason = damage(kind, &path, dir);

        let report = open(dir).verify(false).unwrap();
        assert_eq!(report.corrupt.len(), 1, "{kind}: {report:?}");
        assert!(expected_reason(&report.corrupt[0].reason), "{kind}: reported {:?}", report.corrupt[0].reason);

        // A fresh process-like instance (empty memory tier) must not return the damaged bytes.
        let second = open(dir);
        // Not asserting on the warning here: the corrupt entry may be found on one of the cache's load
        // threads, where a test-scoped (thread-local) log collector does not see it. The counter below
        // is the contract; publish_failure.rs checks logging on the calling thread.
        let fetched = second.get_or_compile(&k, compile_counting(&compiles, &k)).unwrap();
        assert_eq!(fetched.origin, Origin::Compiled, "{kind}");
        assert!(fetched.artifact.as_bytes() == artifact_for(&k, LEN), "{kind}");
        assert_eq!(compiles.load(Ordering::SeqCst), 2, "{kind}");
        assert_eq!(second.stats().corrupt_evicted, 1, "{kind}");

        let third = open(dir);
        let hit = third.get_or_compile(&k, compile_counting(&compiles, &k)).unwrap();
        assert_eq!(hit.origin, Origin::Disk, "{kind}");
        assert_eq!(compiles.load(Ordering::SeqCst), 2, "{kind}");
        assert_eq!(third.stats().corrupt_evicted, 0, "{kind}");
    }
}

#[test]
fn get_and_read_disk_evict_a_corrupt_entry_and_miss() {
    let tmp = tempfile::tempdir().unwrap();
    let k = key("get-victim");
    let cache = open(tmp.path());
    cache.put(&k, artifact_for(&k, LEN)).unwrap();
    flip(&cache.entry_path(&k), Some(5), 0);
    let reader = open(tmp.path());
    assert!(reader.get(&k).unwrap().is_none());
    assert!(!reader.entry_path(&k).exists());
    assert_eq!(reader.stats().corrupt_evicted, 1);
    assert!(reader.read_disk(&k).unwrap().is_none());
}

#[test]
fn verify_with_repair_evicts_only_corrupt_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = open(tmp.path());
    let good = key("good");
    let bad = key("bad");
    cache.put(&good, artifact_for(&good, 5000)).unwrap();
    cache.put(&bad, artifact_for(&bad, 5000)).unwrap();
    flip(&cache.entry_path(&bad), Some(1), 0);
    let report = cache.verify(true).unwrap();
    assert_eq!(report.checked, 2);
    assert_eq!(report.ok, vec![good.id()]);
    assert_eq!(report.corrupt.len(), 1);
    assert_eq!(report.corrupt[0].id, bad.id());
    assert_eq!(report.evicted, 1);
    assert!(cache.entry_path(&good).exists());
    assert!(!cache.entry_path(&bad).exists());
    assert_eq!(cache.verify(false).unwrap().corrupt.len(), 0);
}
