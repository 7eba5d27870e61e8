//! The session: one model on one device, serving requests of any batch size from precompiled
//! buckets. This module holds the session's state and what every run path shares (leasing a run
//! context, counting, [`Pending`] work); `build.rs` creates a session, and the paths themselves are
//! in `path_host.rs`, `path_device.rs` and `binding.rs`.

mod build;

use std::sync::Arc;
use std::time::Instant;

use saggar_arena::{ArenaPool, GatherStats, Lease, Pool};
use saggar_device::{Backend, Device, Stream};
use saggar_shape::Signature;

use crate::compiler::ProgramCompiler;
use crate::context::RunContext;
use crate::error::{DispatchError, Result};
use crate::graphs::GraphMemory;
use crate::per_shape::ShapeTable;
use crate::plan::Model;
use crate::programs::ProgramEntry;
use crate::request::RequestGuard;
use crate::slab::Slab;
use crate::stats::{Stats, StatsSnapshot};
use crate::tensors::{HostTensor, RunInfo};

pub(crate) struct Inner<B: Backend, C: ProgramCompiler<B>> {
    pub(crate) device: B::Device,
    pub(crate) compiler: Arc<C>,
    pub(crate) config: crate::config::SessionConfig,
    pub(crate) signature: Signature,
    pub(crate) model: Model,
    /// Main programs: every grid cell's (in the first table's order, then those live re-bucketing
    /// added), or the one static program; empty for per-shape models. Indexed by the bucket table.
    pub(crate) main: Slab<Arc<ProgramEntry<C::Program>>>,
    /// Per main program: bytes of the staging span and of the output span it uses.
    pub(crate) upload_span: Slab<usize>,
    pub(crate) download_span: Slab<usize>,
    /// Arena layouts made at creation, one per main program then (programs added later by live
    /// re-bucketing run on `largest_layout`, whose slots every grid cell fits).
    pub(crate) layouts: usize,
    pub(crate) largest_layout: usize,
    /// A per-shape model's programs; empty for other models.
    pub(crate) shape_programs: ShapeTable<B, C::Program>,
    pub(crate) contexts: Pool<RunContext<B>>,
    /// The pool the contexts' arenas come from, for its gather counters.
    pub(crate) gather: ArenaPool<B>,
    /// The request limits, checked before anything is allocated or planned for a request.
    pub(crate) guard: RequestGuard,
    pub(crate) stats: Arc<Stats>,
    /// The session's graph-memory budget and its contexts' graph caches.
    pub(crate) graph_memory: Arc<GraphMemory<B>>,
    /// saggar-device's built-in kernels compiled for the device, for the arena pools of programs
    /// made later (per shape); `None` with kernel copies off.
    pub(crate) builtins: Option<saggar_device::CodeObject>,
    /// A segmented model's sessions, one per segment (`segments.rs`); `None` for other models.
    pub(crate) chain: Option<crate::segments::Chain<B, C>>,
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

impl<B: Backend, C: ProgramCompiler<B>> Session<B, C> {
    /// The device.
    pub fn device(&self) -> &B::Device {
        &self.inner.device
    }

    /// The batch buckets served now (empty for models served per shape or without a batch).
    pub fn buckets(&self) -> Vec<u64> {
        match &self.inner.model {
            Model::Bucketed(grid) => grid.table.load().batch.buckets().to_vec(),
            Model::Static | Model::PerShape => Vec::new(),
        }
    }

    /// The buckets of the padded axis served now (empty without one; see
    /// [`crate::PaddedAxis`]).
    pub fn axis_buckets(&self) -> Vec<u64> {
        match &self.inner.model {
            Model::Bucketed(grid) => grid.table.load().axis.as_ref().map_or_else(Vec::new, |p| p.buckets().to_vec()),
            Model::Static | Model::PerShape => Vec::new(),
        }
    }

    /// The model's signature (inputs and outputs in binding order).
    pub fn signature(&self) -> &Signature {
        &self.inner.signature
    }

    /// The counters.
    pub fn stats(&self) -> StatsSnapshot {
        let mut stats = self.inner.stats.snapshot();
        if let Some(chain) = &self.inner.chain {
            chain.add_stats(&mut stats);
        }
        stats
    }

    /// How the host side of this session's gathers ran ([`Session::run`], [`Session::run_into`]):
    /// split across helpers, alone because the helpers were busy or parked, and the CPU time the
    /// helpers spent spinning. The helpers and these counters are shared by every session of the
    /// process with the same gather options.
    pub fn gather_stats(&self) -> GatherStats {
        self.inner.gather.gather_stats()
    }

