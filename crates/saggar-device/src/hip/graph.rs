//! What the HIP backend keeps of a captured graph and how it updates an executable graph: the part of
//! graphs where HIP really differs from CUDA. The graphs themselves are the shared layer's
//! ([`crate::gpu::Graph`], [`crate::gpu::GraphExec`]); this file reads a captured graph's nodes
//! (`hipGraphGetNodes`, once at the end of the capture) and pairs them with saggar's own list of the
//! operations the capture enqueued.
//!
//! Empty graphs: XLA's ROCm command buffers first rejected empty traced graphs and padded empty graphs
//! with an empty node, and both crashed; saggar does neither (see [`crate::gpu`]).
//!
//! # Updates, and the ROCm pitfalls they avoid
//! [`crate::Backend::GraphExec`]'s `update` brings an executable graph to the parameters of a new capture of the same
//! topology, choosing the cheapest safe way ([`plan_update`]):
//! 1. **Refuse without touching HIP** when the node count, a node's type, or a kernel node's function
//!    differs: [`crate::Error::GraphUpdate`], executable graph unchanged.
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
//! instantiation fails too is the executable graph destroyed (later launches: [`crate::Error::GraphDestroyed`]).
//!
//! CUDA guarantees that updating an executable graph does not affect replays already enqueued. HIP
//! documents no such guarantee (and a release that keeps graph kernel arguments in device memory may
//! rewrite them in place); saggar does not synchronise on its own, so update an executable graph once the
//! replays that must see the old parameters have completed.

use std::ffi::{c_int, c_void};

use crate::error::Result;
use crate::gpu::{CapturedOp, GraphInner, PackedArgs, UpdateFailure};
use crate::hip::{HipDriver, result, sys};

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

/// What the HIP driver keeps of a captured graph: its node handles (kernel-node updates name them)
/// and its shape.
pub struct HipGraphData {
    nodes: Vec<sys::hipGraphNode_t>,
    shape: GraphShape,
}

impl std::fmt::Debug for HipGraphData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipGraphData").field("nodes", &self.nodes.len()).field("shape", &self.shape).finish()
    }
}

// SAFETY: node handles are opaque values HIP accepts from any thread; every HIP call that uses them
// holds the graph's lock (see `gpu::GraphInner`). The rest is plain data.
unsafe impl Send for HipGraphData {}
// SAFETY: as above.
unsafe impl Sync for HipGraphData {}

/// Reads a graph a capture returned: its nodes, their types, paired with the operations saggar recorded.
///
/// # Safety
/// `graph` is live and used by no other thread.
pub(crate) unsafe fn read(
    op: &'static str,
    graph: sys::hipGraph_t,
    ops: Vec<CapturedOp>,
) -> Result<(usize, HipGraphData)> {
    // SAFETY: the caller's contract.
    let nodes = unsafe { result::graph::nodes(op, graph) }?;
    let node_types = nodes
        .iter()
        // SAFETY: every node belongs to `graph`, which nothing else uses yet.
        .map(|&node| unsafe { result::graph::node_type(op, node) })
        .collect::<Result<Vec<_>>>()?;
    Ok((nodes.len(), HipGraphData { nodes, shape: GraphShape::pair(node_types, ops) }))
}

pub(crate) fn empty() -> HipGraphData {
    HipGraphData { nodes: Vec::new(), shape: GraphShape::default() }
}

/// Sets the parameters of kernel nodes `indices` of `exec` (instantiated from `source`) to `new`'s launches.
fn set_kernel_params(
    op: &'static str,
    exec: sys::hipGraphExec_t,
    source: &GraphInner<HipDriver>,
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
        // SAFETY: `exec` is live and not launched concurrently (the caller's contract); `source.data.nodes[i]`
        // is a kernel node (the shape pairs it with a kernel launch) of the graph `exec` was instantiated
        // from, which the caller keeps alive; `args` holds one slot per parameter of the kernel (the launch
        // was checked against its signature when captured) and outlives the call; the function belongs to
        // a module the new graph keeps loaded.
        unsafe { result::graph::exec_kernel_node_set_params(op, exec, source.data.nodes[i], &params) }?;
    }
    Ok(())
}

/// Brings `exec` to `new`'s parameters by the cheapest safe way ([`plan_update`]); see the module
/// documentation.
///
/// # Safety
/// `exec` is live and not launched concurrently; the graphs are live.
pub(crate) unsafe fn update_exec(
    op: &'static str,
    exec: sys::hipGraphExec_t,
    source: &GraphInner<HipDriver>,
    applied: &GraphInner<HipDriver>,
    new: &GraphInner<HipDriver>,
) -> std::result::Result<(), UpdateFailure> {
    let plan = plan_update(&applied.data.shape, &new.data.shape).map_err(UpdateFailure::Refused)?;
    match plan {
        UpdatePlan::Nothing => Ok(()),
        UpdatePlan::KernelParams(indices) => {
            let new_ops = new.data.shape.ops.as_deref().expect("a kernel-parameter plan has paired operations");
            set_kernel_params(op, exec, source, new_ops, &indices)
                .map_err(|e| UpdateFailure::Partial(format!("setting kernel node parameters failed: {e}")))
        }
        UpdatePlan::WholeGraph => {
            let Some(graph) = new.raw else { return Ok(()) };
            let _serialised = new.lock.lock();
            // SAFETY: the caller's contract; `graph` is live with its lock held.
            match unsafe { result::graph::exec_update(op, exec, graph) } {
                Ok(Ok(())) => Ok(()),
                Ok(Err(code)) => Err(UpdateFailure::Partial(result::graph::update_result_text(code))),
                Err(e) => Err(UpdateFailure::Partial(e.to_string())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use smallvec::SmallVec;

    use super::*;
    use crate::gpu::KernelLaunch;
    use crate::types::{DevicePtr, KernelArg, KernelSignature, LaunchConfig, ParamKind};

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
