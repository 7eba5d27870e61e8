//! Host-backend launch and graph-replay overhead: the CPU cost saggar-device adds per launch, per copy
//! and per replay, measured side by side in one run. The baseline for later work; GPU figures come
//! from the GPU bundle (`benches/gpu_graphs.rs`).

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use saggar_device::conformance::builtin_module;
use saggar_device::host::HostBackend;
use saggar_device::{Backend, CaptureMode, Device, DeviceBuffer, KernelArg, LaunchConfig, Module, Stream, builtin};

fn overhead(c: &mut Criterion) {
    let device = HostBackend::open(0).unwrap();
    let module = builtin_module::<HostBackend>(&device);
    let fill = module.kernel(builtin::FILL_U32).unwrap();
    let stream = device.create_stream().unwrap();
    let buf = device.alloc(64).unwrap();
    let args = [KernelArg::Ptr(buf.ptr()), KernelArg::U64(16), KernelArg::U32(7)];
    let config = LaunchConfig::for_elements(16, 64);

    let mut group = c.benchmark_group("host_overhead");
    group.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2)).sample_size(30);

    // The CPU cost of enqueueing one launch (validation + queueing), synchronising every 256 launches
    // so the queue stays short.
    group.bench_function("enqueue_launch", |b| {
        let mut n = 0u32;
        b.iter(|| {
            // SAFETY: `buf` outlives every launch; the stream is synchronised before it is dropped.
            unsafe { stream.launch(&fill, &config, &args).unwrap() };
            n += 1;
            if n.is_multiple_of(256) {
                stream.synchronize().unwrap();
            }
        });
        stream.synchronize().unwrap();
    });

    for nodes in [1usize, 10, 100] {
        group.bench_with_input(BenchmarkId::new("eager_launches_then_sync", nodes), &nodes, |b, &nodes| {
            b.iter(|| {
                for _ in 0..nodes {
                    // SAFETY: as above.
                    unsafe { stream.launch(&fill, &config, &args).unwrap() };
                }
                stream.synchronize().unwrap();
            });
        });
        stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
        for _ in 0..nodes {
            // SAFETY: as above.
            unsafe { stream.launch(&fill, &config, &args).unwrap() };
        }
        let exec = device.instantiate(&stream.end_capture().unwrap()).unwrap();
        group.bench_with_input(BenchmarkId::new("graph_replay_then_sync", nodes), &nodes, |b, _| {
            b.iter(|| {
                // SAFETY: the graph's only pointer is `buf`, which is live.
                unsafe { stream.launch_graph(&exec).unwrap() };
                stream.synchronize().unwrap();
            });
        });
    }
    group.finish();
}

criterion_group!(benches, overhead);
criterion_main!(benches);
