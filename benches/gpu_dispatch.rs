//! The dispatcher on the best backend present (CUDA on the GPU machine): the CPU cost of an
//! ultra-fast direct-bind run (`run_device`, validating every tensor per run, and a `DeviceBinding`,
//! validated once) against a bare launch of the same captured graph, and end-to-end latency of the
//! pinned-copy path and of a `Request` (inputs written in place into pinned staging: one copy, the
//! replay, one download) against the same device work done by hand (one prefilled copy of the bytes
//! the request sends + the bare graph + one download, by stream calls and as one captured graph), for
//! the default 190-input recommender at batch 1 with `saggar perf`'s buckets (1..64), all in one run,
//! the end-to-end rows interleaved in one loop.
//! `--json PATH` writes the figures.

use std::sync::Arc;
use std::time::{Duration, Instant};

use saggar::device::{
    Backend, BackendChoice, BackendKind, BackendVisitor, CaptureMode, Device, DeviceBuffer, PinnedBuffer, Stream,
    resolve, visit_backend,
};
use saggar::dispatch::{
    BucketSpec, DeviceTensor, HostTensor, Program, ProgramCompiler, RunPath, Session, SessionConfig,
};
use saggar::models::{ModelConfig, ModelKind, ReferenceCompiler, generate_inputs};

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6
}

struct Bench {
    iterations: usize,
}

struct Figures {
    device: String,
    run_enqueue_us: f64,
    bound_enqueue_us: f64,
    bound_e2e_us: f64,
    bare_launch_us: f64,
    run_device_e2e_us: f64,
    bare_e2e_us: f64,
    pinned_e2e_us: f64,
    request_e2e_us: f64,
    request_views_e2e_us: f64,
    request_run_us: f64,
    prefilled_replay_us: f64,
    same_work_graph_us: f64,
    tight_replay_us: f64,
    upload_bytes: usize,
    input_bytes: usize,
}

