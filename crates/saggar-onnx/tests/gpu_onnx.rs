//! The checked-in ONNX models on CUDA through sessions with graphs on, at batches 1, 3, 17 and 64,
//! against their expected outputs and the host backend, and BERT from sequence buckets against
//! exact-shape runs. Without a CUDA device the test prints `SKIPPED cuda::<test>: <reason>` and
//! returns.

#![cfg(feature = "cuda")]

mod gpu_common;
mod profile_common;

use saggar_device::cuda::CudaBackend;

#[test]
fn checked_in_models_match_on_cuda_with_graphs() {
    let Some(device) = gpu_common::open_or_skip::<CudaBackend>("checked_in_models_match_on_cuda_with_graphs") else {
        return;
    };
    gpu_common::check_models::<CudaBackend>(device);
}

#[test]
fn blas_and_generated_gemms_match_on_cuda_with_graphs() {
    let Some(device) = gpu_common::open_or_skip::<CudaBackend>("blas_and_generated_gemms_match_on_cuda_with_graphs")
    else {
        return;
    };
    gpu_common::check_blas_against_generated::<CudaBackend>(device);
}

#[test]
fn im2col_and_direct_convs_match_the_host_on_cuda() {
    let Some(device) = gpu_common::open_or_skip::<CudaBackend>("im2col_and_direct_convs_match_the_host_on_cuda") else {
        return;
    };
    gpu_common::check_conv_engines::<CudaBackend>(device);
}

#[test]
fn missing_blas_library_is_refused_on_cuda() {
    let Some(device) = gpu_common::open_or_skip::<CudaBackend>("missing_blas_library_is_refused_on_cuda") else {
        return;
    };
    gpu_common::check_missing_blas_library_is_refused::<CudaBackend>(device);
}

#[test]
fn fused_plans_match_unfused_on_cuda_and_buckets_share_one_compile() {
    let Some(device) =
        gpu_common::open_or_skip::<CudaBackend>("fused_plans_match_unfused_on_cuda_and_buckets_share_one_compile")
    else {
        return;
    };
    gpu_common::check_fusion::<CudaBackend>(device);
}

/// BERT from a grid of batch by sequence buckets on CUDA: padded runs equal exact-shape host runs at
/// every real position (hidden states and pooled output), split batches and graph replays included.
#[test]
fn bert_sequence_buckets_match_exact_runs_on_cuda() {
    let Some(device) = gpu_common::open_or_skip::<CudaBackend>("bert_sequence_buckets_match_exact_runs_on_cuda") else {
        return;
    };
    gpu_common::sequence::check_bert_sequence_buckets::<CudaBackend>(device);
}

#[test]
fn every_checked_in_model_profiles_one_row_per_step_on_cuda() {
    let Some(device) =
        gpu_common::open_or_skip::<CudaBackend>("every_checked_in_model_profiles_one_row_per_step_on_cuda")
    else {
        return;
    };
    profile_common::check_models::<CudaBackend>(&device);
}

#[test]
fn half_precision_models_match_the_host_on_cuda() {
    let Some(device) = gpu_common::open_or_skip::<CudaBackend>("half_precision_models_match_the_host_on_cuda") else {
        return;
    };
    gpu_common::check_half_models::<CudaBackend>(device);
}

#[test]
fn reduced_precisions_match_the_host_on_cuda() {
    let Some(device) = gpu_common::open_or_skip::<CudaBackend>("reduced_precisions_match_the_host_on_cuda") else {
        return;
    };
    gpu_common::precision::check_precisions::<CudaBackend>(device);
}

#[test]
fn qdq_int8_products_match_the_host_on_cuda() {
    let Some(device) = gpu_common::open_or_skip::<CudaBackend>("qdq_int8_products_match_the_host_on_cuda") else {
        return;
    };
    gpu_common::qdq::check_qdq_products::<CudaBackend>(device);
}

#[test]
fn a_while_loop_over_data_runs_its_body_per_iteration_on_cuda() {
    let Some(device) =
        gpu_common::open_or_skip::<CudaBackend>("a_while_loop_over_data_runs_its_body_per_iteration_on_cuda")
    else {
        return;
    };
    gpu_common::while_loop::runs_on::<CudaBackend>(device.clone());
    gpu_common::while_loop::halve_runs_on::<CudaBackend>(device);
}
