//! The reference recommender through the dispatcher on the host backend (CI); the same checks run
//! on CUDA in `tests/gpu_dispatch.rs`.

mod common;

use saggar_device::Backend;
use saggar_device::host::HostBackend;

#[test]
fn sixteen_threads_mixed_batches() {
    common::sixteen_threads_mixed_batches::<HostBackend>(HostBackend::open(0).unwrap(), 40);
}

#[test]
fn device_paths_match_the_reference() {
    common::device_paths_match_the_reference::<HostBackend>(HostBackend::open(0).unwrap());
}

#[test]
fn group_compiles_once_and_loads_once() {
    common::group_compiles_once_and_loads_once::<HostBackend>(
        HostBackend::open(0).unwrap(),
        HostBackend::open(1).unwrap(),
    );
}

#[test]
fn graph_budget_holds_across_eight_contexts() {
    common::graph_budget_holds_across_eight_contexts::<HostBackend>(HostBackend::open(0).unwrap());
}

#[test]
fn group_survives_a_lost_device() {
    let config = saggar_device::host::HostConfig { lose_after_launches: Some(0), ..Default::default() };
    // The host device counts launches from creation; with a budget of none, its first request fails.
    let d1 = saggar_device::host::HostDevice::with_config(1, config).unwrap();
    common::group_survives_a_lost_device::<HostBackend>(HostBackend::open(0).unwrap(), d1, |_| {});
}
