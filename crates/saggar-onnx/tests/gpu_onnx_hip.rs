//! The checked-in ONNX models on the HIP backend through sessions with graphs on, at batches 1, 3,
//! 17 and 64, against their expected outputs and the host backend (on NVIDIA machines through
//! saggar-hip-fixture). Without a HIP device the test prints `SKIPPED hip::<test>: <reason>` and
//! returns.

#![cfg(feature = "hip")]

mod gpu_common;
mod profile_common;

use saggar_device::hip::HipBackend;

#[test]
fn checked_in_models_match_on_hip_with_graphs() {
    let Some(device) = gpu_common::open_or_skip::<HipBackend>("checked_in_models_match_on_hip_with_graphs") else {
        return;
    };
    gpu_common::check_models::<HipBackend>(device);
}

#[test]
fn blas_and_generated_gemms_match_on_hip_with_graphs() {
    let Some(device) = gpu_common::open_or_skip::<HipBackend>("blas_and_generated_gemms_match_on_hip_with_graphs")
    else {
        return;
    };
    gpu_common::check_blas_against_generated::<HipBackend>(device);
}

#[test]
fn im2col_and_direct_convs_match_the_host_on_hip() {
    let Some(device) = gpu_common::open_or_skip::<HipBackend>("im2col_and_direct_convs_match_the_host_on_hip") else {
        return;
    };
    gpu_common::check_conv_engines::<HipBackend>(device);
}

#[test]
fn missing_blas_library_is_refused_on_hip() {
    let Some(device) = gpu_common::open_or_skip::<HipBackend>("missing_blas_library_is_refused_on_hip") else {
        return;
    };
    gpu_common::check_missing_blas_library_is_refused::<HipBackend>(device);
}

#[test]
fn fused_plans_match_unfused_on_hip_and_buckets_share_one_compile() {
    let Some(device) =
        gpu_common::open_or_skip::<HipBackend>("fused_plans_match_unfused_on_hip_and_buckets_share_one_compile")
    else {
        return;
    };
    gpu_common::check_fusion::<HipBackend>(device);
}

/// BERT from a grid of batch by sequence buckets on HIP: padded runs equal exact-shape host runs at
/// every real position (hidden states and pooled output), split batches and graph replays included.
#[test]
fn bert_sequence_buckets_match_exact_runs_on_hip() {
    let Some(device) = gpu_common::open_or_skip::<HipBackend>("bert_sequence_buckets_match_exact_runs_on_hip") else {
        return;
    };
    gpu_common::sequence::check_bert_sequence_buckets::<HipBackend>(device);
}

#[test]
fn every_checked_in_model_profiles_one_row_per_step_on_hip() {
    let Some(device) =
        gpu_common::open_or_skip::<HipBackend>("every_checked_in_model_profiles_one_row_per_step_on_hip")
    else {
        return;
    };
    profile_common::check_models::<HipBackend>(&device);
}

#[test]
fn half_precision_models_match_the_host_on_hip() {
    let Some(device) = gpu_common::open_or_skip::<HipBackend>("half_precision_models_match_the_host_on_hip") else {
        return;
    };
    gpu_common::check_half_models::<HipBackend>(device);
}

#[test]
fn reduced_precisions_match_the_host_on_hip() {
    let Some(device) = gpu_common::open_or_skip::<HipBackend>("reduced_precisions_match_the_host_on_hip") else {
        return;
    };
    gpu_common::precision::check_precisions::<HipBackend>(device);
}

#[test]
fn qdq_int8_products_match_the_host_on_hip() {
    let Some(device) = gpu_common::open_or_skip::<HipBackend>("qdq_int8_products_match_the_host_on_hip") else {
        return;
    };
    gpu_common::qdq::check_qdq_products::<HipBackend>(device);
}

#[test]
fn a_while_loop_over_data_runs_its_body_per_iteration_on_hip() {
    let Some(device) =
        gpu_common::open_or_skip::<HipBackend>("a_while_loop_over_data_runs_its_body_per_iteration_on_hip")
    else {
        return;
    };
    gpu_common::while_loop::runs_on::<HipBackend>(device.clone());
    gpu_common::while_loop::halve_runs_on::<HipBackend>(device);
}
