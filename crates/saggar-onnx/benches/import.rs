//! Import and lowering of a BERT-style model: decode, check, infer, fold, canonicalise
//! (`OnnxModel`), lay out constants (`OnnxCompiler::new`) and specialise + lower for one shape.
//!
//! Uses `crates/saggar-onnx/models/bert/model.onnx` when present, else a synthetic encoder of the
//! same structure (2 layers, hidden 64), written in memory.

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use saggar_onnx::synthetic::{EncoderConfig, bert_like_encoder};
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions};

fn model_bytes() -> (String, Vec<u8>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/bert/model.onnx");
    match std::fs::read(&path) {
        Ok(bytes) => ("models/bert/model.onnx".into(), bytes),
        Err(_) => ("synthetic encoder".into(), bert_like_encoder(EncoderConfig::default()).to_bytes()),
    }
}

fn import_and_lower(c: &mut Criterion) {
    let (what, bytes) = model_bytes();
    let limits = ImportLimits::default();
    let probe = OnnxModel::from_bytes(&bytes, "bert", &limits).expect("the bench model imports");
    // Batch 8, sequence 128 for every symbolic axis (fixed axes as declared).
    let dims: Vec<Vec<u64>> = probe
        .inputs()
        .iter()
        .map(|s| {
            s.dims().iter().enumerate().map(|(i, d)| d.as_fixed().unwrap_or(if i == 0 { 8 } else { 128 })).collect()
        })
        .collect();
    let mut group = c.benchmark_group("import");
    group.sample_size(20);
    group.bench_function(format!("import+lower {what}"), |b| {
        b.iter(|| {
            let model = OnnxModel::from_bytes(black_box(&bytes), "bert", &limits).expect("imports");
            let compiler = OnnxCompiler::new(model, OnnxOptions::default());
            black_box(compiler.plan_summary(&dims, saggar_device::BackendKind::Host).expect("lowers"))
        })
    });
    group.finish();
}

criterion_group!(benches, import_and_lower);
criterion_main!(benches);
