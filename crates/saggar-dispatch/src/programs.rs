//! Loaded programs: one per bucket (or one for a static model), compiled at session creation, and
//! per-shape programs compiled on demand for models with other symbolic dimensions.
//!
//! Lookup order for every program: the compile cache's memory tier, then its disk tier, then a
//! compile. At creation, disk hits are loaded in parallel and misses are compiled one at a time
//! (in parallel for a compiler that declares itself thread-safe), all pinned to the session's
//! device; a compiler whose one artifact serves every bucket is compiled once and loaded per
//! bucket in parallel.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use saggar_arena::SlotSpec;
use saggar_cache::{Artifact, CacheKey, CompileCache, CompileExclusion, Origin};
use saggar_device::{Backend, BackendKind, CodeObject, Device};
use saggar_shape::{Dim, TensorSpec};

use crate::compiler::{CompileRequest, CompilerIdentity, ModelSpec, Program, ProgramCompiler};
use crate::error::{DispatchError, Result};
use crate::stats::Stats;

/// saggar's artifact format version, part of every cache key.
pub const SAGGAR_FORMAT_VERSION: u32 = 1;

/// saggar-device's built-in kernels compiled for `device`, for its arena pools (the copy kernel):
/// from `cache` on GPU backends, where a runtime compile costs tens of milliseconds of every start
/// (published on the first), else compiled here (the host backend's compile is free). `None` when
/// they cannot be compiled: the pools then try once more themselves, and failing that make every
/// copy with the copy engine.
pub(crate) fn builtin_code<B: Backend>(device: &B::Device, cache: Option<&CompileCache>) -> Option<CodeObject> {
    let _pin = device.pin().ok()?;
    let source = saggar_device::builtin::source();
    let compile = || device.compile(&source);
    let Some(cache) = cache.filter(|_| B::KIND != BackendKind::Host) else {
        return compile().ok();
    };
    let key = CacheKey::builder()
        .model_hash(blake3::hash(source.code.as_bytes()).to_hex().as_str())
        .shape("saggar-device-builtins")
        .backend(B::KIND.name())
        .arch(device.info().arch.as_str())
        .compiler("saggar-device builtin")
        .compiler_version(env!("CARGO_PKG_VERSION"))
        .option("saggar_format", SAGGAR_FORMAT_VERSION.to_string())
        .build()
        .ok()?;
    match cache.get_or_compile(&key, || compile().map(|code| code.to_bytes())) {
        Ok(fetched) => CodeObject::from_bytes(&fetched.artifact).ok().or_else(|| compile().ok()),
        Err(e) => {
            tracing::warn!(error = %e, "saggar-dispatch: the built-in kernels did not come through the compile cache");
            compile().ok()
        }
    }
}

static NEXT_PROGRAM_ID: AtomicUsize = AtomicUsize::new(1);

/// A loaded program and the sizes the dispatcher needs to bind it.
pub(crate) struct ProgramEntry<P> {
    pub(crate) id: usize,
    pub(crate) bucket: Option<u64>,
    pub(crate) program: P,
    pub(crate) input_bytes: Vec<usize>,
    pub(crate) output_dims: Vec<Vec<u64>>,
    pub(crate) output_bytes: Vec<usize>,
    pub(crate) scratch_bytes: usize,
}

fn bytes_of(spec: &TensorSpec, dims: &[u64]) -> Result<usize> {
    Ok(saggar_shape::byte_size(dims, spec.dtype())
        .map_err(|source| saggar_shape::ShapeError::Overflow { input: spec.name().into(), source })? as usize)
}

/// The arena slot of a tensor of `spec` taking `bytes`, aligned for its element type.
pub(crate) fn slot(spec: &TensorSpec, bytes: usize) -> SlotSpec {
    SlotSpec::new(spec.name(), bytes, spec.dtype().size_bytes().max(1))
}

