//! The conformance suite: one set of tests, generic over [`Backend`], that every backend runs.
//!
//! Each test is a public generic function taking an opened device; [`conformance_tests!`](crate::conformance_tests) turns them
//! into `#[test]`s for one backend. A backend with no device here (no GPU on a CI machine) reports
//! every test as skipped, with the reason, on standard error: it never passes silently by doing
//! nothing.
//!
//! The tests are the suite's specification of a backend, one file per topic: `memory.rs` (copies,
//! pinned memory and its device mapping), `events.rs` (events ordering and timing work across
//! streams), `graphs.rs` (capture, replay, update and the capture rules), `errors.rs` (bad input is a
//! typed error; clean drops record none), `sequences.rs` (random work sequences, replayed and eager),
//! `multi_device.rs` (two devices), and [`crate::conformance_blas`] (BLAS). This module holds the
//! helpers they share and the macro that instantiates them, which must list every one of them.
//!
//! ```text
//! saggar_device::conformance_tests!(saggar_device::host::HostBackend);
//! ```
//!
//! Functions panic on failure, like any test body; the messages say what differed.
//!
//! Built with the `conformance` feature only: it is a test harness, not part of the runtime API.
//! Test targets enable it through a dev-dependency (`features = ["conformance"]`).

mod errors;
mod events;
mod graphs;
mod memory;
mod multi_device;
mod sequences;

use crate::api::{Backend, Device, Stream};
use crate::builtin;
pub use crate::conformance_blas::{
    blas_bad_requests_are_refused, blas_i8_matmul_is_exact, blas_matmul_captures_and_replays,
    blas_matmul_matches_reference,
};
use crate::types::{DevicePtr, DeviceSlice, KernelArg, LaunchConfig};
pub use errors::{bad_device_index, bad_launches, bad_sizes_and_ranges, no_deferred_errors_after_clean_drop};
pub use events::{event_timing, events_order_work_across_streams, untimed_event_orders_work_and_refuses_timing};
pub use graphs::{
    capture_state_errors, destroyed_graph_cannot_launch, empty_capture_replays_as_noop,
    graph_of_100_launches_replays_equal_to_eager, graph_update_refuses_new_topology, graph_update_repoints_launch,
    illegal_calls_during_capture, programmatic_launches_equal_ordinary_ones, replay_after_free_reads_new_occupant,
};
pub use memory::{alloc_copy_round_trip, kernels_reach_mapped_pinned_memory, pinned_async_round_trip};
pub use multi_device::{capture_on_one_device_while_another_is_pinned_elsewhere, wrong_device_pinned_is_an_error};
pub use sequences::{SequenceStep, random_sequences_replay_equal_to_eager, replay_equals_eager};

/// Generates one `#[test]` per conformance test for backend `$backend`.
#[macro_export]
macro_rules! conformance_tests {
    ($backend:ty) => {
        $crate::conformance_tests!(@one $backend;
            alloc_copy_round_trip,
            pinned_async_round_trip,
            kernels_reach_mapped_pinned_memory,
            events_order_work_across_streams,
            event_timing,
            untimed_event_orders_work_and_refuses_timing,
            graph_of_100_launches_replays_equal_to_eager,
            programmatic_launches_equal_ordinary_ones,
            replay_after_free_reads_new_occupant,
            graph_update_repoints_launch,
            graph_update_refuses_new_topology,
            empty_capture_replays_as_noop,
            illegal_calls_during_capture,
            capture_state_errors,
            destroyed_graph_cannot_launch,
            bad_sizes_and_ranges,
            bad_launches,
            bad_device_index,
            random_sequences_replay_equal_to_eager,
            no_deferred_errors_after_clean_drop,
            blas_matmul_matches_reference,
            blas_matmul_captures_and_replays,
            blas_bad_requests_are_refused,
            blas_i8_matmul_is_exact
        );
        $crate::conformance_tests!(@two $backend;
            wrong_device_pinned_is_an_error,
            capture_on_one_device_while_another_is_pinned_elsewhere
        );
    };
    (@one $backend:ty; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                let Some(device) = $crate::conformance::open_or_skip::<$backend>(stringify!($name)) else { return };
                $crate::conformance::$name::<$backend>(&device);
            }
        )*
    };
    (@two $backend:ty; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                let Some((d0, d1)) = $crate::conformance::open_two_or_skip::<$backend>(stringify!($name)) else { return };
                $crate::conformance::$name::<$backend>(&d0, &d1);
            }
        )*
    };
}

/// Opens device 0 of `B`, or prints why the test is skipped and returns `None`.
pub fn open_or_skip<B: Backend>(test: &str) -> Option<B::Device> {
    match B::enumerate().and_then(|_| B::open(0)) {
        Ok(device) => Some(device),
        Err(e) => {
            eprintln!("SKIPPED {}::{test}: {e}", B::KIND);
            None
        }
    }
}

/// Opens devices 0 and 1 of `B`, or prints why the test is skipped and returns `None`.
pub fn open_two_or_skip<B: Backend>(test: &str) -> Option<(B::Device, B::Device)> {
    let devices = match B::enumerate() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("SKIPPED {}::{test}: {e}", B::KIND);
            return None;
        }
    };
    if devices.len() < 2 {
        eprintln!("SKIPPED {}::{test}: needs two devices, {} found", B::KIND, devices.len());
        return None;
    }
    Some((B::open(0).expect("open device 0"), B::open(1).expect("open device 1")))
}

/// The built-in kernels, compiled and loaded on `device`.
pub fn builtin_module<B: Backend>(device: &B::Device) -> B::Module {
    let code = device.compile(&builtin::source()).expect("compile the built-in kernels");
    device.load_module(&code).expect("load the built-in kernels")
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn download<B: Backend>(stream: &B::Stream, slice: DeviceSlice) -> Vec<u8> {
    let mut out = vec![0u8; slice.len()];
    stream.download(slice, &mut out).expect("download");
    out
}

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Enqueues `saggar_fill_u32` over `slice` with `value`.
///
/// # Safety
/// `slice` must name live device memory until the stream has passed the launch.
pub unsafe fn fill<B: Backend>(stream: &B::Stream, kernel: &B::Kernel, slice: DeviceSlice, value: u32) {
    let n = (slice.len() / 4) as u64;
    let args = [KernelArg::Ptr(slice.ptr()), KernelArg::U64(n), KernelArg::U32(value)];
    // SAFETY: the caller guarantees the slice is live; the kernel writes exactly `n` words of it.
    unsafe { stream.launch(kernel, &LaunchConfig::for_elements(n, 256), &args) }.expect("launch saggar_fill_u32");
}

/// Enqueues `saggar_axpy_f32`: `y = a * x + y` over `n` floats.
///
/// # Safety
/// `x` and `y` must name live device memory of `n` floats until the stream has passed the launch.
pub unsafe fn axpy<B: Backend>(stream: &B::Stream, kernel: &B::Kernel, n: u64, a: f32, x: DevicePtr, y: DevicePtr) {
    let args = [KernelArg::U64(n), KernelArg::F32(a), KernelArg::Ptr(x), KernelArg::Ptr(y)];
    // SAFETY: the caller guarantees both ranges are live and hold `n` floats.
    unsafe { stream.launch(kernel, &LaunchConfig::for_elements(n, 256), &args) }.expect("launch saggar_axpy_f32");
}
