//! Captured and executable graphs of the HIP backend.
//!
//! - A [`HipGraph`] is the `hipGraph_t` that `hipStreamEndCapture` returned, with its nodes
//!   (`hipGraphGetNodes`, read once at the end of the capture) and saggar's own list of the operations the
//!   capture enqueued. `hipGraphDestroy` when the last user of it is gone.
//! - [`HipGraphExec`] is `hipGraphInstantiateWithFlags(.., 0)`; a replay is `hipGraphLaunch`;
//!   [`GraphExec::destroy`] is `hipGraphExecDestroy`, after which launches fail with
//!   [`Error::GraphDestroyed`] without reaching HIP.
//! - **Empty graphs.** A capture of no work gives a graph of zero nodes, which is valid (XLA's ROCm
//!   command buffers first rejected empty traced graphs and padded empty graphs with an empty node, and
//!   both crashed; seed 002 removed the rejection). saggar neither rejects nor pads: it does not
//!   instantiate an empty graph at all. Its executable graph is a marker whose replay enqueues nothing,
//!   which is exactly what replaying an empty graph means, and which does not depend on how a given
//!   ROCm release treats empty graphs in `hipGraphInstantiate` or `hipGraphLaunch`.
//!
//! # Updates, and the ROCm pitfalls they avoid
//! [`GraphExec::update`] brings an executable graph to the parameters of a new capture of the same
//! topology, choosing the cheapest safe way ([`plan_update`]):
//! 1. **Refuse without touching HIP** when the node count, a node's type, or a kernel node's function
//!    differs: [`Error::GraphUpdate`], executable graph unchanged.
//! 2. **Kernel-node parameter updates** when every non-kernel node is identical to the current one and
//!    the graph was captured through one saggar stream (so saggar knows each node's launch): only the kernel
//!    nodes whose launch changed (typically only their pointers: drift) get
//!    `hipGraphExecKernelNodeSetParams`. `hipGraphExecUpdate` is slow on large graphs in some ROCm
//!    releases (it compares and re-sets every node of the graph, and the XLA seed saw updates dominate
//!    step time), so saggar avoids it whenever only kernel parameters changed.
//! 3. **`hipGraphExecUpdate`** otherwise (a copy or memset changed, or the capture was not saggar's alone).
//!
//! HIP's `hipGraphExecUpdate` is not atomic, unlike CUDA's: it walks the nodes and sets parameters as it
//! goes, so a refusal at node k leaves nodes before k updated. Step 1 catches every topology change
//! before HIP sees it. If HIP still fails an update (or a kernel node's parameters) part way, saggar
//! restores the executable graph by instantiating again the graph whose parameters it held before the
//! update (kept for that purpose), so a refused update really leaves it unchanged. Only if that
//! instantiation fails too is the executable graph destroyed (later launches: [`Error::GraphDestroyed`]).
//!
//! CUDA guarantees that updating an executable graph does not affect replays already enqueued. HIP
//! documents no such guarantee (and a release that keeps graph kernel arguments in device memory may
//! rewrite them in place); saggar does not synchronise on its own, so update an executable graph once the
//! replays that must see the old parameters have completed.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;

use crate::api::{Graph, GraphExec};
use crate::error::{Error, Result};
use crate::hip::HipBackend;
use crate::hip::device::{self, DeviceShared, SendHandle};
use crate::hip::module::ModuleShared;
use crate::hip::result;
use crate::hip::stream::PackedArgs;
use crate::hip::sys;
use crate::types::{KernelArg, KernelSignature, LaunchConfig};

/// A kernel launch recorded during a capture.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KernelLaunch {
    /// The `hipFunction_t`, as an address (it is only compared and handed back to HIP).
    pub(crate) function: usize,
    pub(crate) signature: Arc<KernelSignature>,
    pub(crate) config: LaunchConfig,
    pub(crate) args: SmallVec<[KernelArg; 8]>,
}

/// An operation a saggar stream enqueued into a capture, in capture order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CapturedOp {
    /// A kernel launch: one kernel node.
    Kernel(KernelLaunch),
    /// A copy (`hipMemcpyAsync`): one memcpy node. Its parameters are not recorded, so two copies are
    /// never known to be equal.
    Copy,
    /// A memset (`hipMemsetAsync`): one memset node; parameters not recorded either.
    Memset,
    /// A replay of an executable graph: a child-graph node.
    Graph,
}

