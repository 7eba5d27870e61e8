//! Bad input on every path: a typed error, and the next valid request succeeds on every path.

mod common;

use std::sync::Arc;

use common::*;
use saggar_cache::{CacheConfig, CompileCache};
use saggar_device::host::HostBackend;
use saggar_device::{BackendKind, Device};
use saggar_dispatch::{
    BucketSpec, DispatchError, FailureKind, GraphConfig, HostTensor, ProgramCompiler, Session, SessionConfig, cache_key,
};
use saggar_shape::{DType, ShapeError, Splitting};

type S = Session<HostBackend, SumModel>;

fn session(model: &Arc<SumModel>, splitting: Splitting) -> S {
    let config = SessionConfig::builder()
        .buckets(BucketSpec::PowersOfTwo { max: 4 })
        .splitting(splitting)
        .max_concurrency(1)
        .build()
        .unwrap();
    Session::builder(host_device(), model.clone()).config(config).build().unwrap()
}

/// A valid request on the host path and on both device paths, checked.
fn all_paths_still_work(s: &S, m: &SumModel) {
    for batch in [4usize, 3] {
        let data = m.inputs(batch, 5);
        let dims = m.dims(batch as u64);
        let inputs: Vec<HostTensor<'_>> = s
            .signature()
            .inputs()
            .iter()
            .zip(&data)
            .zip(&dims)
            .map(|((sp, d), dims)| HostTensor { name: sp.name(), dtype: DType::F32, dims, data: as_bytes(d) })
            .collect();
        let out = s.run(&inputs).unwrap();
        assert_eq!(floats(&out[0].data), m.reference(&data, batch).0);
        let device = s.device().clone();
        let req = DeviceRequest::new(&device, m, batch, 6);
        req.poison(&device);
        let (ins, outs) = req.tensors(m);
        s.run_device(&ins, &outs).unwrap();
        req.check(&device, m);
    }
}

fn request<'a>(m: &'a SumModel, data: &'a [Vec<f32>], dims: &'a [Vec<u64>]) -> Vec<HostTensor<'a>> {
    m.spec
        .inputs
        .iter()
        .zip(data)
        .zip(dims)
        .map(|((sp, d), dims)| HostTensor { name: sp.name(), dtype: DType::F32, dims, data: as_bytes(d) })
        .collect()
}

#[test]
fn wrong_names_dtypes_ranks_and_counts_are_typed_errors() {
    let m = Arc::new(SumModel::new(2, 4, true));
    let s = session(&m, Splitting::Allowed);
    let data = m.inputs(2, 1);
    let dims = m.dims(2);
    all_paths_still_work(&s, &m);

    let mut r = request(&m, &data, &dims);
    r[0].name = "nope";
    assert!(matches!(s.run(&r).unwrap_err(), DispatchError::Shape(ShapeError::UnknownInput { .. })));
    all_paths_still_work(&s, &m);

    let mut r = request(&m, &data, &dims);
    r.pop();
    assert!(matches!(
        s.run(&r).unwrap_err(),
        DispatchError::Shape(ShapeError::MissingInput { .. } | ShapeError::InputCount { .. })
    ));
    all_paths_still_work(&s, &m);

    let mut r = request(&m, &data, &dims);
    r.push(r[0]);
    assert!(matches!(s.run(&r).unwrap_err(), DispatchError::Shape(_)));

    let mut r = request(&m, &data, &dims);
    r[1].dtype = DType::F16;
    assert!(matches!(s.run(&r).unwrap_err(), DispatchError::Shape(ShapeError::DTypeMismatch { .. })));
    all_paths_still_work(&s, &m);

    let rank3 = [2u64, 4, 1];
    let mut r = request(&m, &data, &dims);
    r[0].dims = &rank3;
    assert!(matches!(s.run(&r).unwrap_err(), DispatchError::Shape(ShapeError::RankMismatch { .. })));
    let wrong = [2u64, 5];
    let mut r = request(&m, &data, &dims);
    r[0].dims = &wrong;
    assert!(matches!(s.run(&r).unwrap_err(), DispatchError::Shape(_)));
    let mismatched = [3u64, 4];
    let mut r = request(&m, &data, &dims);
    r[1].dims = &mismatched;
    assert!(matches!(s.run(&r).unwrap_err(), DispatchError::Shape(_)), "batch bound to 2 and 3 in one request");
    all_paths_still_work(&s, &m);

    // Wrong number of output buffers.
    let r = request(&m, &data, &dims);
    let mut one: Vec<Vec<u8>> = vec![vec![0; 32]];
    assert!(matches!(s.run_into(&r, &mut one).unwrap_err(), DispatchError::OutputCount { expected: 2, actual: 1 }));
    all_paths_still_work(&s, &m);
    assert_eq!(s.stats().failed, 8);
}

