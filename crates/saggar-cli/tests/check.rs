//! The contract of `saggar check --onnx FILE`: a verdict per backend without running anything, every
//! refused node listed (op, opset, node, why) in the table and the JSON, exit 1 when a backend
//! checked refuses the model, exit 2 for a file that is not a model.

mod common;

use std::path::Path;

use common::{Sandbox, assert_error, assert_success, read_json, stdout};
use saggar_onnx::builder::ModelBuilder;
use saggar_onnx::ops::Attribute;
use saggar_shape::{DType, Dim};

fn repo_model(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../saggar-onnx/models").join(name).join("model.onnx");
    path.to_str().expect("UTF-8 paths").to_string()
}

#[test]
fn every_repository_model_is_supported_on_every_backend() {
    let sandbox = Sandbox::new();
    for model in ["mlp", "cnn", "dlrm", "bert"] {
        let json = sandbox.path("check.json");
        let out = sandbox.run(&["check", "--onnx", &repo_model(model), "--json", json.to_str().unwrap()]);
        assert_success(&out);
        let report = read_json(&json);
        let backends = report["backends"].as_array().expect("backends");
        let names: Vec<&str> = backends.iter().map(|b| b["backend"].as_str().unwrap()).collect();
        assert_eq!(names, ["host", "cuda", "hip"], "{model}");
        assert!(backends.iter().all(|b| b["supported"] == true && b["refused"].as_array().unwrap().is_empty()));
        assert!(report["opset"].as_u64().is_some() && report["nodes"].as_u64() > Some(0), "{report:#}");
        assert!(stdout(&out).contains("supported"), "the table is printed too");
    }
}

/// A model with two nodes no backend imports: both are listed, on every backend, and the command
/// exits 1 with the usual error and hint lines.
#[test]
fn every_refused_node_is_listed_and_the_exit_code_is_1() {
    let sandbox = Sandbox::new();
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &[Dim::symbolic("batch"), Dim::Fixed(4)]);
    b.node("SaggarNoSuchOp", &["x"], &["a"], &[]);
    b.node("Relu", &["a"], &["y"], &[("bogus", Attribute::Int(1))]);
    b.output("y", DType::F32, &[]);
    let path = sandbox.path("refused.onnx");
    std::fs::write(&path, b.to_bytes()).unwrap();
    let json = sandbox.path("check.json");
    let out = sandbox.run(&["check", "--onnx", path.to_str().unwrap(), "--json", json.to_str().unwrap()]);
    let error = assert_error(&out, 1);
    assert!(error.contains("not supported on 3 of 3 backends"), "{error}");
    let report = read_json(&json);
    for backend in report["backends"].as_array().unwrap() {
        assert_eq!(backend["supported"], false);
        let refused = backend["refused"].as_array().unwrap();
        let ops: Vec<&str> = refused.iter().map(|r| r["op"].as_str().unwrap()).collect();
        assert_eq!(ops, ["SaggarNoSuchOp", "Relu"], "{report:#}");
        assert!(refused.iter().all(|r| r["opset"] == 17 && !r["node"].as_str().unwrap().is_empty()));
        assert!(refused[1]["reason"].as_str().unwrap().contains("bogus"), "{report:#}");
    }
}