    /// Output dimensions (binding order) for a request with these input shapes (any order; the
    /// tensors' `data` is not read). The request is checked as a run checks it first (names,
    /// dtypes, ranks, extents and the session's [`crate::RequestLimits`]), so a caller can size its
    /// output buffers before allocating anything for a request it does not trust.
    pub fn output_dims(&self, inputs: &[HostTensor<'_>]) -> Result<Vec<Vec<u64>>> {
        let inner = &*self.inner;
        inner.refuse_chain()?;
        let request = crate::request::check(&inner.signature, &inner.guard, inputs)?;
        (0..inner.signature.outputs().len()).map(|o| Ok(request.bindings.output_shape(o)?.to_vec())).collect()
    }

    /// Whether requests of this model run as a chain of segments ([`crate::Segments`]), whose
    /// output extents are known only once they have run.
    pub fn is_segmented(&self) -> bool {
        self.inner.chain.is_some()
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

impl<B: Backend, C: ProgramCompiler<B>> Inner<B, C> {
    /// The arena layout main program `k` runs on.
    pub(crate) fn layout_of(&self, k: usize) -> usize {
        if k < self.layouts { k } else { self.largest_layout }
    }

    /// Runs `f` with a leased, pinned run context; counts the request, its latency and its failure
    /// (the caller counts its path once it is known to have succeeded). Returns the lease too when
    /// the run succeeded (for work left pending on its stream).
    pub(crate) fn instrumented<R>(
        &self,
        f: impl FnOnce(&Self, &mut RunContext<B>) -> Result<R>,
    ) -> (Result<R>, Option<Lease<RunContext<B>>>) {
        let mut lease = None;
        let result = self.counted(|| {
            let _pin = self.device.pin()?;
            let ctx = lease.insert(self.contexts.lease()?);
            self.run_on(ctx, f)
        });
        match result {
            Ok(r) => (Ok(r), lease),
            Err(e) => (Err(e), None),
        }
    }

    /// [`DispatchError::ExtentsDependOnValues`] for a segmented model: for the calls that need output
    /// extents before running.
    pub(crate) fn refuse_chain(&self) -> Result<()> {
        match &self.chain {
            Some(chain) => Err(DispatchError::ExtentsDependOnValues {
                model: self.compiler.model().name.clone(),
                segments: chain.len(),
            }),
            None => Ok(()),
        }
    }

    /// Runs `attempt` as one request: counts it, its latency and its failure (the caller counts
    /// its path once it is known to have succeeded).
    pub(crate) fn counted<R>(&self, attempt: impl FnOnce() -> Result<R>) -> Result<R> {
        let started = Instant::now();
        Stats::bump(&self.stats.requests);
        let result = attempt();
        if let Err(e) = &result {
            self.stats.record_failure(e);
        }
        self.stats.record_latency(started.elapsed());
        result
    }

    /// Drops the context's graphs of programs the current bucket table no longer routes to, once per
    /// table swap (live re-bucketing only; one atomic load per run otherwise).
    fn retire_graphs(&self, slots: &mut crate::context::Slots<B>) {
        if let Model::Bucketed(grid) = &self.model
            && grid.live.is_some()
        {
            let table = grid.table.load();
            if slots.epoch != table.epoch {
                let retired = slots.graphs.retain_programs(|id| table.routes(id));
                Stats::add(&self.stats.retired_graphs, retired as u64);
                slots.epoch = table.epoch;
            }
        }
    }

    /// Runs `f` on a leased run context (the device pinned by the caller). A failed run leaves
    /// nothing half-done on the context's stream.
    pub(crate) fn run_on<R>(
        &self,
        ctx: &mut RunContext<B>,
        f: impl FnOnce(&Self, &mut RunContext<B>) -> Result<R>,
    ) -> Result<R> {
        if let Some(slots) = &mut ctx.slots {
            // The session's request count orders graph use across contexts (least recently used
            // out) at the cost of one relaxed load of a counter `counted` already bumped.
            slots.graphs.tick = self.stats.requests.load(std::sync::atomic::Ordering::Relaxed);
            self.retire_graphs(slots);
        }
        match f(self, ctx) {
            Ok(r) => Ok(r),
            Err(e) => {
                // Leave nothing half-done on the stream for the next request, and never take the
                // ultra-fast path from a failed run. A failing synchronize is reported with the
                // run's error, not dropped, unless it only repeats that the device is lost.
                ctx.last = None;
                match ctx.stream.synchronize() {
                    Ok(()) => Err(e),
                    Err(synchronize) if e.is_device_lost() && synchronize.is_device_lost() => Err(e),
                    Err(synchronize) => Err(DispatchError::AfterFailedRun { error: Box::new(e), synchronize }),
                }
            }
        }
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
