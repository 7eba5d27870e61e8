//! The checked-in models through a `Session` with graphs on, on any backend: batches 1, 3 and 17 against
//! their expected outputs (PyTorch's) and every batch (64 included, rows repeated from the batch-17
//! data set) against the host backend's run of the same inputs.

#![allow(dead_code)]

use std::sync::Arc;

use saggar_device::Backend;
use saggar_dispatch::{BucketSpec, CaptureWhen, GraphConfig, Session, SessionConfig};
use saggar_onnx::{ConvEngine, GemmEngine, OnnxCompiler, OnnxModel, OnnxOptions, Tensor, run_on_host};

#[path = "../support/mod.rs"]
mod support;

use support::{MODELS, Request, assert_close, data_sets, model_dir, owned_to_tensor};

#[path = "../seq_common/mod.rs"]
pub mod sequence;

pub mod precision;
pub mod qdq;

#[path = "../while_common/mod.rs"]
pub mod while_loop;

/// Opens device 0 of `B`, or prints why the test is skipped.
pub fn open_or_skip<B: Backend>(test: &str) -> Option<B::Device> {
    match B::enumerate().and_then(|_| B::open(0)) {
        Ok(device) => Some(device),
        Err(e) => {
            eprintln!("SKIPPED {}::{test}: {e}", B::KIND);
            None
        }
    }
}

/// `tensors` (a batch along axis 0) with `batch` rows, row `i` taken from row `i % rows`.
fn tile_rows(tensors: &[Tensor], batch: usize) -> Vec<Tensor> {
    tensors
        .iter()
        .map(|t| {
            let rows = t.dims()[0];
            let bytes = t.to_le_bytes();
            let row = bytes.len() / rows;
            let data: Vec<u8> =
                (0..batch).flat_map(|i| bytes[(i % rows) * row..(i % rows + 1) * row].to_vec()).collect();
            let mut dims = t.dims().to_vec();
            dims[0] = batch;
            Tensor::from_le_bytes(t.dtype(), dims, &data).expect("tiled tensor")
        })
        .collect()
}

/// Runs the four models on `device` through sessions with eagerly captured graphs.
pub fn check_models<B: Backend>(device: B::Device) {
    for name in MODELS {
        let dir = model_dir(name);
        let model = OnnxModel::load(dir.join("model.onnx")).unwrap();
        let compiler = Arc::new(OnnxCompiler::new(model.clone(), OnnxOptions::default()));
        let graphs = GraphConfig::default().with_enabled(true).with_capture(CaptureWhen::Lazy);
        let config =
            SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 64 }).graphs(graphs).build().unwrap();
        let session: Session<B, OnnxCompiler> = Session::new(device.clone(), compiler.clone(), config, &|_| {})
            .unwrap_or_else(|e| panic!("{name}: session on {:?}: {e}", B::KIND));
        let names: Vec<&str> = model.inputs().iter().map(|s| s.name()).collect();
        let sets = data_sets(&dir);
        let mut cases: Vec<(usize, Vec<Tensor>, Option<Vec<Tensor>>)> = Vec::new();
        for (inputs, expected) in &sets {
            cases.push((inputs[0].dims()[0], inputs.clone(), Some(expected.clone())));
        }
        let widest = sets.iter().map(|(i, _)| i.clone()).max_by_key(|i| i[0].dims()[0]).expect("a data set");
        cases.push((64, tile_rows(&widest, 64), None));
        for (batch, inputs, expected) in cases {
            let request = Request::new(&names, &inputs);
            let host = run_on_host(&compiler, &inputs).unwrap_or_else(|e| panic!("{name} batch {batch} on host: {e}"));
            run_twice(&session, &request, &format!("{name} batch {batch}"), |attempt, k, got| {
                let what = format!("{name} batch {batch} run {attempt} output {k} on {:?}", B::KIND);
                assert_close(&got, &host[k], &format!("{what} vs host"));
                if let Some(expected) = &expected {
                    assert_close(&got, &expected[k], &format!("{what} vs expected"));
                }
            });
        }
        let stats = session.stats();
        println!(
            "{name} on {:?}: {} compiles, {} captures, {} replays, {} eager runs",
            B::KIND,
            stats.compiles,
            stats.captures,
            stats.replays,
            stats.eager_runs
        );
    }
}

