//! Captured and executable graphs of a GPU backend.
//!
//! - A [`Graph`] is the graph a capture returned, with its node count (read once at the end of the
//!   capture) and what the driver keeps of it ([`Driver::GraphData`]). Destroyed when it and every
//!   executable graph made from it are gone.
//! - A [`GraphExec`] is its instantiation; a replay is one graph launch; [`api::GraphExec::destroy`]
//!   destroys it, after which launches fail with [`Error::GraphDestroyed`] without reaching the driver.
//!   An update refuses a node-count change before the driver sees it and otherwise is the driver's
//!   ([`Driver::update_exec`]); when the driver reports that it failed part way (HIP's update is not
//!   atomic), the executable graph is instantiated again from the graph whose parameters it held
//!   before, so a refused update really leaves it unchanged. Only if that fails too is the executable
//!   graph destroyed.
//! - **Empty graphs.** A capture of no work gives a graph of zero nodes, which is valid. saggar neither
//!   rejects nor pads it: it does not instantiate it at all. Its executable graph is a marker whose
//!   replay enqueues nothing, which is exactly what replaying an empty graph means, and which does not
//!   depend on how a driver release treats empty graphs.

use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::api;
use crate::error::{Error, Result};
use crate::gpu::GpuBackend;
use crate::gpu::device::{self, DeviceShared, SendHandle};
use crate::gpu::driver::{Driver, UpdateFailure};
use crate::gpu::launch::CapturedOp;
use crate::gpu::module::ModuleShared;
use crate::rules;

/// A captured graph definition, shared by the [`Graph`] that owns it and by every executable graph that
/// may need it again (to update node by node, or to instantiate it again after a failed update).
pub struct GraphInner<D: Driver> {
    device: Arc<DeviceShared<D>>,
    /// `None` for a capture of no work that the driver returned no graph for.
    pub(crate) raw: Option<D::Graph>,
    /// Serialises every driver call that reads `raw` (see [`Graph`]'s thread-safety section).
    pub(crate) lock: Mutex<()>,
    pub(crate) nodes: usize,
    /// What the driver keeps of the graph.
    pub(crate) data: D::GraphData,
    /// Modules whose kernels the graph launches; its executable graphs keep them loaded.
    modules: Vec<Arc<ModuleShared<D>>>,
}

// SAFETY: `raw` is an opaque handle the vendors accept from any thread; every driver call that reads the
// graph takes `lock`, which satisfies the rule that graph objects be accessed by one thread at a time.
// `data` is `Send + Sync` by the trait's bound; the rest is immutable.
unsafe impl<D: Driver> Send for GraphInner<D> {}
// SAFETY: as above.
unsafe impl<D: Driver> Sync for GraphInner<D> {}

impl<D: Driver> Drop for GraphInner<D> {
    fn drop(&mut self) {
        if let Some(raw) = self.raw {
            let raw = SendHandle::new(raw);
            device::release(&self.device, "graph.drop", move || {
                // SAFETY: `drop` runs once, so `raw` is destroyed once; this is its last user (executable
                // graphs that hold this value are gone too, and the driver's own are independent of it).
                unsafe { D::graph_destroy("graph.drop", raw.into_inner()) }
            });
        }
    }
}

impl<D: Driver> std::fmt::Debug for GraphInner<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphInner").field("device", &self.device.ordinal()).field("nodes", &self.nodes).finish()
    }
}

impl<D: Driver> GraphInner<D> {
    /// Instantiates this graph (not for an empty one).
    fn instantiate(&self, op: &'static str) -> Result<D::GraphExec> {
        let raw = self.raw.expect("only graphs with nodes are instantiated");
        let _serialised = self.lock.lock();
        // SAFETY: `raw` is live while `self` is, and the lock keeps other threads off it.
        unsafe { D::graph_instantiate(op, raw) }
    }
}

