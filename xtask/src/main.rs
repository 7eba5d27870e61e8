//! `cargo xtask`: project automation that needs more than one cargo command.
//!
//! - `cargo xtask gpu-bundle --out DIR`: builds, in release, every GPU test and bench binary and the
//!   `saggar` binary with the GPU backends on, and copies them into DIR with a `run.sh` that runs the
//!   GPU tests on every visible GPU and then the GPU benches, writing `report.json` and `report.txt`
//!   into a directory given to it (`bash DIR/run.sh REPORT_DIR`). DIR can be carried to a GPU machine
//!   that has no Rust.
//! - `cargo xtask gpu [--report DIR]`: both steps, on a machine with Rust and a GPU.
//! - `cargo xtask onnx-tests [--backend host|cuda|hip]`: fetches the pinned ONNX backend test suite into a
//!   cache folder and runs it through saggar-onnx (see `onnx_tests.rs`).
//! - `cargo xtask publish-check`: packages and verifies every published crate as `cargo publish`
//!   would, without publishing (see `publish.rs`).
//! - `cargo xtask zoo [FLAGS]`: exports the zoo's architectures (`benches/zoo`) and runs them through
//!   `saggar` against PyTorch and ONNX Runtime, where PyTorch is (the GPU machine: there it runs from
//!   the bundle, `SAGGAR_ZOO=1 bash run.sh REPORT`).
//! - `cargo xtask fuzz [--seconds N]`: runs the cargo-fuzz target over import, checking and lowering,
//!   seeded with the backend suite's models (see `fuzz.rs`).
//! - `cargo xtask op-types [--python PATH]`: regenerates saggar-onnx's table of element types per
//!   declared op from the onnx package's operator schemas (see `op_types.rs`).
//! - `cargo xtask tidy`: prints every violation of the source-tree rules that `cargo test --workspace`
//!   also checks (file and function length, module docs, saggar-onnx's layers; see `tidy.rs`).
//!
//! The bundle also carries the PyTorch peers: `bin/export_peer_data` (the example
//! `crates/saggar-models/examples/export_peer_data.rs`, which exports a model's weights, config and a
//! verification set) and `peers/` (the scripts of `benches/peers/`). `run.sh` ends with a "peers" step that
//! runs `saggar perf` and the PyTorch variants back to back on GPU 0 and writes `peers.md`
//! (`benches/peers/README.md`); it is skipped with `SAGGAR_SKIP_PEERS=1`, without a GPU, or without torch.
//!
//! It also carries the ONNX backend suite (`onnx-suite/`: the `backend_suite` binary, its expectations
//! and the applicable tests' data; see `onnx_bundle.rs`), which `run.sh` runs on CUDA and, through the
//! fixture, on the HIP backend (`SAGGAR_SKIP_ONNX=1` skips it).
//!
//! Both take `--for nvidia` (the default) or `--for amd`: the kind of GPU machine the bundle is for.
//!
//! Which binaries are "GPU" binaries is decided by name: test targets whose name contains `cuda`,
//! `hip` or `gpu`, and bench targets whose name starts with `gpu_`.
//!
//! # A bundle for an AMD machine (`--for amd`)
//! Needs `HIP_PATH`. Every GPU binary is built with `cuda,hip` and runs in the ordinary loop, the HIP
//! backend on the machine's ROCm.
//!
//! # A bundle for an NVIDIA machine, and the HIP backend on CUDA via the test fixture
//! The ordinary binaries (tests, benches, `saggar`) are built with the `cuda` feature only. With `hip` on,
//! every binary that can reach the HIP backend links libamdhip64 (hip-runtime-sys links it), so a GPU
//! bench or dispatcher test built that way would not even load on an NVIDIA machine, and where it did
//! load (through the fixture) `auto` backend selection would pick HIP and turn a CUDA result into
//! something else. So when `HIP_PATH` is set (`HIP_PATH=/usr` for Debian's `libamdhip64-dev`), the
//! bundle also builds, separately and with `cuda,hip`, the test binaries whose name contains `hip`
//! (except the fixture's own tests, which need no GPU), and `saggar-hip-fixture`, the TEST-ONLY library
//! that exports the hip*/hiprtc* symbols over the CUDA driver and NVRTC. It puts both in
//! `DIR/hip-fixture/`: the binaries in `tests/`, the library copied under every name they load it by
//! (each `libamdhip64` / `libhiprtc` NEEDED entry of the binaries, read from their ELF headers, plus
//! `libhiprtc.so` and `libamdhip64.so`, the names saggar's hipRTC loader tries first). `run.sh` runs them
//! in a step of their own, "HIP backend on CUDA via fixture", on GPU 0 with that directory first on the
//! library path; the report labels those results `hip-fixture` and never presents them as AMD results.