impl CapturedOp {
    fn kernel(&self) -> Option<&KernelLaunch> {
        match self {
            CapturedOp::Kernel(k) => Some(k),
            _ => None,
        }
    }
}

/// What an update has to know about a graph: its nodes' types (as this runtime numbers them; compared,
/// never interpreted) and, when saggar can pair them with its nodes one to one, the captured operations.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct GraphShape {
    pub(crate) node_types: Vec<c_int>,
    /// `Some` when node `i` is known to be operation `i` (see [`GraphShape::pair`]).
    pub(crate) ops: Option<Vec<CapturedOp>>,
}

impl GraphShape {
    /// Pairs HIP's nodes with saggar's operations. They pair when there are as many of each (HIP creates
    /// the nodes of a one-stream capture in enqueue order) and the node types agree with the operations:
    /// every kernel operation sits on a node of one and the same type, which no other operation's node
    /// has. Otherwise (work of other streams joined the capture, or a runtime added nodes of its own)
    /// the operations are dropped and updates go through `hipGraphExecUpdate`.
    pub(crate) fn pair(node_types: Vec<c_int>, ops: Vec<CapturedOp>) -> GraphShape {
        let consistent = ops.len() == node_types.len() && {
            let mut kernel_type = None;
            let kernels_agree = ops
                .iter()
                .zip(&node_types)
                .filter(|(op, _)| op.kernel().is_some())
                .all(|(_, t)| *kernel_type.get_or_insert(*t) == *t);
            kernels_agree
                && ops
                    .iter()
                    .zip(&node_types)
                    .filter(|(op, _)| op.kernel().is_none())
                    .all(|(_, t)| Some(*t) != kernel_type)
        };
        GraphShape { node_types, ops: consistent.then_some(ops) }
    }

    pub(crate) fn len(&self) -> usize {
        self.node_types.len()
    }
}

/// How an executable graph is brought to a new graph's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UpdatePlan {
    /// The new graph has exactly the current parameters: nothing to do.
    Nothing,
    /// Only kernel nodes changed: set these nodes' parameters (`hipGraphExecKernelNodeSetParams`).
    KernelParams(Vec<usize>),
    /// Anything else: `hipGraphExecUpdate`.
    WholeGraph,
}

/// Chooses how to update an executable graph whose current parameters are `current`'s to `new`'s, or
/// says why the update must be refused. Pure: no HIP call.
pub(crate) fn plan_update(current: &GraphShape, new: &GraphShape) -> std::result::Result<UpdatePlan, String> {
    if current.len() != new.len() {
        return Err(format!("node count changed from {} to {}", current.len(), new.len()));
    }
    if new.len() == 0 {
        return Ok(UpdatePlan::Nothing);
    }
    if let Some(i) = current.node_types.iter().zip(&new.node_types).position(|(a, b)| a != b) {
        return Err(format!("node {i} changed type"));
    }
    let (Some(old_ops), Some(new_ops)) = (&current.ops, &new.ops) else {
        return Ok(UpdatePlan::WholeGraph);
    };
    let mut changed = Vec::new();
    let mut only_kernels = true;
    for (i, (a, b)) in old_ops.iter().zip(new_ops).enumerate() {
        match (a, b) {
            (CapturedOp::Kernel(a), CapturedOp::Kernel(b)) => {
                if a.function != b.function {
                    return Err(format!(
                        "node {i} launches a different kernel (`{}` instead of `{}`)",
                        b.signature.name, a.signature.name
                    ));
                }
                if a != b {
                    changed.push(i);
                }
            }
            // Copies, memsets and child graphs carry no recorded parameters: they may have changed.
            _ => only_kernels = false,
        }
    }
    Ok(match (only_kernels, changed.is_empty()) {
        (false, _) => UpdatePlan::WholeGraph,
        (true, true) => UpdatePlan::Nothing,
        (true, false) => UpdatePlan::KernelParams(changed),
    })
}

/// A captured graph definition, shared by the [`HipGraph`] that owns it and by every executable graph
/// that needs its node handles or may have to instantiate it again.
pub(crate) struct GraphInner {
    device: Arc<DeviceShared>,
    /// Null for a capture of no work that HIP returned no graph for.
    raw: sys::hipGraph_t,
    /// Serialises every HIP call that reads `raw` (see [`HipGraph`]'s thread-safety section).
    lock: Mutex<()>,
    nodes: Vec<sys::hipGraphNode_t>,
    shape: GraphShape,
    /// Modules whose kernels the graph launches; its executable graphs keep them loaded.
    modules: Vec<Arc<ModuleShared>>,
}

