//! Malformed and hostile models: each is a typed error at import (or compile), never a panic and
//! never an allocation of the size the file claims.

use saggar_onnx::builder::ModelBuilder;
use saggar_onnx::ops::Attribute;
use saggar_onnx::proto::{StringStringEntryProto, TensorProto, data_location, data_type};
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxError, OnnxModel, OnnxOptions, Tensor, TensorData};
use saggar_shape::{DType, Dim};

fn import(b: &ModelBuilder) -> Result<OnnxModel, OnnxError> {
    OnnxModel::from_bytes(&b.to_bytes(), "m", &ImportLimits::default())
}

/// `y = Relu(x + w)`, x `[batch, 4]`.
fn small() -> ModelBuilder {
    let mut b = ModelBuilder::new(13);
    b.input("x", DType::F32, &[Dim::symbolic("batch"), Dim::Fixed(4)]);
    b.initializer("w", &Tensor::new(vec![4], TensorData::F32(vec![1.0, -2.0, 3.0, -4.0])).unwrap());
    b.node("Add", &["x", "w"], &["s"], &[]);
    b.node("Relu", &["s"], &["y"], &[]);
    b.output("y", DType::F32, &[]);
    b
}

#[test]
fn the_small_model_imports() {
    let m = import(&small()).unwrap();
    assert_eq!(m.inputs().len(), 1);
    assert_eq!(m.outputs()[0].dims(), &[Dim::symbolic("batch"), Dim::Fixed(4)]);
}

#[test]
fn truncated_files_and_garbage_are_decode_errors() {
    let bytes = small().to_bytes();
    for cut in [1, bytes.len() / 3, bytes.len() / 2, bytes.len() - 1] {
        let err = OnnxModel::from_bytes(&bytes[..cut], "m", &ImportLimits::default()).unwrap_err();
        assert!(
            matches!(err, OnnxError::Decode { .. } | OnnxError::Graph { .. } | OnnxError::IrVersion { .. }),
            "cut {cut}: {err}"
        );
    }
    let err = OnnxModel::from_bytes(b"this is not protobuf at all \xff\xff\xff\xff", "m", &ImportLimits::default())
        .unwrap_err();
    assert!(matches!(err, OnnxError::Decode { .. }), "{err}");
}

#[test]
fn ir_version_and_opsets_out_of_range_are_refused() {
    let err = import(&small().ir_version(99)).unwrap_err();
    assert!(matches!(err, OnnxError::IrVersion { found: 99, .. }), "{err}");
    let mut b = small();
    let mut proto = b.build();
    proto.opset_import[0].version = 25;
    let err = OnnxModel::from_bytes(&prost::Message::encode_to_vec(&proto), "m", &ImportLimits::default()).unwrap_err();
    assert!(matches!(err, OnnxError::Opset { version: 25, .. }), "{err}");
    proto.opset_import[0].version = 0;
    let err = OnnxModel::from_bytes(&prost::Message::encode_to_vec(&proto), "m", &ImportLimits::default()).unwrap_err();
    assert!(matches!(err, OnnxError::Opset { version: 0, .. }), "{err}");
    b.graph_mut().node[0].domain = "com.microsoft".into();
    let err = import(&b).unwrap_err();
    assert!(matches!(err, OnnxError::UnsupportedOp { ref domain, .. } if domain == "com.microsoft"), "{err}");
}

#[test]
fn a_missing_initializer_names_the_node_and_value() {
    let mut b = small();
    b.graph_mut().initializer.clear();
    let err = import(&b).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, OnnxError::Graph { .. }) && text.contains("`w`") && text.contains("missing initializer"),
        "{text}"
    );
}

