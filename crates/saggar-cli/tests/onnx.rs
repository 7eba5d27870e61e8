//! The contract of `--onnx FILE` (`saggar perf`, `saggar warmup`, `saggar cache key`),
//! `--load-inputs DIR`, `--check-outputs DIR`, `--rtol` and `--atol`, over saggar-onnx's checked-in
//! models: outputs checked, the JSON field `check`, exit 1 on a mismatch, exit 2 with one error line
//! and one hint line for every bad value.

mod common;

use std::path::{Path, PathBuf};

use common::{Sandbox, assert_error, assert_success, read_json, u64_at};
use saggar_onnx::builder::ModelBuilder;
use saggar_onnx::{Tensor, TensorData, read_tensor_pb, write_tensor_pb};
use saggar_shape::{DType, Dim};

fn model_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../saggar-onnx/models").join(name)
}

fn arg(path: &Path) -> &str {
    path.to_str().expect("UTF-8 paths")
}

/// `saggar perf --backend host --onnx <model> --load-inputs <set> --check-outputs <expected>` with a
/// few requests, JSON to `out.json`.
fn perf_check(sandbox: &Sandbox, model: &str, set: &Path, expected: &Path, extra: &[&str]) -> std::process::Output {
    let onnx = model_dir(model).join("model.onnx");
    let json = sandbox.path("out.json");
    let mut args = vec!["perf", "--backend", "host", "--onnx", arg(&onnx), "--requests", "3", "--max-batch", "4"];
    args.extend(["--load-inputs", arg(set), "--check-outputs", arg(expected), "--json", arg(&json)]);
    args.extend(extra);
    sandbox.run(&args)
}

#[test]
fn perf_checks_every_model_against_its_expected_outputs() {
    let sandbox = Sandbox::new();
    for model in ["mlp", "cnn", "dlrm", "bert"] {
        let set = model_dir(model).join("test_data_set_0");
        let out = perf_check(&sandbox, model, &set, &set, &[]);
        assert_success(&out);
        let json = read_json(&sandbox.path("out.json"));
        assert_eq!(json["check"]["passed"], true, "{model}: {json:#}");
        let outputs = json["check"]["outputs"].as_array().expect("check.outputs");
        assert_eq!(outputs.len(), if model == "bert" { 2 } else { 1 }, "{model}");
        assert!(outputs.iter().all(|o| o["mismatches"] == 0 && o["elements"].as_u64() > Some(0)), "{json:#}");
        assert!(json["check"]["max_abs_error"].as_f64().is_some_and(|e| e < 1e-3), "{json:#}");
        assert!(json["check"]["max_rel_error"].is_number() && json["check"]["rtol"] == 1e-3, "{json:#}");
        // The existing fields are all still there.
        assert_eq!(u64_at(&json, "/requests"), 3);
        assert_eq!(json["backend"], "host");
        for field in ["latency_us", "paths", "padding", "cache", "graphs", "verify", "buckets"] {
            assert!(json.get(field).is_some(), "{model}: no `{field}`");
        }
        assert_eq!(u64_at(&json, "/verify/mismatches"), 0, "{model}: the eager evaluation agrees");
    }
}

#[test]
fn perf_without_check_outputs_keeps_the_json_unchanged_and_generates_inputs() {
    let sandbox = Sandbox::new();
    let json = sandbox.path("gen.json");
    let onnx = model_dir("dlrm").join("model.onnx");
    let out = sandbox.run(&[
        "perf",
        "--backend",
        "host",
        "--onnx",
        arg(&onnx),
        "--trace",
        "uniform:1..6",
        "--requests",
        "20",
        "--max-batch",
        "4",
        "--json",
        arg(&json),
    ]);
    assert_success(&out);
    let json = read_json(&json);
    assert!(json.get("check").is_none(), "no `check` without --check-outputs: {json:#}");
    assert_eq!(u64_at(&json, "/verify/mismatches"), 0);
    assert!(u64_at(&json, "/verify/checked") > 0);
    assert!(u64_at(&json, "/split_requests") > 0, "batches above 4 are split: {json:#}");
}

