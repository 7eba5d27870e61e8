//! The import passes: shape chains folded, dead nodes removed, Identity/Dropout and same-type Casts
//! removed,
//! BatchNormalization folded into Conv and Gemm normalised, each with outputs unchanged.

use saggar_onnx::builder::ModelBuilder;
use saggar_onnx::ops::Attribute;
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData, run_on_host};
use saggar_shape::{DType, Dim};

fn import(b: &ModelBuilder) -> OnnxModel {
    OnnxModel::from_bytes(&b.to_bytes(), "m", &ImportLimits::default()).unwrap()
}

fn ops(m: &OnnxModel) -> Vec<&str> {
    m.graph().nodes.iter().map(|n| n.op_type.as_str()).collect()
}

fn f32s(dims: &[usize], seed: u32) -> Tensor {
    let n = dims.iter().product::<usize>();
    Tensor::new(
        dims.to_vec(),
        TensorData::F32((0..n).map(|i| ((i as u32 * 37 + seed) % 17) as f32 / 8.0 - 1.0).collect()),
    )
    .unwrap()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    match (a.data(), b.data()) {
        (TensorData::F32(x), TensorData::F32(y)) => x.iter().zip(y).map(|(p, q)| (p - q).abs()).fold(0.0, f32::max),
        _ => f32::INFINITY,
    }
}

#[test]
fn static_shape_chains_fold_and_dead_nodes_go() {
    let mut b = ModelBuilder::new(13);
    b.input("x", DType::F32, &[Dim::Fixed(2), Dim::Fixed(3), Dim::Fixed(4)]);
    b.initializer("i0", &Tensor::from_i64s(vec![0]));
    b.initializer("minus", &Tensor::from_i64s(vec![-1]));
    b.node("Shape", &["x"], &["s"], &[]);
    b.node("Gather", &["s", "i0"], &["b"], &[("axis", Attribute::Int(0))]);
    b.node("Concat", &["b", "minus"], &["target"], &[("axis", Attribute::Int(0))]);
    b.node("Reshape", &["x", "target"], &["y"], &[]);
    b.node("Relu", &["x"], &["unused"], &[]);
    b.node("Dropout", &["y"], &["z"], &[]);
    b.output("z", DType::F32, &[]);
    let m = import(&b);
    assert_eq!(ops(&m), vec!["Reshape"], "Shape/Gather/Concat folded, Relu dead, Dropout removed");
    assert_eq!(m.outputs()[0].dims(), &[Dim::Fixed(2), Dim::Fixed(12)]);
}

/// A Cast to the type its input has goes (GPT-2's `attn_weights.type(value.dtype)` between Softmax
/// and the product, which kept attention unfused); a Cast that changes the type stays.
#[test]
fn casts_to_their_inputs_own_type_are_removed() {
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &[Dim::Fixed(2), Dim::Fixed(3)]);
    b.node("Softmax", &["x"], &["p"], &[("axis", Attribute::Int(-1))]);
    b.node("Cast", &["p"], &["same"], &[("to", Attribute::Int(1))]);
    b.node("CastLike", &["same", "x"], &["like"], &[]);
    b.node("Cast", &["like"], &["half"], &[("to", Attribute::Int(10))]);
    b.output("half", DType::F16, &[]);
    let m = import(&b);
    assert_eq!(ops(&m), vec!["Softmax", "Cast"], "the f32 -> f32 Cast and CastLike are gone");
}

#[test]
fn batch_normalization_folds_into_the_conv_before_it() {
    let mut b = ModelBuilder::new(13);
    b.input("x", DType::F32, &[Dim::symbolic("n"), Dim::Fixed(2), Dim::Fixed(5), Dim::Fixed(5)]);
    b.initializer("w", &f32s(&[3, 2, 3, 3], 1));
    b.initializer("bias", &f32s(&[3], 2));
    b.initializer("scale", &f32s(&[3], 3));
    b.initializer("shift", &f32s(&[3], 4));
    b.initializer("mean", &f32s(&[3], 5));
    b.initializer("var", &Tensor::new(vec![3], TensorData::F32(vec![0.5, 1.0, 2.0])).unwrap());
    b.node("Conv", &["x", "w", "bias"], &["c"], &[("pads", Attribute::Ints(vec![1, 1, 1, 1]))]);
    b.node(
        "BatchNormalization",
        &["c", "scale", "shift", "mean", "var"],
        &["y"],
        &[("epsilon", Attribute::Float(1e-3))],
    );
    b.output("y", DType::F32, &[]);
    let m = import(&b);
    assert_eq!(ops(&m), vec!["Conv"]);
    // The unfused model (BatchNormalization after a Conv whose output is also a graph output).
    b.output("c", DType::F32, &[]);
    let unfused = import(&b);
    assert_eq!(ops(&unfused), vec!["Conv", "BatchNormalization"]);
    let x = f32s(&[2, 2, 5, 5], 9);
    let fused = m.run_once(std::slice::from_ref(&x)).unwrap();
    let reference = unfused.run_once(&[x]).unwrap();
    assert!(max_diff(&fused[0], &reference[0]) < 1e-4);
}

