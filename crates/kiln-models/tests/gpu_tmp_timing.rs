//! temporary timing (deleted after use)
#![cfg(feature = "cuda")]
#![allow(clippy::undocumented_unsafe_blocks)]
mod common;
use common::*;
use kiln_device::cuda::CudaBackend;
use kiln_device::{Backend, CaptureMode, Device, Event, Stream};
use kiln_models::{GemmVariant, ModelKind, ReferenceCompiler, generate_inputs};

#[test]
fn timing() {
    let device = CudaBackend::open(0).unwrap();
    for gemm in [GemmVariant::SplitK, GemmVariant::Naive] {
        let compiler = ReferenceCompiler::from_config(ModelKind::Recsys.default_config()).unwrap().with_gemm(gemm);
        for batch in [1usize, 8, 64] {
            let t = std::time::Instant::now();
            let art = compile::<CudaBackend>(&compiler, &device, batch as u64);
            let compile_ms = t.elapsed().as_secs_f64() * 1e3;
            let program = load::<CudaBackend>(&compiler, &device, &art);
            let b = Bindings::<CudaBackend>::new(&device, compiler.config(), &program, batch);
            let stream = device.create_stream().unwrap();
            b.upload(&stream, &generate_inputs(compiler.config(), batch, 1));
            stream.begin_capture(CaptureMode::ThreadLocal).unwrap();
            b.launch(&program, &stream).unwrap();
            let g = stream.end_capture().unwrap();
            let exec = device.instantiate(&g).unwrap();
            for _ in 0..50 { unsafe { stream.launch_graph(&exec).unwrap() }; }
            stream.synchronize().unwrap();
            let (e0, e1) = (device.create_event().unwrap(), device.create_event().unwrap());
            let n = 1000;
            stream.record(&e0).unwrap();
            for _ in 0..n { unsafe { stream.launch_graph(&exec).unwrap() }; }
            stream.record(&e1).unwrap();
            e1.synchronize().unwrap();
            let us = e1.elapsed_since(&e0).unwrap().as_secs_f64() * 1e6 / n as f64;
            println!("{:?} batch {batch}: compile {compile_ms:.1} ms, graph replay {us:.2} us GPU", gemm);
        }
    }
}
