//! Listing: entries only, never a temp or lock file, with their key fields, size and age.

mod common;

use std::io;
use std::sync::{Arc, Mutex, mpsc};

use common::{Hook, artifact_for, key};
use saggar_cache::{CompileCache, FaultPoint};

#[test]
fn listing_never_returns_temp_or_lock_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let cache = CompileCache::open(common::config(&dir).build()).unwrap();
    for name in ["a", "b"] {
        cache.put(&key(name), artifact_for(&key(name), 1000)).unwrap();
    }
    std::fs::write(dir.join("README"), "not an entry").unwrap();
    std::fs::write(dir.join(format!("{}.sce.tmp", key("x").id())), "").unwrap();

    // A writer paused mid-publish, with its temp file complete and fsynced but not renamed.
    let (paused_tx, paused_rx) = mpsc::channel();
    let (resume_tx, resume_rx) = mpsc::channel::<()>();
    let resume_rx = Arc::new(Mutex::new(resume_rx));
    let hook = Hook::new(move |point, _| {
        if point == FaultPoint::PublishAfterFsync {
            paused_tx.send(()).unwrap();
            resume_rx.lock().unwrap().recv().unwrap();
        }
        Ok(())
    });
    let writer = CompileCache::open(common::config(&dir).fault_injector(hook).build()).unwrap();
    let k = key("in-flight");
    std::thread::scope(|s| {
        let w = s.spawn(|| writer.get_or_compile(&k, || Ok::<_, io::Error>(artifact_for(&k, 300_000))).unwrap());
        paused_rx.recv().unwrap();
        assert_eq!(common::temp_files(&dir).len(), 1, "{:?}", common::names(&dir));
        let listed: Vec<_> = cache.list().unwrap().into_iter().map(|e| e.id).collect();
        let mut want = vec![key("a").id(), key("b").id()];
        want.sort();
        assert_eq!(listed, want, "listing while a temp file exists");
        resume_tx.send(()).unwrap();
        w.join().unwrap();
    });

    let listed = cache.list().unwrap();
    assert_eq!(listed.len(), 3);
    for info in &listed {
        let summary = info.header.as_ref().unwrap();
        assert_eq!(summary.key.id(), info.id);
        assert_eq!(summary.key.backend(), "host");
        assert_eq!(summary.key.arch(), "x86_64-test");
        assert_eq!(summary.key.compiler_version(), "1.0.0");
        assert!(info.file_len > summary.payload_len);
        assert!(info.age().as_secs() < 60);
        let bytes = std::fs::read(&info.path).unwrap();
        let payload = &bytes[bytes.len() - summary.payload_len as usize..];
        assert_eq!(summary.payload_blake3, blake3::hash(payload).to_hex().as_str());
    }
    let in_flight = listed.iter().find(|e| e.id == k.id()).unwrap();
    assert_eq!(in_flight.header.as_ref().unwrap().payload_len, 300_000);
}

#[test]
fn listing_shows_damaged_entries_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = CompileCache::open(common::config(tmp.path()).build()).unwrap();
    let k = key("damaged");
    cache.put(&k, artifact_for(&k, 1000)).unwrap();
    std::fs::OpenOptions::new().write(true).open(cache.entry_path(&k)).unwrap().set_len(20).unwrap();
    let listed = cache.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].header.is_err(), "{:?}", listed[0]);
}