/// The cache key of the program for `input_dims` (binding order) of a model with input `specs`,
/// built by a compiler with `identity`, for a device of `backend` and architecture `arch`. This is
/// the key a session uses, computable without opening a device (`saggar cache key`); see
/// `docs/cache-key.md`.
pub fn cache_key(
    identity: &CompilerIdentity,
    specs: &[TensorSpec],
    input_dims: &[Vec<u64>],
    backend: BackendKind,
    arch: &str,
) -> Result<CacheKey> {
    let shapes: Vec<saggar_shape::TensorShape<'_>> =
        specs.iter().zip(input_dims).map(|(s, d)| saggar_shape::TensorShape::new(s.name(), s.dtype(), d)).collect();
    let mut builder = CacheKey::builder()
        .model_hash(identity.model_hash.as_str())
        .shape(saggar_shape::StableShapeKey::of(&shapes).to_hex())
        .backend(backend.name())
        .arch(arch)
        .compiler(identity.compiler.clone())
        .compiler_version(identity.version.clone())
        .option("saggar_format", SAGGAR_FORMAT_VERSION.to_string());
    for (name, value) in &identity.options {
        builder = builder.option(name.clone(), value.clone());
    }
    builder.build().map_err(|e| DispatchError::Config(format!("cannot build a cache key: {e}")))
}

/// The cache key of the one artifact that serves every bucket of a model whose compiler declares
/// [`crate::CompilerCapabilities::one_artifact_per_model`]: as [`cache_key`], with the model's input
/// specs (symbolic dimensions by name) in place of concrete shapes, and the option
/// `saggar_artifact_scope=model`.
pub fn model_cache_key(
    identity: &CompilerIdentity,
    specs: &[TensorSpec],
    backend: BackendKind,
    arch: &str,
) -> Result<CacheKey> {
    let mut text = String::new();
    for spec in specs {
        let dims: Vec<String> = spec
            .dims()
            .iter()
            .map(|d| match d {
                Dim::Fixed(extent) => extent.to_string(),
                Dim::Symbolic(name) => format!("?{name}"),
            })
            .collect();
        text.push_str(&format!("{}:{}:[{}];", spec.name(), spec.dtype(), dims.join(",")));
    }
    let mut builder = CacheKey::builder()
        .model_hash(identity.model_hash.as_str())
        .shape(format!("model-{}", blake3::hash(text.as_bytes()).to_hex()))
        .backend(backend.name())
        .arch(arch)
        .compiler(identity.compiler.clone())
        .compiler_version(identity.version.clone())
        .option("saggar_format", SAGGAR_FORMAT_VERSION.to_string())
        .option("saggar_artifact_scope", "model");
    for (name, value) in &identity.options {
        builder = builder.option(name.clone(), value.clone());
    }
    builder.build().map_err(|e| DispatchError::Config(format!("cannot build a cache key: {e}")))
}

fn device_key<B: Backend>(
    identity: &CompilerIdentity,
    specs: &[TensorSpec],
    input_dims: &[Vec<u64>],
    device: &B::Device,
) -> Result<CacheKey> {
    cache_key(identity, specs, input_dims, B::KIND, &device.info().arch)
}

/// What one program is for.
pub(crate) struct ProgramSpec {
    pub(crate) bucket: Option<u64>,
    pub(crate) input_dims: Vec<Vec<u64>>,
    /// The values of the model's value inputs the program is made for (binding index, bytes).
    pub(crate) input_values: Vec<(usize, Vec<u8>)>,
}

impl ProgramSpec {
    /// A program for `input_dims`, serving `bucket`, fixed by no input's values.
    pub(crate) fn new(bucket: Option<u64>, input_dims: Vec<Vec<u64>>) -> ProgramSpec {
        ProgramSpec { bucket, input_dims, input_values: Vec::new() }
    }

