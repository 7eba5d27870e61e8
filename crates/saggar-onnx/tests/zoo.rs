//! The tiny zoo (`tests/zoo/<architecture>/<exporter>/`): each architecture of `benches/zoo` in a
//! configuration of at most 1 MB, exported by PyTorch with its inputs and PyTorch's fp32 outputs
//! (`zoo.py --tiny --export-only`), run on the host backend and compared within rtol 1e-3 and
//! atol 2e-4 x max|output| (the zoo's rule). A model cut into segments (the detectors) runs
//! through a host `Session`, the others through `run_on_host`.
//!
//! A model saggar does not run yet is listed in `tests/zoo/expectations.txt` with the reason
//! (`architecture/exporter  # reason`); the test fails on a listed model that now passes (so the list
//! shrinks as ops land) and on an unlisted one that fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use saggar_device::host::HostBackend;
use saggar_device::{Backend, BackendKind};
use saggar_dispatch::steps::StepCompiler;
use saggar_dispatch::{HostTensor, Session, SessionConfig};
use saggar_onnx::{NamedTensor, OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData, read_tensor_pb, run_on_host};

const RTOL: f64 = 1e-3;
const ATOL_SHARE: f64 = 2e-4;

fn zoo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/zoo")
}

/// Every `architecture/exporter` folder holding a model.
fn models() -> Vec<String> {
    let mut found = Vec::new();
    for arch in std::fs::read_dir(zoo_dir()).unwrap().flatten().filter(|e| e.path().is_dir()) {
        for exporter in std::fs::read_dir(arch.path()).unwrap().flatten() {
            if exporter.path().join("model.onnx").is_file() {
                found.push(format!(
                    "{}/{}",
                    arch.file_name().to_string_lossy(),
                    exporter.file_name().to_string_lossy()
                ));
            }
        }
    }
    found.sort();
    found
}

fn expectations() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(zoo_dir().join("expectations.txt")).unwrap_or_default();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (name, why) = l.split_once('#').unwrap_or_else(|| panic!("`{l}`: expected `arch/exporter  # reason`"));
            (name.trim().to_string(), why.trim().to_string())
        })
        .collect()
}