#[test]
fn inputs_are_found_by_name_too() {
    let sandbox = Sandbox::new();
    let set = model_dir("mlp").join("test_data_set_1");
    let by_name = sandbox.path("by-name");
    std::fs::create_dir_all(&by_name).unwrap();
    // The MLP's input is named `x`.
    std::fs::copy(set.join("input_0.pb"), by_name.join("x.pb")).unwrap();
    assert_success(&perf_check(&sandbox, "mlp", &by_name, &set, &[]));
    assert_eq!(read_json(&sandbox.path("out.json"))["check"]["passed"], true);
}

/// A folder whose `output_0.pb` is the MLP's expected output of data set 0 scaled by `factor`.
fn scaled_expected(sandbox: &Sandbox, name: &str, factor: f32) -> PathBuf {
    let set = model_dir("mlp").join("test_data_set_0");
    let want = read_tensor_pb(&set.join("output_0.pb")).unwrap();
    let TensorData::F32(values) = want.tensor.data() else { panic!("f32 output") };
    let scaled =
        Tensor::new(want.tensor.dims().to_vec(), TensorData::F32(values.iter().map(|v| v * factor).collect())).unwrap();
    let dir = sandbox.path(name);
    std::fs::create_dir_all(&dir).unwrap();
    write_tensor_pb(&dir.join("output_0.pb"), &want.name, &scaled).unwrap();
    dir
}

#[test]
fn a_mismatch_exits_1_with_the_check_in_the_json() {
    let sandbox = Sandbox::new();
    let set = model_dir("mlp").join("test_data_set_0");
    let off = scaled_expected(&sandbox, "off", 1.5);
    let err = assert_error(&perf_check(&sandbox, "mlp", &set, &off, &[]), 1);
    assert!(err.contains("--check-outputs") && err.contains("probs"), "{err}");
    let json = read_json(&sandbox.path("out.json"));
    assert_eq!(json["check"]["passed"], false);
    assert!(u64_at(&json, "/check/outputs/0/mismatches") > 0);
    assert!(json["check"]["max_rel_error"].as_f64().is_some_and(|e| e > 0.3), "{json:#}");
    // Expected outputs of another batch: a shape mismatch, also exit 1.
    let other = model_dir("mlp").join("test_data_set_1");
    let err = assert_error(&perf_check(&sandbox, "mlp", &set, &other, &[]), 1);
    assert!(err.contains("expected f32 [1, 10]"), "{err}");
}

#[test]
fn rtol_and_atol_set_the_tolerance() {
    let sandbox = Sandbox::new();
    let set = model_dir("mlp").join("test_data_set_0");
    let near = scaled_expected(&sandbox, "near", 1.0 + 1e-4);
    assert_success(&perf_check(&sandbox, "mlp", &set, &near, &[]));
    assert_error(&perf_check(&sandbox, "mlp", &set, &near, &["--rtol", "1e-6", "--atol", "0"]), 1);
    let json = read_json(&sandbox.path("out.json"));
    assert_eq!((json["check"]["rtol"].as_f64(), json["check"]["atol"].as_f64()), (Some(1e-6), Some(0.0)));
    assert_success(&perf_check(&sandbox, "mlp", &set, &near, &["--rtol", "0", "--atol", "1"]));
}

