//! `saggar perf` end to end on the host backend: the must-hold run, the JSON contract, each
//! binding mode, concurrency, graphs off, trace kinds, and a warm second run.

mod common;

use common::{Sandbox, assert_success, f64_at, read_json, stdout, u64_at};

/// Every field of the JSON contract (docs/cli.md), as JSON pointers.
const CONTRACT: &[&str] = &[
    "/backend",
    "/device",
    "/model",
    "/requests",
    "/concurrency",
    "/kernel_copies_up_to",
    "/wall_s",
    "/throughput_rps",
    "/latency_us/p50",
    "/latency_us/p99",
    "/latency_us/max",
    "/paths/ultra_fast",
    "/paths/fast",
    "/paths/standard",
    "/padding/useful_rows",
    "/padding/padded_rows",
    "/padding/waste_ratio",
    "/padding/refits",
    "/padding/refit_failures",
    "/cache/memory_hits",
    "/cache/disk_loads",
    "/cache/compiles",
    "/cache/corrupt_evicted",
    "/graphs/captures",
    "/graphs/replays",
    "/graphs/updates",
    "/graphs/recaptures",
    "/graphs/eager_fallbacks",
    "/graphs/eager_runs",
    "/graphs/memory_bytes",
    "/graphs/peak_memory_bytes",
    "/graphs/over_budget",
    "/verify/checked",
    "/verify/mismatches",
];

fn perf(sandbox: &Sandbox, json_name: &str, args: &[&str]) -> serde_json::Value {
    let json = sandbox.path(json_name);
    let mut full = vec!["perf", "--json", json.to_str().unwrap()];
    full.extend_from_slice(args);
    let output = sandbox.run(&full);
    assert_success(&output);
    read_json(&json)
}

fn assert_paths_sum_to_requests(report: &serde_json::Value) {
    let requests = u64_at(report, "/requests");
    let sum = u64_at(report, "/paths/ultra_fast") + u64_at(report, "/paths/fast") + u64_at(report, "/paths/standard");
    assert_eq!(sum, requests, "paths must sum to the request count: {report:#}");
    // A successful run has no failures, and reports them by kind.
    for kind in ["failed", "request", "limit", "device", "compile", "other"] {
        assert_eq!(u64_at(report, &format!("/failures/{kind}")), 0, "{report:#}");
    }
    assert_eq!(u64_at(report, "/cache/dir_sync_failures"), 0, "{report:#}");
}

fn assert_verified(report: &serde_json::Value, checked: u64) {
    assert_eq!(u64_at(report, "/verify/checked"), checked, "{report:#}");
    assert_eq!(u64_at(report, "/verify/mismatches"), 0, "{report:#}");
    assert!(u64_at(report, "/verify/values_checked") > 0);
}

/// The must-hold run: host, const:8, 2000 requests. The recommender is the small one: the
/// default 190-input model takes about 0.2 s a request in a debug build (its release run is timed
/// in docs/cli.md), which would make this test take minutes.
#[test]
fn host_const_trace_is_ultra_fast_and_verified() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_recsys();
    let cache = sandbox.cache_dir("cache");
    let report = perf(
        &sandbox,
        "out.json",
        &[
            "--backend",
            "host",
            "--trace",
            "const:8",
            "--requests",
            "2000",
            "--model-config",
            &config,
            "--cache-dir",
            &cache,
        ],
    );
    for pointer in CONTRACT {
        assert!(report.pointer(pointer).is_some(), "missing {pointer} in {report:#}");
    }
    assert_eq!(report["backend"], "host");
    assert_eq!(report["model"], "small-recsys");
    assert_eq!(u64_at(&report, "/requests"), 2000);
    assert_eq!(u64_at(&report, "/concurrency"), 1);
    assert_paths_sum_to_requests(&report);
    let ultra_fast = u64_at(&report, "/paths/ultra_fast");
    assert!(ultra_fast * 100 >= 99 * 2000, "ultra_fast {ultra_fast} of 2000");
    assert_verified(&report, 16);
    assert_eq!(u64_at(&report, "/padding/useful_rows"), 16_000);
    assert_eq!(u64_at(&report, "/padding/padded_rows"), 0);
    assert_eq!(u64_at(&report, "/cache/compiles"), 7, "a cold cache compiles every pow2 bucket up to 64");
    // The one capture happens in the warmup runs; the timed requests only replay.
    assert_eq!(u64_at(&report, "/startup/warmup_captures"), 1);
    assert_eq!(u64_at(&report, "/graphs/captures"), 0);
    assert_eq!(u64_at(&report, "/graphs/replays"), 2000);
    let (p50, p99, max) =
        (f64_at(&report, "/latency_us/p50"), f64_at(&report, "/latency_us/p99"), f64_at(&report, "/latency_us/max"));
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "p50 {p50} p99 {p99} max {max}");
    let (wall, rps) = (f64_at(&report, "/wall_s"), f64_at(&report, "/throughput_rps"));
    assert!((rps * wall - 2000.0).abs() < 1.0, "throughput {rps} over {wall} s");

    // The same cache, warm: nothing is compiled again.
    let warm = perf(
        &sandbox,
        "warm.json",
        &["--backend", "host", "--requests", "50", "--model-config", &config, "--cache-dir", &cache, "--verify", "2"],
    );
    assert_eq!(u64_at(&warm, "/cache/compiles"), 0, "{warm:#}");
    assert_eq!(u64_at(&warm, "/cache/disk_loads"), 7, "{warm:#}");
    assert_verified(&warm, 2);
}

