//! The ONNX project's backend test suite as saggar-onnx's conformance suite.
//!
//! `cargo xtask onnx-tests` extracts the pinned suite and runs this binary with
//! `SAGGAR_ONNX_BACKEND_TESTS=<dir holding node/, pytorch-converted/, pytorch-operator/, simple/, light/>`,
//! `SAGGAR_ONNX_BACKEND=host|cuda|hip`, optionally `SAGGAR_ONNX_TEST_FILTER=<substring of test names>`
//! and `SAGGAR_ONNX_REPORT=<markdown file to write>`. Without `SAGGAR_ONNX_BACKEND_TESTS` it reports
//! itself skipped and succeeds (a plain `cargo test` fetches nothing). `SAGGAR_ONNX_EXPECTATIONS=<file>`
//! replaces the expectations file next to this folder (a GPU bundle carries its own copy), and
//! `SAGGAR_ONNX_LIST_APPLICABLE=<file>` only writes the applicable tests (`suite/name` per line) there
//! and exits: the GPU bundle carries only those tests' folders.
//!
//! Every test whose model is inside the declared op set ([`applicable`]) is imported and run through a
//! `Session` ([`run`]). On CUDA and HIP, a test whose model the backend refuses with the typed
//! `UnsupportedOnBackend` error (an op without a GPU lowering) counts as not applicable there, its
//! reason (`not lowered on Cuda: LRN`) counted in the report; every other failure is a failure. `backend_expectations.txt` (next to this folder) names each applicable test
//! that does not pass, with its reason. The run fails on a failure the file does not name and on a
//! named test that passes (or is no longer applicable): the file never goes stale.

mod applicable;
mod report;
mod run;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use report::{Outcome, Report, TestResult};

/// The suites, in report order.
const SUITES: &[&str] = &["node", "pytorch-converted", "pytorch-operator", "simple", "light"];
/// Longest one test may run before it counts as failed (a hang must not hang CI).
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// `test_name  # reason` lines; `#`-only lines and blank lines are comments.
fn read_expectations(path: &Path) -> Result<BTreeMap<String, String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut map = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, reason) = line
            .split_once('#')
            .ok_or_else(|| format!("{}:{}: expected `test_name  # reason`, got `{line}`", path.display(), n + 1))?;
        let (name, reason) = (name.trim(), reason.trim());
        if name.is_empty() || reason.is_empty() || name.contains(char::is_whitespace) {
            return Err(format!("{}:{}: expected `test_name  # reason`, got `{line}`", path.display(), n + 1));
        }
        if map.insert(name.to_string(), reason.to_string()).is_some() {
            return Err(format!("{}:{}: `{name}` is listed twice", path.display(), n + 1));
        }
    }
    Ok(map)
}

/// Every `(suite, test name, folder)` holding a `model.onnx`, sorted, filtered by `filter`.
fn discover(root: &Path, filter: Option<&str>) -> Vec<(&'static str, String, PathBuf)> {
    let mut tests = Vec::new();
    for &suite in SUITES {
        let Ok(entries) = std::fs::read_dir(root.join(suite)) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.path().join("model.onnx").is_file() && filter.is_none_or(|f| name.contains(f)) {
                tests.push((suite, name, entry.path()));
            }
        }
    }
    tests.sort();
    tests
}

/// Runs one test on a fresh thread so a hang or panic is reported, not inherited.
fn run_guarded(dir: &Path, backend: &str) -> Outcome {
    let (tx, rx) = std::sync::mpsc::channel();
    let (dir, backend) = (dir.to_path_buf(), backend.to_string());
    let spawned = std::thread::Builder::new().name("onnx-test".into()).spawn(move || {
        let _ = tx.send(run_one(&dir, &backend));
    });
    if let Err(e) = spawned {
        return Outcome::Failed(format!("cannot start a test thread: {e}"));
    }
    match rx.recv_timeout(TEST_TIMEOUT) {
        Ok(outcome) => outcome,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            Outcome::Failed(format!("timed out after {} s", TEST_TIMEOUT.as_secs()))
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Outcome::Failed("panicked".into()),
    }
}

