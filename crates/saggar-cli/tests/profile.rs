//! The contract of `saggar perf --onnx FILE --dump-profile` on the host backend: the table lists
//! every step with its nodes and the op patterns, the JSON `profile` has one row per step whose
//! times sum within the whole run, and bad values exit with 2 and one line.

mod common;

use common::{Sandbox, assert_error, assert_success, f64_at, stdout, u64_at};

const DLRM_ONNX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../saggar-onnx/models/dlrm/model.onnx");
const MLP_ONNX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../saggar-onnx/models/mlp/model.onnx");
const MLP_INPUTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../saggar-onnx/models/mlp/test_data_set_0");

fn perf(sandbox: &Sandbox, extra: &[&str]) -> std::process::Output {
    let cache = sandbox.cache_dir("cache");
    let mut args = vec!["perf", "--backend", "host", "--requests", "5", "--warmup-runs", "0", "--warmup-time", "0"];
    args.extend(["--buckets", "list:1,2,4", "--quiet", "--cache-dir", &cache]);
    args.extend(extra);
    sandbox.run(&args)
}

#[test]
fn dump_profile_prints_every_step_with_its_nodes_and_the_json_has_them() {
    let sandbox = Sandbox::new();
    let out = sandbox.path("out.json");
    let out_arg = out.display().to_string();
    let output = perf(
        &sandbox,
        &["--onnx", DLRM_ONNX, "--trace", "const:3", "--dump-profile", "--dump-profile-batch", "2", "--json", &out_arg],
    );
    assert_success(&output);
    let text = stdout(&output);
    assert!(text.contains("profile: batch 2,"), "{text}");
    assert!(text.contains("STEP") && text.contains("top op patterns"), "{text}");
    let json = common::read_json(&out);
    let profile = &json["profile"];
    assert_eq!(u64_at(profile, "/batch"), 2);
    assert_eq!(u64_at(profile, "/iterations"), 5, "--iterations sets the profiled runs");
    let steps = profile["steps"].as_array().expect("steps");
    assert!(!steps.is_empty());
    for (i, step) in steps.iter().enumerate() {
        assert_eq!(u64_at(step, "/index"), i as u64);
        let nodes = step["nodes"].as_array().unwrap();
        assert!(!nodes.is_empty(), "{step}");
        // Every step is a row of the table, with its kind and nodes.
        let kind = step["kind"].as_str().unwrap();
        let first = nodes[0].as_str().unwrap();
        assert!(text.lines().any(|l| l.contains(kind) && l.contains(first)), "step {i} ({kind}, {first}) missing");
    }
    let sum: f64 = steps.iter().map(|s| s["median_us"].as_f64().unwrap()).sum();
    assert!((sum - f64_at(profile, "/steps_us")).abs() <= 1e-6 * sum.max(1.0));
    assert!(sum <= f64_at(profile, "/total_us") * 1.5 + 50.0, "{profile:#}");
    let patterns: u64 = profile["op_patterns"].as_array().unwrap().iter().map(|p| u64_at(p, "/steps")).sum();
    assert_eq!(patterns, steps.len() as u64);
    // Without the flag the report has no profile.
    let plain = sandbox.path("plain.json");
    let plain_arg = plain.display().to_string();
    assert_success(&perf(&sandbox, &["--onnx", MLP_ONNX, "--trace", "const:1", "--json", &plain_arg]));
    assert!(common::read_json(&plain).get("profile").is_none());
}

#[test]
fn dump_profile_takes_the_loaded_inputs_batch() {
    let sandbox = Sandbox::new();
    let output = perf(&sandbox, &["--onnx", MLP_ONNX, "--load-inputs", MLP_INPUTS, "--dump-profile"]);
    assert_success(&output);
    assert!(stdout(&output).contains("profile: batch "), "{}", stdout(&output));
}

#[test]
fn bad_dump_profile_values_exit_2_with_one_line() {
    let sandbox = Sandbox::new();
    for extra in [
        &["--onnx", MLP_ONNX, "--dump-profile", "--dump-profile-batch", "0"][..],
        &["--onnx", MLP_ONNX, "--dump-profile", "--dump-profile-batch", "x"],
        &["--onnx", MLP_ONNX, "--dump-profile", "--dump-profile-batch", "99999999"],
        &["--onnx", MLP_ONNX, "--dump-profile-batch", "2"],
        &["--model", "mlp", "--dump-profile"],
        &["--onnx", MLP_ONNX, "--load-inputs", MLP_INPUTS, "--dump-profile", "--dump-profile-batch", "7"],
    ] {
        let error = assert_error(&perf(&sandbox, extra), 2);
        assert!(
            ["dump-profile", "--onnx", "required arguments"].iter().any(|w| error.contains(w)),
            "{extra:?}: {error}"
        );
    }
}
