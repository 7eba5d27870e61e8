//! The contract of `saggar perf`'s benchmark flags on the host backend: warmup runs, iterations and
//! duration, stage times, exported per-request times and outputs, `--shapes`, `--quiet`, progress
//! lines when piped, the consistency of the JSON report, and bad values exiting with 2.

mod common;

use common::{Sandbox, assert_error, assert_success, f64_at, read_json, stderr, u64_at};

const MLP_ONNX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../saggar-onnx/models/mlp/model.onnx");
const BERT_ONNX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../saggar-onnx/models/bert/model.onnx");
const BERT_SET: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../saggar-onnx/models/bert/test_data_set_0");
const CNN_ONNX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../saggar-onnx/models/cnn/model.onnx");

fn json(sandbox: &Sandbox, args: &[&str]) -> (serde_json::Value, String) {
    let out = sandbox.path("out.json");
    let output = sandbox.saggar().arg("perf").args(args).arg("--json").arg(&out).output().expect("saggar runs");
    assert_success(&output);
    (common::read_json(&out), stderr(&output))
}

/// Percentiles ordered, stage means within the latency, paths summing to the timed requests.
fn assert_consistent(report: &serde_json::Value) {
    let l = |k: &str| f64_at(report, &format!("/latency_us/{k}"));
    let order = [l("min"), l("p50"), l("p90"), l("p95"), l("p99"), l("p99_9"), l("max")];
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "percentiles out of order: {order:?}");
    assert!(l("min") <= l("mean") && l("mean") <= l("max") && l("stddev") >= 0.0, "{report:#}");
    let requests = u64_at(report, "/requests");
    let paths: u64 = ["ultra_fast", "fast", "standard"].iter().map(|p| u64_at(report, &format!("/paths/{p}"))).sum();
    assert_eq!(paths + u64_at(report, "/failures/failed"), requests, "{report:#}");
    if let Some(mean) = report["stages"]["mean"].as_object() {
        let host: f64 = ["queue_wait_us", "check_us", "gather_us", "enqueue_us", "sync_us", "scatter_us"]
            .iter()
            .map(|k| mean[*k].as_f64().unwrap())
            .sum();
        let latency = f64_at(report, "/stages/latency_mean_us");
        assert!(host <= latency, "host stages {host} us exceed the mean latency {latency} us of the same requests");
        if let Some(device) = mean["device_us"].as_f64() {
            let split = &report["stages"]["device_split"];
            let parts: f64 = ["h2d_us", "compute_us", "d2h_us"].iter().map(|k| split[*k].as_f64().unwrap()).sum();
            assert!(parts >= device - 1e-6, "the split {parts} covers the device span {device}");
        }
    }
}

/// `--kernel-copies-up-to`: with 0 every copy is the copy engine's, with the default the small
/// ones are the copy kernel's; the report says which, and both verify; a value that is not a byte
/// count exits 2.
#[test]
fn kernel_copy_limit_is_reported_and_both_copy_paths_verify() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_mlp();
    for (limit, expected) in [(None, 65536), (Some("0"), 0), (Some("1048576"), 1048576)] {
        let mut args =
            vec!["--backend", "host", "--model-config", &config, "--trace", "uniform:1..8", "--requests", "40"];
        args.extend(["--binding", "request", "--verify", "8", "--quiet"]);
        if let Some(limit) = limit {
            args.extend(["--kernel-copies-up-to", limit]);
        }
        let (report, _) = json(&sandbox, &args);
        assert_eq!(u64_at(&report, "/kernel_copies_up_to"), expected, "{report:#}");
        assert_eq!((u64_at(&report, "/verify/checked"), u64_at(&report, "/verify/mismatches")), (8, 0), "{report:#}");
    }
    let output =
        sandbox.saggar().args(["perf", "--backend", "host", "--kernel-copies-up-to", "lots"]).output().unwrap();
    assert_error(&output, 2);
}