#[test]
fn warmup_and_cache_key_agree_on_the_entries() {
    let sandbox = Sandbox::new();
    let cache = sandbox.cache_dir("cache");
    let dlrm = model_dir("dlrm").join("model.onnx");
    let json = sandbox.path("warmup.json");
    let warm = |json: &Path| {
        sandbox.run(&[
            "warmup",
            "--backend",
            "host",
            "--onnx",
            arg(&dlrm),
            "--max-batch",
            "4",
            "--cache-dir",
            &cache,
            "--json",
            arg(json),
        ])
    };
    assert_success(&warm(&json));
    let first = read_json(&json);
    assert_eq!(u64_at(&first, "/compiles"), 3, "buckets 1, 2, 4: {first:#}");
    assert_success(&warm(&json));
    assert_eq!(u64_at(&read_json(&json), "/disk_loads"), 3, "a second warmup loads what the first published");
    let key = sandbox.path("key.json");
    let out = sandbox.run(&[
        "cache",
        "key",
        "--onnx",
        arg(&dlrm),
        "--bucket",
        "4",
        "--backend",
        "host",
        "--cache-dir",
        &cache,
        "--json",
        arg(&key),
    ]);
    assert_success(&out);
    let key = read_json(&key);
    assert_eq!(key["present"], true, "{key:#}");
    assert!(key["key_text"].as_str().is_some_and(|t| t.contains("compiler=saggar-onnx")), "{key:#}");

    // BERT compiles per shape: its key needs the other symbolic extents, from --load-inputs.
    let bert = model_dir("bert").join("model.onnx");
    let set = model_dir("bert").join("test_data_set_0");
    let err =
        assert_error(&sandbox.run(&["cache", "key", "--onnx", arg(&bert), "--bucket", "3", "--backend", "host"]), 2);
    assert!(err.contains("seq"), "{err}");
    assert_success(&perf_check(&sandbox, "bert", &set, &set, &["--cache-dir", &cache]));
    let key = sandbox.path("bert-key.json");
    let out = sandbox.run(&[
        "cache",
        "key",
        "--onnx",
        arg(&bert),
        "--bucket",
        "3",
        "--load-inputs",
        arg(&set),
        "--backend",
        "host",
        "--cache-dir",
        &cache,
        "--json",
        arg(&key),
    ]);
    assert_success(&out);
    assert_eq!(read_json(&key)["present"], true, "the per-shape program of batch 3, seq 16 is cached");
}

