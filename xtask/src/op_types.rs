//! `cargo xtask op-types [--python PATH]`: regenerates saggar-onnx's table of element types per
//! declared op (`crates/saggar-onnx/src/ops/types/types.tsv`) from the operator schemas of the onnx
//! Python package, by running `op_types.py` beside this file with PATH (default `python3`), which
//! must import onnx (the pinned version: the one the backend suite uses). Then run
//! `cargo test -p saggar-onnx --lib ops::types`: it probes every type the new table claims.
//! `op_types.py --check-suite` cross-checks the claims with the backend suite's tests (its docs say how).

use std::path::Path;
use std::process::Command;

/// The table, relative to the workspace root.
const TABLE: &str = "crates/saggar-onnx/src/ops/types/types.tsv";

pub(crate) fn run(root: &Path, python: Option<String>) -> Result<(), String> {
    let python = python.unwrap_or_else(|| "python3".into());
    let out = Command::new(&python)
        .arg(root.join("xtask/src/op_types.py"))
        .arg(root.join("crates/saggar-onnx/src/ops"))
        .output()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "op_types.py failed ({}): {}; it needs the onnx package (`--python PATH` names an interpreter that has it)",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let path = root.join(TABLE);
    std::fs::write(&path, &out.stdout).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!("wrote {TABLE}; now run `cargo test -p saggar-onnx --lib ops::types`");
    Ok(())
}