#[test]
fn warmup_iterations_and_stages_are_reported_consistently() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_mlp();
    let cache = sandbox.cache_dir("cache");
    let (report, _) = json(
        &sandbox,
        &[
            "--backend",
            "host",
            "--model-config",
            &config,
            "--cache-dir",
            &cache,
            "--trace",
            "uniform:1..8",
            "--iterations",
            "60",
            "--warmup-runs",
            "16",
            "--warmup-time",
            "0",
            "--stage-every",
            "3",
            "--quiet",
        ],
    );
    assert_eq!(u64_at(&report, "/requests"), 60);
    assert_eq!(u64_at(&report, "/startup/warmup_runs"), 16);
    // Every bucket the trace touches was captured in the warmup, none in a timed request.
    assert_eq!(u64_at(&report, "/startup/timed_captures"), 0, "{report:#}");
    assert_eq!(u64_at(&report, "/graphs/captures"), 0);
    assert_eq!(report["startup"]["first_runs"].as_array().unwrap().len(), 8, "one first run per distinct batch");
    assert_eq!(report["startup"]["programs"].as_array().unwrap().len(), 7, "every pow2 bucket up to 64");
    assert!(f64_at(&report, "/startup/session_s") > 0.0);
    assert_eq!(u64_at(&report, "/stages/sampled"), 20, "requests 0, 3, ..., 57");
    assert!(!report["stages"]["copies"].as_array().unwrap().is_empty(), "{report:#}");
    assert_consistent(&report);
}

#[test]
fn duration_runs_at_least_that_long_and_warmup_zero_captures_in_timed_requests() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_mlp();
    let (report, _) = json(
        &sandbox,
        &[
            "--backend",
            "host",
            "--model-config",
            &config,
            "--trace",
            "const:4",
            "--requests",
            "3",
            "--duration",
            "0.3",
            "--warmup-runs",
            "0",
            "--warmup-time",
            "0",
            "--quiet",
        ],
    );
    assert!(f64_at(&report, "/wall_s") >= 0.3, "{report:#}");
    assert!(u64_at(&report, "/requests") >= 3);
    assert_eq!(report["duration_s"], 0.3);
    assert_eq!(u64_at(&report, "/startup/warmup_runs"), 0);
    // Without a warmup the lazy capture falls inside a timed request, and the report says so.
    assert_eq!(u64_at(&report, "/startup/timed_captures"), 1, "{report:#}");
    assert_consistent(&report);
}

#[test]
fn export_times_writes_one_json_line_per_timed_request() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_mlp();
    let times = sandbox.path("times.jsonl");
    let (report, _) = json(
        &sandbox,
        &[
            "--backend",
            "host",
            "--model-config",
            &config,
            "--trace",
            "uniform:1..4",
            "--requests",
            "25",
            "--concurrency",
            "2",
            "--stage-every",
            "1",
            "--quiet",
            "--export-times",
            times.to_str().unwrap(),
        ],
    );
    let text = std::fs::read_to_string(&times).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len() as u64, u64_at(&report, "/requests"));
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["request"], i as u64);
        let latency = line["latency_us"].as_f64().unwrap();
        let b = line["batch"].as_u64().unwrap();
        assert!((1..=4).contains(&b) && latency > 0.0, "{line}");
        let stages = line["stages"].as_object().expect("every request timed with --stage-every 1");
        let host: f64 = ["queue_wait_us", "check_us", "gather_us", "enqueue_us", "sync_us", "scatter_us"]
            .iter()
            .map(|k| stages[*k].as_f64().unwrap())
            .sum();
        assert!(host <= latency, "stages {host} us within the request's {latency} us: {line}");
        assert!(line["thread"].as_u64().unwrap() < 2);
    }
    assert_consistent(&report);
}

