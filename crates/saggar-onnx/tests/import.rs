//! Import: symbolic shapes, folding of exporter shape chains, and the eager reference run.

use saggar_onnx::builder::ModelBuilder;
use saggar_onnx::ops::Attribute;
use saggar_onnx::{ImportLimits, OnnxModel, Tensor, TensorData};
use saggar_shape::{DType, Dim};

fn sym(s: &str) -> Dim {
    Dim::symbolic(s)
}

/// `y = Reshape(x, Concat(Shape(x)[0], [-1]))` then `+ 1`: the chain exporters emit for flatten.
fn flatten_chain() -> ModelBuilder {
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &[sym("batch"), Dim::Fixed(2), Dim::Fixed(3)]);
    b.initializer("zero", &Tensor::from_i64s(vec![0]).reshaped(vec![]).unwrap());
    b.initializer("minus_one", &Tensor::from_i64s(vec![-1]));
    b.initializer("one", &Tensor::new(vec![], TensorData::F32(vec![1.0])).unwrap());
    b.initializer("axes0", &Tensor::from_i64s(vec![0]));
    b.node("Shape", &["x"], &["s"], &[]);
    b.node("Gather", &["s", "zero"], &["b"], &[("axis", Attribute::Int(0))]);
    b.node("Unsqueeze", &["b", "axes0"], &["b1"], &[]);
    b.node("Concat", &["b1", "minus_one"], &["target"], &[("axis", Attribute::Int(0))]);
    b.node("Reshape", &["x", "target"], &["flat"], &[]);
    b.node("Identity", &["flat"], &["flat2"], &[]);
    b.node("Add", &["flat2", "one"], &["y"], &[]);
    b.output("y", DType::F32, &[sym("batch"), Dim::Fixed(6)]);
    b
}

#[test]
fn symbolic_batch_flows_through_a_shape_chain() {
    let model = OnnxModel::from_bytes(&flatten_chain().to_bytes(), "flatten", &ImportLimits::default()).unwrap();
    assert_eq!(model.outputs()[0].dims(), &[sym("batch"), Dim::Fixed(6)]);
    // Identity is gone; the shape chain stays (it depends on the batch) until shapes are concrete.
    assert!(model.graph().nodes.iter().all(|n| n.op_type != "Identity"));
    let x = Tensor::new(vec![3, 2, 3], TensorData::F32((0..18).map(|i| i as f32).collect())).unwrap();
    let y = model.run_once(&[x]).unwrap();
    assert_eq!(y[0].dims(), &[3, 6]);
    assert_eq!(y[0].data(), &TensorData::F32((1..19).map(|i| i as f32).collect()));
}

#[test]
fn compiled_host_program_matches_the_eager_run() {
    let model = OnnxModel::from_bytes(&flatten_chain().to_bytes(), "flatten", &ImportLimits::default()).unwrap();
    let compiler = saggar_onnx::OnnxCompiler::new(model.clone(), saggar_onnx::OnnxOptions::default());
    for batch in [1usize, 3, 17] {
        let x =
            Tensor::new(vec![batch, 2, 3], TensorData::F32((0..batch * 6).map(|i| i as f32 * 0.5).collect())).unwrap();
        let eager = model.run_once(std::slice::from_ref(&x)).unwrap();
        let compiled = saggar_onnx::run_on_host(&compiler, &[x]).unwrap();
        assert_eq!(eager, compiled, "batch {batch}");
    }
}

#[test]
fn declared_output_dims_name_what_inference_cannot() {
    // The Expand target goes through a float Cast, which shape-vector propagation does not follow,
    // so inference cannot name the batch axis of `y`; the declared output type names it.
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &[sym("batch"), Dim::Fixed(1)]);
    b.initializer("four", &Tensor::from_i64s(vec![4]));
    b.initializer("first", &Tensor::from_i64s(vec![0]));
    b.initializer("one", &Tensor::from_i64s(vec![1]));
    b.node("Shape", &["x"], &["s"], &[]);
    b.node("Slice", &["s", "first", "one"], &["b"], &[]);
    b.node("Cast", &["b"], &["bf"], &[("to", Attribute::Int(1))]);
    b.node("Cast", &["bf"], &["bi"], &[("to", Attribute::Int(7))]);
    b.node("Concat", &["bi", "four"], &["target"], &[("axis", Attribute::Int(0))]);
    b.node("Expand", &["x", "target"], &["y"], &[]);
    b.output("y", DType::F32, &[sym("batch"), Dim::Fixed(4)]);
    let model = OnnxModel::from_bytes(&b.to_bytes(), "expand", &ImportLimits::default()).unwrap();
    assert_eq!(model.outputs()[0].dims(), &[sym("batch"), Dim::Fixed(4)]);
    let x = Tensor::new(vec![3, 1], TensorData::F32(vec![1.0, 2.0, 3.0])).unwrap();
    let compiler = saggar_onnx::OnnxCompiler::new(model, saggar_onnx::OnnxOptions::default());
    let y = saggar_onnx::run_on_host(&compiler, &[x]).unwrap();
    assert_eq!(y[0].data(), &TensorData::F32([1.0, 2.0, 3.0].iter().flat_map(|&v| [v; 4]).collect()));
}

