//! What compilers declare ([`CompilerCapabilities`]) and what the dispatcher does with it: one
//! compile per model for a compiler whose artifact serves every bucket (with and without a cache,
//! cold and warm), misses compiled in parallel for a thread-safe compiler, and the process-wide
//! compile lock for every other compiler, with or without a cache. Buckets live re-bucketing adds
//! are made the same way.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use saggar_cache::{CacheConfig, CompileCache};
use saggar_device::Backend;
use saggar_device::host::HostBackend;
use saggar_dispatch::{
    BucketSpec, CompileRequest, CompilerCapabilities, CompilerError, CompilerIdentity, LiveBuckets, ModelSpec,
    ProgramCompiler, Session, SessionConfig,
};

/// The sum model behind declared capabilities. Until two compiles were seen running at once, each
/// compile waits (up to `overlap_wait`) for another to be running too, so overlapping compiles are
/// seen whenever they are possible.
struct Declared {
    inner: SumModel,
    caps: CompilerCapabilities,
    overlap_wait: Duration,
    inside: AtomicUsize,
    most_inside: AtomicUsize,
    /// Loads refuse an artifact compiled for another bucket (a compiler that breaks its declaration).
    strict: bool,
}

impl Declared {
    fn new(width: u64, caps: CompilerCapabilities, overlap_wait: Duration) -> Arc<Declared> {
        Arc::new(Declared {
            inner: SumModel::new(2, width, false),
            caps,
            overlap_wait,
            inside: AtomicUsize::new(0),
            most_inside: AtomicUsize::new(0),
            strict: false,
        })
    }
}

impl ProgramCompiler<HostBackend> for Declared {
    type Program = SumProgram;

    fn model(&self) -> &ModelSpec {
        self.inner.model()
    }

    fn identity(&self) -> CompilerIdentity {
        self.inner.identity()
    }

    fn capabilities(&self) -> CompilerCapabilities {
        self.caps
    }

    fn compile(
        &self,
        device: &<HostBackend as Backend>::Device,
        request: &CompileRequest<'_>,
    ) -> Result<Vec<u8>, CompilerError> {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_inside.fetch_max(now, Ordering::SeqCst);
        let deadline = Instant::now() + self.overlap_wait;
        // Once an overlap was seen, later compiles need not wait for one.
        while Instant::now() < deadline && self.most_inside.load(Ordering::SeqCst) < 2 {
            self.most_inside.fetch_max(self.inside.load(Ordering::SeqCst), Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(1));
        }
        let compiled = self.inner.compile(device, request).map(|mut bytes| {
            bytes.extend_from_slice(&request.bucket.unwrap_or(0).to_le_bytes());
            bytes
        });
        self.inside.fetch_sub(1, Ordering::SeqCst);
        compiled
    }

    fn load(
        &self,
        device: &<HostBackend as Backend>::Device,
        request: &CompileRequest<'_>,
        artifact: &[u8],
    ) -> Result<SumProgram, CompilerError> {
        let (code, bucket) = artifact.split_at(artifact.len().checked_sub(8).ok_or("artifact too short")?);
        if self.strict && Some(u64::from_le_bytes(bucket.try_into()?)) != request.bucket {
            return Err("artifact compiled for another bucket".into());
        }
        self.inner.load(device, request, code)
    }
}

fn config(cache: Option<Arc<CompileCache>>, compile_threads: usize) -> SessionConfig {
    let builder =
        SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 16 }).compile_threads(compile_threads);
    match cache {
        Some(cache) => builder.cache(cache),
        None => builder,
    }
    .build()
    .unwrap()
}

/// Runs every batch 1..=16 and checks the outputs.
fn check_all_batches(session: &Session<HostBackend, Declared>, model: &SumModel) {
    for batch in 1..=16usize {
        run_checked(session, model, batch, batch as u32);
    }
}

#[test]
fn one_artifact_per_model_is_compiled_once_and_loaded_per_bucket_cold_and_warm() {
    let caps = CompilerCapabilities::default().with_one_artifact_per_model(true);
    let declared = Declared::new(5, caps, Duration::ZERO);
    // Without a cache.
    let session = Session::builder(host_device(), declared.clone()).config(config(None, 4)).build().unwrap();
    assert_eq!(session.buckets(), vec![1, 2, 4, 8, 16]);
    let st = session.stats();
    assert_eq!((st.compiles, st.program_loads), (1, 5), "{st:?}");
    assert_eq!(declared.inner.compiles.load(Ordering::SeqCst), 1);
    check_all_batches(&session, &declared.inner);

    // With a cache: one entry for the model, cold, then warm from disk in a new cache handle.
    let dir = tempfile::tempdir().unwrap();
    let open = || Arc::new(CompileCache::open(CacheConfig::builder(dir.path()).build()).unwrap());
    let cold = Session::builder(host_device(), declared.clone()).config(config(Some(open()), 4)).build().unwrap();
    assert_eq!(cold.stats().compiles, 1);
    let entries = std::fs::read_dir(dir.path()).unwrap().filter(|e| e.as_ref().unwrap().path().is_file()).count();
    assert!(entries >= 1, "the model's artifact is published");
    let warm = Session::builder(host_device(), declared.clone()).config(config(Some(open()), 4)).build().unwrap();
    let st = warm.stats();
    assert_eq!((st.compiles, st.disk_loads, st.program_loads), (0, 1, 5), "{st:?}");
    assert_eq!(declared.inner.compiles.load(Ordering::SeqCst), 2, "no compile when warm");
    check_all_batches(&warm, &declared.inner);
}

