//! Disk full or read-only directory at publish: the compiled artifact is still returned, no
//! entry and no temp file is left, the old entry stays, and the failure shows in stats and logs.

mod common;

use std::io;
use std::path::Path;
use std::sync::Arc;

use common::{Hook, artifact_for, capture_logs, key};
use saggar_cache::{CacheError, CompileCache, FaultInjector, FaultPoint, Origin};

fn failing_at(point: FaultPoint, errno: i32) -> Arc<dyn FaultInjector> {
    Hook::new(move |p, _| if p == point { Err(io::Error::from_raw_os_error(errno)) } else { Ok(()) })
}

fn assert_nothing_published(dir: &Path, cache: &CompileCache, k: &saggar_cache::CacheKey) {
    assert!(!cache.entry_path(k).exists(), "an entry was left behind");
    assert!(common::temp_files(dir).is_empty(), "a temp file was left behind: {:?}", common::names(dir));
}

#[test]
fn publish_failure_still_returns_the_artifact() {
    let cases = [
        ("disk full mid-write", FaultPoint::PublishMidWrite, libc::ENOSPC),
        ("read-only directory", FaultPoint::PublishCreateTemp, libc::EROFS),
        ("write error before writing", FaultPoint::PublishBeforeWrite, libc::EIO),
        ("fsync/rename failure", FaultPoint::PublishAfterFsync, libc::EIO),
    ];
    for (what, point, errno) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let cache = CompileCache::open(common::config(dir).fault_injector(failing_at(point, errno)).build()).unwrap();
        let k = key("unpublishable");
        let (fetched, logs) =
            capture_logs(|| cache.get_or_compile(&k, || Ok::<_, io::Error>(artifact_for(&k, 200_000))));
        let fetched = fetched.unwrap();
        assert_eq!(fetched.origin, Origin::CompiledUnpublished, "{what}");
        assert!(fetched.artifact.as_bytes() == artifact_for(&k, 200_000), "{what}");
        assert_nothing_published(dir, &cache, &k);
        let s = cache.stats();
        assert_eq!((s.publish_failures, s.publishes), (1, 0), "{what}");
        let warnings = logs.warnings();
        assert!(
            warnings.iter().any(
                |w| w.contains("could not publish") && w.contains(&io::Error::from_raw_os_error(errno).to_string())
            ),
            "{what}: {warnings:?}"
        );
        // The process keeps serving it from memory.
        let again = cache.get_or_compile(&k, || -> io::Result<Vec<u8>> { panic!("no recompile") }).unwrap();
        assert_eq!(again.origin, Origin::Memory);
    }
}

#[test]
fn failed_replacement_keeps_the_old_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let k = key("keep-old");
    CompileCache::open(common::config(dir).build()).unwrap().put(&k, b"old artifact".to_vec()).unwrap();
    let cache = CompileCache::open(
        common::config(dir).fault_injector(failing_at(FaultPoint::PublishMidWrite, libc::ENOSPC)).build(),
    )
    .unwrap();
    let err = cache.put(&k, artifact_for(&k, 100_000)).unwrap_err();
    match &err {
        CacheError::Publish { path, source } => {
            assert_eq!(path, &cache.entry_path(&k));
            assert_eq!(source.raw_os_error(), Some(libc::ENOSPC));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(common::temp_files(dir).is_empty());
    let reader = CompileCache::open(common::config(dir).build()).unwrap();
    assert_eq!(reader.read_disk(&k).unwrap().unwrap().as_bytes(), b"old artifact");
}

/// A real read-only directory. Root ignores permission bits, so there only the failpoint
/// cases above can show the behaviour.
#[test]
fn really_read_only_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ro");
    let cache = CompileCache::open(common::config(&dir).build()).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o500)).unwrap();
    if std::fs::File::create(dir.join("probe")).is_ok() {
        eprintln!("skipped: running as a user (root?) that can write a 0500 directory");
        return;
    }
    let k = key("read-only");
    let fetched = cache.get_or_compile(&k, || Ok::<_, io::Error>(vec![1, 2, 3])).unwrap();
    assert_eq!(fetched.origin, Origin::CompiledUnpublished);
    assert_eq!(fetched.artifact.as_bytes(), &[1, 2, 3]);
    assert_eq!(cache.stats().publish_failures, 1);
    assert!(!cache.entry_path(&k).exists());
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
}

#[test]
fn a_failed_directory_fsync_is_counted_and_the_entry_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cache = CompileCache::open(
        common::config(dir).fault_injector(failing_at(FaultPoint::PublishAfterRename, libc::EIO)).build(),
    )
    .unwrap();
    let k = key("unsynced-dir");
    let (fetched, logs) = capture_logs(|| cache.get_or_compile(&k, || Ok::<_, io::Error>(artifact_for(&k, 1_000))));
    assert_eq!(fetched.unwrap().origin, Origin::Compiled);
    let s = cache.stats();
    assert_eq!((s.publishes, s.publish_failures, s.dir_sync_failures), (1, 0, 1));
    assert!(logs.warnings().iter().any(|w| w.contains("directory fsync failed")), "{:?}", logs.warnings());
    let fresh = CompileCache::open(common::config(dir).build()).unwrap();
    assert!(fresh.read_disk(&k).unwrap().unwrap().as_bytes() == artifact_for(&k, 1_000));
    assert_eq!(fresh.stats().dir_sync_failures, 0);
}
