//! Conv as im2col plus a GEMM checked on the host: synthetic convolutions (strides, padding,
//! dilation, `auto_pad`, 1x1, 3x3, 7x7 kernels, with and without bias, batch 1 and 3) and the
//! checked-in CNN give the same outputs through the im2col plan as through the direct kernel, the
//! im2col plan runs its products as matmul steps, and grouped convolutions keep the direct kernel.

use std::path::Path;

use saggar_device::BackendKind;
use saggar_onnx::builder::ModelBuilder;
use saggar_onnx::ops::Attribute;
use saggar_onnx::{
    ConvEngine, ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData, read_tensor_pb, run_on_host,
};
use saggar_shape::{DType, Dim};

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n as u32).map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) % 1997) as f32 / 1997.0 - 0.5).collect()
}

fn f32s(dims: &[usize], seed: u32) -> Tensor {
    Tensor::new(dims.to_vec(), TensorData::F32(values(dims.iter().product(), seed))).unwrap()
}

/// `Relu(Conv(x, w[, b]))` for input `[n, c, h, w]` and weights `[m, c / group, k0, k1]`.
fn conv_model(
    c: usize,
    m: usize,
    kernel: [usize; 2],
    group: usize,
    bias: bool,
    attrs: &[(&str, Attribute)],
) -> OnnxModel {
    let mut b = ModelBuilder::new(13);
    let sym = |s: &str| Dim::symbolic(s);
    b.input("x", DType::F32, &[sym("n"), Dim::Fixed(c as u64), sym("h"), sym("w")]);
    b.initializer("w", &f32s(&[m, c / group, kernel[0], kernel[1]], 7));
    let mut inputs = vec!["x", "w"];
    if bias {
        b.initializer("b", &f32s(&[m], 11));
        inputs.push("b");
    }
    b.node("Conv", &inputs, &["y"], attrs);
    b.node("Relu", &["y"], &["r"], &[]);
    b.output("r", DType::F32, &[sym("n"), Dim::Fixed(m as u64), sym("oh"), sym("ow")]);
    OnnxModel::from_bytes(&b.to_bytes(), "conv", &ImportLimits::default()).unwrap()
}

fn compilers(model: &OnnxModel) -> (OnnxCompiler, OnnxCompiler) {
    let im2col = OnnxCompiler::new(model.clone(), OnnxOptions::default());
    let direct = OnnxCompiler::new(model.clone(), OnnxOptions::default().with_conv(ConvEngine::Direct));
    (im2col, direct)
}

fn assert_close(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.dims(), want.dims(), "{what}");
    let (TensorData::F32(g), TensorData::F32(w)) = (got.data(), want.data()) else { panic!("{what}: not f32") };
    for (i, (a, b)) in g.iter().zip(w).enumerate() {
        assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{what}: element {i}: {a} vs {b}");
    }
}

/// A name, input channels, output channels, kernel, whether it has a bias, and attributes.
type Case = (&'static str, usize, usize, [usize; 2], bool, Vec<(&'static str, Attribute)>);