#[test]
fn outputs_reading_an_input_a_constant_or_one_value_twice_are_copied() {
    let mut b = ModelBuilder::new(17);
    b.input("x", DType::F32, &[sym("batch"), Dim::Fixed(2)]);
    b.initializer("c", &Tensor::new(vec![2], TensorData::F32(vec![5.0, 6.0])).unwrap());
    b.node("Identity", &["x"], &["same"], &[]);
    b.node("Identity", &["c"], &["konst"], &[]);
    b.node("Relu", &["x"], &["r"], &[]);
    b.node("Identity", &["r"], &["r2"], &[]);
    for name in ["same", "konst", "r", "r2"] {
        b.output(name, DType::F32, &[]);
    }
    let model = OnnxModel::from_bytes(&b.to_bytes(), "alias", &ImportLimits::default()).unwrap();
    let x = Tensor::new(vec![1, 2], TensorData::F32(vec![-1.0, 2.0])).unwrap();
    let compiler = saggar_onnx::OnnxCompiler::new(model, saggar_onnx::OnnxOptions::default());
    let outs = saggar_onnx::run_on_host(&compiler, std::slice::from_ref(&x)).unwrap();
    assert_eq!(outs[0], x);
    assert_eq!(outs[1].data(), &TensorData::F32(vec![5.0, 6.0]));
    assert_eq!(outs[2].data(), &TensorData::F32(vec![0.0, 2.0]));
    assert_eq!(outs[3], outs[2]);
}

/// `y = x[starts:ends]` with the bounds as model inputs, as the ONNX backend tests write it.
fn slice_with_input_bounds() -> OnnxModel {
    let mut b = ModelBuilder::new(13);
    b.input("x", DType::F32, &[Dim::Fixed(6)]);
    b.input("starts", DType::I64, &[Dim::Fixed(1)]);
    b.input("ends", DType::I64, &[Dim::Fixed(1)]);
    b.node("Slice", &["x", "starts", "ends"], &["y"], &[]);
    b.output("y", DType::F32, &[]);
    OnnxModel::from_bytes(&b.to_bytes(), "slice", &ImportLimits::default()).unwrap()
}

#[test]
fn shapes_that_depend_on_input_values_are_typed_errors_or_bound_as_constants() {
    let model = slice_with_input_bounds();
    let compiler = saggar_onnx::OnnxCompiler::new(model.clone(), saggar_onnx::OnnxOptions::default());
    let err = compiler.plan_summary(&[vec![6], vec![1], vec![1]], saggar_device::BackendKind::Host).unwrap_err();
    assert!(matches!(err, saggar_onnx::OnnxError::ShapeDependsOnData { ref op, .. } if op == "Slice"), "{err}");

    let x = Tensor::new(vec![6], TensorData::F32((0..6).map(|i| i as f32).collect())).unwrap();
    let (s, e) = (Tensor::from_i64s(vec![1]), Tensor::from_i64s(vec![4]));
    let y = saggar_onnx::run_on_host(&compiler, &[x.clone(), s.clone(), e.clone()]).unwrap();
    assert_eq!(y[0].data(), &TensorData::F32(vec![1.0, 2.0, 3.0]));

    let bound = model.with_constant_inputs(&[(1, s), (2, e)]).unwrap();
    assert_eq!(bound.inputs().len(), 1);
    assert_eq!(bound.outputs()[0].dims(), &[Dim::Fixed(3)]);
    assert!(model.with_constant_inputs(&[(1, Tensor::from_i64s(vec![1, 2]))]).is_err(), "wrong shape");
    assert_eq!(bound.run_once(&[x]).unwrap(), y);
}

#[test]
fn torchscript_style_expand_targets_keep_their_symbols() {
    // Expand(x, Where(Equal(shape, -1), ones, shape)) with shape = Concat(Shape(x)[0], 4).
    let mut b = ModelBuilder::new(13);
    b.input("x", DType::F32, &[sym("batch"), Dim::Fixed(1)]);
    b.initializer("four", &Tensor::from_i64s(vec![4]));
    b.initializer("zero", &Tensor::from_i64s(vec![0]));
    b.initializer("one", &Tensor::from_i64s(vec![1]));
    b.initializer("neg", &Tensor::from_i64s(vec![-1]));
    b.node("Shape", &["x"], &["s"], &[]);
    b.node("Slice", &["s", "zero", "one"], &["b"], &[]);
    b.node("Concat", &["b", "four"], &["shape"], &[("axis", Attribute::Int(0))]);
    b.node("Equal", &["shape", "neg"], &["is_neg"], &[]);
    b.node("ConstantOfShape", &["two"], &["ones"], &[("value", Attribute::Tensor(Tensor::from_i64s(vec![1])))]);
    b.initializer("two", &Tensor::from_i64s(vec![2]));
    b.node("Where", &["is_neg", "ones", "shape"], &["target"], &[]);
    b.node("Expand", &["x", "target"], &["y"], &[]);
    b.output("y", DType::F32, &[]);
    let model = OnnxModel::from_bytes(&b.to_bytes(), "ts", &ImportLimits::default()).unwrap();
    assert_eq!(model.outputs()[0].dims(), &[sym("batch"), Dim::Fixed(4)]);
    assert!(model.batch_layout().batch_is_only_dynamic_dim());
}

/// The file's descriptive fields are kept as written (what ONNX Runtime's `get_modelmeta` shows),
/// also by a model built in code (the builder names itself the producer).
#[test]
fn model_metadata_is_the_files() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/mlp/model.onnx");
    let model = OnnxModel::load(path).unwrap();
    let meta = model.metadata();
    assert_eq!(meta.producer_name, "pytorch");
    assert_eq!(meta.graph_name, "main_graph");
    assert_eq!(meta.model_version, None, "the exporter leaves the version unset");
    assert!(meta.properties.is_empty());
    let built = OnnxModel::from_bytes(&flatten_chain().to_bytes(), "built", &ImportLimits::default()).unwrap();
    assert_eq!(built.metadata().producer_name, "saggar-onnx");
    assert_eq!(built.metadata().model_version, None);
}
