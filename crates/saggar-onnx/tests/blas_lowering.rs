//! MatMul and Gemm through BLAS-Lt steps on the host backend (the host's own GEMM, the plan the GPUs
//! run) against the same models with the GEMM lowered without BLAS: batched, broadcast, 1-D and
//! transposed operands, Gemm's bias and scales, and the shapes the libraries cannot express (which
//! must fall back, not fail). Each case also says whether it became a BLAS step.

use saggar_device::BackendKind;
use saggar_onnx::builder::ModelBuilder;
use saggar_onnx::ops::Attribute;
use saggar_onnx::{
    GemmEngine, ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, Precision, Tensor, TensorData, run_on_host,
};
use saggar_shape::{DType, Dim};

fn f32s(dims: &[usize], seed: u32) -> Tensor {
    let n = dims.iter().product::<usize>();
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    let values = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x % 2001) as f32 / 1000.0 - 1.0
        })
        .collect();
    Tensor::new(dims.to_vec(), TensorData::F32(values)).unwrap()
}

fn fixed(dims: &[usize]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::Fixed(d as u64)).collect()
}

/// One node `op` over inputs of `shapes` (the last `constants` of them initializers), output `y`.
fn model(op: &str, shapes: &[&[usize]], constants: usize, attrs: &[(&str, Attribute)]) -> (OnnxModel, Vec<Tensor>) {
    let mut b = ModelBuilder::new(13);
    let names = ["a", "b", "c"];
    let mut inputs = Vec::new();
    for (i, dims) in shapes.iter().enumerate() {
        let tensor = f32s(dims, 7 + i as u32);
        if i >= shapes.len() - constants {
            b.initializer(names[i], &tensor);
        } else {
            b.input(names[i], DType::F32, &fixed(dims));
            inputs.push(tensor);
        }
    }
    b.node(op, &names[..shapes.len()], &["y"], attrs);
    b.output("y", DType::F32, &[]);
    (OnnxModel::from_bytes(&b.to_bytes(), "m", &ImportLimits::default()).unwrap(), inputs)
}

/// Runs `model` with BLAS and without on the host; returns whether the BLAS plan has a matmul step.
fn check(what: &str, (model, inputs): (OnnxModel, Vec<Tensor>)) -> bool {
    let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
    let blas = OnnxCompiler::new(model.clone(), OnnxOptions::default());
    let plain = OnnxCompiler::new(model, OnnxOptions::default().with_gemm(GemmEngine::Generated));
    let (got, want) = (run_on_host(&blas, &inputs).unwrap(), run_on_host(&plain, &inputs).unwrap());
    assert_eq!(got[0].dims(), want[0].dims(), "{what}: shape");
    let (TensorData::F32(g), TensorData::F32(w)) = (got[0].data(), want[0].data()) else { panic!("{what}: f32") };
    let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst <= 1e-4, "{what}: BLAS and generated GEMMs differ by {worst}");
    let matmuls = blas.plan_summary(&dims, BackendKind::Host).unwrap().matmuls;
    assert_eq!(plain.plan_summary(&dims, BackendKind::Host).unwrap().matmuls, 0, "{what}: generated means no BLAS");
    assert_eq!(blas.plan_summary(&dims, BackendKind::Cuda).unwrap().matmuls, matmuls, "{what}: GPU plan agrees");
    matmuls > 0
}

#[test]
fn matmuls_of_every_operand_shape_match_the_generated_gemm() {
    let cases: [(&str, &[&[usize]], bool); 8] = [
        ("2-D", &[&[5, 7], &[7, 3]], true),
        ("batched both", &[&[2, 3, 5, 7], &[2, 3, 7, 4]], true),
        ("shared B (one tall GEMM)", &[&[2, 3, 5, 7], &[7, 4]], true),
        ("shared A", &[&[5, 7], &[3, 7, 4]], true),
        ("1-D A", &[&[7], &[2, 7, 4]], true),
        ("1-D B", &[&[2, 5, 7], &[7]], true),
        ("B broadcast over one axis", &[&[2, 3, 5, 7], &[2, 1, 7, 4]], false),
        ("A broadcast over the other axis", &[&[1, 3, 5, 7], &[2, 3, 7, 4]], false),
    ];
    for (what, shapes, expect_blas) in cases {
        assert_eq!(check(what, model("MatMul", shapes, 0, &[])), expect_blas, "{what}: BLAS step or not");
        assert_eq!(check(what, model("MatMul", shapes, 1, &[])), expect_blas, "{what} (B constant)");
    }
}