#[test]
fn cycles_and_duplicate_names_are_graph_errors() {
    let mut b = ModelBuilder::new(13);
    b.input("x", DType::F32, &[Dim::Fixed(2)]);
    b.node("Add", &["x", "b"], &["a"], &[]);
    b.node("Relu", &["a"], &["b"], &[]);
    b.output("b", DType::F32, &[]);
    let err = import(&b).unwrap_err();
    assert!(matches!(err, OnnxError::Graph { ref reason } if reason.contains("cycle")), "{err}");

    let mut dup = small();
    dup.initializer("w", &Tensor::from_i64s(vec![1]));
    assert!(matches!(import(&dup).unwrap_err(), OnnxError::Graph { ref reason } if reason.contains("defined twice")));
    let mut dup_out = small();
    dup_out.node("Relu", &["x"], &["s"], &[]);
    assert!(
        matches!(import(&dup_out).unwrap_err(), OnnxError::Graph { ref reason } if reason.contains("defined twice"))
    );
}

#[test]
fn shape_inference_rejects_incompatible_shapes_naming_the_node() {
    let mut b = ModelBuilder::new(13);
    b.input("x", DType::F32, &[Dim::Fixed(2)]);
    b.initializer("w", &Tensor::new(vec![3], TensorData::F32(vec![0.0; 3])).unwrap());
    b.node("Add", &["x", "w"], &["y"], &[]);
    b.output("y", DType::F32, &[]);
    let err = import(&b).unwrap_err();
    assert!(matches!(err, OnnxError::Node { ref op, opset: 13, .. } if op == "Add"), "{err}");
    assert!(err.to_string().contains("Add:y"), "{err}");
}