#[test]
fn zero_batch_and_batch_above_the_maximum_with_splitting_off_are_typed_errors() {
    let m = Arc::new(SumModel::new(2, 4, false));
    let s = session(&m, Splitting::Disabled);
    let data = m.inputs(0, 1);
    let dims = m.dims(0);
    assert!(matches!(s.run(&request(&m, &data, &dims)).unwrap_err(), DispatchError::Shape(_)));
    all_paths_still_work(&s, &m);
    let data = m.inputs(5, 1);
    let dims = m.dims(5);
    let err = s.run(&request(&m, &data, &dims)).unwrap_err();
    assert!(matches!(err, DispatchError::Shape(ShapeError::BatchAboveLargestBucket { .. })), "{err:?}");
    let device = s.device().clone();
    let req = DeviceRequest::new(&device, &m, 5, 1);
    let (ins, outs) = req.tensors(&m);
    assert!(matches!(
        s.run_device(&ins, &outs).unwrap_err(),
        DispatchError::Shape(ShapeError::BatchAboveLargestBucket { .. })
    ));
    all_paths_still_work(&s, &m);
}

#[test]
fn short_buffers_are_typed_errors() {
    let m = Arc::new(SumModel::new(2, 4, false));
    let s = session(&m, Splitting::Allowed);
    let data = m.inputs(2, 1);
    let dims = m.dims(2);
    // A host input shorter than its shape.
    let mut r = request(&m, &data, &dims);
    r[0].data = &r[0].data[..8];
    assert!(s.run(&r).is_err());
    all_paths_still_work(&s, &m);
    // A host output buffer shorter than its tensor.
    let r = request(&m, &data, &dims);
    let mut outs: Vec<Vec<u8>> = vec![vec![0; 8], vec![0; 8]];
    assert!(s.run_into(&r, &mut outs).is_err());
    all_paths_still_work(&s, &m);
    // Device input and output buffers shorter than their tensors.
    let device = s.device().clone();
    let req = DeviceRequest::new(&device, &m, 2, 1);
    let (mut ins, outs) = req.tensors(&m);
    ins[0].data = ins[0].data.sub(0, 4).unwrap();
    assert!(matches!(s.run_device(&ins, &outs).unwrap_err(), DispatchError::BufferTooSmall { role: "input", .. }));
    let (ins, mut outs) = req.tensors(&m);
    outs[1].data = outs[1].data.sub(0, 4).unwrap();
    assert!(matches!(s.run_device(&ins, &outs).unwrap_err(), DispatchError::BufferTooSmall { role: "output", .. }));
    let (ins, mut outs) = req.tensors(&m);
    let wrong = [3u64, 4];
    outs[0].dims = &wrong;
    assert!(matches!(s.run_device(&ins, &outs).unwrap_err(), DispatchError::OutputShape { .. }));
    all_paths_still_work(&s, &m);
}

#[test]
fn a_failed_compile_is_a_typed_error_and_the_next_creation_succeeds() {
    let m = Arc::new(SumModel::new(2, 4, false));
    m.fail_next_compile.store(true, std::sync::atomic::Ordering::SeqCst);
    let config = SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 4 }).build().unwrap();
    let err = Session::builder(host_device(), m.clone()).config(config.clone()).build().unwrap_err();
    assert!(matches!(err, DispatchError::Compile { .. }), "{err:?}");
    let s = Session::builder(host_device(), m.clone()).config(config).build().unwrap();
    all_paths_still_work(&s, &m);
}

#[test]
fn invalid_configurations_are_typed_errors() {
    assert!(matches!(SessionConfig::builder().max_concurrency(0).build().unwrap_err(), DispatchError::Config(_)));
    assert!(SessionConfig::builder().buckets(BucketSpec::List(vec![])).build().is_err());
    assert!(SessionConfig::builder().buckets(BucketSpec::List(vec![0])).build().is_err());
    assert!(matches!(
        SessionConfig::builder().max_concurrency(2).prewarm_contexts(3).build().unwrap_err(),
        DispatchError::Config(_)
    ));
}

/// A cache in a temporary folder (kept alive by the returned guard), a model, and a configuration of
/// buckets up to `max` that uses the cache.
fn cached(max: u64) -> (tempfile::TempDir, Arc<CompileCache>, Arc<SumModel>, SessionConfig) {
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(CompileCache::open(CacheConfig::builder(dir.path()).build()).unwrap());
    let config =
        SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max }).cache(cache.clone()).build().unwrap();
    (dir, cache, Arc::new(SumModel::new(2, 4, false)), config)
}

