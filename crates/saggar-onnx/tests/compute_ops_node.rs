//! Dev-time check of the compute op families (linalg, conv, pool, norm, reduce) against the ONNX
//! backend suite's node tests, through the compiled host program. The suite-wide runner is
//! `cargo xtask onnx-tests`; this test only reads an already extracted suite named by
//! `SAGGAR_ONNX_BACKEND_NODE_DIR` (the `onnx/backend/test/data/node` folder).
//!
//! With `SAGGAR_ONNX_ADAPT=1` each model is adapted before import, to check the kernels on cases the
//! importer refuses for reasons outside these families: an opset-22 import is lowered to 21 (opset
//! 22 only added element types to these ops) and integer graph inputs (the `axes` of reductions)
//! become initializers, since a compiled program's shapes cannot depend on run-time data.

use std::path::Path;

use prost::Message as _;
use saggar_onnx::proto::ModelProto;
use saggar_onnx::tensor_pb::tensor_to_proto;
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData, read_tensor_pb};
use saggar_shape::DType;

/// Why a node test of these families may fail for a reason outside them (the importer's opset and
/// element-type range, ops of other families in `_expanded` tests, data-dependent shapes) or a
/// refusal they declare (training mode). Any other failure, a wrong
/// value above all, fails the test.
const KNOWN_REASONS: &[&str] = &[
    "opset 22 of domain",
    "it depends on run-time data",
    "is not supported (f32, i64, i32, bool are)",
    "is not in the declared op set",
    "attribute `to` = 11 is not supported",
    "attribute `training_mode` = 1 is not supported",
];

/// Node-test name prefixes of the compute families.
const PREFIXES: &[&str] = &[
    "test_matmul",
    "test_gemm",
    "test_conv_",
    "test_basic_conv",
    "test_maxpool",
    "test_averagepool",
    "test_globalaveragepool",
    "test_globalmaxpool",
    "test_softmax",
    "test_logsoftmax",
    "test_layer_normalization",
    "test_instancenorm",
    "test_reduce_",
    "test_batchnorm",
    "test_lrn",
    "test_argmax",
    "test_argmin",
];

fn compare(got: &Tensor, want: &Tensor) -> Result<(), String> {
    if got.dims() != want.dims() {
        return Err(format!("shape {:?}, expected {:?}", got.dims(), want.dims()));
    }
    match (got.data(), want.data()) {
        (TensorData::F32(g), TensorData::F32(w)) => {
            for (i, (g, w)) in g.iter().zip(w).enumerate() {
                let same = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= 1e-7 + 1e-3 * w.abs();
                if !same {
                    return Err(format!("element {i}: {g} vs {w}"));
                }
            }
            Ok(())
        }
        (g, w) if g == w => Ok(()),
        (g, w) => Err(format!("{g:?} vs {w:?}")),
    }
}

/// The adapted model and the inputs still fed at run time.
fn adapt(dir: &Path, inputs: Vec<Tensor>) -> Result<(OnnxModel, Vec<Tensor>), String> {
    let bytes = std::fs::read(dir.join("model.onnx")).map_err(|e| e.to_string())?;
    let mut proto = ModelProto::decode(bytes.as_slice()).map_err(|e| e.to_string())?;
    for opset in &mut proto.opset_import {
        if (opset.domain.is_empty() || opset.domain == "ai.onnx") && opset.version == 22 {
            opset.version = 21;
        }
    }
    let graph = proto.graph.as_mut().ok_or("no graph")?;
    let mut kept = Vec::new();
    let mut fed = Vec::new();
    for (info, t) in std::mem::take(&mut graph.input).into_iter().zip(inputs) {
        if t.dtype() == DType::I64 {
            graph.initializer.push(tensor_to_proto(&info.name, &t));
        } else {
            kept.push(info);
            fed.push(t);
        }
    }
    graph.input = kept;
    let model = OnnxModel::from_bytes(&proto.encode_to_vec(), "adapted", &ImportLimits::default())
        .map_err(|e| format!("import: {e}"))?;
    Ok((model, fed))
}

fn run_case(dir: &Path, adapted: bool) -> Result<(), String> {
    let mut sets: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("test_data_set")))
        .collect();
    sets.sort();
    for set in sets {
        let read = |prefix: &str| -> Result<Vec<Tensor>, String> {
            (0..)
                .map(|i| set.join(format!("{prefix}_{i}.pb")))
                .take_while(|p| p.exists())
                .map(|p| read_tensor_pb(&p).map(|t| t.tensor).map_err(|e| format!("{}: {e}", p.display())))
                .collect()
        };
        let (inputs, outputs) = (read("input")?, read("output")?);
        let (model, inputs) = if adapted {
            adapt(dir, inputs)?
        } else {
            (OnnxModel::load(dir.join("model.onnx")).map_err(|e| format!("import: {e}"))?, inputs)
        };
        let compiler = OnnxCompiler::new(model, OnnxOptions::default());
        let got = saggar_onnx::run_on_host(&compiler, &inputs).map_err(|e| format!("run: {e}"))?;
        for (i, (g, w)) in got.iter().zip(&outputs).enumerate() {
            compare(g, w).map_err(|e| format!("output {i}: {e}"))?;
        }
    }
    Ok(())
}

#[test]
fn compute_family_node_tests() {
    let Some(root) = std::env::var_os("SAGGAR_ONNX_BACKEND_NODE_DIR") else {
        eprintln!("skipped: SAGGAR_ONNX_BACKEND_NODE_DIR does not name an extracted node test folder");
        return;
    };
    let mut cases: Vec<_> = std::fs::read_dir(&root)
        .expect("the node test folder is readable")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| PREFIXES.iter().any(|pre| n.to_string_lossy().starts_with(pre))))
        .collect();
    cases.sort();
    let adapted = std::env::var_os("SAGGAR_ONNX_ADAPT").is_some_and(|v| v == "1");
    let (mut passed, mut failed) = (0, Vec::new());
    for case in &cases {
        let name = case.file_name().unwrap_or_default().to_string_lossy().into_owned();
        match std::panic::catch_unwind(|| run_case(case, adapted)) {
            Ok(Ok(())) => passed += 1,
            Ok(Err(e)) => failed.push(format!("{name}: {e}")),
            Err(_) => failed.push(format!("{name}: panicked")),
        }
    }
    eprintln!("{passed} of {} passed", cases.len());
    for f in &failed {
        eprintln!("FAIL {f}");
    }
    let unexplained: Vec<&String> = failed.iter().filter(|f| !KNOWN_REASONS.iter().any(|r| f.contains(r))).collect();
    assert!(unexplained.is_empty(), "failures without a known reason: {unexplained:#?}");
}
