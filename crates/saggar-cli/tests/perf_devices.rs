//! `saggar perf --devices`: one trace through a session group on the host backend's simulated
//! devices: the first compiles and the others load, the requests spread over the devices, and the
//! flags that belong to one device are refused before anything is compiled.

mod common;

use common::{Sandbox, assert_error, assert_success, read_json, u64_at};

const MLP_ONNX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../saggar-onnx/models/mlp/model.onnx");

#[test]
fn a_group_of_three_devices_compiles_once_and_shares_the_requests() {
    let sandbox = Sandbox::new();
    let cache = sandbox.cache_dir("cache");
    let out = sandbox.path("group.json");
    let output = sandbox
        .saggar()
        .args(["perf", "--backend", "host", "--onnx", MLP_ONNX, "--devices", "0,1,2", "--cache-dir", &cache])
        .args(["--trace", "uniform:1..16", "--requests", "300", "--concurrency", "6", "--verify", "8", "--json"])
        .arg(&out)
        .output()
        .expect("saggar runs");
    assert_success(&output);
    let report = read_json(&out);
    let devices = report["devices"].as_array().expect("devices array");
    assert_eq!(devices.len(), 3, "{report:#}");
    let shares: Vec<u64> = devices.iter().map(|d| d["requests"].as_u64().unwrap()).collect();
    assert_eq!(shares.iter().sum::<u64>(), u64_at(&report, "/requests"), "every timed request counted once");
    assert!(shares.iter().all(|&n| n > 0), "six workers keep every device busy: {shares:?}");
    let programs = report["startup"]["programs"].as_array().unwrap();
    let compiled = programs.iter().filter(|p| p["source"] == "compiled").count();
    let loaded = programs.iter().filter(|p| p["source"] == "loaded").count();
    assert_eq!(loaded, 2 * compiled, "devices 1 and 2 load what device 0 compiled: {programs:?}");
    assert_eq!(u64_at(&report, "/verify/mismatches"), 0);
    assert_eq!(u64_at(&report, "/failures/failed"), 0);

    let one = sandbox.path("one.json");
    let single = sandbox
        .saggar()
        .args(["perf", "--backend", "host", "--onnx", MLP_ONNX, "--device", "1", "--requests", "20", "--json"])
        .arg(&one)
        .output()
        .expect("saggar runs");
    assert_success(&single);
    let one = read_json(&one);
    assert_eq!(one["devices"].as_array().unwrap().len(), 1);
    assert_eq!(one["devices"][0]["ordinal"], 1);
}

#[test]
fn device_flags_that_need_one_device_are_refused_before_compiling() {
    let sandbox = Sandbox::new();
    let base = ["perf", "--backend", "host", "--onnx", MLP_ONNX, "--requests", "5"];
    let direct = sandbox.run(&[&base[..], &["--devices", "0,1", "--binding", "direct"]].concat());
    let message = assert_error(&direct, 2);
    assert!(message.contains("pinned staging only"), "{message}");
    assert!(common::stderr(&direct).contains("--device N"), "the hint names the way out");
    let both = sandbox.run(&[&base[..], &["--devices", "0,1", "--device", "1"]].concat());
    assert_error(&both, 2);
    let missing = sandbox.run(&[&base[..], &["--devices", "0,9"]].concat());
    let message = assert_error(&missing, 2);
    assert!(message.contains("device 9 does not exist"), "{message}");
}
