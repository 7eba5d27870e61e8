//! Import, checking and lowering of arbitrary bytes as an ONNX model: whatever the bytes, each
//! step returns a value or a typed error, never panics and never allocates what the bytes claim.
//! Seeded with the ONNX backend suite's models (`cargo xtask fuzz`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use saggar_device::BackendKind;
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions};

/// Small limits: a fuzzed model may not make the import read or fold much.
fn limits() -> ImportLimits {
    ImportLimits {
        max_file_bytes: 1 << 20,
        max_tensor_elements: 1 << 16,
        max_initializer_bytes: 1 << 20,
        max_external_bytes: 0,
        max_nodes: 256,
        max_subgraph_depth: 4,
        max_fold_elements: 1 << 12,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(model) = OnnxModel::from_bytes(data, "fuzz", &limits()) else { return };
    // Every symbolic extent at 2, fixed ones as declared (capped, so a claimed extent of 2^40 is a
    // typed refusal, not an allocation).
    let dims: Vec<Vec<u64>> = model
        .inputs()
        .iter()
        .map(|spec| spec.dims().iter().map(|d| d.as_fixed().unwrap_or(2).min(1 << 12)).collect())
        .collect();
    let options = OnnxOptions::default().with_max_program_bytes(16 << 20);
    let compiler = OnnxCompiler::new(model, options);
    let _ = compiler.plan_summary(&dims, BackendKind::Host);
    let _ = compiler.gpu_source(&dims);
});
