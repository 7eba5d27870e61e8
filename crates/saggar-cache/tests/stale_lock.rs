//! A lock file left behind, even by a process killed while holding every lock, blocks nobody.

mod common;

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::sync::mpsc;
use std::time::Duration;

use common::{append_line, child_path, child_role, key, sigkill_self, spawn_child};
use saggar_cache::{CompileCache, Origin};

fn within<R: Send + 'static>(secs: u64, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs)).expect("blocked by a leftover lock")
}

/// Child role (not a test on its own): die by SIGKILL in the middle of a compile, holding the
/// per-key lock, the entry's lock file and the compile lock.
#[test]
fn child_dies_while_compiling() {
    if child_role().as_deref() != Some("die") {
        return;
    }
    let dir = child_path("SAGGAR_DIE_DIR");
    let marker = child_path("SAGGAR_DIE_MARKER");
    let cache = CompileCache::open(common::config(&dir).build()).unwrap();
    cache
        .get_or_compile(&key("abandoned"), || -> io::Result<Vec<u8>> {
            append_line(&marker, "compiling");
            sigkill_self()
        })
        .unwrap();
}

#[test]
fn lock_file_of_a_killed_compiler_does_not_block() {
    if child_role().is_some() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let marker = tmp.path().join("marker");
    let out = spawn_child(
        "child_dies_while_compiling",
        "die",
        &[("SAGGAR_DIE_DIR", dir.display().to_string()), ("SAGGAR_DIE_MARKER", marker.display().to_string())],
    )
    .wait_with_output()
    .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{out:?}");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "compiling\n");
    let k = key("abandoned");
    let lock = dir.join(format!("{}.sce.lock", k.id()));
    assert!(lock.exists(), "the dead process's lock file is the point of this test");

    let fetched = within(10, move || {
        let cache = CompileCache::open(common::config(&dir).build()).unwrap();
        cache.get_or_compile(&k, || Ok::<_, io::Error>(b"recovered".to_vec())).unwrap()
    });
    assert_eq!(fetched.origin, Origin::Compiled);
    assert_eq!(fetched.artifact.as_bytes(), b"recovered");
}

#[test]
fn stray_lock_file_does_not_block() {
    if child_role().is_some() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let k = key("stray");
    std::fs::write(dir.join(format!("{}.sce.lock", k.id())), "left over by an old version").unwrap();
    let fetched = within(10, move || {
        let cache = CompileCache::open(common::config(&dir).build()).unwrap();
        let first = cache.get_or_compile(&k, || Ok::<_, io::Error>(vec![9; 9])).unwrap();
        // gc may remove lock files that no entry needs, and only while holding them.
        cache.evict(&k).unwrap();
        std::fs::write(dir.join(format!("{}.sce.lock", k.id())), "").unwrap();
        assert_eq!(cache.gc().unwrap().orphan_locks_removed, 1);
        assert!(!dir.join(format!("{}.sce.lock", k.id())).exists());
        first
    });
    assert_eq!(fetched.origin, Origin::Compiled);
}
