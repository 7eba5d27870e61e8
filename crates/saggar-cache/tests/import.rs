//! Pre-seeding: entries built elsewhere are verified on import, then published atomically under
//! the id of the key in their header. Also gc of stale temps and orphan lock files.

mod common;

use std::io;
use std::os::unix::fs::FileExt;

use common::{artifact_for, key};
use saggar_cache::{CacheError, CompileCache, Corruption, ImportStatus, Origin};

#[test]
fn entries_built_elsewhere_are_imported_and_hit() {
    let build = tempfile::tempdir().unwrap();
    let serve = tempfile::tempdir().unwrap();
    let builder = CompileCache::open(common::config(build.path()).build()).unwrap();
    let keys: Vec<_> = (0..3).map(|i| key(&format!("seed-{i}"))).collect();
    for k in &keys {
        builder.put(k, artifact_for(k, 50_000)).unwrap();
    }
    // File names do not matter to an import: the key comes from the verified header.
    let renamed = build.path().join("renamed-by-someone.sce");
    std::fs::rename(builder.entry_path(&keys[2]), &renamed).unwrap();

    let server = CompileCache::open(common::config(serve.path()).build()).unwrap();
    let report = server.import_dir(build.path()).unwrap();
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert_eq!(report.imported.len(), 3);
    assert!(report.imported.iter().all(|o| o.status == ImportStatus::Imported));
    assert_eq!(server.stats().imports, 3);

    let fresh = CompileCache::open(common::config(serve.path()).build()).unwrap();
    for k in &keys {
        let hit = fresh.get_or_compile(k, || -> io::Result<Vec<u8>> { panic!("pre-seeded: no compile") }).unwrap();
        assert_eq!(hit.origin, Origin::Disk);
        assert!(hit.artifact.as_bytes() == artifact_for(k, 50_000));
    }
    let again = server.import_file(&renamed).unwrap();
    assert_eq!(again.status, ImportStatus::AlreadyPresent);
    assert_eq!(again.key, keys[2]);
}

#[test]
fn damaged_files_are_rejected_and_nothing_is_written() {
    let build = tempfile::tempdir().unwrap();
    let serve = tempfile::tempdir().unwrap();
    let builder = CompileCache::open(common::config(build.path()).build()).unwrap();
    let k = key("tampered");
    builder.put(&k, artifact_for(&k, 50_000)).unwrap();
    let path = builder.entry_path(&k);
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, 40_000).unwrap();
    f.write_all_at(&[b[0] ^ 1], 40_000).unwrap();
    std::fs::write(build.path().join("garbage.sce"), b"definitely not an entry").unwrap();

    let server = CompileCache::open(common::config(serve.path()).build()).unwrap();
    match server.import_file(&path) {
        Err(CacheError::ImportRejected { path: p, reason }) => {
            assert_eq!(p, path);
            assert_eq!(reason, Corruption::PayloadChecksum);
        }
        other => panic!("expected ImportRejected, got {other:?}"),
    }
    let report = server.import_dir(build.path()).unwrap();
    assert_eq!(report.imported.len(), 0);
    assert_eq!(report.failed.len(), 2);
    assert_eq!(server.stats().imports_rejected, 3);
    let left: Vec<_> =
        common::names(serve.path()).into_iter().filter(|n| !n.starts_with(".saggar-cache.lock")).collect();
    assert!(left.is_empty(), "an import of a bad file wrote {left:?}");
}

#[test]
fn import_replaces_a_corrupt_entry() {
    let build = tempfile::tempdir().unwrap();
    let serve = tempfile::tempdir().unwrap();
    let k = key("replace-me");
    let builder = CompileCache::open(common::config(build.path()).build()).unwrap();
    builder.put(&k, artifact_for(&k, 10_000)).unwrap();
    let server = CompileCache::open(common::config(serve.path()).build()).unwrap();
    server.put(&k, b"stale".to_vec()).unwrap();
    std::fs::OpenOptions::new().write(true).open(server.entry_path(&k)).unwrap().set_len(10).unwrap();
    let outcome = server.import_file(&builder.entry_path(&k)).unwrap();
    assert_eq!(outcome.status, ImportStatus::Replaced);
    let fresh = CompileCache::open(common::config(serve.path()).build()).unwrap();
    assert!(fresh.read_disk(&k).unwrap().unwrap().as_bytes() == artifact_for(&k, 10_000));
}