#[test]
fn onnx_export_outputs_match_load_inputs_and_shapes_fix_symbolic_dims() {
    let sandbox = Sandbox::new();
    // A trace of batches 1 to 3 exported into `dir`.
    let export = |dir: &std::path::Path, extra: &[&str]| {
        let dir = dir.to_str().unwrap();
        let mut args = vec!["--backend", "host", "--onnx", MLP_ONNX, "--trace", "uniform:1..3", "--requests", "12"];
        args.extend(["--quiet", "--export-outputs", dir]);
        args.extend_from_slice(extra);
        json(&sandbox, &args).0
    };
    let outs = sandbox.path("outs");
    let report = export(&outs, &[]);
    assert_consistent(&report);
    // Exporting alone checks nothing: `--verify 0` means no request is compared with the reference.
    let unchecked = sandbox.path("unchecked");
    assert_eq!(u64_at(&export(&unchecked, &["--verify", "0"]), "/verify/checked"), 0);
    assert!(unchecked.join("batch_1").join("output_0.pb").is_file());
    for b in 1..=3 {
        let dir = outs.join(format!("batch_{b}"));
        assert!(dir.join("input_0.pb").is_file() && dir.join("output_0.pb").is_file(), "{}", dir.display());
    }
    // The exported pair is a data set: run it back with --check-outputs.
    let dir = outs.join("batch_2");
    let output = sandbox.run(&[
        "perf",
        "--backend",
        "host",
        "--onnx",
        MLP_ONNX,
        "--requests",
        "3",
        "--quiet",
        "--load-inputs",
        dir.to_str().unwrap(),
        "--check-outputs",
        dir.to_str().unwrap(),
    ]);
    assert_success(&output);

    // BERT's sequence axis is symbolic: --shapes gives it, the trace gives the batch.
    let (bert, _) = json(
        &sandbox,
        &[
            "--backend",
            "host",
            "--onnx",
            BERT_ONNX,
            "--trace",
            "const:2",
            "--requests",
            "4",
            "--quiet",
            "--shapes",
            "input_ids:1x8",
            "--shapes",
            "attention_mask:1x8",
            "--max-batch",
            "4",
        ],
    );
    assert_eq!(u64_at(&bert, "/requests"), 4);
    assert_eq!(u64_at(&bert, "/verify/mismatches"), 0);
    assert_consistent(&bert);
}

#[test]
fn onnx_models_run_with_every_binding_through_the_same_loop() {
    let sandbox = Sandbox::new();
    let cache = sandbox.cache_dir("cache");
    for binding in ["pinned", "request", "direct"] {
        let (report, _) = json(
            &sandbox,
            &[
                "--backend",
                "host",
                "--onnx",
                MLP_ONNX,
                "--trace",
                "uniform:1..4",
                "--requests",
                "16",
                "--quiet",
                "--binding",
                binding,
                "--cache-dir",
                &cache,
                "--verify",
                "4",
            ],
        );
        assert_eq!(report["binding"], binding);
        assert_eq!(u64_at(&report, "/verify/checked"), 4, "{binding}");
        assert_eq!(u64_at(&report, "/verify/mismatches"), 0, "{binding}: {report:#}");
        let timed = report["stages"]["sampled"].as_u64().unwrap();
        assert_eq!(timed > 0, binding == "pinned", "{binding}: stages are timed with pinned binding only");
        assert_consistent(&report);
    }
}

#[test]
fn progress_lines_when_piped_and_quiet_silences_them() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_mlp();
    let base = ["perf", "--backend", "host", "--model-config", &config, "--requests", "10"];
    let output = sandbox.run(&base);
    assert_success(&output);
    let err = stderr(&output);
    for phase in ["compile", "warmup", "run"] {
        assert!(err.contains(&format!("saggar: {phase} started")), "{err}");
        assert!(err.contains(&format!("saggar: {phase} done")), "{err}");
    }
    let mut quiet = base.to_vec();
    quiet.push("--quiet");
    let output = sandbox.run(&quiet);
    assert_success(&output);
    assert!(output.stderr.is_empty(), "{}", stderr(&output));
}

