//! QDQ models (as `quantize_static` writes them) run their MatMul and Gemm as `i8` products: the
//! import rewrites them ([`saggar_onnx`]'s `qdq_products` pass), the host session runs the exact `i8`
//! GEMM through its BLAS step, and the results match the same model with its weights dequantised
//! to f32 as the reference evaluator computes it. Zero and NaN scales are refused naming the node.

use saggar_device::BackendKind;
use saggar_device::conformance_blas::values;
use saggar_onnx::builder::ModelBuilder;
use saggar_onnx::ops::Attribute;
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxError, OnnxModel, OnnxOptions, Tensor, TensorData, run_on_host};
use saggar_shape::{DType, Dim};

/// One QDQ product to build.
#[derive(Debug, Clone)]
struct Case {
    what: &'static str,
    gemm: bool,
    trans_b: bool,
    x_dims: Vec<usize>,
    n: usize,
    per_channel: bool,
    x_zero: i8,
    bias: bool,
    x_scale: f32,
}

fn base(what: &'static str) -> Case {
    Case {
        what,
        gemm: false,
        trans_b: false,
        x_dims: vec![2, 3, 16],
        n: 8,
        per_channel: false,
        x_zero: 0,
        bias: false,
        x_scale: 0.02,
    }
}

fn tensor(dims: &[usize], data: TensorData) -> Tensor {
    Tensor::new(dims.to_vec(), data).unwrap()
}

fn fixed(dims: &[usize]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::Fixed(d as u64)).collect()
}

/// The case's model: `x` quantised and dequantised, times the weights as `DequantizeLinear` of `i8`
/// weights (`qdq`), or as those weights dequantised to an f32 initializer (the reference form).
fn model(case: &Case, qdq: bool) -> OnnxModel {
    let k = *case.x_dims.last().unwrap();
    let n = case.n;
    let w_dims = if case.trans_b { [n, k] } else { [k, n] };
    let w_q: Vec<i8> = values(k * n, 5).iter().map(|v| (v * 127.0).round() as i8).collect();
    let s_w: Vec<f32> =
        if case.per_channel { (0..n).map(|j| 0.004 * (1 + j % 3) as f32).collect() } else { vec![0.01] };
    let mut b = ModelBuilder::new(13);
    b.input("x", DType::F32, &fixed(&case.x_dims));
    b.initializer("sx", &tensor(&[], TensorData::F32(vec![case.x_scale])));
    b.initializer("zx", &tensor(&[], TensorData::I8(vec![case.x_zero])));
    b.node("QuantizeLinear", &["x", "sx", "zx"], &["xq"], &[]);
    b.node("DequantizeLinear", &["xq", "sx", "zx"], &["xd"], &[]);
    let channel_axis = if case.trans_b { 0 } else { 1 };
    if qdq {
        let s_dims: &[usize] = if case.per_channel { &[n] } else { &[] };
        b.initializer("wq", &tensor(&w_dims, TensorData::I8(w_q)));
        b.initializer("sw", &tensor(s_dims, TensorData::F32(s_w.clone())));
        b.initializer("zw", &tensor(s_dims, TensorData::I8(vec![0; s_w.len()])));
        b.node("DequantizeLinear", &["wq", "sw", "zw"], &["wd"], &[("axis", Attribute::Int(channel_axis))]);
    } else {
        let column = |i: usize| if case.trans_b { i / k } else { i % n };
        let w: Vec<f32> = w_q
            .iter()
            .enumerate()
            .map(|(i, &q)| f32::from(q) * s_w[if case.per_channel { column(i) } else { 0 }])
            .collect();
        b.initializer("wd", &tensor(&w_dims, TensorData::F32(w)));
    }
    if case.gemm {
        let mut inputs = vec!["xd", "wd"];
        if case.bias {
            b.initializer("c", &tensor(&[n], TensorData::F32(values(n, 9))));
            inputs.push("c");
        }
        b.node("Gemm", &inputs, &["y"], &[("transB", Attribute::Int(i64::from(case.trans_b)))]);
    } else {
        b.node("MatMul", &["xd", "wd"], &["y"], &[]);
    }
    b.output("y", DType::F32, &[]);
    OnnxModel::from_bytes(&b.to_bytes(), case.what, &ImportLimits::default()).unwrap()
}