#[test]
fn a_cached_program_whose_outputs_do_not_match_the_model_is_refused_and_evicted() {
    let (_dir, cache, m, config) = cached(2);
    let device = host_device();
    let key = cache_key(&m.identity(), &m.spec.inputs, &m.dims(1), BackendKind::Host, &device.info().arch).unwrap();
    drop(Session::new(device.clone(), m.clone(), config.clone(), &no_progress).unwrap());
    assert!(cache.read_disk(&key).unwrap().is_some(), "the first session published bucket 1");
    // The cached artifact now loads into a program whose second output is i32, not the model's f32
    // (an artifact of another compiler version behind the same key, say).
    m.wrong_output_dtype.store(true, std::sync::atomic::Ordering::SeqCst);
    let err = Session::new(device.clone(), m.clone(), config.clone(), &no_progress).unwrap_err();
    match &err {
        DispatchError::ProgramOutputMismatch { bucket: Some(1), output, expected, actual } => {
            assert_eq!((output.as_str(), expected.as_str(), actual.as_str()), ("rowsum", "f32 [1, 1]", "i32 [1, 1]"));
        }
        other => panic!("expected ProgramOutputMismatch, got {other:?}"),
    }
    assert!(cache.read_disk(&key).unwrap().is_none(), "the mismatching artifact was not evicted");
    m.wrong_output_dtype.store(false, std::sync::atomic::Ordering::SeqCst);
    let s = Session::new(device, m.clone(), config, &no_progress).unwrap();
    all_paths_still_work(&s, &m);
}

/// A cached artifact the compiler refuses to load (another build of it behind the same key) does not
/// fail the session: it is evicted and the bucket compiled again.
#[test]
fn a_cached_artifact_that_does_not_load_is_evicted_and_compiled_again() {
    let (_dir, _cache, m, config) = cached(1);
    let device = host_device();
    drop(Session::new(device.clone(), m.clone(), config.clone(), &no_progress).unwrap());
    let compiles = m.compiles.load(std::sync::atomic::Ordering::SeqCst);
    m.refuse_next_load.store(true, std::sync::atomic::Ordering::SeqCst);
    let s = Session::new(device, m.clone(), config, &no_progress).unwrap();
    assert_eq!(
        m.compiles.load(std::sync::atomic::Ordering::SeqCst),
        compiles + 1,
        "the refused bucket was compiled again"
    );
    all_paths_still_work(&s, &m);
}

#[test]
fn a_program_reporting_a_wrong_output_dtype_is_refused_at_load() {
    let m = Arc::new(SumModel::new(2, 4, false));
    let config = SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 4 }).build().unwrap();
    m.wrong_output_dtype.store(true, std::sync::atomic::Ordering::SeqCst);
    let err = Session::new(host_device(), m.clone(), config.clone(), &no_progress).unwrap_err();
    assert!(
        matches!(&err, DispatchError::ProgramOutputMismatch { output, actual, .. } if output == "rowsum" && actual.starts_with("i32")),
        "{err:?}"
    );
    assert_eq!(err.failure_kind(), FailureKind::Compile);
    m.wrong_output_dtype.store(false, std::sync::atomic::Ordering::SeqCst);
    let s = Session::new(host_device(), m.clone(), config, &no_progress).unwrap();
    all_paths_still_work(&s, &m);
}

#[test]
fn a_failing_synchronize_after_a_failed_run_is_reported_with_its_error() {
    let m = Arc::new(SumModel::new(2, 4, false));
    let graphs = GraphConfig::default().with_enabled(false);
    let config = SessionConfig::builder()
        .buckets(BucketSpec::PowersOfTwo { max: 4 })
        .graphs(graphs)
        .max_concurrency(1)
        .build()
        .unwrap();
    let s = Session::new(host_device(), m.clone(), config, &no_progress).unwrap();
    let data = m.inputs(2, 1);
    let dims = m.dims(2);
    m.sabotage_launch.store(true, std::sync::atomic::Ordering::SeqCst);
    let err = s.run(&request(&m, &data, &dims)).unwrap_err();
    m.sabotage_launch.store(false, std::sync::atomic::Ordering::SeqCst);
    match &err {
        DispatchError::AfterFailedRun { error, synchronize } => {
            assert!(matches!(**error, DispatchError::Device(_)), "{error:?}");
            assert!(matches!(synchronize, saggar_device::Error::Async { .. }), "{synchronize:?}");
        }
        other => panic!("expected AfterFailedRun, got {other:?}"),
    }
    assert!(std::error::Error::source(&err).is_some());
    assert_eq!(err.failure_kind(), FailureKind::Device);
    let stats = s.stats();
    assert_eq!((stats.failed, stats.failures.device), (1, 1));
    all_paths_still_work(&s, &m);
    assert!(s.device().take_deferred_errors().is_empty());
}
