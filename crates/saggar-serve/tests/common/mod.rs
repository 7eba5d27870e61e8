//! What the server tests share: a repository made from saggar-onnx's test models, a server on free
//! loopback ports on the host backend, a plain HTTP/1.1 client (so malformed requests can be sent
//! as they are), and the model's eager evaluation as the reference.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use saggar_device::{BackendChoice, BackendKind};
use saggar_onnx::{OnnxModel, Tensor};
use saggar_serve::{ServeOptions, ServerHandle};
use saggar_shape::DType;

/// saggar-onnx's test models.
pub fn models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../saggar-onnx/models")
}

/// A repository of `models` (`name`, optional `config.pbtxt` text) in a temporary folder.
pub fn repository(models: &[(&str, Option<&str>)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, config) in models {
        let version = dir.path().join(name).join("1");
        std::fs::create_dir_all(&version).expect("mkdir");
        std::fs::copy(self::models().join(name).join("model.onnx"), version.join("model.onnx")).expect("copy model");
        if let Some(config) = config {
            std::fs::write(dir.path().join(name).join("config.pbtxt"), config).expect("write config");
        }
    }
    dir
}

/// A server over `repo` on the host backend (device 0), free ports, a fresh cache; waits until
/// ready.
pub fn start(repo: &Path, cache: &Path, tweak: impl FnOnce(&mut ServeOptions)) -> ServerHandle {
    let mut options = ServeOptions::new(repo, cache);
    options.http_port = 0;
    options.grpc_port = 0;
    options.metrics_port = 0;
    options.backend = BackendChoice::Exactly(BackendKind::Host);
    options.devices = vec![0];
    tweak(&mut options);
    let server = ServerHandle::start(options).expect("server starts");
    for _ in 0..3000 {
        if server.state().ready() {
            return server;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("server not ready after 60 s: {:?}", server.state().index(false));
}

/// A reply: status, headers (lower-case names), body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The error message of a 4xx/5xx JSON body.
    pub fn error(&self) -> String {
        self.json()["error"].as_str().unwrap_or_else(|| panic!("no error in {:?}", self.json())).to_string()
    }
}

/// One HTTP/1.1 request on its own connection.
pub fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8], headers: &[(&str, &str)]) -> Reply {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(120))).expect("timeout");
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("content-length")) {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).expect("write head");
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    parse_reply(&raw)
}

pub fn parse_reply(raw: &[u8]) -> Reply {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_else(|| panic!("no reply: {raw:?}"));
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).expect("status");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Reply { status, headers, body: raw[split + 4..].to_vec() }
}

pub fn get(addr: SocketAddr, path: &str) -> Reply {
    http(addr, "GET", path, b"", &[])
}

pub fn post(addr: SocketAddr, path: &str, body: &serde_json::Value) -> Reply {
    http(addr, "POST", path, body.to_string().as_bytes(), &[])
}

/// The value of a metric line `name{model="m",version="1"}`.
pub fn metric(addr: SocketAddr, name: &str, model: &str) -> f64 {
    let text = String::from_utf8(get(addr, "/metrics").body).expect("utf8");
    let prefix = format!("{name}{{model=\"{model}\",version=\"1\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
        .parse()
        .expect("number")
}

/// The test data set `n` of `model`: its inputs as tensors.
pub fn inputs(model: &str, n: usize) -> Vec<Tensor> {
    let dir = models().join(model).join(format!("test_data_set_{n}"));
    let count = std::fs::read_dir(&dir)
        .expect("data set")
        .filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().starts_with("input_")));
    (0..count.count())
        .map(|i| saggar_onnx::read_tensor_pb(&dir.join(format!("input_{i}.pb"))).expect("input").tensor)
        .collect()
}

/// The model's eager evaluation of `inputs`.
pub fn reference(model: &str, inputs: &[Tensor]) -> Vec<Tensor> {
    let m = OnnxModel::load(models().join(model).join("model.onnx")).expect("model");
    m.run_once(inputs).expect("eager run")
}

/// The protocol datatype of a tensor.
pub fn datatype(t: &Tensor) -> &'static str {
    match t.dtype() {
        DType::F32 => "FP32",
        DType::I64 => "INT64",
        other => panic!("no test uses {other}"),
    }
}

/// f32 values of little-endian bytes.
pub fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Asserts `actual` matches `expected` within 1e-4 relative (1e-5 absolute).
pub fn assert_close(actual: &[f32], expected: &[f32], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: lengths");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!((a - e).abs() <= 1e-5 + 1e-4 * e.abs(), "{what}[{i}]: {a} vs {e}");
    }
}
