//! The host's work per batch in `saggar serve`, apart from the model's compute: a BERT-sized batch
//! (32 requests of one row, `input_ids` [1,128] i64 each, `last_hidden_state` [32,128,768] f32 =
//! 12.6 MB out) merged, run, split back per request and encoded as responses.
//!
//! The model is an embedding lookup (`Gather` of an [8,768] table by `input_ids`), built with
//! saggar-onnx's `ModelBuilder`, served on the host backend with `max_batch_size: 32` and
//! `preferred_batch_size: [32]`, so each round of 32 concurrent requests is one batch. Figures:
//!
//! - `session_run_ms`: one staged run of the batch on a session of its own (`Session::request(32)`,
//!   outputs not read): the model's compute and the backend's copies, the floor below the rest.
//! - `*_batch_compute_ms`: the server's compute span per batch of that phase
//!   (`nv_inference_compute_infer_duration_us` over requests): merge, run, split.
//! - `grpc_round_ms`: 32 concurrent `ModelInfer` calls handed to `saggar_serve::grpc::handle`
//!   in-process (decode, queue, batch, encode; no socket), from the first call to the last encoded
//!   response body.
//! - `http_round_ms`: 32 concurrent binary-data `POST .../infer` over loopback HTTP/1.1 (the
//!   socket's copies included), outputs asked for as binary data.
//!
//! Each `*_host_ms` is the round's p50 less `session_run_ms`. Prints one JSON line (p50 over
//! rounds, and the fastest round).
//! Flags: `--rounds N` (default 20).

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use prost::Message;
use saggar_device::Backend;
use saggar_device::host::HostBackend;
use saggar_dispatch::{BucketSpec, Session, SessionConfig};
use saggar_onnx::builder::ModelBuilder;
use saggar_onnx::ops::Attribute;
use saggar_onnx::{OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData};
use saggar_serve::grpc::proto::{InferInputTensor, ModelInferRequest, ModelInferResponse};
use saggar_shape::{DType, Dim};

const BATCH: usize = 32;
const SEQ: usize = 128;
const HIDDEN: usize = 768;
const VOCAB: usize = 8;

fn model_bytes() -> Vec<u8> {
    let table: Vec<f32> = (0..VOCAB * HIDDEN).map(|i| i as f32 * 0.5).collect();
    let mut b = ModelBuilder::new(13);
    b.input("input_ids", DType::I64, &[Dim::symbolic("batch"), Dim::Fixed(SEQ as u64)])
        .output(
            "last_hidden_state",
            DType::F32,
            &[Dim::symbolic("batch"), Dim::Fixed(SEQ as u64), Dim::Fixed(HIDDEN as u64)],
        )
        .initializer("table", &Tensor::new(vec![VOCAB, HIDDEN], TensorData::F32(table)).expect("table"))
        .node("Gather", &["table", "input_ids"], &["last_hidden_state"], &[("axis", Attribute::Int(0))]);
    b.to_bytes()
}

fn ids(n: usize) -> Vec<u8> {
    (0..SEQ).flat_map(|i| (((i + n) % VOCAB) as i64).to_le_bytes()).collect()
}

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One staged run of a batch of 32 on a session of its own, outputs not read.
fn session_run(model: &std::path::Path, rounds: usize) -> f64 {
    let compiler = Arc::new(OnnxCompiler::new(OnnxModel::load(model).expect("model"), OnnxOptions::default()));
    let config = SessionConfig::builder().buckets(BucketSpec::List(vec![BATCH as u64])).build().expect("config");
    let session =
        Session::builder(HostBackend::open(0).expect("host"), compiler).config(config).build().expect("session");
    let mut request = session.request(BATCH as u64).expect("request");
    let input = request.input_bytes_mut(0).expect("input");
    for (r, row) in input.chunks_exact_mut(SEQ * 8).enumerate() {
        row.copy_from_slice(&ids(r));
    }
    let mut times = Vec::new();
    for _ in 0..rounds + 2 {
        let t = Instant::now();
        request.run().expect("run");
        times.push(ms(t.elapsed()));
    }
    p50(times.split_off(2))
}

fn grpc_body(n: usize) -> Bytes {
    let request = ModelInferRequest {
        model_name: "embed".into(),
        id: format!("r{n}"),
        inputs: vec![InferInputTensor {
            name: "input_ids".into(),
            datatype: "INT64".into(),
            shape: vec![1, SEQ as i64],
            ..Default::default()
        }],
        raw_input_contents: vec![ids(n)],
        ..Default::default()
    };
    let message = request.encode_to_vec();
    let mut framed = vec![0u8];
    framed.extend((message.len() as u32).to_be_bytes());
    framed.extend(message);
    Bytes::from(framed)
}

