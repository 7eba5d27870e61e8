//! The whole stack on CUDA (GPU bundle): the reference recommender through sessions and a session
//! group. Skipped, with the reason, where CUDA or a second GPU is absent.
#![cfg(feature = "cuda")]

mod common;

use saggar_device::conformance::{open_or_skip, open_two_or_skip};
use saggar_device::cuda::CudaBackend;

#[test]
fn sixteen_threads_times_a_thousand_mixed_batches() {
    let Some(d) = open_or_skip::<CudaBackend>("sixteen_threads_times_a_thousand_mixed_batches") else { return };
    // The GPU bundle's sanitizer pass lowers the count (a race shows in the first runs; the
    // sanitizers slow each run a hundredfold); every ordinary run does the full thousand.
    let runs = std::env::var("SAGGAR_TEST_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    common::sixteen_threads_mixed_batches::<CudaBackend>(d, runs);
}

#[test]
fn device_paths_match_the_reference() {
    let Some(d) = open_or_skip::<CudaBackend>("device_paths_match_the_reference") else { return };
    common::device_paths_match_the_reference::<CudaBackend>(d);
}

#[test]
fn session_group_over_two_gpus_compiles_once_and_loads_once() {
    let Some((d0, d1)) = open_two_or_skip::<CudaBackend>("session_group_over_two_gpus_compiles_once_and_loads_once")
    else {
        return;
    };
    common::group_compiles_once_and_loads_once::<CudaBackend>(d0, d1);
}

#[test]
fn graph_budget_holds_across_eight_contexts() {
    let Some(d) = open_or_skip::<CudaBackend>("graph_budget_holds_across_eight_contexts") else { return };
    common::graph_budget_holds_across_eight_contexts::<CudaBackend>(d);
}

/// A fault drill: GPU 1 is marked lost (`saggar_device::lose_device`) once the group is ready; the
/// request that meets it fails with a lost-device error, the group routes around it and GPU 0
/// serves the rest. Runs last in this binary's order of names: GPU 1 stays lost in this process.
#[test]
fn zz_session_group_survives_a_gpu_lost_mid_run() {
    let Some((d0, d1)) = open_two_or_skip::<CudaBackend>("zz_session_group_survives_a_gpu_lost_mid_run") else {
        return;
    };
    common::group_survives_a_lost_device::<CudaBackend>(d0, d1, common::drill_loss::<CudaBackend>);
}
