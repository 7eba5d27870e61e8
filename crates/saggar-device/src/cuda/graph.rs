//! Captured and executable graphs of the CUDA backend.
//!
//! - A [`CudaGraph`] is the `CUgraph` that `cuStreamEndCapture` returned; [`Graph::node_count`] is
//!   `cuGraphGetNodes`, read once at the end of the capture. `cuGraphDestroy` on drop.
//! - [`CudaGraphExec`] is `cuGraphInstantiateWithFlags(.., 0)`; a replay is `cuGraphLaunch`; an update
//!   is `cuGraphExecUpdate_v2` (the CUDA 12+ form that fills a `CUgraphExecUpdateResultInfo`). A refused
//!   update (`CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE`: "the graph update was not performed because it
//!   included changes which violated constraints specific to instantiated graph update") leaves the
//!   executable graph as it was and is [`Error::GraphUpdate`] with the driver's reason.
//!   [`GraphExec::destroy`] is `cuGraphExecDestroy` ("If the executable graph is in-flight, it will not
//!   be terminated, but rather freed asynchronously on completion"); later launches fail with
//!   [`Error::GraphDestroyed`] without reaching the driver.
//! - A capture of no work gives a graph of zero nodes. saggar does not instantiate it: its executable graph
//!   is a marker whose replay enqueues nothing, which is exactly what replaying an empty graph means, and
//!   which does not depend on how a driver treats empty graphs.

use std::sync::Arc;

use cudarc::driver::sys;
use parking_lot::{Mutex, MutexGuard};

use crate::api::{Graph, GraphExec};
use crate::cuda::CudaBackend;
use crate::cuda::device::{self, DeviceShared, SendHandle};
use crate::cuda::module::ModuleShared;
use crate::cuda::result;
use crate::error::{Error, Result};

/// A captured graph of the CUDA backend, destroyed on drop.
///
/// # Thread safety
/// `Send` but not `Sync`. CUDA: "Graph objects (cudaGraph_t, CUgraph) are not internally synchronized
/// and must not be accessed concurrently from multiple threads. API calls accessing the same graph object
/// must be serialized externally. Note that this includes APIs which may appear to be read-only, such as
/// cudaGraphClone() (cuGraphClone()) and cudaGraphInstantiate() (cuGraphInstantiate())."
pub struct CudaGraph {
    device: Arc<DeviceShared>,
    raw: sys::CUgraph,
    nodes: usize,
    /// Modules whose kernels the graph launches; its executable graphs keep them loaded.
    modules: Vec<Arc<ModuleShared>>,
}

// SAFETY: the graph is owned by this value alone; moving it to another thread moves all access with it,
// which the CUDA rule quoted on the type allows (it forbids only concurrent access, which `!Sync` rules out).
unsafe impl Send for CudaGraph {}

impl std::fmt::Debug for CudaGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaGraph").field("device", &self.device.ordinal()).field("nodes", &self.nodes).finish()
    }
}

impl CudaGraph {
    /// Takes ownership of a graph returned by `cuStreamEndCapture`; destroys it if its nodes cannot be
    /// counted.
    pub(crate) fn from_capture(
        device: Arc<DeviceShared>,
        raw: sys::CUgraph,
        modules: Vec<Arc<ModuleShared>>,
    ) -> Result<CudaGraph> {
        let op = "stream.end_capture";
        if raw.is_null() {
            return Err(result::vendor(op, result::CUresult::CUDA_ERROR_INVALID_VALUE));
        }
        let mut graph = CudaGraph { device, raw, nodes: 0, modules };
        // SAFETY: `raw` was just returned by the driver and is owned by `graph`; on error `graph` drops
        // and destroys it.
        graph.nodes = unsafe { result::graph::node_count(op, raw) }?;
        Ok(graph)
    }

    /// The raw driver handle, for interop and benchmarks. saggar keeps ownership: do not destroy it.
    pub fn raw_handle(&self) -> sys::CUgraph {
        self.raw
    }

    pub(crate) fn ordinal(&self) -> usize {
        self.device.ordinal()
    }
}

impl Graph for CudaGraph {
    fn node_count(&self) -> usize {
        self.nodes
    }
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if !raw.is_null() {
            let raw = SendHandle::new(raw);
            device::release(&self.device, "graph.drop", move || {
                // SAFETY: `raw` was swapped out, so it is destroyed once; executable graphs instantiated from
                // it are independent of it.
                unsafe { result::graph::destroy("graph.drop", raw.into_inner()) }
            });
        }
    }
}

enum ExecState {
    /// An instantiated graph.
    Live(sys::CUgraphExec),
    /// The executable form of a graph of zero nodes: replays enqueue nothing.
    Empty,
    /// Destroyed by [`GraphExec::destroy`].
    Destroyed,
}

/// An executable graph of the CUDA backend (`cuGraphInstantiateWithFlags`), destroyed on drop.
///
/// # Thread safety
/// `Send + Sync`: a replay may be enqueued from any thread. CUDA (`cuGraphLaunch`): "Only one instance of
/// hGraphExec may be executing at a time. Each launch is ordered behind both any previous work in hStream
/// and any previous launches of hGraphExec." Executable graphs fall under CUDA's rule that graph objects
/// are not internally synchronised, so saggar serialises the launch calls of one executable graph with a
/// lock of its own (uncontended: a few nanoseconds); [`GraphExec::update`] and [`GraphExec::destroy`]
/// take `&mut self` and so cannot race a launch.
pub struct CudaGraphExec {
    device: Arc<DeviceShared>,
    state: ExecState,
    nodes: usize,
    modules: Vec<Arc<ModuleShared>>,
    launch_lock: Mutex<()>,
}