async fn grpc_round(state: &Arc<saggar_serve::State>) -> Duration {
    let bodies: Vec<Bytes> = (0..BATCH).map(grpc_body).collect();
    let started = Instant::now();
    let calls = bodies.into_iter().map(|body| {
        let state = state.clone();
        tokio::spawn(async move {
            let request = http::Request::builder()
                .method("POST")
                .uri("/inference.GRPCInferenceService/ModelInfer")
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(Full::new(body))
                .expect("request");
            let response = saggar_serve::grpc::handle(state, request).await;
            response.into_body().collect().await.expect("body").to_bytes()
        })
    });
    let bodies: Vec<Bytes> = futures_join(calls.collect()).await;
    let elapsed = started.elapsed();
    for (n, body) in bodies.iter().enumerate() {
        let response = ModelInferResponse::decode(&body[5..]).unwrap_or_else(|e| panic!("{e}: {} bytes", body.len()));
        assert_eq!(response.id, format!("r{n}"));
        assert_eq!(response.raw_output_contents[0].len(), SEQ * HIDDEN * 4);
    }
    elapsed
}

async fn futures_join<T: Send + 'static>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}

fn http_round(addr: std::net::SocketAddr) -> Duration {
    let started = Instant::now();
    let threads: Vec<_> = (0..BATCH)
        .map(|n| {
            std::thread::spawn(move || {
                let head = format!(
                    r#"{{"id":"r{n}","inputs":[{{"name":"input_ids","shape":[1,{SEQ}],"datatype":"INT64","parameters":{{"binary_data_size":{}}}}}],"outputs":[{{"name":"last_hidden_state","parameters":{{"binary_data":true}}}}]}}"#,
                    SEQ * 8
                );
                let body = [head.as_bytes(), &ids(n)].concat();
                let length = head.len().to_string();
                let reply = common::http(
                    addr,
                    "POST",
                    "/v2/models/embed/infer",
                    &body,
                    &[("Inference-Header-Content-Length", &length), ("Content-Type", "application/octet-stream")],
                );
                assert_eq!(reply.status, 200, "{}", String::from_utf8_lossy(&reply.body));
                reply.body.len()
            })
        })
        .collect();
    for t in threads {
        assert!(t.join().expect("client") > SEQ * HIDDEN * 4);
    }
    started.elapsed()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .map_or(20, |v| v.parse().expect("--rounds N"));
    let repo = tempfile::tempdir().expect("temp dir");
    let cache = tempfile::tempdir().expect("temp dir");
    let version = repo.path().join("embed").join("1");
    std::fs::create_dir_all(&version).expect("mkdir");
    std::fs::write(version.join("model.onnx"), model_bytes()).expect("write model");
    std::fs::write(
        repo.path().join("embed").join("config.pbtxt"),
        format!(
            "max_batch_size: {BATCH}\ndynamic_batching {{ preferred_batch_size: [ {BATCH} ] \
             max_queue_delay_microseconds: 2000000 }}\ninstance_group [ {{ count: 1 }} ]\n"
        ),
    )
    .expect("write config");

    let session_run_ms = session_run(&version.join("model.onnx"), rounds);
    let server = common::start(repo.path(), cache.path(), |_| {});
    let state = server.state().clone();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    // The server's compute span per batch, and the batches, over one phase's rounds.
    let counters = || {
        let metric = |name: &str| common::metric(server.metrics, name, "embed");
        [
            metric("nv_inference_compute_infer_duration_us"),
            metric("nv_inference_request_success"),
            metric("nv_inference_exec_count"),
        ]
    };
    let compute_ms = |before: [f64; 3], after: [f64; 3]| {
        let (requests, batches) = (after[1] - before[1], after[2] - before[2]);
        assert_eq!(batches * BATCH as f64, requests, "every round ran as one batch of {BATCH}");
        (after[0] - before[0]) / requests / 1e3
    };
    // Warm-up: the first batches fault in the buffers they reuse.
    for _ in 0..2 {
        runtime.block_on(grpc_round(&state));
        http_round(server.http);
    }
    let before = counters();
    let grpc: Vec<f64> = (0..rounds).map(|_| ms(runtime.block_on(grpc_round(&state)))).collect();
    let middle = counters();
    let http: Vec<f64> = (0..rounds).map(|_| ms(http_round(server.http))).collect();
    let after = counters();
    let (grpc_round_ms, http_round_ms) = (p50(grpc.clone()), p50(http.clone()));
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let json = serde_json::json!({
        "bench": "serve_host_path",
        "batch": BATCH,
        "output_bytes": BATCH * SEQ * HIDDEN * 4,
        "rounds": rounds,
        "session_run_ms": session_run_ms,
        "grpc_batch_compute_ms": compute_ms(before, middle),
        "grpc_round_ms": grpc_round_ms,
        "grpc_round_min_ms": min(&grpc),
        "grpc_host_ms": grpc_round_ms - session_run_ms,
        "http_batch_compute_ms": compute_ms(middle, after),
        "http_round_ms": http_round_ms,
        "http_round_min_ms": min(&http),
        "http_host_ms": http_round_ms - session_run_ms,
    });
    println!("{json}");
    server.shutdown();
}
