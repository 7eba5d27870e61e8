//! GPU graph benchmarks of the CUDA backend, each a ratio measured within one run:
//!
//! - **replay vs eager**: N = 1, 10, 100, 1000 launches of `saggar_axpy_f32` on 256 floats, replayed as one
//!   graph against launched one by one, as wall time per iteration including a stream synchronisation;
//! - **update vs re-instantiate**: a 100-node graph re-pointed at other buffers by `GraphExec::update`
//!   against re-instantiating it (and destroying the old executable graph); the re-capture both paths
//!   need is timed apart and reported both ways;
//! - **saggar's CPU cost**: `Stream::launch` and `Stream::launch_graph` against bare cudarc `result` calls
//!   (`launch_kernel`, `graph::launch`) doing the same, per call, enqueue only (target: under 10% more).
//!
//! A plain binary (`harness = false`): `cargo bench -p saggar-device --bench gpu_graphs -- --json out.json`
//! (or the path as the first argument). It prints a table, writes JSON, and, without a GPU, prints why
//! it skips (and writes that to the JSON) and exits successfully.

use std::path::PathBuf;

fn main() {
    let json_path = json_path_from_args();
    let report = run();
    match &report {
        Ok(value) => println!("{}", serde_json::to_string_pretty(value).expect("JSON")),
        Err(reason) => println!("gpu_graphs: skipping: {reason}"),
    }
    if let Some(path) = json_path {
        let value = report.unwrap_or_else(|reason| serde_json::json!({ "skipped": reason }));
        std::fs::write(&path, serde_json::to_string_pretty(&value).expect("JSON") + "\n")
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        eprintln!("gpu_graphs: wrote {}", path.display());
    }
}

/// `--json PATH`, or the first argument that is not a flag. (`cargo bench` adds `--bench`.)
fn json_path_from_args() -> Option<PathBuf> {
    let mut args = std::env::args().skip(1);
    let mut positional = None;
    while let Some(arg) = args.next() {
        if arg == "--json" {
            return args.next().map(PathBuf::from);
        } else if let Some(path) = arg.strip_prefix("--json=") {
            return Some(PathBuf::from(path));
        } else if !arg.starts_with('-') && positional.is_none() {
            positional = Some(PathBuf::from(arg));
        }
    }
    positional
}

#[cfg(not(feature = "cuda"))]
fn run() -> Result<serde_json::Value, String> {
    Err("saggar-device was built without the `cuda` feature".into())
}