fn int8_products(model: &OnnxModel) -> usize {
    model.graph().nodes.iter().filter(|n| n.op_type == "Int8Product").count()
}

fn f32_values(t: &Tensor) -> &[f32] {
    match t.data() {
        TensorData::F32(v) => v,
        other => panic!("f32 output expected, found {:?}", other.dtype()),
    }
}

/// Runs `case` through a host session and the reference evaluator; returns whether the import made
/// it an `i8` product (and then that the plans have one BLAS step for it).
fn check(case: &Case) -> bool {
    let (qdq, reference) = (model(case, true), model(case, false));
    let x = tensor(&case.x_dims, TensorData::F32(values(case.x_dims.iter().product(), 3)));
    let want = reference.run_once(std::slice::from_ref(&x)).unwrap();
    let evaluated = qdq.run_once(std::slice::from_ref(&x)).unwrap();
    let compiler = OnnxCompiler::new(qdq.clone(), OnnxOptions::default());
    let got = run_on_host(&compiler, std::slice::from_ref(&x)).unwrap();
    for (how, out) in [("host session", &got[0]), ("reference evaluator", &evaluated[0])] {
        assert_eq!(out.dims(), want[0].dims(), "{}: {how} shape", case.what);
        let worst = f32_values(out)
            .iter()
            .zip(f32_values(&want[0]))
            .map(|(g, w)| (g - w).abs() / (1.0 + w.abs()))
            .fold(0f32, f32::max);
        assert!(worst <= 1e-5, "{}: {how} is off the f32 reference by {worst} (relative)", case.what);
    }
    let fired = int8_products(&qdq) == 1;
    let dims = vec![case.x_dims.iter().map(|&d| d as u64).collect::<Vec<u64>>()];
    if fired {
        for backend in [BackendKind::Host, BackendKind::Cuda, BackendKind::Hip] {
            let summary = compiler.plan_summary(&dims, backend).unwrap();
            assert_eq!(summary.matmuls, 1, "{}: the i8 product is one BLAS step on {backend:?}", case.what);
        }
    }
    fired
}

#[test]
fn qdq_matmuls_and_gemms_run_as_i8_products_matching_the_f32_reference() {
    let cases = [
        (base("matmul, per-tensor scales"), true),
        (Case { per_channel: true, ..base("matmul, per-channel weight scales") }, true),
        (Case { x_zero: 3, per_channel: true, ..base("matmul, activation zero point 3") }, true),
        (Case { x_zero: -7, x_dims: vec![5, 16], ..base("matmul, 2-D, zero point -7") }, true),
        (Case { gemm: true, trans_b: true, x_dims: vec![4, 16], bias: true, ..base("gemm transB with bias") }, true),
        (Case { gemm: true, x_dims: vec![4, 16], per_channel: true, ..base("gemm, per-channel") }, true),
        (Case { x_dims: vec![2, 3, 6], ..base("k 6: not a multiple of 4") }, false),
        (Case { n: 6, ..base("n 6: not a multiple of 4") }, false),
    ];
    for (case, fires) in cases {
        assert_eq!(check(&case), fires, "{}: the pass fired or not", case.what);
    }
}

#[test]
fn the_generated_gemm_engine_runs_the_i8_product_too() {
    let case = Case { x_zero: 5, per_channel: true, ..base("generated engine") };
    let (qdq, reference) = (model(&case, true), model(&case, false));
    let x = tensor(&case.x_dims, TensorData::F32(values(96, 4)));
    let options = OnnxOptions::default().with_gemm(saggar_onnx::GemmEngine::Generated);
    let compiler = OnnxCompiler::new(qdq, options);
    let got = run_on_host(&compiler, std::slice::from_ref(&x)).unwrap();
    let want = reference.run_once(&[x]).unwrap();
    let worst = f32_values(&got[0]).iter().zip(f32_values(&want[0])).map(|(g, w)| (g - w).abs()).fold(0f32, f32::max);
    assert!(worst <= 1e-5, "off by {worst}");
    assert_eq!(compiler.plan_summary(&[vec![2, 3, 16]], BackendKind::Host).unwrap().matmuls, 0);
}

