//! The graph cache and its policy: each run context keeps its captured graphs keyed by (program,
//! [`BindingMode`]), replays an entry only in the mode that captured it, and handles pointer drift
//! of direct-bind graphs (update in place, else re-capture; eager launches after too many
//! consecutive mismatches).
//!
//! Graph memory is measured, not estimated: each executable graph reports what the driver took for
//! it ([`GraphExec::memory_bytes`]), and one budget covers the whole session. A capture that would
//! exceed it first evicts its own context's least recently used graphs, then the least recently
//! used graphs of the session's other contexts (skipping a context whose cache is locked by a run
//! at that moment); a graph that still does not fit is launched once and not kept. Graphs of
//! programs a live refit retired leave through the same registry, their memory with them.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use saggar_device::{Backend, CaptureMode, Device, DevicePtr, GraphExec, Stream};

use crate::compiler::{Program, ProgramCompiler};
use crate::context::{DeviceIo, Slots};
use crate::error::Result;
use crate::session::Inner;
use crate::stats::Stats;
use crate::tensors::BindingMode;

/// A graph entry's key: the program's id and the binding mode that captured it.
pub(crate) type GraphKey = (usize, BindingMode);

/// Graph memory counted against the session's budget; given back when dropped (with its graph).
pub(crate) struct GraphBytes {
    stats: Arc<Stats>,
    bytes: u64,
}

impl Drop for GraphBytes {
    fn drop(&mut self) {
        self.stats.graph_bytes.fetch_sub(self.bytes, Relaxed);
    }
}

/// The session's graph-memory budget, and every run context's graph cache so a capture can trim the
/// least recently used graphs of any context.
pub(crate) struct GraphMemory<B: Backend> {
    budget: Option<u64>,
    stats: Arc<Stats>,
    caches: Mutex<Vec<Weak<Mutex<GraphEntries<B>>>>>,
}

impl<B: Backend> GraphMemory<B> {
    pub(crate) fn new(budget: Option<u64>, stats: Arc<Stats>) -> Self {
        GraphMemory { budget, stats, caches: Mutex::new(Vec::new()) }
    }

    /// A new run context's graph cache, registered for trimming.
    pub(crate) fn new_cache(&self) -> GraphCache<B> {
        let shared = Arc::new(Mutex::new(GraphEntries { entries: HashMap::new() }));
        let mut caches = self.caches.lock();
        caches.retain(|c| c.strong_count() > 0);
        caches.push(Arc::downgrade(&shared));
        GraphCache { shared, tick: 0 }
    }

    /// Counts `bytes` against the budget if they fit; `None` otherwise.
    fn try_take(&self, bytes: u64) -> Option<GraphBytes> {
        let used = &self.stats.graph_bytes;
        let budget = self.budget.unwrap_or(u64::MAX);
        used.fetch_update(Relaxed, Relaxed, |u| u.checked_add(bytes).filter(|n| *n <= budget)).ok()?;
        self.stats.graph_bytes_peak.fetch_max(used.load(Relaxed), Relaxed);
        Some(GraphBytes { stats: self.stats.clone(), bytes })
    }

    /// Counts `bytes` of a new graph against the budget, evicting first the least recently used
    /// graphs of `own` (the capturing context's entries, locked by the caller), then those of the
    /// other contexts. `None` when even that leaves too little room.
    pub(crate) fn reserve(&self, bytes: u64, mut own: Option<&mut GraphEntries<B>>) -> Option<GraphBytes> {
        loop {
            if let Some(taken) = self.try_take(bytes) {
                return Some(taken);
            }
            let evicted = match own.as_deref_mut() {
                Some(entries) if !entries.entries.is_empty() => entries.evict_lru(),
                _ => self.trim_other_contexts(),
            };
            if !evicted {
                return None;
            }
            Stats::bump(&self.stats.evicted_graphs);
        }
    }

    /// Drops the graphs of every program for which `keep` is false in each context whose cache is
    /// not locked by a run now (a locked one drops its own on its next run); returns how many were
    /// dropped. Their memory goes back to the budget at once.
    pub(crate) fn retain_programs(&self, keep: impl Fn(usize) -> bool) -> usize {
        let caches: Vec<Arc<Mutex<GraphEntries<B>>>> = self.caches.lock().iter().filter_map(Weak::upgrade).collect();
        caches.iter().filter_map(|cache| cache.try_lock()).map(|mut entries| entries.retain_programs(&keep)).sum()
    }

