//! `OnnxCompiler::profile` on the host backend with the checked-in models: one row per step, the
//! steps' times within the whole run's, and every node of the model named by exactly one group of
//! steps (or listed as launching nothing or folded at this shape), fused or not.

mod profile_common;

use profile_common::{inputs, model_dir};
use saggar_device::Backend as _;
use saggar_device::host::HostBackend;
use saggar_onnx::{OnnxCompiler, OnnxError, OnnxModel, OnnxOptions};

#[test]
fn every_checked_in_model_profiles_one_row_per_step_naming_each_node_once() {
    profile_common::check_models::<HostBackend>(&HostBackend::open(0).unwrap());
}

#[test]
fn zero_iterations_and_wrong_input_counts_are_request_errors() {
    let model = OnnxModel::load(model_dir("mlp").join("model.onnx")).unwrap();
    let compiler = OnnxCompiler::new(model, OnnxOptions::default());
    let device = HostBackend::open(0).unwrap();
    let inputs = inputs("mlp", 1);
    let zero = compiler.profile::<HostBackend>(&device, &inputs, 0);
    assert!(matches!(zero, Err(OnnxError::Request { .. })), "{zero:?}");
    let none = compiler.profile::<HostBackend>(&device, &[], 1);
    assert!(matches!(none, Err(OnnxError::Request { .. })), "{none:?}");
}
