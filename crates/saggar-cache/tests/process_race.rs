//! N processes starting together on one cold key: one compile, N-1 loads, identical bytes.

mod common;

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use common::{append_line, artifact_for, child_path, child_role, key, spawn_child};
use saggar_cache::{CompileCache, Origin};

const CHILDREN: usize = 32;
const ARTIFACT_LEN: usize = 48 * 1024;

/// Child role (not a test on its own): one "GPU process" asking for the cold key.
#[test]
fn child_race_one_key() {
    if child_role().as_deref() != Some("race") {
        return;
    }
    let dir = child_path("SAGGAR_RACE_DIR");
    let counter = child_path("SAGGAR_RACE_COUNTER");
    let go = child_path("SAGGAR_RACE_GO");
    let out = child_path("SAGGAR_RACE_OUT");
    let cache = CompileCache::open(common::config(&dir).build()).unwrap();
    let key = key("process-race");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !go.exists() {
        assert!(Instant::now() < deadline, "parent never said go");
        std::thread::sleep(Duration::from_millis(1));
    }
    let fetched = cache
        .get_or_compile(&key, || {
            append_line(&counter, &std::process::id().to_string());
            // Widen the race: everyone else arrives while this compile runs.
            std::thread::sleep(Duration::from_millis(100));
            Ok::<_, io::Error>(artifact_for(&key, ARTIFACT_LEN))
        })
        .unwrap();
    std::fs::write(&out, fetched.artifact.as_bytes()).unwrap();
    std::fs::write(out.with_extension("origin"), format!("{:?}", fetched.origin)).unwrap();
}

#[test]
fn thirty_two_processes_on_one_cold_key_compile_once() {
    if child_role().is_some() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let counter = tmp.path().join("compiles.log");
    let go = tmp.path().join("go");
    let children: Vec<_> = (0..CHILDREN)
        .map(|i| {
            spawn_child(
                "child_race_one_key",
                "race",
                &[
                    ("SAGGAR_RACE_DIR", dir.display().to_string()),
                    ("SAGGAR_RACE_COUNTER", counter.display().to_string()),
                    ("SAGGAR_RACE_GO", go.display().to_string()),
                    ("SAGGAR_RACE_OUT", tmp.path().join(format!("out-{i}.bin")).display().to_string()),
                ],
            )
        })
        .collect();
    std::fs::write(&go, b"go").unwrap();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "child {i} failed ({:?}, signal {:?}):\n{}\n{}",
            out.status.code(),
            out.status.signal(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let compiles = std::fs::read_to_string(&counter).unwrap();
    assert_eq!(compiles.lines().count(), 1, "exactly one process may compile; compiled in: {compiles:?}");
    let expected = artifact_for(&key("process-race"), ARTIFACT_LEN);
    let mut origins = Vec::new();
    for i in 0..CHILDREN {
        let out = tmp.path().join(format!("out-{i}.bin"));
        let got = std::fs::read(&out).unwrap();
        assert!(got == expected, "child {i} got different bytes");
        origins.push(std::fs::read_to_string(out.with_extension("origin")).unwrap());
    }
    let compiled = origins.iter().filter(|o| *o == "Compiled").count();
    assert_eq!(compiled, 1, "origins: {origins:?}");
    assert!(origins.iter().all(|o| ["Compiled", "AfterWait", "Disk"].contains(&o.as_str())), "origins: {origins:?}");
    assert!(origins.iter().filter(|o| *o == "AfterWait").count() >= 1, "the race was not exercised: {origins:?}");
    assert!(common::temp_files(&dir).is_empty());
    let cache = CompileCache::open(common::config(&dir).build()).unwrap();
    let again = cache
        .get_or_compile(&key("process-race"), || -> Result<Vec<u8>, io::Error> { panic!("must not compile again") })
        .unwrap();
    assert_eq!(again.origin, Origin::Disk);
}
