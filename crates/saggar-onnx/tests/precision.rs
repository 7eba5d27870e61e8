//! `--precision fp16|bf16` on an f32 model, on the host backend (half storage and rounding, f32
//! accumulation: what the GPUs' tensor cores compute): the weight products read half weights and
//! half activations and write f32, so the model's results equal, to f32 accumulation order, the same
//! computation by hand with the products' inputs rounded to the half type. Keep lists, their errors
//! and the compiler identity.

use half::{bf16, f16};
use saggar_device::BackendKind;
use saggar_device::host::HostBackend;
use saggar_dispatch::ProgramCompiler;
use saggar_onnx::builder::ModelBuilder;
use saggar_onnx::{
    GemmEngine, ImportLimits, OnnxCompiler, OnnxError, OnnxModel, OnnxOptions, Precision, Tensor, TensorData,
    run_on_host,
};
use saggar_shape::{DType, Dim};

const ROWS: usize = 6;

fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x % 2001) as f32 / 700.0 - 1.43
        })
        .collect()
}

/// Rounds every value to `half` and back: what a half tensor holds.
fn round(v: &[f32], half: DType) -> Vec<f32> {
    v.iter()
        .map(|&x| if half == DType::BF16 { bf16::from_f32(x).to_f32() } else { f16::from_f32(x).to_f32() })
        .collect()
}

fn tensor(dims: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::new(dims.to_vec(), TensorData::F32(v)).unwrap()
}

/// `y = Gemm(relu(x W1 + b1), W2, c)` and `z = x W3`: two products share the input `x`.
fn model() -> OnnxModel {
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &[Dim::Fixed(ROWS as u64), Dim::Fixed(16)]);
    b.initializer("w1", &tensor(&[16, 32], values(512, 1)));
    b.initializer("b1", &tensor(&[32], values(32, 2)));
    b.initializer("w2", &tensor(&[32, 8], values(256, 3)));
    b.initializer("c", &tensor(&[8], values(8, 4)));
    b.initializer("w3", &tensor(&[16, 4], values(64, 5)));
    b.node("MatMul", &["x", "w1"], &["p"], &[]);
    b.node("Add", &["p", "b1"], &["q"], &[]);
    b.node("Relu", &["q"], &["h"], &[]);
    b.node("Gemm", &["h", "w2", "c"], &["y"], &[]);
    b.node("MatMul", &["x", "w3"], &["z"], &[]);
    b.output("y", DType::F32, &[]);
    b.output("z", DType::F32, &[]);
    OnnxModel::from_bytes(&b.to_bytes(), "mixed", &ImportLimits::default()).unwrap()
}

/// `a [m, k] x b [k, n]` in f32, in order.
fn product(a: &[f32], b: &[f32], k: usize, n: usize) -> Vec<f32> {
    let m = a.len() / k;
    (0..m * n).map(|i| (0..k).map(|p| a[i / n * k + p] * b[p * n + i % n]).sum()).collect()
}

/// [`model`] by hand with the products' inputs rounded to `half`: what fp16/bf16 must compute. The
/// first product's result feeds only the Relu, so it is written in half, its bias rounded to half
/// and added in f32 first; the other results are graph outputs, written in f32.
fn by_hand(half: DType) -> Vec<Vec<f32>> {
    let x = round(&values(ROWS * 16, 9), half);
    let p = product(&x, &round(&values(512, 1), half), 16, 32);
    let b1 = round(&values(32, 2), half);
    let q: Vec<f32> = p.iter().enumerate().map(|(i, v)| v + b1[i % 32]).collect();
    let h: Vec<f32> = round(&q, half).iter().map(|v| v.max(0.0)).collect();
    let c = values(8, 4);
    let y = product(&round(&h, half), &round(&values(256, 3), half), 32, 8);
    let y = y.iter().enumerate().map(|(i, v)| v + c[i % 8]).collect();
    vec![y, product(&x, &round(&values(64, 5), half), 16, 4)]
}