/// A captured graph of a GPU backend, destroyed when it and every executable graph instantiated from it
/// are gone.
///
/// # Thread safety
/// `Send + Sync`. CUDA: "Graph objects (cudaGraph_t, CUgraph) are not internally synchronized and must
/// not be accessed concurrently from multiple threads. API calls accessing the same graph object must be
/// serialized externally. Note that this includes APIs which may appear to be read-only, such as
/// cudaGraphClone() (cuGraphClone()) and cudaGraphInstantiate() (cuGraphInstantiate())." HIP documents
/// no rule of its own and follows CUDA's. A graph is shared with the executable graphs made from it, so
/// saggar serialises every call that reads it with a lock of its own.
pub struct Graph<D: Driver> {
    inner: Arc<GraphInner<D>>,
}

impl<D: Driver> std::fmt::Debug for Graph<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph").field("device", &self.ordinal()).field("nodes", &self.inner.nodes).finish()
    }
}

impl<D: Driver> Graph<D> {
    /// Takes ownership of a graph a capture returned (`None`: no graph for a capture of no work) and
    /// reads it; destroys it if that fails.
    pub(crate) fn from_capture(
        device: Arc<DeviceShared<D>>,
        raw: Option<D::Graph>,
        modules: Vec<Arc<ModuleShared<D>>>,
        ops: Vec<CapturedOp>,
    ) -> Result<Graph<D>> {
        let op = "stream.end_capture";
        let mut inner =
            GraphInner { device, raw, lock: Mutex::new(()), nodes: 0, data: D::empty_graph_data(), modules };
        match raw {
            Some(raw) => {
                // SAFETY: `raw` was just returned by the driver and is owned by `inner` alone; on error
                // `inner` drops and destroys it.
                (inner.nodes, inner.data) = unsafe { D::read_graph(op, raw, ops) }?;
            }
            None if !ops.is_empty() => {
                return Err(Error::CaptureInvalidated {
                    reason: format!("the driver returned no graph for a capture of {} operations", ops.len()),
                });
            }
            None => {}
        }
        Ok(Graph { inner: Arc::new(inner) })
    }

    /// The raw driver handle (`None` for an empty capture the driver returned no graph for), for interop
    /// and benchmarks. saggar keeps ownership: do not destroy it, and do not use it while saggar may.
    pub fn raw_handle(&self) -> Option<D::Graph> {
        self.inner.raw
    }

    #[inline]
    pub(crate) fn ordinal(&self) -> usize {
        self.inner.device.ordinal()
    }
}

impl<D: Driver> api::Graph for Graph<D> {
    fn node_count(&self) -> usize {
        self.inner.nodes
    }
}

enum ExecState<E> {
    /// An instantiated graph.
    Live(E),
    /// The executable form of a graph of zero nodes: replays enqueue nothing.
    Empty,
    /// Destroyed by [`api::GraphExec::destroy`].
    Destroyed,
}

/// An executable graph of a GPU backend, destroyed on drop.
///
/// # Thread safety
/// `Send + Sync`: a replay may be enqueued from any thread. CUDA (`cuGraphLaunch`), which HIP follows:
/// "Only one instance of hGraphExec may be executing at a time. Each launch is ordered behind both any
/// previous work in hStream and any previous launches of hGraphExec." Executable graphs fall under the
/// rule that graph objects are not internally synchronised, so saggar serialises the launch calls of
/// one executable graph with a lock of its own (uncontended: a few nanoseconds);
/// [`api::GraphExec::update`] and [`api::GraphExec::destroy`] take `&mut self` and so cannot race a
/// launch.
pub struct GraphExec<D: Driver> {
    device: Arc<DeviceShared<D>>,
    state: ExecState<D::GraphExec>,
    /// The graph this executable graph was instantiated from: node-by-node updates name its nodes.
    source: Option<Arc<GraphInner<D>>>,
    /// The graph whose parameters this executable graph currently holds (the source, or the graph of
    /// the last update): what a failed update restores.
    applied: Option<Arc<GraphInner<D>>>,
    nodes: usize,
    /// Device memory taken by the instantiation, as the driver's free-memory figure showed it.
    memory_bytes: u64,
    modules: Vec<Arc<ModuleShared<D>>>,
    launch_lock: Mutex<()>,
}

