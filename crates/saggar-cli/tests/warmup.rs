//! `saggar warmup`: cold then warm, eight processes on one cold directory, and several devices.

mod common;

use std::process::Stdio;

use common::{Sandbox, assert_success, read_json, u64_at};

fn warmup(sandbox: &Sandbox, json_name: &str, args: &[&str]) -> serde_json::Value {
    let json = sandbox.path(json_name);
    let mut full = vec!["warmup", "--json", json.to_str().unwrap()];
    full.extend_from_slice(args);
    let output = sandbox.run(&full);
    assert_success(&output);
    read_json(&json)
}

#[test]
fn a_second_warmup_compiles_nothing() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_recsys();
    let cache = sandbox.cache_dir("cache");
    let args = ["--cache-dir", cache.as_str(), "--model-config", config.as_str(), "--backend", "host"];
    let cold = warmup(&sandbox, "cold.json", &args);
    for field in ["devices", "buckets", "compiles", "disk_loads", "wall_s", "ready_s"] {
        assert!(cold.get(field).is_some(), "missing `{field}` in {cold:#}");
    }
    let (wall, ready) = (cold["wall_s"].as_f64().unwrap(), cold["ready_s"].as_f64().unwrap());
    assert!(ready >= wall && wall > 0.0, "ready counts from the process start, before the sessions: {cold:#}");
    assert_eq!(cold["buckets"], serde_json::json!([1, 2, 4, 8, 16, 32, 64]));
    assert_eq!(u64_at(&cold, "/compiles"), 7);
    assert_eq!(u64_at(&cold, "/disk_loads"), 0);
    assert_eq!(cold["devices"][0]["ordinal"], 0);

    let warm = warmup(&sandbox, "warm.json", &args);
    assert_eq!(u64_at(&warm, "/compiles"), 0, "{warm:#}");
    assert_eq!(u64_at(&warm, "/disk_loads"), 7, "{warm:#}");

    // Other buckets of the same model are new programs; the shared ones are loaded.
    let stepped =
        warmup(&sandbox, "stepped.json", &[&args[..], &["--buckets", "stepped", "--max-batch", "24"]].concat());
    assert_eq!(stepped["buckets"], serde_json::json!([1, 2, 4, 8, 16, 24]));
    assert_eq!(u64_at(&stepped, "/compiles"), 1, "only bucket 24 is new: {stepped:#}");
    assert_eq!(u64_at(&stepped, "/disk_loads"), 5);
}

#[test]
fn eight_processes_on_a_cold_directory_compile_each_bucket_once() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_recsys();
    let cache = sandbox.cache_dir("cache");
    let children: Vec<_> = (0..8)
        .map(|i| {
            let json = sandbox.path(&format!("race-{i}.json"));
            sandbox
                .saggar()
                .args(["warmup", "--backend", "host", "--cache-dir", &cache, "--model-config", &config])
                .args(["--buckets", "list:1,2,3,4,5,6,8,12,16,32"])
                .arg("--json")
                .arg(&json)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map(|child| (child, json))
                .expect("spawning saggar warmup")
        })
        .collect();
    let mut total_compiles = 0;
    for (child, json) in children {
        let output = child.wait_with_output().expect("waiting for saggar warmup");
        assert_success(&output);
        let report = read_json(&json);
        let (compiles, loads) = (u64_at(&report, "/compiles"), u64_at(&report, "/disk_loads"));
        assert_eq!(
            compiles + loads + u64_at(&report, "/memory_hits"),
            10,
            "every bucket is compiled or loaded: {report:#}"
        );
        total_compiles += compiles;
    }
    assert_eq!(total_compiles, 10, "each of the 10 buckets compiled exactly once across the 8 processes");
    let entries = std::fs::read_dir(&cache)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "sce"));
    assert_eq!(entries.count(), 10);
}

#[test]
fn several_devices_share_one_compile() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_mlp();
    let cache = sandbox.cache_dir("cache");
    let report = warmup(
        &sandbox,
        "group.json",
        &[
            "--backend",
            "host",
            "--devices",
            "0,2,3",
            "--cache-dir",
            &cache,
            "--model-config",
            &config,
            "--max-batch",
            "8",
        ],
    );
    let devices = report["devices"].as_array().expect("a device list");
    let ordinals: Vec<u64> = devices.iter().map(|d| d["ordinal"].as_u64().unwrap()).collect();
    assert_eq!(ordinals, [0, 2, 3]);
    assert_eq!(u64_at(&report, "/compiles"), 4, "buckets 1, 2, 4, 8 compiled once for three devices: {report:#}");
    assert_eq!(u64_at(&devices[0], "/compiles"), 4);
    for other in &devices[1..] {
        assert_eq!(u64_at(other, "/compiles"), 0, "{report:#}");
        assert_eq!(u64_at(other, "/disk_loads") + u64_at(other, "/memory_hits"), 4, "{report:#}");
    }
    let f = |v: &serde_json::Value| v.as_f64().unwrap();
    for device in devices {
        let ready = f(&device["ready_s"]);
        assert!(f(&report["opened_s"]) <= ready && ready <= f(&report["ready_s"]), "{report:#}");
    }

    let all = warmup(
        &sandbox,
        "all.json",
        &[
            "--backend",
            "host",
            "--devices",
            "all",
            "--cache-dir",
            &cache,
            "--model-config",
            &config,
            "--max-batch",
            "8",
        ],
    );
    assert_eq!(all["devices"].as_array().unwrap().len(), 4);
    assert_eq!(u64_at(&all, "/compiles"), 0);
}

#[test]
fn adaptive_warmup_matches_the_perf_buckets() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_mlp();
    let cache = sandbox.cache_dir("cache");
    let trace = ["--trace", "zipf:1.3:40", "--requests", "300", "--seed", "9", "--buckets", "adaptive:4"];
    let warm = warmup(
        &sandbox,
        "w.json",
        &[&["--backend", "host", "--cache-dir", &cache, "--model-config", &config][..], &trace].concat(),
    );
    let perf_json = sandbox.path("p.json");
    let output = sandbox.run(
        &[
            &[
                "perf",
                "--backend",
                "host",
                "--cache-dir",
                &cache,
                "--model-config",
                &config,
                "--json",
                perf_json.to_str().unwrap(),
            ][..],
            &trace,
        ]
        .concat(),
    );
    assert_success(&output);
    let perf = read_json(&perf_json);
    assert_eq!(warm["buckets"], perf["buckets"]);
    assert_eq!(u64_at(&perf, "/cache/compiles"), 0, "warmup precompiled every bucket perf uses: {perf:#}");
}