    /// Evicts the least recently used graph among the contexts whose cache is not locked now (the
    /// caller's own is locked, so it is skipped). Returns whether one was evicted.
    fn trim_other_contexts(&self) -> bool {
        let caches: Vec<Arc<Mutex<GraphEntries<B>>>> = self.caches.lock().iter().filter_map(Weak::upgrade).collect();
        let mut oldest: Option<(u64, usize, GraphKey)> = None;
        for (i, cache) in caches.iter().enumerate() {
            let Some(entries) = cache.try_lock() else { continue };
            if let Some((key, used)) = entries.lru()
                && oldest.is_none_or(|(o, ..)| used < o)
            {
                oldest = Some((used, i, key));
            }
        }
        let Some((_, i, key)) = oldest else { return false };
        match caches[i].try_lock() {
            Some(mut entries) => entries.entries.remove(&key).is_some(),
            // Taken by a run since: try again (the caller loops).
            None => true,
        }
    }
}

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
    /// The session's request count when it was last used: comparable across contexts.
    last_used: u64,
    /// Its measured memory, counted against the session's budget while the entry lives.
    bytes: Option<GraphBytes>,
}

impl<B: Backend> GraphEntry<B> {
    /// The executable graph, if `mode` may replay it: entries are keyed by mode, so a mode mismatch
    /// is an invariant check, not a lookup (a bug, treated as a missing entry).
    fn replayable(&self, mode: BindingMode) -> Option<&B::GraphExec> {
        debug_assert_eq!(self.mode, mode, "graph entries are only replayed by the mode that captured them");
        self.exec.as_ref().filter(|e| self.mode == mode && !e.is_destroyed())
    }
}

/// One run context's graphs.
pub(crate) struct GraphEntries<B: Backend> {
    entries: HashMap<GraphKey, GraphEntry<B>>,
}

impl<B: Backend> GraphEntries<B> {
    /// The least recently used entry holding a graph, and when it was used.
    fn lru(&self) -> Option<(GraphKey, u64)> {
        self.entries
            .iter()
            .filter(|(_, e)| e.bytes.is_some())
            .min_by_key(|(_, e)| e.last_used)
            .map(|(k, e)| (*k, e.last_used))
    }

    /// Drops every graph of a program for which `keep` is false (its memory goes back to the
    /// session's budget); returns how many were dropped.
    fn retain_programs(&mut self, keep: &impl Fn(usize) -> bool) -> usize {
        let before = self.entries.len();
        self.entries.retain(|key, _| keep(key.0));
        before - self.entries.len()
    }

    /// Evicts the least recently used entry; whether there was one.
    fn evict_lru(&mut self) -> bool {
        self.lru().is_some_and(|(k, _)| self.entries.remove(&k).is_some())
    }

    /// The live graph of `key` that `mode` may replay, marked used at `tick`.
    fn live(&mut self, key: GraphKey, tick: u64) -> Option<&B::GraphExec> {
        let entry = self.entries.get_mut(&key)?;
        entry.last_used = tick;
        entry.replayable(key.1)
    }

    /// Keeps a freshly captured graph whose memory `bytes` was counted, and returns it.
    fn insert(
        &mut self,
        key: GraphKey,
        exec: B::GraphExec,
        baked: Vec<DevicePtr>,
        bytes: GraphBytes,
        tick: u64,
    ) -> &B::GraphExec {
        let entry = GraphEntry { exec: None, mode: key.1, baked, drift: 0, last_used: tick, bytes: Some(bytes) };
        let slot = match self.entries.entry(key) {
            Entry::Occupied(mut occupied) => {
                occupied.insert(entry);
                occupied.into_mut()
            }
            Entry::Vacant(vacant) => vacant.insert(entry),
        };
        slot.exec.insert(exec)
    }
}

/// A run context's handle on its graphs: shared with the session's [`GraphMemory`] for trimming;
/// locked by the context's run (uncontended unless a capture elsewhere is trimming).
pub(crate) struct GraphCache<B: Backend> {
    pub(crate) shared: Arc<Mutex<GraphEntries<B>>>,
    /// The session's request count at this run's start; the least recently used entries go first.
    pub(crate) tick: u64,
}

