//! Cold and warm start of the BERT test model with 64 buckets: a grid of batch buckets 1..=16 by
//! sequence buckets 4, 8, 12, 16 (the sequence declared a padded axis through
//! `OnnxCompiler::padded_axis`, pad token 0 and attention mask 0), on every backend this binary
//! can open (the host backend always; CUDA with the `cuda` feature and a device). Cold: an empty
//! cache directory and a fresh compiler; warm: the same directory (a new cache handle, so the disk
//! tier serves it) and another fresh compiler.
//!
//! The breakdown of each start, from the session's progress callback:
//! - `import`: decoding and checking the ONNX file and laying out its constants;
//! - `compile`: session creation up to the first program ready (the model's one compile, or its
//!   disk load when warm, and the first cell's load);
//! - `load`: from there to the last cell's program ready (the other 63 loads, in parallel);
//! - `capture`: from there to the session returned (run contexts and one eager graph capture per
//!   cell).
//!
//! Once per process, before both starts, the CUDA device is opened (its context created) and
//! cuBLASLt loaded; both times are printed on their own line and are in neither start's figures
//! (a new process pays them before a warm start too).
//!
//! `--precision P` (`fp32` by default; `tf32`, `fp16`, `bf16`) compiles the model at that precision.
//!
//! Each start ends with a batch-17, sequence-13 run (split along the batch, padded along the
//! sequence) checked against `run_on_host` at the exact shape (a PASS or FAIL line). The targets
//! (cold at most 2 s, warm at most 100 ms, on a GPU) are printed beside the figures.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use saggar_cache::{CacheConfig, CompileCache};
use saggar_device::Backend;
use saggar_dispatch::{BucketSpec, CaptureWhen, GraphConfig, HostTensor, Session, SessionConfig};
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, Precision, Tensor, run_on_host};
use saggar_shape::DType;

const MODEL: &[u8] = include_bytes!("../models/bert/model.onnx");
/// The batch buckets: 1..=BATCHES.
const BATCHES: u64 = 16;
/// The sequence buckets (the model's `seq` axis).
const SEQS: [u64; 4] = [4, 8, 12, 16];
/// Grid cells: one program and one graph each.
const CELLS: u64 = BATCHES * SEQS.len() as u64;

/// One start's figures.
struct Start {
    import: Duration,
    compile: Duration,
    load: Duration,
    capture: Duration,
    compiles: u64,
    disk_loads: u64,
    programs: u64,
    captures: u64,
}

