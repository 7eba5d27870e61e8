//! The profile checks shared by the host test (`profile.rs`) and the GPU tests (`gpu_onnx*.rs`):
//! one row per step, the steps' times within the whole run's, and every node of the model named by
//! exactly one group of steps (or listed as launching nothing or folded at this shape).

#![allow(dead_code)]

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use saggar_device::Backend;
use saggar_onnx::{OnnxCompiler, OnnxModel, OnnxOptions, Tensor, read_tensor_pb};

pub fn model_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models").join(name)
}

pub fn inputs(name: &str, count: usize) -> Vec<Tensor> {
    (0..count)
        .map(|i| read_tensor_pb(&model_dir(name).join(format!("test_data_set_0/input_{i}.pb"))).unwrap().tensor)
        .collect()
}

/// Profiles `name` (test data set 0) on `device` and checks the profile; prints a PASS line.
pub fn check<B: Backend>(device: &B::Device, name: &str, fusion: bool) {
    let model = OnnxModel::load(model_dir(name).join("model.onnx")).unwrap();
    let nodes: BTreeSet<String> = model.graph().nodes.iter().map(|n| n.name.clone()).collect();
    let count = model.inputs().len();
    let compiler = OnnxCompiler::new(model, OnnxOptions::default().with_fusion(fusion));
    let inputs = inputs(name, count);
    let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
    let launches = compiler.plan_summary(&dims, B::KIND).unwrap().launches;
    let profile = compiler.profile::<B>(device, &inputs, 3).unwrap();
    assert_eq!(profile.iterations, 3);
    assert_eq!(profile.steps.len(), launches, "{name}: one row per step");
    assert!(profile.steps.iter().enumerate().all(|(i, s)| s.index == i && !s.kind.is_empty()));
    assert!(profile.steps.iter().all(|s| s.median_us >= 0.0 && !s.ops.is_empty()));
    // Per-step medians can each come from another run; their sum stays near the whole run's median.
    assert!(
        profile.steps_us() <= profile.total_median_us * 1.5 + 50.0,
        "{name}: steps sum {} µs, whole run {} µs",
        profile.steps_us(),
        profile.total_median_us
    );
    // Each group's nodes, once per group.
    let mut groups: HashMap<usize, &[String]> = HashMap::new();
    for s in profile.steps.iter().filter(|s| s.ops != ["OutputCopy"]) {
        assert_eq!(s.ops.len(), s.nodes.len(), "{name}: an op type per node");
        if let Some(previous) = groups.insert(s.group, &s.nodes) {
            assert_eq!(previous, s.nodes.as_slice(), "{name}: steps of one group name the same nodes");
        }
    }
    let mut named: Vec<&String> = groups.values().flat_map(|n| n.iter()).chain(&profile.untimed_nodes).collect();
    let folded = profile.folded_nodes.len();
    named.extend(&profile.folded_nodes);
    named.sort();
    let unique: BTreeSet<String> = named.iter().map(|n| n.to_string()).collect();
    assert_eq!(unique.len(), named.len(), "{name}: a node named twice: {named:?}");
    // A Conv lowered as im2col + matmul runs as several steps, each named `CONV:part`.
    let models: BTreeSet<String> = unique.iter().map(|n| n.split(':').next().unwrap_or(n).to_string()).collect();
    assert_eq!(models, nodes, "{name}: every node of the model named, each part exactly once");
    if name != "bert" {
        assert_eq!(folded, 0, "{name}: no shape chains to fold");
    }
    if fusion && name != "mlp" {
        assert!(groups.values().any(|n| n.len() > 1), "{name}: fused groups are labelled together");
    }
    let patterns = profile.by_ops();
    assert_eq!(patterns.iter().map(|p| p.steps).sum::<usize>(), profile.steps.len());
    assert!(patterns.windows(2).all(|w| w[0].us >= w[1].us), "sorted by time");
    println!(
        "PASS {}::profile {name} (fusion {fusion}): {} steps, {:.1} µs summed, whole run {:.1} µs",
        B::KIND,
        profile.steps.len(),
        profile.steps_us(),
        profile.total_median_us
    );
}

/// [`check`] for every checked-in model, fused and not.
pub fn check_models<B: Backend>(device: &B::Device) {
    for name in ["mlp", "cnn", "dlrm", "bert"] {
        for fusion in [true, false] {
            check::<B>(device, name, fusion);
        }
    }
}
