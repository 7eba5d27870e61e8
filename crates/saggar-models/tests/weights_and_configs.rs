//! Weights and configs from files: safetensors export -> import round trips, wrong or missing tensors
//! name the tensor, malformed configs are typed errors, and a config file can point at its weights.

mod common;

use std::collections::HashMap;

use common::*;
use safetensors::Dtype;
use safetensors::tensor::TensorView;
use saggar_device::Backend as _;
use saggar_device::host::HostBackend;
use saggar_models::{
    METADATA_CONFIG, ModelConfig, ModelError, ModelKind, ReferenceCompiler, WeightSource, Weights, generate_inputs,
    tensor_layouts,
};

fn safetensors_of(tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let views: Vec<_> =
        tensors.iter().map(|(n, d, s, b)| (n.to_string(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    safetensors::serialize(views, None::<HashMap<String, String>>).unwrap()
}

/// Every tensor of `weights`, as (name, dtype, shape, bytes).
fn tensors_of(weights: &Weights) -> Vec<(&str, Dtype, Vec<usize>, Vec<u8>)> {
    weights
        .tensors()
        .iter()
        .map(|t| {
            let bytes = t.data.iter().flat_map(|v| v.to_le_bytes()).collect();
            (t.layout.name.as_str(), Dtype::F32, t.layout.shape.clone(), bytes)
        })
        .collect()
}

#[test]
fn export_import_round_trip() {
    for config in [small_recsys(true), ModelKind::Mlp.default_config()] {
        let weights = Weights::generate(&config, 77).unwrap();
        let bytes = weights.to_safetensors(&config).unwrap();
        let back = Weights::from_safetensors(&config, &bytes).unwrap();
        assert_eq!(back, weights);
        assert_eq!(back.model_hash(&config), weights.model_hash(&config));

        // The file speaks for itself: names, shapes and the config in the metadata.
        let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let mut names = file.names();
        names.sort_unstable();
        let mut expected: Vec<_> = tensor_layouts(&config).into_iter().map(|l| l.name).collect();
        expected.sort_unstable();
        assert_eq!(names, expected);
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        assert_eq!(meta.metadata().as_ref().unwrap()[METADATA_CONFIG], config.canonical_json());
    }
}

#[test]
fn documented_names_and_layout() {
    let config = small_recsys(false);
    let weights = Weights::generate(&config, 1).unwrap();
    let bytes = weights.to_safetensors(&config).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(file.tensor("emb.3.weight").unwrap().shape(), &[50, 6]);
    // Layer 0 maps the 5 * 3 + 4 * 6 = 39 features to 16: stored [in, out].
    assert_eq!(file.tensor("mlp.0.weight").unwrap().shape(), &[39, 16]);
    assert_eq!(file.tensor("mlp.0.bias").unwrap().shape(), &[16]);
    assert_eq!(file.tensor("mlp.2.weight").unwrap().shape(), &[8, 1]);
    // Row-major [in, out]: element (i, o) is at i * out + o.
    let w = file.tensor("mlp.1.weight").unwrap();
    let (i, o) = (3, 5);
    let at = (i * 8 + o) * 4;
    let value = f32::from_le_bytes(w.data()[at..at + 4].try_into().unwrap());
    assert_eq!(value, weights.layer_weight(1)[i * 8 + o]);
}

#[test]
fn seeded_weights_are_deterministic_and_scaled() {
    let config = ModelKind::Recsys.default_config();
    let a = Weights::generate(&config, 5).unwrap();
    assert_eq!(a, Weights::generate(&config, 5).unwrap());
    assert_ne!(a, Weights::generate(&config, 6).unwrap());
    let bound = (6.0f64 / 1840.0).sqrt() as f32;
    assert!(a.layer_weight(0).iter().all(|v| v.abs() <= bound));
    assert!(a.layer_weight(0).iter().any(|v| v.abs() > bound * 0.9));
    assert!(a.layer_bias(0).iter().all(|v| v.abs() <= 0.1));
    assert!(a.embedding(0).iter().all(|v| (-1.0..1.0).contains(v)));
    // Activations stay O(1): the reference's scores are neither vanishing nor exploding.
    let inputs = generate_inputs(&config, 16, 3);
    let scores = saggar_models::reference_forward(&config, &a, &inputs, 16).unwrap().remove(0);
    let rms = (scores.iter().map(|s| s * s).sum::<f32>() / 16.0).sqrt();
    assert!((0.05..20.0).contains(&rms), "score RMS {rms}");
}

#[test]
fn wrong_shape_names_the_tensor() {
    let config = small_recsys(false);
    let weights = Weights::generate(&config, 1).unwrap();
    let mut tensors = tensors_of(&weights);
    let entry = tensors.iter_mut().find(|t| t.0 == "mlp.1.weight").unwrap();
    entry.2 = vec![8, 16];
    let e = Weights::from_safetensors(&config, &safetensors_of(&tensors)).unwrap_err();
    match &e {
        ModelError::TensorShape { name, expected, actual } => {
            assert_eq!(name, "mlp.1.weight");
            assert_eq!(expected, &[16, 8]);
            assert_eq!(actual, &[8, 16]);
        }
        other => panic!("expected a shape error, got {other}"),
    }
    let message = e.to_string();
    assert!(
        message.contains("mlp.1.weight") && message.contains("[16, 8]") && message.contains("[8, 16]"),
        "{message}"
    );
}

#[test]
fn missing_extra_and_non_f32_tensors_are_typed_errors() {
    let config = small_recsys(false);
    let weights = Weights::generate(&config, 1).unwrap();
    let all = tensors_of(&weights);

    let without: Vec<_> = all.iter().filter(|t| t.0 != "emb.2.weight").cloned().collect();
    let e = Weights::from_safetensors(&config, &safetensors_of(&without)).unwrap_err();
    assert!(matches!(&e, ModelError::MissingTensor { name, .. } if name == "emb.2.weight"), "{e}");

    let mut extra = all.clone();
    extra.push(("emb.9.weight", Dtype::F32, vec![1], vec![0; 4]));
    let e = Weights::from_safetensors(&config, &safetensors_of(&extra)).unwrap_err();
    assert!(matches!(&e, ModelError::UnexpectedTensor { name } if name == "emb.9.weight"), "{e}");

    let mut half = all.clone();
    let entry = half.iter_mut().find(|t| t.0 == "mlp.0.bias").unwrap();
    entry.1 = Dtype::F16;
    entry.3.truncate(entry.3.len() / 2);
    let e = Weights::from_safetensors(&config, &safetensors_of(&half)).unwrap_err();
    assert!(matches!(&e, ModelError::TensorDtype { name, .. } if name == "mlp.0.bias"), "{e}");

    for garbage in [&b""[..], b"not a safetensors file at all", &[255u8; 16]] {
        let e = Weights::from_safetensors(&config, garbage).unwrap_err();
        assert!(matches!(e, ModelError::Safetensors { .. }), "{e}");
    }
}

#[test]
fn config_file_points_at_its_weights_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_recsys(false);
    let weights = Weights::generate(&config, 31).unwrap();
    weights.save_safetensors(&config, &dir.path().join("w.safetensors")).unwrap();
    *config.weights_mut() = WeightSource::Safetensors("w.safetensors".into());
    let config_path = dir.path().join("model.json");
    std::fs::write(&config_path, config.to_json_pretty()).unwrap();

    let loaded = ModelConfig::from_file(&config_path).unwrap();
    assert_eq!(loaded.weights(), &WeightSource::Safetensors(dir.path().join("w.safetensors")));
    let compiler = ReferenceCompiler::from_config(loaded).unwrap();
    assert_eq!(compiler.weights(), &weights);
    // The loaded weights run end to end.
    let device = HostBackend::open(0).unwrap();
    check_end_to_end::<HostBackend>(&compiler, &device, &[2], 8);

    // A config naming a file that does not exist fails with the path.
    *config.weights_mut() = WeightSource::Safetensors(dir.path().join("missing.safetensors"));
    let e = ReferenceCompiler::from_config(config).unwrap_err();
    assert!(matches!(&e, ModelError::Io(e) if e.path.ends_with("missing.safetensors")), "{e}");
    // A weights file with the wrong shapes for the config.
    let bad = dir.path().join("model-bad.json");
    std::fs::write(&bad, r#"{"model": "mlp", "input": 39, "weights": {"safetensors": "w.safetensors"}}"#).unwrap();
    let e = ReferenceCompiler::from_config(ModelConfig::from_file(&bad).unwrap()).unwrap_err();
    assert!(
        matches!(
            &e,
            ModelError::TensorShape { .. } | ModelError::MissingTensor { .. } | ModelError::UnexpectedTensor { .. }
        ),
        "{e}"
    );
}

#[test]
fn malformed_configs_are_typed_errors() {
    for text in [
        "",
        "{",
        "[]",
        r#"{"dense_inputs": 3}"#,
        r#"{"model": "recsys", "dense_inputs": "many"}"#,
        r#"{"model": "recsys", "hiden": [4]}"#,
        r#"{"model": "mlp", "weights": {"seed": 1, "safetensors": "x"}}"#,
        r#"{"model": "mlp", "weights": {"url": "x"}}"#,
    ] {
        let e = ModelConfig::from_json(text).unwrap_err();
        assert!(matches!(e, ModelError::ConfigJson { .. }), "{text:?}: {e}");
    }
    for (text, field) in [
        (r#"{"model": "recsys", "dense_inputs": 0, "sparse_inputs": 0}"#, "dense_inputs"),
        (r#"{"model": "recsys", "dense_inputs": 400, "sparse_inputs": 200}"#, "dense_inputs"),
        (r#"{"model": "recsys", "table_rows": 0}"#, "table_rows"),
        (r#"{"model": "recsys", "embedding_dim": 0}"#, "embedding_dim"),
        (r#"{"model": "recsys", "hidden": [0]}"#, "hidden"),
        (r#"{"model": "mlp", "output": 100000}"#, "output"),
        (r#"{"model": "mlp", "name": ""}"#, "name"),
    ] {
        let e = ModelConfig::from_json(text).unwrap_err();
        assert!(matches!(&e, ModelError::InvalidConfig { field: f, .. } if *f == field), "{text}: {e}");
    }
    let e = ModelConfig::from_file(std::path::Path::new("/nonexistent/saggar/model.json")).unwrap_err();
    assert!(matches!(e, ModelError::Io(_)), "{e}");
}

#[test]
fn docs_example_config_parses() {
    // The full example of docs/models.md, verbatim between its markers.
    let doc = include_str!("../../../docs/models.md");
    let start = doc.find("<!-- example-config -->").expect("marker in docs/models.md");
    let block = &doc[start..];
    let json_start = block.find("```json").unwrap() + "```json".len();
    let json_end = block[json_start..].find("```").unwrap() + json_start;
    let config = ModelConfig::from_json(&block[json_start..json_end]).unwrap();
    assert_eq!(config, {
        let mut c = ModelKind::Recsys.default_config();
        *c.weights_mut() = WeightSource::Seed(42);
        c
    });
}