impl BackendVisitor for Bench {
    type Output = Result<Figures, String>;
    fn visit<B: Backend>(self) -> Self::Output {
        let e = |x: &dyn std::fmt::Display| x.to_string();
        let device = B::open(0).map_err(|x| e(&x))?;
        let _pin = device.pin().map_err(|x| e(&x))?;
        let config: ModelConfig = ModelKind::Recsys.default_config();
        let compiler = Arc::new(ReferenceCompiler::from_config(config.clone()).map_err(|x| e(&x))?);
        let session_config = SessionConfig::builder()
            // The buckets `saggar perf` serves by default; two run contexts, so the pinned-copy path
            // runs while a Request holds the other.
            .buckets(BucketSpec::PowersOfTwo { max: 64 })
            .max_concurrency(2)
            .build()
            .map_err(|x| e(&x))?;
        let session = Session::<B, ReferenceCompiler>::new(device.clone(), compiler.clone(), session_config, &|_| {})
            .map_err(|x| e(&x))?;
        let stream = device.create_stream().map_err(|x| e(&x))?;
        let batch = 1u64;
        let inputs = generate_inputs(&config, batch as usize, 1);
        let dims = config.input_dims(batch);
        let out_dims = config.output_dims(batch);
        let in_bufs: Vec<B::DeviceBuffer> = inputs
            .iter()
            .map(|d| {
                let b = device.alloc(d.len()).unwrap();
                stream.upload(d, b.as_slice()).unwrap();
                b
            })
            .collect();
        let sig = session.signature();
        let out_bufs: Vec<B::DeviceBuffer> = sig
            .outputs()
            .iter()
            .zip(&out_dims)
            .map(|(s, d)| device.alloc(d.iter().product::<u64>() as usize * s.dtype().size_bytes()).unwrap())
            .collect();
        let ins: Vec<DeviceTensor<'_>> = sig
            .inputs()
            .iter()
            .zip(&in_bufs)
            .zip(&dims)
            .map(|((s, b), d)| DeviceTensor { name: s.name(), dtype: s.dtype(), dims: d, data: b.as_slice() })
            .collect();
        let outs: Vec<DeviceTensor<'_>> = sig
            .outputs()
            .iter()
            .zip(&out_bufs)
            .zip(&out_dims)
            .map(|((s, b), d)| DeviceTensor { name: s.name(), dtype: s.dtype(), dims: d, data: b.as_slice() })
            .collect();
        session.run_device(&ins, &outs).map_err(|x| e(&x))?;
        let info = session.run_device(&ins, &outs).map_err(|x| e(&x))?;
        assert_eq!(info.path, RunPath::UltraFast);

        // The bare baseline: the same program, captured once with the same pointers.
        let request = saggar::dispatch::CompileRequest::new(&dims, Some(1));
        let artifact =
            <ReferenceCompiler as ProgramCompiler<B>>::compile(&compiler, &device, &request).map_err(|x| e(&x))?;
        let program = <ReferenceCompiler as ProgramCompiler<B>>::load(&compiler, &device, &request, &artifact)
            .map_err(|x| e(&x))?;
        let scratch = device.alloc(program.scratch_bytes().max(1)).map_err(|x| e(&x))?;
        let in_slices: Vec<_> = in_bufs.iter().map(|b| b.as_slice()).collect();
        let out_slices: Vec<_> = out_bufs.iter().map(|b| b.as_slice()).collect();
        stream.begin_capture(CaptureMode::ThreadLocal).map_err(|x| e(&x))?;
        // SAFETY: every buffer outlives the benchmark.
        unsafe { program.launch(&stream, &in_slices, &out_slices, scratch.slice(0, program.scratch_bytes()).unwrap()) }
            .map_err(|x| e(&x))?;
        let exec = device.instantiate(&stream.end_capture().map_err(|x| e(&x))?).map_err(|x| e(&x))?;

        let binding = session.bind_device(&ins, &outs).map_err(|x| e(&x))?;
        assert_eq!(binding.run().map_err(|x| e(&x))?.path, RunPath::UltraFast);
        let n = self.iterations;
        let mut bound_enqueue = Vec::with_capacity(n);
        let mut bound_e2e = Vec::with_capacity(n);
        let mut run_enqueue = Vec::with_capacity(n);
        let mut run_e2e = Vec::with_capacity(n);
        let mut bare = Vec::with_capacity(n);
        let mut bare_e2e = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            let pending = session.enqueue_device(&ins, &outs).unwrap();
            run_enqueue.push(t.elapsed());
            pending.wait().unwrap();
            run_e2e.push(t.elapsed());
            let t = Instant::now();
            let pending = binding.enqueue().unwrap();
            bound_enqueue.push(t.elapsed());
            pending.wait().unwrap();
            bound_e2e.push(t.elapsed());
            let t = Instant::now();
            // SAFETY: the graph's buffers outlive the benchmark.
            unsafe { stream.launch_graph(&exec).unwrap() };
            bare.push(t.elapsed());
            stream.synchronize().unwrap();
            bare_e2e.push(t.elapsed());
        }
        let host: Vec<HostTensor<'_>> = sig
            .inputs()
            .iter()
            .zip(&inputs)
            .zip(&dims)
            .map(|((s, d), dims)| HostTensor { name: s.name(), dtype: s.dtype(), dims, data: d })
            .collect();
        let mut out_host: Vec<Vec<u64>> =
            out_dims.iter().map(|d| vec![0u64; (d.iter().product::<u64>() as usize).div_ceil(2)]).collect();
        // A Request (one run context; the pinned-copy path leases the other), against the same device
        // work done by hand: one prefilled copy of the bytes the request's copy sends + the bare graph
        // + one download, by stream calls and as one captured graph; and against a prefilled copy of
        // the inputs' bytes alone (no slot alignment gaps). All interleaved in one loop.
        let mut request = session.request(batch).map_err(|x| e(&x))?;
        let (upload, download) = (request.upload_bytes(), request.download_bytes());
        let input_bytes: usize = inputs.iter().map(Vec::len).sum();
        let mut prefilled = device.alloc_pinned(upload.max(input_bytes)).map_err(|x| e(&x))?;
        let mut offset = 0;
        for d in &inputs {
            prefilled.as_mut_slice()[offset..offset + d.len()].copy_from_slice(d);
            offset += d.len();
        }
        let staged_target = device.alloc(upload.max(input_bytes)).map_err(|x| e(&x))?;
        let download_source = device.alloc(download.max(1)).map_err(|x| e(&x))?;
        let readback = device.alloc_pinned(download.max(out_bufs[0].len())).map_err(|x| e(&x))?;
        stream.begin_capture(CaptureMode::ThreadLocal).map_err(|x| e(&x))?;
        // SAFETY: every buffer outlives the benchmark; each replay is synchronized before the next.
        unsafe {
            stream.copy_h2d_async(&prefilled, 0, staged_target.slice(0, upload).unwrap()).map_err(|x| e(&x))?;
            program
                .launch(&stream, &in_slices, &out_slices, scratch.slice(0, program.scratch_bytes()).unwrap())
                .map_err(|x| e(&x))?;
            stream.copy_d2h_async(download_source.slice(0, download).unwrap(), &readback, 0).map_err(|x| e(&x))?;
        }
        let same_work_graph = device.instantiate(&stream.end_capture().map_err(|x| e(&x))?).map_err(|x| e(&x))?;
        request.run().map_err(|x| e(&x))?;
        let mut samples: [Vec<Duration>; 7] = std::array::from_fn(|_| Vec::with_capacity(n));
        for _ in 0..n {
            let mut views: Vec<&mut [u8]> = out_host
                .iter_mut()
                .zip(&out_dims)
                .map(|(v, d)| {
                    let len = d.iter().product::<u64>() as usize * 4;
                    // SAFETY: u64 -> u8 view of initialised, exclusively borrowed memory of at least `len` bytes.
                    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), len) }
                })
                .collect();
            let t = Instant::now();
            session.run_into(&host, &mut views).unwrap();
            samples[0].push(t.elapsed());
            let t = Instant::now();
            for (i, d) in inputs.iter().enumerate() {
                request.write_input_bytes(i, d).unwrap();
            }
            request.run().unwrap();
            samples[1].push(t.elapsed());
            let t = Instant::now();
            for (i, d) in inputs.iter().enumerate() {
                request.input_bytes_mut(i).unwrap().copy_from_slice(d);
            }
            request.run().unwrap();
            samples[2].push(t.elapsed());
            let t = Instant::now();
            request.run().unwrap();
            samples[3].push(t.elapsed());
            let t = Instant::now();
            // SAFETY: the pinned buffers and device buffers outlive the synchronize below.
            unsafe {
                stream.copy_h2d_async(&prefilled, 0, staged_target.slice(0, upload).unwrap()).unwrap();
                stream.launch_graph(&exec).unwrap();
                stream.copy_d2h_async(download_source.slice(0, download).unwrap(), &readback, 0).unwrap();
            }
            stream.synchronize().unwrap();
            samples[4].push(t.elapsed());
            let t = Instant::now();
            // SAFETY: as above.
            unsafe { stream.launch_graph(&same_work_graph).unwrap() };
            stream.synchronize().unwrap();
            samples[5].push(t.elapsed());
            let t = Instant::now();
            // SAFETY: as above.
            unsafe {
                stream.copy_h2d_async(&prefilled, 0, staged_target.slice(0, input_bytes).unwrap()).unwrap();
                stream.launch_graph(&exec).unwrap();
                stream.copy_d2h_async(out_bufs[0].as_slice(), &readback, 0).unwrap();
            }
            stream.synchronize().unwrap();
            samples[6].push(t.elapsed());
        }
        drop(request);
        let [pinned, request_e2e, request_views_e2e, request_run, prefilled_replay, same_work_graph, tight_replay] =
            samples.map(median);
        Ok(Figures {
            device: format!("{} ({})", device.info().name, B::KIND),
            run_enqueue_us: median(run_enqueue),
            bound_enqueue_us: median(bound_enqueue),
            bound_e2e_us: median(bound_e2e),
            bare_launch_us: median(bare),
            run_device_e2e_us: median(run_e2e),
            bare_e2e_us: median(bare_e2e),
            pinned_e2e_us: pinned,
            request_e2e_us: request_e2e,
            request_views_e2e_us: request_views_e2e,
            request_run_us: request_run,
            prefilled_replay_us: prefilled_replay,
            same_work_graph_us: same_work_graph,
            tight_replay_us: tight_replay,
            upload_bytes: upload,
            input_bytes,
        })
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json = args.iter().position(|a| a == "--json").and_then(|i| args.get(i + 1)).cloned();
    let kind = resolve(BackendChoice::Auto).expect("auto always resolves");
    let iterations = if kind == BackendKind::Host { 200 } else { 5000 };
    let f = match visit_backend(kind, Bench { iterations }) {
        Ok(Ok(f)) => f,
        Ok(Err(e)) => {
            eprintln!("gpu_dispatch: {e}");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("gpu_dispatch: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "gpu_dispatch on {}, recsys (190 inputs) batch 1, buckets 1..64, median of {iterations}; the request's copy \
         sends {} bytes (its inputs: {} bytes)",
        f.device, f.upload_bytes, f.input_bytes
    );
    let (bare, prefilled) = (Some((f.bare_launch_us, "bare")), Some((f.prefilled_replay_us, "prefilled")));
    let bare_e2e = Some((f.bare_e2e_us, "bare"));
    let pinned = Some((f.pinned_e2e_us, "pinned run_into"));
    let rows = [
        ("ultra-fast run_device, CPU cost to enqueue", f.run_enqueue_us, bare),
        ("ultra-fast DeviceBinding, CPU cost to enqueue", f.bound_enqueue_us, bare),
        ("bare graph launch, CPU cost to enqueue", f.bare_launch_us, None),
        ("ultra-fast run_device, enqueue + wait", f.run_device_e2e_us, bare_e2e),
        ("ultra-fast DeviceBinding, enqueue + wait", f.bound_e2e_us, bare_e2e),
        ("bare graph launch, enqueue + wait", f.bare_e2e_us, None),
        ("pinned-copy run_into (host in, host out)", f.pinned_e2e_us, prefilled),
        ("Request: write_input (streamed) + run", f.request_e2e_us, pinned),
        ("Request: write through views + run", f.request_views_e2e_us, pinned),
        ("Request: run (inputs already in place)", f.request_run_us, prefilled),
        ("same device work as one captured graph", f.same_work_graph_us, prefilled),
        ("prefilled copy + bare graph + download", f.prefilled_replay_us, None),
        ("the same, copying the inputs' bytes only", f.tight_replay_us, prefilled),
    ];
    for (label, us, base) in rows {
        let ratio = base.map(|(b, name)| format!("   ({:.2}x {name})", us / b)).unwrap_or_default();
        println!("  {label:<46} {us:>9.2} us{ratio}");
    }
    println!(
        "  targets: Request run / prefilled copy of the same bytes + replay + download {:.2}x (<= 1.1x); \
         pinned / Request (streamed writes + run) {:.2}x (>= 1.2x)",
        f.request_run_us / f.prefilled_replay_us,
        f.pinned_e2e_us / f.request_e2e_us
    );
    if let Some(path) = json {
        let fields = [
            ("run_enqueue_us", f.run_enqueue_us),
            ("bound_enqueue_us", f.bound_enqueue_us),
            ("bare_launch_us", f.bare_launch_us),
            ("run_device_e2e_us", f.run_device_e2e_us),
            ("bound_e2e_us", f.bound_e2e_us),
            ("bare_e2e_us", f.bare_e2e_us),
            ("pinned_e2e_us", f.pinned_e2e_us),
            ("enqueue_ratio", f.run_enqueue_us / f.bare_launch_us),
            ("e2e_ratio", f.run_device_e2e_us / f.bare_e2e_us),
            ("bound_enqueue_ratio", f.bound_enqueue_us / f.bare_launch_us),
            ("bound_e2e_ratio", f.bound_e2e_us / f.bare_e2e_us),
            ("request_e2e_us", f.request_e2e_us),
            ("request_views_e2e_us", f.request_views_e2e_us),
            ("request_run_us", f.request_run_us),
            ("prefilled_replay_us", f.prefilled_replay_us),
            ("same_work_graph_us", f.same_work_graph_us),
            ("tight_replay_us", f.tight_replay_us),
            ("upload_bytes", f.upload_bytes as f64),
            ("input_bytes", f.input_bytes as f64),
            ("request_ratio", f.request_e2e_us / f.prefilled_replay_us),
            ("request_run_ratio", f.request_run_us / f.prefilled_replay_us),
            ("pinned_over_request", f.pinned_e2e_us / f.request_e2e_us),
        ];
        let numbers: Vec<String> = fields.iter().map(|(k, v)| format!("{k:?}:{v:.3}")).collect();
        let text = format!(
            "{{\"bench\":\"gpu_dispatch\",\"device\":{:?},\"iterations\":{iterations},{}}}\n",
            f.device,
            numbers.join(",")
        );
        std::fs::write(&path, text).unwrap_or_else(|e| eprintln!("gpu_dispatch: cannot write {path}: {e}"));
    }
}
