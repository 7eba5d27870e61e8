//! The graph cache and its policy: each run context keeps its captured graphs keyed by (program,
//! [`BindingMode`]), replays an entry only in the mode that captured it, evicts the least recently
//! used entries over its share of the graph-memory budget, and handles pointer drift of direct-bind
//! graphs (update in place, else re-capture; eager launches after too many consecutive mismatches).

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use saggar_device::{Backend, CaptureMode, Device, DevicePtr, Graph, GraphExec, Stream};

use crate::compiler::{Program, ProgramCompiler};
use crate::context::{DeviceIo, Slots};
use crate::error::Result;
use crate::session::Inner;
use crate::stats::Stats;
use crate::tensors::BindingMode;

/// A graph entry's key: the program's id and the binding mode that captured it.
pub(crate) type GraphKey = (usize, BindingMode);

/// One captured graph of one program in one binding mode.
pub(crate) struct GraphEntry<B: Backend> {
    /// `None` once the entry fell back to eager launches.
    exec: Option<B::GraphExec>,
    /// The mode that captured it: an entry is only ever replayed by the same mode.
    mode: BindingMode,
    /// Direct-bind: the caller pointers baked in (inputs, then outputs).
    baked: Vec<DevicePtr>,
    /// Consecutive runs whose pointers differed from `baked`.
    drift: u32,
    last_used: u64,
    bytes: u64,
}

impl<B: Backend> GraphEntry<B> {
    /// The executable graph, if `mode` may replay it: entries are keyed by mode, so a mode mismatch
    /// is an invariant check, not a lookup (a bug, treated as a missing entry).
    fn replayable(&self, mode: BindingMode) -> Option<&B::GraphExec> {
        debug_assert_eq!(self.mode, mode, "graph entries are only replayed by the mode that captured them");
        self.exec.as_ref().filter(|e| self.mode == mode && !e.is_destroyed())
    }
}

/// One run context's graphs, with the memory they are estimated to hold and the context's share of
/// the session's graph-memory budget.
pub(crate) struct GraphCache<B: Backend> {
    entries: HashMap<GraphKey, GraphEntry<B>>,
    bytes: u64,
    budget: Option<u64>,
    /// Advanced once per request; the least recently used entries are evicted first.
    pub(crate) tick: u64,
}

impl<B: Backend> GraphCache<B> {
    pub(crate) fn new(budget: Option<u64>) -> Self {
        GraphCache { entries: HashMap::new(), bytes: 0, budget, tick: 0 }
    }

    /// The live graph of `key` that `mode` may replay, marked used.
    fn live(&mut self, key: GraphKey) -> Option<&B::GraphExec> {
        let tick = self.tick;
        let entry = self.entries.get_mut(&key)?;
        entry.last_used = tick;
        entry.replayable(key.1)
    }

    /// Inserts a freshly captured graph, evicting this context's least recently used entries while
    /// the graph budget would be exceeded, and returns it for its first replay.
    fn insert(
        &mut self,
        key: GraphKey,
        exec: B::GraphExec,
        baked: Vec<DevicePtr>,
        bytes: u64,
        stats: &Stats,
    ) -> &B::GraphExec {
        if let Some(budget) = self.budget {
            while self.bytes + bytes > budget {
                let Some(victim) = self.entries.iter().min_by_key(|(_, e)| e.last_used).map(|(k, _)| *k) else {
                    break;
                };
                if let Some(old) = self.entries.remove(&victim) {
                    self.bytes -= old.bytes;
                    Stats::bump(&stats.evicted_graphs);
                }
            }
        }
        self.bytes += bytes;
        let entry = GraphEntry { exec: None, mode: key.1, baked, drift: 0, last_used: self.tick, bytes };
        let slot = match self.entries.entry(key) {
            Entry::Occupied(mut occupied) => {
                self.bytes -= occupied.insert(entry).bytes;
                occupied.into_mut()
            }
            Entry::Vacant(vacant) => vacant.insert(entry),
        };
        slot.exec.insert(exec)
    }
}