#[test]
fn im2col_convolutions_match_the_direct_kernel_on_the_host() {
    use Attribute::{Ints, String as Str};
    let cases: Vec<Case> = vec![
        ("3x3 padded", 3, 4, [3, 3], true, vec![("pads", Ints(vec![1, 1, 1, 1]))]),
        ("3x3 strided", 2, 5, [3, 3], false, vec![("strides", Ints(vec![2, 1]))]),
        ("3x3 dilated", 3, 2, [3, 3], true, vec![("dilations", Ints(vec![2, 2])), ("pads", Ints(vec![2, 1, 0, 2]))]),
        ("1x1", 6, 4, [1, 1], true, vec![]),
        ("1x1 strided", 6, 4, [1, 1], false, vec![("strides", Ints(vec![2, 2]))]),
        ("1x1 padded", 3, 4, [1, 1], true, vec![("pads", Ints(vec![1, 0, 1, 0]))]),
        ("7x7 stem", 3, 4, [7, 7], true, vec![("strides", Ints(vec![2, 2])), ("pads", Ints(vec![3, 3, 3, 3]))]),
        ("1x3 same upper", 2, 3, [1, 3], true, vec![("auto_pad", Str("SAME_UPPER".into()))]),
    ];
    for (what, c, m, kernel, bias, attrs) in cases {
        let model = conv_model(c, m, kernel, 1, bias, &attrs);
        let (_, direct) = compilers(&model);
        for engine in [ConvEngine::Im2col, ConvEngine::Nhwc] {
            let gemm = OnnxCompiler::new(model.clone(), OnnxOptions::default().with_conv(engine));
            for (n, h, w) in [(1, 9, 8), (3, 11, 7)] {
                let x = f32s(&[n, c, h, w], 3);
                let got = run_on_host(&gemm, std::slice::from_ref(&x)).unwrap();
                let want = run_on_host(&direct, std::slice::from_ref(&x)).unwrap();
                assert_close(&got[0], &want[0], &format!("{what} batch {n} conv={}", engine.name()));
                let dims = [vec![n as u64, c as u64, h as u64, w as u64]];
                for backend in [BackendKind::Host, BackendKind::Cuda] {
                    let plan = gemm.plan_summary(&dims, backend).unwrap();
                    assert_eq!(plan.matmuls, 1, "{what} on {backend:?}: one matmul step for every image");
                    assert_eq!(direct.plan_summary(&dims, backend).unwrap().matmuls, 0, "{what}: direct");
                }
            }
        }
    }
}

#[test]
fn grouped_convolutions_keep_the_direct_kernel() {
    let model = conv_model(4, 6, [3, 3], 2, true, &[("group", Attribute::Int(2))]);
    let (im2col, direct) = compilers(&model);
    let x = f32s(&[2, 4, 6, 5], 5);
    let dims = [vec![2, 4, 6, 5]];
    assert_eq!(im2col.plan_summary(&dims, BackendKind::Cuda).unwrap().matmuls, 0);
    let (got, want) = (run_on_host(&im2col, std::slice::from_ref(&x)).unwrap(), run_on_host(&direct, &[x]).unwrap());
    assert_close(&got[0], &want[0], "grouped");
}

#[test]
fn the_cnn_model_through_im2col_matches_the_direct_kernel_and_its_reference() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join("cnn");
    let model = OnnxModel::load(root.join("model.onnx")).unwrap();
    let (_, direct) = compilers(&model);
    for (engine, set) in ConvEngine::ALL.into_iter().flat_map(|e| [(e, 0), (e, 1)]) {
        let im2col = OnnxCompiler::new(model.clone(), OnnxOptions::default().with_conv(engine));
        let set = root.join(format!("test_data_set_{set}"));
        let x = read_tensor_pb(&set.join("input_0.pb")).unwrap().tensor;
        let reference = read_tensor_pb(&set.join("output_0.pb")).unwrap().tensor;
        let got = run_on_host(&im2col, std::slice::from_ref(&x)).unwrap();
        let want = run_on_host(&direct, std::slice::from_ref(&x)).unwrap();
        assert_close(&got[0], &want[0], &format!("{} im2col vs direct", set.display()));
        assert_close(&got[0], &reference, &format!("{} im2col vs reference", set.display()));
        let dims = [x.dims().iter().map(|&d| d as u64).collect::<Vec<_>>()];
        let (a, b) = (
            im2col.plan_summary(&dims, BackendKind::Cuda).unwrap(),
            direct.plan_summary(&dims, BackendKind::Cuda).unwrap(),
        );
        if engine != ConvEngine::Direct {
            assert!(
                a.matmuls > b.matmuls,
                "{}: the convs became matmul steps: {} vs {}",
                engine.name(),
                a.matmuls,
                b.matmuls
            );
        }
    }
}