/// A model the host runs but the GPU lowering refuses: only the GPU backends fail, naming both nodes.
#[test]
fn a_gpu_only_refusal_fails_the_gpu_backends_alone() {
    let sandbox = Sandbox::new();
    // Det above 64x64 runs on the host; the GPU kernel keeps a matrix in shared memory.
    let mut b = ModelBuilder::new(13);
    b.input("x", DType::F32, &[Dim::symbolic("n"), Dim::Fixed(65), Dim::Fixed(65)]);
    b.node("Det", &["x"], &["d0"], &[]);
    b.node("Neg", &["x"], &["nx"], &[]);
    b.node("Det", &["nx"], &["d1"], &[]);
    b.node("Add", &["d0", "d1"], &["y"], &[]);
    b.output("y", DType::F32, &[]);
    let path = sandbox.path("big_det.onnx");
    std::fs::write(&path, b.to_bytes()).unwrap();
    let out = sandbox.run(&["check", "--onnx", path.to_str().unwrap(), "--json", "-"]);
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON on stdout");
    let verdicts: Vec<(String, usize)> = report["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["backend"].as_str().unwrap().to_string(), b["refused"].as_array().unwrap().len()))
        .collect();
    assert_eq!(verdicts, [("host".to_string(), 0), ("cuda".to_string(), 2), ("hip".to_string(), 2)]);
    let why = report["backends"][1]["refused"][0]["reason"].as_str().unwrap();
    assert!(why.contains("64x64"), "the reason names the limit: {why}");
    let only_host = sandbox.run(&["check", "--onnx", path.to_str().unwrap(), "--backend", "host"]);
    assert_success(&only_host);
}

/// A NonZero over data runs as two segments: supported everywhere, its first segment lowered, the
/// count not traced back into the data as a value input.
#[test]
fn a_model_whose_extents_it_computes_is_checked_as_segments() {
    let sandbox = Sandbox::new();
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &[Dim::Fixed(2), Dim::Fixed(3)]);
    b.node("NonZero", &["x"], &["i"], &[]);
    b.node("Neg", &["i"], &["y"], &[]);
    b.output("y", DType::I64, &[]);
    let path = sandbox.path("nonzero.onnx");
    std::fs::write(&path, b.to_bytes()).unwrap();
    let out = sandbox.run(&["check", "--onnx", path.to_str().unwrap(), "--json", "-"]);
    assert_success(&out);
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON on stdout");
    assert_eq!(report["segments"], 2, "{report:#}");
    assert!(report["value_inputs"].as_array().unwrap().is_empty(), "{report:#}");
    assert!(report["backends"].as_array().unwrap().iter().all(|b| b["supported"] == true), "{report:#}");
}

#[test]
fn a_file_that_is_not_a_model_is_a_usage_error() {
    let sandbox = Sandbox::new();
    let path = sandbox.write("junk.onnx", "this is not protobuf \u{ff}");
    assert_error(&sandbox.run(&["check", "--onnx", &path]), 2);
    assert_error(&sandbox.run(&["check", "--onnx", &sandbox.path("missing.onnx").display().to_string()]), 2);
    let out = sandbox.run(&["check", "--onnx", &repo_model("bert"), "--shapes", "nope:1x2"]);
    assert!(assert_error(&out, 2).contains("no input `nope`"));
}

/// `saggar ops --json`: every declared op with its opset ranges, element types and each backend's form.
#[test]
fn ops_lists_the_declared_op_set_with_types_and_each_backend() {
    let sandbox = Sandbox::new();
    let out = sandbox.run(&["ops", "--json", "-"]);
    assert_success(&out);
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON on stdout");
    let ops = report["ops"].as_array().expect("ops");
    assert_eq!(report["count"].as_u64(), Some(ops.len() as u64));
    assert!(ops.len() >= 130, "{} ops", ops.len());
    let find = |name: &str| ops.iter().find(|o| o["op"] == name).unwrap_or_else(|| panic!("{name} is not listed"));
    for name in ["Resize", "ScatterND", "ConvTranspose", "Mod", "CumSum", "HardSwish", "Sin"] {
        let op = find(name);
        assert_eq!(
            (op["backends"]["host"].as_str(), op["backends"]["cuda"].as_str()),
            (Some("kernel"), Some("kernel"))
        );
        assert!(op["opsets"].as_array().is_some_and(|r| !r.is_empty()), "{op}");
    }
    assert_eq!(find("Shape")["backends"]["cuda"], "compile-time");
    assert!(report["out_of_scope"].as_array().is_some_and(|o| o.len() >= 4));
    // Types per type constraint of the schema at the newest opset, ONNX's names; refusals with reasons.
    let cast = find("Cast");
    assert_eq!(cast["types_opset"], 24);
    assert_eq!(cast["types"]["T2"].as_array().map(Vec::len), Some(13), "{cast}");
    assert!(cast["types"]["T1"].as_array().is_some_and(|t| t.contains(&"bfloat16".into())), "{cast}");
    let matmul = find("MatMul");
    assert!(matmul["types"]["T"].as_array().is_some_and(|t| t.contains(&"float".into())), "{matmul}");
    assert!(matmul["refused"]["T"]["double"].as_str().is_some_and(|why| !why.is_empty()), "{matmul}");
    assert_eq!(find("Where")["types"]["B"], serde_json::json!(["bool"]));
    let table = stdout(&sandbox.run(&["ops"]));
    let cast_row = table.lines().find(|l| l.starts_with("Cast ")).expect("a Cast row");
    assert!(table.lines().next().is_some_and(|h| h.ends_with("TYPES")), "{table}");
    assert!(cast_row.ends_with("T1: all; T2: all"), "{cast_row}");
}
