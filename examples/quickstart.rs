//! saggar quickstart: pick the best backend on this machine (CUDA, then HIP, then the host simulator),
//! run a small MLP layer stack eagerly and as a captured graph, check they agree, and time both.
//!
//! `cargo run --release --example quickstart`

use std::time::Instant;

use saggar::device::conformance::builtin_module;
use saggar::device::{
    Backend, BackendChoice, BackendVisitor, CaptureMode, Device, DeviceBuffer, KernelArg, LaunchConfig, Module, Stream,
    builtin, resolve, visit_backend,
};

struct Quickstart;

impl BackendVisitor for Quickstart {
    type Output = saggar::device::Result<()>;

    fn visit<B: Backend>(self) -> Self::Output {
        let device = B::open(0)?;
        let _pin = device.pin()?;
        println!("device: {} ({}, arch {})", device.info().name, B::KIND, device.info().arch);
        let module = builtin_module::<B>(&device);
        let gemm = module.kernel(builtin::GEMM_BIAS_ACT_F32)?;
        let stream = device.create_stream()?;

        // Four layers of 64 x 64 with bias and ReLU over a batch of 8.
        let (batch, width, layers) = (8u32, 64u32, 4usize);
        let floats = |n: u32, seed: u32| -> Vec<u8> {
            (0..n).flat_map(|i| (((i * 7 + seed * 13) % 23) as f32 / 23.0 - 0.4).to_le_bytes()).collect()
        };
        let activations: Vec<_> =
            (0..=layers).map(|_| device.alloc((batch * width * 4) as usize)).collect::<Result<_, _>>()?;
        let weights: Vec<_> =
            (0..layers).map(|_| device.alloc((width * width * 4) as usize)).collect::<Result<_, _>>()?;
        let biases: Vec<_> = (0..layers).map(|_| device.alloc((width * 4) as usize)).collect::<Result<_, _>>()?;
        stream.upload(&floats(batch * width, 1), activations[0].as_slice())?;
        for l in 0..layers {
            stream.upload(&floats(width * width, l as u32 + 2), weights[l].as_slice())?;
            stream.upload(&floats(width, l as u32 + 9), biases[l].as_slice())?;
        }
        let config = LaunchConfig::for_elements((batch * width) as u64, 256);
        let forward = || -> saggar::device::Result<()> {
            for l in 0..layers {
                let args = [
                    KernelArg::Ptr(activations[l + 1].ptr()),
                    KernelArg::Ptr(activations[l].ptr()),
                    KernelArg::Ptr(weights[l].ptr()),
                    KernelArg::Ptr(biases[l].ptr()),
                    KernelArg::U32(batch),
                    KernelArg::U32(width),
                    KernelArg::U32(width),
                    KernelArg::U32(builtin::ACT_RELU),
                ];
                // SAFETY: every buffer lives until the end of `visit`, after the last synchronize.
                unsafe { stream.launch(&gemm, &config, &args)? };
            }
            Ok(())
        };
        let output = activations[layers].as_slice();
        let mut eager_out = vec![0u8; output.len()];
        let started = Instant::now();
        let iterations = 200;
        for _ in 0..iterations {
            forward()?;
            stream.synchronize()?;
        }
        let eager = started.elapsed() / iterations;
        stream.download(output, &mut eager_out)?;

        stream.memset(output, 0)?;
        stream.begin_capture(CaptureMode::ThreadLocal)?;
        forward()?;
        let exec = device.instantiate(&stream.end_capture()?)?;
        let started = Instant::now();
        for _ in 0..iterations {
            // SAFETY: the captured buffers are all still alive.
            unsafe { stream.launch_graph(&exec)? };
            stream.synchronize()?;
        }
        let replay = started.elapsed() / iterations;
        let mut graph_out = vec![0u8; output.len()];
        stream.download(output, &mut graph_out)?;
        assert_eq!(eager_out, graph_out, "graph replay and eager launches disagree");
        println!(
            "{layers} layers, batch {batch}: eager {eager:?} per forward, graph replay {replay:?} per forward; outputs identical"
        );
        Ok(())
    }
}

fn main() {
    let kind = resolve(BackendChoice::Auto).expect("auto always finds the host backend");
    for report in saggar::device::probe_all() {
        match &report.devices {
            Ok(d) => println!("backend {}: {} device(s)", report.kind, d.len()),
            Err(e) => println!("backend {}: {e}", report.kind),
        }
    }
    if let Err(e) = visit_backend(kind, Quickstart).and_then(|r| r) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
