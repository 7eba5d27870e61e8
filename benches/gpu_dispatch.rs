//! The dispatcher on the best backend present (CUDA on the GPU machine): the CPU cost of an
//! ultra-fast direct-bind run (`run_device`, validating every tensor per run, and a `DeviceBinding`,
//! validated once) against a bare launch of the same captured graph, for the default 190-input
//! recommender at batch 1; then, for that recommender and for 190 inputs of 1 KiB, with `saggar
//! perf`'s buckets (1..64), end-to-end latency of the pinned-copy path and of a `Request` (inputs
//! written in place into pinned staging, streamed or through the views: one copy, the replay, one
//! download) against the same device work done by hand (one prefilled copy of the bytes the request
//! sends + the bare graph + one download, by stream calls and as one captured graph) and against a
//! copy of the inputs' bytes alone, interleaved in one loop; each with the session's copies made by
//! the copy kernel through the mapped pinned buffers and by the copy engine. `--json PATH` writes
//! the figures.

use std::sync::Arc;
use std::time::{Duration, Instant};

use saggar::device::{
    Backend, BackendChoice, BackendKind, BackendVisitor, CaptureMode, Device, DeviceBuffer, DeviceSlice, PinnedBuffer,
    Stream, resolve, visit_backend,
};
use saggar::dispatch::{
    BucketSpec, DeviceTensor, HostTensor, Program, ProgramCompiler, RunPath, Session, SessionConfig,
};
use saggar::models::{ModelConfig, ModelKind, RecsysConfig, ReferenceCompiler, generate_inputs};

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
    requests: Vec<RequestFigures>,
}

/// A `Request` against the pinned-copy path and the same device work by hand, for one model.
struct RequestFigures {
    model: &'static str,
    /// How the session's single copies are made: `kernel` (the default) or `copy engine`.
    copies: &'static str,
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

/// The models the request rows run: the default recommender (what `saggar perf` serves), and 190
/// dense inputs of 1 KiB each (the shape of the one-copy target) with a small MLP.
fn request_models() -> [(&'static str, ModelConfig); 2] {
    let kilobyte_inputs = RecsysConfig {
        name: "dense190x1k".into(),
        dense_inputs: 190,
        dense_width: 256,
        sparse_inputs: 0,
        hidden: vec![64],
        ..RecsysConfig::default()
    };
    [
        ("recsys (150 dense + 40 sparse inputs)", ModelKind::Recsys.default_config()),
        ("190 inputs x 1 KiB", ModelConfig::Recsys(kilobyte_inputs)),
    ]
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
            .buckets(BucketSpec::PowersOfTwo { max: 8 })
            .max_concurrency(1)
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
        let in_slices: Vec<_> = in_bufs.iter().map(|b| b.as_slice()).collect();
        let out_slices: Vec<_> = out_bufs.iter().map(|b| b.as_slice()).collect();
        let (exec, _scratch) = bare_graph::<B>(&device, &stream, &compiler, &dims, (&in_slices, &out_slices), None)?;

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
        // Each model with its copies made by the copy kernel through the mapped pinned buffers,
        // whatever their size (the recommender's batch-1 copies are below the default limit; 190
        // KiB are above it), and by the copy engine.
        let requests = request_models()
            .into_iter()
            .flat_map(|(model, config)| [usize::MAX, 0].map(|copies| (model, config.clone(), copies)))
            .map(|(model, config, copies)| request_figures::<B>(&device, &stream, model, config, copies, n))
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Figures {
            device: format!("{} ({})", device.info().name, B::KIND),
            run_enqueue_us: median(run_enqueue),
            bound_enqueue_us: median(bound_enqueue),
            bound_e2e_us: median(bound_e2e),
            bare_launch_us: median(bare),
            run_device_e2e_us: median(run_e2e),
            bare_e2e_us: median(bare_e2e),
            requests,
        })
    }
}

/// A program of `compiler` at batch 1 captured as a bare graph on `stream` over the caller's buffers.
fn bare_graph<B: Backend>(
    device: &B::Device,
    stream: &B::Stream,
    compiler: &ReferenceCompiler,
    dims: &[Vec<u64>],
    buffers: (&[DeviceSlice], &[DeviceSlice]),
    copies: Option<(&B::PinnedBuffer, DeviceSlice, DeviceSlice, &B::PinnedBuffer)>,
) -> Result<(B::GraphExec, B::DeviceBuffer), String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let request = saggar::dispatch::CompileRequest::new(dims, Some(1));
    let artifact = <ReferenceCompiler as ProgramCompiler<B>>::compile(compiler, device, &request).map_err(|x| e(&x))?;
    let program =
        <ReferenceCompiler as ProgramCompiler<B>>::load(compiler, device, &request, &artifact).map_err(|x| e(&x))?;
    let scratch = device.alloc(program.scratch_bytes().max(1)).map_err(|x| e(&x))?;
    stream.begin_capture(CaptureMode::ThreadLocal).map_err(|x| e(&x))?;
    // SAFETY: every buffer outlives the benchmark (the scratch is returned with the graph), and each
    // replay is synchronized before the host touches a pinned buffer again.
    let recorded = unsafe {
        (|| {
            if let Some((staging, target, _, _)) = copies {
                stream.copy_h2d_async(staging, 0, target)?;
            }
            program.launch(stream, buffers.0, buffers.1, scratch.slice(0, program.scratch_bytes())?)?;
            if let Some((_, _, source, readback)) = copies {
                stream.copy_d2h_async(source, readback, 0)?;
            }
            Ok::<(), saggar::device::Error>(())
        })()
    };
    let graph = stream.end_capture().map_err(|x| e(&x))?;
    recorded.map_err(|x| e(&x))?;
    Ok((device.instantiate(&graph).map_err(|x| e(&x))?, scratch))
}