// SAFETY: `raw` and `nodes` are opaque handles HIP accepts from any thread; every HIP call that reads
// the graph takes `lock`, which satisfies the rule that graph objects be accessed by one thread at a
// time. The rest is immutable.
unsafe impl Send for GraphInner {}
// SAFETY: as above.
unsafe impl Sync for GraphInner {}

impl Drop for GraphInner {
    fn drop(&mut self) {
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if !raw.is_null() {
            let raw = SendHandle::new(raw);
            device::release(&self.device, "graph.drop", move || {
                // SAFETY: `raw` was swapped out, so it is destroyed once; this is its last user (executable
                // graphs instantiated from it hold this value and are gone too).
                unsafe { result::graph::destroy("graph.drop", raw.into_inner()) }
            });
        }
    }
}

impl GraphInner {
    /// Instantiates this graph (not for an empty one).
    fn instantiate(&self, op: &'static str) -> Result<sys::hipGraphExec_t> {
        let _serialised = self.lock.lock();
        // SAFETY: `raw` is live while `self` is, and the lock keeps other threads off it.
        unsafe { result::graph::instantiate(op, self.raw) }
    }
}

/// A captured graph of the HIP backend, destroyed when it and every executable graph instantiated from
/// it are gone.
///
/// # Thread safety
/// `Send + Sync`. HIP documents no thread-safety rule of its own for graphs and follows CUDA's: "Graph
/// objects (cudaGraph_t, CUgraph) are not internally synchronized and must not be accessed concurrently
/// from multiple threads. API calls accessing the same graph object must be serialized externally. Note
/// that this includes APIs which may appear to be read-only, such as cudaGraphClone() and
/// cudaGraphInstantiate()." Unlike the CUDA backend's graph, a HIP graph is shared with the executable
/// graphs made from it (they need its node handles for kernel-node updates, and may instantiate it
/// again), so saggar serialises every call that reads it with a lock of its own.
pub struct HipGraph {
    inner: Arc<GraphInner>,
}

impl std::fmt::Debug for HipGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipGraph")
            .field("device", &self.inner.device.ordinal())
            .field("nodes", &self.inner.nodes.len())
            .field("paired", &self.inner.shape.ops.is_some())
            .finish()
    }
}

impl HipGraph {
    /// Takes ownership of a graph returned by `hipStreamEndCapture` (null for no graph), reads its nodes
    /// and pairs them with the operations saggar recorded; destroys the graph if that fails.
    pub(crate) fn from_capture(
        device: Arc<DeviceShared>,
        raw: sys::hipGraph_t,
        modules: Vec<Arc<ModuleShared>>,
        ops: Vec<CapturedOp>,
    ) -> Result<HipGraph> {
        let op = "stream.end_capture";
        let mut inner =
            GraphInner { device, raw, lock: Mutex::new(()), nodes: Vec::new(), shape: GraphShape::default(), modules };
        if !raw.is_null() {
            // SAFETY: `raw` was just returned by HIP and is owned by `inner` alone; on error `inner` drops
            // and destroys it.
            inner.nodes = unsafe { result::graph::nodes(op, raw) }?;
            let node_types = inner
                .nodes
                .iter()
                // SAFETY: every node belongs to `raw`, which nothing else uses yet.
                .map(|&node| unsafe { result::graph::node_type(op, node) })
                .collect::<Result<Vec<_>>>()?;
            inner.shape = GraphShape::pair(node_types, ops);
        } else if !ops.is_empty() {
            return Err(result::vendor(op, sys::code::INVALID_VALUE));
        }
        Ok(HipGraph { inner: Arc::new(inner) })
    }

    /// The raw HIP handle (null for an empty capture HIP returned no graph for), for interop and
    /// benchmarks. saggar keeps ownership: do not destroy it, and do not use it while saggar may.
    pub fn raw_handle(&self) -> sys::hipGraph_t {
        self.inner.raw
    }

    pub(crate) fn ordinal(&self) -> usize {
        self.inner.device.ordinal()
    }
}

impl Graph for HipGraph {
    fn node_count(&self) -> usize {
        self.inner.nodes.len()
    }
}

