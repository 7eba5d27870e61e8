//! The GPU plans of models cut into segments (the tiny zoo's detectors: NonZero, TopK and
//! NonMaxSuppression in their bounded forms, the If around NonMaxSuppression selected per computed
//! condition), each segment's CUDA plan compiled for the CPU and run in turn, its value inputs bound
//! from what the segments before it computed, as a session binds them.

use std::path::Path;

use super::{assert_close, emulate};
use crate::compiler::run::run_segments;
use crate::error::OnnxError;
use crate::{OnnxCompiler, OnnxModel, OnnxOptions, Tensor, read_tensor_pb, run_on_host};

/// Runs the segmented `compiler` on `inputs`, every segment through its emulated CUDA plan; `None`
/// without g++.
fn run_emulated_segments(compiler: &OnnxCompiler, inputs: &[Tensor], dir: &Path) -> Option<Vec<Tensor>> {
    let (mut k, mut skipped) = (0, false);
    let outputs = run_segments(compiler, inputs, |segment, ins| {
        let sub = dir.join(format!("segment{k}"));
        k += 1;
        std::fs::create_dir_all(&sub).unwrap();
        let values: Vec<(usize, Vec<u8>)> = segment.value_inputs().iter().map(|&i| (i, ins[i].to_le_bytes())).collect();
        let Some((bytes, dims)) = emulate(segment, ins, &values, &sub) else {
            skipped = true;
            return Err(OnnxError::Graph { reason: "no g++".into() });
        };
        let specs = segment.onnx_model().outputs();
        Ok(specs
            .iter()
            .zip(bytes.iter().zip(dims))
            .map(|(spec, (b, d))| {
                Tensor::from_le_bytes(spec.dtype(), d.iter().map(|&e| e as usize).collect(), b).unwrap()
            })
            .collect())
    });
    if skipped {
        return None;
    }
    Some(outputs.unwrap())
}

#[test]
fn the_gpu_plans_of_the_tiny_detectors_match_the_host_when_run_on_the_cpu() {
    let zoo = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/zoo");
    for name in ["ssdlite320_mobilenet_v3_large", "retinanet_resnet50_fpn", "fasterrcnn_resnet50_fpn"] {
        let dir = zoo.join(name).join("torchscript");
        let compiler = OnnxCompiler::new(OnnxModel::load(dir.join("model.onnx")).unwrap(), OnnxOptions::default());
        let input = read_tensor_pb(&dir.join("test_data_set_0/input_0.pb")).unwrap().tensor;
        let want = run_on_host(&compiler, std::slice::from_ref(&input)).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let Some(got) = run_emulated_segments(&compiler, std::slice::from_ref(&input), tmp.path()) else { return };
        assert_eq!(got.len(), want.len(), "{name}");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.dims(), w.dims(), "{name} output {k}");
            assert_close(&g.to_le_bytes(), w, &format!("{name} output {k}"));
        }
    }
}
