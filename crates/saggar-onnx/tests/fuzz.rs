//! Byte-mutation fuzzing of small models and the shipped models with a fixed case budget, and the
//! replay of the cargo-fuzz regressions (`tests/fuzz-regressions/`): whatever the bytes, import,
//! compile and one host run return values or typed errors, never panic, and never allocate what the
//! bytes claim (programs are capped at 64 MiB).

use proptest::prelude::*;
use saggar_onnx::builder::ModelBuilder;
use saggar_onnx::ops::Attribute;
use saggar_onnx::synthetic::{EncoderConfig, bert_like_encoder};
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, Tensor, run_on_host};
use saggar_shape::{DType, Dim};

/// The seed models, read once.
static SEEDS: std::sync::LazyLock<Vec<Vec<u8>>> = std::sync::LazyLock::new(seeds);

fn seeds() -> Vec<Vec<u8>> {
    let mut mlp = ModelBuilder::new(13);
    mlp.input("x", DType::F32, &[Dim::symbolic("batch"), Dim::Fixed(4)]);
    mlp.initializer(
        "w",
        &Tensor::new(vec![4, 3], saggar_onnx::TensorData::F32((0..12).map(|i| i as f32 * 0.1).collect())).unwrap(),
    );
    mlp.initializer("shape", &Tensor::from_i64s(vec![0, -1]));
    mlp.node("MatMul", &["x", "w"], &["h"], &[]);
    mlp.node("Relu", &["h"], &["r"], &[]);
    mlp.node("Reshape", &["r", "shape"], &["f"], &[]);
    mlp.node("Transpose", &["f"], &["t"], &[("perm", Attribute::Ints(vec![1, 0]))]);
    mlp.output("t", DType::F32, &[]);
    let tiny =
        EncoderConfig { layers: 1, hidden: 8, heads: 2, intermediate: 8, vocab: 10, max_positions: 8, seq: None };
    let mut seeds = vec![mlp.to_bytes(), bert_like_encoder(tiny).to_bytes()];
    // The shipped models too: flips land in weights as often as in structure, and both must be safe.
    for name in ["bert", "dlrm", "mlp", "cnn"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join(name).join("model.onnx");
        seeds.push(std::fs::read(path).expect("shipped model"));
    }
    seeds
}

/// Imports, compiles and runs `bytes`; any error is fine, a panic fails the test.
fn exercise(bytes: &[u8]) {
    // Op evaluation turns a panic into an error; a fuzz case that reaches one still fails.
    let no_panic = |e: &saggar_onnx::OnnxError| assert!(!e.to_string().contains("panicked"), "{e}");
    let model = match OnnxModel::from_bytes(bytes, "fuzz", &ImportLimits::default()) {
        Ok(m) => m,
        Err(e) => return no_panic(&e),
    };
    let mut inputs = Vec::new();
    for spec in model.inputs() {
        let dims: Vec<usize> =
            spec.dims().iter().map(|d| d.as_fixed().map_or(2, |v| v.min(1 << 20) as usize)).collect();
        if dims.iter().product::<usize>() > 1 << 12 {
            return;
        }
        // Small indices stay in range of the seeds' tables; mutated models may still fail, typed.
        let Ok(t) = Tensor::zeros(spec.dtype(), dims) else { return };
        inputs.push(t);
    }
    let compiler = OnnxCompiler::new(model, OnnxOptions::default().with_max_program_bytes(64 << 20));
    if let Err(e) = run_on_host(&compiler, &inputs) {
        no_panic(&e);
    }
    // The GPU lowering too (no device needed): the cargo-fuzz target's second step.
    let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
    if let Err(e) = compiler.gpu_source(&dims) {
        no_panic(&e);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_models_never_panic(
        seed in 0usize..6,
        flips in prop::collection::vec((any::<prop::sample::Index>(), 0u8..8, any::<bool>()), 1..6),
        cut in prop::option::weighted(0.15, any::<prop::sample::Index>()),
    ) {
        let mut bytes = SEEDS[seed].clone();
        // Single-bit flips keep most of the protobuf framing valid, so mutated models get past the
        // decoder into import, inference and lowering; some bytes are replaced outright.
        for (at, bit, replace) in flips {
            let i = at.index(bytes.len());
            bytes[i] = if replace { bytes[i].wrapping_mul(31).wrapping_add(bit) } else { bytes[i] ^ (1 << bit) };
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len()));
        }
        exercise(&bytes);
    }
}

#[test]
fn the_unmutated_seeds_run() {
    for bytes in SEEDS.iter() {
        let model = OnnxModel::from_bytes(bytes, "seed", &ImportLimits::default()).unwrap();
        let inputs: Vec<Tensor> = model
            .inputs()
            .iter()
            .map(|s| {
                Tensor::zeros(s.dtype(), s.dims().iter().map(|d| d.as_fixed().unwrap_or(2) as usize).collect()).unwrap()
            })
            .collect();
        let compiler = OnnxCompiler::new(model, OnnxOptions::default());
        assert!(run_on_host(&compiler, &inputs).is_ok());
    }
}

/// Every input the cargo-fuzz target once crashed on (`tests/fuzz-regressions/`, kept with its fix)
/// imports, compiles and runs to a value or a typed error.
#[test]
fn the_fuzz_regressions_never_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-regressions");
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "md") {
            continue;
        }
        exercise(&std::fs::read(&path).unwrap());
    }
}
