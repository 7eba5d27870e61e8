//! `--precision` and `--keep-fp32` (`saggar perf`, `saggar warmup`, `saggar cache key`) on the host
//! backend, which computes half products as the GPUs do (half storage and rounding, f32
//! accumulation): the JSON's `precision`, `verify.accuracy` against the strict-f32 evaluation and
//! `compute`; the setting in the cache key; bad values as usage errors.

mod common;

use std::path::{Path, PathBuf};

use common::{Sandbox, assert_error, assert_success, read_json, u64_at};

fn model(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../saggar-onnx/models").join(name).join("model.onnx")
}

fn arg(path: &Path) -> &str {
    path.to_str().expect("UTF-8 paths")
}

/// `saggar perf --backend host --onnx mlp --trace const:4 --verify 2` with `extra`, its JSON.
fn perf(sandbox: &Sandbox, extra: &[&str]) -> serde_json::Value {
    let json = sandbox.path("perf.json");
    let mlp = model("mlp");
    let mut args = vec!["perf", "--backend", "host", "--onnx", arg(&mlp), "--trace", "const:4", "--requests", "4"];
    args.extend(["--verify", "2", "--max-batch", "4", "--json", arg(&json)]);
    args.extend(extra);
    assert_success(&sandbox.run(&args));
    read_json(&json)
}

#[test]
fn half_precisions_report_their_accuracy_against_strict_f32() {
    let sandbox = Sandbox::new();
    let strict = perf(&sandbox, &[]);
    assert_eq!(strict["precision"], "fp32");
    let exact = strict["verify"]["accuracy"][0]["max_rel_error"].as_f64().unwrap();
    assert!(exact < 1e-5, "strict f32 matches its own evaluation: {strict:#}");
    for (precision, tolerance, bound) in [("fp16", 3e-2, 1e-2), ("bf16", 1.5e-1, 6e-2)] {
        let json = perf(&sandbox, &["--precision", precision]);
        assert_eq!(json["precision"], precision);
        assert_eq!(json["verify"]["tolerance"], tolerance, "{json:#}");
        assert_eq!(u64_at(&json, "/verify/mismatches"), 0, "{json:#}");
        let accuracy = &json["verify"]["accuracy"][0];
        let (abs, rel) = (accuracy["max_abs_error"].as_f64().unwrap(), accuracy["max_rel_error"].as_f64().unwrap());
        // Rounded, so not exact; within what the half type's mantissa leaves.
        assert!(abs > 0.0 && rel > 1e-5 && rel < bound, "{precision}: {accuracy:#}");
    }
}

#[test]
fn perf_reports_the_flop_rate_of_the_products() {
    let sandbox = Sandbox::new();
    let json = perf(&sandbox, &[]);
    let compute = &json["compute"];
    assert_eq!(compute["batch"], 4, "{json:#}");
    let flops = compute["flops"].as_u64().unwrap();
    // The MLP's layers are Gemms: 2 * batch * fan_in * fan_out each.
    let mlp = saggar_onnx::OnnxModel::load(model("mlp")).unwrap();
    let graph = mlp.graph();
    let weights: u64 = graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "Gemm")
        .map(|n| graph.value(n.inputs[1].unwrap()).constant.as_ref().unwrap().len() as u64)
        .sum();
    assert_eq!(flops, 2 * 4 * weights, "{compute:#}");
    let tflops = compute["tflops"].as_f64().unwrap();
    let p50 = compute["p50_us"].as_f64().unwrap();
    assert!((tflops - flops as f64 / (p50 * 1e6)).abs() <= 1e-9 + 1e-6 * tflops, "{compute:#}");
}

#[test]
fn the_precision_and_keep_list_are_part_of_the_cache_key() {
    let sandbox = Sandbox::new();
    let mlp = model("mlp");
    let key = |extra: &[&str]| {
        let json = sandbox.path("key.json");
        let mut args = vec!["cache", "key", "--onnx", arg(&mlp), "--bucket", "4", "--backend", "host"];
        args.extend(["--json", arg(&json)]);
        args.extend(extra);
        assert_success(&sandbox.run(&args));
        read_json(&json)["key_text"].as_str().unwrap().to_string()
    };
    let keys = [
        key(&[]),
        key(&["--precision", "fp16"]),
        key(&["--precision", "bf16"]),
        key(&["--precision", "fp16", "--keep-fp32", "Gemm"]),
    ];
    assert!(keys[1].contains("precision=fp16"), "{}", keys[1]);
    for (i, a) in keys.iter().enumerate() {
        assert!(keys[i + 1..].iter().all(|b| a != b), "{a}");
    }
}

#[test]
fn bad_precision_settings_are_usage_errors() {
    let sandbox = Sandbox::new();
    let mlp = model("mlp");
    let run = |extra: &[&str]| {
        let mut args = vec!["warmup", "--backend", "host", "--onnx", arg(&mlp), "--max-batch", "2"];
        args.extend(extra);
        sandbox.run(&args)
    };
    let err = assert_error(&run(&["--precision", "fp16", "--keep-fp32", "Gemm,NoSuchNode"]), 2);
    assert!(err.contains("`NoSuchNode`") && err.contains("keep-fp32"), "{err}");
    let out = run(&["--precision", "fp8"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("use fp32"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `--precision int8` on the f32 MLP: refused without calibration data (exit 2, naming the flag);
/// with `--calibration-inputs` (the model folder's three data sets) it verifies within int8's
/// tolerance, not exactly.
#[test]
fn int8_needs_calibration_data_and_then_runs_within_its_tolerance() {
    let sandbox = Sandbox::new();
    let mlp = model("mlp");
    let out =
        sandbox.run(&["warmup", "--backend", "host", "--onnx", arg(&mlp), "--max-batch", "2", "--precision", "int8"]);
    let err = assert_error(&out, 2);
    assert!(err.contains("--calibration-inputs"), "{err}");
    let data = mlp.parent().unwrap().to_path_buf();
    let json = perf(&sandbox, &["--precision", "int8", "--calibration-inputs", arg(&data)]);
    assert_eq!(json["precision"], "int8");
    assert_eq!(u64_at(&json, "/verify/mismatches"), 0, "{json:#}");
    let rel = json["verify"]["accuracy"][0]["max_rel_error"].as_f64().unwrap();
    assert!(rel > 1e-5 && rel < 5e-2, "int8 rounds, within its tolerance: {json:#}");
}