fn input() -> Vec<Tensor> {
    vec![tensor(&[ROWS, 16], values(ROWS * 16, 9))]
}

fn run(options: OnnxOptions) -> Vec<Vec<f32>> {
    let outputs = run_on_host(&OnnxCompiler::try_new(model(), options).unwrap(), &input()).unwrap();
    outputs.iter().map(|t| t.to_f32s().unwrap()).collect()
}

fn worst(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter().flatten().zip(b.iter().flatten()).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn half_products_equal_f32_products_of_rounded_inputs() {
    let exact = run(OnnxOptions::default());
    for (precision, half) in [(Precision::Fp16, DType::F16), (Precision::Bf16, DType::BF16)] {
        let rounded = by_hand(half);
        for gemm in [GemmEngine::BlasLt, GemmEngine::Generated] {
            let got = run(OnnxOptions::default().with_precision(precision).with_gemm(gemm));
            let err = worst(&got, &rounded);
            assert!(err <= 2e-5, "{precision} {gemm:?}: {err} from the computation by hand");
            // And the rounding is real: the half results are not the f32 ones.
            assert!(worst(&got, &exact) > 1e-4, "{precision} {gemm:?}: no rounding happened");
        }
    }
}

#[test]
fn tf32_and_fp32_leave_the_model_f32_on_host() {
    let exact = run(OnnxOptions::default());
    assert_eq!(run(OnnxOptions::default().with_precision(Precision::Tf32)), exact);
}

#[test]
fn half_weights_are_packed_once_in_half() {
    let bytes = |o: OnnxOptions| OnnxCompiler::new(model(), o).weight_bytes();
    let (f32_bytes, f16_bytes) =
        (bytes(OnnxOptions::default()), bytes(OnnxOptions::default().with_precision(Precision::Fp16)));
    // 832 weights of 4 bytes become 2 bytes each; the 40 bias values stay f32.
    assert!(f16_bytes + 832 * 2 - 256 <= f32_bytes, "{f32_bytes} -> {f16_bytes}");
    let kept = OnnxOptions::default().with_precision(Precision::Fp16).with_keep_fp32(["MatMul", "Gemm"]);
    assert_eq!(bytes(kept), f32_bytes, "everything kept: nothing converted");
}

#[test]
fn a_keep_list_keeps_products_in_f32_by_op_type_or_node_name() {
    let exact = run(OnnxOptions::default());
    let fp16 = || OnnxOptions::default().with_precision(Precision::Fp16);
    assert_eq!(run(fp16().with_keep_fp32(["MatMul", "Gemm"])), exact);
    let model = model();
    let gemm = model.graph().nodes.iter().find(|n| n.op_type == "Gemm").unwrap().name.clone();
    let only_gemm_kept = run(fp16().with_keep_fp32(["MatMul".to_string(), gemm]));
    assert_eq!(only_gemm_kept, exact, "the Gemm node by name, the MatMuls by type");
    let matmuls_half = run(fp16().with_keep_fp32(["Gemm"]));
    assert!(worst(&matmuls_half, &exact) > 1e-4 && matmuls_half[0] != exact[0]);
}

#[test]
fn a_keep_list_entry_naming_nothing_is_a_typed_error() {
    let options = OnnxOptions::default().with_precision(Precision::Fp16).with_keep_fp32(["LayerNorm"]);
    match OnnxCompiler::try_new(model(), options.clone()) {
        Err(OnnxError::Precision { reason, .. }) => assert!(reason.contains("`LayerNorm`"), "{reason}"),
        other => panic!("expected a precision error, got {other:?}"),
    }
    // `new` defers it to the first compile, on every backend.
    let compiler = OnnxCompiler::new(model(), options);
    assert!(matches!(
        compiler.plan_summary(&[vec![ROWS as u64, 16]], BackendKind::Cuda),
        Err(OnnxError::Precision { .. })
    ));
}

#[test]
fn the_precision_and_keep_list_are_part_of_the_identity() {
    let id = |o: OnnxOptions| format!("{:?}", ProgramCompiler::<HostBackend>::identity(&OnnxCompiler::new(model(), o)));
    let fp16 = OnnxOptions::default().with_precision(Precision::Fp16);
    let ids = [
        id(OnnxOptions::default()),
        id(fp16.clone()),
        id(OnnxOptions::default().with_precision(Precision::Bf16)),
        id(fp16.with_keep_fp32(["Gemm"])),
    ];
    for (i, a) in ids.iter().enumerate() {
        assert!(ids[i + 1..].iter().all(|b| a != b), "{a}");
    }
}

#[test]
fn gpu_plans_run_half_products_as_blas_steps() {
    let dims = [vec![ROWS as u64, 16]];
    let compiler = OnnxCompiler::new(model(), OnnxOptions::default().with_precision(Precision::Fp16));
    assert_eq!(compiler.plan_summary(&dims, BackendKind::Cuda).unwrap().matmuls, 3);
    let source = compiler.gpu_source(&dims[0..1]).unwrap();
    assert!(source.contains("onnx_f32_to_f16"), "the casts of x and h are in the generated kernels");
}

#[test]
fn precision_names_parse_as_the_cli_writes_them() {
    for p in Precision::ALL {
        assert_eq!(p.name().parse::<Precision>(), Ok(p));
    }
    assert_eq!("f32".parse::<Precision>(), Ok(Precision::Fp32));
    assert!("fp8".parse::<Precision>().unwrap_err().contains("fp32"));
}

/// `y = conv(relu(conv(x, W) + b), W2)`: 3x3 kernels with padding (im2col and a GEMM), then a
/// pointwise conv (its input is the patch matrix).
fn conv_model() -> OnnxModel {
    use saggar_onnx::ops::Attribute;
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &[2, 3, 8, 8].map(Dim::Fixed));
    b.initializer("w", &tensor(&[4, 3, 3, 3], values(108, 11)));
    b.initializer("b", &tensor(&[4], values(4, 12)));
    b.initializer("w2", &tensor(&[5, 4, 1, 1], values(20, 13)));
    b.node("Conv", &["x", "w", "b"], &["c"], &[("pads", Attribute::Ints(vec![1, 1, 1, 1]))]);
    b.node("Relu", &["c"], &["h"], &[]);
    b.node("Conv", &["h", "w2"], &["y"], &[]);
    b.output("y", DType::F32, &[]);
    OnnxModel::from_bytes(&b.to_bytes(), "conv", &ImportLimits::default()).unwrap()
}