#[test]
fn bad_flag_values_exit_2_with_one_line() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_mlp();
    for (flag, value) in [
        ("--duration", "0"),
        ("--duration", "-1"),
        ("--duration", "soon"),
        ("--warmup-time", "nan"),
        ("--warmup-runs", "-3"),
        ("--iterations", "0"),
        ("--stage-every", "x"),
    ] {
        let output = sandbox.run(&["perf", "--backend", "host", "--model-config", &config, flag, value]);
        let error = assert_error(&output, 2);
        assert!(error.contains(value) || error.contains(flag), "{flag} {value}: {error}");
    }
    for shape in ["input_ids", "input_ids:1x", ":1x8", "input_ids:0x8"] {
        let output = sandbox.run(&["perf", "--backend", "host", "--onnx", BERT_ONNX, "--shapes", shape]);
        assert_error(&output, 2);
    }
    let output = sandbox.run(&["perf", "--backend", "host", "--onnx", MLP_ONNX, "--shapes", "nope:1x128", "--quiet"]);
    assert!(assert_error(&output, 2).contains("no input `nope`"));
    let output =
        sandbox.run(&["perf", "--backend", "host", "--onnx", BERT_ONNX, "--shapes", "input_ids:1x8x3", "--quiet"]);
    assert!(assert_error(&output, 2).contains("dimensions"));
    for axis in ["seq", "seq:", ":16", "seq:0", "seq:8,x"] {
        let output = sandbox.run(&["perf", "--backend", "host", "--onnx", BERT_ONNX, "--pad-axis", axis, "--quiet"]);
        assert_error(&output, 2);
    }
    let output = sandbox.run(&["perf", "--backend", "host", "--model-config", &config, "--pad-axis", "seq:8"]);
    assert!(assert_error(&output, 2).contains("--pad-axis needs --onnx"));
    for (flag, value) in [
        ("--attention", "fast"),
        ("--conv", "winograd"),
        ("--blas-tune", "0"),
        ("--blas-tune", "17"),
        ("--blas-tune", "x"),
        ("--blas-workspace", "1025"),
        ("--blas-workspace", "-1"),
    ] {
        let output = sandbox.run(&["perf", "--backend", "host", "--onnx", MLP_ONNX, flag, value, "--quiet"]);
        let error = assert_error(&output, 2);
        assert!(error.contains(value) || error.contains(flag), "{flag} {value}: {error}");
    }
    for (flag, value) in [("--attention", "tiled"), ("--conv", "nhwc"), ("--blas-tune", "4"), ("--blas-workspace", "4")]
    {
        let output = sandbox.run(&["perf", "--backend", "host", "--model-config", &config, flag, value]);
        assert!(assert_error(&output, 2).contains("--onnx"), "{flag} without --onnx");
    }
}