    /// The compile request of this program.
    fn request(&self) -> CompileRequest<'_> {
        CompileRequest::new(&self.input_dims, self.bucket).with_input_values(&self.input_values)
    }

    /// `identity`, with the input values (when there are any) as the option `saggar_input_values`:
    /// a hash of them, so programs of other values have other cache keys.
    fn keyed(&self, identity: CompilerIdentity) -> CompilerIdentity {
        if self.input_values.is_empty() {
            return identity;
        }
        let mut hasher = blake3::Hasher::new();
        for (index, bytes) in &self.input_values {
            hasher.update(&(*index as u64).to_le_bytes());
            hasher.update(&(bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        }
        identity.with_option("saggar_input_values", hasher.finalize().to_hex().to_string())
    }
}

/// Turns artifact bytes into a loaded program entry.
pub(crate) fn load_entry<B: Backend, C: ProgramCompiler<B>>(
    compiler: &C,
    device: &B::Device,
    spec: &ProgramSpec,
    artifact: &[u8],
    stats: &Stats,
) -> Result<ProgramEntry<C::Program>> {
    let model = compiler.model();
    let request = spec.request();
    let program = compiler
        .load(device, &request, artifact)
        .map_err(|source| DispatchError::Load { model: model.name.clone(), source })?;
    Stats::bump(&stats.program_loads);
    check_outputs(model, spec, &program)?;
    let output_dims = program.output_dims().to_vec();
    let input_bytes = model.inputs.iter().zip(&spec.input_dims).map(|(s, d)| bytes_of(s, d)).collect::<Result<_>>()?;
    let output_bytes = model.outputs.iter().zip(&output_dims).map(|(s, d)| bytes_of(s, d)).collect::<Result<_>>()?;
    let scratch_bytes = program.scratch_bytes();
    Ok(ProgramEntry {
        id: NEXT_PROGRAM_ID.fetch_add(1, Ordering::Relaxed),
        bucket: spec.bucket,
        program,
        input_bytes,
        output_dims,
        output_bytes,
        scratch_bytes,
    })
}

/// Checks a loaded program's outputs against the model: their number, each one's element type
/// (when the program reports them) and each one's shape, with the symbols the program's input
/// shapes bind (an extent no input binds is the program's to choose).
fn check_outputs<B: Backend, P: Program<B>>(model: &ModelSpec, spec: &ProgramSpec, program: &P) -> Result<()> {
    let dims = program.output_dims();
    let dtypes = program.output_dtypes();
    let count = dtypes.map_or(dims.len(), <[_]>::len);
    if dims.len() != model.outputs.len() || count != dims.len() {
        return Err(DispatchError::ProgramMismatch {
            bucket: spec.bucket,
            expected: model.outputs.len(),
            actual: if dims.len() != model.outputs.len() { dims.len() } else { count },
        });
    }
    let bound = |symbol: &str| {
        model.inputs.iter().zip(&spec.input_dims).find_map(|(input, extents)| {
            input.dims().iter().zip(extents).find_map(|(d, e)| (d.symbol() == Some(symbol)).then_some(*e))
        })
    };
    for (o, output) in model.outputs.iter().enumerate() {
        let actual_dtype = dtypes.map_or(output.dtype(), |d| d[o]);
        let shape_fits = output.dims().len() == dims[o].len()
            && output.dims().iter().zip(&dims[o]).all(|(d, &actual)| match d {
                Dim::Fixed(extent) => *extent == actual,
                Dim::Symbolic(name) => bound(name).is_none_or(|extent| extent == actual),
            });
        if actual_dtype != output.dtype() || !shape_fits {
            let expected: Vec<String> = output
                .dims()
                .iter()
                .map(|d| match d {
                    Dim::Fixed(extent) => extent.to_string(),
                    Dim::Symbolic(name) => bound(name).map_or_else(|| name.to_string(), |e| e.to_string()),
                })
                .collect();
            return Err(DispatchError::ProgramOutputMismatch {
                bucket: spec.bucket,
                output: output.name().to_string(),
                expected: format!("{} [{}]", output.dtype(), expected.join(", ")),
                actual: format!("{actual_dtype} {:?}", dims[o]),
            });
        }
    }
    Ok(())
}

/// [`load_entry`] for an artifact that came from `cache` under `key`: an artifact whose program does
/// not match the model is evicted, so it is compiled again instead of failing every session.
fn load_cached<B: Backend, C: ProgramCompiler<B>>(
    compiler: &C,
    device: &B::Device,
    cache: &CompileCache,
    key: &CacheKey,
    spec: &ProgramSpec,
    artifact: &[u8],
    stats: &Stats,
) -> Result<ProgramEntry<C::Program>> {
    let loaded = load_entry(compiler, device, spec, artifact, stats);
    if let Err(DispatchError::ProgramMismatch { .. } | DispatchError::ProgramOutputMismatch { .. }) = &loaded
        && let Err(e) = cache.evict(key)
    {
        tracing::warn!(error = %e, key = %key.id(), "could not evict a cached artifact that does not match its model");
    }
    loaded
}

fn compile_bytes<B: Backend, C: ProgramCompiler<B>>(
    compiler: &C,
    device: &B::Device,
    spec: &ProgramSpec,
) -> Result<Vec<u8>> {
    let request = spec.request();
    compiler.compile(device, &request).map_err(|source| DispatchError::Compile {
        model: compiler.model().name.clone(),
        shapes: format!("{:?}", spec.input_dims),
        source,
    })
}

fn count_origin(stats: &Stats, origin: Origin) {
    match origin {
        Origin::Memory => Stats::bump(&stats.memory_hits),
        Origin::Disk => Stats::bump(&stats.disk_loads),
        Origin::AfterWait => {
            Stats::bump(&stats.disk_loads);
            Stats::bump(&stats.waited_for_compile);
        }
        _ => Stats::bump(&stats.compiles),
    }
}

/// What a compile of `compiler` excludes: only its key's locks for a thread-safe compiler, every
/// other compile of the process otherwise.
fn exclusion<B: Backend, C: ProgramCompiler<B>>(compiler: &C) -> CompileExclusion {
    if compiler.capabilities().thread_safe { CompileExclusion::Key } else { CompileExclusion::Process }
}

/// The artifact under `key`, through `cache` (memory, disk, compile with `compile`) or, without
/// one, compiled now under the process-wide compile lock (unless the compiler is thread-safe).
fn fetch<B: Backend, C: ProgramCompiler<B>>(
    compiler: &C,
    cache: Option<&CompileCache>,
    key: Option<&CacheKey>,
    stats: &Stats,
    compile: impl FnOnce() -> Result<Vec<u8>>,
) -> Result<Artifact> {
    match (cache, key) {
        (Some(cache), Some(key)) => {
            let fetched = cache.get_or_compile_with(key, exclusion(compiler), compile)?;
            count_origin(stats, fetched.origin);
            Ok(fetched.artifact)
        }
        _ => {
            let bytes = match exclusion(compiler) {
                CompileExclusion::Key => compile()?,
                _ => saggar_cache::with_compile_lock(compile)?,
            };
            Stats::bump(&stats.compiles);
            Ok(Artifact::from(bytes))
        }
    }
}

/// Gets the artifact for `spec` through the cache (memory, disk, compile) and loads it.
pub(crate) fn get_or_compile<B: Backend, C: ProgramCompiler<B>>(
    compiler: &C,
    device: &B::Device,
    cache: Option<&CompileCache>,
    spec: &ProgramSpec,
    stats: &Stats,
) -> Result<ProgramEntry<C::Program>> {
    let key = match cache {
        Some(_) => {
            Some(device_key::<B>(&spec.keyed(compiler.identity()), &compiler.model().inputs, &spec.input_dims, device)?)
        }
        None => None,
    };
    let artifact = fetch(compiler, cache, key.as_ref(), stats, || compile_bytes(compiler, device, spec))?;
    let (Some(cache), Some(key)) = (cache, &key) else {
        return load_entry(compiler, device, spec, artifact.as_bytes(), stats);
    };
    let loaded = load_cached(compiler, device, cache, key, spec, artifact.as_bytes(), stats);
    // Compiled again once; a fresh artifact that does not load fails the same way and is reported.
    if !evicted_unloadable(cache, key, &loaded) {
        return loaded;
    }
    let artifact = fetch(compiler, Some(cache), Some(key), stats, || compile_bytes(compiler, device, spec))?;
    load_cached(compiler, device, cache, key, spec, artifact.as_bytes(), stats)
}

/// Whether `loaded` is an artifact the compiler refused to load ([`DispatchError::Load`]: made by
/// another build of it behind the same key, or damaged), now evicted so it is compiled again.
fn evicted_unloadable<P>(cache: &CompileCache, key: &CacheKey, loaded: &Result<P>) -> bool {
    let Err(DispatchError::Load { source, .. }) = loaded else { return false };
    tracing::warn!(key = %key.id(), error = %source, "a cached artifact does not load; evicting it to compile it again");
    match cache.evict(key) {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(error = %e, key = %key.id(), "could not evict a cached artifact that does not load");
            false
        }
    }
}