/// Both conv engines at fp16 and bf16: im2col over half images and a half BLAS step, and the direct
/// kernel reading half operands, agree to accumulation order, and both round.
#[test]
fn half_convolutions_agree_across_engines_and_round() {
    use saggar_onnx::ConvEngine;
    let x = vec![tensor(&[2, 3, 8, 8], values(384, 14))];
    let run = |o: OnnxOptions| -> Vec<Vec<f32>> {
        let out = run_on_host(&OnnxCompiler::new(conv_model(), o), &x).unwrap();
        out.iter().map(|t| t.to_f32s().unwrap()).collect()
    };
    let exact = run(OnnxOptions::default());
    for precision in [Precision::Fp16, Precision::Bf16] {
        let half = |conv| run(OnnxOptions::default().with_precision(precision).with_conv(conv));
        let (im2col, direct, nhwc) = (half(ConvEngine::Im2col), half(ConvEngine::Direct), half(ConvEngine::Nhwc));
        assert!(worst(&im2col, &direct) <= 2e-5, "{precision}: engines differ by {}", worst(&im2col, &direct));
        assert!(worst(&nhwc, &direct) <= 2e-5, "{precision}: nhwc differs by {}", worst(&nhwc, &direct));
        let err = worst(&im2col, &exact);
        let bound = if precision == Precision::Fp16 { 2e-2 } else { 1.5e-1 };
        assert!(err > 1e-4 && err < bound, "{precision}: {err} from f32");
    }
    let dims = [vec![2, 3, 8, 8]];
    let fp16 = OnnxCompiler::new(conv_model(), OnnxOptions::default().with_precision(Precision::Fp16));
    assert_eq!(fp16.plan_summary(&dims, BackendKind::Cuda).unwrap().matmuls, 2, "both convolutions are half GEMMs");
}

