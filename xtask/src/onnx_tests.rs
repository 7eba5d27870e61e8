//! `cargo xtask onnx-tests`: the ONNX project's own backend test suite, run through saggar-onnx.
//!
//! The suite ships inside the `onnx` wheel on PyPI (`onnx/backend/test/data/{node,pytorch-converted,
//! pytorch-operator,simple}`: each test a `model.onnx` with `test_data_set_N/{input,output}_K.pb`; and
//! `light/`: nine model-zoo networks whose weights are `ConstantOfShape` nodes, `light_X.onnx` beside
//! `light_X_output_0.pb`, extracted as `light/test_light_X/{model.onnx,test_data_set_0/output_0.pb}`). This
//! task downloads ONE pinned wheel with pip (from whatever package index pip is configured for), checks
//! its SHA-256, extracts the data folders into a cache folder, and then runs saggar-onnx's `backend_suite`
//! test binary over them with the chosen backend. Nothing is fetched at test time: the test binary only
//! reads the folder it is given, and without one it reports itself skipped.
//!
//! The cache folder is `--cache DIR`, else `$SAGGAR_ONNX_TEST_CACHE`, else `target/onnx-backend-tests`.
//! A completed extraction is marked with a `.complete` file holding the wheel's digest, so a second run
//! (or a CI run with a warm cache) does no network access at all.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The pinned wheel: any platform's wheel carries the same test data; this one is pinned by digest.
const ONNX_VERSION: &str = "1.19.1";
const WHEEL: &str = "onnx-1.19.1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl";
const WHEEL_SHA256: &str = "1839af08ab4a909e4af936b8149c27f8c64b96138981024e251906e0539d8bf9";
/// The folders of `onnx/backend/test/data/` the suite runs.
const SUITES: &[&str] = &["node", "pytorch-converted", "pytorch-operator", "simple", "light"];

/// Options of `cargo xtask onnx-tests`.
#[derive(Debug)]
pub struct OnnxTestOptions {
    /// Where the wheel and the extracted data live.
    pub cache: PathBuf,
    /// `host`, `cuda` or `hip`.
    pub backend: String,
    /// Only fetch and extract; do not run.
    pub fetch_only: bool,
    /// Only tests whose name contains this.
    pub filter: Option<String>,
    /// Where the markdown report is written (`--report FILE`); on host without a filter it defaults
    /// to `docs/onnx-backend-tests.md`, the report kept in the repository.
    pub report: Option<PathBuf>,
}

impl OnnxTestOptions {
    /// Parses the task's flags.
    pub fn from_args(args: &[String], flag: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let cache = flag("--cache")
            .or_else(|| std::env::var("SAGGAR_ONNX_TEST_CACHE").ok())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("target/onnx-backend-tests"));
        let backend = flag("--backend").unwrap_or_else(|| "host".into());
        if !["host", "cuda", "hip"].contains(&backend.as_str()) {
            return Err(format!("--backend {backend}: expected host, cuda or hip"));
        }
        let filter = flag("--filter");
        let report = flag("--report")
            .map(PathBuf::from)
            .or_else(|| (backend == "host" && filter.is_none()).then(|| PathBuf::from("docs/onnx-backend-tests.md")));
        Ok(Self { cache, backend, fetch_only: args.iter().any(|a| a == "--fetch-only"), filter, report })
    }
}

