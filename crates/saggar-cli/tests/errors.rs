//! Bad arguments and bad files: one `error:` line, one `hint:` line, exit code 2 or 1, never a
//! panic or a backtrace.

mod common;

use std::os::unix::fs::PermissionsExt as _;

use common::{Sandbox, assert_error, stdout};

fn perf_error(sandbox: &Sandbox, args: &[&str], code: i32) -> String {
    let cache = sandbox.cache_dir("cache");
    let output = sandbox.run(&[&["perf", "--cache-dir", &cache, "--requests", "3"][..], args].concat());
    assert_error(&output, code)
}

#[test]
fn bad_flag_values_are_usage_errors() {
    let sandbox = Sandbox::new();
    for (args, needle) in [
        (&["--trace", "zipf:1.1"][..], "zipf:S:MAX"),
        (&["--trace", "const:0"], "at least one row"),
        (&["--trace", "uniform:9..2"], "above the upper bound"),
        (&["--trace", "normal:3"], "unknown trace kind"),
        (&["--backend", "tpu"], "'tpu'"),
        (&["--model", "transformer"], "'transformer'"),
        (&["--buckets", "list:0,4"], "list:0,4"),
        (&["--buckets", "adaptive:0"], "adaptive:0"),
        (&["--max-batch", "0"], "--max-batch"),
        (&["--requests", "0"], "--requests"),
        (&["--concurrency", "0"], "--concurrency"),
        (&["--graphs", "maybe"], "'maybe'"),
        (&["--binding", "zero-copy"], "'zero-copy'"),
        (&["--frobnicate"], "--frobnicate"),
        (&["--model", "mlp", "--model-config", "x.json"], "--model-config"),
    ] {
        let line = perf_error(&sandbox, args, 2);
        assert!(line.contains(needle), "{args:?}: {line}");
    }
    let hint = common::stderr(&sandbox.run(&["perf", "--backend", "tpu"]));
    assert!(hint.contains("possible values") && hint.contains("saggar perf --help"), "{hint}");
}

#[test]
fn missing_commands_are_usage_errors() {
    let sandbox = Sandbox::new();
    assert_error(&sandbox.run(&[]), 2);
    let line = assert_error(&sandbox.run(&["cache"]), 2);
    assert!(line.contains("saggar cache"), "{line}");
    assert_error(&sandbox.run(&["cache", "key"]), 2);
    assert_error(&sandbox.run(&["launch"]), 2);
    let line = assert_error(&sandbox.run(&["cache", "key", "--bucket", "8", "--arch", "sm_90"]), 2);
    assert!(line.contains("--backend"), "{line}");
    assert_error(&sandbox.run(&["warmup", "--devices", "0,one"]), 2);
}

#[test]
fn bad_model_configs_are_usage_errors_naming_the_file() {
    let sandbox = Sandbox::new();
    let malformed = sandbox.write("malformed.json", "{\"model\": \"recsys\", \"dense_inputs\": ");
    let line = perf_error(&sandbox, &["--model-config", &malformed], 2);
    assert!(line.contains("malformed.json") && line.contains("malformed model config"), "{line}");

    let typo = sandbox.write("typo.json", r#"{"model": "mlp", "hiden": [4]}"#);
    assert!(perf_error(&sandbox, &["--model-config", &typo], 2).contains("hiden"));

    let invalid = sandbox.write("invalid.json", r#"{"model": "mlp", "input": 0}"#);
    assert!(perf_error(&sandbox, &["--model-config", &invalid], 2).contains("`input`"));

    let missing = sandbox.path("no-such-config.json");
    let line = perf_error(&sandbox, &["--model-config", missing.to_str().unwrap()], 2);
    assert!(line.contains("no-such-config.json"), "{line}");

    // The same for the other commands that load a model.
    let cache = sandbox.cache_dir("cache");
    assert_error(&sandbox.run(&["warmup", "--cache-dir", &cache, "--model-config", &malformed]), 2);
    assert_error(&sandbox.run(&["cache", "key", "--bucket", "8", "--model-config", &malformed]), 2);
}

/// A minimal safetensors writer: `(name, shape)` f32 tensors filled with 0.5.
fn safetensors(tensors: &[(&str, &[usize])]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut offset = 0;
    for (name, shape) in tensors {
        let bytes = shape.iter().product::<usize>() * 4;
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + bytes]}),
        );
        offset += bytes;
    }
    let header = serde_json::Value::Object(header).to_string();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    for _ in 0..offset / 4 {
        out.extend_from_slice(&0.5f32.to_le_bytes());
    }
    out
}

