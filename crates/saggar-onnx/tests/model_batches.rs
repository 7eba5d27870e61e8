//! The GPU tests' model, fusion and half-precision checks (`gpu_common`) on the host backend: the same sessions with graphs on at
//! batches 1, 3, 17 and 64, so the check itself (row tiling, comparisons) runs in every CI.

mod gpu_common;

use saggar_device::host::HostBackend;

#[test]
fn checked_in_models_match_on_host_with_graphs_at_batches_1_3_17_64() {
    let device = gpu_common::open_or_skip::<HostBackend>("host").expect("the host backend always opens");
    gpu_common::check_models::<HostBackend>(device);
}

#[test]
fn fused_plans_match_unfused_on_host_with_every_attention_kernel_option() {
    let device = gpu_common::open_or_skip::<HostBackend>("host").expect("the host backend always opens");
    gpu_common::check_fusion::<HostBackend>(device);
}

#[test]
fn half_precision_models_match_the_host_on_host_sessions() {
    let device = gpu_common::open_or_skip::<HostBackend>("host").expect("the host backend always opens");
    gpu_common::check_half_models::<HostBackend>(device);
}

#[test]
fn reduced_precisions_match_the_host_on_host_sessions() {
    let device = gpu_common::open_or_skip::<HostBackend>("host").expect("the host backend always opens");
    gpu_common::precision::check_precisions::<HostBackend>(device);
}
