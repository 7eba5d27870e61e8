//! The size bound evicts least recently used entries, and eviction never breaks a reader: a
//! reader that has the file open gets complete bytes, a later one gets a miss.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use common::{Hook, artifact_for, child_path, child_role, key, spawn_child};
use saggar_cache::{CompileCache, FaultPoint};

const LEN: usize = 100_000;

#[test]
fn size_bound_evicts_the_least_recently_used_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Room for two entries (each a little over LEN bytes with its header), not three.
    let cache = CompileCache::open(
        common::config(dir).max_disk_bytes(Some(2 * LEN as u64 + 4096)).touch_interval(Duration::ZERO).build(),
    )
    .unwrap();
    let (a, b, c) = (key("lru-a"), key("lru-b"), key("lru-c"));
    cache.put(&a, artifact_for(&a, LEN)).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    cache.put(&b, artifact_for(&b, LEN)).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    // Using A makes B the least recently used.
    assert!(cache.read_disk(&a).unwrap().is_some());
    std::thread::sleep(Duration::from_millis(30));
    cache.put(&c, artifact_for(&c, LEN)).unwrap();

    let mut left: Vec<_> = cache.list().unwrap().into_iter().map(|e| e.id).collect();
    left.sort();
    let mut want = vec![a.id(), c.id()];
    want.sort();
    assert_eq!(left, want);
    let s = cache.stats();
    assert_eq!(s.lru_evictions, 1);
    assert!(s.lru_evicted_bytes > LEN as u64);
    // Evicted entries take their lock files with them.
    assert!(!dir.join(format!("{}.sce.lock", b.id())).exists());

    let report = cache.trim_to(0).unwrap();
    assert_eq!(report.lru_evicted, 2);
    assert_eq!(report.remaining_bytes, 0);
    assert!(cache.list().unwrap().is_empty());
}

#[test]
fn eviction_while_a_reader_has_the_file_open_gives_complete_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let k = key("evicted-under-reader");
    let bytes = artifact_for(&k, 3 << 20);
    CompileCache::open(common::config(&dir).build()).unwrap().put(&k, bytes.clone()).unwrap();

    let (opened_tx, opened_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let go_rx = Arc::new(Mutex::new(go_rx));
    let hook = Hook::new(move |point, _| {
        if point == FaultPoint::LoadOpened {
            opened_tx.send(()).unwrap();
            go_rx.lock().unwrap().recv().unwrap();
        }
        Ok(())
    });
    let reader = CompileCache::open(common::config(&dir).fault_injector(hook).build()).unwrap();
    let evictor = CompileCache::open(common::config(&dir).build()).unwrap();
    std::thread::scope(|s| {
        let r = s.spawn(|| reader.read_disk(&k));
        opened_rx.recv().unwrap();
        // The reader holds an open descriptor and has read nothing: evict now.
        let report = evictor.trim_to(0).unwrap();
        assert_eq!(report.lru_evicted, 1);
        assert!(!reader.entry_path(&k).exists());
        go_tx.send(()).unwrap();
        let got = r.join().unwrap().unwrap().expect("the open reader must finish its read");
        assert!(got.as_bytes() == bytes.as_slice(), "partial or wrong bytes");
        // A reader that starts after the eviction sees a miss. (Pre-arm the hook so that,
        // were a file still there, the test would fail instead of hanging.)
        go_tx.send(()).unwrap();
        assert!(reader.read_disk(&k).unwrap().is_none());
    });
    assert_eq!(reader.stats().corrupt_evicted, 0);
}

/// Child role (not a test on its own): publish and evict the same key over and over.
#[test]
fn child_publish_evict_loop() {
    if child_role().as_deref() != Some("churn") {
        return;
    }
    let dir = child_path("SAGGAR_CHURN_DIR");
    let cache = CompileCache::open(common::config(&dir).build()).unwrap();
    let k = key("churn");
    let bytes = artifact_for(&k, 1 << 20);
    let deadline = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < deadline {
        cache.put(&k, bytes.clone()).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        cache.trim_to(0).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn eviction_by_another_process_never_yields_partial_bytes() {
    if child_role().is_some() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let reader = CompileCache::open(common::config(&dir).build()).unwrap();
    let k = key("churn");
    let bytes = artifact_for(&k, 1 << 20);
    let mut child =
        spawn_child("child_publish_evict_loop", "churn", &[("SAGGAR_CHURN_DIR", dir.display().to_string())]);
    let (mut hits, mut misses) = (0, 0);
    loop {
        match reader.read_disk(&k).unwrap() {
            Some(got) => {
                assert!(got.as_bytes() == bytes.as_slice(), "partial or wrong bytes");
                hits += 1;
            }
            None => misses += 1,
        }
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "churn child failed: {status:?} {:?}", status.signal());
            break;
        }
    }
    eprintln!("reads during churn: {hits} complete, {misses} misses");
    assert!(hits > 0, "the reader never overlapped a published entry");
    assert_eq!(reader.stats().corrupt_evicted, 0);
}
