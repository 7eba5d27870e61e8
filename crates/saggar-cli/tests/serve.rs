//! `saggar serve` as a process: SIGTERM during a batch-64 request lets it complete and exits 0;
//! a missing repository is one error line and exit 1.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::Sandbox;

/// A body of `rows` rows for the MLP test model.
fn mlp_request(rows: usize) -> String {
    let data = vec!["0.25"; rows * 128].join(",");
    format!(r#"{{"inputs":[{{"name":"x","shape":[{rows},128],"datatype":"FP32","data":[{data}]}}]}}"#)
}

fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut reply = String::new();
    s.read_to_string(&mut reply).expect("read");
    let status = reply.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, reply.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}

#[test]
fn sigterm_during_a_batch_64_request_completes_it_and_exits_0() {
    let sandbox = Sandbox::new();
    let repo = sandbox.path("repo");
    std::fs::create_dir_all(repo.join("mlp/1")).unwrap();
    let models = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../saggar-onnx/models");
    std::fs::copy(models.join("mlp/model.onnx"), repo.join("mlp/1/model.onnx")).unwrap();
    // The request waits in the queue for 1.5 s (the batcher hopes for more rows), so the signal
    // comes while it is in flight.
    let config = "max_batch_size: 128\ndynamic_batching { max_queue_delay_microseconds: 1500000 }\n";
    std::fs::write(repo.join("mlp/config.pbtxt"), config).unwrap();
    let mut child = sandbox
        .saggar()
        .args(["serve", "--model-repository", repo.to_str().unwrap(), "--backend", "host", "--devices", "0"])
        .args(["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--shutdown-timeout", "20"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("saggar serve starts");
    let mut log = BufReader::new(child.stderr.take().unwrap());
    let mut lines = Vec::new();
    let http_addr: SocketAddr = loop {
        let mut line = String::new();
        assert!(log.read_line(&mut line).unwrap() > 0, "saggar serve exited early: {lines:?}");
        lines.push(line.clone());
        if let Some(rest) = line.split("http=").nth(1) {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    let log_thread = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = log.read_to_string(&mut rest);
        rest
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while http(http_addr, "GET", "/v2/health/ready", "").0 != 200 {
        assert!(Instant::now() < deadline, "not ready in 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let request = std::thread::spawn(move || http(http_addr, "POST", "/v2/models/mlp/infer", &mlp_request(64)));
    std::thread::sleep(Duration::from_millis(400));
    let killed = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let (status, body) = request.join().unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""shape":[64,10]"#), "{body}");
    let exit = child.wait().unwrap();
    let log = log_thread.join().unwrap();
    assert_eq!(exit.code(), Some(0), "{log}");
    assert!(log.contains("SIGTERM") && log.contains("every request in flight completed"), "{log}");
}

#[test]
fn a_missing_repository_is_one_error_line_and_exit_1() {
    let sandbox = Sandbox::new();
    let out = sandbox.run(&["serve", "--model-repository", "/no/such/folder", "--backend", "host", "--http-port", "0"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: saggar serve: model repository /no/such/folder"), "{stderr}");
    assert!(stderr.contains("hint: "), "{stderr}");
}