impl<B: Backend> GraphCache<B> {
    /// Drops this context's graphs of every program for which `keep` is false, giving their memory
    /// back to the session's budget; returns how many were dropped.
    pub(crate) fn retain_programs(&self, keep: impl Fn(usize) -> bool) -> usize {
        self.shared.lock().retain_programs(&keep)
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

    /// Launches a graph that did not fit the graph-memory budget once, and drops it.
    fn replay_unkept(&self, stream: &B::Stream, exec: B::GraphExec) -> Result<bool> {
        Stats::bump(&self.stats.graphs_over_budget);
        self.replay(stream, &exec)?;
        // Dropping an executable graph whose launch is in flight is allowed: the driver frees it once
        // the launch completes (the host backend's replay holds its own reference).
        drop(exec);
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
        let mut graphs = slots.graphs.shared.lock();
        // The steady state: a live graph whose baked pointers are this request's.
        if let Some(graph) = graphs.entries.get_mut(&key)
            && let Some(exec) = &graph.exec
            && graph.baked == io.pointers
        {
            graph.drift = 0;
            graph.last_used = tick;
            return self.replay(stream, exec);
        }
        let scratch = slots.scratch_slice(entry.scratch_bytes);
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
        if !graphs.entries.contains_key(&key) {
            let graph = capture::<B>(stream, || Ok(launch()?))?;
            let exec = self.device.instantiate(&graph)?;
            Stats::bump(&self.stats.captures);
            let Some(bytes) = self.graph_memory.reserve(exec.memory_bytes(), Some(&mut graphs)) else {
                return self.replay_unkept(stream, exec);
            };
            let exec = graphs.insert(key, exec, io.pointers.clone(), bytes, tick);
            return self.replay(stream, exec);
        }
        let graph_entry = graphs.entries.get_mut(&key).expect("checked above");
        graph_entry.last_used = tick;
        if graph_entry.exec.is_some() {
            graph_entry.drift += 1;
            if graph_entry.drift > self.config.graphs.max_consecutive_drift {
                graph_entry.exec = None;
                graph_entry.bytes = None;
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
            // The old graph's memory is given back before the new one is counted.
            graph_entry.bytes = None;
            let fresh = self.device.instantiate(&graph)?;
            Stats::bump(&self.stats.recaptures);
            let Some(bytes) = self.graph_memory.reserve(fresh.memory_bytes(), None) else {
                graphs.entries.remove(&key);
                return self.replay_unkept(stream, fresh);
            };
            *exec = fresh;
            graph_entry.bytes = Some(bytes);
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
        if mode == BindingMode::PinnedCopy {
            // Streaming stores into staging (a gather's, a request's writes) reach memory before the
            // upload reads them: a replayed graph runs none of `enqueue_upload`'s host code, which
            // fences them when it enqueues.
            slots.arena.publish_staged();
        }
        if !self.config.graphs.enabled {
            self.enqueue_on_slots(stream, slots, k, mode == BindingMode::PinnedCopy)?;
            Stats::bump(&self.stats.eager_runs);
            return Ok(false);
        }
        if let Some(exec) = slots.graphs.shared.lock().live((self.main[k].id, mode), slots.graphs.tick) {
            return self.replay(stream, exec);
        }
        self.capture_on_slots(stream, slots, k, mode, |exec| self.replay(stream, exec))
    }

    /// Captures the graph of main program `k` on the context's arena slots in `mode`, keeps it when
    /// the graph-memory budget allows, and gives it to `then` (a graph that does not fit is launched
    /// once by `then` and dropped).
    pub(crate) fn capture_on_slots(
        &self,
        stream: &B::Stream,
        slots: &mut Slots<B>,
        k: usize,
        mode: BindingMode,
        then: impl FnOnce(&B::GraphExec) -> Result<bool>,
    ) -> Result<bool> {
        let copies = mode == BindingMode::PinnedCopy;
        // Not `capture`: recording needs the slots mutably (to bind them).
        stream.begin_capture(CaptureMode::ThreadLocal)?;
        let recorded = self.enqueue_on_slots(stream, slots, k, copies);
        let ended = stream.end_capture();
        recorded?;
        let graph = ended?;
        let exec = self.device.instantiate(&graph)?;
        Stats::bump(&self.stats.captures);
        let mut graphs = slots.graphs.shared.lock();
        let Some(bytes) = self.graph_memory.reserve(exec.memory_bytes(), Some(&mut graphs)) else {
            drop(graphs);
            Stats::bump(&self.stats.graphs_over_budget);
            // Dropped after `then` launched it: the driver frees it once that launch completes.
            return then(&exec);
        };
        then(graphs.insert((self.main[k].id, mode), exec, Vec::new(), bytes, slots.graphs.tick))
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