mod fuzz;
mod onnx_bundle;
mod onnx_tests;
mod op_types;
mod publish;
mod tidy;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

const RUN_SH: &str = include_str!("run.sh");
const REPORT_PY: &str = include_str!("report.py");
/// The example that exports the PyTorch peers' data, built into the bundle's `bin/`.
const PEER_EXPORT: &str = "export_peer_data";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match (args.first().map(String::as_str), machine(&args)) {
        (_, Err(e)) => Err(e),
        (Some("gpu-bundle"), Ok(machine)) => {
            flag(&args, "--out").ok_or_else(usage).and_then(|out| gpu_bundle(Path::new(&out), machine))
        }
        (Some("publish-check"), _) => publish::publish_check(&workspace_root()),
        (Some("tidy"), _) => tidy::run(&workspace_root()),
        (Some("op-types"), _) => op_types::run(&workspace_root(), flag(&args, "--python")),
        (Some("fuzz"), _) => fuzz::run(&workspace_root(), flag(&args, "--seconds"), flag(&args, "--jobs")),
        (Some("gpu"), Ok(machine)) => {
            let bundle = PathBuf::from("target/gpu-bundle");
            let report = flag(&args, "--report").unwrap_or_else(|| "target/gpu-report".into());
            gpu_bundle(&bundle, machine).and_then(|()| run_bundle(&bundle, Path::new(&report)))
        }
        (Some("zoo"), Ok(_)) => zoo(&args[1..]),
        (Some("onnx-tests"), Ok(_)) => onnx_tests::OnnxTestOptions::from_args(&args, |name| flag(&args, name))
            .and_then(|options| onnx_tests::run(&options, &env_cargo())),
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
    "usage: cargo xtask gpu-bundle --out DIR [--for nvidia|amd] | cargo xtask gpu [--report DIR] [--for nvidia|amd]\n       \
     cargo xtask onnx-tests [--backend host|cuda|hip] [--cache DIR] [--filter TEXT] [--report FILE] [--fetch-only]\n       \
     cargo xtask zoo [zoo.py flags: --only A,B --exporters torchscript,dynamo --tiny --export-only ...]\n       \
     cargo xtask publish-check | cargo xtask tidy | cargo xtask fuzz [--seconds N] [--jobs J]\n       \
     cargo xtask op-types [--python PATH]"
        .into()
}

/// `cargo xtask zoo [FLAGS]`: builds `saggar` (release, CUDA) and runs `benches/zoo/zoo.py` with it into
/// `target/zoo` (FLAGS are passed on). It needs PyTorch, torchvision, transformers and onnx, which the
/// GPU machine has: where they are missing it says how to run the zoo from a GPU bundle instead.
fn zoo(flags: &[String]) -> Result<(), String> {
    let root = workspace_root();
    let probe = Command::new("python3")
        .args(["-c", "import torch, torchvision, transformers, onnx"])
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        return Err("the zoo needs PyTorch, torchvision, transformers and onnx (python3 -c 'import torch, torchvision, \
                    transformers, onnx' fails here). Run it where they are: `HIP_PATH=/usr cargo xtask gpu-bundle --out \
                    bundle`, carry bundle/ to the GPU machine, then `SAGGAR_ZOO=1 bash bundle/run.sh REPORT` \
                    (SAGGAR_ZOO_ONLY=a,b for some architectures); see benches/zoo/README.md"
            .into());
    }
    let bins =
        cargo_artifacts(&["build", "--release", "-p", "saggar-cli", "--bins", "--features", GPU_FEATURES], |m| {
            m["target"]["kind"][0] == "bin" && m["target"]["name"] == "saggar"
        })?;
    let saggar = bins.first().map(|(_, path)| path.clone()).ok_or("cargo built no `saggar` binary")?;
    let out = root.join("target/zoo");
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let status = Command::new("python3")
        .arg(root.join("benches/zoo/zoo.py"))
        .arg("--out")
        .arg(&out)
        .arg("--saggar")
        .arg(&saggar)
        .args(flags)
        .status()
        .map_err(|e| format!("cannot run python3: {e}"))?;
    if !status.success() {
        return Err(format!("zoo.py failed ({status})"));
    }
    eprintln!("xtask: zoo report in {}", out.join("zoo.md").display());
    Ok(())
}

