//! Many threads of one process: one compile per key, compiles serialised by the process-wide
//! compile lock, no deadlock, and re-entrant calls refused instead of deadlocking.

mod common;

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::time::Duration;

use common::{Hook, artifact_for, key};
use saggar_cache::{CacheError, CompileCache, CompileExclusion, FaultPoint, LockingMode, Origin};

/// Runs `f` on another thread and fails the test if it does not finish in time (a deadlock).
fn within<R: Send + 'static>(secs: u64, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs)).expect("deadlock: did not finish in time")
}

fn race_one_key(cache: CompileCache, threads: usize) -> (usize, CompileCache) {
    let cache = Arc::new(cache);
    let compiles = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(threads));
    let key = key("thread-race");
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (cache, compiles, barrier, key) = (cache.clone(), compiles.clone(), barrier.clone(), key.clone());
            std::thread::spawn(move || {
                barrier.wait();
                cache
                    .get_or_compile(&key, || {
                        compiles.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(50));
                        Ok::<_, io::Error>(artifact_for(&key, 4096))
                    })
                    .unwrap()
            })
        })
        .collect();
    let expected = artifact_for(&key, 4096);
    let mut origins = Vec::new();
    for h in handles {
        let fetched = h.join().unwrap();
        assert_eq!(fetched.artifact.as_bytes(), expected.as_slice());
        origins.push(fetched.origin);
    }
    assert_eq!(origins.iter().filter(|o| **o == Origin::Compiled).count(), 1, "{origins:?}");
    let cache = Arc::try_unwrap(cache).unwrap();
    (compiles.load(Ordering::SeqCst), cache)
}

#[test]
fn cache_is_shareable_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CompileCache>();
    assert_send_sync::<saggar_cache::Artifact>();
    assert_send_sync::<CacheError>();
}

#[test]
fn sixty_four_threads_on_one_key_compile_once() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = CompileCache::open(common::config(tmp.path()).build()).unwrap();
    let (compiles, cache) = within(30, move || race_one_key(cache, 64));
    assert_eq!(compiles, 1);
    let s = cache.stats();
    assert_eq!(s.compiles, 1);
    assert!(s.compile_waits >= 1, "{s:?}");
    assert!(s.loads_after_wait >= 1, "{s:?}");
    assert_eq!(s.keys_in_flight, 0, "the per-key lock registry must drain");
}

/// Without cross-process locks the per-key in-process lock alone must still give one compile.
#[test]
fn sixty_four_threads_on_one_key_compile_once_without_file_locks() {
    let tmp = tempfile::tempdir().unwrap();
    let no_flock = Hook::new(|point, _| match point {
        FaultPoint::LockAcquire => Err(io::Error::from_raw_os_error(libc::ENOLCK)),
        _ => Ok(()),
    });
    let cache = CompileCache::open(
        common::config(tmp.path()).locking(LockingMode::BestEffort).fault_injector(no_flock).build(),
    )
    .unwrap();
    let (compiles, cache) = within(30, move || race_one_key(cache, 64));
    assert_eq!(compiles, 1);
    assert!(cache.stats().unlocked_misses >= 1);
    assert_eq!(cache.stats().keys_in_flight, 0);
}