/// A product reading a reshaped activation (GPT-2's Conv1D: `Reshape` then `Gemm`): the Cast goes
/// before the view, so it fuses into the kernel computing the activation (no launch of its own),
/// and the result is still the product of the rounded activation.
#[test]
fn a_reshaped_activation_is_cast_before_its_view() {
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &[Dim::Fixed(2), Dim::Fixed(3), Dim::Fixed(16)]);
    b.initializer("shape", &Tensor::from_i64s(vec![6, 16]));
    b.initializer("w", &tensor(&[16, 4], values(64, 5)));
    b.node("Relu", &["x"], &["r"], &[]);
    b.node("Reshape", &["r", "shape"], &["v"], &[]);
    b.node("MatMul", &["v", "w"], &["y"], &[]);
    b.output("y", DType::F32, &[]);
    let model = OnnxModel::from_bytes(&b.to_bytes(), "view", &ImportLimits::default()).unwrap();
    let x = values(96, 9);
    let dims = [vec![2, 3, 16]];
    let launches = |precision| {
        let options = OnnxOptions::default().with_precision(precision);
        OnnxCompiler::new(model.clone(), options).plan_summary(&dims, BackendKind::Cuda).unwrap().launches
    };
    assert_eq!(launches(Precision::Fp16), launches(Precision::Fp32), "Relu computes the half copy itself");
    for (precision, half) in [(Precision::Fp16, DType::F16), (Precision::Bf16, DType::BF16)] {
        let compiler = OnnxCompiler::new(model.clone(), OnnxOptions::default().with_precision(precision));
        let got = run_on_host(&compiler, &[tensor(&[2, 3, 16], x.clone())]).unwrap()[0].to_f32s().unwrap();
        let relu: Vec<f32> = x.iter().map(|v| v.max(0.0)).collect();
        let want = product(&round(&relu, half), &round(&values(64, 5), half), 16, 4);
        assert!(worst(&[got], &[want]) < 1e-5, "{precision}");
    }
}

/// `int8` on an f32 model: without calibration data it is refused saying what to pass; with it,
/// the three weight products run as `i8` products (per-tensor activation, per-channel weight scales)
/// within int8's rounding of strict f32, and the calibration data is part of the compiler identity.
#[test]
fn int8_calibrates_an_f32_model_and_refuses_one_without_data() {
    let refused = OnnxCompiler::try_new(model(), OnnxOptions::default().with_precision(Precision::Int8)).unwrap_err();
    assert!(
        matches!(&refused, OnnxError::Precision { reason, .. } if reason.contains("--calibration-inputs")),
        "{refused}"
    );
    let sets: Vec<Vec<Tensor>> = (0..3).map(|s| vec![tensor(&[ROWS, 16], values(ROWS * 16, 20 + s))]).collect();
    let int8 = OnnxOptions::default().with_precision(Precision::Int8);
    let calibrated = int8.clone().with_calibration(saggar_onnx::Calibration::new(sets.clone()));
    let exact = run(OnnxOptions::default());
    let got = run(calibrated.clone());
    let largest = exact.iter().flatten().fold(0f32, |m, v| m.max(v.abs()));
    let err = worst(&got, &exact);
    assert!(err > 0.0, "the products ran in int8, not f32");
    assert!(err <= 3e-2 * largest, "int8 error {err} against {largest}");
    let id = |o: OnnxOptions| format!("{:?}", ProgramCompiler::<HostBackend>::identity(&OnnxCompiler::new(model(), o)));
    let other = int8.with_calibration(saggar_onnx::Calibration::new(sets[..1].to_vec()));
    assert_ne!(id(calibrated), id(other), "the calibration data keys the programs");
}
