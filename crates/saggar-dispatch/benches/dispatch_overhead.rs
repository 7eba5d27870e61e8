//! The CPU cost of `run` on the ultra-fast path for a 190-input model (host backend, kernel
//! execution excluded: only the call that validates, binds and enqueues is timed; the wait for the
//! kernel is outside the timed region): `run_device` (every tensor validated per run) and a
//! `DeviceBinding` (validated once), side by side with a bare launch of the same captured graph and
//! with the pinned-copy (host tensors) path.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use saggar_device::{CaptureMode, Device, DeviceBuffer, Stream};
use saggar_dispatch::{BucketSpec, HostTensor, Program, ProgramCompiler, RunPath, Session, SessionConfig};
use saggar_shape::DType;

use criterion::{Criterion, criterion_group, criterion_main};

fn overhead(c: &mut Criterion) {
    let model = Arc::new(SumModel::new(190, 2, false));
    let config =
        SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 8 }).max_concurrency(1).build().unwrap();
    let session = Session::new(host_device(), model.clone(), config, &no_progress).unwrap();
    let device = session.device().clone();
    let req = DeviceRequest::new(&device, &model, 4, 1);
    // Callers that pass the session's own name strings skip the string comparisons.
    let (mut ins, mut outs) = req.tensors(&model);
    for (t, spec) in ins.iter_mut().zip(session.signature().inputs()) {
        t.name = spec.name();
    }
    for (t, spec) in outs.iter_mut().zip(session.signature().outputs()) {
        t.name = spec.name();
    }
    session.run_device(&ins, &outs).unwrap();
    assert_eq!(session.run_device(&ins, &outs).unwrap().path, RunPath::UltraFast);

    // A bare graph launch of the same program with the same pointers.
    let dims = model.dims(4);
    let request = saggar_dispatch::CompileRequest::new(&dims, Some(4));
    let program = model.load(&device, &request, &model.compile(&device, &request).unwrap()).unwrap();
    let stream = device.create_stream().unwrap();
    let scratch = device.alloc(program.scratch_bytes()).unwrap();
    let in_slices: Vec<_> = req.inputs.iter().map(|b| b.as_slice()).collect();
    let out_slices: Vec<_> = req.outputs.iter().map(|b| b.as_slice()).collect();
    stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
    // SAFETY: every buffer outlives the benchmark.
    unsafe { program.launch(&stream, &in_slices, &out_slices, scratch.as_slice()).unwrap() };
    let exec = device.instantiate(&stream.end_capture().unwrap()).unwrap();

    let mut group = c.benchmark_group("dispatch_190_inputs");
    group.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3)).sample_size(40);
    group.bench_function("ultra_fast_run_device_enqueue", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let pending = session.enqueue_device(&ins, &outs).unwrap();
                timed += t.elapsed();
                pending.wait().unwrap();
            }
            timed
        })
    });
    // The same request as a binding: validated once, each run compares pointers and replays.
    let binding = session.bind_device(&ins, &outs).unwrap();
    assert_eq!(binding.run().unwrap().path, RunPath::UltraFast);
    group.bench_function("ultra_fast_device_binding_enqueue", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let pending = binding.enqueue().unwrap();
                timed += t.elapsed();
                pending.wait().unwrap();
            }
            timed
        })
    });
    group.bench_function("bare_graph_launch_enqueue", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                // SAFETY: the graph's buffers outlive the benchmark.
                unsafe { stream.launch_graph(&exec).unwrap() };
                timed += t.elapsed();
                stream.synchronize().unwrap();
            }
            timed
        })
    });
    let data = model.inputs(4, 2);
    let dims = model.dims(4);
    let host_inputs: Vec<HostTensor<'_>> = session
        .signature()
        .inputs()
        .iter()
        .zip(&data)
        .zip(&dims)
        .map(|((sp, d), dims)| HostTensor { name: sp.name(), dtype: DType::F32, dims, data: as_bytes(d) })
        .collect();
    let mut sum = vec![0f32; 8];
    let mut rowsum = vec![0f32; 4];
    group.bench_function("ultra_fast_run_host_pinned_copy_including_execution", |b| {
        b.iter(|| {
            // SAFETY: f32 -> u8 views of initialised, exclusively borrowed memory.
            let mut outs: [&mut [u8]; 2] =
                [unsafe { std::slice::from_raw_parts_mut(sum.as_mut_ptr().cast::<u8>(), 32) }, unsafe {
                    std::slice::from_raw_parts_mut(rowsum.as_mut_ptr().cast::<u8>(), 16)
                }];
            session.run_into(&host_inputs, &mut outs).unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, overhead);
criterion_main!(benches);
