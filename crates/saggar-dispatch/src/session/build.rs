//! Creating a session: the model's kind, its buckets, every main program precompiled, the arena
//! layout they share, and the pool of run contexts.

use std::sync::Arc;

use arc_swap::ArcSwap;
use saggar_arena::{ArenaLayout, ArenaOptions, ArenaPool, Pool, PoolConfig, SlotSpec, WhenExhausted};
use saggar_device::{Backend, CodeObject, Device};
use saggar_shape::{BucketPolicy, Signature, TensorSpec};

use super::{Inner, Session};
use crate::buckets::{AxisLayout, BucketTable, Grid, Live, cell_spec, concrete_dims, grid_serves};
use crate::compiler::{ModelSpec, ProgramCompiler};
use crate::config::{CaptureWhen, SessionConfig};
use crate::context::{DeviceIo, RunContext, Slots};
use crate::error::{DispatchError, Result};
use crate::graphs::GraphMemory;
use crate::path_padded::PaddedIo;
use crate::per_shape::ShapeTable;
use crate::plan::Model;
use crate::programs::{self, ProgramEntry, ProgramSpec, Progress, Threads, slot};
use crate::refit;
use crate::request::RequestGuard;
use crate::slab::Slab;
use crate::stats::Stats;
use crate::tensors::BindingMode;

/// One arena slot per tensor of `specs`, of `bytes[i]` bytes (what one main program binds to each;
/// zero for a model without main programs).
fn program_slots(specs: &[TensorSpec], bytes: Option<&[usize]>) -> Vec<SlotSpec> {
    specs.iter().enumerate().map(|(i, s)| slot(s, bytes.map_or(0, |b| b[i]))).collect()
}

/// A session's main programs, as precompiled.
type MainPrograms<P> = Vec<Arc<ProgramEntry<P>>>;

/// A grid cell: a batch bucket and the padded axis's bucket, if the model has a padded axis.
type Cell = (u64, Option<u64>);

/// How a session serves a model, before its programs exist.
#[allow(clippy::large_enum_variant, reason = "built once per session and consumed at once")]
enum Kind {
    Static,
    PerShape,
    Grid { batch: BucketPolicy, axis: Option<(BucketPolicy, AxisLayout)> },
}

/// How a session serves a model of `signature`: from a grid of buckets when the batch is its only
/// dynamic dimension (or the other is the declared padded axis), one program when it has none, a
/// program per shape otherwise.
fn kind_of(signature: &Signature, config: &SessionConfig, per_shape: bool) -> Result<Kind> {
    let layout = signature.batch_layout();
    if per_shape {
        // Programs depend on input values (one per shape and values), or the model asks for it.
        return Ok(Kind::PerShape);
    }
    if signature.is_static() {
        return Ok(Kind::Static);
    }
    if layout.symbol().is_none() {
        return Ok(Kind::PerShape);
    }
    match &config.padded_axis {
        Some(axis) if signature.symbols().any(|s| s == axis.symbol) => {
            let axis_layout = AxisLayout::new(signature, axis)?;
            if !grid_serves(signature, &axis.symbol) {
                return Ok(Kind::PerShape);
            }
            Ok(Kind::Grid { batch: config.buckets.policy()?, axis: Some((axis.buckets.policy()?, axis_layout)) })
        }
        Some(axis) => Err(DispatchError::Config(format!(
            "the padded axis `{}` is not a symbolic dimension of any input of the model",
            axis.symbol
        ))),
        None if layout.batch_is_only_dynamic_dim() => Ok(Kind::Grid { batch: config.buckets.policy()?, axis: None }),
        None => Ok(Kind::PerShape),
    }
}

/// The arena layouts of a session's main programs, and what each program's one upload and one
/// download span in them.
struct ArenaPlan {
    /// One layout per main program (one for a model without main programs).
    layouts: Vec<Arc<ArenaLayout>>,
    upload_span: Vec<usize>,
    download_span: Vec<usize>,
    /// The layout with the largest slots.
    largest: usize,
    /// The most scratch memory any main program needs.
    max_scratch: usize,
}