#[test]
fn sixteen_threads_on_sixteen_keys_compile_one_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Arc::new(CompileCache::open(common::config(tmp.path()).build()).unwrap());
    let active = Arc::new(AtomicUsize::new(0));
    let max_active = Arc::new(AtomicUsize::new(0));
    let compiles = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(16));
    let (c2, a2, m2, n2) = (cache.clone(), active.clone(), max_active.clone(), compiles.clone());
    within(60, move || {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let (cache, active, max_active, compiles, barrier) =
                    (c2.clone(), a2.clone(), m2.clone(), n2.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let key = key(&format!("serial-{i}"));
                    barrier.wait();
                    let fetched = cache
                        .get_or_compile(&key, || {
                            let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                            max_active.fetch_max(now, Ordering::SeqCst);
                            compiles.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(20));
                            active.fetch_sub(1, Ordering::SeqCst);
                            Ok::<_, io::Error>(artifact_for(&key, 1000 + i))
                        })
                        .unwrap();
                    assert_eq!(fetched.artifact.as_bytes(), artifact_for(&key, 1000 + i));
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
    assert_eq!(compiles.load(Ordering::SeqCst), 16);
    assert_eq!(max_active.load(Ordering::SeqCst), 1, "compiles must be serialised by the process-wide compile lock");
    assert_eq!(cache.stats().keys_in_flight, 0);
}

#[test]
fn cache_call_from_inside_a_compile_is_refused_not_deadlocked() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Arc::new(CompileCache::open(common::config(tmp.path()).build()).unwrap());
    let c = cache.clone();
    let fetched = within(20, move || {
        c.get_or_compile(&key("outer"), || {
            let nested = c.get_or_compile(&key("inner"), || Ok::<_, io::Error>(vec![1]));
            assert!(matches!(nested, Err(CacheError::Reentrant { id }) if id == key("inner").id()), "{nested:?}");
            assert!(matches!(c.put(&key("inner"), vec![2]), Err(CacheError::Reentrant { .. })));
            // The thread already holds the compile lock: nested use runs without deadlocking.
            assert_eq!(saggar_cache::with_compile_lock(|| 5), 5);
            Ok::<_, io::Error>(vec![3])
        })
        .unwrap()
    });
    assert_eq!(fetched.artifact.as_bytes(), &[3]);
    assert_eq!(cache.stats().keys_in_flight, 0);
}

#[test]
fn failed_compile_publishes_nothing_and_the_next_call_compiles() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = CompileCache::open(common::config(tmp.path()).build()).unwrap();
    let k = key("failing");
    let err = cache.get_or_compile(&k, || Err::<Vec<u8>, _>(io::Error::other("out of registers"))).unwrap_err();
    match &err {
        CacheError::Compile { id, source } => {
            assert_eq!(*id, k.id());
            assert!(source.to_string().contains("out of registers"));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(!cache.entry_path(&k).exists());
    assert!(common::temp_files(tmp.path()).is_empty());
    let ok = cache.get_or_compile(&k, || Ok::<_, io::Error>(vec![7; 10])).unwrap();
    assert_eq!(ok.origin, Origin::Compiled);
    let s = cache.stats();
    assert_eq!((s.compiles, s.compile_failures, s.publishes), (2, 1, 1));
}

#[test]
fn panicking_compile_releases_every_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Arc::new(CompileCache::open(common::config(tmp.path()).build()).unwrap());
    let c = cache.clone();
    let panicked = std::thread::spawn(move || {
        c.get_or_compile(&key("panics"), || -> Result<Vec<u8>, io::Error> { panic!("compiler crashed") })
    })
    .join();
    assert!(panicked.is_err());
    let c = cache.clone();
    let fetched = within(10, move || c.get_or_compile(&key("panics"), || Ok::<_, io::Error>(vec![1, 2, 3])).unwrap());
    assert_eq!(fetched.origin, Origin::Compiled);
    assert_eq!(cache.stats().keys_in_flight, 0);
}

/// Two threads compile two keys; each compile waits (up to `wait`) for the other to be compiling
/// too. Returns whether one saw the other: true only if the compiles ran at the same time.
fn overlapping_compiles(exclusion: CompileExclusion, wait: Duration) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(CompileCache::open(common::config(dir.path()).build()).unwrap());
    let inside = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = ["parallel-a", "parallel-b"]
        .into_iter()
        .map(|name| {
            let (cache, inside) = (cache.clone(), inside.clone());
            std::thread::spawn(move || {
                let key = key(name);
                let mut saw_other = false;
                cache
                    .get_or_compile_with(&key, exclusion, || {
                        inside.fetch_add(1, Ordering::SeqCst);
                        let deadline = std::time::Instant::now() + wait;
                        while std::time::Instant::now() < deadline {
                            if inside.load(Ordering::SeqCst) == 2 {
                                saw_other = true;
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        inside.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, io::Error>(artifact_for(&key, 64))
                    })
                    .unwrap();
                saw_other
            })
        })
        .collect();
    handles.into_iter().any(|h| h.join().unwrap())
}

#[test]
fn key_exclusion_compiles_different_keys_in_parallel_and_process_exclusion_does_not() {
    let key = || overlapping_compiles(CompileExclusion::Key, Duration::from_secs(10));
    assert!(within(30, key), "thread-safe compiles did not overlap");
    let process = || overlapping_compiles(CompileExclusion::Process, Duration::from_millis(300));
    assert!(!within(30, process), "the compile lock let compiles overlap");
}