/// The workspace root (xtask's manifest directory is one below it).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."))
}

/// The kind of GPU machine a bundle is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Machine {
    /// NVIDIA GPUs: ordinary binaries with `cuda`; the HIP backend's tests through the fixture.
    Nvidia,
    /// AMD GPUs: every binary with `cuda,hip`, the HIP backend on ROCm.
    Amd,
}

fn machine(args: &[String]) -> Result<Machine, String> {
    match flag(args, "--for").as_deref() {
        None | Some("nvidia") => Ok(Machine::Nvidia),
        Some("amd") if hip_enabled() => Ok(Machine::Amd),
        Some("amd") => Err("a bundle for AMD GPUs needs HIP_PATH (where HIP's headers and libamdhip64 are)".into()),
        Some(other) => Err(format!("--for {other}: expected nvidia or amd")),
    }
}

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

/// Features of the ordinary GPU binaries: CUDA only (see the module docs for why `hip` is apart).
/// The conformance suites need saggar-device's `conformance` feature; the test targets' own
/// dev-dependencies turn it on, so every `cargo test --no-run` below builds them with it.
const GPU_FEATURES: &str = "cuda";
/// Features of the HIP-backend test binaries run through the fixture.
const HIP_FEATURES: &str = "cuda,hip";
/// The fixture's package, and the file cargo builds for it.
const FIXTURE_PACKAGE: &str = "saggar-hip-fixture";
const FIXTURE_LIBRARY: &str = "libsaggar_hip_fixture.so";
/// The names saggar's HIP backend loads hipRTC by first (`HIPRTC_CANDIDATES` in
/// crates/saggar-device/src/hip/sys.rs) and hipBLASLt by first (crates/saggar-device/src/hip/blas.rs):
/// the fixture is copied under these whatever the binaries link.
const HIPRTC_NAMES: &[&str] = &["libhiprtc.so", "libamdhip64.so", "libhipblaslt.so.1"];

/// Whether the HIP backend can be built here: HIP_PATH says where HIP's headers and libamdhip64 are.
fn hip_enabled() -> bool {
    std::env::var_os("HIP_PATH").is_some()
}

/// Runs cargo with `--message-format=json` and returns the compiler-artifact messages `keep` accepts.
fn cargo_messages(args: &[&str], keep: impl Fn(&serde_json::Value) -> bool) -> Result<Vec<serde_json::Value>, String> {
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
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|msg| msg["reason"] == "compiler-artifact" && keep(msg))
        .collect())
}

/// Runs cargo with `--message-format=json` and returns the executables of the artifacts `keep` accepts.
fn cargo_artifacts(args: &[&str], keep: impl Fn(&serde_json::Value) -> bool) -> Result<Vec<(String, PathBuf)>, String> {
    let mut found = Vec::new();
    for msg in cargo_messages(args, keep)? {
        if let (Some(name), Some(exe)) = (msg["target"]["name"].as_str(), msg["executable"].as_str()) {
            found.push((name.to_string(), PathBuf::from(exe)));
        }
    }
    Ok(found)
}

pub(crate) fn env_cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn is_gpu_test(name: &str) -> bool {
    ["cuda", "hip", "gpu"].iter().any(|k| name.contains(k))
}

/// A test of the HIP backend: run through the fixture, not in the ordinary per-GPU loop.
fn is_hip_test(name: &str) -> bool {
    name.contains("hip")
}

/// Copies each `(name, file)` into `dir` under `name`.
fn copy_into(dir: &Path, list: &[(String, PathBuf)]) -> Result<Vec<String>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut names = Vec::new();
    for (name, file) in list {
        let dest = dir.join(name);
        std::fs::copy(file, &dest).map_err(|e| format!("cannot copy {} to {}: {e}", file.display(), dest.display()))?;
        names.push(name.clone());
    }
    Ok(names)
}

