//! Creating a session: the model's kind, its buckets, every main program precompiled, the arena
//! layout they share, and the pool of run contexts.

use std::sync::Arc;

use saggar_arena::{ArenaLayout, ArenaPool, Pool, PoolConfig, SlotSpec, WhenExhausted};
use saggar_device::{Backend, Device};
use saggar_shape::{Signature, TensorSpec};

use super::{Inner, Session};
use crate::compiler::ProgramCompiler;
use crate::config::{CaptureWhen, SessionConfig};
use crate::context::{DeviceIo, RunContext, Slots};
use crate::error::Result;
use crate::graphs::GraphMemory;
use crate::per_shape::ShapeTable;
use crate::plan::Model;
use crate::programs::{self, ProgramEntry, ProgramSpec, Progress, Threads, slot};
use crate::request::RequestGuard;
use crate::stats::Stats;
use crate::tensors::BindingMode;

/// The concrete dimensions of an input of a bucketed or static model at `batch`.
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

/// One arena slot per tensor of `specs`, each as large as the most any main program binds to it
/// (`bytes` of a program and a tensor index).
fn largest_slots<P>(
    specs: &[TensorSpec],
    main: &[Arc<ProgramEntry<P>>],
    bytes: impl Fn(&ProgramEntry<P>, usize) -> usize,
) -> Vec<SlotSpec> {
    specs.iter().enumerate().map(|(i, s)| slot(s, main.iter().map(|e| bytes(e, i)).max().unwrap_or(0))).collect()
}

/// How a session serves a model of `signature`: from buckets when the batch is its only dynamic
/// dimension, one program when it has none, a program per shape otherwise.
fn model_of(signature: &Signature, config: &SessionConfig) -> Result<Model> {
    let layout = signature.batch_layout();
    Ok(if signature.is_static() {
        Model::Static
    } else if layout.batch_is_only_dynamic_dim() && layout.symbol().is_some() {
        Model::Bucketed(config.buckets.policy()?)
    } else {
        Model::PerShape
    })
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
        let model = model_of(&signature, &config)?;
        let batch_symbol = signature.batch_layout().symbol().map(str::to_string);
        let spec_at = |bucket: Option<u64>, symbol: Option<&str>| ProgramSpec {
            bucket,
            input_dims: model_spec.inputs.iter().map(|s| concrete_dims(s, symbol, bucket.unwrap_or(0))).collect(),
        };
        let specs: Vec<ProgramSpec> = match &model {
            Model::Bucketed(policy) => {
                policy.buckets().iter().map(|&b| spec_at(Some(b), batch_symbol.as_deref())).collect()
            }
            Model::Static => vec![spec_at(None, None)],
            Model::PerShape => Vec::new(),
        };
        let stats = Arc::new(Stats::default());
        let cache = config.cache.clone();
        let threads = Threads { load: config.load_threads, compile: config.compile_threads };
        let main = programs::precompile(&*compiler, &device, cache.as_deref(), &specs, threads, &stats, progress)?;

        // One arena layout serves every main program: each slot sized for the largest bucket.
        let input_slots = largest_slots(&model_spec.inputs, &main, |e, i| e.input_bytes[i]);
        let output_slots = largest_slots(&model_spec.outputs, &main, |e, o| e.output_bytes[o]);
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
        // Main programs run on every context's slots; a per-shape model has none, so its contexts
        // have no slots.
        let has_main = !main.is_empty();
        let gather = arenas.clone();
        let graph_memory = Arc::new(GraphMemory::new(config.graphs.memory_budget_bytes, stats.clone()));
        let ctx_graphs = graph_memory.clone();
        let ctx_device = device.clone();
        let ctx_stats = stats.clone();
        let contexts = Pool::new(config.max_concurrency, wait, move || {
            let _pin = ctx_device.pin()?;
            let stream = ctx_device.create_stream()?;
            let slots = if has_main {
                let arena = arenas.lease()?;
                let scratch = if max_scratch > 0 { Some(ctx_device.alloc(max_scratch)?) } else { None };
                Some(Slots::new(arena, scratch, ctx_graphs.new_cache()))
            } else {
                None
            };
            Ok(RunContext { stream, last: None, io: DeviceIo::default(), stats: ctx_stats.clone(), slots })
        })?;
        contexts.prewarm(config.prewarm_contexts)?;
        let guard = RequestGuard::new(&signature, config.request_limits);
        let shape_programs = ShapeTable::new(config.max_shape_programs);
        let session = Session {
            inner: Arc::new(Inner {
                device,
                compiler,
                config,
                signature,
                model,
                main,
                upload_span,
                download_span,
                shape_programs,
                contexts,
                gather,
                guard,
                stats,
                graph_memory,
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
            let RunContext { stream, slots, .. } = &mut *ctx;
            if let Some(slots) = slots {
                for k in 0..inner.main.len() {
                    inner.capture_on_slots(stream, slots, k, BindingMode::PinnedCopy, |_| Ok(true))?;
                }
            }
        }
        Ok(())
    }
}