#[test]
fn zero_and_nan_scales_are_refused_naming_the_node() {
    for scale in [0.0, f32::NAN] {
        let case = Case { x_scale: scale, ..base("bad scale") };
        let mut b = ModelBuilder::new(13);
        b.input("x", DType::F32, &fixed(&case.x_dims));
        b.initializer("sx", &tensor(&[], TensorData::F32(vec![scale])));
        b.node("QuantizeLinear", &["x", "sx"], &["xq"], &[]);
        b.node("DequantizeLinear", &["xq", "sx"], &["y"], &[]);
        b.output("y", DType::F32, &[]);
        let err = OnnxModel::from_bytes(&b.to_bytes(), "bad", &ImportLimits::default()).unwrap_err();
        assert!(matches!(err, OnnxError::Node { .. }), "{scale}: {err:?}");
        let shown = err.to_string();
        assert!(shown.contains("QuantizeLinear") && shown.contains("finite and nonzero"), "{shown}");
    }
}

/// A QDQ model beside a shape chain made of Constant nodes (the embeddings of a BERT that
/// `quantize_static` wrote: `Expand` of a shape computed from the input's): the chain still folds,
/// so the Expand's shape has a known length, and the product is still found as an `i8` product.
#[test]
fn a_qdq_model_with_a_computed_expand_shape_imports() {
    let case = base("expand");
    let mut b = ModelBuilder::new(13);
    let batch = vec![Dim::Symbolic("batch".into()), Dim::Fixed(16)];
    b.input("x", DType::F32, &batch);
    let constant = |b: &mut ModelBuilder, name: &str, t: Tensor| {
        b.node("Constant", &[], &[name], &[("value", Attribute::Tensor(t))]);
    };
    constant(&mut b, "zero", tensor(&[1], TensorData::I64(vec![0])));
    constant(&mut b, "minus_one", tensor(&[1], TensorData::I64(vec![-1])));
    constant(&mut b, "eight", tensor(&[1], TensorData::I64(vec![8])));
    constant(&mut b, "one", tensor(&[], TensorData::F32(vec![1.0])));
    b.node("Shape", &["x"], &["sh"], &[]).node("Gather", &["sh", "zero"], &["rows"], &[("axis", Attribute::Int(0))]);
    b.node("Concat", &["rows", "eight"], &["cat"], &[("axis", Attribute::Int(0))]);
    b.node("Reshape", &["cat", "minus_one"], &["target"], &[]);
    b.node("Expand", &["one", "target"], &["ones"], &[]);
    b.initializer("sx", &tensor(&[], TensorData::F32(vec![case.x_scale])));
    b.initializer("zx", &tensor(&[], TensorData::I8(vec![0])));
    b.node("QuantizeLinear", &["x", "sx", "zx"], &["xq"], &[]);
    b.node("DequantizeLinear", &["xq", "sx", "zx"], &["xd"], &[]);
    let w_q: Vec<i8> = values(16 * 8, 5).iter().map(|v| (v * 127.0).round() as i8).collect();
    b.initializer("wq", &tensor(&[16, 8], TensorData::I8(w_q)));
    b.initializer("sw", &tensor(&[], TensorData::F32(vec![0.01])));
    b.initializer("zw", &tensor(&[], TensorData::I8(vec![0])));
    b.node("DequantizeLinear", &["wq", "sw", "zw"], &["wd"], &[]);
    b.node("MatMul", &["xd", "wd"], &["p"], &[]).node("Add", &["p", "ones"], &["y"], &[]);
    b.output("y", DType::F32, &[]);
    let model = OnnxModel::from_bytes(&b.to_bytes(), "expand", &ImportLimits::default())
        .expect("the shape chain folds beside the QDQ nodes");
    assert_eq!(int8_products(&model), 1);
    let x = tensor(&[3, 16], TensorData::F32(values(48, 3)));
    let got = run_on_host(&OnnxCompiler::new(model.clone(), OnnxOptions::default()), std::slice::from_ref(&x)).unwrap();
    assert_eq!(got[0].dims(), [3, 8]);
}