enum ExecState {
    /// An instantiated graph.
    Live(sys::hipGraphExec_t),
    /// The executable form of a graph of zero nodes: replays enqueue nothing.
    Empty,
    /// Destroyed by [`GraphExec::destroy`].
    Destroyed,
}

/// An executable graph of the HIP backend (`hipGraphInstantiateWithFlags`), destroyed on drop.
///
/// # Thread safety
/// `Send + Sync`: a replay may be enqueued from any thread. HIP follows CUDA's `cuGraphLaunch` rule
/// ("Only one instance of hGraphExec may be executing at a time. Each launch is ordered behind both any
/// previous work in hStream and any previous launches of hGraphExec"), and executable graphs fall under
/// the rule that graph objects are not internally synchronised, so saggar serialises the launch calls of
/// one executable graph with a lock of its own (uncontended: a few nanoseconds); [`GraphExec::update`]
/// and [`GraphExec::destroy`] take `&mut self` and so cannot race a launch.
pub struct HipGraphExec {
    device: Arc<DeviceShared>,
    state: ExecState,
    /// The graph this executable graph was instantiated from: kernel-node updates name its nodes.
    source: Option<Arc<GraphInner>>,
    /// The graph whose parameters this executable graph currently holds (the source, or the graph of the
    /// last update): what a failed update restores.
    applied: Option<Arc<GraphInner>>,
    nodes: usize,
    modules: Vec<Arc<ModuleShared>>,
    launch_lock: Mutex<()>,
}

// SAFETY: the executable graph is owned by this value; shared use is limited to `hipGraphLaunch`, which
// `launch_lock` serialises (see the type's docs); mutation needs `&mut self`. The graph definitions it
// holds are `Send + Sync` on their own.
unsafe impl Send for HipGraphExec {}
// SAFETY: as above.
unsafe impl Sync for HipGraphExec {}

impl std::fmt::Debug for HipGraphExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            ExecState::Live(_) => "live",
            ExecState::Empty => "empty",
            ExecState::Destroyed => "destroyed",
        };
        f.debug_struct("HipGraphExec")
            .field("device", &self.device.ordinal())
            .field("nodes", &self.nodes)
            .field("state", &state)
            .finish()
    }
}

impl HipGraphExec {
    /// Instantiates `graph`; the device is current (the caller entered it).
    pub(crate) fn instantiate(device: Arc<DeviceShared>, graph: &HipGraph) -> Result<HipGraphExec> {
        let op = "device.instantiate";
        if graph.ordinal() != device.ordinal() {
            return Err(Error::DeviceMismatch { op, ordinal: device.ordinal(), other: graph.ordinal() });
        }
        let inner = &graph.inner;
        let state = if inner.nodes.is_empty() { ExecState::Empty } else { ExecState::Live(inner.instantiate(op)?) };
        Ok(HipGraphExec {
            device,
            state,
            source: Some(inner.clone()),
            applied: Some(inner.clone()),
            nodes: inner.nodes.len(),
            modules: inner.modules.clone(),
            launch_lock: Mutex::new(()),
        })
    }