impl<B: Backend> GraphCache<B> {
    /// Drops every graph of a program for which `keep` is false; returns how many were dropped.
    pub(crate) fn retain_programs(&mut self, keep: impl Fn(usize) -> bool) -> usize {
        let before = self.entries.len();
        let mut freed = 0;
        self.entries.retain(|key, entry| {
            let kept = keep(key.0);
            if !kept {
                freed += entry.bytes;
            }
            kept
        });
        self.bytes -= freed;
        before - self.entries.len()
    }
}

/// Records `record` into a graph on `stream`. The capture is always ended, even when recording
/// fails, so the stream serves the next request.
fn capture<B: Backend>(stream: &B::Stream, record: impl FnOnce() -> Result<()>) -> Result<B::Graph> {
    stream.begin_capture(CaptureMode::ThreadLocal)?;
    let recorded = record();
    let ended = stream.end_capture();
    recorded?;
    Ok(ended?)
}

/// The estimated memory of an instantiated graph of `graph`.
fn graph_bytes<B: Backend>(graph: &B::Graph) -> u64 {
    (graph.node_count() as u64).max(1) * crate::config::GRAPH_NODE_BYTES
}

impl<B: Backend, C: ProgramCompiler<B>> Inner<B, C> {
    /// Launches a graph whose baked pointers are this request's (compared, or captured from its
    /// checked buffers) or the context's own arena slots and scratch, which live as long as the
    /// context (the arena is fenced after the launch).
    fn replay(&self, stream: &B::Stream, exec: &B::GraphExec) -> Result<bool> {
        // SAFETY: as this function's comment says; the caller's device memory stays valid until the
        // run is waited for (the contract of `run_device` and `Pending`).
        unsafe { stream.launch_graph(exec)? };
        Stats::bump(&self.stats.replays);
        Ok(true)
    }

    /// Direct bind: the caller's pointers (in `io`, checked) are the program's bindings. A graph bakes
    /// them; every run compares. A match replays and resets the drift count; a mismatch updates the
    /// graph in place (or re-captures it) and counts; more than `max_consecutive_drift` consecutive
    /// mismatches make the entry fall back to eager launches.
    pub(crate) fn direct_chunk(
        &self,
        stream: &B::Stream,
        slots: &mut Slots<B>,
        k: usize,
        io: &DeviceIo,
    ) -> Result<bool> {
        let entry = &self.main[k];
        let key = (entry.id, BindingMode::DirectBind);
        let tick = slots.graphs.tick;
        // The steady state: a live graph whose baked pointers are this request's.
        if let Some(graph) = slots.graphs.entries.get_mut(&key)
            && let Some(exec) = &graph.exec
            && graph.baked == io.pointers
        {
            graph.drift = 0;
            graph.last_used = tick;
            return self.replay(stream, exec);
        }
        let scratch = slots.scratch_slice(entry.scratch_bytes);
        let GraphCache { entries, bytes, .. } = &mut slots.graphs;
        let launch = || {
            // SAFETY: the caller's device memory stays valid until the run is waited for (the contract
            // of `run_device` and `Pending`), each buffer holds what the program reads or writes (the
            // request's batch equals the bucket), and the scratch belongs to the context.
            unsafe { entry.program.launch(stream, io.inputs(), io.outputs(), scratch) }
        };
        if !self.config.graphs.enabled {
            launch()?;
            Stats::bump(&self.stats.eager_runs);
            return Ok(false);
        }
        let Some(graph_entry) = entries.get_mut(&key) else {
            let graph = capture::<B>(stream, || Ok(launch()?))?;
            let exec = self.device.instantiate(&graph)?;
            Stats::bump(&self.stats.captures);
            let size = graph_bytes::<B>(&graph);
            let exec = slots.graphs.insert(key, exec, io.pointers.clone(), size, &self.stats);
            return self.replay(stream, exec);
        };
        graph_entry.last_used = tick;
        if graph_entry.exec.is_some() {
            graph_entry.drift += 1;
            if graph_entry.drift > self.config.graphs.max_consecutive_drift {
                graph_entry.exec = None;
                *bytes -= std::mem::take(&mut graph_entry.bytes);
                Stats::bump(&self.stats.eager_fallbacks);
            }
        }
        let Some(exec) = graph_entry.exec.as_mut() else {
            launch()?;
            Stats::bump(&self.stats.eager_runs);
            return Ok(false);
        };
        let graph = capture::<B>(stream, || Ok(launch()?))?;
        // HIP does not promise that an update leaves a replay still running untouched (CUDA does).
        // This context's stream is the only one that replays the graph, so finishing it first makes
        // the update safe everywhere; drift is the slow path anyway.
        stream.synchronize()?;
        if self.config.graphs.try_update && exec.update(&graph).is_ok() {
            Stats::bump(&self.stats.updates);
        } else {
            *exec = self.device.instantiate(&graph)?;
            Stats::bump(&self.stats.recaptures);
        }
        graph_entry.baked.clear();
        graph_entry.baked.extend_from_slice(&io.pointers);
        self.replay(stream, exec)
    }