/// Whether a cargo message is about the fixture's package (whose tests need no GPU).
fn is_fixture_package(message: &serde_json::Value) -> bool {
    message["package_id"].as_str().is_some_and(|id| id.contains(FIXTURE_PACKAGE))
}

fn gpu_bundle(out: &Path, machine: Machine) -> Result<(), String> {
    let features = match machine {
        Machine::Nvidia => GPU_FEATURES,
        Machine::Amd => HIP_FEATURES,
    };
    let tests = cargo_artifacts(&["test", "--workspace", "--release", "--no-run", "--features", features], |m| {
        m["profile"]["test"] == true
            && !is_fixture_package(m)
            && m["target"]["name"]
                .as_str()
                .is_some_and(|n| is_gpu_test(n) && (machine == Machine::Amd || !is_hip_test(n)))
    })?;
    let benches = cargo_artifacts(&["bench", "--workspace", "--no-run", "--features", features], |m| {
        m["target"]["kind"][0] == "bench" && m["target"]["name"].as_str().is_some_and(|n| n.starts_with("gpu_"))
    })?;
    let bins = cargo_artifacts(&["build", "--workspace", "--release", "--bins", "--features", features], |m| {
        m["target"]["kind"][0] == "bin" && m["target"]["name"] == "saggar"
    })?;
    // The PyTorch peers' exporter: CPU only, so no GPU features.
    let peer_export = cargo_artifacts(&["build", "--release", "-p", "saggar-models", "--example", PEER_EXPORT], |m| {
        m["target"]["kind"][0] == "example" && m["target"]["name"] == PEER_EXPORT
    })?;
    // The subdirectories are the bundle's own: clear them, so no binary of an earlier build (a HIP test
    // in `tests/`, say) is run by mistake.
    for sub in ["tests", "benches", "bin", "hip-fixture", "peers", "zoo"] {
        let dir = out.join(sub);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| format!("cannot clear {}: {e}", dir.display()))?;
        }
    }
    let test_names = copy_into(&out.join("tests"), &tests)?;
    let bench_names = copy_into(&out.join("benches"), &benches)?;
    copy_into(&out.join("bin"), &bins)?;
    copy_into(&out.join("bin"), &peer_export)?;
    let peer_scripts = copy_scripts("peers", &out.join("peers"))?;
    let zoo_scripts = copy_scripts("zoo", &out.join("zoo"))?;
    copy_onnx_models(&out.join("onnx-models"))?;
    eprintln!("xtask: PyTorch peers: bin/{PEER_EXPORT} and peers/{}", peer_scripts.join(" peers/"));
    eprintln!("xtask: the zoo (opt-in, SAGGAR_ZOO=1): zoo/{}", zoo_scripts.join(" zoo/"));
    let hip = if machine == Machine::Amd {
        "the HIP backend on the machine's ROCm, in the ordinary loop".to_string()
    } else if hip_enabled() {
        let (tests, libraries) = hip_fixture_bundle(&out.join("hip-fixture"))?;
        format!(
            "{} HIP-backend test binaries via the fixture: {}; fixture as {}",
            tests.len(),
            tests.join(" "),
            libraries.join(" ")
        )
    } else {
        "no HIP-backend tests (set HIP_PATH, e.g. HIP_PATH=/usr, to run them on CUDA via saggar-hip-fixture)".into()
    };
    let hip_suite = (machine == Machine::Nvidia && hip_enabled()).then_some(HIP_FEATURES);
    let onnx_suite = onnx_bundle::bundle(out, features, hip_suite)?;
    eprintln!("xtask: {onnx_suite}");
    strip_binaries(out)?;
    std::fs::write(out.join("run.sh"), RUN_SH).map_err(|e| e.to_string())?;
    std::fs::write(out.join("report.py"), REPORT_PY).map_err(|e| e.to_string())?;
    eprintln!(
        "xtask: bundle in {} ({} test binaries: {}; {} bench binaries: {}; saggar: {}; {hip})",
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

/// Copies the scripts of `benches/<folder>` (`*.py`, `*.sh` and its README: the PyTorch peers, the zoo)
/// into `dir`; returns the file names.
fn copy_scripts(folder: &str, dir: &Path) -> Result<Vec<String>, String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches").join(folder);
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&source).map_err(|e| format!("cannot read {}: {e}", source.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if path.is_file() && (name.ends_with(".py") || name.ends_with(".sh") || name == "README.md") {
            files.push((name, path));
        }
    }
    files.sort();
    if !files.iter().any(|(n, _)| n.ends_with(".py")) {
        return Err(format!("no scripts (*.py) in {}", source.display()));
    }
    copy_into(dir, &files)
}