fn read_named(dir: &Path, prefix: &str) -> Vec<NamedTensor> {
    (0..)
        .map(|k| dir.join(format!("{prefix}_{k}.pb")))
        .take_while(|p| p.exists())
        .map(|p| read_tensor_pb(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect()
}

fn read_set(dir: &Path, prefix: &str) -> Vec<Tensor> {
    read_named(dir, prefix).into_iter().map(|t| t.tensor).collect()
}

/// The largest excess over the tolerance (<= 0 when within it), or why the outputs cannot be compared.
fn excess(got: &Tensor, want: &Tensor) -> Result<f64, String> {
    if got.dims() != want.dims() {
        return Err(format!("shape {:?}, expected {:?}", got.dims(), want.dims()));
    }
    match (got.data(), want.data()) {
        (TensorData::F32(g), TensorData::F32(w)) => {
            let atol = ATOL_SHARE * w.iter().fold(0f64, |m, v| m.max(f64::from(v.abs())));
            Ok(g.iter()
                .zip(w)
                .map(|(&a, &b)| {
                    let (a, b) = (f64::from(a), f64::from(b));
                    if a.is_finite() || !b.is_finite() {
                        (a - b).abs() - (atol + RTOL * b.abs())
                    } else {
                        f64::INFINITY
                    }
                })
                .fold(f64::MIN, f64::max))
        }
        (g, w) if g == w => Ok(0.0),
        _ => Err("element types or integer values differ".into()),
    }
}

/// A model cut into segments (a detector's NonZero and NonMaxSuppression) run through a host
/// session, whose dispatcher checks each segment's outputs against the types it declares.
fn run_segmented(compiler: OnnxCompiler, inputs: &[NamedTensor]) -> Result<Vec<Tensor>, String> {
    let config = SessionConfig::builder().build().map_err(|e| e.to_string())?;
    let device = HostBackend::open(0).map_err(|e| e.to_string())?;
    let session: Session<HostBackend, OnnxCompiler> =
        Session::new(device, Arc::new(compiler), config, &|_| {}).map_err(|e| format!("session: {e}"))?;
    let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.tensor.dims().iter().map(|&d| d as u64).collect()).collect();
    let bytes: Vec<Vec<u8>> = inputs.iter().map(|t| t.tensor.to_le_bytes()).collect();
    let host: Vec<HostTensor<'_>> = inputs
        .iter()
        .zip(dims.iter().zip(&bytes))
        .map(|(t, (dims, data))| HostTensor { name: &t.name, dtype: t.tensor.dtype(), dims, data })
        .collect();
    let outputs = session.run(&host).map_err(|e| format!("run: {e}"))?;
    outputs
        .into_iter()
        .map(|o| {
            let dims = o.dims.iter().map(|&d| d as usize).collect();
            Tensor::from_le_bytes(o.dtype, dims, &o.data).map_err(|e| format!("output `{}`: {e}", o.name))
        })
        .collect()
}

/// `Ok(())` when the model runs on the host backend and matches PyTorch, else why not.
fn check(name: &str) -> Result<(), String> {
    let dir = zoo_dir().join(name);
    let model = OnnxModel::load(dir.join("model.onnx")).map_err(|e| format!("import: {e}"))?;
    let set = dir.join("test_data_set_0");
    let (inputs, expected) = (read_named(&set, "input"), read_set(&set, "output"));
    let compiler = OnnxCompiler::new(model, OnnxOptions::default());
    let got = if compiler.segments().is_some() {
        run_segmented(compiler, &inputs)?
    } else {
        let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.tensor.dims().iter().map(|&d| d as u64).collect()).collect();
        // Lowered for these shapes first: a model whose shapes hang on input values must not pass
        // by having its inputs bound as constants.
        compiler.plan_summary(&dims, BackendKind::Host).map_err(|e| format!("lowering: {e}"))?;
        run_on_host(&compiler, &inputs.iter().map(|t| t.tensor.clone()).collect::<Vec<_>>())
            .map_err(|e| format!("run: {e}"))?
    };
    if got.len() < expected.len() {
        return Err(format!("{} outputs, PyTorch gave {}", got.len(), expected.len()));
    }
    for (k, (g, w)) in got.iter().zip(&expected).enumerate() {
        let worst = excess(g, w).map_err(|e| format!("output {k}: {e}"))?;
        if worst > 0.0 {
            return Err(format!("output {k} exceeds the tolerance by {worst:.3e}"));
        }
    }
    Ok(())
}

#[test]
fn every_tiny_zoo_model_matches_pytorch_on_host_or_is_listed_with_its_reason() {
    let listed = expectations();
    let all = models();
    assert!(all.len() >= 30, "the tiny zoo has {} models", all.len());
    let (mut passed, mut problems) = (0, Vec::new());
    for name in &all {
        let size = std::fs::metadata(zoo_dir().join(name).join("model.onnx")).unwrap().len();
        assert!(size <= 1 << 20, "{name}: {size} bytes, above the tiny zoo's 1 MB");
        match (check(name), listed.get(name)) {
            (Ok(()), None) => passed += 1,
            (Ok(()), Some(_)) => {
                problems.push(format!("{name}: passes now; remove it from tests/zoo/expectations.txt"))
            }
            (Err(_), Some(_)) => {}
            (Err(why), None) => problems.push(format!("{name}: {why}")),
        }
    }
    for name in listed.keys().filter(|n| !all.contains(n)) {
        problems.push(format!("{name}: listed in expectations.txt but not in tests/zoo"));
    }
    println!("tiny zoo on host: {passed} of {} pass, {} listed as not yet supported", all.len(), listed.len());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The transformers of the tiny zoo run their attention as one fused kernel on the GPUs (the
/// pattern's intermediates never reach memory): at least one attention group per layer.
#[test]
fn transformer_attention_fuses_in_the_gpu_plans() {
    let mut counts = Vec::new();
    for name in ["bert_base/torchscript", "gpt2/torchscript", "distilbert/torchscript", "roberta_base/torchscript"] {
        let dir = zoo_dir().join(name);
        let model = OnnxModel::load(dir.join("model.onnx")).unwrap();
        let inputs = read_set(&dir.join("test_data_set_0"), "input");
        let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
        let summary = OnnxCompiler::new(model, OnnxOptions::default()).plan_summary(&dims, BackendKind::Cuda).unwrap();
        counts.push((name, summary.attention_groups));
    }
    println!("{counts:?}");
    assert!(counts.iter().all(|&(_, n)| n >= 1), "attention groups per model: {counts:?}");
}
