//! The protocol over HTTP against a server on the host backend: health, metadata, infer with JSON
//! and binary data checked against the eager reference, every bad request a 4xx naming the problem
//! (and the server serving on), the body limit, a full queue, dynamic batching, and padded
//! sequences merged within a bucket (each request answered with the outputs it asked for), and
//! batches the session cannot take in place.

mod common;

use common::*;
use saggar_onnx::Tensor;
use serde_json::{Value, json};

const MLP: &str = "max_batch_size: 64\ndynamic_batching { max_queue_delay_microseconds: 2000 }\n";

fn mlp_body(rows: usize, value: f32) -> Value {
    json!({ "inputs": [{ "name": "x", "shape": [rows, 128], "datatype": "FP32", "data": vec![value; rows * 128] }] })
}

fn tensor_json(name: &str, t: &saggar_onnx::Tensor) -> Value {
    let data: Vec<Value> = match t.dtype() {
        saggar_shape::DType::F32 => t.to_f32s().unwrap().into_iter().map(Value::from).collect(),
        _ => t.to_i64s().unwrap().into_iter().map(Value::from).collect(),
    };
    json!({ "name": name, "shape": t.dims(), "datatype": datatype(t), "data": data })
}

#[test]
fn health_metadata_and_infer_with_json_and_binary_data() {
    let (repo, cache) = (repository(&[("mlp", Some(MLP)), ("dlrm", None)]), tempfile::tempdir().unwrap());
    let server = start(repo.path(), cache.path(), |_| {});
    assert_eq!(get(server.http, "/v2/health/live").status, 200);
    assert_eq!(get(server.http, "/v2/health/ready").status, 200);
    assert_eq!(get(server.http, "/v2/models/mlp/ready").status, 200);
    assert_eq!(get(server.http, "/v2/models/mlp/versions/1/ready").status, 200);
    assert_eq!(get(server.http, "/v2/models/mlp/versions/2/ready").status, 400);
    assert_eq!(get(server.http, "/v2").json()["name"], "saggar");
    let meta = get(server.http, "/v2/models/mlp").json();
    assert_eq!(meta["inputs"], json!([{ "name": "x", "datatype": "FP32", "shape": [-1, 128] }]));
    assert_eq!(meta["outputs"], json!([{ "name": "probs", "datatype": "FP32", "shape": [-1, 10] }]));
    assert_eq!(get(server.http, "/v2/models/dlrm").json()["inputs"].as_array().unwrap().len(), 27);

    // JSON data, every output as JSON.
    let inputs = inputs("dlrm", 0);
    let names: Vec<String> = meta_names(&get(server.http, "/v2/models/dlrm").json()["inputs"]);
    let body =
        json!({ "id": "r1", "inputs": names.iter().zip(&inputs).map(|(n, t)| tensor_json(n, t)).collect::<Vec<_>>() });
    let reply = post(server.http, "/v2/models/dlrm/infer", &body);
    assert_eq!(reply.status, 200, "{}", String::from_utf8_lossy(&reply.body));
    let out = reply.json();
    assert_eq!(out["id"], "r1");
    let expected = reference("dlrm", &inputs);
    let data: Vec<f32> =
        out["outputs"][0]["data"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
    assert_close(&data, &expected[0].to_f32s().unwrap(), "dlrm over JSON");

    // Binary data both ways (Triton's extension).
    let x = &inputs_of_mlp()[0];
    let head = json!({
        "inputs": [{ "name": "x", "shape": x.dims(), "datatype": "FP32", "parameters": { "binary_data_size": x.len() * 4 } }],
        "outputs": [{ "name": "probs", "parameters": { "binary_data": true } }],
    })
    .to_string();
    let mut body = head.clone().into_bytes();
    body.extend(x.to_le_bytes());
    let length = head.len().to_string();
    let reply =
        http(server.http, "POST", "/v2/models/mlp/infer", &body, &[("Inference-Header-Content-Length", &length)]);
    assert_eq!(reply.status, 200, "{}", String::from_utf8_lossy(&reply.body));
    let json_len: usize = reply.header("inference-header-content-length").unwrap().parse().unwrap();
    let header: Value = serde_json::from_slice(&reply.body[..json_len]).unwrap();
    let size = header["outputs"][0]["parameters"]["binary_data_size"].as_u64().unwrap() as usize;
    assert_eq!(reply.body.len(), json_len + size);
    let expected = reference("mlp", std::slice::from_ref(x));
    assert_close(&floats(&reply.body[json_len..]), &expected[0].to_f32s().unwrap(), "mlp over binary data");
}

fn meta_names(inputs: &Value) -> Vec<String> {
    inputs.as_array().unwrap().iter().map(|i| i["name"].as_str().unwrap().to_string()).collect()
}

fn inputs_of_mlp() -> Vec<saggar_onnx::Tensor> {
    inputs("mlp", 0)
}

#[test]
fn every_bad_request_is_a_4xx_naming_the_problem_and_the_server_keeps_serving() {
    let (repo, cache) = (repository(&[("mlp", Some(MLP))]), tempfile::tempdir().unwrap());
    let server = start(repo.path(), cache.path(), |o| o.max_request_bytes = 1 << 20);
    let input = |name: &str, shape: Value, datatype: &str, data: Value| {
        json!({ "inputs": [{ "name": name, "shape": shape, "datatype": datatype, "data": data }] }).to_string()
    };
    let row = vec![0.5f32; 128];
    let cases: Vec<(&str, &str, String, u16, &str)> = vec![
        ("malformed JSON", "/v2/models/mlp/infer", "{\"inputs\": [".into(), 400, "malformed request JSON"),
        ("wrong datatype", "/v2/models/mlp/infer", input("x", json!([1, 128]), "INT64", json!(vec![0; 128])), 400, "datatype INT64"),
        ("wrong shape", "/v2/models/mlp/infer", input("x", json!([1, 64]), "FP32", json!(row[..64])), 400, "does not match"),
        ("data shorter than the shape", "/v2/models/mlp/infer", input("x", json!([1, 128]), "FP32", json!(row[..100])), 400, "100 elements"),
        ("unknown model", "/v2/models/nope/infer", input("x", json!([1, 128]), "FP32", json!(row)), 404, "unknown model `nope`"),
        ("unknown input", "/v2/models/mlp/infer", input("y", json!([1, 128]), "FP32", json!(row)), 400, "no input `y`"),
        ("overflowing shape", "/v2/models/mlp/infer", input("x", json!([1u64 << 62, 1u64 << 62]), "FP32", json!([])), 400, "overflows"),
        ("shape above the limit", "/v2/models/mlp/infer", input("x", json!([4096, 128]), "FP32", json!([])), 413, "above the request limit"),
        ("batch above max_batch_size", "/v2/models/mlp/infer", input("x", json!([65, 128]), "FP32", json!(vec![0.5; 65 * 128])), 400, "max_batch_size"),
        ("missing input", "/v2/models/mlp/infer", json!({ "inputs": [] }).to_string(), 400, "input `x` is missing"),
        ("unknown output", "/v2/models/mlp/infer", json!({ "inputs": [{ "name": "x", "shape": [1, 128], "datatype": "FP32", "data": row }], "outputs": [{ "name": "nope" }] }).to_string(), 400, "no output `nope`"),
        ("no route", "/v2/nothing", String::new(), 404, "no route"),
    ];
    let good = mlp_body(1, 0.5);
    for (what, path, body, status, words) in cases {
        let reply = http(server.http, "POST", path, body.as_bytes(), &[]);
        assert_eq!(reply.status, status, "{what}: {}", String::from_utf8_lossy(&reply.body));
        assert!(reply.error().contains(words), "{what}: {:?} lacks {words:?}", reply.error());
        assert_eq!(post(server.http, "/v2/models/mlp/infer", &good).status, 200, "after {what}");
    }
    // Binary data shorter than announced, and a header length beyond the body.
    let head = json!({ "inputs": [{ "name": "x", "shape": [1, 128], "datatype": "FP32", "parameters": { "binary_data_size": 512 } }] }).to_string();
    let mut short = head.clone().into_bytes();
    short.extend([0u8; 100]);
    let length = head.len().to_string();
    let reply =
        http(server.http, "POST", "/v2/models/mlp/infer", &short, &[("Inference-Header-Content-Length", &length)]);
    assert_eq!((reply.status, reply.error().contains("100 left")), (400, true), "{}", reply.error());
    let reply =
        http(server.http, "POST", "/v2/models/mlp/infer", &short, &[("Inference-Header-Content-Length", "99999")]);
    assert_eq!((reply.status, reply.error().contains("Inference-Header-Content-Length")), (400, true));
    assert!(metric(server.metrics, "nv_inference_request_failure", "mlp") >= 10.0);
}

#[test]
fn a_body_above_the_limit_is_refused_before_it_is_read() {
    let (repo, cache) = (repository(&[("mlp", Some(MLP))]), tempfile::tempdir().unwrap());
    let server = start(repo.path(), cache.path(), |o| o.max_request_bytes = 1 << 20);
    // Announce 1 GiB and send none of it: the answer comes from the header alone.
    let started = std::time::Instant::now();
    let reply = http(server.http, "POST", "/v2/models/mlp/infer", b"", &[("Content-Length", "1073741824")]);
    assert_eq!(reply.status, 413, "{}", String::from_utf8_lossy(&reply.body));
    assert!(reply.error().contains("--max-request-bytes"), "{}", reply.error());
    assert_eq!(reply.header("connection"), Some("close"));
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    // A chunked body that grows past the limit.
    let mut stream = std::net::TcpStream::connect(server.http).unwrap();
    use std::io::{Read, Write};
    write!(stream, "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap();
    let chunk = vec![b'x'; 1 << 16];
    for _ in 0..17 {
        if write!(stream, "{:x}\r\n", chunk.len())
            .and_then(|_| stream.write_all(&chunk))
            .and_then(|_| stream.write_all(b"\r\n"))
            .is_err()
        {
            break;
        }
    }
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    assert_eq!(parse_reply(&raw).status, 413);
    assert_eq!(post(server.http, "/v2/models/mlp/infer", &mlp_body(1, 0.5)).status, 200);
}

#[test]
fn a_full_queue_answers_503_at_once() {
    // No batching and one executor: while it runs, one request waits and the rest are refused.
    let config = "max_batch_size: 8\ninstance_group [ { count: 1 } ]";
    let (repo, cache) = (repository(&[("dlrm", Some(config))]), tempfile::tempdir().unwrap());
    let server = start(repo.path(), cache.path(), |o| o.max_queue = 1);
    let names = meta_names(&get(server.http, "/v2/models/dlrm").json()["inputs"]);
    let inputs = inputs("dlrm", 0);
    let body =
        json!({ "inputs": names.iter().zip(&inputs).map(|(n, t)| tensor_json(n, t)).collect::<Vec<_>>() }).to_string();
    let replies: Vec<Reply> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..32)
            .map(|_| s.spawn(|| http(server.http, "POST", "/v2/models/dlrm/infer", body.as_bytes(), &[])))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let refused: Vec<&Reply> = replies.iter().filter(|r| r.status == 503).collect();
    assert!(
        replies.iter().all(|r| r.status == 200 || r.status == 503),
        "{:?}",
        replies.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    assert!(!refused.is_empty(), "32 concurrent requests against a queue of 1 were all accepted");
    assert!(refused[0].error().contains("queue is full"), "{}", refused[0].error());
    assert_eq!(get(server.http, "/v2/health/ready").status, 200);
}

#[test]
fn forty_eight_concurrent_clients_are_batched() {
    let (repo, cache) = (repository(&[("mlp", Some(MLP))]), tempfile::tempdir().unwrap());
    let server = start(repo.path(), cache.path(), |_| {});
    let (success, executions) = (
        metric(server.metrics, "nv_inference_request_success", "mlp"),
        metric(server.metrics, "nv_inference_exec_count", "mlp"),
    );
    let model = saggar_onnx::OnnxModel::load(models().join("mlp/model.onnx")).unwrap();
    std::thread::scope(|s| {
        for c in 0..48 {
            let model = &model;
            let addr = server.http;
            s.spawn(move || {
                for r in 0..10 {
                    let value = (c * 10 + r) as f32 / 480.0 - 0.5;
                    let reply = post(addr, "/v2/models/mlp/infer", &mlp_body(1, value));
                    assert_eq!(reply.status, 200, "{}", String::from_utf8_lossy(&reply.body));
                    let out = reply.json();
                    let data: Vec<f32> = out["outputs"][0]["data"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_f64().unwrap() as f32)
                        .collect();
                    let x =
                        saggar_onnx::Tensor::new(vec![1, 128], saggar_onnx::TensorData::F32(vec![value; 128])).unwrap();
                    let expected = model.run_once(&[x]).unwrap()[0].to_f32s().unwrap();
                    assert_close(&data, &expected, &format!("client {c} request {r}"));
                }
            });
        }
    });
    let success = metric(server.metrics, "nv_inference_request_success", "mlp") - success;
    let executions = metric(server.metrics, "nv_inference_exec_count", "mlp") - executions;
    assert_eq!(success, 480.0);
    assert!(executions < 480.0, "no request was merged ({executions} executions)");
    let text = String::from_utf8(get(server.metrics, "/metrics").body).unwrap();
    assert!(text.contains("saggar_batch_size_bucket{model=\"mlp\",version=\"1\",le=\"+Inf\"}"), "{text}");
}

/// A bert request of `len` tokens (ids varied by `i`) asking for `outputs` (all when empty), and
/// the eager reference of its inputs.
fn bert_request(model: &saggar_onnx::OnnxModel, i: usize, len: usize, outputs: &[&str]) -> (Value, Vec<Tensor>) {
    let ids: Vec<i64> = (0..len as i64).map(|t| 1 + (t * 7 + i as i64) % 90).collect();
    let mask = vec![1i64; len];
    let t = |v: Vec<i64>| Tensor::new(vec![1, len], saggar_onnx::TensorData::I64(v)).unwrap();
    let expected = model.run_once(&[t(ids.clone()), t(mask.clone())]).unwrap();
    let mut body = json!({ "inputs": [
        { "name": "input_ids", "shape": [1, len], "datatype": "INT64", "data": ids },
        { "name": "attention_mask", "shape": [1, len], "datatype": "INT64", "data": mask },
    ]});
    if !outputs.is_empty() {
        body["outputs"] = outputs.iter().map(|o| json!({ "name": o })).collect();
    }
    (body, expected)
}

/// Checks a JSON reply's outputs against bert's reference outputs (0: `last_hidden_state`, 1:
/// `pooler_output`), by name, in the order asked.
fn check_bert_reply(reply: &Reply, expected: &[Tensor], names: &[&str], what: &str) {
    assert_eq!(reply.status, 200, "{what}: {}", String::from_utf8_lossy(&reply.body));
    let out = reply.json();
    let outputs = out["outputs"].as_array().unwrap();
    let got: Vec<&str> = outputs.iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert_eq!(got, names, "{what}: the outputs asked for, in the order asked");
    for o in outputs {
        let index = usize::from(o["name"] == "pooler_output");
        let dims: Vec<u64> = expected[index].dims().iter().map(|&d| d as u64).collect();
        assert_eq!(o["shape"], json!(dims), "{what}: {} sliced back to the request", o["name"]);
        let data: Vec<f32> = o["data"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
        assert_close(&data, &expected[index].to_f32s().unwrap(), &format!("{what}: {}", o["name"]));
    }
}

#[test]
fn sequences_of_one_bucket_merge_padded_and_come_back_at_their_length_with_the_outputs_asked() {
    let config = "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 300000 }\n\
        parameters { key: \"pad_axis\" value: { string_value: \"seq:8,16\" } }\n";
    let (repo, cache) = (repository(&[("bert", Some(config))]), tempfile::tempdir().unwrap());
    let server = start(repo.path(), cache.path(), |_| {});
    let executions = metric(server.metrics, "nv_inference_exec_count", "bert");
    let model = saggar_onnx::OnnxModel::load(models().join("bert/model.onnx")).unwrap();
    let all = ["last_hidden_state", "pooler_output"];
    let asks: [(usize, &[&str], &[&str]); 4] = [
        (5, &["pooler_output", "last_hidden_state"], &["pooler_output", "last_hidden_state"]),
        (7, &["pooler_output"], &["pooler_output"]),
        (3, &[], &all),
        (8, &["last_hidden_state", "last_hidden_state"], &["last_hidden_state"]),
    ];
    std::thread::scope(|s| {
        for (i, (len, asked, answered)) in asks.into_iter().enumerate() {
            let (addr, model) = (server.http, &model);
            s.spawn(move || {
                let (body, expected) = bert_request(model, i, len, asked);
                let reply = post(addr, "/v2/models/bert/infer", &body);
                check_bert_reply(&reply, &expected, answered, &format!("sequence of {len} asking {asked:?}"));
            });
        }
    });
    let executions = metric(server.metrics, "nv_inference_exec_count", "bert") - executions;
    assert!(executions < 4.0, "the four sequences of bucket 8 ran in {executions} batches");
}

#[test]
fn batches_the_session_cannot_take_in_place_run_as_before() {
    // Buckets of 1 and 2 rows under a max_batch_size of 8: a batch of more rows is split into
    // chunks by the session's own run; a sequence above the axis's buckets is refused by it.
    let config = "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 300000 }\n\
        parameters { key: \"buckets\" value: { string_value: \"list:1,2\" } }\n\
        parameters { key: \"pad_axis\" value: { string_value: \"seq:8,16\" } }\n";
    let (repo, cache) = (repository(&[("bert", Some(config))]), tempfile::tempdir().unwrap());
    let server = start(repo.path(), cache.path(), |_| {});
    let model = saggar_onnx::OnnxModel::load(models().join("bert/model.onnx")).unwrap();
    std::thread::scope(|s| {
        for (i, len) in [6usize, 3, 8, 5].into_iter().enumerate() {
            let (addr, model) = (server.http, &model);
            s.spawn(move || {
                let (body, expected) = bert_request(model, i, len, &["last_hidden_state"]);
                let reply = post(addr, "/v2/models/bert/infer", &body);
                check_bert_reply(&reply, &expected, &["last_hidden_state"], &format!("sequence of {len}"));
            });
        }
    });
    let (body, _) = bert_request(&model, 0, 20, &[]);
    let reply = post(server.http, "/v2/models/bert/infer", &body);
    assert_eq!(reply.status, 400, "{}", String::from_utf8_lossy(&reply.body));
    assert!(reply.error().contains("16"), "names the largest bucket: {}", reply.error());
}

#[test]
fn readiness_is_false_while_a_model_is_not_loaded_and_the_others_serve() {
    let (repo, cache) = (repository(&[("mlp", None)]), tempfile::tempdir().unwrap());
    std::fs::create_dir_all(repo.path().join("broken/1")).unwrap();
    std::fs::write(repo.path().join("broken/1/model.onnx"), b"not a model").unwrap();
    std::fs::create_dir_all(repo.path().join("badconfig/1")).unwrap();
    std::fs::copy(models().join("mlp/model.onnx"), repo.path().join("badconfig/1/model.onnx")).unwrap();
    std::fs::write(
        repo.path().join("badconfig/config.pbtxt"),
        "max_batch_size: 8\nparameters { key: \"bucket\" value: { string_value: \"pow2\" } }",
    )
    .unwrap();
    let mut options = saggar_serve::ServeOptions::new(repo.path(), cache.path());
    (options.http_port, options.grpc_port, options.metrics_port) = (0, 0, 0);
    options.backend = saggar_device::BackendChoice::Exactly(saggar_device::BackendKind::Host);
    options.devices = vec![0];
    let server = saggar_serve::ServerHandle::start(options).unwrap();
    assert!(!server.state().ready(), "ready before any model loaded");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while server.state().model("mlp", None).is_err() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(get(server.http, "/v2/health/ready").status, 400, "a model failed to load: not ready");
    assert_eq!(post(server.http, "/v2/models/mlp/infer", &mlp_body(2, 0.1)).status, 200);
    let reply = post(server.http, "/v2/models/broken/infer", &mlp_body(1, 0.1));
    assert_eq!(reply.status, 503);
    assert!(reply.error().contains("failed to load"), "{}", reply.error());
    let index = post(server.http, "/v2/repository/index", &json!({})).json();
    let reason = |name: &str| {
        index.as_array().unwrap().iter().find(|m| m["name"] == name).unwrap()["reason"].as_str().unwrap().to_string()
    };
    assert!(reason("badconfig").contains("unknown parameter `bucket`"), "{index}");
    assert!(!reason("broken").is_empty(), "{index}");
}

#[test]
fn instances_on_two_devices_take_batches_from_one_queue() {
    // The host backend simulates several devices: a session group over two of them.
    let config = "max_batch_size: 8\ndynamic_batching { }\ninstance_group [ { count: 1 gpus: [ 0, 1 ] } ]";
    let (repo, cache) = (repository(&[("mlp", Some(config))]), tempfile::tempdir().unwrap());
    let server = start(repo.path(), cache.path(), |_| {});
    std::thread::scope(|s| {
        for c in 0..8 {
            let addr = server.http;
            s.spawn(move || {
                for _ in 0..10 {
                    assert_eq!(post(addr, "/v2/models/mlp/infer", &mlp_body(1 + c % 3, 0.1)).status, 200);
                }
            });
        }
    });
    let model = server.state().model("mlp", None).unwrap();
    let per_device: Vec<u64> = model.executor().stats().iter().map(|s| s.requests).collect();
    assert_eq!(per_device.len(), 2);
    assert!(per_device.iter().all(|&n| n > 0), "every device ran batches: {per_device:?}");
    let text = String::from_utf8(get(server.metrics, "/metrics").body).unwrap();
    assert!(text.contains("nv_gpu_memory_total_bytes{gpu_uuid=\"host:1\""), "{text}");
}
