//! Arena checks generic over the backend, run on the host backend in CI (`tests/arena_backends.rs`)
//! and on CUDA by the GPU bundle (`tests/arena_cuda.rs`).
#![allow(dead_code)]

use std::sync::Arc;

use saggar_arena::{
    ArenaLayout, ArenaPool, BindingKind, DeviceInputMode, InputSource, OutputTarget, PoolConfig, SlotSpec,
};
use saggar_device::{Backend, Device, DeviceBuffer, Stream};
use saggar_shape::{Chunk, DType, PadPlan, SlicePlan, TensorShape};

fn f32_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: f32 -> u8 view of initialised memory.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), v.len() * 4) }
}

/// 190 inputs of 1 KiB, three of them batched and padded 3 -> 4: one copy, padded rows repeat the
/// last real row, outputs come back with one copy and are sliced.
pub fn many_inputs_one_copy_round_trip<B: Backend>(device: &B::Device) {
    let _pin = device.pin().unwrap();
    let stream = device.create_stream().unwrap();
    let n = 190;
    let mut specs: Vec<SlotSpec> = (0..n).map(|i| SlotSpec::new(format!("in{i}"), 1024, 4)).collect();
    specs[0] = SlotSpec::new("in0", 4 * 64 * 4, 4);
    let layout = Arc::new(ArenaLayout::new(&specs, &[SlotSpec::new("out", 4 * 64 * 4, 4)], 256).unwrap());
    let pool = ArenaPool::<B>::new(device.clone(), layout, PoolConfig::default()).unwrap();
    let mut lease = pool.lease().unwrap();
    let data: Vec<Vec<f32>> = (0..n).map(|i| (0..256).map(|j| (i * 1000 + j) as f32).collect()).collect();
    let batched: Vec<f32> = (0..3 * 64).map(|j| j as f32).collect();
    let names: Vec<String> = (0..n).map(|i| format!("in{i}")).collect();
    let dims_flat = [256u64];
    let dims_batched = [3u64, 64];
    let sources: Vec<InputSource<'_>> = (0..n)
        .map(|i| {
            if i == 0 {
                InputSource::Host {
                    data: f32_bytes(&batched),
                    plan: PadPlan::new(
                        TensorShape::new(&names[0], DType::F32, &dims_batched),
                        true,
                        Chunk::whole(3, 4),
                    )
                    .unwrap(),
                }
            } else {
                InputSource::Host {
                    data: f32_bytes(&data[i]),
                    plan: PadPlan::new(TensorShape::new(&names[i], DType::F32, &dims_flat), false, Chunk::whole(1, 1))
                        .unwrap(),
                }
            }
        })
        .collect();
    let report = lease.stage_inputs(&stream, &sources).unwrap();
    assert_eq!(report.host_to_device_copies, 1);
    assert!(lease.binding_kinds().iter().all(|k| *k == BindingKind::Staged));
    for i in [1usize, 77, 189] {
        let mut got = vec![0u8; 1024];
        stream.download(lease.input_bindings()[i], &mut got).unwrap();
        assert_eq!(got, f32_bytes(&data[i]), "input {i}");
    }
    let mut got = vec![0u8; 4 * 64 * 4];
    stream.download(lease.input_bindings()[0], &mut got).unwrap();
    assert_eq!(&got[..3 * 256], f32_bytes(&batched));
    assert_eq!(&got[3 * 256..], &f32_bytes(&batched)[2 * 256..], "the padded row repeats the last real row");
    // Outputs: write the slot, one download, slice to 3 rows.
    stream.copy_d2d(lease.input_bindings()[0], lease.output_slot(0)).unwrap();
    lease.download_outputs(&stream).unwrap();
    let mut out = vec![0f32; 3 * 64];
    // SAFETY: f32 -> u8 view of initialised, exclusively borrowed memory.
    let out_bytes = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), out.len() * 4) };
    let plan = SlicePlan::new(TensorShape::new("out", DType::F32, &[4, 64]), true, Chunk::whole(3, 4)).unwrap();
    lease.scatter_outputs(&mut [OutputTarget { data: out_bytes, plan }]).unwrap();
    assert_eq!(out, batched);
}

