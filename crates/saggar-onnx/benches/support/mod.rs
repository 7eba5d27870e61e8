//! What the GPU benches of saggar-onnx that report one JSON value share: the command line (`--json
//! PATH`), printing or writing the report, and deterministic inputs.

use std::path::PathBuf;

/// Runs bench `name`: prints `run`'s report as JSON, or why it skipped, and writes it (or the skip
/// reason) to the `--json` path when one was given.
pub fn main_with(name: &str, run: impl FnOnce() -> Result<serde_json::Value, String>) {
    let json_path = json_path_from_args();
    let report = run();
    match &report {
        Ok(value) => println!("{}", serde_json::to_string_pretty(value).expect("JSON")),
        Err(reason) => println!("{name}: skipping: {reason}"),
    }
    if let Some(path) = json_path {
        let value = report.unwrap_or_else(|reason| serde_json::json!({ "skipped": reason }));
        std::fs::write(&path, serde_json::to_string_pretty(&value).expect("JSON") + "\n")
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        eprintln!("{name}: wrote {}", path.display());
    }
}

/// `--json PATH`, or the first argument that is not a flag. (`cargo bench` adds `--bench`.)
fn json_path_from_args() -> Option<PathBuf> {
    let mut args = std::env::args().skip(1);
    let mut positional = None;
    while let Some(arg) = args.next() {
        if arg == "--json" {
            return args.next().map(PathBuf::from);
        } else if let Some(path) = arg.strip_prefix("--json=") {
            return Some(PathBuf::from(path));
        } else if !arg.starts_with('-') && positional.is_none() {
            positional = Some(PathBuf::from(arg));
        }
    }
    positional
}

/// `n` values in [-1, 1] from an xorshift stream seeded by `seed`.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// Little-endian bytes of `values`.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub fn bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}
