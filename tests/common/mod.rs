//! Whole-stack checks generic over the backend: the reference recommender through a session, on the
//! host backend in CI (`tests/dispatch_models.rs`) and on CUDA in the GPU bundle
//! (`tests/gpu_dispatch.rs`).
#![allow(dead_code)]

use std::sync::Arc;

use saggar_cache::{CacheConfig, CompileCache};
use saggar_device::{Backend, Device, DeviceBuffer, Stream};
use saggar_dispatch::{
    BindingMode, BucketSpec, DeviceTensor, HostTensor, Routing, Session, SessionConfig, SessionGroup,
};
use saggar_models::{ModelConfig, ReferenceCompiler, compare_outputs, generate_inputs, reference_forward};

/// Outputs must agree with the CPU reference within this relative tolerance.
pub const TOLERANCE: f64 = 1e-3;

/// A small recommender: 20 dense inputs of width 8, 6 sparse inputs of 4 indices into 100 x 16
/// tables, MLP 256 -> 64 -> 1, with the hidden layer as a second output.
pub fn small_recsys() -> ModelConfig {
    ModelConfig::from_json(
        r#"{"model": "recsys", "dense_inputs": 20, "dense_width": 8, "sparse_inputs": 6, "bag_size": 4,
            "table_rows": 100, "embedding_dim": 16, "hidden": [64], "two_outputs": true, "weights": {"seed": 7}}"#,
    )
    .expect("a valid config")
}

pub struct Case {
    pub batch: usize,
    pub inputs: Vec<Vec<u8>>,
    pub expected: Vec<Vec<f32>>,
}

pub fn cases(compiler: &ReferenceCompiler, batches: impl IntoIterator<Item = usize>) -> Vec<Case> {
    let config = compiler.config();
    batches
        .into_iter()
        .map(|batch| {
            let inputs = generate_inputs(config, batch, 1000 + batch as u64);
            let expected = reference_forward(config, compiler.weights(), &inputs, batch).unwrap();
            Case { batch, inputs, expected }
        })
        .collect()
}

fn host_inputs<'a>(
    config: &'a ModelConfig,
    specs: &'a [saggar_shape::TensorSpec],
    case: &'a Case,
    dims: &'a [Vec<u64>],
) -> Vec<HostTensor<'a>> {
    let _ = config;
    specs
        .iter()
        .zip(&case.inputs)
        .zip(dims)
        .map(|((s, d), dims)| HostTensor { name: s.name(), dtype: s.dtype(), dims, data: d })
        .collect()
}

/// Runs `case` through `session` from host memory and checks every output against the reference.
pub fn run_host_case<B: Backend>(session: &Session<B, ReferenceCompiler>, compiler: &ReferenceCompiler, case: &Case) {
    let config = compiler.config();
    let dims = config.input_dims(case.batch as u64);
    let specs = session.signature().inputs();
    let inputs = host_inputs(config, specs, case, &dims);
    let out = session.run(&inputs).unwrap();
    let got: Vec<&[u8]> = out.iter().map(|t| t.data.as_slice()).collect();
    let cmp = compare_outputs(&case.expected, &got, TOLERANCE).unwrap();
    assert!(cmp.all_match(), "batch {}: outputs differ from the reference: {cmp:?}", case.batch);
}

pub fn session<B: Backend>(
    device: B::Device,
    compiler: Arc<ReferenceCompiler>,
    concurrency: usize,
) -> Session<B, ReferenceCompiler> {
    let config = SessionConfig::builder()
        .buckets(BucketSpec::PowersOfTwo { max: 32 })
        .max_concurrency(concurrency)
        .build()
        .unwrap();
    Session::new(device, compiler, config, &|_| {}).unwrap()
}

