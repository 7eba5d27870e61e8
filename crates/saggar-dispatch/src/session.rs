//! The session: one model on one device, serving requests of any batch size from precompiled buckets.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::RwLock;
use saggar_arena::{
    ArenaLayout, ArenaPool, DeviceInputMode, InputSource, Lease, Pool, PoolConfig, SlotSpec, WhenExhausted,
};
use saggar_device::{Backend, Device, DevicePtr, DeviceSlice, GraphExec, Stream};
use saggar_shape::{
    Bindings, BucketPolicy, Chunk, DType, PadPlan, Signature, SlicePlan, StableShapeKey, TensorShape, TensorSpec,
};

use crate::binding::{BoundRequest, DeviceBinding};
use crate::compiler::{Program, ProgramCompiler};
use crate::config::{CaptureWhen, SessionConfig};
use crate::context::{DeviceIo, GraphEntry, LastRun, RunContext, capture, graph_bytes, replayable};
use crate::error::{DispatchError, Result};
use crate::programs::{self, ProgramEntry, ProgramSpec, Progress};
use crate::request::{self, Chunks, RequestGuard};
use crate::stats::{Stats, StatsSnapshot};
use crate::tensors::{BindingMode, DeviceTensor, HostTensor, OwnedTensor, RunInfo, RunPath};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModelKind {
    /// The batch is the only dynamic dimension: served from precompiled buckets.
    Bucketed,
    /// No dynamic dimension: one program.
    Static,
    /// Other symbolic dimensions: a program per concrete shape, compiled on first use.
    PerShape,
}

/// A program compiled for one concrete shape of a [`ModelKind::PerShape`] model, with arenas sized
/// for exactly that shape.
struct ShapeProgram<B: Backend, P> {
    entry: ProgramEntry<P>,
    arenas: ArenaPool<B>,
}

/// Per-shape programs by the stable key of their input shapes.
type ShapePrograms<B, P> = HashMap<StableShapeKey, Arc<ShapeProgram<B, P>>>;

pub(crate) struct Inner<B: Backend, C: ProgramCompiler<B>> {
    device: B::Device,
    compiler: Arc<C>,
    config: SessionConfig,
    signature: Signature,
    kind: ModelKind,
    policy: Option<BucketPolicy>,
    /// Bucket programs in the policy's order, or the one static program.
    main: Vec<Arc<ProgramEntry<C::Program>>>,
    /// Per main program: bytes of the staging span and of the output span it uses.
    upload_span: Vec<usize>,
    download_span: Vec<usize>,
    shape_programs: RwLock<ShapePrograms<B, C::Program>>,
    contexts: Pool<RunContext<B>>,
    /// The request limits, checked before anything is allocated or planned for a request.
    guard: RequestGuard,
    stats: Arc<Stats>,
}

/// One model on one device. Created with every bucket precompiled; serves `run` calls from any
/// number of threads at once (each leases its own run context; there is no global run lock).
///
/// # Thread safety
/// `Send + Sync`; clone it (cheap) or share it by reference.
pub struct Session<B: Backend, C: ProgramCompiler<B>> {
    pub(crate) inner: Arc<Inner<B, C>>,
}

impl<B: Backend, C: ProgramCompiler<B>> Clone for Session<B, C> {
    fn clone(&self) -> Self {
        Session { inner: self.inner.clone() }
    }
}

impl<B: Backend, C: ProgramCompiler<B>> std::fmt::Debug for Session<B, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("device", &self.inner.device.info().name)
            .field("model", &self.inner.compiler.model().name)
            .field("buckets", &self.buckets())
            .finish_non_exhaustive()
    }
}

fn concrete_dims(spec: &TensorSpec, batch_symbol: Option<&str>, batch: u64) -> Vec<u64> {
    spec.dims()
        .iter()
        .map(|d| match (d.as_fixed(), d.symbol()) {
            (Some(v), _) => v,
            (None, Some(s)) if Some(s) == batch_symbol => batch,
            _ => unreachable!("only bucketed and static models are precompiled"),
        })
        .collect()
}

impl<B: Backend, C: ProgramCompiler<B>> Session<B, C> {
    /// Creates a session: detects the batch axis, chooses buckets, and precompiles every bucket
    /// through the cache (disk hits loaded in parallel, misses compiled one at a time), all pinned to
    /// `device`. `progress` is called once per program made ready.
    pub fn new(
        device: B::Device,
        compiler: Arc<C>,
        config: SessionConfig,
        progress: &(dyn Fn(&Progress) + Sync),
    ) -> Result<Self> {
        let _pin = device.pin()?;
        let model = compiler.model().clone();
        let signature = Signature::new(model.inputs.clone(), model.outputs.clone())?;
        let layout = signature.batch_layout();
        let kind = if signature.is_static() {
            ModelKind::Static
        } else if layout.batch_is_only_dynamic_dim() && layout.symbol().is_some() {
            ModelKind::Bucketed
        } else {
            ModelKind::PerShape
        };
        let policy = (kind == ModelKind::Bucketed).then(|| config.buckets.policy()).transpose()?;
        let batch_symbol = layout.symbol().map(str::to_string);
        let specs: Vec<ProgramSpec> = match kind {
            ModelKind::Bucketed => policy
                .as_ref()
                .expect("bucketed models have a policy")
                .buckets()
                .iter()
                .map(|&b| ProgramSpec {
                    bucket: Some(b),
                    input_dims: model.inputs.iter().map(|s| concrete_dims(s, batch_symbol.as_deref(), b)).collect(),
                })
                .collect(),
            ModelKind::Static => vec![ProgramSpec {
                bucket: None,
                input_dims: model.inputs.iter().map(|s| concrete_dims(s, None, 0)).collect(),
            }],
            ModelKind::PerShape => Vec::new(),
        };
        let stats = Arc::new(Stats::default());
        let cache = config.cache.clone();
        let main =
            programs::precompile(&*compiler, &device, cache.as_deref(), &specs, config.load_threads, &stats, progress)?;

        // One arena layout serves every main program: each slot sized for the largest bucket.
        let slot =
            |spec: &TensorSpec, bytes: usize| SlotSpec::new(spec.name(), bytes, spec.dtype().size_bytes().max(1));
        let input_slots: Vec<SlotSpec> = model
            .inputs
            .iter()
            .enumerate()
            .map(|(i, s)| slot(s, main.iter().map(|e| e.input_bytes[i]).max().unwrap_or(0)))
            .collect();
        let output_slots: Vec<SlotSpec> = model
            .outputs
            .iter()
            .enumerate()
            .map(|(o, s)| slot(s, main.iter().map(|e| e.output_bytes[o]).max().unwrap_or(0)))
            .collect();
        let arena_layout = Arc::new(ArenaLayout::new(&input_slots, &output_slots, config.arena_alignment)?);
        let span = |slots: &[saggar_arena::Slot], bytes: &[usize]| {
            slots.iter().zip(bytes).map(|(s, b)| s.offset + b).max().unwrap_or(0)
        };
        let upload_span = main.iter().map(|e| span(arena_layout.inputs(), &e.input_bytes)).collect();
        let download_span = main.iter().map(|e| span(arena_layout.outputs(), &e.output_bytes)).collect();
        let max_scratch = main.iter().map(|e| e.scratch_bytes).max().unwrap_or(0);

        let wait = WhenExhausted::Wait { timeout: None };
        let arenas = ArenaPool::<B>::new(
            device.clone(),
            arena_layout,
            PoolConfig { max_arenas: config.max_concurrency, when_exhausted: wait, ..PoolConfig::default() },
        )?;
        let has_main = !main.is_empty();
        let graph_budget = config.graphs.memory_budget_bytes.map(|b| b / config.max_concurrency as u64);
        let ctx_device = device.clone();
        let ctx_stats = stats.clone();
        let contexts = Pool::new(config.max_concurrency, wait, move || {
            let _pin = ctx_device.pin()?;
            Ok(RunContext {
                stream: ctx_device.create_stream()?,
                arena: if has_main { Some(arenas.lease()?) } else { None },
                scratch: if max_scratch > 0 { Some(ctx_device.alloc(max_scratch)?) } else { None },
                graphs: HashMap::new(),
                graph_bytes: 0,
                graph_budget,
                tick: 0,
                last: None,
                pad_plans: Vec::new(),
                slice_plans: Vec::new(),
                inputs: Vec::new(),
                outputs: Vec::new(),
                io: DeviceIo::default(),
                stats: ctx_stats.clone(),
            })
        })?;
        contexts.prewarm(config.prewarm_contexts)?;
        let guard = RequestGuard::new(&signature, config.request_limits);
        let session = Session {
            inner: Arc::new(Inner {
                device,
                compiler,
                config,
                signature,
                kind,
                policy,
                main,
                upload_span,
                download_span,
                shape_programs: RwLock::new(HashMap::new()),
                contexts,
                guard,
                stats,
            }),
        };
        if session.inner.config.graphs.enabled && session.inner.config.graphs.capture == CaptureWhen::Eager {
            session.capture_all_eagerly()?;
        }
        Ok(session)
    }