/// Runs `request` on `session` twice (the second run replays the graph the first captured) and hands
/// every output to `check(attempt, output index, output)`; `what` names the request in a failure.
fn run_twice<B: Backend>(
    session: &Session<B, OnnxCompiler>,
    request: &Request,
    what: &str,
    mut check: impl FnMut(usize, usize, Tensor),
) {
    for attempt in 0..2 {
        let outputs =
            session.run(&request.host()).unwrap_or_else(|e| panic!("{what} run {attempt} on {:?}: {e}", B::KIND));
        for (k, o) in outputs.iter().enumerate() {
            check(attempt, k, owned_to_tensor(o));
        }
    }
}

/// A session over `compiler` with buckets up to 64 and graphs captured lazily.
fn session<B: Backend>(device: &B::Device, compiler: Arc<OnnxCompiler>, what: &str) -> Session<B, OnnxCompiler> {
    let graphs = GraphConfig::default().with_enabled(true).with_capture(CaptureWhen::Lazy);
    let config = SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 64 }).graphs(graphs).build().unwrap();
    Session::new(device.clone(), compiler, config, &|_| {})
        .unwrap_or_else(|e| panic!("{what}: session on {:?}: {e}", B::KIND))
}

/// Fusion on the device: the checked-in BERT and synthetic attention blocks (additive mask, one
/// batch row masked entirely, the NaN guard; head sizes 32 and 80, many key tiles and ragged last
/// tiles, tiles of 16 and 64 query rows) run through sessions unfused and fused with each attention kernel (auto, rows, tiled),
/// each against the host backend's unfused run; every session's buckets share one compile of the
/// generated source. Prints a PASS line per model and option.
pub fn check_fusion<B: Backend>(device: B::Device) {
    use saggar_onnx::synthetic::{AttentionConfig, attention_block};
    use saggar_onnx::{AttentionKernel, ImportLimits, TensorData};
    let bert = OnnxModel::load(model_dir("bert").join("model.onnx")).unwrap();
    let bert_inputs = data_sets(&model_dir("bert")).swap_remove(0).0;
    let block = |cfg: AttentionConfig, batch: usize, seq: usize| {
        let model =
            OnnxModel::from_bytes(&attention_block(cfg).to_bytes(), "attention", &ImportLimits::default()).unwrap();
        let h = cfg.heads * cfg.head_dim;
        let x = (0..batch * seq * h).map(|i| ((i * 7919 % 211) as f32 / 105.0) - 1.0).collect();
        let mask = (0..batch * seq)
            .map(|i| {
                // The last batch row masked entirely, row r masked from 7r keys before the end.
                let (row, key) = (i / seq, i % seq);
                if row == batch - 1 || key + 7 * row >= seq { f32::NEG_INFINITY } else { 0.0 }
            })
            .collect();
        let inputs = vec![
            Tensor::new(vec![batch, seq, h], TensorData::F32(x)).unwrap(),
            Tensor::new(vec![batch, 1, 1, seq], TensorData::F32(mask)).unwrap(),
        ];
        (model, inputs)
    };
    let base = AttentionConfig { heads: 4, head_dim: 32, ..AttentionConfig::default() };
    let (block32, inputs32) = block(base, 3, 300);
    let (block80, inputs80) = block(AttentionConfig { heads: 2, head_dim: 80, ..base }, 2, 45);
    // 256 tiles of 64 query rows: the largest tile.
    let (wide, wide_inputs) = block(AttentionConfig { heads: 4, ..base }, 64, 64);
    // A batch-bucketed model: every bucket compiled at session creation from one source compile.
    let mlp = Arc::new(OnnxCompiler::new(
        OnnxModel::load(model_dir("mlp").join("model.onnx")).unwrap(),
        OnnxOptions::default(),
    ));
    let buckets = session::<B>(&device, mlp.clone(), "mlp");
    let gpu = usize::from(B::KIND != saggar_device::BackendKind::Host);
    assert_eq!(
        mlp.gpu_source_compiles(),
        gpu,
        "mlp: one source compile for {} bucket compiles",
        buckets.stats().compiles
    );
    println!(
        "PASS {:?} mlp: {} source compile(s) for {} bucket compiles",
        B::KIND,
        mlp.gpu_source_compiles(),
        buckets.stats().compiles
    );
    let fused = OnnxOptions::default();
    let variants = [
        ("fused, auto attention", fused.clone()),
        ("fused, row attention", fused.clone().with_attention(AttentionKernel::Rows)),
        ("fused, tiled attention", fused.clone().with_attention(AttentionKernel::Tiled)),
        ("unfused", fused.clone().with_fusion(false)),
    ];
    for (name, model, inputs) in [
        ("bert", bert, bert_inputs),
        ("attention32", block32, inputs32),
        ("attention80", block80, inputs80),
        ("attention32 batch 64", wide, wide_inputs),
    ] {
        let unfused = Arc::new(OnnxCompiler::new(model.clone(), OnnxOptions::default().with_fusion(false)));
        let want = run_on_host(&unfused, &inputs).unwrap_or_else(|e| panic!("{name} on host: {e}"));
        let names: Vec<&str> = model.inputs().iter().map(|s| s.name()).collect();
        let request = Request::new(&names, &inputs);
        for (label, options) in &variants {
            let compiler = Arc::new(OnnxCompiler::new(model.clone(), options.clone()));
            let session = session::<B>(&device, compiler.clone(), name);
            run_twice(&session, &request, &format!("{name} {label}"), |attempt, k, got| {
                assert_close(&got, &want[k], &format!("{name} {label} run {attempt} output {k} on {:?}", B::KIND));
            });
            let compiles = compiler.gpu_source_compiles();
            assert_eq!(compiles, gpu, "{name} {label}: compiles of the one generated source");
            println!(
                "PASS {:?} {name} {label}: matches the host's unfused run; {compiles} source compile(s) for {} session compiles",
                B::KIND,
                session.stats().compiles
            );
        }
    }
}