#[test]
fn uniform_trace_with_direct_binding_pads_and_verifies() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_recsys();
    let cache = sandbox.cache_dir("cache");
    let report = perf(
        &sandbox,
        "direct.json",
        &[
            "--backend",
            "host",
            "--model-config",
            &config,
            "--cache-dir",
            &cache,
            "--trace",
            "uniform:1..20",
            "--requests",
            "400",
            "--binding",
            "direct",
            "--verify",
            "40",
            "--max-batch",
            "16",
        ],
    );
    assert_eq!(report["binding"], "direct");
    assert_paths_sum_to_requests(&report);
    assert_verified(&report, 40);
    // Batches 17..=20 exceed the largest bucket (16) and are split; others are padded.
    assert!(u64_at(&report, "/split_requests") > 0, "{report:#}");
    assert!(u64_at(&report, "/padding/padded_rows") > 0, "{report:#}");
    let waste = f64_at(&report, "/padding/waste_ratio");
    assert!(waste > 0.0 && waste < 0.5, "waste {waste}");
    // Device buffers per distinct batch are stable, so direct-bound graphs never drift.
    assert_eq!(u64_at(&report, "/graphs/recaptures"), 0, "{report:#}");
    assert_eq!(u64_at(&report, "/graphs/eager_fallbacks"), 0, "{report:#}");
    assert!(u64_at(&report, "/graphs/replays") > 0);
}

#[test]
fn request_binding_writes_inputs_in_place_and_verifies() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_recsys();
    let cache = sandbox.cache_dir("cache");
    let report = perf(
        &sandbox,
        "request.json",
        &[
            "--backend",
            "host",
            "--model-config",
            &config,
            "--cache-dir",
            &cache,
            "--trace",
            "uniform:1..16",
            "--requests",
            "300",
            "--concurrency",
            "2",
            "--binding",
            "request",
            "--verify",
            "30",
            "--max-batch",
            "16",
        ],
    );
    assert_eq!(report["binding"], "request");
    assert_eq!(u64_at(&report, "/requests"), 300);
    assert_paths_sum_to_requests(&report);
    assert_verified(&report, 30);
    assert_eq!(u64_at(&report, "/split_requests"), 0, "a request is never split");
    assert!(u64_at(&report, "/padding/padded_rows") > 0, "{report:#}");
    assert!(u64_at(&report, "/graphs/replays") > 0, "{report:#}");
    // Requests above the largest bucket are refused, as the API says.
    let out = sandbox.run(&[
        "perf",
        "--backend",
        "host",
        "--model-config",
        &config,
        "--cache-dir",
        &cache,
        "--trace",
        "const:20",
        "--requests",
        "2",
        "--binding",
        "request",
        "--max-batch",
        "16",
    ]);
    assert!(!out.status.success());
    assert!(common::stderr(&out).contains("largest bucket"), "{}", common::stderr(&out));
}

#[test]
fn concurrent_zipf_trace_with_adaptive_buckets() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_mlp();
    let cache = sandbox.cache_dir("cache");
    let report = perf(
        &sandbox,
        "zipf.json",
        &[
            "--backend",
            "host",
            "--model-config",
            &config,
            "--cache-dir",
            &cache,
            "--trace",
            "zipf:1.1:32",
            "--requests",
            "600",
            "--concurrency",
            "4",
            "--buckets",
            "adaptive:5",
            "--verify",
            "30",
        ],
    );
    assert_eq!(u64_at(&report, "/concurrency"), 4);
    assert_eq!(u64_at(&report, "/requests"), 600);
    assert_paths_sum_to_requests(&report);
    assert_verified(&report, 30);
    let buckets = report["buckets"].as_array().expect("a bucket list");
    assert_eq!(buckets.len(), 5, "{report:#}");
    assert_eq!(u64_at(&report, "/cache/compiles"), 5);
    // Adaptive buckets sit on the largest observed batch: nothing is split.
    assert_eq!(u64_at(&report, "/split_requests"), 0);
}