/// Copies saggar-onnx's exported models (`crates/saggar-onnx/models/*/model.onnx`) and `export.py`, which
/// builds the PyTorch module each was exported from, into `dir` for the ONNX peers.
fn copy_onnx_models(dir: &Path) -> Result<(), String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/saggar-onnx/models");
    copy_into(dir, &[("export.py".to_string(), source.join("export.py"))])?;
    for model in ["bert", "dlrm", "mlp", "cnn"] {
        copy_into(&dir.join(model), &[("model.onnx".to_string(), source.join(model).join("model.onnx"))])?;
    }
    Ok(())
}

/// The test targets whose name contains `hip`, except the fixture's own, as `--test NAME` arguments.
fn hip_test_targets() -> Result<Vec<String>, String> {
    let output = Command::new(env_cargo())
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err("cargo metadata failed".into());
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).map_err(|e| format!("cargo metadata: {e}"))?;
    let mut names = Vec::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        if package["name"] == FIXTURE_PACKAGE {
            continue;
        }
        for target in package["targets"].as_array().into_iter().flatten() {
            let is_test = target["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "test"));
            if let Some(name) = target["name"].as_str().filter(|n| is_test && is_hip_test(n)) {
                names.push(name.to_string());
            }
        }
    }
    names.sort();
    names.dedup();
    Ok(names)
}

/// Builds the HIP-backend test binaries (features `cuda,hip`) and the fixture, and lays them out in
/// `dir`: `tests/` and the library under every name the binaries load it by. Returns the test names and
/// the library names.
fn hip_fixture_bundle(dir: &Path) -> Result<(Vec<String>, Vec<String>), String> {
    let targets = hip_test_targets()?;
    if targets.is_empty() {
        return Err("HIP_PATH is set but the workspace has no test target whose name contains `hip`".into());
    }
    let mut args = vec!["test", "--workspace", "--release", "--no-run", "--features", HIP_FEATURES];
    for target in &targets {
        args.extend(["--test", target.as_str()]);
    }
    let tests = cargo_artifacts(&args, |m| {
        m["profile"]["test"] == true && m["target"]["name"].as_str().is_some_and(|n| targets.iter().any(|t| t == n))
    })?;
    let fixture = cargo_messages(&["build", "--release", "-p", FIXTURE_PACKAGE], |m| {
        m["target"]["name"] == "saggar_hip_fixture"
    })?
    .iter()
    .flat_map(|m| m["filenames"].as_array().cloned().unwrap_or_default())
    .filter_map(|f| f.as_str().map(PathBuf::from))
    .find(|f| f.file_name().is_some_and(|n| n == FIXTURE_LIBRARY))
    .ok_or_else(|| format!("cargo built {FIXTURE_PACKAGE} but reported no {FIXTURE_LIBRARY}"))?;

    let mut libraries: Vec<String> = HIPRTC_NAMES.iter().map(|n| n.to_string()).collect();
    for (_, exe) in &tests {
        for needed in needed_libraries(exe)? {
            if (needed.starts_with("libamdhip64") || needed.starts_with("libhiprtc")) && !libraries.contains(&needed) {
                libraries.push(needed);
            }
        }
    }
    let test_names = copy_into(&dir.join("tests"), &tests)?;
    // The CLI with the HIP backend, for the zoo on the HIP backend via the fixture. It is built last:
    // it replaces the CUDA-only `saggar` in target/release, which the bundle has copied already.
    let cli =
        cargo_artifacts(&["build", "--release", "-p", "saggar-cli", "--bins", "--features", HIP_FEATURES], |m| {
            m["target"]["kind"][0] == "bin" && m["target"]["name"] == "saggar"
        })?;
    copy_into(&dir.join("bin"), &cli)?;
    // Copies, not symlinks: the bundle travels as plain files. Each name is a separate file, so a process
    // may load the library twice (as libamdhip64.so.5 for the runtime, as libhiprtc.so for hipRTC); the
    // two copies share nothing, and need not: a hipRTC program never meets the runtime's state.
    let copies: Vec<(String, PathBuf)> = libraries.iter().map(|n| (n.clone(), fixture.clone())).collect();
    copy_into(dir, &copies)?;
    std::fs::write(
        dir.join("README.txt"),
        format!(
            "TEST FIXTURE, not ROCm. The libraries in this directory ({}) are all copies of saggar-hip-fixture\n\
             (crates/saggar-hip-fixture): the hip*/hiprtc* symbols saggar's HIP backend imports, implemented over the\n\
             CUDA driver API and NVRTC. run.sh runs tests/ with this directory first on LD_LIBRARY_PATH, on an\n\
             NVIDIA GPU. Results are \"HIP backend on CUDA via fixture\": they test the HIP backend's logic and call\n\
             sequences, not AMD hardware, ROCm or its performance.\n",
            libraries.join(", ")
        ),
    )
    .map_err(|e| e.to_string())?;
    Ok((test_names, libraries))
}