/// A `Request` at batch 1 (one run context; the pinned-copy path leases the other) against the same
/// device work done by hand: one prefilled copy of the bytes the request's copy sends, the bare graph
/// and one download, by stream calls and as one captured graph; and against a prefilled copy of the
/// inputs' bytes alone (no slot alignment gaps). All interleaved in one loop of `n` rounds.
fn request_figures<B: Backend>(
    device: &B::Device,
    stream: &B::Stream,
    model: &'static str,
    config: ModelConfig,
    kernel_copies_up_to: usize,
    n: usize,
) -> Result<RequestFigures, String> {
    let e = |x: &dyn std::fmt::Display| x.to_string();
    let compiler = Arc::new(ReferenceCompiler::from_config(config.clone()).map_err(|x| e(&x))?);
    let session_config = SessionConfig::builder()
        // The buckets `saggar perf` serves by default; two run contexts, so the pinned-copy path runs
        // while the Request holds the other.
        .buckets(BucketSpec::PowersOfTwo { max: 64 })
        .max_concurrency(2)
        .kernel_copies_up_to(kernel_copies_up_to)
        .build()
        .map_err(|x| e(&x))?;
    let session = Session::<B, ReferenceCompiler>::new(device.clone(), compiler.clone(), session_config, &|_| {})
        .map_err(|x| e(&x))?;
    let batch = 1u64;
    let inputs = generate_inputs(&config, batch as usize, 1);
    let dims = config.input_dims(batch);
    let out_dims = config.output_dims(batch);
    let sig = session.signature();
    let in_bufs: Vec<B::DeviceBuffer> = inputs
        .iter()
        .map(|d| {
            let b = device.alloc(d.len())?;
            stream.upload(d, b.as_slice())?;
            Ok(b)
        })
        .collect::<saggar::device::Result<_>>()
        .map_err(|x| e(&x))?;
    let out_bufs: Vec<B::DeviceBuffer> = sig
        .outputs()
        .iter()
        .zip(&out_dims)
        .map(|(s, d)| device.alloc(d.iter().product::<u64>() as usize * s.dtype().size_bytes()))
        .collect::<saggar::device::Result<_>>()
        .map_err(|x| e(&x))?;
    let in_slices: Vec<_> = in_bufs.iter().map(|b| b.as_slice()).collect();
    let out_slices: Vec<_> = out_bufs.iter().map(|b| b.as_slice()).collect();
    let host: Vec<HostTensor<'_>> = sig
        .inputs()
        .iter()
        .zip(&inputs)
        .zip(&dims)
        .map(|((s, d), dims)| HostTensor { name: s.name(), dtype: s.dtype(), dims, data: d })
        .collect();
    let mut out_host: Vec<Vec<u64>> =
        out_dims.iter().map(|d| vec![0u64; (d.iter().product::<u64>() as usize).div_ceil(2)]).collect();
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
    let (upload_target, download_from) =
        (staged_target.slice(0, upload).map_err(|x| e(&x))?, download_source.slice(0, download).map_err(|x| e(&x))?);
    let (exec, _scratch) = bare_graph::<B>(device, stream, &compiler, &dims, (&in_slices, &out_slices), None)?;
    let (same_work_graph, _same_scratch) = bare_graph::<B>(
        device,
        stream,
        &compiler,
        &dims,
        (&in_slices, &out_slices),
        Some((&prefilled, upload_target, download_from, &readback)),
    )?;
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
            stream.copy_h2d_async(&prefilled, 0, upload_target).unwrap();
            stream.launch_graph(&exec).unwrap();
            stream.copy_d2h_async(download_from, &readback, 0).unwrap();
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
    Ok(RequestFigures {
        model,
        copies: if kernel_copies_up_to > 0 { "kernel" } else { "copy engine" },
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
    println!("gpu_dispatch on {}, batch 1, median of {iterations}", f.device);
    let bare = Some((f.bare_launch_us, "bare"));
    let bare_e2e = Some((f.bare_e2e_us, "bare"));
    println!("recsys (190 inputs), buckets 1..8, direct-bound device tensors:");
    for (label, us, base) in [
        ("ultra-fast run_device, CPU cost to enqueue", f.run_enqueue_us, bare),
        ("ultra-fast DeviceBinding, CPU cost to enqueue", f.bound_enqueue_us, bare),
        ("bare graph launch, CPU cost to enqueue", f.bare_launch_us, None),
        ("ultra-fast run_device, enqueue + wait", f.run_device_e2e_us, bare_e2e),
        ("ultra-fast DeviceBinding, enqueue + wait", f.bound_e2e_us, bare_e2e),
        ("bare graph launch, enqueue + wait", f.bare_e2e_us, None),
    ] {
        print_row(label, us, base);
    }
    for r in &f.requests {
        println!(
            "{}, buckets 1..64, copies by {}, host inputs: the request's copy sends {} bytes (its inputs: {} bytes)",
            r.model, r.copies, r.upload_bytes, r.input_bytes
        );
        let prefilled = Some((r.prefilled_replay_us, "prefilled"));
        let pinned = Some((r.pinned_e2e_us, "pinned run_into"));
        for (label, us, base) in [
            ("pinned-copy run_into (host in, host out)", r.pinned_e2e_us, prefilled),
            ("Request: write_input (streamed) + run", r.request_e2e_us, pinned),
            ("Request: write through views + run", r.request_views_e2e_us, pinned),
            ("Request: run (inputs already in place)", r.request_run_us, prefilled),
            ("same device work as one captured graph", r.same_work_graph_us, prefilled),
            ("prefilled copy + bare graph + download", r.prefilled_replay_us, None),
            ("the same, copying the inputs' bytes only", r.tight_replay_us, prefilled),
        ] {
            print_row(label, us, base);
        }
        println!(
            "  targets: Request run / prefilled copy of the same bytes + bare graph + download {:.2}x (<= 1.1x); \
             pinned run_into / Request (streamed writes + run) {:.2}x",
            r.request_run_us / r.prefilled_replay_us,
            r.pinned_e2e_us / r.request_e2e_us
        );
    }
    if let Some(path) = json {
        let fields = [
            ("run_enqueue_us", f.run_enqueue_us),
            ("bound_enqueue_us", f.bound_enqueue_us),
            ("bare_launch_us", f.bare_launch_us),
            ("run_device_e2e_us", f.run_device_e2e_us),
            ("bound_e2e_us", f.bound_e2e_us),
            ("bare_e2e_us", f.bare_e2e_us),
            ("enqueue_ratio", f.run_enqueue_us / f.bare_launch_us),
            ("e2e_ratio", f.run_device_e2e_us / f.bare_e2e_us),
            ("bound_enqueue_ratio", f.bound_enqueue_us / f.bare_launch_us),
            ("bound_e2e_ratio", f.bound_e2e_us / f.bare_e2e_us),
        ];
        let mut numbers: Vec<String> = fields.iter().map(|(k, v)| format!("{k:?}:{v:.3}")).collect();
        let requests: Vec<String> = f
            .requests
            .iter()
            .map(|r| {
                let fields = [
                    ("pinned_e2e_us", r.pinned_e2e_us),
                    ("request_e2e_us", r.request_e2e_us),
                    ("request_views_e2e_us", r.request_views_e2e_us),
                    ("request_run_us", r.request_run_us),
                    ("prefilled_replay_us", r.prefilled_replay_us),
                    ("same_work_graph_us", r.same_work_graph_us),
                    ("tight_replay_us", r.tight_replay_us),
                    ("upload_bytes", r.upload_bytes as f64),
                    ("input_bytes", r.input_bytes as f64),
                    ("request_ratio", r.request_e2e_us / r.prefilled_replay_us),
                    ("request_run_ratio", r.request_run_us / r.prefilled_replay_us),
                    ("pinned_over_request", r.pinned_e2e_us / r.request_e2e_us),
                ];
                let numbers: Vec<String> = fields.iter().map(|(k, v)| format!("{k:?}:{v:.3}")).collect();
                format!("{{\"model\":{:?},\"copies\":{:?},{}}}", r.model, r.copies, numbers.join(","))
            })
            .collect();
        numbers.push(format!("\"requests\":[{}]", requests.join(",")));
        let text = format!(
            "{{\"bench\":\"gpu_dispatch\",\"device\":{:?},\"iterations\":{iterations},{}}}\n",
            f.device,
            numbers.join(",")
        );
        std::fs::write(&path, text).unwrap_or_else(|e| eprintln!("gpu_dispatch: cannot write {path}: {e}"));
    }
}

/// One table row: the figure and, with a base, its ratio to it.
fn print_row(label: &str, us: f64, base: Option<(f64, &str)>) {
    let ratio = base.map(|(b, name)| format!("   ({:.2}x {name})", us / b)).unwrap_or_default();
    println!("  {label:<46} {us:>9.2} us{ratio}");
}