/// Fetches (once) and extracts the pinned suite; returns the folder holding `node/`, `simple/`, ...
pub fn fetch(cache: &Path) -> Result<PathBuf, String> {
    let data = cache.join(format!("onnx-{ONNX_VERSION}"));
    let marker = data.join(".complete");
    // The digest and the suites extracted: adding a suite extracts again.
    let stamp = format!("{WHEEL_SHA256} {}", SUITES.join(","));
    if std::fs::read_to_string(&marker).is_ok_and(|d| d.trim() == stamp) {
        eprintln!("xtask: ONNX backend tests of onnx {ONNX_VERSION} already in {}", data.display());
        return Ok(data);
    }
    let wheels = cache.join("wheels");
    std::fs::create_dir_all(&wheels).map_err(|e| format!("cannot create {}: {e}", wheels.display()))?;
    let wheel = wheels.join(WHEEL);
    if !wheel.exists() {
        eprintln!(
            "xtask: downloading onnx=={ONNX_VERSION} (18 MB, pinned by SHA-256) with pip into {}",
            wheels.display()
        );
        let status = Command::new("python3")
            .args(["-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"])
            .args(["--platform", "manylinux_2_17_x86_64", "--python-version", "3.11", "--implementation", "cp"])
            .arg(format!("onnx=={ONNX_VERSION}"))
            .arg("--dest")
            .arg(&wheels)
            .status()
            .map_err(|e| format!("cannot run python3 -m pip (install Python 3 with pip): {e}"))?;
        if !status.success() || !wheel.exists() {
            return Err(format!(
                "pip could not download onnx=={ONNX_VERSION} into {}; check network access to the package index",
                wheels.display()
            ));
        }
    }
    // Python's hashlib and zipfile: no extra Rust dependency for a one-off extraction.
    let script = r#"
import hashlib, os, shutil, sys, zipfile
wheel, want, out, suites = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
got = hashlib.sha256(open(wheel, "rb").read()).hexdigest()
if got != want:
    sys.exit(f"{wheel}: SHA-256 {got}, expected {want}: delete it and run again")
prefix = "onnx/backend/test/data/"
tmp = out + ".partial"
shutil.rmtree(tmp, ignore_errors=True)
count = 0
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        name = info.filename
        if not name.startswith(prefix) or info.is_dir():
            continue
        rel = name[len(prefix):]
        if rel.split("/")[0] not in suites or ".." in rel.split("/"):
            continue
        if rel.startswith("light/"):
            # light/light_X.onnx and light/light_X_output_0.pb: one test folder per model.
            base = rel[len("light/"):]
            if base.endswith("_output_0.pb"):
                rel = f"light/test_{base[:-len('_output_0.pb')]}/test_data_set_0/output_0.pb"
            elif base.endswith(".onnx"):
                rel = f"light/test_{base[:-len('.onnx')]}/model.onnx"
            else:
                continue
        dest = os.path.join(tmp, rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with z.open(info) as src, open(dest, "wb") as dst:
            shutil.copyfileobj(src, dst)
        count += 1
shutil.rmtree(out, ignore_errors=True)
os.rename(tmp, out)
print(f"xtask: extracted {count} files of {','.join(suites)}")
"#;
    let status = Command::new("python3")
        .args(["-c", script])
        .arg(&wheel)
        .arg(WHEEL_SHA256)
        .arg(&data)
        .arg(SUITES.join(","))
        .status()
        .map_err(|e| format!("cannot run python3: {e}"))?;
    if !status.success() {
        return Err(format!("extracting the ONNX backend tests from {} failed", wheel.display()));
    }
    std::fs::write(&marker, stamp).map_err(|e| format!("cannot write {}: {e}", marker.display()))?;
    Ok(data)
}

/// Fetches the suite and runs saggar-onnx's `backend_suite` test binary over it.
pub fn run(options: &OnnxTestOptions, cargo: &str) -> Result<(), String> {
    let data = fetch(&options.cache)?;
    if options.fetch_only {
        return Ok(());
    }
    let data = std::fs::canonicalize(&data).map_err(|e| format!("cannot resolve {}: {e}", data.display()))?;
    let mut cmd = Command::new(cargo);
    cmd.args(["test", "--release", "-p", "saggar-onnx", "--test", "backend_suite"]);
    match options.backend.as_str() {
        "hip" => {
            cmd.args(["--features", "hip"]);
        }
        "cuda" => {
            cmd.args(["--features", "cuda"]);
        }
        _ => {}
    }
    cmd.arg("--").env("SAGGAR_ONNX_BACKEND_TESTS", &data).env("SAGGAR_ONNX_BACKEND", &options.backend);
    if let Some(filter) = &options.filter {
        cmd.env("SAGGAR_ONNX_TEST_FILTER", filter);
    }
    if let Some(report) = &options.report {
        // The test binary runs in the crate's folder: hand it an absolute path.
        let report = std::env::current_dir().map(|d| d.join(report)).unwrap_or_else(|_| report.clone());
        cmd.env("SAGGAR_ONNX_REPORT", report);
    }
    eprintln!("xtask: running the ONNX backend tests in {} on {}", data.display(), options.backend);
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() { Ok(()) } else { Err("the ONNX backend test suite failed (see the report above)".into()) }
}