#[test]
fn safetensors_weights_must_match_the_config() {
    let sandbox = Sandbox::new();
    let config = sandbox.write(
        "st.json",
        r#"{"model": "mlp", "name": "st-mlp", "input": 4, "hidden": [], "output": 2, "weights": {"safetensors": "w.safetensors"}}"#,
    );
    std::fs::write(sandbox.path("w.safetensors"), safetensors(&[("mlp.0.weight", &[3, 2]), ("mlp.0.bias", &[2])]))
        .unwrap();
    let line = perf_error(&sandbox, &["--model-config", &config], 2);
    assert!(line.contains("mlp.0.weight") && line.contains("[3, 2]") && line.contains("[4, 2]"), "{line}");

    std::fs::write(sandbox.path("w.safetensors"), b"not a safetensors file").unwrap();
    perf_error(&sandbox, &["--model-config", &config], 2);

    // With the right shapes the file loads (relative to the config's folder) and the run verifies.
    std::fs::write(sandbox.path("w.safetensors"), safetensors(&[("mlp.0.weight", &[4, 2]), ("mlp.0.bias", &[2])]))
        .unwrap();
    let cache = sandbox.cache_dir("cache");
    let output = sandbox.run(&[
        "perf",
        "--backend",
        "host",
        "--model-config",
        &config,
        "--cache-dir",
        &cache,
        "--requests",
        "10",
        "--json",
        "-",
    ]);
    common::assert_success(&output);
    let report: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["verify"]["mismatches"], 0);
}

#[test]
fn unusable_cache_directories_fail_with_a_hint() {
    let sandbox = Sandbox::new();
    let mlp = sandbox.small_mlp();
    let file = sandbox.write("a-file", "not a directory");
    let line = assert_error(&sandbox.run(&["perf", "--model-config", &mlp, "--cache-dir", &file]), 1);
    assert!(line.contains("not a directory"), "{line}");

    let beneath = format!("{file}/cache");
    let line = assert_error(&sandbox.run(&["warmup", "--model-config", &mlp, "--cache-dir", &beneath]), 1);
    assert!(line.contains("cache directory"), "{line}");

    // A directory other users can write could hold planted code: refused.
    let open = sandbox.path("world-writable");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let output = sandbox.run(&["cache", "ls", "--cache-dir", open.to_str().unwrap()]);
    let line = assert_error(&output, 1);
    assert!(line.contains("writable by other users"), "{line}");
    assert!(common::stderr(&output).contains("chmod go-w"));
}

#[test]
fn devices_that_do_not_exist_or_are_unavailable() {
    let sandbox = Sandbox::new();
    let mlp = sandbox.small_mlp();
    let line = perf_error(&sandbox, &["--backend", "host", "--device", "99", "--model-config", &mlp], 2);
    assert!(line.contains("device 99 does not exist"), "{line}");

    // A backend that is unavailable here (no driver, no device, or not built in) is a failure.
    let devices: serde_json::Value = serde_json::from_str(&stdout(&sandbox.run(&["devices", "--json", "-"]))).unwrap();
    let unavailable: Vec<String> = devices["backends"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["available"] == false)
        .map(|b| b["backend"].as_str().unwrap().to_string())
        .collect();
    if unavailable.is_empty() {
        eprintln!("every backend has a device on this machine; the unavailable-backend case is not exercised");
    }
    for backend in unavailable {
        let line = perf_error(&sandbox, &["--backend", &backend, "--model-config", &mlp], 1);
        assert!(line.contains(&backend) && line.contains("unavailable"), "{line}");
    }
}

#[test]
fn a_panic_is_one_line_whatever_rust_backtrace_says() {
    let sandbox = Sandbox::new();
    for backtrace in ["0", "1", "full"] {
        let output = sandbox.saggar().arg("internal-panic").env("RUST_BACKTRACE", backtrace).output().unwrap();
        let line = assert_error(&output, 1);
        assert!(line.contains("internal error"), "{line}");
    }
}

#[test]
fn help_has_examples_and_exits_zero() {
    let sandbox = Sandbox::new();
    for command in [
        &["--help"][..],
        &["perf", "--help"],
        &["warmup", "--help"],
        &["devices", "--help"],
        &["cache", "--help"],
        &["cache", "key", "--help"],
    ] {
        let output = sandbox.run(command);
        common::assert_success(&output);
        assert!(stdout(&output).contains("Examples:"), "{command:?}:\n{}", stdout(&output));
    }
    let perf = stdout(&sandbox.run(&["perf", "--help"]));
    assert!(perf.contains("1e-3"), "the verify tolerance is stated in the help:\n{perf}");
}
