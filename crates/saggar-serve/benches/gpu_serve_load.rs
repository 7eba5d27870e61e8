//! The load test of `saggar serve`: a BERT-base encoder (12 layers, hidden 768, 12 heads, sequence
//! 128; `saggar_onnx::synthetic::bert_like_encoder`, so no file or download is needed) served
//! in-process on the best backend (CUDA on the GPU machine), driven over gRPC by closed-loop
//! clients of batch-1 requests: first one client, then 64. Each client sends a request, waits for
//! its answer and sends the next; latency is measured per request at the client.
//!
//! Checks the targets: 64 clients reach at least 4x the throughput of one, and their p99
//! latency is at most the max queue delay plus twice the batch latency (the mean time of the
//! batches that served them, from the server's `nv_inference_compute_infer_duration_us`).
//! Prints a table and one JSON line; `--json PATH` also writes the JSON; exits 1 when a target is
//! missed. Without a GPU it runs a tiny encoder on the host backend for a few seconds, so the
//! program is exercised anywhere; those figures are not GPU figures and no target is checked.
//!
//! Flags: `--json PATH`, `--seconds S` per phase (default 15), `--clients N` (64), `--delay-us D`
//! (max_queue_delay_microseconds, 100), `--instances N` (instance_group count, 2), `--precision
//! fp32|tf32|fp16|bf16` (fp32), `--buckets pow2|stepped|list:1,2,...` (the config's `buckets`
//! parameter, pow2), `--preferred N` (`preferred_batch_size: [N]`, none), `--backend auto|host|cuda`,
//! `--devices N` (the model's sessions on devices 0..N, 1).

#[path = "../tests/common/grpc.rs"]
mod grpc_client;

use std::sync::Arc;
use std::time::{Duration, Instant};

use grpc_client::Client;
use saggar_device::{BackendChoice, BackendKind};
use saggar_onnx::synthetic::{EncoderConfig, bert_like_encoder};
use saggar_serve::grpc::proto::{InferInputTensor, ModelInferRequest};
use saggar_serve::{ServeOptions, ServerHandle};

struct Flags {
    json: Option<String>,
    seconds: f64,
    clients: usize,
    delay_us: u64,
    instances: usize,
    precision: String,
    buckets: String,
    preferred: Option<u64>,
    backend: BackendChoice,
    devices: usize,
}

fn flags() -> Flags {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let number =
        |name: &str, default: f64| value(name).map_or(default, |v| v.parse().unwrap_or_else(|_| panic!("{name} {v}")));
    Flags {
        json: value("--json"),
        seconds: number("--seconds", 15.0),
        clients: number("--clients", 64.0) as usize,
        delay_us: number("--delay-us", 100.0) as u64,
        instances: number("--instances", 2.0) as usize,
        precision: value("--precision").unwrap_or_else(|| "f32".into()),
        buckets: value("--buckets").unwrap_or_else(|| "pow2".into()),
        preferred: value("--preferred").map(|v| v.parse().unwrap_or_else(|_| panic!("--preferred {v}"))),
        devices: number("--devices", 1.0).max(1.0) as usize,
        backend: match value("--backend").as_deref() {
            Some("host") => BackendChoice::Exactly(BackendKind::Host),
            Some("cuda") => BackendChoice::Exactly(BackendKind::Cuda),
            _ => BackendChoice::Auto,
        },
    }
}