impl ArenaPlan {
    /// One arena layout per main program, packed for that program's sizes, all in the same memory
    /// (sized for the largest): a bucket's one copy sends its own bytes, not a span laid out for the
    /// largest bucket (a batch-1 request of 190 small inputs with buckets up to 64 would otherwise
    /// send 64 times its bytes).
    fn new<P>(model: &ModelSpec, main: &[Arc<ProgramEntry<P>>], alignment: usize) -> Result<ArenaPlan> {
        let layout_for = |entry: Option<&ProgramEntry<P>>| -> Result<Arc<ArenaLayout>> {
            let inputs = program_slots(&model.inputs, entry.map(|e| &e.input_bytes[..]));
            let outputs = program_slots(&model.outputs, entry.map(|e| &e.output_bytes[..]));
            Ok(Arc::new(ArenaLayout::new(&inputs, &outputs, alignment)?))
        };
        let layouts = if main.is_empty() {
            vec![layout_for(None)?]
        } else {
            main.iter().map(|e| layout_for(Some(e))).collect::<Result<_>>()?
        };
        let span = |slots: &[saggar_arena::Slot], bytes: &[usize]| {
            slots.iter().zip(bytes).map(|(s, b)| s.offset + b).max().unwrap_or(0)
        };
        let upload_span = main.iter().zip(&layouts).map(|(e, l)| span(l.inputs(), &e.input_bytes)).collect();
        let download_span = main.iter().zip(&layouts).map(|(e, l)| span(l.outputs(), &e.output_bytes)).collect();
        // Every grid cell fits the layout with the largest slots, so programs added later (by live
        // re-bucketing) run on it.
        let largest = (0..layouts.len())
            .max_by_key(|&i| layouts[i].inputs().iter().chain(layouts[i].outputs()).map(|s| s.capacity).sum::<usize>())
            .unwrap_or(0);
        let max_scratch = main.iter().map(|e| e.scratch_bytes).max().unwrap_or(0);
        Ok(ArenaPlan { layouts, upload_span, download_span, largest, max_scratch })
    }
}

/// The grid cells of a bucketed model (empty for other kinds), and the program spec of each main
/// program: one per cell, or the one program of a static model.
fn program_specs(
    kind: &Kind,
    model: &ModelSpec,
    signature: &Signature,
    config: &SessionConfig,
) -> (Vec<Cell>, Vec<ProgramSpec>) {
    let layout = signature.batch_layout();
    let batch_symbol = layout.symbol();
    let axis_symbol = config.padded_axis.as_ref().map(|a| a.symbol.as_str());
    match kind {
        Kind::Grid { batch, axis } => {
            let cells = BucketTable::cells(batch, axis.as_ref().map(|(p, _)| p));
            let specs = cells.iter().map(|&cell| cell_spec(&model.inputs, batch_symbol, axis_symbol, cell)).collect();
            (cells, specs)
        }
        Kind::Static => {
            let input_dims = model.inputs.iter().map(|s| concrete_dims(s, &[])).collect();
            (Vec::new(), vec![ProgramSpec::new(None, input_dims)])
        }
        Kind::PerShape => (Vec::new(), Vec::new()),
    }
}