/// A session of `model` on `device` with `options`, one bucket per power of two up to 64, graphs
/// captured on first use.
fn blas_session<B: Backend>(
    device: &B::Device,
    model: &OnnxModel,
    options: OnnxOptions,
) -> Result<Session<B, OnnxCompiler>, saggar_dispatch::DispatchError> {
    let graphs = GraphConfig::default().with_enabled(true).with_capture(CaptureWhen::Lazy);
    let config = SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 64 }).graphs(graphs).build().unwrap();
    Session::new(device.clone(), Arc::new(OnnxCompiler::new(model.clone(), options)), config, &|_| {})
}

/// Largest absolute difference of two `f32` tensors.
fn max_error(got: &Tensor, want: &Tensor) -> f32 {
    match (got.data(), want.data()) {
        (saggar_onnx::TensorData::F32(g), saggar_onnx::TensorData::F32(w)) => {
            g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max)
        }
        _ => 0.0,
    }
}

/// Checked-in model `name` and the inputs of its data set of the largest batch.
fn with_largest_set(name: &str) -> (OnnxModel, Vec<Tensor>) {
    let dir = model_dir(name);
    let model = OnnxModel::load(dir.join("model.onnx")).unwrap();
    let (inputs, _) = data_sets(&dir).into_iter().max_by_key(|(i, _)| i[0].dims()[0]).expect("a data set");
    (model, inputs)
}