    /// The raw HIP handle (`None` for an empty or destroyed graph), for interop and benchmarks. saggar
    /// keeps ownership: do not destroy it, and do not launch it concurrently with saggar.
    pub fn raw_handle(&self) -> Option<sys::hipGraphExec_t> {
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
    pub(crate) fn launchable(&self, op: &'static str) -> Result<Option<sys::hipGraphExec_t>> {
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

    /// Sets the parameters of kernel nodes `indices` of the executable graph to `new`'s launches.
    fn set_kernel_params(
        &self,
        op: &'static str,
        raw: sys::hipGraphExec_t,
        source: &GraphInner,
        new: &[CapturedOp],
        indices: &[usize],
    ) -> Result<()> {
        for &i in indices {
            let Some(launch) = new[i].kernel() else { continue };
            let mut args = PackedArgs::new(&launch.args);
            let dim = |d: crate::types::Dim3| sys::dim3 { x: d.x, y: d.y, z: d.z };
            let params = sys::hipKernelNodeParams {
                blockDim: dim(launch.config.block),
                extra: std::ptr::null_mut(),
                func: launch.function as *mut c_void,
                gridDim: dim(launch.config.grid),
                kernelParams: args.as_params(),
                sharedMemBytes: launch.config.shared_mem_bytes,
            };
            // SAFETY: `raw` is live and `&mut self` (held by the caller) excludes concurrent launches;
            // `source.nodes[i]` is a kernel node (the shape pairs it with a kernel launch) of the graph
            // `raw` was instantiated from, which `source` keeps alive; `args` holds one slot per
            // parameter of the kernel (the launch was checked against its signature when captured) and
            // outlives the call; the function belongs to a module the new graph keeps loaded.
            unsafe { result::graph::exec_kernel_node_set_params(op, raw, source.nodes[i], &params) }?;
        }
        Ok(())
    }

    /// After an update failed part way: replaces the executable graph by a fresh instantiation of the
    /// graph whose parameters it held before the update, and returns the refusal. If that fails too,
    /// the executable graph is destroyed and the instantiation's error returned.
    #[cold]
    fn restore(&mut self, op: &'static str, reason: String) -> Error {
        let applied = self.applied.clone().expect("a live executable graph has an applied graph");
        let fresh = applied.instantiate(op);
        let old = std::mem::replace(&mut self.state, ExecState::Destroyed);
        if let ExecState::Live(raw) = old {
            self.device.release_with("graph_exec.update", || {
                // SAFETY: `raw` was swapped out of the state, so it is destroyed once.
                unsafe { result::graph::exec_destroy("graph_exec.update", raw) }
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

impl GraphExec for HipGraphExec {
    type Backend = HipBackend;

    fn update(&mut self, graph: &HipGraph) -> Result<()> {
        let op = "graph_exec.update";
        if matches!(self.state, ExecState::Destroyed) {
            return Err(Error::GraphDestroyed { op });
        }
        if graph.ordinal() != self.ordinal() {
            return Err(Error::DeviceMismatch { op, ordinal: self.ordinal(), other: graph.ordinal() });
        }
        self.device.enter(op)?;
        let new = graph.inner.clone();
        let current = self.applied.clone().expect("a live executable graph has an applied graph");
        let plan = plan_update(&current.shape, &new.shape).map_err(|reason| Error::GraphUpdate { reason })?;
        match (&self.state, plan) {
            (_, UpdatePlan::Nothing) | (ExecState::Empty, _) => {}
            (ExecState::Live(raw), UpdatePlan::KernelParams(indices)) => {
                let raw = *raw;
                let source = self.source.clone().expect("a live executable graph has a source graph");
                let new_ops = new.shape.ops.as_deref().expect("a kernel-parameter plan has paired operations");
                if let Err(e) = self.set_kernel_params(op, raw, &source, new_ops, &indices) {
                    return Err(self.restore(op, format!("setting kernel node parameters failed: {e}")));
                }
            }
            (ExecState::Live(raw), UpdatePlan::WholeGraph) => {
                let raw = *raw;
                let refused = {
                    let _serialised = new.lock.lock();
                    // SAFETY: `raw` is live (not destroyed), `&mut self` excludes concurrent launches, and
                    // `new.raw` is live with its lock held.
                    match unsafe { result::graph::exec_update(op, raw, new.raw) } {
                        Ok(Ok(())) => None,
                        Ok(Err(code)) => Some(result::graph::update_result_text(code)),
                        Err(e) => Some(e.to_string()),
                    }
                };
                if let Some(reason) = refused {
                    return Err(self.restore(op, reason));
                }
            }
            (ExecState::Destroyed, _) => unreachable!("checked above"),
        }
        self.applied = Some(new);
        self.modules = graph.inner.modules.clone();
        Ok(())
    }

    fn destroy(&mut self) -> Result<()> {
        let state = std::mem::replace(&mut self.state, ExecState::Destroyed);
        let destroyed = match state {
            ExecState::Live(raw) => {
                crate::hip::context::with_device("graph_exec.destroy", self.device.raw_ordinal(), || {
                    // SAFETY: `raw` was swapped out of the state, so it is destroyed once.
                    unsafe { result::graph::exec_destroy("graph_exec.destroy", raw) }
                })
            }
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
}

impl Drop for HipGraphExec {
    fn drop(&mut self) {
        // The graphs it names and the modules it launches go with it, after it is destroyed.
        let graphs = (self.source.take(), self.applied.take());
        let modules = std::mem::take(&mut self.modules);
        if let ExecState::Live(raw) = std::mem::replace(&mut self.state, ExecState::Destroyed) {
            let raw = SendHandle::new(raw);
            device::release(&self.device, "graph_exec.drop", move || {
                // SAFETY: `raw` was swapped out of the state, so it is destroyed once.
                let destroyed = unsafe { result::graph::exec_destroy("graph_exec.drop", raw.into_inner()) };
                drop((graphs, modules));
                destroyed
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{DevicePtr, ParamKind};

    const KERNEL: c_int = 0;
    const COPY: c_int = 1;

    fn launch(function: usize, ptr: u64) -> CapturedOp {
        CapturedOp::Kernel(KernelLaunch {
            function,
            signature: Arc::new(KernelSignature::new(format!("k{function}"), &[ParamKind::Ptr, ParamKind::U64])),
            config: LaunchConfig::for_elements(1024, 256),
            args: SmallVec::from_slice(&[KernelArg::Ptr(DevicePtr(ptr)), KernelArg::U64(256)]),
        })
    }

    fn kernels(launches: &[(usize, u64)]) -> GraphShape {
        let ops: Vec<_> = launches.iter().map(|&(f, p)| launch(f, p)).collect();
        GraphShape::pair(vec![KERNEL; ops.len()], ops)
    }

    #[test]
    fn pointer_drift_in_kernels_updates_only_the_changed_kernel_nodes() {
        let current = kernels(&[(1, 0x1000), (2, 0x2000), (1, 0x3000)]);
        let new = kernels(&[(1, 0x1000), (2, 0x9000), (1, 0x3000)]);
        assert_eq!(plan_update(&current, &new), Ok(UpdatePlan::KernelParams(vec![1])));
        assert_eq!(plan_update(&current, &current.clone()), Ok(UpdatePlan::Nothing));
    }

    #[test]
    fn topology_changes_are_refused_before_hip_sees_them() {
        let two = kernels(&[(1, 0x1000), (1, 0x2000)]);
        let three = kernels(&[(1, 0x1000), (1, 0x2000), (1, 0x3000)]);
        assert_eq!(plan_update(&two, &three), Err("node count changed from 2 to 3".into()));
        let other_kernel = kernels(&[(1, 0x1000), (7, 0x2000)]);
        assert!(plan_update(&two, &other_kernel).unwrap_err().contains("node 1 launches a different kernel"));
        let typed = GraphShape { node_types: vec![KERNEL, COPY], ops: None };
        let retyped = GraphShape { node_types: vec![KERNEL, KERNEL], ops: None };
        assert_eq!(plan_update(&typed, &retyped), Err("node 1 changed type".into()));
    }

    #[test]
    fn copies_memsets_and_unpaired_graphs_go_through_hip_graph_exec_update() {
        let with_copy = |p| GraphShape::pair(vec![KERNEL, COPY], vec![launch(1, p), CapturedOp::Copy]);
        assert!(with_copy(0x1000).ops.is_some(), "a kernel and a copy pair");
        assert_eq!(plan_update(&with_copy(0x1000), &with_copy(0x2000)), Ok(UpdatePlan::WholeGraph));
        let unpaired = GraphShape { node_types: vec![KERNEL, KERNEL], ops: None };
        assert_eq!(plan_update(&unpaired, &unpaired.clone()), Ok(UpdatePlan::WholeGraph));
        let empty = GraphShape::default();
        assert_eq!(plan_update(&empty, &empty.clone()), Ok(UpdatePlan::Nothing));
        assert!(plan_update(&empty, &kernels(&[(1, 1)])).is_err());
    }

    #[test]
    fn nodes_pair_with_operations_only_when_types_agree() {
        // One node more than saggar enqueued (another stream joined the capture): not paired.
        assert_eq!(GraphShape::pair(vec![KERNEL, KERNEL], vec![launch(1, 1)]).ops, None);
        // Kernel launches on nodes of two different types: not paired.
        assert_eq!(GraphShape::pair(vec![KERNEL, COPY], vec![launch(1, 1), launch(1, 2)]).ops, None);
        // A copy on a node of the kernels' type: not paired.
        assert_eq!(GraphShape::pair(vec![KERNEL, KERNEL], vec![launch(1, 1), CapturedOp::Copy]).ops, None);
        // ROCm 5.2 numbers kernel nodes 1, later releases 0: only agreement matters.
        assert!(GraphShape::pair(vec![1, 9], vec![launch(1, 1), CapturedOp::Copy]).ops.is_some());
        assert!(GraphShape::pair(vec![0, 1], vec![launch(1, 1), CapturedOp::Memset]).ops.is_some());
    }
}