/// An import refusal lists every node that cannot be built (unknown op, unknown attribute), so one
/// look says all that a model is missing.
#[test]
fn every_node_that_cannot_be_imported_is_listed() {
    let mut b = ModelBuilder::new(13);
    b.input("x", DType::F32, &[Dim::Fixed(2)]);
    b.node("SaggarNoSuchOp", &["x"], &["a"], &[]);
    b.node("Relu", &["a"], &["r"], &[("bogus", Attribute::Int(1))]);
    b.node("SaggarNoSuchOpEither", &["r"], &["y"], &[]);
    b.output("y", DType::F32, &[]);
    let err = import(&b).unwrap_err();
    let listed: Vec<String> = err
        .node_errors()
        .iter()
        .map(|e| match e {
            OnnxError::UnsupportedOp { op, .. } => op.clone(),
            OnnxError::Node { op, source, .. } => format!("{op}: {source}"),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(listed.len(), 3, "{err}");
    assert_eq!(listed[0], "SaggarNoSuchOp");
    assert!(listed[1].starts_with("Relu: ") && listed[1].contains("bogus"), "{}", listed[1]);
    assert_eq!(listed[2], "SaggarNoSuchOpEither");
    assert!(err.to_string().starts_with("3 nodes are not supported\n  - "), "{err}");
}

#[test]
fn unsupported_ops_and_attribute_values_are_import_errors() {
    let mut b = ModelBuilder::new(13);
    b.input("x", DType::F32, &[Dim::Fixed(2)]);
    b.node("StringNormalizer", &["x"], &["y"], &[]);
    b.output("y", DType::F32, &[]);
    let err = import(&b).unwrap_err();
    assert!(matches!(err, OnnxError::UnsupportedOp { ref op, opset: 13, .. } if op == "StringNormalizer"), "{err}");
    assert!(err.to_string().contains("does not implement it") && err.to_string().contains("saggar check"), "{err}");

    let mut b = ModelBuilder::new(13);
    b.input("x", DType::F32, &[Dim::Fixed(2)]);
    b.initializer("p", &Tensor::from_i64s(vec![1, 1]));
    b.node("Pad", &["x", "p"], &["y"], &[("mode", Attribute::String(b"wrap".to_vec()))]);
    b.output("y", DType::F32, &[]);
    let err = import(&b).unwrap_err();
    assert!(matches!(err, OnnxError::Node { .. }) && err.to_string().contains("wrap"), "{err}");

    let mut b = small();
    b.graph_mut().node[1].attribute.push(saggar_onnx::builder::attribute_proto("alpha", &Attribute::Float(0.1)));
    let err = import(&b).unwrap_err();
    assert!(err.to_string().contains("alpha"), "{err}");
}

#[test]
fn a_declared_tensor_of_two_to_the_forty_elements_is_refused_before_allocating() {
    let mut b = small();
    b.graph_mut().initializer.push(TensorProto {
        name: "huge".into(),
        dims: vec![1 << 20, 1 << 20],
        data_type: data_type::FLOAT,
        ..Default::default()
    });
    assert!(matches!(import(&b).unwrap_err(), OnnxError::TooLarge { field: "max_tensor_elements", .. }));

    // A shape computed at run time: ConstantOfShape([2^20, 2^20]) is too large to fold, and the
    // compile refuses the program before any buffer exists.
    let mut b = ModelBuilder::new(13);
    b.input("x", DType::F32, &[Dim::Fixed(1)]);
    b.initializer("shape", &Tensor::from_i64s(vec![1 << 20, 1 << 20]));
    b.node("ConstantOfShape", &["shape"], &["big"], &[]);
    b.node("Add", &["big", "x"], &["y"], &[]);
    b.output("y", DType::F32, &[]);
    let model = import(&b).unwrap();
    let compiler = OnnxCompiler::new(model, OnnxOptions::default());
    let err = compiler.plan_summary(&[vec![1]], saggar_device::BackendKind::Host).unwrap_err();
    assert!(matches!(err, OnnxError::TooLarge { field: "max_program_bytes", .. }), "{err}");
}

fn external_model(location: &str) -> ModelBuilder {
    let mut b = small();
    let w = &mut b.graph_mut().initializer[0];
    w.raw_data.clear();
    w.data_location = data_location::EXTERNAL;
    w.external_data = vec![StringStringEntryProto { key: "location".into(), value: location.into() }];
    b
}

#[test]
fn external_data_inside_the_folder_loads_and_escapes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("model");
    std::fs::create_dir(&model_dir).unwrap();
    let weights: Vec<u8> = [1.0f32, -2.0, 3.0, -4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(model_dir.join("weights.bin"), &weights).unwrap();
    std::fs::write(dir.path().join("outside.bin"), &weights).unwrap();

    let write = |name: &str, b: &ModelBuilder| {
        let path = model_dir.join(name);
        std::fs::write(&path, b.to_bytes()).unwrap();
        path
    };
    let good = OnnxModel::load(write("good.onnx", &external_model("weights.bin"))).unwrap();
    let x = Tensor::new(vec![1, 4], TensorData::F32(vec![0.0; 4])).unwrap();
    assert_eq!(good.run_once(&[x]).unwrap()[0].data(), &TensorData::F32(vec![1.0, 0.0, 3.0, 0.0]));

    for (file, location) in [
        ("escape.onnx", "../../etc/passwd"),
        ("parent.onnx", "../outside.bin"),
        ("absolute.onnx", "/etc/passwd"),
        ("missing.onnx", "nope.bin"),
    ] {
        let err = OnnxModel::load(write(file, &external_model(location))).unwrap_err();
        assert!(matches!(err, OnnxError::ExternalData { .. }), "{location}: {err}");
    }
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(dir.path().join("outside.bin"), model_dir.join("link.bin")).unwrap();
        let err = OnnxModel::load(write("link.onnx", &external_model("link.bin"))).unwrap_err();
        assert!(matches!(err, OnnxError::ExternalData { ref reason, .. } if reason.contains("outside")), "{err}");
    }
    // Bytes past the end of the side file.
    std::fs::write(model_dir.join("short.bin"), &weights[..8]).unwrap();
    let err = OnnxModel::load(write("short.onnx", &external_model("short.bin"))).unwrap_err();
    assert!(matches!(err, OnnxError::ExternalData { .. }), "{err}");
    // External data in a model read from bytes has no folder to come from.
    assert!(matches!(import(&external_model("weights.bin")).unwrap_err(), OnnxError::ExternalData { .. }));
}

#[test]
fn ir_version_3_initializers_listed_as_inputs_are_not_model_inputs() {
    let mut b = small().ir_version(3);
    let w_info = saggar_onnx::builder::value_info("w", DType::F32, &[Dim::Fixed(4)]);
    b.graph_mut().input.push(w_info);
    let m = import(&b).unwrap();
    assert_eq!(m.inputs().iter().map(|s| s.name()).collect::<Vec<_>>(), vec!["x"]);
}