/// Every model with its GEMMs through BLAS-Lt and through the generated kernel, graphs captured and
/// replayed, against the host backend (whose plan runs the same BLAS steps through the host GEMM);
/// prints one PASS line per model and engine with the largest error.
pub fn check_blas_against_generated<B: Backend>(device: B::Device) {
    for name in MODELS {
        let (model, inputs) = with_largest_set(name);
        let names: Vec<&str> = model.inputs().iter().map(|s| s.name()).collect();
        let request = Request::new(&names, &inputs);
        let host = run_on_host(&OnnxCompiler::new(model.clone(), OnnxOptions::default()), &inputs).unwrap();
        for engine in [GemmEngine::BlasLt, GemmEngine::Generated] {
            let options = OnnxOptions::default().with_gemm(engine);
            let s = blas_session::<B>(&device, &model, options)
                .unwrap_or_else(|e| panic!("FAIL {name} {} on {:?}: session: {e}", engine.name(), B::KIND));
            let mut worst = 0f32;
            for run in 0..2 {
                let outputs = s.run(&request.host()).unwrap_or_else(|e| panic!("FAIL {name} run {run}: {e}"));
                for (k, o) in outputs.iter().enumerate() {
                    let got = owned_to_tensor(o);
                    assert_close(&got, &host[k], &format!("FAIL {name} {} run {run} output {k}", engine.name()));
                    worst = worst.max(max_error(&got, &host[k]));
                }
            }
            let stats = s.stats();
            assert!(stats.replays > 0, "FAIL {name} {}: the second run replays a graph", engine.name());
            println!(
                "PASS {name} gemm={} on {:?}: max abs error vs host {worst:.3e}, {} captures, {} replays",
                engine.name(),
                B::KIND,
                stats.captures,
                stats.replays
            );
        }
    }
}

/// The CNN with its convolutions as im2col plus BLAS-Lt matmuls and as the direct kernel, graphs
/// captured and replayed, at batch 1 and the largest data set's batch, against the host backend's run
/// with the direct kernel; prints one PASS line per engine and batch with the largest error.
pub fn check_conv_engines<B: Backend>(device: B::Device) {
    let dir = model_dir("cnn");
    let model = OnnxModel::load(dir.join("model.onnx")).unwrap();
    let direct = OnnxOptions::default().with_conv(ConvEngine::Direct);
    let sets = data_sets(&dir);
    let small = sets.iter().min_by_key(|(i, _)| i[0].dims()[0]).expect("a data set");
    let large = sets.iter().max_by_key(|(i, _)| i[0].dims()[0]).expect("a data set");
    for (inputs, _) in [small, large] {
        let batch = inputs[0].dims()[0];
        let names: Vec<&str> = model.inputs().iter().map(|s| s.name()).collect();
        let request = Request::new(&names, inputs);
        let host = run_on_host(&OnnxCompiler::new(model.clone(), direct.clone()), inputs).unwrap();
        for engine in ConvEngine::ALL {
            let s = blas_session::<B>(&device, &model, OnnxOptions::default().with_conv(engine))
                .unwrap_or_else(|e| panic!("FAIL cnn conv={} on {:?}: session: {e}", engine.name(), B::KIND));
            let mut worst = 0f32;
            for run in 0..2 {
                let outputs = s.run(&request.host()).unwrap_or_else(|e| panic!("FAIL cnn conv run {run}: {e}"));
                for (k, o) in outputs.iter().enumerate() {
                    let got = owned_to_tensor(o);
                    let what = format!("FAIL cnn conv={} batch {batch} run {run} output {k}", engine.name());
                    assert_close(&got, &host[k], &what);
                    worst = worst.max(max_error(&got, &host[k]));
                }
            }
            println!(
                "PASS cnn conv={} batch {batch} on {:?}: max abs error vs the host's direct conv {worst:.3e}",
                engine.name(),
                B::KIND
            );
        }
    }
}

/// The full error chain, for matching on what a wrapped error says.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A BLAS-Lt library that cannot be loaded refuses the session at creation (precompile loads every
/// bucket), or the first request if programs load lazily, with an error naming the library and the
/// path tried.
pub fn check_missing_blas_library_is_refused<B: Backend>(device: B::Device) {
    let dir = model_dir("mlp");
    let model = OnnxModel::load(dir.join("model.onnx")).unwrap();
    let path = "/nonexistent/saggar-gpu-test/libblaslt-missing.so";
    let options = OnnxOptions::default().with_blas_library(path);
    let text = match blas_session::<B>(&device, &model, options) {
        Err(e) => chain(&e),
        Ok(s) => {
            let (inputs, _) = data_sets(&dir).into_iter().next().expect("a data set");
            let names: Vec<&str> = model.inputs().iter().map(|s| s.name()).collect();
            let request = Request::new(&names, &inputs);
            match s.run(&request.host()) {
                Ok(_) => panic!("FAIL a session with a missing BLAS library ran on {:?}", B::KIND),
                Err(e) => chain(&e),
            }
        }
    };
    let library = if B::KIND == saggar_device::BackendKind::Hip { "hipBLASLt" } else { "cuBLASLt" };
    assert!(text.contains(path) && text.contains(library), "FAIL the error does not name both: {text}");
    println!("PASS missing BLAS library refused on {:?}: {text}", B::KIND);
}