impl Start {
    fn total(&self) -> Duration {
        self.import + self.compile + self.load + self.capture
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Imports the model and creates a session with the 64-cell grid and eager capture, through `cache`.
fn start<B: Backend>(
    device: &B::Device,
    cache: Arc<CompileCache>,
    precision: Precision,
) -> (Start, Session<B, OnnxCompiler>, Arc<OnnxCompiler>) {
    let began = Instant::now();
    let model = OnnxModel::from_bytes(MODEL, "bert", &ImportLimits::default()).expect("the BERT test model imports");
    let compiler = Arc::new(OnnxCompiler::new(model, OnnxOptions::default().with_precision(precision)));
    let import = began.elapsed();
    let graphs = GraphConfig::default().with_capture(CaptureWhen::Eager);
    let config = SessionConfig::builder()
        .buckets(BucketSpec::List((1..=BATCHES).collect()))
        .padded_axis(compiler.padded_axis("seq", BucketSpec::List(SEQS.to_vec()), 0))
        .graphs(graphs)
        .max_concurrency(1)
        .cache(cache)
        .build()
        .expect("a valid configuration");
    // Nanoseconds since `created` at the first and the last program made ready.
    let (first, last) = (AtomicU64::new(u64::MAX), AtomicU64::new(0));
    let created = Instant::now();
    let session = Session::new(device.clone(), compiler.clone(), config, &|_| {
        let at = created.elapsed().as_nanos() as u64;
        first.fetch_min(at, Ordering::Relaxed);
        last.fetch_max(at, Ordering::Relaxed);
    })
    .unwrap_or_else(|e| panic!("session on {:?}: {e}", B::KIND));
    let total = created.elapsed();
    let (first, last) = (Duration::from_nanos(first.into_inner()), Duration::from_nanos(last.into_inner()));
    let st = session.stats();
    let figures = Start {
        import,
        compile: first,
        load: last.saturating_sub(first),
        capture: total.saturating_sub(last),
        compiles: st.compiles,
        disk_loads: st.disk_loads,
        programs: st.program_loads,
        captures: st.captures,
    };
    (figures, session, compiler)
}

/// A batch-17, sequence-13 request through `session` (split into batches 16 and 1, padded to
/// sequence 16), compared with the host reference run at the exact shape and precision (within
/// `tolerance`, relative).
fn check<B: Backend>(session: &Session<B, OnnxCompiler>, compiler: &OnnxCompiler, tolerance: f32) -> bool {
    let (batch, seq) = (17usize, 13usize);
    let elements = batch * seq;
    let ids: Vec<i64> = (0..elements).map(|i| (i * 7 % 50) as i64).collect();
    // Row r keeps 1 + r % 13 real tokens.
    let mask: Vec<i64> = (0..elements).map(|i| i64::from(i % seq <= (i / seq) % seq)).collect();
    let bytes = |v: &[i64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let (ids, mask) = (bytes(&ids), bytes(&mask));
    let dims = [batch as u64, seq as u64];
    let names: Vec<&str> = compiler.onnx_model().inputs().iter().map(|s| s.name()).collect();
    let data: Vec<&[u8]> = names.iter().map(|n| if n.contains("mask") { &mask[..] } else { &ids[..] }).collect();
    let inputs: Vec<HostTensor<'_>> =
        names.iter().zip(&data).map(|(name, d)| HostTensor { name, dtype: DType::I64, dims: &dims, data: d }).collect();
    let tensors: Vec<Tensor> =
        data.iter().map(|d| Tensor::from_le_bytes(DType::I64, vec![batch, seq], d).expect("an input tensor")).collect();
    let Ok(outputs) = session.run(&inputs) else { return false };
    let Ok(expected) = run_on_host(compiler, &tensors) else { return false };
    outputs.len() == expected.len()
        && outputs.iter().zip(&expected).all(|(got, want)| {
            let want = want.to_le_bytes();
            got.data.len() == want.len()
                && got.data.chunks_exact(4).zip(want.chunks_exact(4)).all(|(g, w)| {
                    let (g, w) = (f32::from_le_bytes(g.try_into().unwrap()), f32::from_le_bytes(w.try_into().unwrap()));
                    (g - w).abs() <= tolerance * (w.abs() + 0.1)
                })
        })
}

fn report<B: Backend>(device: B::Device, precision: Precision) {
    let dir = tempfile::tempdir().expect("a temporary cache directory");
    let open = || Arc::new(CompileCache::open(CacheConfig::builder(dir.path()).build()).expect("the cache opens"));
    let name = format!("{:?} ({})", B::KIND, saggar_device::Device::info(&device).name);
    for (which, target) in [("cold", Duration::from_secs(2)), ("warm", Duration::from_millis(100))] {
        let (s, session, compiler) = start::<B>(&device, open(), precision);
        println!(
            "cold_start {which} at {precision} on {name}: total {} (target {} on a GPU) = import {} + compile {} + load {} + capture {}; {} buckets ({} batches x {} sequences), {} compiles, {} disk loads, {} program loads, {} captures",
            ms(s.total()),
            ms(target),
            ms(s.import),
            ms(s.compile),
            ms(s.load),
            ms(s.capture),
            CELLS,
            BATCHES,
            SEQS.len(),
            s.compiles,
            s.disk_loads,
            s.programs,
            s.captures
        );
        // Plan and host round a value to neighbouring halves now and then (their products sum in
        // different orders).
        let tolerance = if precision.half().is_some() { 2e-2 } else { 1e-3 };
        let verdict = if check(&session, &compiler, tolerance) { "PASS" } else { "FAIL" };
        println!("{verdict} cold_start {which} on {name}: batch 17 x sequence 13 matches the host reference");
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument that does not name this bench skips it.
    // The GPU bundle passes `--json FILE`: FILE is that flag's value, not a filter.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let valued = |i: usize| i > 0 && ["--json", "--precision"].contains(&args[i - 1].as_str());
    let filters = args.iter().enumerate().filter(|(i, a)| !a.starts_with('-') && !valued(*i));
    if filters.map(|(_, a)| a).any(|a| !"cold_start".contains(a.as_str())) {
        return;
    }
    let precision = match args.iter().position(|a| a == "--precision").map(|i| args.get(i + 1)) {
        None => Precision::default(),
        Some(value) => match value.map(|v| v.parse::<Precision>()) {
            Some(Ok(p)) => p,
            _ => {
                eprintln!("cold_start: --precision takes fp32, tf32, fp16 or bf16");
                std::process::exit(2);
            }
        },
    };
    match saggar_device::host::HostBackend::open(0) {
        Ok(device) => report::<saggar_device::host::HostBackend>(device, precision),
        Err(e) => println!("SKIPPED host cold_start: {e}"),
    }
    #[cfg(feature = "cuda")]
    {
        use saggar_device::cuda::{CudaBackend, CudaDriver};
        // Once per process, before either start and in neither's figures: the CUDA context and
        // loading cuBLASLt (which then stays loaded, like the driver).
        let began = Instant::now();
        let opened = CudaBackend::enumerate().and_then(|_| CudaBackend::open(0));
        let context = began.elapsed();
        let began = Instant::now();
        let blas = saggar_device::gpu::probe_library::<CudaDriver>(&saggar_device::BlasConfig::default());
        let blas_load = began.elapsed();
        match opened {
            Ok(device) => {
                println!(
                    "cold_start process start on Cuda (once per process, in neither start's figures): device open {}, cuBLASLt load {}{}",
                    ms(context),
                    ms(blas_load),
                    blas.err().map(|e| format!(" (failed: {e})")).unwrap_or_default()
                );
                report::<CudaBackend>(device, precision)
            }
            Err(e) => println!("SKIPPED cuda cold_start: {e}"),
        }
    }
}
