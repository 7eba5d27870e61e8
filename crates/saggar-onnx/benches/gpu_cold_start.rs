//! Cold and warm start of the BERT test model with 64 buckets (batches 1..=64, sequence 16), on
//! every backend this binary can open (the host backend always; CUDA with the `cuda` feature and a
//! device). Cold: an empty cache directory and a fresh compiler; warm: the same directory (a new
//! cache handle, so the disk tier serves it) and another fresh compiler.
//!
//! The breakdown of each start, from the session's progress callback:
//! - `import`: decoding and checking the ONNX file and laying out its constants;
//! - `compile`: session creation up to the first program ready (the model's one compile, or its
//!   disk load when warm, and the first bucket's load);
//! - `load`: from there to the last bucket's program ready (the other 63 loads, in parallel);
//! - `capture`: from there to the session returned (run contexts and one eager graph capture per
//!   bucket).
//!
//! Each start ends with a batch-17 run checked against `run_on_host` (a PASS or FAIL line). The
//! targets (cold at most 2 s, warm at most 100 ms, on a GPU) are printed beside the figures.
//!
//! The model's sequence axis is fixed at 16 through a wrapping compiler, so the batch is its only
//! dynamic dimension and the session serves it from batch buckets.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use saggar_cache::{CacheConfig, CompileCache};
use saggar_device::Backend;
use saggar_dispatch::{
    BucketSpec, CaptureWhen, CompileRequest, CompilerCapabilities, CompilerError, CompilerIdentity, GraphConfig,
    HostTensor, ModelSpec, ProgramCompiler, Session, SessionConfig,
};
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, OnnxProgram, Tensor, run_on_host};
use saggar_shape::{DType, Dim, TensorSpec};

const MODEL: &[u8] = include_bytes!("../models/bert/model.onnx");
const SEQ: u64 = 16;
const BUCKETS: u64 = 64;

/// The ONNX compiler with every non-batch symbolic dimension fixed at [`SEQ`].
struct FixedSeq {
    inner: OnnxCompiler,
    spec: ModelSpec,
}

impl FixedSeq {
    fn new(inner: OnnxCompiler, model: &OnnxModel) -> FixedSeq {
        let fix = |specs: &[TensorSpec]| -> Vec<TensorSpec> {
            specs
                .iter()
                .map(|s| {
                    let dims = s.dims().iter().enumerate().map(|(axis, d)| match d {
                        Dim::Symbolic(_) if axis > 0 => Dim::Fixed(SEQ),
                        other => other.clone(),
                    });
                    TensorSpec::new(s.name(), s.dtype(), dims)
                })
                .collect()
        };
        let spec = ModelSpec::new(model.name(), fix(model.inputs()), fix(model.outputs()));
        FixedSeq { inner, spec }
    }
}

impl<B: Backend> ProgramCompiler<B> for FixedSeq {
    type Program = OnnxProgram<B>;

    fn model(&self) -> &ModelSpec {
        &self.spec
    }

    fn identity(&self) -> CompilerIdentity {
        <OnnxCompiler as ProgramCompiler<B>>::identity(&self.inner).with_option("bench_seq", SEQ.to_string())
    }

    fn capabilities(&self) -> CompilerCapabilities {
        <OnnxCompiler as ProgramCompiler<B>>::capabilities(&self.inner)
    }

    fn compile(&self, device: &B::Device, request: &CompileRequest<'_>) -> Result<Vec<u8>, CompilerError> {
        <OnnxCompiler as ProgramCompiler<B>>::compile(&self.inner, device, request)
    }

    fn load(
        &self,
        device: &B::Device,
        request: &CompileRequest<'_>,
        artifact: &[u8],
    ) -> Result<OnnxProgram<B>, CompilerError> {
        <OnnxCompiler as ProgramCompiler<B>>::load(&self.inner, device, request, artifact)
    }
}

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

