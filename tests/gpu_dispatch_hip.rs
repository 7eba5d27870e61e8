//! The whole stack on the HIP backend: the reference recommender through sessions and a session
//! group. On an AMD GPU this is the real thing; in the NVIDIA GPU bundle it runs the unchanged HIP
//! backend against saggar-hip-fixture ("HIP backend on CUDA via fixture", never an AMD result).
//! Skipped, with the reason, where no HIP device is present.
#![cfg(feature = "hip")]

mod common;

use saggar_device::conformance::{open_or_skip, open_two_or_skip};
use saggar_device::hip::HipBackend;

#[test]
fn sixteen_threads_mixed_batches_on_hip() {
    let Some(d) = open_or_skip::<HipBackend>("sixteen_threads_mixed_batches_on_hip") else { return };
    common::sixteen_threads_mixed_batches::<HipBackend>(d, 200);
}

#[test]
fn device_paths_match_the_reference_on_hip() {
    let Some(d) = open_or_skip::<HipBackend>("device_paths_match_the_reference_on_hip") else { return };
    common::device_paths_match_the_reference::<HipBackend>(d);
}

#[test]
fn session_group_over_two_devices_compiles_once_on_hip() {
    let Some((d0, d1)) = open_two_or_skip::<HipBackend>("session_group_over_two_devices_compiles_once_on_hip") else {
        return;
    };
    common::group_compiles_once_and_loads_once::<HipBackend>(d0, d1);
}

#[test]
fn graph_budget_holds_across_eight_contexts_on_hip() {
    let Some(d) = open_or_skip::<HipBackend>("graph_budget_holds_across_eight_contexts_on_hip") else { return };
    common::graph_budget_holds_across_eight_contexts::<HipBackend>(d);
}

/// A fault drill on the second device (see `gpu_dispatch`'s CUDA test); runs last in this binary.
#[test]
fn zz_session_group_survives_a_device_lost_mid_run_on_hip() {
    let Some((d0, d1)) = open_two_or_skip::<HipBackend>("zz_session_group_survives_a_device_lost_mid_run_on_hip")
    else {
        return;
    };
    common::group_survives_a_lost_device::<HipBackend>(d0, d1, common::drill_loss::<HipBackend>);
}
