//! `cargo xtask`: project automation that needs more than one cargo command.
//!
//! - `cargo xtask gpu-bundle --out DIR`: builds, in release, every GPU test and bench binary and the
//!   `kiln` binary with the GPU backends on, and copies them into DIR with a `run.sh` that runs the
//!   GPU tests on every visible GPU and then the GPU benches, writing `report.json` and `report.txt`
//!   into a directory given to it (`bash DIR/run.sh REPORT_DIR`). DIR can be carried to a GPU machine
//!   that has no Rust.
//! - `cargo xtask gpu [--report DIR]`: both steps, on a machine with Rust and a GPU.
//!
//! Which binaries are "GPU" binaries is decided by name: test targets whose name contains `cuda`,
//! `hip` or `gpu`, and bench targets whose name starts with `gpu_`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

const RUN_SH: &str = include_str!("run.sh");
const REPORT_PY: &str = include_str!("report.py");

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("gpu-bundle") => flag(&args, "--out").ok_or_else(usage).and_then(|out| gpu_bundle(Path::new(&out))),
        Some("gpu") => {
            let bundle = PathBuf::from("target/gpu-bundle");
            let report = flag(&args, "--report").unwrap_or_else(|| "target/gpu-report".into());
            gpu_bundle(&bundle).and_then(|()| run_bundle(&bundle, Path::new(&report)))
        }
        _ => Err(usage()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::from(2)
        }
    }
}

fn usage() -> String {
    "usage: cargo xtask gpu-bundle --out DIR | cargo xtask gpu [--report DIR]".into()
}

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

/// Features the GPU bundle is built with. The `hip` backend links libamdhip64, so it joins only when
/// HIP_PATH says where HIP is.
fn gpu_features() -> String {
    let mut features = vec!["cuda"];
    if std::env::var_os("HIP_PATH").is_some() {
        features.push("hip");
    }
    features.join(",")
}

/// Runs cargo with `--message-format=json` and returns the executables of the artifacts `keep` accepts.
fn cargo_artifacts(args: &[&str], keep: impl Fn(&serde_json::Value) -> bool) -> Result<Vec<(String, PathBuf)>, String> {
    eprintln!("xtask: cargo {}", args.join(" "));
    let output = Command::new(env_cargo())
        .args(args)
        .arg("--message-format=json-render-diagnostics")
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!("cargo {} failed", args.join(" ")));
    }
    let mut found = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if msg["reason"] != "compiler-artifact" || !keep(&msg) {
            continue;
        }
        if let (Some(name), Some(exe)) = (msg["target"]["name"].as_str(), msg["executable"].as_str()) {
            found.push((name.to_string(), PathBuf::from(exe)));
        }
    }
    Ok(found)
}

fn env_cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn is_gpu_test(name: &str) -> bool {
    ["cuda", "hip", "gpu"].iter().any(|k| name.contains(k))
}

fn gpu_bundle(out: &Path) -> Result<(), String> {
    let features = gpu_features();
    let tests = cargo_artifacts(&["test", "--workspace", "--release", "--no-run", "--features", &features], |m| {
        m["profile"]["test"] == true && m["target"]["name"].as_str().is_some_and(is_gpu_test)
    })?;
    let benches = cargo_artifacts(&["bench", "--workspace", "--no-run", "--features", &features], |m| {
        m["target"]["kind"][0] == "bench" && m["target"]["name"].as_str().is_some_and(|n| n.starts_with("gpu_"))
    })?;
    let bins = cargo_artifacts(&["build", "--workspace", "--release", "--bins", "--features", &features], |m| {
        m["target"]["kind"][0] == "bin" && m["target"]["name"] == "kiln"
    })?;
    for sub in ["tests", "benches", "bin"] {
        std::fs::create_dir_all(out.join(sub)).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    }
    let copy = |list: &[(String, PathBuf)], sub: &str| -> Result<Vec<String>, String> {
        let mut names = Vec::new();
        for (name, exe) in list {
            let dest = out.join(sub).join(name);
            std::fs::copy(exe, &dest)
                .map_err(|e| format!("cannot copy {} to {}: {e}", exe.display(), dest.display()))?;
            names.push(name.clone());
        }
        Ok(names)
    };
    let test_names = copy(&tests, "tests")?;
    let bench_names = copy(&benches, "benches")?;
    copy(&bins, "bin")?;
    std::fs::write(out.join("run.sh"), RUN_SH).map_err(|e| e.to_string())?;
    std::fs::write(out.join("report.py"), REPORT_PY).map_err(|e| e.to_string())?;
    eprintln!(
        "xtask: bundle in {} ({} test binaries: {}; {} bench binaries: {}; kiln: {})",
        out.display(),
        test_names.len(),
        test_names.join(" "),
        bench_names.len(),
        bench_names.join(" "),
        if bins.is_empty() { "not built yet" } else { "yes" }
    );
    eprintln!("xtask: run it with `bash {}/run.sh REPORT_DIR`", out.display());
    Ok(())
}

fn run_bundle(bundle: &Path, report: &Path) -> Result<(), String> {
    let status = Command::new("bash")
        .arg(bundle.join("run.sh"))
        .arg(report)
        .status()
        .map_err(|e| format!("cannot run the bundle: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("the GPU run failed; see {}/report.txt", report.display())) }
}