    /// Captures a pinned-copy graph of every main program in every prewarmed context.
    fn capture_all_eagerly(&self) -> Result<()> {
        let inner = &*self.inner;
        let leases: Vec<_> =
            (0..inner.contexts.created()).map(|_| inner.contexts.lease()).collect::<std::result::Result<_, _>>()?;
        for mut ctx in leases {
            for k in 0..inner.main.len() {
                inner.capture_pinned(&mut ctx, k)?;
            }
        }
        Ok(())
    }

    /// The device.
    pub fn device(&self) -> &B::Device {
        &self.inner.device
    }

    /// The buckets precompiled (empty for models served per shape).
    pub fn buckets(&self) -> Vec<u64> {
        self.inner.main.iter().filter_map(|e| e.bucket).collect()
    }

    /// The model's signature (inputs and outputs in binding order).
    pub fn signature(&self) -> &Signature {
        &self.inner.signature
    }

    /// The counters.
    pub fn stats(&self) -> StatsSnapshot {
        self.inner.stats.snapshot()
    }

    /// Output dimensions for a request with these input shapes (any order).
    pub fn output_dims(&self, inputs: &[HostTensor<'_>]) -> Result<Vec<Vec<u64>>> {
        self.inner.output_dims(inputs)
    }

    /// Runs one request from host memory and returns every output, sliced to the request's batch.
    /// The request's limits and input buffers are checked before its outputs are allocated.
    pub fn run(&self, inputs: &[HostTensor<'_>]) -> Result<Vec<OwnedTensor>> {
        let (result, _lease) = self.inner.instrumented(|inner, ctx| {
            let ordered = inner.reorder(inputs, |t| TensorShape::new(t.name, t.dtype, t.dims))?;
            let bindings = inner.signature.check(&ordered)?;
            inner.guard.check(&bindings, &ordered)?;
            request::check_host_inputs(&inner.signature, &ordered)?;
            let dims = (0..inner.signature.outputs().len())
                .map(|o| Ok(bindings.output_shape(o)?.to_vec()))
                .collect::<Result<Vec<_>>>()?;
            let specs = inner.signature.outputs();
            let mut buffers: Vec<AlignedBuffer> = specs
                .iter()
                .zip(&dims)
                .map(|(spec, d)| {
                    let bytes = saggar_shape::byte_size(d, spec.dtype())
                        .map_err(|source| saggar_shape::ShapeError::Overflow { input: spec.name().into(), source })?;
                    Ok(AlignedBuffer::new(bytes as usize))
                })
                .collect::<Result<_>>()?;
            let info = inner.run_host(ctx, inputs, &mut buffers)?;
            let outputs = specs
                .iter()
                .zip(dims)
                .zip(buffers)
                .map(|((spec, dims), buf)| OwnedTensor {
                    name: spec.name().to_string(),
                    dtype: spec.dtype(),
                    dims,
                    data: buf.into_vec(),
                })
                .collect();
            Ok((outputs, info))
        });
        let (outputs, info) = result?;
        self.inner.stats.record_path(info.path);
        Ok(outputs)
    }

    /// Runs one request from host memory into the caller's output buffers (binding order, each sized
    /// for the request's real batch). Allocates nothing on the ultra-fast and fast paths.
    pub fn run_into<T: AsMut<[u8]>>(&self, inputs: &[HostTensor<'_>], outputs: &mut [T]) -> Result<RunInfo> {
        let (result, _lease) = self.inner.instrumented(|inner, ctx| inner.run_host(ctx, inputs, outputs));
        let info = result?;
        self.inner.stats.record_path(info.path);
        Ok(info)
    }

    /// Runs one request whose inputs and outputs are in device memory the caller owns, and waits for
    /// it. Exact-bucket requests are direct-bound (the caller's pointers are baked into a graph and
    /// checked every run); padded or split ones are stabilized (copied into persistent slots).
    pub fn run_device(&self, inputs: &[DeviceTensor<'_>], outputs: &[DeviceTensor<'_>]) -> Result<RunInfo> {
        self.enqueue_device(inputs, outputs)?.wait()
    }

    /// Like [`Session::run_device`] but returns once the work is enqueued; the outputs are ready when
    /// the returned [`Pending`] is waited for (or dropped). The caller's device memory must stay
    /// valid until then.
    pub fn enqueue_device(&self, inputs: &[DeviceTensor<'_>], outputs: &[DeviceTensor<'_>]) -> Result<Pending<B>> {
        self.enqueue_with(|inner, ctx| inner.run_device(ctx, inputs, outputs))
    }

    /// Validates a device request once (names in any order, dtypes, shapes, buffer sizes and
    /// alignment) and keeps it as a [`DeviceBinding`]: runs of the binding skip that validation, so
    /// a repeated request costs a pointer comparison and a graph launch. Change its buffers with
    /// [`DeviceBinding::set_input`] / [`DeviceBinding::set_output`] (each checked as it is set).
    pub fn bind_device(
        &self,
        inputs: &[DeviceTensor<'_>],
        outputs: &[DeviceTensor<'_>],
    ) -> Result<DeviceBinding<B, C>> {
        let inner = &*self.inner;
        let mut io = DeviceIo::default();
        let ordered = inner.reorder(inputs, |t| TensorShape::new(t.name, t.dtype, t.dims))?;
        let (bindings, route) = inner.check_device_request(&ordered, outputs, &mut io)?;
        let batch = bindings.batch();
        if route.is_none()
            && let (Some(policy), Some(batch)) = (&inner.policy, batch)
        {
            // A batch no bucket can serve (splitting off) is refused here, not on every run.
            policy.plan(batch, inner.config.splitting)?;
        }
        let input_dims = ordered.iter().map(|t| t.dims.to_vec()).collect();
        let output_dims = outputs.iter().map(|t| t.dims.to_vec()).collect();
        Ok(DeviceBinding::new(self.clone(), BoundRequest { route, batch, input_dims, output_dims, io }))
    }

    /// Runs `f` with a leased run context and returns the work it enqueued as [`Pending`].
    pub(crate) fn enqueue_with(
        &self,
        f: impl FnOnce(&Inner<B, C>, &mut RunContext<B>) -> Result<RunInfo>,
    ) -> Result<Pending<B>> {
        let (result, lease) = self.inner.instrumented(f);
        let info = result?;
        Ok(Pending { lease: lease.expect("a successful run holds its context"), info, finished: false })
    }
}

/// A host buffer of `len` bytes aligned to 8, so outputs of any element type can be scattered into it.
struct AlignedBuffer {
    words: Vec<u64>,
    len: usize,
}

impl AlignedBuffer {
    fn new(len: usize) -> AlignedBuffer {
        AlignedBuffer { words: vec![0; len.div_ceil(8)], len }
    }

    fn into_vec(self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_le_bytes()).take(self.len).collect()
    }
}

impl AsMut<[u8]> for AlignedBuffer {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `words` holds at least `len` initialised bytes, u8 has no alignment requirement, and
        // the returned slice borrows `self` mutably.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

/// Work enqueued by [`Session::enqueue_device`]. Holds the request's run context until waited for.
/// The request is counted as served (or as failed) once its work is known to be done: when it is
/// waited for, or dropped.
pub struct Pending<B: Backend> {
    lease: Lease<RunContext<B>>,
    info: RunInfo,
    finished: bool,
}

impl<B: Backend> std::fmt::Debug for Pending<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").field("info", &self.info).finish_non_exhaustive()
    }
}

impl<B: Backend> Pending<B> {
    /// Waits until the outputs are ready.
    pub fn wait(mut self) -> Result<RunInfo> {
        self.finish()?;
        Ok(self.info)
    }

    /// Synchronizes the request's stream and counts the request as served or failed.
    fn finish(&mut self) -> Result<()> {
        self.finished = true;
        match self.lease.stream.synchronize() {
            Ok(()) => {
                self.lease.stats.record_path(self.info.path);
                Ok(())
            }
            Err(e) => {
                self.lease.last = None;
                let e = DispatchError::from(e);
                self.lease.stats.record_failure(&e);
                Err(e)
            }
        }
    }
}

impl<B: Backend> Drop for Pending<B> {
    fn drop(&mut self) {
        if !self.finished
            && let Err(e) = self.finish()
        {
            tracing::error!(error = %e, "saggar-dispatch: a dropped pending run failed");
        }
    }
}

/// The single program and chunk of a request that needs no split.
struct Single {
    k: usize,
    chunk: Chunk,
}

/// How a checked device request that needs no split runs: main program `k` on `chunk`, in `mode`
/// (direct bind at an exact bucket, stabilized otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceRoute {
    pub(crate) k: usize,
    pub(crate) chunk: Chunk,
    pub(crate) mode: BindingMode,
    pub(crate) batch: Option<u64>,
}

/// Names are compared by address first: callers that reuse the model's own name strings skip the
/// string comparison.
fn same_name(given: &str, model: &str) -> bool {
    std::ptr::eq(given, model) || given == model
}

/// The bytes a tensor of `spec`'s element type with extents `dims` occupies.
pub(crate) fn request_bytes(spec: &TensorSpec, dims: &[u64]) -> Result<usize> {
    let bytes = saggar_shape::byte_size(dims, spec.dtype())
        .map_err(|source| saggar_shape::ShapeError::Overflow { input: spec.name().into(), source })?;
    // More than the address space holds: no buffer is large enough, which the buffer check reports.
    Ok(usize::try_from(bytes).unwrap_or(usize::MAX))
}

/// `data` trimmed to `needed` bytes, after checking that it holds them and is aligned for the
/// element type (a misaligned pointer would fault the kernel).
#[inline]
pub(crate) fn checked_device_buffer(
    role: &'static str,
    spec: &TensorSpec,
    needed: usize,
    data: DeviceSlice,
) -> Result<DeviceSlice> {
    let align = spec.dtype().size_bytes().max(1) as u64;
    if data.len() < needed || !data.ptr().0.is_multiple_of(align) {
        return Err(bad_device_buffer(role, spec, needed, data));
    }
    Ok(DeviceSlice::from_raw(data.ptr(), needed))
}

#[cold]
#[inline(never)]
fn bad_device_buffer(role: &'static str, spec: &TensorSpec, needed: usize, data: DeviceSlice) -> DispatchError {
    let name = spec.name().to_string();
    if data.len() < needed {
        DispatchError::BufferTooSmall { role, name, needed, actual: data.len() }
    } else {
        let align = spec.dtype().size_bytes().max(1) as u64;
        DispatchError::Misaligned { role, name, address: data.ptr().0, align }
    }
}

impl<B: Backend, C: ProgramCompiler<B>> Inner<B, C> {
    fn output_dims(&self, inputs: &[HostTensor<'_>]) -> Result<Vec<Vec<u64>>> {
        let shapes: Vec<TensorShape<'_>> = inputs.iter().map(|t| TensorShape::new(t.name, t.dtype, t.dims)).collect();
        let bindings = self.signature.bind(&shapes)?;
        (0..self.signature.outputs().len()).map(|o| Ok(bindings.output_shape(o)?.to_vec())).collect()
    }

    /// Runs `f` with a leased, pinned run context; counts the request, its latency and its failure
    /// (the caller counts its path once it is known to have succeeded). Returns the lease too when
    /// the run succeeded (for work left pending on its stream).
    fn instrumented<R>(
        &self,
        f: impl FnOnce(&Self, &mut RunContext<B>) -> Result<R>,
    ) -> (Result<R>, Option<Lease<RunContext<B>>>) {
        let started = Instant::now();
        Stats::bump(&self.stats.requests);
        let run = || -> Result<(R, Lease<RunContext<B>>)> {
            let _pin = self.device.pin()?;
            let mut ctx = self.contexts.lease()?;
            ctx.tick += 1;
            match f(self, &mut ctx) {
                Ok(r) => Ok((r, ctx)),
                Err(e) => {
                    // Leave nothing half-done on the stream for the next request, and never take the
                    // ultra-fast path from a failed run. A failing synchronize is reported with the
                    // run's error, not dropped.
                    ctx.last = None;
                    match ctx.stream.synchronize() {
                        Ok(()) => Err(e),
                        Err(synchronize) => Err(DispatchError::AfterFailedRun { error: Box::new(e), synchronize }),
                    }
                }
            }
        };
        let result = run();
        if let Err(e) = &result {
            self.stats.record_failure(e);
        }
        self.stats.record_latency(started.elapsed());
        match result {
            Ok((r, lease)) => (Ok(r), Some(lease)),
            Err(e) => (Err(e), None),
        }
    }

    /// Whether the request lists the model's inputs in binding order with the right dtypes. Names
    /// are compared by address first: callers that reuse the model's own names skip the string
    /// comparison.
    fn in_binding_order<T>(&self, request: &[T], name: impl Fn(&T) -> (&str, DType)) -> bool {
        let specs = self.signature.inputs();
        request.len() == specs.len()
            && request.iter().zip(specs).all(|(t, s)| {
                let (n, dtype) = name(t);
                dtype == s.dtype() && same_name(n, s.name())
            })
    }

    fn single(&self, bindings: &Bindings<'_>) -> Option<Single> {
        match self.kind {
            ModelKind::Static => Some(Single { k: 0, chunk: Chunk::whole(1, 1) }),
            ModelKind::Bucketed => {
                let batch = bindings.batch()?;
                let policy = self.policy.as_ref()?;
                let k = policy.bucket_index_for(batch).ok()?;
                Some(Single { k, chunk: Chunk::whole(batch, policy.buckets()[k]) })
            }
            ModelKind::PerShape => None,
        }
    }

    fn pad_plan(&self, index: usize, dims: &[u64], chunk: Chunk) -> Result<PadPlan> {
        if self.kind == ModelKind::Bucketed {
            return Ok(self.signature.pad_plan(index, dims, chunk)?);
        }
        let spec = &self.signature.inputs()[index];
        Ok(PadPlan::new(TensorShape::new(spec.name(), spec.dtype(), dims), false, Chunk::whole(1, 1))?)
    }

    fn slice_plan(&self, index: usize, program_dims: &[u64], chunk: Chunk) -> Result<SlicePlan> {
        if self.kind == ModelKind::Bucketed {
            return Ok(self.signature.slice_plan(index, program_dims, chunk)?);
        }
        let spec = &self.signature.outputs()[index];
        Ok(SlicePlan::new(TensorShape::new(spec.name(), spec.dtype(), program_dims), false, Chunk::whole(1, 1))?)
    }

    /// Fills the context's pad and slice plans for `chunk` of a request run by main program `k`.
    fn plan_chunk<T: AsRef<[u64]>>(&self, ctx: &mut RunContext<B>, inputs: &[T], k: usize, chunk: Chunk) -> Result<()> {
        ctx.pad_plans.clear();
        for (i, t) in inputs.iter().enumerate() {
            let plan = self.pad_plan(i, t.as_ref(), chunk)?;
            ctx.pad_plans.push(plan);
        }
        ctx.slice_plans.clear();
        for (o, dims) in self.main[k].output_dims.iter().enumerate() {
            let plan = self.slice_plan(o, dims, chunk)?;
            ctx.slice_plans.push(plan);
        }
        Ok(())
    }

    fn count_chunk(&self, chunk: Chunk) {
        if self.kind == ModelKind::Bucketed {
            Stats::add(&self.stats.useful_rows, chunk.rows);
            Stats::add(&self.stats.padded_rows, chunk.bucket - chunk.rows);
        }
    }

    /// Binds main program `k` to the context's arena slots and scratch, into `ctx.inputs` / `ctx.outputs`.
    fn bind_slots(&self, ctx: &mut RunContext<B>, k: usize) -> Result<()> {
        let entry = &self.main[k];
        let arena = ctx.arena.as_ref().expect("main programs have arenas");
        ctx.inputs.clear();
        for (i, bytes) in entry.input_bytes.iter().enumerate() {
            ctx.inputs.push(arena.input_slot(i).sub(0, *bytes)?);
        }
        ctx.outputs.clear();
        for (o, bytes) in entry.output_bytes.iter().enumerate() {
            ctx.outputs.push(arena.output_slot(o).sub(0, *bytes)?);
        }
        Ok(())
    }

    /// Enqueues main program `k` on the context's arena slots. With `copies`, the single upload of the
    /// staging span comes first and the single download of the output span last (pinned-copy mode).
    fn enqueue_on_slots(&self, ctx: &mut RunContext<B>, k: usize, copies: bool) -> Result<()> {
        self.bind_slots(ctx, k)?;
        let entry = &self.main[k];
        let scratch = ctx.scratch_slice(entry.scratch_bytes);
        let arena = ctx.arena.as_ref().expect("main programs have arenas");
        // SAFETY: the arena, its staging and read-back buffers, and the scratch buffer belong to this
        // run context, which outlives the work (contexts are only dropped with the session, after
        // their streams are synchronised by the arena's drop); the caller fences the arena after the
        // work (or after every launch of a graph holding it) before the staging buffer is touched.
        unsafe {
            if copies {
                arena.enqueue_upload(&ctx.stream, self.upload_span[k])?;
            }
            entry.program.launch(&ctx.stream, &ctx.inputs, &ctx.outputs, scratch)?;
            if copies {
                arena.enqueue_download(&ctx.stream, self.download_span[k])?;
            }
        }
        Ok(())
    }

    /// Captures the pinned-copy graph of main program `k` in `ctx`.
    fn capture_pinned(&self, ctx: &mut RunContext<B>, k: usize) -> Result<()> {
        self.capture_on_slots(ctx, k, BindingMode::PinnedCopy)
    }

    fn capture_on_slots(&self, ctx: &mut RunContext<B>, k: usize, mode: BindingMode) -> Result<()> {
        let copies = mode == BindingMode::PinnedCopy;
        // Not `context::capture`: recording needs the context mutably (to bind its slots).
        ctx.stream.begin_capture(saggar_device::CaptureMode::ThreadLocal)?;
        let recorded = self.enqueue_on_slots(ctx, k, copies);
        let ended = ctx.stream.end_capture();
        recorded?;
        let graph = ended?;
        let exec = self.device.instantiate(&graph)?;
        Stats::bump(&self.stats.captures);
        let bytes = graph_bytes::<B>(&graph);
        let tick = ctx.tick;
        ctx.insert_graph(
            (self.main[k].id, mode),
            GraphEntry { exec: Some(exec), mode, baked: Vec::new(), drift: 0, last_used: tick, bytes },
            &self.stats,
        );
        Ok(())
    }

    /// Runs main program `k` on the arena slots in `mode` (pinned-copy or stabilized): replays the
    /// context's graph of that mode (capturing it first if needed) or launches eagerly.
    fn run_on_slots(&self, ctx: &mut RunContext<B>, k: usize, mode: BindingMode) -> Result<bool> {
        if !self.config.graphs.enabled {
            self.enqueue_on_slots(ctx, k, mode == BindingMode::PinnedCopy)?;
            Stats::bump(&self.stats.eager_runs);
            return Ok(false);
        }
        let key = (self.main[k].id, mode);
        if !ctx.graphs.get(&key).is_some_and(|e| replayable(e, mode)) {
            self.capture_on_slots(ctx, k, mode)?;
        }
        let tick = ctx.tick;
        let entry = ctx.graphs.get_mut(&key).expect("captured above");
        entry.last_used = tick;
        let exec = entry.exec.as_ref().expect("replayable");
        // SAFETY: the graph was captured on this context's arena slots and scratch, which live as long
        // as the context; the arena is fenced after this launch.
        unsafe { ctx.stream.launch_graph(exec)? };
        Stats::bump(&self.stats.replays);
        Ok(true)
    }

    /// One chunk of a host request on main program `k`, with the plans already in the context.
    fn pinned_chunk<T: AsMut<[u8]>>(
        &self,
        ctx: &mut RunContext<B>,
        k: usize,
        inputs: &[HostTensor<'_>],
        outputs: &mut [T],
    ) -> Result<bool> {
        {
            let RunContext { arena, pad_plans, .. } = &mut *ctx;
            let arena = arena.as_mut().expect("main programs have arenas");
            arena.gather_host_with(|i| InputSource::Host { data: inputs[i].data, plan: pad_plans[i] })?;
        }
        let replayed = self.run_on_slots(ctx, k, BindingMode::PinnedCopy)?;
        let RunContext { arena, stream, slice_plans, .. } = &mut *ctx;
        let arena = arena.as_mut().expect("main programs have arenas");
        arena.fence(stream)?;
        arena.scatter_outputs_with(outputs, |o| slice_plans[o])?;
        Ok(replayed)
    }

    fn run_host<T: AsMut<[u8]>>(
        &self,
        ctx: &mut RunContext<B>,
        inputs: &[HostTensor<'_>],
        outputs: &mut [T],
    ) -> Result<RunInfo> {
        let n_out = self.signature.outputs().len();
        if outputs.len() != n_out {
            return Err(DispatchError::OutputCount { expected: n_out, actual: outputs.len() });
        }
        if self.in_binding_order(inputs, |t| (t.name, t.dtype)) {
            let bindings = self.signature.check(inputs)?;
            self.guard.check(&bindings, inputs)?;
            if let Some(Single { k, chunk }) = self.single(&bindings) {
                let batch = bindings.batch();
                let last = LastRun { mode: BindingMode::PinnedCopy, batch, program: self.main[k].id };
                let path = if ctx.last == Some(last) { RunPath::UltraFast } else { RunPath::Fast };
                if path == RunPath::Fast {
                    self.plan_chunk(ctx, inputs, k, chunk)?;
                }
                ctx.last = None;
                let replayed = self.pinned_chunk(ctx, k, inputs, outputs)?;
                ctx.last = Some(last);
                self.count_chunk(chunk);
                return Ok(RunInfo {
                    path,
                    mode: BindingMode::PinnedCopy,
                    batch,
                    bucket: self.main[k].bucket,
                    chunks: 1,
                    replayed,
                });
            }
        }
        self.run_host_standard(ctx, inputs, outputs)
    }

    /// Validates by name (any order), then runs each chunk; compiles per-shape programs as needed.
    fn run_host_standard<T: AsMut<[u8]>>(
        &self,
        ctx: &mut RunContext<B>,
        inputs: &[HostTensor<'_>],
        outputs: &mut [T],
    ) -> Result<RunInfo> {
        ctx.last = None;
        let ordered = self.reorder(inputs, |t| TensorShape::new(t.name, t.dtype, t.dims))?;
        let bindings = self.signature.check(&ordered)?;
        self.guard.check(&bindings, &ordered)?;
        // Every buffer is checked before the first chunk runs (or a per-shape program compiles),
        // so a short one fails the request before any work or output write.
        request::check_host_inputs(&self.signature, &ordered)?;
        request::check_host_outputs(&bindings, outputs)?;
        let batch = bindings.batch();
        if self.kind == ModelKind::PerShape {
            self.run_shape_program_host(&bindings, &ordered, outputs)?;
            return Ok(RunInfo {
                path: RunPath::Standard,
                mode: BindingMode::PinnedCopy,
                batch,
                bucket: None,
                chunks: 1,
                replayed: false,
            });
        }
        let (chunks, mut first, mut replayed) = (self.chunks(&bindings)?, None, true);
        for chunk in chunks.iter() {
            let k = self.program_for(chunk);
            first = first.or(self.main[k].bucket);
            self.plan_chunk(ctx, &ordered, k, chunk)?;
            replayed &= self.pinned_chunk(ctx, k, &ordered, outputs)?;
            self.count_chunk(chunk);
        }
        if !chunks.is_split()
            && let Some(only) = chunks.iter().next()
        {
            ctx.last =
                Some(LastRun { mode: BindingMode::PinnedCopy, batch, program: self.main[self.program_for(only)].id });
        }
        self.count_split(&chunks);
        Ok(RunInfo {
            path: RunPath::Standard,
            mode: BindingMode::PinnedCopy,
            batch,
            bucket: first,
            chunks: u32::try_from(chunks.count()).unwrap_or(u32::MAX),
            replayed,
        })
    }

    /// The request's tensors in binding order, validated by name (missing, unknown, duplicate names,
    /// wrong dtypes and ranks are typed errors).
    fn reorder<'t, T: Copy>(&self, request: &[T], shape: impl Fn(&T) -> TensorShape<'t>) -> Result<Vec<T>> {
        let shapes: Vec<TensorShape<'t>> = request.iter().map(&shape).collect();
        self.signature.bind(&shapes)?;
        let mut ordered: Vec<Option<T>> = vec![None; request.len()];
        for t in request {
            let index = self.signature.input_index(shape(t).name).expect("bind checked every name");
            ordered[index] = Some(*t);
        }
        Ok(ordered.into_iter().map(|t| t.expect("bind checked that every input is present")).collect())
    }

    /// The chunks a request runs as: one, or several when its batch exceeds the largest bucket and
    /// splitting is on. Constant memory whatever the batch.
    fn chunks(&self, bindings: &Bindings<'_>) -> Result<Chunks> {
        match (self.kind, &self.policy) {
            (ModelKind::Bucketed, Some(policy)) => {
                let batch = bindings.batch().expect("bucketed models have a batch");
                Ok(Chunks::Planned(policy.plan(batch, self.config.splitting)?))
            }
            _ => Ok(Chunks::Whole),
        }
    }

    /// Counts a request that succeeded split into several chunks.
    fn count_split(&self, chunks: &Chunks) {
        if chunks.is_split() {
            Stats::bump(&self.stats.split_requests);
        }
    }

    fn program_for(&self, chunk: Chunk) -> usize {
        match &self.policy {
            Some(policy) => policy.bucket_index_for(chunk.bucket).expect("split plans use the policy's buckets"),
            None => 0,
        }
    }

    /// The program for a per-shape model's concrete shape: from this session, else through the cache.
    fn shape_program(&self, bindings: &Bindings<'_>, dims: &[Vec<u64>]) -> Result<Arc<ShapeProgram<B, C::Program>>> {
        let key = bindings.stable_key();
        if let Some(found) = self.shape_programs.read().get(&key) {
            return Ok(found.clone());
        }
        let spec = ProgramSpec { bucket: None, input_dims: dims.to_vec() };
        let entry =
            programs::get_or_compile(&*self.compiler, &self.device, self.config.cache.as_deref(), &spec, &self.stats)?;
        let slot =
            |spec: &TensorSpec, bytes: usize| SlotSpec::new(spec.name(), bytes, spec.dtype().size_bytes().max(1));
        let inputs: Vec<SlotSpec> =
            self.signature.inputs().iter().zip(&entry.input_bytes).map(|(s, b)| slot(s, *b)).collect();
        let outputs: Vec<SlotSpec> =
            self.signature.outputs().iter().zip(&entry.output_bytes).map(|(s, b)| slot(s, *b)).collect();
        let layout = Arc::new(ArenaLayout::new(&inputs, &outputs, self.config.arena_alignment)?);
        let pool_config = PoolConfig {
            max_arenas: self.config.max_concurrency,
            when_exhausted: WhenExhausted::Wait { timeout: None },
            ..PoolConfig::default()
        };
        let program =
            Arc::new(ShapeProgram { arenas: ArenaPool::new(self.device.clone(), layout, pool_config)?, entry });
        Ok(self.shape_programs.write().entry(key).or_insert(program).clone())
    }

    /// Runs a per-shape program eagerly on its own arena (no padding: the program has the request's
    /// exact shape).
    fn run_shape_program_host<T: AsMut<[u8]>>(
        &self,
        bindings: &Bindings<'_>,
        ordered: &[HostTensor<'_>],
        outputs: &mut [T],
    ) -> Result<()> {
        let dims: Vec<Vec<u64>> = ordered.iter().map(|t| t.dims.to_vec()).collect();
        let sp = self.shape_program(bindings, &dims)?;
        let stream = self.device.create_stream()?;
        let mut arena = sp.arenas.lease()?;
        let sources: Vec<InputSource<'_>> = ordered
            .iter()
            .enumerate()
            .map(|(i, t)| Ok(InputSource::Host { data: t.data, plan: self.pad_plan(i, t.dims, Chunk::whole(1, 1))? }))
            .collect::<Result<_>>()?;
        arena.stage_inputs(&stream, &sources)?;
        let ins: Vec<DeviceSlice> = arena.input_bindings().to_vec();
        let outs: Vec<DeviceSlice> = (0..sp.entry.output_bytes.len())
            .map(|o| arena.output_slot(o).sub(0, sp.entry.output_bytes[o]))
            .collect::<std::result::Result<_, _>>()?;
        let scratch = if sp.entry.scratch_bytes > 0 { Some(self.device.alloc(sp.entry.scratch_bytes)?) } else { None };
        let scratch_slice =
            scratch.as_ref().map_or(DeviceSlice::from_raw(DevicePtr::NULL, 0), saggar_device::DeviceBuffer::as_slice);
        // SAFETY: the arena and `scratch` outlive the synchronize below.
        unsafe { sp.entry.program.launch(&stream, &ins, &outs, scratch_slice)? };
        arena.download_outputs(&stream)?;
        let plans: Vec<SlicePlan> = sp
            .entry
            .output_dims
            .iter()
            .enumerate()
            .map(|(o, d)| self.slice_plan(o, d, Chunk::whole(1, 1)))
            .collect::<Result<_>>()?;
        arena.scatter_outputs_with(outputs, |o| plans[o])?;
        stream.synchronize()?;
        Stats::bump(&self.stats.eager_runs);
        Ok(())
    }

    /// Runs a [`DeviceBinding`]'s request: its buffers were checked when set.
    pub(crate) fn run_bound(&self, ctx: &mut RunContext<B>, request: &BoundRequest) -> Result<RunInfo> {
        if let Some(route) = request.route {
            return self.run_device_single(ctx, route, &request.input_dims, &request.io);
        }
        // Split batches and per-shape models take the standard path, from the kept shapes.
        ctx.last = None;
        fn tensors<'a>(specs: &'a [TensorSpec], dims: &'a [Vec<u64>], data: &[DeviceSlice]) -> Vec<DeviceTensor<'a>> {
            specs
                .iter()
                .zip(dims)
                .zip(data)
                .map(|((spec, dims), data)| DeviceTensor { name: spec.name(), dtype: spec.dtype(), dims, data: *data })
                .collect()
        }
        let inputs = tensors(self.signature.inputs(), &request.input_dims, request.io.inputs());
        let outputs = tensors(self.signature.outputs(), &request.output_dims, request.io.outputs());
        let mut io = std::mem::take(&mut ctx.io);
        let result = self.run_device_standard(ctx, &inputs, &outputs, &mut io);
        ctx.io = io;
        result
    }

    /// Checks the caller's device buffers against the request's shapes (each large enough and aligned
    /// for its element type; each output of the shape the request implies) and records them, in
    /// binding order and trimmed to the bytes the request needs, in `io`. With `exact`, the request
    /// has exactly that program's shapes (a direct-bind route), whose sizes are known.
    fn check_device_io(
        &self,
        bindings: &Bindings<'_>,
        inputs: &[DeviceTensor<'_>],
        outputs: &[DeviceTensor<'_>],
        exact: Option<&ProgramEntry<C::Program>>,
        io: &mut DeviceIo,
    ) -> Result<()> {
        io.clear(inputs.len());
        for (i, (spec, t)) in self.signature.inputs().iter().zip(inputs).enumerate() {
            let needed = match exact {
                Some(entry) => entry.input_bytes[i],
                None => request_bytes(spec, t.dims)?,
            };
            io.push(checked_device_buffer("input", spec, needed, t.data)?);
        }
        for (o, (spec, t)) in self.signature.outputs().iter().zip(outputs).enumerate() {
            let computed;
            let (expected, needed) = match exact {
                Some(entry) => (&entry.output_dims[o][..], entry.output_bytes[o]),
                None => {
                    computed = bindings.output_shape(o)?;
                    (&computed[..], request_bytes(spec, &computed)?)
                }
            };
            if t.dims != expected || t.dtype != spec.dtype() || !same_name(t.name, spec.name()) {
                return Err(DispatchError::OutputShape {
                    output: spec.name().to_string(),
                    expected: expected.to_vec(),
                    actual: (t.name.to_string(), t.dtype, t.dims.to_vec()),
                });
            }
            io.push(checked_device_buffer("output", spec, needed, t.data)?);
        }
        Ok(())
    }

    /// The program whose shapes a request on `route` has exactly (direct bind), if any.
    fn exact_program(&self, route: Option<DeviceRoute>) -> Option<&ProgramEntry<C::Program>> {
        route.filter(|r| r.mode == BindingMode::DirectBind).map(|r| &*self.main[r.k])
    }

    /// Runs a checked single-chunk device request (`io` from [`Inner::check_device_io`]): ultra-fast
    /// when the context's last run had the same program, mode and batch, fast otherwise.
    pub(crate) fn run_device_single<T: AsRef<[u64]>>(
        &self,
        ctx: &mut RunContext<B>,
        route: DeviceRoute,
        dims: &[T],
        io: &DeviceIo,
    ) -> Result<RunInfo> {
        let DeviceRoute { k, chunk, mode, batch } = route;
        let last = LastRun { mode, batch, program: self.main[k].id };
        let path = if ctx.last == Some(last) { RunPath::UltraFast } else { RunPath::Fast };
        if path == RunPath::Fast {
            self.plan_chunk(ctx, dims, k, chunk)?;
        }
        ctx.last = None;
        let replayed = match mode {
            BindingMode::DirectBind => self.direct_chunk(ctx, k, io)?,
            _ => self.stabilized_chunk(ctx, k, io)?,
        };
        ctx.last = Some(last);
        self.count_chunk(chunk);
        Ok(RunInfo { path, mode, batch, bucket: self.main[k].bucket, chunks: 1, replayed })
    }

    /// The single program a device request in binding order runs as, if it needs no split: exact
    /// buckets are direct-bound, padded ones stabilized.
    pub(crate) fn device_route(&self, bindings: &Bindings<'_>) -> Option<DeviceRoute> {
        let Single { k, chunk } = self.single(bindings)?;
        let mode = if chunk.rows == chunk.bucket { BindingMode::DirectBind } else { BindingMode::Stabilized };
        Some(DeviceRoute { k, chunk, mode, batch: bindings.batch() })
    }

    /// Checks a device request already in binding order (`reorder`) and records its buffers in
    /// `io`: the bindings of its shapes and its route when it needs no split.
    pub(crate) fn check_device_request<'o>(
        &'o self,
        ordered: &'o [DeviceTensor<'_>],
        outputs: &[DeviceTensor<'_>],
        io: &mut DeviceIo,
    ) -> Result<(Bindings<'o>, Option<DeviceRoute>)> {
        let n_out = self.signature.outputs().len();
        if outputs.len() != n_out {
            return Err(DispatchError::OutputCount { expected: n_out, actual: outputs.len() });
        }
        let bindings = self.signature.check(ordered)?;
        self.guard.check(&bindings, ordered)?;
        let route = self.device_route(&bindings);
        self.check_device_io(&bindings, ordered, outputs, self.exact_program(route), io)?;
        Ok((bindings, route))
    }

    fn run_device(
        &self,
        ctx: &mut RunContext<B>,
        inputs: &[DeviceTensor<'_>],
        outputs: &[DeviceTensor<'_>],
    ) -> Result<RunInfo> {
        let n_out = self.signature.outputs().len();
        if outputs.len() != n_out {
            return Err(DispatchError::OutputCount { expected: n_out, actual: outputs.len() });
        }
        if self.in_binding_order(inputs, |t| (t.name, t.dtype)) {
            let bindings = self.signature.check(inputs)?;
            self.guard.check(&bindings, inputs)?;
            if let Some(route) = self.device_route(&bindings) {
                let mut io = std::mem::take(&mut ctx.io);
                let result = self
                    .check_device_io(&bindings, inputs, outputs, self.exact_program(Some(route)), &mut io)
                    .and_then(|()| self.run_device_single(ctx, route, inputs, &io));
                ctx.io = io;
                return result;
            }
        }
        ctx.last = None;
        let mut io = std::mem::take(&mut ctx.io);
        let result = self.run_device_standard(ctx, inputs, outputs, &mut io);
        ctx.io = io;
        result
    }

    /// Validates by name (any order), then runs each chunk stabilized; per-shape programs eagerly.
    pub(crate) fn run_device_standard(
        &self,
        ctx: &mut RunContext<B>,
        inputs: &[DeviceTensor<'_>],
        outputs: &[DeviceTensor<'_>],
        io: &mut DeviceIo,
    ) -> Result<RunInfo> {
        let ordered = self.reorder(inputs, |t| TensorShape::new(t.name, t.dtype, t.dims))?;
        let (bindings, _) = self.check_device_request(&ordered, outputs, io)?;
        let batch = bindings.batch();
        if self.kind == ModelKind::PerShape {
            self.run_shape_program_device(&bindings, &ordered, io, &ctx.stream)?;
            return Ok(RunInfo {
                path: RunPath::Standard,
                mode: BindingMode::DirectBind,
                batch,
                bucket: None,
                chunks: 1,
                replayed: false,
            });
        }
        let chunks = self.chunks(&bindings)?;
        let mut replayed = true;
        for chunk in chunks.iter() {
            let k = self.program_for(chunk);
            self.plan_chunk(ctx, &ordered, k, chunk)?;
            replayed &= self.stabilized_chunk(ctx, k, io)?;
            self.count_chunk(chunk);
        }
        self.count_split(&chunks);
        let bucket = chunks.iter().next().map(|c| c.bucket);
        Ok(RunInfo {
            path: RunPath::Standard,
            mode: BindingMode::Stabilized,
            batch,
            bucket,
            chunks: u32::try_from(chunks.count()).unwrap_or(u32::MAX),
            replayed,
        })
    }

    /// Direct bind: the caller's pointers (in `io`, checked) are the program's bindings. A graph bakes
    /// them; every run compares. A match replays and resets the drift count; a mismatch updates the
    /// graph in place (or re-captures it) and counts; more than `max_consecutive_drift` consecutive
    /// mismatches make the entry fall back to eager launches.
    fn direct_chunk(&self, ctx: &mut RunContext<B>, k: usize, io: &DeviceIo) -> Result<bool> {
        let entry = &self.main[k];
        let key = (entry.id, BindingMode::DirectBind);
        let tick = ctx.tick;
        // The steady state: a live graph whose baked pointers are this request's.
        if let Some(graph) = ctx.graphs.get_mut(&key)
            && let Some(exec) = &graph.exec
            && graph.baked == io.pointers
        {
            graph.drift = 0;
            graph.last_used = tick;
            // SAFETY: the graph's baked pointers are exactly this request's live, checked buffers.
            unsafe { ctx.stream.launch_graph(exec)? };
            Stats::bump(&self.stats.replays);
            return Ok(true);
        }
        let scratch = ctx.scratch_slice(entry.scratch_bytes);
        let launch = |ctx: &RunContext<B>| {
            // SAFETY: the caller's device memory stays valid until the run is waited for (the contract
            // of `run_device` and `Pending`), each buffer holds what the program reads or writes (the
            // request's batch equals the bucket), and the scratch belongs to the context.
            unsafe { entry.program.launch(&ctx.stream, io.inputs(), io.outputs(), scratch) }
        };
        if !self.config.graphs.enabled {
            launch(ctx)?;
            Stats::bump(&self.stats.eager_runs);
            return Ok(false);
        }
        let limit = self.config.graphs.max_consecutive_drift;
        let Some(graph_entry) = ctx.graphs.get_mut(&key) else {
            let graph = capture::<B>(&ctx.stream, || Ok(launch(ctx)?))?;
            let exec = self.device.instantiate(&graph)?;
            Stats::bump(&self.stats.captures);
            let bytes = graph_bytes::<B>(&graph);
            let baked = io.pointers.clone();
            ctx.insert_graph(
                key,
                GraphEntry { exec: Some(exec), mode: BindingMode::DirectBind, baked, drift: 0, last_used: tick, bytes },
                &self.stats,
            );
            return self.replay(ctx, key);
        };
        graph_entry.last_used = tick;
        if graph_entry.exec.is_none() {
            launch(ctx)?;
            Stats::bump(&self.stats.eager_runs);
            return Ok(false);
        }
        graph_entry.drift += 1;
        if graph_entry.drift > limit {
            graph_entry.exec = None;
            ctx.graph_bytes -= std::mem::take(&mut graph_entry.bytes);
            Stats::bump(&self.stats.eager_fallbacks);
            launch(ctx)?;
            Stats::bump(&self.stats.eager_runs);
            return Ok(false);
        }
        let graph = capture::<B>(&ctx.stream, || Ok(launch(ctx)?))?;
        // HIP does not promise that an update leaves a replay still running untouched (CUDA does).
        // This context's stream is the only one that replays the graph, so finishing it first makes
        // the update safe everywhere; drift is the slow path anyway.
        ctx.stream.synchronize()?;
        let graph_entry = ctx.graphs.get_mut(&key).expect("present above");
        let exec = graph_entry.exec.as_mut().expect("not fallen back");
        if self.config.graphs.try_update && exec.update(&graph).is_ok() {
            Stats::bump(&self.stats.updates);
        } else {
            *exec = self.device.instantiate(&graph)?;
            Stats::bump(&self.stats.recaptures);
        }
        graph_entry.baked.clear();
        graph_entry.baked.extend_from_slice(&io.pointers);
        self.replay(ctx, key)
    }

    fn replay(&self, ctx: &mut RunContext<B>, key: (usize, BindingMode)) -> Result<bool> {
        let entry = ctx.graphs.get(&key).expect("the caller inserted it");
        debug_assert!(replayable(entry, key.1), "graph entries are only replayed by the mode that captured them");
        let exec = entry.exec.as_ref().expect("replayable");
        // SAFETY: the graph's baked pointers were just compared with (or captured from) this request's
        // live buffers, or are the context's own arena slots.
        unsafe { ctx.stream.launch_graph(exec)? };
        Stats::bump(&self.stats.replays);
        Ok(true)
    }

    /// Stabilized: the caller's device inputs (in `io`, checked) are copied (and padded) into the
    /// arena's persistent slots, the program runs there (graph or eager), and each output's real rows
    /// are copied back.
    fn stabilized_chunk(&self, ctx: &mut RunContext<B>, k: usize, io: &DeviceIo) -> Result<bool> {
        {
            let RunContext { arena, pad_plans, stream, .. } = &mut *ctx;
            let arena = arena.as_mut().expect("main programs have arenas");
            let sources: Vec<InputSource<'_>> = io
                .inputs()
                .iter()
                .zip(pad_plans.iter())
                .map(|(data, plan)| InputSource::Device {
                    data: *data,
                    plan: *plan,
                    mode: DeviceInputMode::CopyIntoSlot,
                })
                .collect();
            arena.copy_device_inputs(stream, &sources)?;
        }
        let replayed = self.run_on_slots(ctx, k, BindingMode::Stabilized)?;
        let arena = ctx.arena.as_ref().expect("main programs have arenas");
        for (o, (plan, data)) in ctx.slice_plans.iter().zip(io.outputs()).enumerate() {
            let range = plan.dst_range();
            if !range.is_empty() {
                ctx.stream.copy_d2d(arena.output_slot(o).sub(0, range.len())?, data.sub(range.start, range.len())?)?;
            }
        }
        Ok(replayed)
    }

    fn run_shape_program_device(
        &self,
        bindings: &Bindings<'_>,
        ordered: &[DeviceTensor<'_>],
        io: &DeviceIo,
        stream: &B::Stream,
    ) -> Result<()> {
        let dims: Vec<Vec<u64>> = ordered.iter().map(|t| t.dims.to_vec()).collect();
        let sp = self.shape_program(bindings, &dims)?;
        let trim = |slices: &[DeviceSlice], bytes: &[usize]| {
            slices.iter().zip(bytes).map(|(s, b)| s.sub(0, *b)).collect::<std::result::Result<Vec<_>, _>>()
        };
        let ins = trim(io.inputs(), &sp.entry.input_bytes)?;
        let outs = trim(io.outputs(), &sp.entry.output_bytes)?;
        let scratch = if sp.entry.scratch_bytes > 0 { Some(self.device.alloc(sp.entry.scratch_bytes)?) } else { None };
        let scratch_slice =
            scratch.as_ref().map_or(DeviceSlice::from_raw(DevicePtr::NULL, 0), saggar_device::DeviceBuffer::as_slice);
        // SAFETY: the caller's buffers stay valid until the run is waited for; `scratch` until the
        // synchronize below.
        unsafe { sp.entry.program.launch(stream, &ins, &outs, scratch_slice)? };
        stream.synchronize()?;
        Stats::bump(&self.stats.eager_runs);
        Ok(())
    }
}