#[cfg(feature = "cuda")]
fn run() -> Result<serde_json::Value, String> {
    cuda::run()
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::ffi::c_void;
    use std::time::{Duration, Instant};

    use cudarc::driver::result as cu;
    use saggar_device::conformance::builtin_module;
    use saggar_device::cuda::{CudaBackend, CudaDevice, CudaKernel, CudaStream};
    use saggar_device::{
        Backend, CaptureMode, Device, DeviceBuffer, DevicePtr, Graph, GraphExec, KernelArg, LaunchConfig, Module,
        Stream, builtin,
    };
    use serde_json::{Value, json};

    const FLOATS: u64 = 256;

    fn median(mut samples: Vec<Duration>) -> Duration {
        samples.sort_unstable();
        samples[samples.len() / 2]
    }

    fn us(d: Duration) -> f64 {
        d.as_secs_f64() * 1e6
    }

    fn ns(d: Duration) -> f64 {
        d.as_secs_f64() * 1e9
    }

    struct Axpy<'a> {
        stream: &'a CudaStream,
        kernel: &'a CudaKernel,
        config: LaunchConfig,
    }

    impl Axpy<'_> {
        fn launch(&self, x: DevicePtr, y: DevicePtr) {
            let args = [KernelArg::U64(FLOATS), KernelArg::F32(0.5), KernelArg::Ptr(x), KernelArg::Ptr(y)];
            // SAFETY: `x` and `y` name buffers of `FLOATS` floats that live until `run` returns, after the
            // last synchronisation.
            unsafe { self.stream.launch(self.kernel, &self.config, &args) }.expect("launch");
        }

        fn launches(&self, n: usize, x: DevicePtr, y: DevicePtr) {
            for _ in 0..n {
                self.launch(x, y);
            }
        }
    }

    pub(super) fn run() -> Result<Value, String> {
        let devices = CudaBackend::enumerate().map_err(|e| e.to_string())?;
        let device = CudaBackend::open(0).map_err(|e| e.to_string())?;
        let _pin = device.pin().map_err(|e| e.to_string())?;
        let module = builtin_module::<CudaBackend>(&device);
        let kernel = module.kernel(builtin::AXPY_F32).map_err(|e| e.to_string())?;
        let stream = device.create_stream().map_err(|e| e.to_string())?;
        let bufs: Vec<_> = (0..4).map(|_| device.alloc(FLOATS as usize * 4).expect("alloc")).collect();
        for b in &bufs {
            stream.memset(b.as_slice(), 0).expect("memset");
        }
        stream.synchronize().expect("sync");
        let axpy = Axpy { stream: &stream, kernel: &kernel, config: LaunchConfig::for_elements(FLOATS, 256) };
        let (x, y) = (bufs[0].ptr(), bufs[1].ptr());

        println!("gpu_graphs on {} ({}), {}", devices[0].name, devices[0].arch, devices[0].driver_version);
        let replay = replay_vs_eager(&device, &axpy, x, y);
        let update = update_vs_reinstantiate(&device, &axpy, [&bufs[0], &bufs[1]], [&bufs[2], &bufs[3]]);
        let overhead = launch_overhead(&device, &axpy, x, y);
        device.synchronize().expect("sync");
        let deferred = device.take_deferred_errors();
        assert!(deferred.is_empty(), "destructors recorded errors: {deferred:?}");

        let ratio_100 = replay.iter().find(|r| r["n"] == 100).and_then(|r| r["ratio"].as_f64()).unwrap_or(0.0);
        Ok(json!({
            "device": {
                "name": devices[0].name,
                "arch": devices[0].arch,
                "total_memory": devices[0].total_memory,
                "driver_version": devices[0].driver_version,
                "visible_devices": devices.len(),
            },
            "nvrtc_version": saggar_device::cuda::nvrtc_version().map(|(a, b)| format!("{a}.{b}")).ok(),
            "replay_vs_eager": replay,
            "update_vs_reinstantiate": update,
            "launch_overhead": overhead,
            "targets": {
                "replay_100_at_least_3x": ratio_100 >= 3.0,
                "update_at_least_10x": update["ratio_update_only"].as_f64().unwrap_or(0.0) >= 10.0,
                "launch_overhead_under_10pct": overhead["launch_overhead_pct"].as_f64().unwrap_or(f64::MAX) < 10.0,
                "graph_launch_overhead_under_10pct":
                    overhead["graph_launch_overhead_pct"].as_f64().unwrap_or(f64::MAX) < 10.0,
            },
        }))
    }

    /// (a) N launches replayed as one graph vs launched eagerly, per iteration with a synchronisation.
    fn replay_vs_eager(device: &CudaDevice, axpy: &Axpy<'_>, x: DevicePtr, y: DevicePtr) -> Vec<Value> {
        println!("\n(a) graph replay vs eager launches, saggar_axpy_f32 on {FLOATS} floats, wall time per iteration");
        println!("{:>6} {:>8} {:>14} {:>14} {:>8}", "N", "iters", "eager us", "graph us", "ratio");
        let mut rows = Vec::new();
        for n in [1usize, 10, 100, 1000] {
            let iters = (20_000 / n).clamp(50, 2_000);
            axpy.stream.begin_capture(CaptureMode::ThreadLocal).expect("begin capture");
            axpy.launches(n, x, y);
            let graph = axpy.stream.end_capture().expect("end capture");
            assert_eq!(graph.node_count(), n);
            let exec = device.instantiate(&graph).expect("instantiate");
            let eager_iter = || {
                let t = Instant::now();
                axpy.launches(n, x, y);
                axpy.stream.synchronize().expect("sync");
                t.elapsed()
            };
            let graph_iter = || {
                let t = Instant::now();
                // SAFETY: the graph replays `x` and `y`, live until `run` returns.
                unsafe { axpy.stream.launch_graph(&exec) }.expect("launch graph");
                axpy.stream.synchronize().expect("sync");
                t.elapsed()
            };
            for _ in 0..3 {
                eager_iter();
                graph_iter();
            }
            // Interleaved, so drift in clocks or load affects both sides alike.
            let (mut eager, mut replay) = (Vec::with_capacity(iters), Vec::with_capacity(iters));
            for _ in 0..iters {
                eager.push(eager_iter());
                replay.push(graph_iter());
            }
            let (e, g) = (median(eager), median(replay));
            let ratio = e.as_secs_f64() / g.as_secs_f64();
            println!("{n:>6} {iters:>8} {:>14.2} {:>14.2} {ratio:>7.2}x", us(e), us(g));
            rows.push(json!({ "n": n, "iterations": iters, "eager_us": us(e), "graph_us": us(g), "ratio": ratio }));
        }
        rows
    }

    /// (b) A 100-node graph re-pointed at other buffers: in-place update vs re-instantiate.
    fn update_vs_reinstantiate(
        device: &CudaDevice,
        axpy: &Axpy<'_>,
        set_a: [&saggar_device::cuda::CudaDeviceBuffer; 2],
        set_b: [&saggar_device::cuda::CudaDeviceBuffer; 2],
    ) -> Value {
        const NODES: usize = 100;
        const ITERS: usize = 60;
        let capture = |set: [&saggar_device::cuda::CudaDeviceBuffer; 2]| {
            axpy.stream.begin_capture(CaptureMode::ThreadLocal).expect("begin capture");
            axpy.launches(NODES, set[0].ptr(), set[1].ptr());
            axpy.stream.end_capture().expect("end capture")
        };
        let mut exec = device.instantiate(&capture(set_a)).expect("instantiate");
        let (mut capture_t, mut update_t, mut reinstantiate_t) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..ITERS + 3 {
            let set = if i % 2 == 0 { set_b } else { set_a };
            let t = Instant::now();
            let graph = capture(set);
            let captured = t.elapsed();

            let t = Instant::now();
            exec.update(&graph).expect("update");
            let updated = t.elapsed();

            let t = Instant::now();
            let fresh = device.instantiate(&graph).expect("instantiate");
            let old = std::mem::replace(&mut exec, fresh);
            drop(old);
            let reinstantiated = t.elapsed();

            // Both executable graphs now point at `set`; replay one to keep the work honest.
            // SAFETY: `set` is live until `run` returns.
            unsafe { axpy.stream.launch_graph(&exec) }.expect("launch graph");
            axpy.stream.synchronize().expect("sync");
            if i >= 3 {
                capture_t.push(captured);
                update_t.push(updated);
                reinstantiate_t.push(reinstantiated);
            }
        }
        let (c, u, r) = (median(capture_t), median(update_t), median(reinstantiate_t));
        let ratio_update_only = (c + r).as_secs_f64() / u.as_secs_f64();
        let ratio_with_capture = (c + r).as_secs_f64() / (c + u).as_secs_f64();
        println!("\n(b) {NODES}-node graph re-pointed at other buffers, median of {ITERS}");
        println!("{:>34} {:>12.2} us", "re-capture", us(c));
        println!("{:>34} {:>12.2} us", "exec update in place", us(u));
        println!("{:>34} {:>12.2} us", "re-instantiate (+ destroy old)", us(r));
        println!("{:>34} {:>12.2}x", "(capture + instantiate) / update", ratio_update_only);
        println!("{:>34} {:>12.2}x", "(capture + instantiate) / (capture + update)", ratio_with_capture);
        json!({
            "nodes": NODES,
            "iterations": ITERS,
            "capture_us": us(c),
            "update_us": us(u),
            "reinstantiate_us": us(r),
            "ratio_update_only": ratio_update_only,
            "ratio_with_capture": ratio_with_capture,
        })
    }

    /// (c) CPU cost per enqueue: saggar vs a bare cudarc `result` call doing the same.
    fn launch_overhead(device: &CudaDevice, axpy: &Axpy<'_>, x: DevicePtr, y: DevicePtr) -> Value {
        const BATCH: usize = 256;
        const BATCHES: usize = 200;
        let stream = axpy.stream;
        let raw_stream = stream.raw_handle();
        let raw_kernel = axpy.kernel.raw_handle();
        let grid = (axpy.config.grid.x, axpy.config.grid.y, axpy.config.grid.z);
        let block = (axpy.config.block.x, axpy.config.block.y, axpy.config.block.z);

        let saggar_launches = || {
            let t = Instant::now();
            axpy.launches(BATCH, x, y);
            let d = t.elapsed();
            stream.synchronize().expect("sync");
            d / BATCH as u32
        };
        let bare_launches = || {
            let t = Instant::now();
            for _ in 0..BATCH {
                let (mut n, mut a, mut px, mut py) = (FLOATS, 0.5f32, x.0, y.0);
                let mut params = [
                    (&mut n as *mut u64).cast::<c_void>(),
                    (&mut a as *mut f32).cast::<c_void>(),
                    (&mut px as *mut u64).cast::<c_void>(),
                    (&mut py as *mut u64).cast::<c_void>(),
                ];
                // SAFETY: the same kernel, arguments and stream as saggar's launch; every parameter points to a
                // local of the parameter's size that outlives the call.
                unsafe { cu::launch_kernel(raw_kernel, grid, block, 0, raw_stream, &mut params) }
                    .expect("cuLaunchKernel");
            }
            let d = t.elapsed();
            stream.synchronize().expect("sync");
            d / BATCH as u32
        };

        stream.begin_capture(CaptureMode::ThreadLocal).expect("begin capture");
        axpy.launch(x, y);
        let graph = stream.end_capture().expect("end capture");
        let exec = device.instantiate(&graph).expect("instantiate");
        let raw_exec = exec.raw_handle().expect("a one-node graph is instantiated");
        let saggar_graphs = || {
            let t = Instant::now();
            for _ in 0..BATCH {
                // SAFETY: the graph replays `x` and `y`, live until `run` returns.
                unsafe { stream.launch_graph(&exec) }.expect("launch graph");
            }
            let d = t.elapsed();
            stream.synchronize().expect("sync");
            d / BATCH as u32
        };
        let bare_graphs = || {
            let t = Instant::now();
            for _ in 0..BATCH {
                // SAFETY: the same executable graph and stream; nothing else launches it meanwhile.
                unsafe { cu::graph::launch(raw_exec, raw_stream) }.expect("cuGraphLaunch");
            }
            let d = t.elapsed();
            stream.synchronize().expect("sync");
            d / BATCH as u32
        };

        for _ in 0..5 {
            saggar_launches();
            bare_launches();
            saggar_graphs();
            bare_graphs();
        }
        let mut samples: [Vec<Duration>; 4] = Default::default();
        for _ in 0..BATCHES {
            samples[0].push(saggar_launches());
            samples[1].push(bare_launches());
            samples[2].push(saggar_graphs());
            samples[3].push(bare_graphs());
        }
        let [kl, bl, kg, bg] = samples.map(median);
        let pct = |saggar: Duration, bare: Duration| (saggar.as_secs_f64() / bare.as_secs_f64() - 1.0) * 100.0;
        println!("\n(c) CPU cost per enqueue, median of {BATCHES} batches of {BATCH}");
        println!("{:>14} {:>12} {:>12} {:>10}", "", "saggar ns", "bare ns", "overhead");
        println!("{:>14} {:>12.0} {:>12.0} {:>9.1}%", "launch", ns(kl), ns(bl), pct(kl, bl));
        println!("{:>14} {:>12.0} {:>12.0} {:>9.1}%", "graph launch", ns(kg), ns(bg), pct(kg, bg));
        json!({
            "batch": BATCH,
            "batches": BATCHES,
            "saggar_launch_ns": ns(kl),
            "bare_launch_ns": ns(bl),
            "launch_overhead_pct": pct(kl, bl),
            "saggar_graph_launch_ns": ns(kg),
            "bare_graph_launch_ns": ns(bg),
            "graph_launch_overhead_pct": pct(kg, bg),
        })
    }
}