#[test]
fn gemms_with_transposes_bias_and_scales_match_the_generated_gemm() {
    fn t(name: &str) -> (&str, Attribute) {
        (name, Attribute::Int(1))
    }
    fn f(name: &str, v: f32) -> (&str, Attribute) {
        (name, Attribute::Float(v))
    }
    type Case<'a> = (&'a str, Vec<&'a [usize]>, Vec<(&'a str, Attribute)>, bool);
    let cases: Vec<Case<'_>> = vec![
        ("plain", vec![&[4, 6], &[6, 5]], vec![], true),
        ("transA transB", vec![&[6, 4], &[5, 6]], vec![t("transA"), t("transB")], true),
        ("bias [n]", vec![&[4, 6], &[6, 5], &[5]], vec![], true),
        ("bias [1, n], alpha", vec![&[4, 6], &[6, 5], &[1, 5]], vec![f("alpha", 0.5)], true),
        // A constant C is scaled by beta at import; a C fed at run time keeps beta != 1: no BLAS bias.
        ("constant bias with beta 2", vec![&[4, 6], &[6, 5], &[5]], vec![f("beta", 2.0)], true),
        ("C [m, n]", vec![&[4, 6], &[6, 5], &[4, 5]], vec![], false),
        ("C [m, 1]", vec![&[4, 6], &[6, 5], &[4, 1]], vec![], false),
    ];
    for (what, shapes, attrs, expect_blas) in cases {
        let constants = shapes.len() - 1;
        assert_eq!(check(what, model("Gemm", &shapes, constants, &attrs)), expect_blas, "{what}: BLAS step or not");
    }
    let fed = model("Gemm", &[&[4, 6], &[6, 5], &[5]], 0, &[f("beta", 2.0)]);
    assert!(!check("bias fed at run time with beta 2", fed), "beta != 1 keeps the generated GEMM");
}

#[test]
fn precision_and_engine_are_part_of_the_compiler_identity() {
    use saggar_device::host::HostBackend;
    use saggar_dispatch::ProgramCompiler;
    let (m, _) = model("MatMul", &[&[5, 7], &[7, 3]], 0, &[]);
    let identity = |options: OnnxOptions| {
        format!("{:?}", ProgramCompiler::<HostBackend>::identity(&OnnxCompiler::new(m.clone(), options)))
    };
    let strict = identity(OnnxOptions::default());
    let tf32 = identity(OnnxOptions::default().with_precision(Precision::Tf32));
    let generated = identity(OnnxOptions::default().with_gemm(GemmEngine::Generated));
    assert!(strict.contains("\"fp32\"") && tf32.contains("\"tf32\""), "{strict} / {tf32}");
    assert!(strict != tf32 && strict != generated && tf32 != generated);
}

/// `y = relu?(x W + bias?)` as MatMul, Add, Relu nodes; `extra` makes the Add's output a graph
/// output too (so it cannot be fused away).
fn mlp_layer(bias: bool, relu: bool, bias_first: bool, extra: bool) -> (OnnxModel, Vec<Tensor>) {
    let mut b = ModelBuilder::new(13);
    b.input("x", DType::F32, &fixed(&[6, 8]));
    b.initializer("w", &f32s(&[8, 5], 3));
    b.initializer("bias", &f32s(&[5], 4));
    b.node("MatMul", &["x", "w"], &["h"], &[]);
    let mut last = "h";
    if bias {
        let inputs = if bias_first { ["bias", "h"] } else { ["h", "bias"] };
        b.node("Add", &inputs, &["hb"], &[]);
        last = "hb";
    }
    if relu {
        b.node("Relu", &[last], &["y"], &[]);
        last = "y";
    }
    b.output(last, DType::F32, &[]);
    if extra && last != "h" {
        b.output("h", DType::F32, &[]);
    }
    let model = OnnxModel::from_bytes(&b.to_bytes(), "m", &ImportLimits::default()).unwrap();
    (model, vec![f32s(&[6, 8], 5)])
}

#[test]
fn bias_and_relu_after_a_matmul_run_in_its_epilogue() {
    // (bias, relu, bias first, GEMM output also a graph output) -> steps of the BLAS plan.
    let cases = [
        ((true, true, false, false), 1),
        ((true, true, true, false), 1),
        ((true, false, false, false), 1),
        ((false, true, false, false), 1),
        ((true, true, false, true), 2),
    ];
    for ((bias, relu, first, extra), steps) in cases {
        let what = format!("bias {bias} relu {relu} bias first {first} GEMM output read elsewhere {extra}");
        let (model, inputs) = mlp_layer(bias, relu, first, extra);
        assert!(check(&what, (model.clone(), inputs)), "{what}: a BLAS step");
        let c = OnnxCompiler::new(model, OnnxOptions::default());
        for backend in [BackendKind::Host, BackendKind::Cuda] {
            let summary = c.plan_summary(&[vec![6, 8]], backend).unwrap();
            assert_eq!(summary.launches, steps, "{what} on {backend:?}: {summary:?}");
        }
    }
}

#[test]
fn a_fused_layer_feeding_another_gemm_shares_its_buffer() {
    let mut b = ModelBuilder::new(13);
    b.input("x", DType::F32, &fixed(&[6, 8]));
    b.initializer("w1", &f32s(&[8, 5], 3));
    b.initializer("b1", &f32s(&[1, 5], 4));
    b.initializer("w2", &f32s(&[5, 3], 6));
    b.node("MatMul", &["x", "w1"], &["h"], &[]);
    b.node("Add", &["h", "b1"], &["hb"], &[]);
    b.node("Relu", &["hb"], &["r"], &[]);
    b.node("MatMul", &["r", "w2"], &["y"], &[]);
    b.output("y", DType::F32, &[]);
    let model = OnnxModel::from_bytes(&b.to_bytes(), "m", &ImportLimits::default()).unwrap();
    assert!(check("two layers", (model.clone(), vec![f32s(&[6, 8], 5)])));
    let summary =
        OnnxCompiler::new(model, OnnxOptions::default()).plan_summary(&[vec![6, 8]], BackendKind::Cuda).unwrap();
    assert_eq!((summary.launches, summary.matmuls), (2, 2), "{summary:?}");
}