/// Precompiles the main programs through the cache and, beside them, the built-in kernels (the
/// arenas' copy kernel) when kernel copies are on.
fn precompile_all<B: Backend, C: ProgramCompiler<B>>(
    compiler: &C,
    device: &B::Device,
    config: &SessionConfig,
    specs: &[ProgramSpec],
    stats: &Stats,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<(MainPrograms<C::Program>, Option<CodeObject>)> {
    let cache = config.cache.as_deref();
    let threads = Threads { load: config.load_threads, compile: config.compile_threads };
    let (main, builtins) = std::thread::scope(|scope| {
        let builtins =
            (config.kernel_copies_up_to > 0).then(|| scope.spawn(|| programs::builtin_code::<B>(device, cache)));
        let main = programs::precompile(compiler, device, cache, specs, threads, stats, progress);
        (main, builtins.and_then(|b| b.join().ok().flatten()))
    });
    Ok((main?, builtins))
}

/// How the session serves its model, with the bucket table of a grid's main programs (and live
/// re-bucketing's state, when on).
fn model_of<P>(
    kind: Kind,
    cells: &[Cell],
    main: &[Arc<ProgramEntry<P>>],
    arena: &ArenaPlan,
    config: &SessionConfig,
) -> Model {
    match kind {
        Kind::Static => Model::Static,
        Kind::PerShape => Model::PerShape,
        Kind::Grid { batch, axis } => {
            let (axis_policy, axis_layout) = axis.map_or((None, None), |(p, l)| (Some(p), Some(l)));
            let table =
                BucketTable::new(batch, axis_policy, (0..main.len()).collect(), main.iter().map(|e| e.id).collect(), 0);
            let live = config.live.map(|live| {
                let known = cells.iter().copied().zip(0..).collect();
                Live::new(live, &table, known, arena.layouts[arena.largest].clone(), arena.max_scratch)
            });
            Model::Bucketed(Box::new(Grid { table: ArcSwap::from_pointee(table), axis: axis_layout, live }))
        }
    }
}

/// The pool of run contexts: each with its stream and, for a model with main programs, its slots (an
/// arena from `arenas`, scratch memory, a graph cache); a per-shape model's contexts have no slots.
fn run_contexts<B: Backend>(
    device: &B::Device,
    arenas: ArenaPool<B>,
    config: &SessionConfig,
    has_main: bool,
    max_scratch: usize,
    graph_memory: &Arc<GraphMemory<B>>,
    stats: &Arc<Stats>,
) -> Result<Pool<RunContext<B>>> {
    let (device, graphs, stats) = (device.clone(), graph_memory.clone(), stats.clone());
    let contexts = Pool::new(config.max_concurrency, WhenExhausted::Wait { timeout: None }, move || {
        let _pin = device.pin()?;
        let stream = device.create_stream()?;
        let slots = if has_main {
            let arena = arenas.lease()?;
            let scratch = if max_scratch > 0 { Some(device.alloc(max_scratch)?) } else { None };
            Some(Slots::new(arena, scratch, graphs.new_cache()))
        } else {
            None
        };
        Ok(RunContext {
            stream,
            last: None,
            io: DeviceIo::default(),
            stats: stats.clone(),
            slots,
            padded: PaddedIo::default(),
        })
    })?;
    contexts.prewarm(config.prewarm_contexts)?;
    Ok(contexts)
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
        let model_spec = compiler.model().clone();
        let signature = Signature::new(model_spec.inputs.clone(), model_spec.outputs.clone())?;
        let segments = compiler.segments();
        // A segmented model runs on its segments' sessions; it has no programs of its own.
        let kind = match segments {
            Some(_) => Kind::PerShape,
            None => kind_of(&signature, &config, !model_spec.value_inputs.is_empty() || model_spec.per_shape)?,
        };
        let (cells, specs) = program_specs(&kind, &model_spec, &signature, &config);
        let stats = Arc::new(Stats::default());
        let (main, builtins) = precompile_all(&*compiler, &device, &config, &specs, &stats, progress)?;
        let arena = ArenaPlan::new(&model_spec, &main, config.arena_alignment)?;
        let capacity = main.len() + config.live.map_or(0, |l| l.max_programs.saturating_sub(main.len()));
        let model = model_of(kind, &cells, &main, &arena, &config);
        let ArenaPlan { layouts, upload_span, download_span, largest, max_scratch } = arena;
        let layout_count = layouts.len();
        let main = Slab::from_vec(main, capacity);
        let arenas = ArenaPool::<B>::with_builtins(
            device.clone(),
            layouts,
            PoolConfig {
                max_arenas: config.max_concurrency,
                when_exhausted: WhenExhausted::Wait { timeout: None },
                arena: ArenaOptions::default()
                    .with_gather(config.gather)
                    .with_kernel_copies_up_to(config.kernel_copies_up_to),
            },
            builtins.clone(),
        )?;
        let gather = arenas.clone();
        let graph_memory = Arc::new(GraphMemory::new(config.graphs.memory_budget_bytes, stats.clone()));
        let contexts = run_contexts(&device, arenas, &config, !main.is_empty(), max_scratch, &graph_memory, &stats)?;
        let chain = segments
            .map(|s| crate::segments::Chain::new(&device, s, signature.inputs().len(), &config, progress))
            .transpose()?;
        let session = Session {
            inner: Arc::new(Inner {
                guard: RequestGuard::new(&signature, config.request_limits),
                shape_programs: ShapeTable::new(config.max_shape_programs),
                device,
                compiler,
                config,
                signature,
                model,
                main,
                upload_span: Slab::from_vec(upload_span, capacity),
                download_span: Slab::from_vec(download_span, capacity),
                layouts: layout_count,
                largest_layout: largest,
                contexts,
                gather,
                stats,
                graph_memory,
                builtins,
                chain,
            }),
        };
        if session.inner.config.graphs.enabled && session.inner.config.graphs.capture == CaptureWhen::Eager {
            session.capture_all_eagerly()?;
        }
        refit::spawn(&session.inner)?;
        Ok(session)
    }

    /// Captures a pinned-copy graph of every main program in every prewarmed context.
    fn capture_all_eagerly(&self) -> Result<()> {
        let inner = &*self.inner;
        let leases: Vec<_> =
            (0..inner.contexts.created()).map(|_| inner.contexts.lease()).collect::<std::result::Result<_, _>>()?;
        for mut ctx in leases {
            let RunContext { stream, slots, .. } = &mut *ctx;
            if let Some(slots) = slots {
                for k in 0..inner.main.len() {
                    // Each program's graph is captured against its own layout's slots.
                    slots.arena.use_layout(inner.layout_of(k))?;
                    inner.capture_on_slots(stream, slots, k, BindingMode::PinnedCopy, |_| Ok(true))?;
                }
            }
        }
        Ok(())
    }
}