/// A device-resident input padded by one kernel launch into its slot.
pub fn device_input_padded_by_one_kernel<B: Backend>(device: &B::Device) {
    let _pin = device.pin().unwrap();
    let stream = device.create_stream().unwrap();
    let layout = Arc::new(ArenaLayout::new(&[SlotSpec::new("x", 8 * 16 * 4, 4)], &[], 256).unwrap());
    let pool = ArenaPool::<B>::new(device.clone(), layout, PoolConfig::default()).unwrap();
    let mut lease = pool.lease().unwrap();
    let rows: Vec<f32> = (0..5 * 16).map(|j| j as f32 - 3.0).collect();
    let src = device.alloc(rows.len() * 4).unwrap();
    stream.upload(f32_bytes(&rows), src.as_slice()).unwrap();
    let plan = PadPlan::new(TensorShape::new("x", DType::F32, &[5, 16]), true, Chunk::whole(5, 8)).unwrap();
    let report = lease
        .stage_inputs(&stream, &[InputSource::Device { data: src.as_slice(), plan, mode: DeviceInputMode::DirectBind }])
        .unwrap();
    assert_eq!((report.device_copies, report.direct_bind_refused), (1, 1));
    stream.synchronize().unwrap();
    let mut got = vec![0u8; 8 * 16 * 4];
    stream.download(lease.input_bindings()[0], &mut got).unwrap();
    let last = &f32_bytes(&rows)[4 * 64..];
    assert_eq!(&got[..5 * 64], f32_bytes(&rows));
    for r in 5..8 {
        assert_eq!(&got[r * 64..(r + 1) * 64], last);
    }
}

/// 16 threads lease concurrently; each writes its id and reads it back: no aliasing.
pub fn concurrent_leases_never_alias<B: Backend>(device: &B::Device) {
    let layout =
        Arc::new(ArenaLayout::new(&[SlotSpec::new("id", 256, 8)], &[SlotSpec::new("echo", 256, 8)], 256).unwrap());
    let pool =
        ArenaPool::<B>::new(device.clone(), layout, PoolConfig { max_arenas: 6, ..PoolConfig::default() }).unwrap();
    std::thread::scope(|s| {
        for t in 0..16u64 {
            let pool = pool.clone();
            s.spawn(move || {
                let _pin = device.pin().unwrap();
                let stream = device.create_stream().unwrap();
                for round in 0..40u64 {
                    let id = [t * 1000 + round; 32];
                    // SAFETY: u64 -> u8 view of an initialised array.
                    let id_bytes = unsafe { std::slice::from_raw_parts(id.as_ptr().cast::<u8>(), 256) };
                    let mut lease = pool.lease().unwrap();
                    let plan =
                        PadPlan::new(TensorShape::new("id", DType::U64, &[32]), false, Chunk::whole(1, 1)).unwrap();
                    lease.stage_inputs(&stream, &[InputSource::Host { data: id_bytes, plan }]).unwrap();
                    stream.copy_d2d(lease.input_bindings()[0], lease.output_slot(0)).unwrap();
                    lease.download_outputs(&stream).unwrap();
                    let mut back = [0u64; 32];
                    // SAFETY: as above, mutable.
                    let back_bytes = unsafe { std::slice::from_raw_parts_mut(back.as_mut_ptr().cast::<u8>(), 256) };
                    let out_plan =
                        SlicePlan::new(TensorShape::new("echo", DType::U64, &[32]), false, Chunk::whole(1, 1)).unwrap();
                    lease.scatter_outputs(&mut [OutputTarget { data: back_bytes, plan: out_plan }]).unwrap();
                    assert_eq!(back, id, "thread {t} round {round}");
                }
            });
        }
    });
}

/// Generates the arena backend tests for one backend.
#[macro_export]
macro_rules! arena_backend_tests {
    ($backend:ty) => {
        #[test]
        fn many_inputs_one_copy_round_trip() {
            let Some(d) = saggar_device::conformance::open_or_skip::<$backend>("many_inputs_one_copy_round_trip")
            else {
                return;
            };
            common::many_inputs_one_copy_round_trip::<$backend>(&d);
        }
        #[test]
        fn device_input_padded_by_one_kernel() {
            let Some(d) = saggar_device::conformance::open_or_skip::<$backend>("device_input_padded_by_one_kernel")
            else {
                return;
            };
            common::device_input_padded_by_one_kernel::<$backend>(&d);
        }
        #[test]
        fn concurrent_leases_never_alias() {
            let Some(d) = saggar_device::conformance::open_or_skip::<$backend>("concurrent_leases_never_alias") else {
                return;
            };
            common::concurrent_leases_never_alias::<$backend>(&d);
        }
    };
}