#[test]
fn graphs_off_runs_everything_eagerly() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_mlp();
    let cache = sandbox.cache_dir("cache");
    let report = perf(
        &sandbox,
        "eager.json",
        &[
            "--backend",
            "host",
            "--model-config",
            &config,
            "--cache-dir",
            &cache,
            "--requests",
            "100",
            "--graphs",
            "off",
        ],
    );
    assert_eq!(u64_at(&report, "/graphs/eager_runs"), 100, "{report:#}");
    assert_eq!(u64_at(&report, "/graphs/captures"), 0);
    assert_eq!(u64_at(&report, "/graphs/replays"), 0);
    assert_paths_sum_to_requests(&report);
    assert_verified(&report, 16);
}

#[test]
fn file_traces_set_the_request_count_and_list_buckets_are_used() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_mlp();
    let cache = sandbox.cache_dir("cache");
    let trace = sandbox.write("trace.txt", "# two sizes\n3\n4\n\n3\n6\n");
    let report = perf(
        &sandbox,
        "file.json",
        &[
            "--backend",
            "host",
            "--model-config",
            &config,
            "--cache-dir",
            &cache,
            "--trace",
            &format!("file:{trace}"),
            "--buckets",
            "list:4,8",
        ],
    );
    assert_eq!(u64_at(&report, "/requests"), 4);
    assert_eq!(report["buckets"], serde_json::json!([4, 8]));
    assert_eq!(u64_at(&report, "/padding/useful_rows"), 16);
    assert_eq!(u64_at(&report, "/padding/padded_rows"), 1 + 1 + 2);
    assert_verified(&report, 4);
}

#[test]
fn json_to_stdout_replaces_the_table() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_mlp();
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
        "20",
        "--json",
        "-",
    ]);
    assert_success(&output);
    let report: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("stdout is exactly the JSON report");
    assert_eq!(u64_at(&report, "/requests"), 20);

    // Without --json, a table for people.
    let output = sandbox.run(&[
        "perf",
        "--backend",
        "host",
        "--model-config",
        &config,
        "--cache-dir",
        &cache,
        "--requests",
        "20",
    ]);
    assert_success(&output);
    let table = stdout(&output);
    for label in ["latency", "throughput", "paths", "padding", "cache", "graphs", "verify"] {
        assert!(table.lines().any(|l| l.starts_with(label)), "no `{label}` row in:\n{table}");
    }
    // Not a terminal: plain progress lines on stderr, never control sequences.
    let err = common::stderr(&output);
    assert!(err.lines().all(|l| l.starts_with("saggar: ")), "only progress lines on stderr: {err:?}");
    assert!(err.contains("saggar: run done: 20/20"), "{err:?}");
    assert!(!err.contains('\u{1b}'), "no escape sequences when piped: {err:?}");
}

#[test]
fn default_cache_dir_comes_from_xdg_cache_home() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_mlp();
    let report = perf(&sandbox, "xdg.json", &["--backend", "host", "--model-config", &config, "--requests", "5"]);
    let expected = sandbox.path("xdg-cache").join("saggar");
    assert_eq!(report["cache"]["dir"], expected.to_str().unwrap());
    assert!(std::fs::read_dir(&expected).unwrap().any(|e| e.unwrap().path().extension().is_some_and(|x| x == "sce")));
}

#[test]
fn eager_capture_captures_every_bucket_before_the_first_request() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_saggar"))
        .args([
            "perf",
            "--backend",
            "host",
            "--model",
            "mlp",
            "--trace",
            "uniform:1..8",
            "--requests",
            "40",
            "--max-batch",
            "8",
        ])
        .args(["--capture", "eager", "--concurrency", "2", "--verify", "4", "--cache-dir"])
        .arg(dir.path().join("cache"))
        .arg("--json")
        .arg(&json)
        .status()
        .unwrap();
    assert!(status.success());
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    // Buckets 1, 2, 4, 8 in each of the 2 prewarmed contexts, all captured at creation: none in
    // the warmup runs or the timed requests, whose counters the report gives.
    assert_eq!(report["startup"]["warmup_captures"], 0, "{report}");
    assert_eq!(report["startup"]["timed_captures"], 0, "{report}");
    assert_eq!(report["graphs"]["captures"], 0, "{report}");
    assert_eq!(report["graphs"]["replays"], 40, "{report}");
    let graph_memory = report["graphs"]["peak_memory_bytes"].as_u64().unwrap();
    assert!(graph_memory > 0, "graph memory is measured and reported: {report}");
}
