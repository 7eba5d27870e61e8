//! Run contexts: what one request needs for itself, leased from a pool so concurrent runs share
//! nothing mutable. A context holds a stream, an arena (stable staging and device slots), scratch
//! memory, its graph entries, and what its last run looked like (for the ultra-fast path).

use std::collections::HashMap;

use saggar_arena::ArenaLease;
use saggar_device::{Backend, CaptureMode, DevicePtr, DeviceSlice, Graph, GraphExec, Stream};
use saggar_shape::{PadPlan, SlicePlan};

use crate::error::Result;
use crate::stats::Stats;
use crate::tensors::BindingMode;

/// One captured graph of one program in one binding mode.
pub(crate) struct GraphEntry<B: Backend> {
    /// `None` once the entry fell back to eager launches.
    pub(crate) exec: Option<B::GraphExec>,
    /// The mode that captured it: an entry is only ever replayed by the same mode.
    pub(crate) mode: BindingMode,
    /// Direct-bind: the caller pointers baked in (inputs, then outputs).
    pub(crate) baked: Vec<DevicePtr>,
    /// Consecutive runs whose pointers differed from `baked`.
    pub(crate) drift: u32,
    pub(crate) last_used: u64,
    pub(crate) bytes: u64,
}

/// What the context's last successful run was, for the ultra-fast path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LastRun {
    pub(crate) mode: BindingMode,
    pub(crate) batch: Option<u64>,
    pub(crate) program: usize,
}

pub(crate) struct RunContext<B: Backend> {
    pub(crate) stream: B::Stream,
    pub(crate) arena: Option<ArenaLease<B>>,
    pub(crate) scratch: Option<B::DeviceBuffer>,
    pub(crate) graphs: HashMap<(usize, BindingMode), GraphEntry<B>>,
    pub(crate) graph_bytes: u64,
    pub(crate) graph_budget: Option<u64>,
    pub(crate) tick: u64,
    pub(crate) last: Option<LastRun>,
    /// Per-run plans, reused so the hot path allocates nothing.
    pub(crate) pad_plans: Vec<PadPlan>,
    pub(crate) slice_plans: Vec<SlicePlan>,
    pub(crate) inputs: Vec<DeviceSlice>,
    pub(crate) outputs: Vec<DeviceSlice>,
    /// The current device request's checked buffers (reused).
    pub(crate) io: DeviceIo,
    /// The session's counters, for work that completes after the request returned ([`crate::Pending`]).
    pub(crate) stats: std::sync::Arc<Stats>,
}

/// A device request's buffers in binding order, checked: inputs then outputs, each trimmed to the
/// bytes the request needs, and their addresses (what a direct-bind graph bakes and compares).
#[derive(Debug, Default, Clone)]
pub(crate) struct DeviceIo {
    pub(crate) slices: Vec<DeviceSlice>,
    pub(crate) pointers: Vec<DevicePtr>,
    pub(crate) inputs: usize,
}

impl DeviceIo {
    #[inline]
    pub(crate) fn clear(&mut self, inputs: usize) {
        self.slices.clear();
        self.pointers.clear();
        self.inputs = inputs;
    }

    #[inline]
    pub(crate) fn push(&mut self, slice: DeviceSlice) {
        self.slices.push(slice);
        self.pointers.push(slice.ptr());
    }

    /// Replaces buffer `index` (inputs first, then outputs).
    #[inline]
    pub(crate) fn set(&mut self, index: usize, slice: DeviceSlice) {
        self.slices[index] = slice;
        self.pointers[index] = slice.ptr();
    }

    #[inline]
    pub(crate) fn inputs(&self) -> &[DeviceSlice] {
        &self.slices[..self.inputs]
    }

    #[inline]
    pub(crate) fn outputs(&self) -> &[DeviceSlice] {
        &self.slices[self.inputs..]
    }
}

impl<B: Backend> RunContext<B> {
    pub(crate) fn scratch_slice(&self, bytes: usize) -> DeviceSlice {
        match &self.scratch {
            Some(buffer) if bytes > 0 => {
                saggar_device::DeviceBuffer::slice(buffer, 0, bytes).expect("scratch sized for every program")
            }
            Some(buffer) => saggar_device::DeviceBuffer::slice(buffer, 0, 0).expect("empty slice"),
            None => DeviceSlice::from_raw(DevicePtr::NULL, 0),
        }
    }

    /// Inserts a graph entry, evicting this context's least recently used entries while the graph
    /// budget would be exceeded.
    pub(crate) fn insert_graph(&mut self, key: (usize, BindingMode), entry: GraphEntry<B>, stats: &Stats) {
        if let Some(budget) = self.graph_budget {
            while self.graph_bytes + entry.bytes > budget {
                let Some(victim) = self.graphs.iter().min_by_key(|(_, e)| e.last_used).map(|(k, _)| *k) else { break };
                if let Some(old) = self.graphs.remove(&victim) {
                    self.graph_bytes -= old.bytes;
                    Stats::bump(&stats.evicted_graphs);
                }
            }
        }
        self.graph_bytes += entry.bytes;
        if let Some(old) = self.graphs.insert(key, entry) {
            self.graph_bytes -= old.bytes;
        }
    }
}

/// Records `record` into a graph on `stream`. The capture is always ended, even when recording
/// fails, so the stream serves the next request.
pub(crate) fn capture<B: Backend>(stream: &B::Stream, record: impl FnOnce() -> Result<()>) -> Result<B::Graph> {
    stream.begin_capture(CaptureMode::ThreadLocal)?;
    let recorded = record();
    let ended = stream.end_capture();
    recorded?;
    Ok(ended?)
}

/// The estimated memory of an instantiated graph of `graph`.
pub(crate) fn graph_bytes<B: Backend>(graph: &B::Graph) -> u64 {
    (graph.node_count() as u64).max(1) * crate::config::GRAPH_NODE_BYTES
}

/// Whether `entry` can be replayed by `mode`. Entries are keyed by mode, so this is an invariant
/// check, not a lookup: a mismatch is a bug and is treated as a missing entry.
pub(crate) fn replayable<B: Backend>(entry: &GraphEntry<B>, mode: BindingMode) -> bool {
    entry.mode == mode && entry.exec.as_ref().is_some_and(|e| !e.is_destroyed())
}