// SAFETY: the executable graph is owned by this value; shared use is limited to `cuGraphLaunch`, which
// `launch_lock` serialises (see the type's docs); mutation needs `&mut self`.
unsafe impl Send for CudaGraphExec {}
// SAFETY: as above.
unsafe impl Sync for CudaGraphExec {}

impl std::fmt::Debug for CudaGraphExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            ExecState::Live(_) => "live",
            ExecState::Empty => "empty",
            ExecState::Destroyed => "destroyed",
        };
        f.debug_struct("CudaGraphExec")
            .field("device", &self.device.ordinal())
            .field("nodes", &self.nodes)
            .field("state", &state)
            .finish()
    }
}

impl CudaGraphExec {
    /// Instantiates `graph`; the device's context is current (the caller entered it).
    pub(crate) fn instantiate(device: Arc<DeviceShared>, graph: &CudaGraph) -> Result<CudaGraphExec> {
        let op = "device.instantiate";
        if graph.ordinal() != device.ordinal() {
            return Err(Error::DeviceMismatch { op, ordinal: device.ordinal(), other: graph.ordinal() });
        }
        let state = if graph.nodes == 0 {
            ExecState::Empty
        } else {
            // SAFETY: `graph.raw` is live while `graph` is, and `&CudaGraph` cannot be shared between
            // threads (`!Sync`), so nothing else uses it during the call.
            ExecState::Live(unsafe { result::graph::instantiate(op, graph.raw) }?)
        };
        Ok(CudaGraphExec {
            device,
            state,
            nodes: graph.nodes,
            modules: graph.modules.clone(),
            launch_lock: Mutex::new(()),
        })
    }

    /// The raw driver handle (`None` for an empty or destroyed graph), for interop and benchmarks. saggar keeps
    /// ownership: do not destroy it, and do not launch it concurrently with saggar.
    pub fn raw_handle(&self) -> Option<sys::CUgraphExec> {
        match self.state {
            ExecState::Live(raw) => Some(raw),
            _ => None,
        }
    }

    pub(crate) fn ordinal(&self) -> usize {
        self.device.ordinal()
    }

    pub(crate) fn modules(&self) -> &[Arc<ModuleShared>] {
        &self.modules
    }

    /// What a launch replays: `None` for an empty graph; [`Error::GraphDestroyed`] once destroyed.
    #[inline]
    pub(crate) fn launchable(&self, op: &'static str) -> Result<Option<sys::CUgraphExec>> {
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

    fn refuse(&self, new_nodes: usize) -> Error {
        Error::GraphUpdate { reason: format!("node count changed from {} to {new_nodes}", self.nodes) }
    }
}

impl GraphExec for CudaGraphExec {
    type Backend = CudaBackend;

    fn update(&mut self, graph: &CudaGraph) -> Result<()> {
        let op = "graph_exec.update";
        if matches!(self.state, ExecState::Destroyed) {
            return Err(Error::GraphDestroyed { op });
        }
        if graph.ordinal() != self.ordinal() {
            return Err(Error::DeviceMismatch { op, ordinal: self.ordinal(), other: graph.ordinal() });
        }
        self.device.enter(op)?;
        match self.state {
            ExecState::Empty if graph.nodes == 0 => {}
            ExecState::Empty => return Err(self.refuse(graph.nodes)),
            ExecState::Live(_) if graph.nodes != self.nodes => return Err(self.refuse(graph.nodes)),
            ExecState::Live(raw) => {
                // SAFETY: `raw` is live (not destroyed), `&mut self` excludes concurrent launches, and
                // `graph.raw` is live and not shared between threads (`CudaGraph: !Sync`).
                if let Err(code) = unsafe { result::graph::exec_update(op, raw, graph.raw) }? {
                    return Err(Error::GraphUpdate { reason: result::graph::update_result_text(code) });
                }
            }
            ExecState::Destroyed => unreachable!("checked above"),
        }
        self.modules = graph.modules.clone();
        Ok(())
    }

    fn destroy(&mut self) -> Result<()> {
        let state = std::mem::replace(&mut self.state, ExecState::Destroyed);
        let destroyed = match state {
            ExecState::Live(raw) => {
                crate::cuda::context::with_context("graph_exec.destroy", self.device.context(), || {
                    // SAFETY: `raw` was swapped out of the state, so it is destroyed once; CUDA frees an
                    // in-flight executable graph asynchronously on completion.
                    unsafe { result::graph::exec_destroy("graph_exec.destroy", raw) }
                })
            }
            ExecState::Empty | ExecState::Destroyed => Ok(()),
        };
        // Only now may the modules it launches be unloaded.
        self.modules.clear();
        destroyed
    }

    fn is_destroyed(&self) -> bool {
        matches!(self.state, ExecState::Destroyed)
    }
}

impl Drop for CudaGraphExec {
    fn drop(&mut self) {
        if let ExecState::Live(raw) = std::mem::replace(&mut self.state, ExecState::Destroyed) {
            let raw = SendHandle::new(raw);
            // The release holds the modules the graph launches until the graph itself is destroyed.
            let modules = std::mem::take(&mut self.modules);
            device::release(&self.device, "graph_exec.drop", move || {
                // SAFETY: `raw` was swapped out of the state, so it is destroyed once; CUDA frees an
                // in-flight executable graph asynchronously on completion.
                let destroyed = unsafe { result::graph::exec_destroy("graph_exec.drop", raw.into_inner()) };
                drop(modules);
                destroyed
            });
        }
    }
}
