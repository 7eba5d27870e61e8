//! The checked-in models through a `Session` with graphs on, on any backend: batches 1, 3 and 17 against
//! their expected outputs (PyTorch's) and every batch (64 included, rows repeated from the batch-17
//! data set) against the host backend's run of the same inputs.

#![allow(dead_code)]

use std::sync::Arc;

use saggar_device::Backend;
use saggar_dispatch::{BucketSpec, CaptureWhen, GraphConfig, Session, SessionConfig};
use saggar_onnx::{OnnxCompiler, OnnxModel, OnnxOptions, Tensor, run_on_host};

#[path = "../support/mod.rs"]
mod support;

use support::{MODELS, Request, assert_close, data_sets, model_dir, owned_to_tensor};

#[path = "../seq_common/mod.rs"]
pub mod sequence;

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
            // Twice: the second run replays the captured graph.
            for attempt in 0..2 {
                let outputs = session
                    .run(&request.host())
                    .unwrap_or_else(|e| panic!("{name} batch {batch} run {attempt} on {:?}: {e}", B::KIND));
                for (k, o) in outputs.iter().enumerate() {
                    let got = owned_to_tensor(o);
                    let what = format!("{name} batch {batch} run {attempt} output {k} on {:?}", B::KIND);
                    assert_close(&got, &host[k], &format!("{what} vs host"));
                    if let Some(expected) = &expected {
                        assert_close(&got, &expected[k], &format!("{what} vs expected"));
                    }
                }
            }
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