/// Progress of session creation, reported per program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// Programs ready so far.
    pub done: usize,
    /// Programs in total.
    pub total: usize,
    /// The bucket just made ready (`None` for a static model).
    pub bucket: Option<u64>,
    /// Where it came from.
    pub source: ProgramSource,
}

/// Where a precompiled program came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramSource {
    /// Loaded from the cache (memory or disk), in parallel with other loads.
    Loaded,
    /// Compiled now (one at a time) or waited for another compiler.
    Compiled,
}

/// Runs `work` for `0..n` on up to `threads` threads, each pinned to `device`; `work` returns
/// `None` for an index it leaves to someone else.
fn in_parallel<B: Backend, T: Send>(
    device: &B::Device,
    threads: usize,
    n: usize,
    work: impl Fn(usize) -> Option<Result<T>> + Sync,
) -> Vec<Option<Result<T>>> {
    let next = AtomicUsize::new(0);
    let slots: Vec<parking_lot::Mutex<Option<Result<T>>>> = (0..n).map(|_| parking_lot::Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, n.max(1)) {
            scope.spawn(|| {
                let pin = device.pin();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let result = match &pin {
                        Ok(_) => work(i),
                        Err(e) => Some(Err(DispatchError::from(e.clone()))),
                    };
                    *slots[i].lock() = result;
                }
            });
        }
    });
    slots.into_iter().map(parking_lot::Mutex::into_inner).collect()
}