    /// Runs main program `k` on the arena slots in `mode` (pinned-copy or stabilized): replays the
    /// context's graph of that mode (capturing it first if needed) or launches eagerly.
    pub(crate) fn run_on_slots(
        &self,
        stream: &B::Stream,
        slots: &mut Slots<B>,
        k: usize,
        mode: BindingMode,
    ) -> Result<bool> {
        if !self.config.graphs.enabled {
            self.enqueue_on_slots(stream, slots, k, mode == BindingMode::PinnedCopy)?;
            Stats::bump(&self.stats.eager_runs);
            return Ok(false);
        }
        if let Some(exec) = slots.graphs.live((self.main[k].id, mode)) {
            return self.replay(stream, exec);
        }
        let exec = self.capture_on_slots(stream, slots, k, mode)?;
        self.replay(stream, exec)
    }

    /// Captures the graph of main program `k` on the context's arena slots in `mode` and keeps it.
    pub(crate) fn capture_on_slots<'s>(
        &self,
        stream: &B::Stream,
        slots: &'s mut Slots<B>,
        k: usize,
        mode: BindingMode,
    ) -> Result<&'s B::GraphExec> {
        let copies = mode == BindingMode::PinnedCopy;
        // Not `capture`: recording needs the slots mutably (to bind them).
        stream.begin_capture(CaptureMode::ThreadLocal)?;
        let recorded = self.enqueue_on_slots(stream, slots, k, copies);
        let ended = stream.end_capture();
        recorded?;
        let graph = ended?;
        let exec = self.device.instantiate(&graph)?;
        Stats::bump(&self.stats.captures);
        let size = graph_bytes::<B>(&graph);
        Ok(slots.graphs.insert((self.main[k].id, mode), exec, Vec::new(), size, &self.stats))
    }

    /// Binds main program `k` to the context's arena slots and scratch, into `slots.inputs` /
    /// `slots.outputs`.
    fn bind_slots(&self, slots: &mut Slots<B>, k: usize) -> Result<()> {
        let entry = &self.main[k];
        let Slots { arena, inputs, outputs, .. } = slots;
        inputs.clear();
        for (i, bytes) in entry.input_bytes.iter().enumerate() {
            inputs.push(arena.input_slot(i).sub(0, *bytes)?);
        }
        outputs.clear();
        for (o, bytes) in entry.output_bytes.iter().enumerate() {
            outputs.push(arena.output_slot(o).sub(0, *bytes)?);
        }
        Ok(())
    }

    /// Enqueues main program `k` on the context's arena slots. With `copies`, the single upload of the
    /// staging span comes first and the single download of the output span last (pinned-copy mode).
    fn enqueue_on_slots(&self, stream: &B::Stream, slots: &mut Slots<B>, k: usize, copies: bool) -> Result<()> {
        self.bind_slots(slots, k)?;
        let entry = &self.main[k];
        let scratch = slots.scratch_slice(entry.scratch_bytes);
        let arena = &slots.arena;
        // SAFETY: the arena, its staging and read-back buffers, and the scratch buffer belong to this
        // run context, which outlives the work (contexts are only dropped with the session, after
        // their streams are synchronised by the arena's drop); the caller fences the arena after the
        // work (or after every launch of a graph holding it) before the staging buffer is touched.
        unsafe {
            if copies {
                arena.enqueue_upload(stream, self.upload_span[k])?;
            }
            entry.program.launch(stream, &slots.inputs, &slots.outputs, scratch)?;
            if copies {
                arena.enqueue_download(stream, self.download_span[k])?;
            }
        }
        Ok(())
    }
}