#[test]
fn gemm_is_normalised_to_a_pre_transposed_scaled_b() {
    let mut b = ModelBuilder::new(13);
    b.input("a", DType::F32, &[Dim::symbolic("batch"), Dim::Fixed(4)]);
    b.initializer("b", &f32s(&[3, 4], 1));
    b.initializer("c", &f32s(&[3], 2));
    b.node(
        "Gemm",
        &["a", "b", "c"],
        &["y"],
        &[("transB", Attribute::Int(1)), ("alpha", Attribute::Float(0.5)), ("beta", Attribute::Float(2.0))],
    );
    b.output("y", DType::F32, &[]);
    let m = import(&b);
    let gemm = &m.graph().nodes[0];
    assert!(
        gemm.attrs.get("transB").is_none() && gemm.attrs.get("alpha").is_none() && gemm.attrs.get("beta").is_none()
    );
    let new_b = m.graph().value(gemm.inputs[1].unwrap()).constant.as_ref().unwrap();
    assert_eq!(new_b.dims(), &[4, 3]);
    let x = f32s(&[2, 4], 3);
    // y = 0.5 * a @ b^T + 2 * c, by hand.
    let (TensorData::F32(av), TensorData::F32(bv), TensorData::F32(cv)) =
        (x.data(), f32s(&[3, 4], 1).data().clone(), f32s(&[3], 2).data().clone())
    else {
        panic!()
    };
    let want: Vec<f32> = (0..2)
        .flat_map(|r| (0..3).map(move |j| (r, j)))
        .map(|(r, j)| 0.5 * (0..4).map(|k| av[r * 4 + k] * bv[j * 4 + k]).sum::<f32>() + 2.0 * cv[j])
        .collect();
    let compiled = run_on_host(&OnnxCompiler::new(m, OnnxOptions::default()), &[x]).unwrap();
    assert!(max_diff(&compiled[0], &Tensor::new(vec![2, 3], TensorData::F32(want)).unwrap()) < 1e-5);
}

#[test]
fn views_share_memory_launch_nothing_and_keep_their_source_alive() {
    // a = Relu(x); b = Reshape(a); c = Neg(b); d = Reshape(c); e = a + d: `a` is read after its
    // view, so the shared block must outlive both, and `c` must not be placed over it.
    let mut b = ModelBuilder::new(13);
    b.input("x", DType::F32, &[Dim::symbolic("batch"), Dim::Fixed(6)]);
    b.initializer("s34", &Tensor::from_i64s(vec![-1, 3]));
    b.initializer("s26", &Tensor::from_i64s(vec![-1, 6]));
    b.node("Relu", &["x"], &["a"], &[]);
    b.node("Reshape", &["a", "s34"], &["b"], &[]);
    b.node("Neg", &["b"], &["c"], &[]);
    b.node("Reshape", &["c", "s26"], &["d"], &[]);
    b.node("Add", &["a", "d"], &["e"], &[]);
    b.node("Unsqueeze", &["e", "axes"], &["f"], &[]);
    b.initializer("axes", &Tensor::from_i64s(vec![0]));
    b.output("f", DType::F32, &[]);
    let m = import(&b);
    let compiler = OnnxCompiler::new(m.clone(), OnnxOptions::default());
    let launches = compiler.plan_summary(&[vec![2, 6]], saggar_device::BackendKind::Host).unwrap().launches;
    assert_eq!(launches, 4, "Relu, Neg, Add, and the Unsqueeze that writes the graph output");
    let x = f32s(&[2, 6], 4);
    let eager = m.run_once(std::slice::from_ref(&x)).unwrap();
    let compiled = run_on_host(&compiler, &[x]).unwrap();
    assert_eq!(eager, compiled);
    let TensorData::F32(v) = compiled[0].data() else { panic!("f32") };
    assert!(v.iter().all(|&y| y == 0.0), "relu(x) - relu(x) is zero everywhere");
}