// SAFETY: the executable graph is owned by this value; shared use is limited to the graph launch, which
// `launch_lock` serialises (see the type's docs); mutation needs `&mut self`. The graph definitions it
// holds are `Send + Sync` on their own.
unsafe impl<D: Driver> Send for GraphExec<D> {}
// SAFETY: as above.
unsafe impl<D: Driver> Sync for GraphExec<D> {}

impl<D: Driver> std::fmt::Debug for GraphExec<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            ExecState::Live(_) => "live",
            ExecState::Empty => "empty",
            ExecState::Destroyed => "destroyed",
        };
        f.debug_struct("GraphExec")
            .field("device", &self.ordinal())
            .field("nodes", &self.nodes)
            .field("state", &state)
            .finish()
    }
}

impl<D: Driver> GraphExec<D> {
    /// Instantiates `graph`; the device is current (the caller entered it).
    pub(crate) fn instantiate(device: Arc<DeviceShared<D>>, graph: &Graph<D>) -> Result<GraphExec<D>> {
        let op = "device.instantiate";
        rules::check_same_device(op, device.ordinal(), graph.ordinal())?;
        let inner = &graph.inner;
        let (state, memory_bytes) = if inner.nodes == 0 {
            (ExecState::Empty, 0)
        } else {
            // The driver reports no per-graph figure for an executable graph's own memory; the drop in
            // free device memory across the instantiation is its account of what it took.
            let before = D::memory_info(op).map(|(free, _)| free);
            let raw = inner.instantiate(op)?;
            let after = D::memory_info(op).map(|(free, _)| free);
            let taken = match (before, after) {
                (Ok(before), Ok(after)) => before.saturating_sub(after) as u64,
                _ => 0,
            };
            (ExecState::Live(raw), taken)
        };
        Ok(GraphExec {
            memory_bytes,
            device,
            state,
            source: Some(inner.clone()),
            applied: Some(inner.clone()),
            nodes: inner.nodes,
            modules: inner.modules.clone(),
            launch_lock: Mutex::new(()),
        })
    }

    /// The raw driver handle (`None` for an empty or destroyed graph), for interop and benchmarks.
    /// saggar keeps ownership: do not destroy it, and do not launch it concurrently with saggar.
    pub fn raw_handle(&self) -> Option<D::GraphExec> {
        match self.state {
            ExecState::Live(raw) => Some(raw),
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn ordinal(&self) -> usize {
        self.device.ordinal()
    }

    #[inline]
    pub(crate) fn modules(&self) -> &[Arc<ModuleShared<D>>] {
        &self.modules
    }

    /// What a launch replays: `None` for an empty graph; [`Error::GraphDestroyed`] once destroyed.
    #[inline]
    pub(crate) fn launchable(&self, op: &'static str) -> Result<Option<D::GraphExec>> {
        match self.state {
            ExecState::Live(raw) => Ok(Some(raw)),
            ExecState::Empty => Ok(None),
            ExecState::Destroyed => Err(Error::GraphDestroyed { op }),
        }
    }

    /// Serialises launches of this executable graph.
    #[inline]
    pub(crate) fn lock_for_launch(&self) -> MutexGuard<'_, ()> {
        self.launch_lock.lock()
    }

    /// After an update failed part way: replaces the executable graph by a fresh instantiation of the
    /// graph whose parameters it held before the update, and returns the refusal. If that fails too,
    /// the executable graph is destroyed and the instantiation's error returned.
    #[cold]
    fn restore(&mut self, op: &'static str, reason: String) -> Error {
        let applied = self.applied.clone().expect("a live executable graph has an applied graph");
        let fresh = applied.instantiate(op);
        if let ExecState::Live(raw) = std::mem::replace(&mut self.state, ExecState::Destroyed) {
            self.device.release_with(op, || {
                // SAFETY: `raw` was swapped out of the state, so it is destroyed once.
                unsafe { D::graph_exec_destroy(op, raw) }
            });
        }
        match fresh {
            Ok(raw) => {
                self.state = ExecState::Live(raw);
                self.source = Some(applied);
                Error::GraphUpdate { reason }
            }
            Err(e) => {
                self.source = None;
                self.applied = None;
                self.modules.clear();
                e
            }
        }
    }
}

impl<D: Driver> api::GraphExec for GraphExec<D> {
    type Backend = GpuBackend<D>;