/// `--attention`, `--conv`, `--blas-tune` and `--blas-workspace` reach the ONNX compiler: a forced
/// attention kernel, another conv engine and another workspace change the cache key (the code, the
/// scratch it plans), and the runs still verify (the CNN under every conv engine); the BLAS
/// candidate count does not.
#[test]
fn onnx_attention_and_blas_tune_flags_run_and_key_the_cache_as_they_should() {
    let sandbox = Sandbox::new();
    let key = |extra: &[&str]| {
        let mut args = vec!["cache", "key", "--onnx", BERT_ONNX, "--bucket", "2", "--backend", "host"];
        args.extend(["--load-inputs", BERT_SET]);
        args.extend(extra);
        let out = sandbox.run(&args);
        assert_success(&out);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let auto = key(&[]);
    assert_ne!(auto, key(&["--attention", "tiled"]), "a forced kernel is another artifact");
    assert_eq!(auto, key(&["--blas-tune", "8"]), "timing BLAS candidates picks kernels, not artifacts");
    assert_eq!(auto, key(&["--blas-workspace", "32"]), "32 MiB is the default");
    assert_ne!(auto, key(&["--blas-workspace", "4"]), "another workspace is another plan");
    assert_ne!(auto, key(&["--conv", "nchw"]), "another conv engine is another artifact");
    for conv in ["auto", "nhwc", "nchw", "direct"] {
        let json = sandbox.path("conv.json");
        let args = ["perf", "--backend", "host", "--onnx", CNN_ONNX, "--requests", "4", "--quiet", "--conv", conv];
        assert_success(&sandbox.run(&[&args[..], &["--json", json.to_str().unwrap()]].concat()));
        assert_eq!(read_json(&json)["verify"]["mismatches"], 0, "--conv {conv}");
    }
    for extra in [["--attention", "rows"], ["--attention", "tiled"], ["--blas-tune", "8"], ["--blas-workspace", "0"]] {
        let json = sandbox.path("flags.json");
        let mut args = vec!["perf", "--backend", "host", "--onnx", MLP_ONNX, "--requests", "4", "--quiet"];
        args.extend(extra);
        args.extend(["--json", json.to_str().unwrap()]);
        assert_success(&sandbox.run(&args));
        assert_eq!(read_json(&json)["verify"]["mismatches"], 0, "{extra:?}");
    }
}

/// `perf` arguments for BERT on the host with its sequence padded to buckets of 8 and 16, requests
/// of `seq` tokens, then `extra`.
fn bert_padded_args(seq: u64, extra: &[&str]) -> Vec<String> {
    let (ids, mask) = (format!("input_ids:1x{seq}"), format!("attention_mask:1x{seq}"));
    let head =
        ["--backend", "host", "--onnx", BERT_ONNX, "--shapes", &ids, "--shapes", &mask, "--pad-axis", "seq:8,16"];
    head.iter().chain(extra).chain(&["--quiet"]).map(|a| a.to_string()).collect()
}

/// `--pad-axis`: BERT's sequence padded to buckets serves requests of a length between buckets from
/// a batch x sequence grid with graphs (no per-shape programs), and its outputs verify.
#[test]
fn onnx_pad_axis_serves_a_sequence_between_buckets_from_the_grid() {
    let sandbox = Sandbox::new();
    let args = bert_padded_args(13, &["--trace", "const:2", "--iterations", "12"]);
    let (report, _) = json(&sandbox, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_consistent(&report);
    assert_eq!(u64_at(&report, "/graphs/shape_programs"), 0, "no per-shape programs: {report:#}");
    assert!(u64_at(&report, "/graphs/replays") > 0, "graphs replayed: {report:#}");
    assert_eq!(u64_at(&report, "/verify/mismatches"), 0, "{report:#}");
}

/// `--binding request` on BERT's padded sequence axis: requests whose sequence is a bucket are
/// written in place (no padding along the axis) and verify against the host reference.
#[test]
fn onnx_request_binding_serves_a_padded_axis_at_its_buckets() {
    let sandbox = Sandbox::new();
    let extra = ["--trace", "uniform:1..3", "--requests", "12", "--binding", "request", "--verify", "6"];
    let args = bert_padded_args(16, &extra);
    let (report, _) = json(&sandbox, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_consistent(&report);
    assert_eq!(report["binding"], "request");
    assert_eq!(u64_at(&report, "/verify/checked"), 6, "{report:#}");
    assert_eq!(u64_at(&report, "/verify/mismatches"), 0, "{report:#}");
}

/// Stage-timed requests of a model with a padded axis run the padded path as untimed ones do, at a
/// bucket's length as between buckets: their outputs verify, and only their queue wait and check
/// are timed (no device span).
#[test]
fn onnx_pad_axis_timed_requests_take_the_padded_path() {
    let sandbox = Sandbox::new();
    for seq in [16, 13] {
        let args = bert_padded_args(seq, &["--trace", "const:2", "--iterations", "6", "--stage-every", "1"]);
        let (report, _) = json(&sandbox, &args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_consistent(&report);
        assert_eq!(u64_at(&report, "/stages/sampled"), 6, "seq {seq}: {report:#}");
        assert!(report["stages"]["mean"]["device_us"].is_null(), "seq {seq}: {report:#}");
        assert_eq!(u64_at(&report, "/verify/mismatches"), 0, "seq {seq}: {report:#}");
    }
}
