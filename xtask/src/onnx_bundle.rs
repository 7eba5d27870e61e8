//! The ONNX backend suite in the GPU bundle: `onnx-suite/backend_suite` (built with the bundle's
//! GPU features), its expectations file, and only the applicable tests' folders (`onnx-suite/data/`,
//! about 14 MB of the suite's 60), listed by the binary itself (`SAGGAR_ONNX_LIST_APPLICABLE`). With
//! the HIP fixture in the bundle, a second build with `cuda,hip` goes to `hip-fixture/onnx/`. `run.sh`
//! runs both on GPU 0.

use std::path::Path;
use std::process::Command;

use crate::onnx_tests;

/// Bundles the suite into `out`; `hip_features` builds the HIP-backend copy too. Returns a summary
/// line; a suite that cannot be fetched (no pip, no network) is reported, not an error.
pub fn bundle(out: &Path, features: &str, hip_features: Option<&str>) -> Result<String, String> {
    let dir = out.join("onnx-suite");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("cannot clear {}: {e}", dir.display()))?;
    }
    let cache = std::env::var("SAGGAR_ONNX_TEST_CACHE").unwrap_or_else(|_| "target/onnx-backend-tests".into());
    let root = match onnx_tests::fetch(Path::new(&cache)) {
        Ok(root) => root,
        Err(e) => return Ok(format!("ONNX backend suite not bundled ({e})")),
    };
    let build = |features: &str| {
        crate::cargo_artifacts(
            &["test", "-p", "saggar-onnx", "--release", "--no-run", "--features", features, "--test", "backend_suite"],
            |m| m["target"]["name"] == "backend_suite",
        )
    };
    crate::copy_into(&dir, &build(features)?)?;
    let list = dir.join("applicable.txt");
    let status = Command::new(dir.join("backend_suite"))
        .env("SAGGAR_ONNX_BACKEND_TESTS", &root)
        .env("SAGGAR_ONNX_LIST_APPLICABLE", &list)
        .status()
        .map_err(|e| format!("cannot run backend_suite: {e}"))?;
    if !status.success() {
        return Err("backend_suite could not list the applicable tests".into());
    }
    let tests = std::fs::read_to_string(&list).map_err(|e| format!("cannot read {}: {e}", list.display()))?;
    let mut count = 0;
    for test in tests.lines().filter(|l| !l.is_empty()) {
        copy_dir(&root.join(test), &dir.join("data").join(test))?;
        count += 1;
    }
    let expectations =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/saggar-onnx/tests/backend_expectations.txt");
    std::fs::copy(&expectations, dir.join("backend_expectations.txt"))
        .map_err(|e| format!("cannot copy {}: {e}", expectations.display()))?;
    let hip = match hip_features {
        Some(f) => {
            crate::copy_into(&out.join("hip-fixture/onnx"), &build(f)?)?;
            " (and hip-fixture/onnx/backend_suite)"
        }
        None => "",
    };
    Ok(format!("ONNX backend suite: onnx-suite/backend_suite{hip} over {count} applicable tests"))
}

/// Copies the files of `from` (recursively) into `to`.
fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    for entry in std::fs::read_dir(from).map_err(|e| format!("cannot read {}: {e}", from.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let dest = to.join(path.file_name().unwrap_or_default());
        if path.is_dir() {
            copy_dir(&path, &dest)?;
        } else {
            std::fs::copy(&path, &dest).map_err(|e| format!("cannot copy {}: {e}", path.display()))?;
        }
    }
    Ok(())
}