    fn update(&mut self, graph: &Graph<D>) -> Result<()> {
        let op = "graph_exec.update";
        if matches!(self.state, ExecState::Destroyed) {
            return Err(Error::GraphDestroyed { op });
        }
        rules::check_same_device(op, self.ordinal(), graph.ordinal())?;
        self.device.enter(op)?;
        let new = graph.inner.clone();
        if new.nodes != self.nodes {
            return Err(Error::GraphUpdate {
                reason: format!("node count changed from {} to {}", self.nodes, new.nodes),
            });
        }
        if let ExecState::Live(raw) = self.state {
            let source = self.source.clone().expect("a live executable graph has a source graph");
            let applied = self.applied.clone().expect("a live executable graph has an applied graph");
            // SAFETY: `raw` is live (not destroyed) and `&mut self` excludes concurrent launches; the three
            // graphs are live while their `Arc`s are.
            match unsafe { D::update_exec(op, raw, &source, &applied, &new) } {
                Ok(()) => {}
                Err(UpdateFailure::Refused(reason)) => return Err(Error::GraphUpdate { reason }),
                Err(UpdateFailure::Partial(reason)) => return Err(self.restore(op, reason)),
                Err(UpdateFailure::Failed(e)) => return Err(e),
            }
        }
        self.modules = new.modules.clone();
        self.applied = Some(new);
        Ok(())
    }

    fn destroy(&mut self) -> Result<()> {
        let op = "graph_exec.destroy";
        let destroyed = match std::mem::replace(&mut self.state, ExecState::Destroyed) {
            ExecState::Live(raw) => self.device.with_current(op, || {
                // SAFETY: `raw` was swapped out of the state, so it is destroyed once; an in-flight
                // executable graph is freed asynchronously on completion.
                unsafe { D::graph_exec_destroy(op, raw) }
            }),
            ExecState::Empty | ExecState::Destroyed => Ok(()),
        };
        // Only now may the graphs it names and the modules it launches go.
        self.source = None;
        self.applied = None;
        self.modules.clear();
        destroyed
    }

    fn is_destroyed(&self) -> bool {
        matches!(self.state, ExecState::Destroyed)
    }

    fn memory_bytes(&self) -> u64 {
        match self.state {
            ExecState::Live(_) => self.memory_bytes,
            ExecState::Empty | ExecState::Destroyed => 0,
        }
    }
}

impl<D: Driver> Drop for GraphExec<D> {
    fn drop(&mut self) {
        // The graphs it names and the modules it launches go with it, after it is destroyed.
        let graphs = (self.source.take(), self.applied.take());
        let modules = std::mem::take(&mut self.modules);
        if let ExecState::Live(raw) = std::mem::replace(&mut self.state, ExecState::Destroyed) {
            let raw = SendHandle::new(raw);
            let held = (graphs, modules);
            device::release(&self.device, "graph_exec.drop", move || {
                // SAFETY: `raw` was swapped out of the state, so it is destroyed once.
                let destroyed = unsafe { D::graph_exec_destroy("graph_exec.drop", raw.into_inner()) };
                drop(held);
                destroyed
            });
        }
    }
}
