//! Helpers shared by the integration tests: running the built `saggar` binary in a sandbox, small
//! model configs that keep debug-build runs fast, and checks of the error contract.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A scratch directory with its own cache home, so no test touches the user's `~/.cache`.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        Sandbox { dir: tempfile::tempdir().expect("a temp dir") }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A `saggar` command with the sandbox's cache home and no inherited backtrace setting.
    pub fn saggar(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_saggar"));
        command
            .env("XDG_CACHE_HOME", self.path("xdg-cache"))
            .env("HOME", self.path("home"))
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE");
        command
    }

    /// Runs `saggar ARGS` to completion.
    pub fn run(&self, args: &[&str]) -> Output {
        self.saggar().args(args).output().expect("the saggar binary runs")
    }

    /// Writes `text` to `name` in the sandbox and returns its path as a string.
    pub fn write(&self, name: &str, text: &str) -> String {
        let path = self.path(name);
        std::fs::write(&path, text).expect("writing a test file");
        path.to_str().expect("temp paths are UTF-8").to_string()
    }

    /// The small recommender config (20 inputs), written to the sandbox.
    pub fn small_recsys(&self) -> String {
        self.write("small-recsys.json", SMALL_RECSYS)
    }

    /// The small MLP config, written to the sandbox.
    pub fn small_mlp(&self) -> String {
        self.write("small-mlp.json", SMALL_MLP)
    }

    /// A fresh cache directory path (not created).
    pub fn cache_dir(&self, name: &str) -> String {
        self.path(name).to_str().expect("temp paths are UTF-8").to_string()
    }
}

/// A recommender with 16 dense and 4 sparse inputs and one small hidden layer: every kernel of the
/// default recommender, at a size a debug build runs in a fraction of a millisecond.
pub const SMALL_RECSYS: &str = r#"{"model": "recsys", "name": "small-recsys", "dense_inputs": 16, "dense_width": 4,
  "sparse_inputs": 4, "bag_size": 2, "table_rows": 50, "embedding_dim": 4, "hidden": [16]}"#;

/// A small MLP with two outputs' worth of width.
pub const SMALL_MLP: &str = r#"{"model": "mlp", "name": "small-mlp", "input": 12, "hidden": [16], "output": 3}"#;

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts that the command succeeded, showing its stderr otherwise.
pub fn assert_success(output: &Output) {
    assert!(
        output.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        stdout(output),
        stderr(output)
    );
}

/// Asserts the error contract: exit code `code`, and stderr exactly `error: ...` and `hint: ...`
/// besides progress lines (`saggar: ...`, printed when stderr is not a terminal) before them (no
/// panic message, no backtrace). Returns the error line.
pub fn assert_error(output: &Output, code: i32) -> String {
    let err = stderr(output);
    assert_eq!(output.status.code(), Some(code), "stderr:\n{err}\nstdout:\n{}", stdout(output));
    let lines: Vec<&str> = err.lines().skip_while(|l| l.starts_with("saggar: ")).collect();
    assert_eq!(lines.len(), 2, "expected one error line and one hint line, got:\n{err}");
    assert!(lines[0].starts_with("error: ") && lines[0].len() > "error: ".len(), "{err}");
    assert!(lines[1].starts_with("hint: ") && lines[1].len() > "hint: ".len(), "{err}");
    for forbidden in ["panicked", "backtrace", "RUST_BACKTRACE", "stack backtrace"] {
        assert!(!err.contains(forbidden), "stderr mentions `{forbidden}`:\n{err}");
    }
    lines[0].to_string()
}

/// Reads a JSON report.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}\n{text}", path.display()))
}

/// A u64 at a JSON pointer such as `/paths/ultra_fast`.
pub fn u64_at(json: &serde_json::Value, pointer: &str) -> u64 {
    json.pointer(pointer)
        .and_then(serde_json::Value::as_u64)
        .unwrap_or_else(|| panic!("no u64 at {pointer} in {json:#}"))
}

/// An f64 at a JSON pointer.
pub fn f64_at(json: &serde_json::Value, pointer: &str) -> f64 {
    json.pointer(pointer)
        .and_then(serde_json::Value::as_f64)
        .unwrap_or_else(|| panic!("no number at {pointer} in {json:#}"))
}
