//! Captured and executable graphs of the host backend.
//!
//! A graph is the list of operations a capture recorded, each with the pointers it was given. Replay
//! runs them with those same pointers, whatever lives at those addresses now: the stale-pointer hazard,
//! reproduced on purpose. Update replaces the parameters of an executable graph in place when the new
//! capture has the same topology (same operation kinds and kernels, in order), like
//! `cuGraphExecUpdate`; otherwise it refuses and leaves the graph as it was.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use crate::api::{Graph, GraphExec};
use crate::error::{Error, Result};
use crate::host::HostBackend;
use crate::host::device::DeviceShared;
use crate::host::stream::Op;

/// A captured graph of the host backend.
pub struct HostGraph {
    pub(crate) ordinal: usize,
    pub(crate) ops: Vec<Op>,
}

impl std::fmt::Debug for HostGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostGraph").field("device", &self.ordinal).field("nodes", &self.ops.len()).finish()
    }
}

impl Graph for HostGraph {
    fn node_count(&self) -> usize {
        self.ops.len()
    }
}

/// An executable graph of the host backend.
///
/// # Thread safety
/// `Send + Sync`; see [`GraphExec`].
pub struct HostGraphExec {
    device: Arc<DeviceShared>,
    body: Option<Arc<[Op]>>,
}

impl std::fmt::Debug for HostGraphExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostGraphExec")
            .field("device", &self.device.info.ordinal)
            .field("nodes", &self.body.as_ref().map(|b| b.len()))
            .finish()
    }
}

impl HostGraphExec {
    pub(crate) fn instantiate(device: Arc<DeviceShared>, graph: &HostGraph) -> Result<HostGraphExec> {
        crate::rules::check_same_device("device.instantiate", device.info.ordinal, graph.ordinal)?;
        device.counters.live_graph_execs.fetch_add(1, Relaxed);
        Ok(HostGraphExec { body: Some(Arc::from(graph.ops.clone())), device })
    }

    pub(crate) fn ordinal(&self) -> usize {
        self.device.info.ordinal
    }

    pub(crate) fn body(&self, op: &'static str) -> Result<Arc<[Op]>> {
        self.body.clone().ok_or(Error::GraphDestroyed { op })
    }
}

impl GraphExec for HostGraphExec {
    type Backend = HostBackend;

    fn update(&mut self, graph: &HostGraph) -> Result<()> {
        let body = self.body("graph_exec.update")?;
        crate::rules::check_same_device("graph_exec.update", self.ordinal(), graph.ordinal)?;
        if body.len() != graph.ops.len() {
            return Err(Error::GraphUpdate {
                reason: format!("node count changed from {} to {}", body.len(), graph.ops.len()),
            });
        }
        if let Some(i) = body.iter().zip(&graph.ops).position(|(a, b)| !a.same_topology(b)) {
            return Err(Error::GraphUpdate { reason: format!("node {i} changed kind or kernel") });
        }
        self.body = Some(Arc::from(graph.ops.clone()));
        Ok(())
    }

    fn destroy(&mut self) -> Result<()> {
        if self.body.take().is_some() {
            self.device.counters.live_graph_execs.fetch_sub(1, Relaxed);
        }
        Ok(())
    }

    fn is_destroyed(&self) -> bool {
        self.body.is_none()
    }

    fn memory_bytes(&self) -> u64 {
        self.body.as_ref().map_or(0, |b| b.len() as u64 * HOST_GRAPH_NODE_BYTES)
    }
}

/// The device memory the host backend models per node of an executable graph (the order of
/// magnitude CUDA drivers take for a kernel node). GPU backends measure instead.
pub const HOST_GRAPH_NODE_BYTES: u64 = 4 << 10;

impl Drop for HostGraphExec {
    fn drop(&mut self) {
        if let Err(e) = self.destroy() {
            self.device.defer(e);
        }
    }
}