#[test]
fn gc_removes_stale_temps_and_orphan_locks_but_keeps_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cache = CompileCache::open(common::config(dir).build()).unwrap();
    let live = key("live");
    cache.put(&live, vec![1; 100]).unwrap();
    let dead = key("dead");
    // What a writer killed mid-publish leaves: a temp file and a lock file, no entry.
    std::fs::write(dir.join(format!(".saggar-tmp.{}.999999.1", dead.id())), b"partial").unwrap();
    std::fs::write(dir.join(format!("{}.sce.lock", dead.id())), b"").unwrap();

    // With a grace period, a fresh temp file is left alone (its writer may be alive).
    let patient =
        CompileCache::open(common::config(dir).stale_temp_age(std::time::Duration::from_secs(3600)).build()).unwrap();
    assert_eq!(patient.gc().unwrap().stale_temps_removed, 0);

    let report = cache.gc().unwrap();
    assert_eq!(report.stale_temps_removed, 1);
    assert_eq!(report.orphan_locks_removed, 1);
    assert_eq!(report.lru_evicted, 0);
    assert!(common::temp_files(dir).is_empty());
    assert!(!dir.join(format!("{}.sce.lock", dead.id())).exists());
    assert!(dir.join(format!("{}.sce.lock", live.id())).exists());
    assert_eq!(cache.read_disk(&live).unwrap().unwrap().as_bytes(), &[1; 100]);
}

/// Runs `import_dir` on a thread and fails the test, instead of hanging it, if the import does
/// not return within a generous time.
fn import_dir_within(server: CompileCache, dir: std::path::PathBuf) -> saggar_cache::ImportReport {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(server.import_dir(&dir));
    });
    match rx.recv_timeout(std::time::Duration::from_secs(20)) {
        Ok(report) => report.unwrap(),
        Err(_) => panic!("import_dir did not return within 20 s: it blocked on a special file"),
    }
}

#[test]
fn a_fifo_or_symlink_in_a_bundle_is_reported_and_skipped_without_hanging() {
    let build = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let serve = tempfile::tempdir().unwrap();
    let builder = CompileCache::open(common::config(build.path()).build()).unwrap();
    let good = key("good-neighbour");
    builder.put(&good, artifact_for(&good, 5_000)).unwrap();
    // A FIFO named like an entry, with no writer: a blocking open never returns.
    let fifo = build.path().join("aaaa-fifo.sce");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c_path` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "{}", io::Error::last_os_error());
    // A symbolic link named like an entry, pointing at a valid entry outside the bundle.
    let outside = CompileCache::open(common::config(elsewhere.path()).build()).unwrap();
    let linked = key("linked-from-outside");
    outside.put(&linked, artifact_for(&linked, 5_000)).unwrap();
    let link = build.path().join("bbbb-link.sce");
    std::os::unix::fs::symlink(outside.entry_path(&linked), &link).unwrap();
    // A directory named like an entry.
    let folder = build.path().join("cccc-dir.sce");
    std::fs::create_dir(&folder).unwrap();

    let server = CompileCache::open(common::config(serve.path()).build()).unwrap();
    let report = import_dir_within(server, build.path().to_owned());
    assert_eq!(report.imported.len(), 1, "{:?}", report.failed);
    assert_eq!(report.imported[0].key, good);
    let failed: Vec<_> = report.failed.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(failed, vec![fifo, link, folder]);
    for (path, e) in &report.failed {
        assert!(
            matches!(e, CacheError::ImportRejected { reason: Corruption::NotARegularFile, .. }),
            "{}: {e:?}",
            path.display()
        );
    }
    let fresh = CompileCache::open(common::config(serve.path()).build()).unwrap();
    assert!(fresh.read_disk(&linked).unwrap().is_none(), "a symlinked file was imported");
    assert!(fresh.read_disk(&good).unwrap().is_some());
}