/// 16 threads x `runs` requests with mixed batch sizes (some above the largest bucket, so split),
/// host and device inputs mixed, on one session: every output correct.
pub fn sixteen_threads_mixed_batches<B: Backend>(device: B::Device, runs: usize) {
    let compiler = Arc::new(ReferenceCompiler::from_config(small_recsys()).unwrap());
    let session = session::<B>(device, compiler.clone(), 8);
    let cases = cases(&compiler, 1..=40);
    // A device case is three requests: `run_device`, then two runs of a binding.
    let requests = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|scope| {
        for t in 0..16usize {
            let (session, compiler, cases, requests) = (&session, &compiler, &cases, &requests);
            scope.spawn(move || {
                for i in 0..runs {
                    let case = &cases[(t * 7 + i * 13) % cases.len()];
                    let made = if i % 5 == 4 && case.batch <= 32 {
                        run_device_case(session, compiler, case);
                        3
                    } else {
                        run_host_case(session, compiler, case);
                        1
                    };
                    requests.fetch_add(made, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    let st = session.stats();
    assert_eq!(st.failed, 0);
    assert_eq!(st.requests, requests.into_inner());
    assert_eq!(st.ultra_fast + st.fast + st.standard, st.requests);
    eprintln!("16 threads x {runs} runs: {st:?}");
}

/// Runs `case` with inputs and outputs in device memory (direct-bound at an exact bucket,
/// stabilized otherwise) and checks the outputs.
pub fn run_device_case<B: Backend>(
    session: &Session<B, ReferenceCompiler>,
    compiler: &ReferenceCompiler,
    case: &Case,
) -> saggar_dispatch::RunInfo {
    let device = session.device();
    let _pin = device.pin().unwrap();
    let stream = device.create_stream().unwrap();
    let config = compiler.config();
    let dims = config.input_dims(case.batch as u64);
    let out_dims = config.output_dims(case.batch as u64);
    let in_bufs: Vec<B::DeviceBuffer> = case
        .inputs
        .iter()
        .map(|d| {
            let b = device.alloc(d.len()).unwrap();
            stream.upload(d, b.as_slice()).unwrap();
            b
        })
        .collect();
    let specs = session.signature();
    let out_bufs: Vec<B::DeviceBuffer> = specs
        .outputs()
        .iter()
        .zip(&out_dims)
        .map(|(s, d)| device.alloc(d.iter().product::<u64>() as usize * s.dtype().size_bytes()).unwrap())
        .collect();
    let ins: Vec<DeviceTensor<'_>> = specs
        .inputs()
        .iter()
        .zip(&in_bufs)
        .zip(&dims)
        .map(|((s, b), d)| DeviceTensor { name: s.name(), dtype: s.dtype(), dims: d, data: b.as_slice() })
        .collect();
    let outs: Vec<DeviceTensor<'_>> = specs
        .outputs()
        .iter()
        .zip(&out_bufs)
        .zip(&out_dims)
        .map(|((s, b), d)| DeviceTensor { name: s.name(), dtype: s.dtype(), dims: d, data: b.as_slice() })
        .collect();
    let info = session.run_device(&ins, &outs).unwrap();
    let check = |how: &str| {
        let got: Vec<Vec<u8>> = out_bufs
            .iter()
            .map(|b| {
                let mut v = vec![0u8; b.len()];
                stream.download(b.as_slice(), &mut v).unwrap();
                v
            })
            .collect();
        let cmp = compare_outputs(&case.expected, &got, TOLERANCE).unwrap();
        assert!(cmp.all_match(), "{how}, batch {}: outputs differ from the reference: {cmp:?}", case.batch);
    };
    check("run_device");
    // The same request through a binding (validated once), outputs poisoned first.
    let binding = session.bind_device(&ins, &outs).unwrap();
    for _ in 0..2 {
        for b in &out_bufs {
            stream.memset(b.as_slice(), 0xFF).unwrap();
        }
        stream.synchronize().unwrap();
        assert_eq!(binding.run().unwrap().mode, info.mode);
        check("DeviceBinding");
    }
    info
}

/// Device inputs at an exact bucket are direct-bound and replayed; others are stabilized; all correct.
pub fn device_paths_match_the_reference<B: Backend>(device: B::Device) {
    let compiler = Arc::new(ReferenceCompiler::from_config(small_recsys()).unwrap());
    let session = session::<B>(device, compiler.clone(), 1);
    for case in &cases(&compiler, [4, 4, 4, 3, 3, 8, 1, 16, 16]) {
        let info = run_device_case(&session, &compiler, case);
        let exact = case.batch.is_power_of_two();
        assert_eq!(info.mode, if exact { BindingMode::DirectBind } else { BindingMode::Stabilized });
    }
    let st = session.stats();
    assert!(st.replays > 0 && st.eager_fallbacks == 0, "{st:?}");
}

/// The small recommender on a round-robin session group over `d0` and `d1`, buckets 1 to 16, with
/// its compile cache in `dir`.
fn group_of_two<B: Backend>(
    d0: B::Device,
    d1: B::Device,
    dir: &std::path::Path,
) -> (SessionGroup<B, ReferenceCompiler>, Arc<ReferenceCompiler>) {
    let cache = Arc::new(CompileCache::open(CacheConfig::builder(dir.join("cache")).build()).unwrap());
    let compiler = Arc::new(ReferenceCompiler::from_config(small_recsys()).unwrap());
    let config = SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 16 }).cache(cache).build().unwrap();
    let group = SessionGroup::<B, ReferenceCompiler>::new(
        vec![d0, d1],
        compiler.clone(),
        config,
        Routing::RoundRobin,
        &|_, _| {},
    )
    .unwrap();
    (group, compiler)
}

/// A session group over two devices compiles each bucket once and loads it on the other device.
pub fn group_compiles_once_and_loads_once<B: Backend>(d0: B::Device, d1: B::Device) {
    let tmp = tempfile::tempdir().unwrap();
    let (group, compiler) = group_of_two::<B>(d0, d1, tmp.path());
    let stats = group.stats();
    let buckets = group.sessions()[0].buckets().len() as u64;
    eprintln!(
        "session group: device 0 compiled {} and loaded {}; device 1 compiled {} and loaded {} ({} buckets)",
        stats[0].compiles, stats[0].program_loads, stats[1].compiles, stats[1].program_loads, buckets
    );
    // One compile for the first device (one artifact per model on GPUs, one per bucket on the host).
    assert!((1..=buckets).contains(&stats[0].compiles), "the first device compiles");
    assert_eq!((stats[1].compiles, stats[1].program_loads), (0, buckets), "the second device loads, never compiles");
    for case in &cases(&compiler, [3, 9, 16, 2]) {
        for session in group.sessions() {
            run_host_case(session, &compiler, case);
        }
    }
}

/// What 24 requests on a session group over two devices did after its second device was lost.
#[derive(Debug)]
pub struct LostDeviceRun {
    /// Requests answered (correctly: a wrong answer panics) per device.
    pub served: [usize; 2],
    /// The errors of the failed requests, each a lost-device error (anything else panics).
    pub lost: Vec<String>,
    /// Which devices the group took out of its routing.
    pub taken_out: Vec<bool>,
}

/// Runs 24 requests on a session group over two devices whose second device is lost once the group
/// is ready (`lose` makes it so: `saggar_device::lose_device` on a GPU, an injected fault on the host
/// backend, or a real fault). Every answer is checked against the reference; every failure must be a
/// lost-device error.
pub fn group_with_a_lost_device<B: Backend>(
    d0: B::Device,
    d1: B::Device,
    lose: impl FnOnce(&B::Device),
) -> LostDeviceRun {
    let tmp = tempfile::tempdir().unwrap();
    let (group, compiler) = group_of_two::<B>(d0, d1, tmp.path());
    lose(group.sessions()[1].device());
    let config = compiler.config();
    let (mut served, mut lost) = ([0usize; 2], Vec::new());
    for case in cases(&compiler, [3, 9, 16, 2, 5, 1, 12, 7]).iter().cycle().take(24) {
        let dims = config.input_dims(case.batch as u64);
        let inputs = host_inputs(config, group.sessions()[0].signature().inputs(), case, &dims);
        match group.run(&inputs) {
            Ok((device, out)) => {
                served[device] += 1;
                let got: Vec<&[u8]> = out.iter().map(|t| t.data.as_slice()).collect();
                let cmp = compare_outputs(&case.expected, &got, TOLERANCE).unwrap();
                assert!(cmp.all_match(), "device {device}, batch {}: {cmp:?}", case.batch);
            }
            Err(e) => {
                assert!(e.is_device_lost(), "a request failed with something other than a lost device: {e}");
                lost.push(e.to_string());
            }
        }
    }
    let run = LostDeviceRun { served, lost, taken_out: group.lost() };
    eprintln!(
        "lost device: served per device {:?}, {} failed, taken out {:?}, first error {:?}",
        run.served,
        run.lost.len(),
        run.taken_out,
        run.lost.first()
    );
    run
}

/// [`group_with_a_lost_device`] where only the second device is lost: the one request that met it
/// fails, the group takes it out, and device 0 answers the other 23 correctly.
pub fn group_survives_a_lost_device<B: Backend>(d0: B::Device, d1: B::Device, lose: impl FnOnce(&B::Device)) {
    let run = group_with_a_lost_device::<B>(d0, d1, lose);
    assert_eq!(run.lost.len(), 1, "only the request that met the lost device fails: {run:?}");
    assert_eq!(run.taken_out, [false, true]);
    assert_eq!(run.served[0], 23, "device 0 serves everything else: {run:?}");
}

/// Marks `device` lost for this process (`saggar_device::lose_device`): a fault drill.
pub fn drill_loss<B: Backend>(device: &B::Device) {
    saggar_device::lose_device(B::KIND, device.info().ordinal, "fault drill (saggar_device::lose_device)");
}

/// A graph-memory budget below what every bucket's graphs in 8 contexts take: first 8 threads
/// capture every bucket in every context without a budget (the measured total), then a session
/// with a third of that as its budget serves the same load. Measured graph memory stays under the
/// budget, every output is correct, and on the host backend (graph memory modelled per node) graphs
/// are evicted. Prints the figures and a PASS line.
pub fn graph_budget_holds_across_eight_contexts<B: Backend>(device: B::Device) {
    let compiler = Arc::new(ReferenceCompiler::from_config(small_recsys()).unwrap());
    let cases = cases(&compiler, 1..=16);
    let load = |budget: Option<u64>| {
        let graphs = saggar_dispatch::GraphConfig::default().with_memory_budget_bytes(budget);
        let config = SessionConfig::builder()
            .buckets(BucketSpec::PowersOfTwo { max: 16 })
            .max_concurrency(8)
            .graphs(graphs)
            .build()
            .unwrap();
        let session = Session::<B, _>::new(device.clone(), compiler.clone(), config, &|_| {}).unwrap();
        std::thread::scope(|scope| {
            for t in 0..8usize {
                let (session, compiler, cases) = (&session, &compiler, &cases);
                scope.spawn(move || {
                    for i in 0..3 * cases.len() {
                        run_host_case(session, compiler, &cases[(t * 5 + i) % cases.len()]);
                    }
                });
            }
        });
        session.stats()
    };
    let all = load(None);
    let total = all.graph_bytes_peak;
    if total == 0 {
        println!(
            "PASS graph_budget on {:?}: the driver measured 0 bytes for all {} graphs (page granularity), so no budget can bind",
            B::KIND,
            all.captures
        );
        return;
    }
    let budget = total / 3;
    let st = load(Some(budget));
    println!(
        "graph_budget on {:?}: {} graphs unbounded took {total} B measured; budget {budget} B: peak {} B, {} evicted, {} over budget, {} captures",
        B::KIND,
        all.captures,
        st.graph_bytes_peak,
        st.evicted_graphs,
        st.graphs_over_budget,
        st.captures
    );
    assert!(st.graph_bytes_peak <= budget, "measured graph memory exceeded the budget: {st:?}");
    assert_eq!(st.failed, 0);
    let bound = st.evicted_graphs + st.graphs_over_budget > 0;
    if B::KIND == saggar_device::BackendKind::Host {
        // Modelled per node: the budget must bind.
        assert!(bound, "the budget never bound: {st:?}");
    }
    // On a GPU the driver grows its graph pool in chunks (2 MiB on CUDA 13): the free-memory delta
    // charges the graph that grew it the whole chunk and the others nothing, so whether the budget
    // binds depends on when the pool grew, not on the graphs alone; the invariant is the peak.
    println!(
        "PASS graph_budget on {:?}: measured graph memory stayed under the budget across 8 contexts (the budget {})",
        B::KIND,
        if bound { "bound" } else { "did not need to bind: the graphs measured fit" }
    );
}