#[test]
fn a_thread_safe_compiler_has_its_misses_compiled_in_parallel_with_and_without_a_cache() {
    let caps = CompilerCapabilities::default().with_thread_safe(true);
    let declared = Declared::new(6, caps, Duration::from_secs(10));
    let session = Session::builder(host_device(), declared.clone()).config(config(None, 4)).build().unwrap();
    assert!(declared.most_inside.load(Ordering::SeqCst) >= 2, "compiles overlapped");
    assert_eq!(session.stats().compiles, 5);
    assert_eq!(session.stats().parallel_compiles, 5);
    check_all_batches(&session, &declared.inner);

    let declared = Declared::new(7, caps, Duration::from_secs(10));
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(CompileCache::open(CacheConfig::builder(dir.path()).build()).unwrap());
    let session = Session::builder(host_device(), declared.clone()).config(config(Some(cache), 4)).build().unwrap();
    assert!(declared.most_inside.load(Ordering::SeqCst) >= 2, "compiles overlapped through the cache");
    assert_eq!(session.stats().compiles, 5);
    check_all_batches(&session, &declared.inner);
}

#[test]
fn other_compilers_compile_one_at_a_time_in_the_process_even_without_a_cache() {
    let declared = Declared::new(9, CompilerCapabilities::default(), Duration::from_millis(30));
    // Two sessions created at once, no cache, several compile threads: still one compile at a time.
    std::thread::scope(|scope| {
        for _ in 0..2 {
            let declared = declared.clone();
            scope.spawn(move || Session::builder(host_device(), declared).config(config(None, 4)).build().unwrap());
        }
    });
    assert_eq!(declared.inner.compiles.load(Ordering::SeqCst), 10);
    assert_eq!(declared.most_inside.load(Ordering::SeqCst), 1, "the process-wide compile lock held every compile");
}

#[test]
fn a_compiler_that_declares_one_artifact_but_refuses_it_gets_a_program_per_bucket() {
    let caps = CompilerCapabilities::default().with_one_artifact_per_model(true);
    let mut declared = Declared::new(11, caps, Duration::ZERO);
    Arc::get_mut(&mut declared).unwrap().strict = true;
    let session = Session::builder(host_device(), declared.clone()).config(config(None, 4)).build().unwrap();
    // The model's compile (for bucket 16) serves bucket 16; the other four are compiled apart.
    assert_eq!(session.stats().compiles, 5);
    check_all_batches(&session, &declared.inner);
}

#[test]
fn buckets_added_by_live_re_bucketing_load_the_models_one_artifact() {
    let caps = CompilerCapabilities::default().with_one_artifact_per_model(true).with_thread_safe(true);
    let declared = Declared::new(13, caps, Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(CompileCache::open(CacheConfig::builder(dir.path()).build()).unwrap());
    let config = SessionConfig::builder()
        .buckets(BucketSpec::PowersOfTwo { max: 16 })
        .cache(cache)
        .max_concurrency(1)
        .live_buckets(LiveBuckets::new(8, 2))
        .build()
        .unwrap();
    let session = Session::builder(host_device(), declared.clone()).config(config).build().unwrap();
    assert_eq!((session.stats().compiles, session.stats().program_loads), (1, 5));
    // Batch-3 traffic: the refit fits {3, 16}, whose new cell is a load of the model's artifact.
    let model = &declared.inner;
    for seed in 0..8 {
        let (data, dims) = (model.inputs(3, seed), model.dims(3));
        session.run(&host_tensors(model, &data, &dims)).unwrap();
    }
    let start = Instant::now();
    while session.stats().refits == 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "no refit: {:?}", session.stats());
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(session.buckets(), vec![3, 16]);
    let st = session.stats();
    assert_eq!((st.compiles, st.program_loads, st.memory_hits), (1, 6, 1), "{st:?}");
    assert_eq!(declared.inner.compiles.load(Ordering::SeqCst), 1, "the refit compiled nothing");
    check_all_batches(&session, &declared.inner);
}