/// One phase's figures.
#[derive(Debug, Clone, serde::Serialize)]
struct Phase {
    clients: usize,
    requests: usize,
    seconds: f64,
    throughput_rps: f64,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    /// Mean rows per executed batch (server side).
    mean_batch: f64,
    /// Mean compute time of the batch that served a request (server side).
    batch_latency_ms: f64,
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn request(seq: usize, vocab: usize, n: usize) -> ModelInferRequest {
    let ids: Vec<u8> = (0..seq).flat_map(|i| (((i * 31 + n * 7) % (vocab - 1) + 1) as i64).to_le_bytes()).collect();
    let mask: Vec<u8> = (0..seq).flat_map(|_| 1i64.to_le_bytes()).collect();
    let input = |name: &str| InferInputTensor {
        name: name.into(),
        datatype: "INT64".into(),
        shape: vec![1, seq as i64],
        ..Default::default()
    };
    ModelInferRequest {
        model_name: "bert".into(),
        inputs: vec![input("input_ids"), input("attention_mask")],
        raw_input_contents: vec![ids, mask],
        ..Default::default()
    }
}

/// The server's counters of the model, from its metrics text.
fn counters(metrics: std::net::SocketAddr) -> std::collections::HashMap<String, f64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(metrics).expect("metrics port");
    write!(s, "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").expect("send");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    text.lines()
        .filter(|l| l.contains("model=\"bert\"") && !l.starts_with('#'))
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            Some((key.split('{').next()?.to_string(), value.parse().ok()?))
        })
        .collect()
}

async fn phase(server: &ServerHandle, clients: usize, seconds: f64, warmup: f64, seq: usize, vocab: usize) -> Phase {
    let before = Arc::new(std::sync::Mutex::new(None));
    let started = Instant::now();
    let (warm_end, end) =
        (started + Duration::from_secs_f64(warmup), started + Duration::from_secs_f64(warmup + seconds));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (addr, metrics, before) = (server.grpc, server.metrics, before.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect(addr).await.expect("connect");
            let mut latencies = Vec::new();
            let mut n = c;
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                if c == 0 && now >= warm_end && before.lock().unwrap().is_none() {
                    *before.lock().unwrap() =
                        Some(tokio::task::spawn_blocking(move || counters(metrics)).await.unwrap());
                }
                let sent = Instant::now();
                let reply = client.infer(request(seq, vocab, n)).await.expect("infer");
                assert!(!reply.raw_output_contents.is_empty(), "an answer without outputs");
                if sent >= warm_end {
                    latencies.push(sent.elapsed().as_secs_f64() * 1e3);
                }
                n += clients;
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("client"));
    }
    let after = counters(server.metrics);
    let before = before.lock().unwrap().clone().unwrap_or_default();
    let delta = |k: &str| after.get(k).copied().unwrap_or(0.0) - before.get(k).copied().unwrap_or(0.0);
    all.sort_by(f64::total_cmp);
    Phase {
        clients,
        requests: all.len(),
        seconds,
        throughput_rps: all.len() as f64 / seconds,
        p50_ms: quantile(&all, 0.5),
        p90_ms: quantile(&all, 0.9),
        p99_ms: quantile(&all, 0.99),
        max_ms: all.last().copied().unwrap_or(0.0),
        mean_batch: delta("nv_inference_count") / delta("nv_inference_exec_count").max(1.0),
        batch_latency_ms: delta("nv_inference_compute_infer_duration_us")
            / delta("nv_inference_request_success").max(1.0)
            / 1e3,
    }
}