/// The `DT_NEEDED` entries of a 64-bit little-endian ELF file (what `readelf -d` lists as NEEDED).
fn needed_libraries(path: &Path) -> Result<Vec<String>, String> {
    let bad = |why: &str| format!("{}: {why}", path.display());
    let elf = std::fs::read(path).map_err(|e| bad(&e.to_string()))?;
    let u16_at = |at: usize| elf.get(at..at + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u32_at = |at: usize| elf.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
    let u64_at = |at: usize| elf.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize);
    if elf.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        return Err(bad("not a 64-bit little-endian ELF file"));
    }
    const SHT_DYNAMIC: u32 = 6;
    const DT_NEEDED: usize = 1;
    let (shoff, shentsize, shnum) =
        (u64_at(40).ok_or_else(|| bad("truncated"))?, u16_at(58).unwrap_or(0), u16_at(60).unwrap_or(0));
    let section = |i: usize| {
        let at = shoff + i * shentsize;
        Some((u32_at(at + 4)?, u64_at(at + 24)?, u64_at(at + 32)?, u32_at(at + 40)? as usize))
    };
    let Some((_, dyn_off, dyn_size, strtab)) = (0..shnum).filter_map(section).find(|s| s.0 == SHT_DYNAMIC) else {
        return Ok(Vec::new());
    };
    let (_, str_off, _, _) = section(strtab).ok_or_else(|| bad("no string table for .dynamic"))?;
    let mut needed = Vec::new();
    for at in (dyn_off..dyn_off + dyn_size).step_by(16) {
        let (tag, value) =
            (u64_at(at).ok_or_else(|| bad("truncated"))?, u64_at(at + 8).ok_or_else(|| bad("truncated"))?);
        if tag == 0 {
            break;
        }
        if tag == DT_NEEDED {
            let name = elf.get(str_off + value..).ok_or_else(|| bad("bad NEEDED entry"))?;
            let end = name.iter().position(|&b| b == 0).ok_or_else(|| bad("bad NEEDED entry"))?;
            needed.push(String::from_utf8_lossy(&name[..end]).into_owned());
        }
    }
    Ok(needed)
}

fn run_bundle(bundle: &Path, report: &Path) -> Result<(), String> {
    let status = Command::new("bash")
        .arg(bundle.join("run.sh"))
        .arg(report)
        .status()
        .map_err(|e| format!("cannot run the bundle: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("the GPU run failed; see {}/report.txt", report.display())) }
}

/// Strips debug information from every binary in the bundle: a bundle travels to the GPU machine with
/// a size limit (64 MiB for the whole working tree there), and unstripped test binaries are ten times
/// larger. Symbols stay, so panics still name functions. Skipped, with a note, where `strip` is absent.
fn strip_binaries(out: &Path) -> Result<(), String> {
    if Command::new("strip").arg("--version").stdout(Stdio::null()).status().is_err() {
        eprintln!("xtask: `strip` not found; the bundle keeps its debug information (it may be too large to carry)");
        return Ok(());
    }
    let mut files = Vec::new();
    let mut dirs = vec![out.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))? {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if std::fs::read(&path).map(|b| b.starts_with(b"\x7fELF")).unwrap_or(false) {
                files.push(path);
            }
        }
    }
    let status = Command::new("strip")
        .arg("--strip-debug")
        .args(&files)
        .status()
        .map_err(|e| format!("cannot run strip: {e}"))?;
    if !status.success() {
        return Err("strip failed".into());
    }
    Ok(())
}
