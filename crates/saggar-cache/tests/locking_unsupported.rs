//! Where `flock` is unsupported: fail loudly by default, or run without cross-process locks
//! with a warning when the configuration says so.

mod common;

use std::io;

use common::{Hook, capture_logs, key};
use saggar_cache::{CacheError, CompileCache, FaultPoint, LockingMode, Origin};

fn no_flock(errno: i32, only_entries: bool) -> std::sync::Arc<Hook> {
    Hook::new(move |point, path| {
        let is_entry_lock = path.to_string_lossy().ends_with(".sce.lock");
        if point == FaultPoint::LockAcquire && (is_entry_lock || !only_entries) {
            Err(io::Error::from_raw_os_error(errno))
        } else {
            Ok(())
        }
    })
}

#[test]
fn required_locking_fails_loudly_at_open() {
    for errno in [libc::ENOLCK, libc::EOPNOTSUPP, libc::ENOSYS] {
        let tmp = tempfile::tempdir().unwrap();
        let err =
            CompileCache::open(common::config(tmp.path()).fault_injector(no_flock(errno, false)).build()).unwrap_err();
        match &err {
            CacheError::LockingUnsupported { source, .. } => {
                assert_eq!(source.raw_os_error(), Some(errno));
            }
            other => panic!("expected LockingUnsupported, got {other:?}"),
        }
        assert!(err.to_string().contains("LockingMode::BestEffort"), "{err}");
    }
}

#[test]
fn required_locking_fails_loudly_on_a_miss_and_compiles_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let cache =
        CompileCache::open(common::config(tmp.path()).fault_injector(no_flock(libc::ENOLCK, true)).build()).unwrap();
    let err = cache
        .get_or_compile(&key("k"), || -> io::Result<Vec<u8>> { panic!("must not compile without the required lock") })
        .unwrap_err();
    assert!(matches!(err, CacheError::LockingUnsupported { .. }), "{err:?}");
    assert_eq!(cache.stats().compiles, 0);
}

#[test]
fn best_effort_runs_without_cross_process_locks_and_warns_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (cache, logs) = capture_logs(|| {
        let cache = CompileCache::open(
            common::config(tmp.path())
                .locking(LockingMode::BestEffort)
                .fault_injector(no_flock(libc::ENOLCK, false))
                .build(),
        )
        .unwrap();
        for name in ["a", "b"] {
            let fetched = cache.get_or_compile(&key(name), || Ok::<_, io::Error>(name.as_bytes().to_vec())).unwrap();
            assert_eq!(fetched.origin, Origin::Compiled);
        }
        cache
    });
    let warnings: Vec<_> = logs.warnings().into_iter().filter(|w| w.contains("without cross-process locks")).collect();
    assert_eq!(warnings.len(), 1, "{:?}", logs.warnings());
    assert_eq!(cache.stats().unlocked_misses, 2);
    // No lock files were made, and publishing stayed atomic and readable.
    assert!(!common::names(tmp.path()).iter().any(|n| n.ends_with(".sce.lock")));
    let reader = CompileCache::open(common::config(tmp.path()).build()).unwrap();
    assert_eq!(reader.read_disk(&key("a")).unwrap().unwrap().as_bytes(), b"a");
}