/// Imports the model and creates a session with 64 buckets and eager capture, through `cache`.
fn start<B: Backend>(device: &B::Device, cache: Arc<CompileCache>) -> (Start, Session<B, FixedSeq>, Arc<FixedSeq>) {
    let began = Instant::now();
    let model = OnnxModel::from_bytes(MODEL, "bert", &ImportLimits::default()).expect("the BERT test model imports");
    let compiler = Arc::new(FixedSeq::new(OnnxCompiler::new(model.clone(), OnnxOptions::default()), &model));
    let import = began.elapsed();
    let graphs = GraphConfig::default().with_capture(CaptureWhen::Eager);
    let config = SessionConfig::builder()
        .buckets(BucketSpec::List((1..=BUCKETS).collect()))
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

/// A batch-17 request through `session`, compared with the host reference run.
fn check<B: Backend>(session: &Session<B, FixedSeq>, compiler: &FixedSeq) -> bool {
    let batch = 17usize;
    let elements = batch * SEQ as usize;
    let ids: Vec<i64> = (0..elements).map(|i| (i * 7 % 50) as i64).collect();
    let mask: Vec<i64> = (0..elements).map(|i| i64::from(i % SEQ as usize <= 12)).collect();
    let bytes = |v: &[i64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let (ids, mask) = (bytes(&ids), bytes(&mask));
    let dims = [batch as u64, SEQ];
    let names: Vec<&str> = compiler.spec.inputs.iter().map(|s| s.name()).collect();
    let data: Vec<&[u8]> = names.iter().map(|n| if n.contains("mask") { &mask[..] } else { &ids[..] }).collect();
    let inputs: Vec<HostTensor<'_>> =
        names.iter().zip(&data).map(|(name, d)| HostTensor { name, dtype: DType::I64, dims: &dims, data: d }).collect();
    let tensors: Vec<Tensor> = data
        .iter()
        .map(|d| Tensor::from_le_bytes(DType::I64, vec![batch, SEQ as usize], d).expect("an input tensor"))
        .collect();
    let Ok(outputs) = session.run(&inputs) else { return false };
    let Ok(expected) = run_on_host(&compiler.inner, &tensors) else { return false };
    outputs.iter().zip(&expected).all(|(got, want)| {
        let want = want.to_le_bytes();
        got.data.len() == want.len()
            && got.data.chunks_exact(4).zip(want.chunks_exact(4)).all(|(g, w)| {
                let (g, w) = (f32::from_le_bytes(g.try_into().unwrap()), f32::from_le_bytes(w.try_into().unwrap()));
                (g - w).abs() <= 1e-3 * w.abs() + 1e-4
            })
    })
}

fn report<B: Backend>(device: B::Device) {
    let dir = tempfile::tempdir().expect("a temporary cache directory");
    let open = || Arc::new(CompileCache::open(CacheConfig::builder(dir.path()).build()).expect("the cache opens"));
    let name = format!("{:?} ({})", B::KIND, saggar_device::Device::info(&device).name);
    for (which, target) in [("cold", Duration::from_secs(2)), ("warm", Duration::from_millis(100))] {
        let (s, session, compiler) = start::<B>(&device, open());
        println!(
            "cold_start {which} on {name}: total {} (target {} on a GPU) = import {} + compile {} + load {} + capture {}; {} buckets, {} compiles, {} disk loads, {} program loads, {} captures",
            ms(s.total()),
            ms(target),
            ms(s.import),
            ms(s.compile),
            ms(s.load),
            ms(s.capture),
            BUCKETS,
            s.compiles,
            s.disk_loads,
            s.programs,
            s.captures
        );
        let verdict = if check(&session, &compiler) { "PASS" } else { "FAIL" };
        println!("{verdict} cold_start {which} on {name}: batch 17 matches the host reference");
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument that does not name this bench skips it.
    if std::env::args().skip(1).any(|a| !a.starts_with('-') && !"cold_start".contains(a.as_str())) {
        return;
    }
    match saggar_device::host::HostBackend::open(0) {
        Ok(device) => report::<saggar_device::host::HostBackend>(device),
        Err(e) => println!("SKIPPED host cold_start: {e}"),
    }
    #[cfg(feature = "cuda")]
    {
        use saggar_device::cuda::CudaBackend;
        match CudaBackend::enumerate().and_then(|_| CudaBackend::open(0)) {
            Ok(device) => report::<CudaBackend>(device),
            Err(e) => println!("SKIPPED cuda cold_start: {e}"),
        }
    }
}