#[test]
fn bad_values_are_usage_errors_that_say_what_to_do() {
    let sandbox = Sandbox::new();
    let mlp = model_dir("mlp").join("model.onnx");
    let bert = model_dir("bert").join("model.onnx");
    let set = model_dir("mlp").join("test_data_set_0");
    let not_onnx = sandbox.write("not-a-model.onnx", "this is not protobuf");
    let empty = sandbox.path("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let garbage = sandbox.path("garbage");
    std::fs::create_dir_all(&garbage).unwrap();
    std::fs::write(garbage.join("input_0.pb"), [0xffu8; 7]).unwrap();
    let wrong_type = sandbox.path("wrong-type");
    std::fs::create_dir_all(&wrong_type).unwrap();
    write_tensor_pb(&wrong_type.join("input_0.pb"), "x", &Tensor::from_i64s(vec![1, 2])).unwrap();
    let loop_model = sandbox.path("loop.onnx");
    let mut b = ModelBuilder::new(18);
    b.input("n", DType::I64, &[]).input("c", DType::Bool, &[]).output("y", DType::F32, &[Dim::Fixed(4)]);
    b.node("Loop", &["n", "c"], &["y"], &[]);
    std::fs::write(&loop_model, b.to_bytes()).unwrap();

    let perf = |extra: &[&str]| {
        let mut args = vec!["perf", "--backend", "host", "--requests", "2"];
        args.extend(extra);
        sandbox.run(&args)
    };
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--onnx", "/no/such/model.onnx"], "no such file"),
        (vec!["--onnx", &not_onnx], "not a valid ONNX"),
        (vec!["--onnx", arg(&loop_model)], "Loop"),
        (vec!["--onnx", arg(&mlp), "--load-inputs", "/no/such/dir"], "no such folder"),
        (vec!["--onnx", arg(&mlp), "--load-inputs", arg(&empty)], "input_0.pb"),
        (vec!["--onnx", arg(&mlp), "--load-inputs", arg(&garbage)], "TensorProto"),
        (vec!["--onnx", arg(&mlp), "--load-inputs", arg(&wrong_type)], "i64"),
        (vec!["--onnx", arg(&mlp), "--load-inputs", arg(&set), "--check-outputs", arg(&empty)], "output_0.pb"),
        (vec!["--onnx", arg(&mlp), "--check-outputs", arg(&set)], "--load-inputs"),
        (vec!["--load-inputs", arg(&set)], "--onnx"),
        (vec!["--onnx", arg(&mlp), "--load-inputs", arg(&set), "--check-outputs", arg(&set), "--rtol", "abc"], "abc"),
        (vec!["--onnx", arg(&mlp), "--load-inputs", arg(&set), "--check-outputs", arg(&set), "--atol=-1"], "-1"),
        (vec!["--onnx", arg(&mlp), "--model", "mlp"], "--model"),
        (vec!["--onnx", arg(&bert)], "--load-inputs"),
        (
            vec![
                "--onnx",
                arg(&bert),
                "--shapes",
                "input_ids:1x13",
                "--shapes",
                "attention_mask:1x13",
                "--pad-axis",
                "seq:16",
                "--binding",
                "request",
            ],
            "--binding pinned",
        ),
    ];
    for (args, says) in cases {
        let out = perf(&args);
        assert_error(&out, 2);
        // The error line, or for a missing companion flag clap's hint line, names the problem.
        let err = common::stderr(&out);
        assert!(err.contains(says), "{args:?}: `{err}` does not mention `{says}`");
    }
    let err = assert_error(&sandbox.run(&["warmup", "--backend", "host", "--onnx", &not_onnx]), 2);
    assert!(err.contains("not a valid ONNX"), "{err}");
    let err = assert_error(
        &sandbox.run(&["cache", "key", "--onnx", "/no/such.onnx", "--bucket", "1", "--backend", "host"]),
        2,
    );
    assert!(err.contains("no such file"), "{err}");
}

/// An f16 export of the MLP: `saggar perf` generates f16 inputs, runs with verification, and checks
/// given f16 outputs (compared as f32 within the tolerance) from an f16 input file.
#[test]
fn half_precision_models_run_verify_and_check_their_outputs() {
    let sandbox = Sandbox::new();
    let set = model_dir("mlp").join("test_data_set_0");
    let bytes = std::fs::read(model_dir("mlp").join("model.onnx")).unwrap();
    let onnx = sandbox.path("mlp-f16.onnx");
    std::fs::write(&onnx, saggar_onnx::synthetic::half_precision(&bytes, DType::F16).unwrap()).unwrap();
    let perf = |json: &Path, extra: &[&str]| {
        let mut args = vec!["perf", "--backend", "host", "--onnx", arg(&onnx), "--max-batch", "4", "--json", arg(json)];
        args.extend(extra);
        sandbox.run(&args)
    };
    let json = sandbox.path("half.json");
    assert_success(&perf(&json, &["--requests", "8"]));
    assert_eq!(u64_at(&read_json(&json), "/verify/mismatches"), 0);
    let half_set = sandbox.path("half-set");
    std::fs::create_dir_all(&half_set).unwrap();
    for file in ["input_0.pb", "output_0.pb"] {
        let t = read_tensor_pb(&set.join(file)).unwrap();
        write_tensor_pb(&half_set.join(file), &t.name, &t.tensor.narrowed(DType::F16).unwrap()).unwrap();
    }
    let check = sandbox.path("check.json");
    let (inputs, outputs) = (arg(&half_set), arg(&half_set));
    let out = perf(
        &check,
        &["--requests", "3", "--load-inputs", inputs, "--check-outputs", outputs, "--rtol", "1e-2", "--atol", "1e-2"],
    );
    assert_success(&out);
    assert_eq!(read_json(&check)["check"]["passed"], true, "{}", String::from_utf8_lossy(&out.stderr));
}