/// How many threads session creation may use.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Threads {
    /// Loads of cached artifacts.
    pub(crate) load: usize,
    /// Compiles of misses, for a thread-safe compiler.
    pub(crate) compile: usize,
}

/// Precompiles every spec: cached artifacts are loaded in parallel on `threads.load` threads, each
/// pinned to the device; misses are then compiled one at a time through the cache's locks, or on
/// `threads.compile` threads for a thread-safe compiler. A compiler whose one artifact serves every
/// bucket is compiled (or fetched) once and loaded per spec in parallel.
pub(crate) fn precompile<B: Backend, C: ProgramCompiler<B>>(
    compiler: &C,
    device: &B::Device,
    cache: Option<&CompileCache>,
    specs: &[ProgramSpec],
    threads: Threads,
    stats: &Stats,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<Vec<Arc<ProgramEntry<C::Program>>>> {
    let total = specs.len();
    let done = AtomicUsize::new(0);
    let report = |spec: &ProgramSpec, source| {
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        progress(&Progress { done: n, total, bucket: spec.bucket, source });
    };
    let caps = compiler.capabilities();
    // Bucket programs (grid cells, at creation or added by live re-bucketing) share the model's one
    // artifact; a static model's one program keeps its shape's key.
    if caps.one_artifact_per_model && specs.iter().any(|s| s.bucket.is_some()) {
        return precompile_per_model(compiler, device, cache, specs, threads, stats, &report);
    }
    let mut loaded: Vec<Option<Result<ProgramEntry<C::Program>>>> = (0..total).map(|_| None).collect();
    if let Some(cache) = cache {
        let identity = compiler.identity();
        loaded = in_parallel::<B, _>(device, threads.load, total, |i| {
            let spec = &specs[i];
            let key = device_key::<B>(&identity, &compiler.model().inputs, &spec.input_dims, device).ok()?;
            let fetched = cache.lookup(&key).ok().flatten()?;
            count_origin(stats, fetched.origin);
            let entry = load_cached(compiler, device, cache, &key, spec, fetched.artifact.as_bytes(), stats);
            if evicted_unloadable(cache, &key, &entry) {
                return None; // a miss: compiled below
            }
            report(spec, ProgramSource::Loaded);
            Some(entry)
        });
    }
    let misses: Vec<usize> = (0..total).filter(|i| loaded[*i].is_none()).collect();
    if caps.thread_safe && threads.compile > 1 && misses.len() > 1 {
        let compiled = in_parallel::<B, _>(device, threads.compile, misses.len(), |m| {
            let spec = &specs[misses[m]];
            let entry = get_or_compile(compiler, device, cache, spec, stats);
            Stats::bump(&stats.parallel_compiles);
            report(spec, ProgramSource::Compiled);
            Some(entry)
        });
        for (m, entry) in misses.iter().zip(compiled) {
            loaded[*m] = entry;
        }
    }
    let _pin = device.pin()?;
    let mut entries = Vec::with_capacity(total);
    for (spec, slot) in specs.iter().zip(loaded) {
        let entry = match slot {
            Some(entry) => entry?,
            None => {
                let entry = get_or_compile(compiler, device, cache, spec, stats)?;
                report(spec, ProgramSource::Compiled);
                entry
            }
        };
        entries.push(Arc::new(entry));
    }
    Ok(entries)
}

/// [`precompile`] for a compiler whose one artifact serves every bucket: fetched (or compiled, with
/// the largest bucket's request: the largest grid cell) once under the model's cache key, then
/// loaded per spec in parallel.
fn precompile_per_model<B: Backend, C: ProgramCompiler<B>>(
    compiler: &C,
    device: &B::Device,
    cache: Option<&CompileCache>,
    specs: &[ProgramSpec],
    threads: Threads,
    stats: &Stats,
    report: &(dyn Fn(&ProgramSpec, ProgramSource) + Sync),
) -> Result<Vec<Arc<ProgramEntry<C::Program>>>> {
    let _pin = device.pin()?;
    // The largest batch bucket, then the largest padded-axis bucket of a grid.
    let elements = |s: &ProgramSpec| s.input_dims.iter().map(|d| d.iter().product::<u64>()).sum::<u64>();
    let largest = specs.iter().max_by_key(|s| (s.bucket, elements(s))).expect("at least one bucket spec");
    let key = match cache {
        Some(_) => Some(model_cache_key(&compiler.identity(), &compiler.model().inputs, B::KIND, &device.info().arch)?),
        None => None,
    };
    let compiles_before = stats.compiles.load(Ordering::Relaxed);
    let artifact = fetch(compiler, cache, key.as_ref(), stats, || compile_bytes(compiler, device, largest))?;
    let source = if stats.compiles.load(Ordering::Relaxed) > compiles_before {
        ProgramSource::Compiled
    } else {
        ProgramSource::Loaded
    };
    let loaded = in_parallel::<B, _>(device, threads.load, specs.len(), |i| {
        let spec = &specs[i];
        let entry = match (cache, &key) {
            (Some(cache), Some(key)) => load_cached(compiler, device, cache, key, spec, artifact.as_bytes(), stats),
            _ => load_entry(compiler, device, spec, artifact.as_bytes(), stats),
        };
        // A compiler that declared one artifact per model but refuses it for this bucket breaks the
        // contract; the bucket still gets its own program, and the refusal is logged.
        let entry = match entry {
            Err(DispatchError::Load { source: refusal, .. }) => {
                tracing::warn!(bucket = ?spec.bucket, error = %refusal, "the model's one artifact does not load for this bucket; compiling it apart");
                get_or_compile(compiler, device, cache, spec, stats)
            }
            other => other,
        };
        report(spec, source);
        Some(entry)
    });
    loaded.into_iter().map(|e| Ok(Arc::new(e.expect("every spec is loaded")?))).collect()
}
