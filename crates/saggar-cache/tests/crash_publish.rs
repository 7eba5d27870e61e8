//! A writer killed with SIGKILL at each publish step: the next reader sees the old entry or
//! none, never a partial one, and can compile and publish.

mod common;

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use common::{Hook, artifact_for, child_path, child_role, child_var, key, sigkill_self, spawn_child};
use saggar_cache::{CompileCache, FaultPoint, Origin};

const LEN: usize = 600 * 1024;

fn point_named(name: &str) -> FaultPoint {
    match name {
        "before_write" => FaultPoint::PublishBeforeWrite,
        "mid_write" => FaultPoint::PublishMidWrite,
        "after_fsync" => FaultPoint::PublishAfterFsync,
        "after_rename" => FaultPoint::PublishAfterRename,
        other => panic!("unknown crash point {other}"),
    }
}

fn new_bytes() -> Vec<u8> {
    artifact_for(&key("crash-new"), LEN)
}

fn old_bytes() -> Vec<u8> {
    artifact_for(&key("crash-old"), LEN / 3)
}

/// Child role (not a test on its own): publish, and die by SIGKILL at the chosen step.
#[test]
fn child_crashing_writer() {
    if child_role().as_deref() != Some("crash") {
        return;
    }
    let dir = child_path("SAGGAR_CRASH_DIR");
    let at = point_named(&child_var("SAGGAR_CRASH_AT"));
    let hook = Hook::new(move |point, _| {
        if point == at {
            sigkill_self();
        }
        Ok(())
    });
    let cache = CompileCache::open(common::config(&dir).fault_injector(hook).build()).unwrap();
    let k = key("crash");
    match child_var("SAGGAR_CRASH_MODE").as_str() {
        "cold" => {
            cache.get_or_compile(&k, || Ok::<_, io::Error>(new_bytes())).unwrap();
        }
        "replace" => {
            cache.put(&k, new_bytes()).unwrap();
        }
        other => panic!("unknown mode {other}"),
    }
    panic!("the writer should have been killed at {at:?}");
}

fn crash_at(dir: &Path, point: &str, mode: &str) {
    let out = spawn_child(
        "child_crashing_writer",
        "crash",
        &[
            ("SAGGAR_CRASH_DIR", dir.display().to_string()),
            ("SAGGAR_CRASH_AT", point.to_owned()),
            ("SAGGAR_CRASH_MODE", mode.to_owned()),
        ],
    )
    .wait_with_output()
    .unwrap();
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "writer was not killed at {point}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

const POINTS: [&str; 4] = ["before_write", "mid_write", "after_fsync", "after_rename"];

/// Held by each parent test for its whole body. A child forked by one test inherits, until it
/// execs, the lock-file descriptors the other test holds at that moment, so that test's lock
/// would briefly look busy to itself and its `gc` would skip the temp file it must remove.
static PARENTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn killed_cold_writer_leaves_no_entry_or_a_complete_one() {
    if child_role().is_some() {
        return;
    }
    let _one_parent_at_a_time = PARENTS.lock().unwrap_or_else(|e| e.into_inner());
    for point in POINTS {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        crash_at(dir, point, "cold");
        let renamed = point == "after_rename";
        // The crash really happened mid-publish: the dead writer's temp file is still there.
        assert_eq!(common::temp_files(dir).len(), usize::from(!renamed), "{point}");

        let reader = CompileCache::open(common::config(dir).build()).unwrap();
        let seen = reader.read_disk(&key("crash")).unwrap();
        if renamed {
            assert_eq!(seen.unwrap().as_bytes(), new_bytes().as_slice(), "{point}");
        } else {
            assert!(seen.is_none(), "{point}: a partial entry became visible");
        }
        assert_eq!(reader.stats().corrupt_evicted, 0, "{point}");

        let fetched = reader.get_or_compile(&key("crash"), || Ok::<_, io::Error>(new_bytes())).unwrap();
        assert_eq!(fetched.artifact.as_bytes(), new_bytes().as_slice());
        let expected = if renamed { Origin::Disk } else { Origin::Compiled };
        assert_eq!(fetched.origin, expected, "{point}");
        // The next locked writer removed the dead writer's temp file.
        assert!(common::temp_files(dir).is_empty(), "{point}");
        assert_eq!(reader.stats().stale_temps_removed, u64::from(!renamed), "{point}");
        let fresh = CompileCache::open(common::config(dir).build()).unwrap();
        assert_eq!(fresh.read_disk(&key("crash")).unwrap().unwrap().as_bytes(), new_bytes().as_slice());
    }
}

#[test]
fn killed_replacing_writer_leaves_the_old_entry_or_the_new_one() {
    if child_role().is_some() {
        return;
    }
    let _one_parent_at_a_time = PARENTS.lock().unwrap_or_else(|e| e.into_inner());
    for point in POINTS {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let seed = CompileCache::open(common::config(dir).build()).unwrap();
        seed.put(&key("crash"), old_bytes()).unwrap();
        drop(seed);

        crash_at(dir, point, "replace");
        let renamed = point == "after_rename";
        assert_eq!(common::temp_files(dir).len(), usize::from(!renamed), "{point}");

        let reader = CompileCache::open(common::config(dir).build()).unwrap();
        let seen = reader.read_disk(&key("crash")).unwrap().unwrap();
        let want = if renamed { new_bytes() } else { old_bytes() };
        assert!(seen.as_bytes() == want.as_slice(), "{point}: neither old nor new");
        assert_eq!(reader.stats().corrupt_evicted, 0, "{point}");

        // The cache stays writable: a new publish replaces the entry and gc clears the temp.
        reader.put(&key("crash"), b"third".to_vec()).unwrap();
        let gc = reader.gc().unwrap();
        // The dead writer's temp file is gone (checked below), removed once: by the locked `put` or by
        // `gc`, depending on timing, so neither count is exact here; it is never counted twice.
        assert!(gc.stale_temps_removed <= usize::from(!renamed), "{point}");
        assert!(reader.stats().stale_temps_removed <= u64::from(!renamed), "{point}");
        assert!(common::temp_files(dir).is_empty(), "{point}");
        let fresh = CompileCache::open(common::config(dir).build()).unwrap();
        assert_eq!(fresh.read_disk(&key("crash")).unwrap().unwrap().as_bytes(), b"third");
    }
}
