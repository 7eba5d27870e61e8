//! Loading an entry is loading code: the directory is created owner-only, and a directory or
//! entry other users can write is refused unless the configuration marks it shared and trusted.

mod common;

use std::fs::Permissions;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::key;
use saggar_cache::{CacheError, CompileCache, DirTrust, Origin};

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, Permissions::from_mode(mode)).unwrap();
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().mode() & 0o777
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn new_directory_and_files_are_owner_only() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nested").join("saggar-cache");
    let cache = CompileCache::open(common::config(&dir).build()).unwrap();
    assert_eq!(mode(&dir), 0o700);
    let k = key("perm");
    cache.get_or_compile(&k, || Ok::<_, io::Error>(vec![1; 100])).unwrap();
    assert_eq!(mode(&cache.entry_path(&k)), 0o600);
    assert_eq!(mode(&dir.join(format!("{}.sce.lock", k.id()))), 0o600);
}

#[test]
fn directory_writable_by_others_is_refused_unless_shared_and_trusted() {
    for bad in [0o777, 0o770, 0o730, 0o703, 0o1777] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("c");
        std::fs::create_dir(&dir).unwrap();
        chmod(&dir, bad);
        match CompileCache::open(common::config(&dir).build()) {
            Err(CacheError::UntrustedDirectory { path, mode, .. }) => {
                assert_eq!(path, dir);
                assert_eq!(mode, bad);
            }
            other => panic!("mode {bad:o}: expected UntrustedDirectory, got {other:?}"),
        }
        let shared = CompileCache::open(common::config(&dir).trust(DirTrust::SharedTrusted).build()).unwrap();
        let fetched = shared.get_or_compile(&key("shared"), || Ok::<_, io::Error>(vec![5])).unwrap();
        assert_eq!(fetched.origin, Origin::Compiled);
    }
    for good in [0o700, 0o750, 0o755, 0o500] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("c");
        std::fs::create_dir(&dir).unwrap();
        chmod(&dir, good);
        assert!(CompileCache::open(common::config(&dir).build()).is_ok(), "mode {good:o} must be accepted");
        chmod(&dir, 0o700);
    }
}

#[test]
fn error_message_says_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o777);
    let msg = CompileCache::open(common::config(&dir).build()).unwrap_err().to_string();
    assert!(msg.contains(&dir.display().to_string()), "{msg}");
    assert!(msg.contains("chmod go-w"), "{msg}");
    assert!(msg.contains("SharedTrusted"), "{msg}");
}

#[test]
fn entry_writable_by_others_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let k = key("planted");
    let path = {
        let cache = CompileCache::open(common::config(&dir).build()).unwrap();
        cache.put(&k, b"real".to_vec()).unwrap();
        cache.entry_path(&k)
    };
    chmod(&path, 0o666);
    let cache = CompileCache::open(common::config(&dir).build()).unwrap();
    let err = cache
        .get_or_compile(&k, || -> io::Result<Vec<u8>> { panic!("must not compile over a refused entry either") })
        .unwrap_err();
    match err {
        CacheError::UntrustedEntry { path: p, id, mode, .. } => {
            assert_eq!(p, path);
            assert_eq!(id, k.id());
            assert_eq!(mode, 0o666);
        }
        other => panic!("expected UntrustedEntry, got {other:?}"),
    }
    assert_eq!(cache.stats().untrusted_refused, 1);
    assert!(matches!(cache.get(&k), Err(CacheError::UntrustedEntry { .. })));
    assert_eq!(cache.verify(false).unwrap().untrusted, vec![path.clone()]);

    let trusting = CompileCache::open(common::config(&dir).trust(DirTrust::SharedTrusted).build()).unwrap();
    assert_eq!(trusting.get(&k).unwrap().unwrap().as_bytes(), b"real");
}

/// Ownership checks need a second user; only root can create that situation.
#[test]
fn directory_or_entry_owned_by_another_user_is_refused() {
    if !is_root() {
        eprintln!("skipped: needs root to chown files to another user");
        return;
    }
    let nobody = 65534;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let k = key("foreign");
    let cache = CompileCache::open(common::config(&dir).build()).unwrap();
    cache.put(&k, b"x".to_vec()).unwrap();
    std::os::unix::fs::chown(cache.entry_path(&k), Some(nobody), Some(nobody)).unwrap();
    let fresh = CompileCache::open(common::config(&dir).build()).unwrap();
    assert!(matches!(
        fresh.get(&k),
        Err(CacheError::UntrustedEntry { owner, .. }) if owner == nobody
    ));
    std::os::unix::fs::chown(&dir, Some(nobody), Some(nobody)).unwrap();
    assert!(matches!(
        CompileCache::open(common::config(&dir).build()),
        Err(CacheError::UntrustedDirectory { owner, .. }) if owner == nobody
    ));
}