fn main() {
    let f = flags();
    let backend = saggar_device::resolve(f.backend).expect("a backend");
    let gpu = backend != BackendKind::Host;
    let (cfg, seconds, warmup) = if gpu {
        (EncoderConfig::bert_base(128), f.seconds, 3.0)
    } else {
        eprintln!("gpu_serve_load: no GPU backend; a tiny encoder on the host backend, figures only (not GPU figures)");
        (EncoderConfig { seq: Some(16), ..EncoderConfig::default() }, f.seconds.min(3.0), 1.0)
    };
    let seq = cfg.seq.expect("fixed sequence");
    let dir = tempfile::tempdir().expect("temp dir");
    let model_dir = dir.path().join("repo/bert/1");
    std::fs::create_dir_all(&model_dir).expect("mkdir");
    let built = Instant::now();
    std::fs::write(model_dir.join("model.onnx"), bert_like_encoder(cfg).to_bytes()).expect("write model");
    let preferred = f.preferred.map_or_else(String::new, |n| format!(" preferred_batch_size: [ {n} ]"));
    let config = format!(
        "max_batch_size: 64\ndynamic_batching {{ max_queue_delay_microseconds: {}{preferred} }}\ninstance_group [ {{ count: {} }} ]\n\
         parameters {{ key: \"precision\" value: {{ string_value: \"{}\" }} }}\n\
         parameters {{ key: \"buckets\" value: {{ string_value: \"{}\" }} }}\n",
        f.delay_us, f.instances, f.precision, f.buckets
    );
    std::fs::write(dir.path().join("repo/bert/config.pbtxt"), &config).expect("write config");
    let mut options = ServeOptions::new(dir.path().join("repo"), dir.path().join("cache"));
    (options.http_port, options.grpc_port, options.metrics_port) = (0, 0, 0);
    options.backend = BackendChoice::Exactly(backend);
    options.devices = (0..f.devices).collect();
    let server = ServerHandle::start(options).expect("server");
    while !server.state().ready() {
        if let Ok(index) = server.state().index(false)
            && let Some(failed) = index.iter().find(|e| !e.reason.is_empty())
        {
            eprintln!("gpu_serve_load: the model failed to load: {}", failed.reason);
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let load_s = built.elapsed().as_secs_f64();
    let model = server.state().model("bert", None).expect("loaded");
    let device = model.executor().memory().first().map_or_else(|| backend.name().to_string(), |d| d.name.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let one = runtime.block_on(phase(&server, 1, seconds, warmup, seq, cfg.vocab));
    let many = runtime.block_on(phase(&server, f.clients, seconds, warmup, seq, cfg.vocab));
    server.shutdown();
    let clean = server.join();
    let model = format!("BERT-style encoder, {} layers, hidden {}, seq {seq}", cfg.layers, cfg.hidden);
    report(&f, gpu, &device, &model, &[one, many], load_s, clean);
}

fn report(f: &Flags, gpu: bool, device: &str, model: &str, phases: &[Phase], load_s: f64, clean: bool) {
    let (one, many) = (&phases[0], &phases[1]);
    let speedup = many.throughput_rps / one.throughput_rps.max(1e-9);
    let p99_bound = f.delay_us as f64 / 1e3 + 2.0 * many.batch_latency_ms;
    println!(
        "gpu_serve_load on {device} ({}): {model} ({}), gRPC, batch-1 closed-loop clients, max_queue_delay {} us, {} instance(s), buckets {}, preferred batch {:?}; model ready in {load_s:.1} s",
        if gpu { "GPU" } else { "host backend, tiny encoder: not GPU figures" },
        f.precision,
        f.delay_us,
        f.instances,
        f.buckets,
        f.preferred
    );
    println!("| clients | requests | req/s | p50 ms | p90 ms | p99 ms | max ms | mean batch | batch latency ms |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for p in phases {
        println!(
            "| {} | {} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {:.2} |",
            p.clients,
            p.requests,
            p.throughput_rps,
            p.p50_ms,
            p.p90_ms,
            p.p99_ms,
            p.max_ms,
            p.mean_batch,
            p.batch_latency_ms
        );
    }
    let throughput_ok = speedup >= 4.0;
    let p99_ok = many.p99_ms <= p99_bound;
    println!("throughput {speedup:.2}x one client (target >= 4x): {}", if throughput_ok { "met" } else { "MISSED" });
    println!(
        "p99 {:.2} ms vs max queue delay + 2 x batch latency = {p99_bound:.2} ms: {}",
        many.p99_ms,
        if p99_ok { "met" } else { "MISSED" }
    );
    let json = serde_json::json!({
        "bench": "gpu_serve_load", "device": device, "gpu": gpu, "model": model,
        "precision": f.precision, "max_queue_delay_us": f.delay_us, "instances": f.instances, "buckets": f.buckets, "preferred_batch_size": f.preferred, "devices": f.devices, "load_s": load_s,
        "phases": phases, "speedup": speedup, "p99_bound_ms": p99_bound,
        "throughput_target_met": throughput_ok, "p99_target_met": p99_ok, "clean_shutdown": clean,
    });
    println!("{json}");
    if let Some(path) = &f.json {
        std::fs::write(path, json.to_string()).expect("write --json");
    }
    if gpu && !(throughput_ok && p99_ok && clean) {
        std::process::exit(1);
    }
}