/// Half-precision models on the device: f16 and bf16 exports (`synthetic::half_precision`) of a
/// BERT-style encoder and of the checked-in MLP through sessions with graphs on, at batches 1 and 3,
/// against the host backend's run of the same model: both compute in f32 between the casts at the
/// inputs and outputs, so the outputs agree within two units of the half precision. Prints a PASS
/// line per model and precision.
pub fn check_half_models<B: Backend>(device: B::Device) {
    use saggar_onnx::synthetic::{EncoderConfig, bert_like_encoder, half_precision};
    use saggar_onnx::{ImportLimits, TensorData};
    use saggar_shape::DType;
    let encoder = EncoderConfig {
        layers: 2,
        hidden: 64,
        heads: 2,
        intermediate: 128,
        vocab: 100,
        max_positions: 32,
        seq: Some(16),
    };
    let mlp = std::fs::read(model_dir("mlp").join("model.onnx")).unwrap();
    let mlp_input = data_sets(&model_dir("mlp")).swap_remove(0).0.swap_remove(0);
    for dtype in [DType::F16, DType::BF16] {
        for batch in [1usize, 3] {
            let ids = (0..batch * 16).map(|i| (i * 7 % 100) as i64).collect();
            let mask = (0..batch * 16).map(|i| i64::from(i % 16 < 16 - i / 16)).collect();
            let encoder_inputs = vec![
                Tensor::new(vec![batch, 16], TensorData::I64(ids)).unwrap(),
                Tensor::new(vec![batch, 16], TensorData::I64(mask)).unwrap(),
            ];
            let features = mlp_input.dims()[1];
            let rows = mlp_input.to_f32s().unwrap().into_iter().cycle().take(batch * features).collect();
            let mlp_inputs =
                vec![Tensor::new(vec![batch, features], TensorData::F32(rows)).unwrap().narrowed(dtype).unwrap()];
            for (name, bytes, inputs) in
                [("encoder", bert_like_encoder(encoder).to_bytes(), encoder_inputs), ("mlp", mlp.clone(), mlp_inputs)]
            {
                let half = half_precision(&bytes, dtype).unwrap();
                let model = OnnxModel::from_bytes(&half, name, &ImportLimits::default()).unwrap();
                let compiler = Arc::new(OnnxCompiler::new(model.clone(), OnnxOptions::default()));
                let want = run_on_host(&compiler, &inputs).unwrap_or_else(|e| panic!("{name} {dtype} on host: {e}"));
                let names: Vec<&str> = model.inputs().iter().map(|s| s.name()).collect();
                let request = Request::new(&names, &inputs);
                let session = session::<B>(&device, compiler, name);
                let unit = if dtype == DType::F16 { 1.0 / 1024.0 } else { 1.0 / 128.0 };
                run_twice(&session, &request, &format!("{name} {dtype} batch {batch}"), |_, k, got| {
                    assert_eq!(got.dtype(), dtype, "{name} output {k}");
                    for (i, (a, b)) in got.to_f32s().unwrap().iter().zip(want[k].to_f32s().unwrap()).enumerate() {
                        assert!(
                            (a - b).abs() <= 2.0 * unit * b.abs().max(1e-3),
                            "{name} {dtype} batch {batch} output {k} element {i} on {:?}: {a} vs {b}",
                            B::KIND
                        );
                    }
                });
                println!(
                    "PASS {:?} {name} {dtype} batch {batch}: matches the host within two units of {dtype}",
                    B::KIND
                );
            }
        }
    }
}