/// `Relu(ConvTranspose(x, w[, b]))` for input `[n, c, h, w]` and weights `[c, m, k0, k1]`: an
/// initializer, or with `weights_input` the model's second input.
fn conv_transpose_model(
    c: usize,
    m: usize,
    kernel: [usize; 2],
    bias: bool,
    attrs: &[(&str, Attribute)],
    weights_input: bool,
) -> OnnxModel {
    let mut b = ModelBuilder::new(17);
    let sym = |s: &str| Dim::symbolic(s);
    b.input("x", DType::F32, &[sym("n"), Dim::Fixed(c as u64), sym("h"), sym("w")]);
    let weight_dims = [c, m, kernel[0], kernel[1]];
    if weights_input {
        b.input("w", DType::F32, &weight_dims.map(|d| Dim::Fixed(d as u64)));
    } else {
        b.initializer("w", &f32s(&weight_dims, 7));
    }
    let mut inputs = vec!["x", "w"];
    if bias {
        b.initializer("b", &f32s(&[m], 11));
        inputs.push("b");
    }
    b.node("ConvTranspose", &inputs, &["y"], attrs);
    b.node("Relu", &["y"], &["r"], &[]);
    b.output("r", DType::F32, &[sym("n"), Dim::Fixed(m as u64), sym("oh"), sym("ow")]);
    OnnxModel::from_bytes(&b.to_bytes(), "conv_transpose", &ImportLimits::default()).unwrap()
}

/// A transposed convolution whose stride is its square kernel (a UNet's upsampling) runs as one
/// product and a pixel shuffle, equal to the direct kernel; other geometries keep the direct kernel.
/// Constant weights are transposed once at compile; weights the caller binds, by a kernel each run.
#[test]
fn transposed_convolutions_with_stride_equal_to_the_kernel_run_as_a_product_and_a_shuffle() {
    use Attribute::Ints;
    // (what, c, m, kernel, bias, attributes, matmul steps)
    type Transposed = (&'static str, usize, usize, [usize; 2], bool, Vec<(&'static str, Attribute)>, usize);
    let cases: Vec<Transposed> = vec![
        ("2x2 stride 2, bias", 6, 4, [2, 2], true, vec![("strides", Ints(vec![2, 2]))], 1),
        (
            "3x3 stride 3",
            3,
            5,
            [3, 3],
            false,
            vec![("strides", Ints(vec![3, 3])), ("kernel_shape", Ints(vec![3, 3]))],
            1,
        ),
        ("2x2 stride 1", 3, 4, [2, 2], true, vec![], 0),
        (
            "2x2 stride 2 padded",
            3,
            4,
            [2, 2],
            true,
            vec![("strides", Ints(vec![2, 2])), ("pads", Ints(vec![1, 1, 1, 1]))],
            0,
        ),
        ("2x3 stride 2x3", 3, 4, [2, 3], true, vec![("strides", Ints(vec![2, 3]))], 0),
    ];
    for (what, c, m, kernel, bias, attrs, matmuls) in cases {
        let model = conv_transpose_model(c, m, kernel, bias, &attrs, false);
        let bound = conv_transpose_model(c, m, kernel, bias, &attrs, true);
        let (gemm, direct) = compilers(&model);
        let (bound_gemm, _) = compilers(&bound);
        let weights = f32s(&[c, m, kernel[0], kernel[1]], 7);
        for (n, h, w) in [(1, 5, 4), (3, 7, 6)] {
            let x = f32s(&[n, c, h, w], 3);
            let got = run_on_host(&gemm, std::slice::from_ref(&x)).unwrap();
            let want = run_on_host(&direct, std::slice::from_ref(&x)).unwrap();
            assert_close(&got[0], &want[0], &format!("{what} batch {n}"));
            assert_close(&got[0], &model.run_once(std::slice::from_ref(&x)).unwrap()[0], &format!("{what} reference"));
            let with_weights = [x.clone(), weights.clone()];
            assert_close(
                &run_on_host(&bound_gemm, &with_weights).unwrap()[0],
                &want[0],
                &format!("{what} bound weights"),
            );
            let dims = [vec![n as u64, c as u64, h as u64, w as u64]];
            let bound_dims = [dims[0].clone(), [c, m, kernel[0], kernel[1]].map(|d| d as u64).to_vec()];
            for backend in [BackendKind::Host, BackendKind::Cuda] {
                let plan = gemm.plan_summary(&dims, backend).unwrap();
                assert_eq!(plan.matmuls, matmuls, "{what} on {backend:?}");
                let bound_plan = bound_gemm.plan_summary(&bound_dims, backend).unwrap();
                // The bound weights' per-run transpose is the one launch the constant form saves.
                assert_eq!(bound_plan.launches, plan.launches + matmuls, "{what} on {backend:?}");
            }
        }
    }
}