fn run_one(dir: &Path, backend: &str) -> Outcome {
    match applicable::not_applicable(dir) {
        Err(e) => return Outcome::Failed(e),
        Ok(Some(reason)) => return Outcome::NotApplicable(reason),
        Ok(None) => {}
    }
    let result = match backend {
        "host" => open_and_run::<saggar_device::host::HostBackend>(dir),
        #[cfg(feature = "cuda")]
        "cuda" => open_and_run::<saggar_device::cuda::CudaBackend>(dir),
        #[cfg(feature = "hip")]
        "hip" => open_and_run::<saggar_device::hip::HipBackend>(dir),
        other => Err(format!("backend `{other}` is not built into this binary (build with --features {other})")),
    };
    match result {
        Ok(mode) => Outcome::Passed(mode),
        // A GPU backend's typed refusal of an op the host runs: outside that backend's op set.
        Err(e) => match e.strip_prefix(run::REFUSED) {
            Some(reason) => Outcome::NotApplicable(reason.to_string()),
            None => Outcome::Failed(e),
        },
    }
}

fn open_and_run<B: saggar_device::Backend>(dir: &Path) -> Result<run::Mode, String> {
    run::run_test::<B>(dir, &|| B::open(0).map_err(|e| format!("opening device 0: {e}")))
}

/// Writes `suite/name` of every applicable test under `root` to `list`.
fn list_applicable(root: &Path, list: &Path) -> ExitCode {
    let mut lines = String::new();
    for (suite, name, dir) in discover(root, None) {
        match applicable::not_applicable(&dir) {
            Ok(None) => lines.push_str(&format!("{suite}/{name}\n")),
            Ok(Some(_)) => {}
            Err(e) => {
                eprintln!("backend_suite: {suite}/{name}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    match std::fs::write(list, lines) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("backend_suite: cannot write {}: {e}", list.display());
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let Some(root) = std::env::var_os("SAGGAR_ONNX_BACKEND_TESTS").map(PathBuf::from) else {
        println!("backend_suite skipped: SAGGAR_ONNX_BACKEND_TESTS is not set; run `cargo xtask onnx-tests`");
        return ExitCode::SUCCESS;
    };
    let backend = std::env::var("SAGGAR_ONNX_BACKEND").unwrap_or_else(|_| "host".into());
    let filter = std::env::var("SAGGAR_ONNX_TEST_FILTER").ok().filter(|f| !f.is_empty());
    if let Some(list) = std::env::var_os("SAGGAR_ONNX_LIST_APPLICABLE").map(PathBuf::from) {
        return list_applicable(&root, &list);
    }
    let expectations_path = std::env::var_os("SAGGAR_ONNX_EXPECTATIONS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/backend_expectations.txt"));
    let expectations = match read_expectations(&expectations_path) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("backend_suite: {e}");
            return ExitCode::FAILURE;
        }
    };
    let tests = discover(&root, filter.as_deref());
    if tests.is_empty() {
        eprintln!(
            "backend_suite: no tests under {} (expected node/, pytorch-converted/, ... with model.onnx folders{}); \
             run `cargo xtask onnx-tests --fetch-only`",
            root.display(),
            filter.as_deref().map(|f| format!(" matching `{f}`")).unwrap_or_default()
        );
        return ExitCode::FAILURE;
    }
    let start = Instant::now();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<TestResult>> = Mutex::new(Vec::with_capacity(tests.len()));
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get()).min(8);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((suite, name, dir)) = tests.get(i) else { break };
                    let t0 = Instant::now();
                    let outcome = run_guarded(dir, &backend);
                    let result = TestResult { suite, name: name.clone(), outcome, seconds: t0.elapsed().as_secs_f64() };
                    results.lock().unwrap_or_else(|e| e.into_inner()).push(result);
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by(|a, b| (a.suite, &a.name).cmp(&(b.suite, &b.name)));
    let report = Report::new(&backend, filter.as_deref(), &results, &expectations, start.elapsed());
    print!("{}", report.text());
    if let Some(path) = std::env::var_os("SAGGAR_ONNX_REPORT").map(PathBuf::from) {
        if let Err(e) = std::fs::write(&path, report.markdown()) {
            eprintln!("backend_suite: cannot write the report to {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("report written to {}", path.display());
    }
    if report.ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
