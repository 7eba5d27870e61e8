//! `cargo xtask fuzz [--seconds N] [--jobs J]`: runs the cargo-fuzz target `import_lower` (`fuzz/`)
//! for N seconds (default 60), seeded with every `model.onnx` of the pinned ONNX backend suite and
//! the checked-in crash regressions (`crates/saggar-onnx/tests/fuzz-regressions/`). Installs
//! cargo-fuzz (pinned) when it is missing; needs the nightly toolchain. A crash stops the run and
//! leaves its input under `fuzz/artifacts/import_lower/`: add it to the regressions folder with its
//! fix, where `cargo test -p saggar-onnx --test fuzz` replays every one.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::onnx_tests;

/// The cargo-fuzz release this task installs.
const CARGO_FUZZ_VERSION: &str = "0.13.2";

/// Parses the flags and runs the fuzzer.
pub fn run(root: &Path, seconds: Option<String>, jobs: Option<String>) -> Result<(), String> {
    let seconds: u64 = seconds.map_or(Ok(60), |s| s.parse()).map_err(|e| format!("--seconds: {e}"))?;
    let jobs: u64 = jobs.map_or(Ok(1), |s| s.parse()).map_err(|e| format!("--jobs: {e}"))?;
    ensure_cargo_fuzz()?;
    let corpus = root.join("target/fuzz-corpus/import_lower");
    let seeds = seed_corpus(root, &corpus)?;
    eprintln!(
        "xtask: fuzzing import_lower for {seconds} s on {jobs} job(s) from {seeds} seeds in {}",
        corpus.display()
    );
    let mut cmd = Command::new("cargo");
    cmd.current_dir(root)
        .args(["+nightly", "fuzz", "run", "--fuzz-dir", "fuzz", "import_lower"])
        .arg(&corpus)
        .arg(root.join("crates/saggar-onnx/tests/fuzz-regressions"))
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .args(["-rss_limit_mb=4096", "-max_len=262144", "-print_final_stats=1"]);
    if jobs > 1 {
        // Parallel jobs log to fuzz-N.log files in the working folder.
        cmd.arg(format!("-jobs={jobs}")).arg(format!("-workers={jobs}"));
    }
    let status = cmd
        .env("CARGO_TARGET_DIR", root.join("target/fuzz"))
        .status()
        .map_err(|e| format!("cannot run cargo fuzz: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err("the fuzzer found a crash: its input is under fuzz/artifacts/import_lower/ (see the log above)".into())
    }
}

/// Installs cargo-fuzz when `cargo +nightly fuzz` is missing.
fn ensure_cargo_fuzz() -> Result<(), String> {
    let present =
        Command::new("cargo").args(["+nightly", "fuzz", "--version"]).output().is_ok_and(|o| o.status.success());
    if present {
        return Ok(());
    }
    eprintln!("xtask: installing cargo-fuzz {CARGO_FUZZ_VERSION}");
    let status = Command::new("cargo")
        .args(["install", "cargo-fuzz", "--locked", "--version", CARGO_FUZZ_VERSION])
        .status()
        .map_err(|e| format!("cannot run cargo install: {e}"))?;
    if status.success() { Ok(()) } else { Err("installing cargo-fuzz failed".into()) }
}

/// Copies every suite model (fetched into the suite's cache) into `corpus`; returns how many.
fn seed_corpus(root: &Path, corpus: &Path) -> Result<usize, String> {
    let suite = onnx_tests::fetch(&root.join("target/onnx-backend-tests"))?;
    std::fs::create_dir_all(corpus).map_err(|e| format!("cannot create {}: {e}", corpus.display()))?;
    let mut count = 0;
    for model in models(&suite)? {
        let name = model.strip_prefix(&suite).unwrap_or(&model).to_string_lossy().replace('/', "_");
        std::fs::copy(&model, corpus.join(name)).map_err(|e| format!("cannot copy {}: {e}", model.display()))?;
        count += 1;
    }
    Ok(count)
}

/// The `model.onnx` files under `dir`.
fn models(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(models(&path)?);
        } else if path.file_name().is_some_and(|n| n == "model.onnx") {
            found.push(path);
        }
    }
    Ok(found)
}
