//! Per-shape programs: a model with symbolic dimensions besides the batch gets one program per
//! concrete shape, made (through the cache) on its first request and kept in a bounded table.
//!
//! - **One per-key lock.** Lookup, compile and insert of a shape run under that shape's own lock
//!   (the table's lock is only held to find or add the key's slot and to make room), so concurrent
//!   first requests of one shape make one program, and requests of other shapes are not held up.
//! - **Bounded.** At most [`crate::SessionConfigBuilder::max_shape_programs`] programs are kept,
//!   counting those being made. Room is made before a program is made, by evicting the least
//!   recently used program that no request is running; when every kept program is in use, the
//!   request runs on a program that is not kept, and is counted.
//! - **Graphs per shape, lazily.** Each program keeps a small pool of run slots (an arena sized for
//!   exactly its shape, scratch memory, and a pinned-copy graph captured on the slot's first host
//!   run), so a repeated shape replays one graph on stable addresses; streams are the run context's.
//!   Device requests launch eagerly on the caller's buffers with the slot's scratch.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::{Mutex, RwLock};
use saggar_arena::{ArenaLayout, ArenaLease, ArenaPool, InputSource, Pool, PoolConfig, SlotSpec, WhenExhausted};
use saggar_device::{Backend, Device, DevicePtr, DeviceSlice, GraphExec, Stream};
use saggar_shape::{Chunk, PadPlan, SlicePlan, StableShapeKey};

use crate::compiler::{MAX_VALUE_INPUT_BYTES, Program, ProgramCompiler};
use crate::context::DeviceIo;
use crate::error::{DispatchError, Result};
use crate::graphs::{GraphBytes, capture};
use crate::programs::{self, ProgramEntry, ProgramSpec, slot};
use crate::session::Inner;
use crate::stats::Stats;
use crate::tensors::HostTensor;

/// What one run of a per-shape program uses, kept for the program's life so runs create nothing.
struct ShapeRun<B: Backend> {
    arena: ArenaLease<B>,
    scratch: Option<B::DeviceBuffer>,
    /// The pinned-copy graph on this arena, captured on the first host run; with its counted memory.
    graph: Option<(B::GraphExec, GraphBytes)>,
}

impl<B: Backend> ShapeRun<B> {
    fn scratch(&self) -> DeviceSlice {
        self.scratch.as_ref().map_or(DeviceSlice::from_raw(DevicePtr::NULL, 0), saggar_device::DeviceBuffer::as_slice)
    }
}

/// A program compiled for one concrete shape of a per-shape model, with what its runs need.
pub(crate) struct ShapeProgram<B: Backend, P> {
    /// Dropped first: the run slots' graphs and arenas go before the program they launch.
    runs: Pool<ShapeRun<B>>,
    entry: ProgramEntry<P>,
    /// Bytes of the staging span and of the output span one run copies.
    upload_span: usize,
    download_span: usize,
    /// The exact-shape plans of every run (no padding, no slicing).
    pad_plans: Vec<PadPlan>,
    slice_plans: Vec<SlicePlan>,
}

/// One shape's place in the table: its lock and, once made and kept, its program.
struct ShapeSlot<B: Backend, P> {
    /// Held while the shape's program is looked up in the cache, compiled and loaded.
    making: Mutex<()>,
    program: RwLock<Option<Arc<ShapeProgram<B, P>>>>,
    /// The session's request count when it was last used.
    last_used: AtomicU64,
}

struct TableState<B: Backend, P> {
    slots: HashMap<StableShapeKey, Arc<ShapeSlot<B, P>>>,
    /// Programs kept, plus those being made (room is reserved before a program is made).
    held: usize,
}

/// A per-shape model's programs by the stable key of their input shapes, at most `limit` of them.
pub(crate) struct ShapeTable<B: Backend, P> {
    limit: usize,
    state: RwLock<TableState<B, P>>,
}

impl<B: Backend, P> ShapeTable<B, P> {
    pub(crate) fn new(limit: usize) -> Self {
        ShapeTable { limit, state: RwLock::new(TableState { slots: HashMap::new(), held: 0 }) }
    }

    /// The kept program of `key`, marked used at `tick`.
    fn resident(&self, key: StableShapeKey, tick: u64) -> Option<Arc<ShapeProgram<B, P>>> {
        let state = self.state.read();
        let slot = state.slots.get(&key)?;
        let program = slot.program.read().clone()?;
        slot.last_used.store(tick, Relaxed);
        Some(program)
    }

    /// The program of `key`: kept, else made by `make` under the key's lock (and kept if there is
    /// room or a program nobody runs can be evicted to make room).
    fn get_or_make(
        &self,
        key: StableShapeKey,
        tick: u64,
        stats: &Stats,
        make: impl FnOnce() -> Result<ShapeProgram<B, P>>,
    ) -> Result<Arc<ShapeProgram<B, P>>> {
        if let Some(program) = self.resident(key, tick) {
            return Ok(program);
        }
        let slot = self
            .state
            .write()
            .slots
            .entry(key)
            .or_insert_with(|| {
                Arc::new(ShapeSlot { making: Mutex::new(()), program: RwLock::new(None), last_used: AtomicU64::new(0) })
            })
            .clone();
        let made = self.make_in(&slot, key, tick, stats, make);
        self.prune(key, &slot);
        made
    }

    fn make_in(
        &self,
        slot: &Arc<ShapeSlot<B, P>>,
        key: StableShapeKey,
        tick: u64,
        stats: &Stats,
        make: impl FnOnce() -> Result<ShapeProgram<B, P>>,
    ) -> Result<Arc<ShapeProgram<B, P>>> {
        let _making = slot.making.lock();
        // Double-checked: a request we waited for may have made it.
        if let Some(program) = slot.program.read().clone() {
            slot.last_used.store(tick, Relaxed);
            return Ok(program);
        }
        let (reserved, evicted) = self.reserve(key, stats);
        // Evicted programs are freed outside the table's lock.
        drop(evicted);
        let made = make().map(Arc::new);
        let mut state = self.state.write();
        if !reserved {
            Stats::bump(&stats.shape_overflow_runs);
            return made;
        }
        let Ok(program) = &made else {
            state.held -= 1;
            return made;
        };
        // The slot may have been evicted (with an earlier program of this shape) between this request
        // finding it and taking its lock; then the table's slot for the key, if another request
        // made one meanwhile, is the one to use.
        match state.slots.get(&key) {
            Some(current) if Arc::ptr_eq(current, slot) => {}
            Some(current) if current.program.read().is_some() => {
                state.held -= 1;
                return made;
            }
            _ => {
                state.slots.insert(key, slot.clone());
            }
        }
        *slot.program.write() = Some(program.clone());
        slot.last_used.store(tick, Relaxed);
        Stats::bump(&stats.shape_programs);
        made
    }

    /// Reserves room for one more program, evicting the least recently used programs that no
    /// request holds and no request is making. Returns whether room was reserved, and the evicted
    /// programs (to drop once the lock is released).
    fn reserve(&self, key: StableShapeKey, stats: &Stats) -> (bool, Vec<Arc<ShapeProgram<B, P>>>) {
        let mut state = self.state.write();
        let mut evicted = Vec::new();
        while state.held >= self.limit {
            // Under the table's write lock nobody takes a new reference to a kept program through
            // the table (`resident` needs the read lock); a request may still hold or wait for a
            // slot's own lock, so a victim's lock is held while its program is taken out.
            let mut idle: Vec<(u64, StableShapeKey)> = state
                .slots
                .iter()
                .filter(|(k, s)| **k != key && s.program.read().as_ref().is_some_and(|p| Arc::strong_count(p) == 1))
                .map(|(k, s)| (s.last_used.load(Relaxed), *k))
                .collect();
            idle.sort_unstable();
            let taken = idle.into_iter().find_map(|(_, k)| {
                let slot = state.slots.get(&k)?.clone();
                let _making = slot.making.try_lock()?;
                let program = slot.program.write().take_if(|p| Arc::strong_count(p) == 1)?;
                Some((k, program))
            });
            let Some((victim, program)) = taken else { return (false, evicted) };
            state.slots.remove(&victim);
            evicted.push(program);
            state.held -= 1;
            stats.shape_programs.fetch_sub(1, Relaxed);
            Stats::bump(&stats.shape_program_evictions);
        }
        state.held += 1;
        (true, evicted)
    }

    /// Removes `key`'s slot if it holds no program and nobody but the table and this caller holds
    /// it, so the table never keeps empty slots of failed or unkept makes.
    fn prune(&self, key: StableShapeKey, slot: &Arc<ShapeSlot<B, P>>) {
        let mut state = self.state.write();
        if let Some(current) = state.slots.get(&key)
            && Arc::ptr_eq(current, slot)
            && Arc::strong_count(slot) == 2
            && slot.program.read().is_none()
        {
            state.slots.remove(&key);
        }
    }
}

impl<B: Backend, C: ProgramCompiler<B>> Inner<B, C> {
    /// The program for a per-shape model's concrete shape (`key` of `dims`, binding order) and
    /// value inputs' `values`: from the table, else through the cache, under the key's lock.
    fn shape_program<T: AsRef<[u64]>>(
        &self,
        key: StableShapeKey,
        dims: &[T],
        values: Vec<(usize, Vec<u8>)>,
    ) -> Result<Arc<ShapeProgram<B, C::Program>>> {
        let tick = self.stats.requests.load(Relaxed);
        let key = key.with_values(&values.iter().map(|(i, v)| (*i, v.as_slice())).collect::<Vec<_>>());
        self.shape_programs.get_or_make(key, tick, &self.stats, || self.make_shape_program(dims, values))
    }

    /// The output shapes of a host request whose input extents do not fix them (a model with value
    /// inputs, or an extent computed inside the model, such as a loop body's growing carried
    /// value), from its program (made now if it is new, and kept for the run); `None` for a model
    /// served from buckets, whose outputs its batch fixes.
    pub(crate) fn program_output_dims(
        &self,
        bindings: &saggar_shape::Bindings<'_>,
        ordered: &[HostTensor<'_>],
    ) -> Result<Option<Vec<Vec<u64>>>> {
        if matches!(self.model, crate::plan::Model::Bucketed(_)) {
            return Ok(None);
        }
        let sp = self.shape_program(bindings.stable_key(), ordered, self.host_values(ordered)?)?;
        Ok(Some(sp.entry.output_dims.clone()))
    }

    /// The byte length of value input `index` of `dims` elements, checked against
    /// [`MAX_VALUE_INPUT_BYTES`].
    fn value_bytes<T: AsRef<[u64]>>(&self, index: usize, dims: &[T]) -> Result<usize> {
        let dtype = self.signature.inputs()[index].dtype();
        let bytes = dims[index]
            .as_ref()
            .iter()
            .try_fold(dtype.size_bytes() as u64, |n, &d| n.checked_mul(d))
            .unwrap_or(u64::MAX);
        if bytes > MAX_VALUE_INPUT_BYTES as u64 {
            return Err(DispatchError::LimitExceeded {
                what: "bytes in one value input (an input whose values fix the program)",
                requested: bytes,
                limit: MAX_VALUE_INPUT_BYTES as u64,
            });
        }
        Ok(bytes as usize)
    }

    /// The values of the model's value inputs in a host request (binding order).
    fn host_values(&self, ordered: &[HostTensor<'_>]) -> Result<Vec<(usize, Vec<u8>)>> {
        self.compiler
            .model()
            .value_inputs
            .iter()
            .map(|&i| {
                let n = self.value_bytes(i, ordered)?;
                Ok((i, ordered[i].data.get(..n).unwrap_or(ordered[i].data).to_vec()))
            })
            .collect()
    }

    /// The values of the model's value inputs in a device request, copied to the host (one
    /// synchronisation, counted).
    fn device_values<T: AsRef<[u64]>>(
        &self,
        dims: &[T],
        io: &DeviceIo,
        stream: &B::Stream,
    ) -> Result<Vec<(usize, Vec<u8>)>> {
        let value_inputs = &self.compiler.model().value_inputs;
        if value_inputs.is_empty() {
            return Ok(Vec::new());
        }
        let values = value_inputs
            .iter()
            .map(|&i| {
                let mut bytes = vec![0u8; self.value_bytes(i, dims)?];
                stream.download(io.inputs()[i].sub(0, bytes.len())?, &mut bytes)?;
                Ok((i, bytes))
            })
            .collect::<Result<Vec<_>>>()?;
        Stats::bump(&self.stats.value_input_reads);
        Ok(values)
    }

    fn make_shape_program<T: AsRef<[u64]>>(
        &self,
        dims: &[T],
        values: Vec<(usize, Vec<u8>)>,
    ) -> Result<ShapeProgram<B, C::Program>> {
        let mut spec = ProgramSpec::new(None, dims.iter().map(|d| d.as_ref().to_vec()).collect());
        spec.input_values = values;
        let entry =
            programs::get_or_compile(&*self.compiler, &self.device, self.config.cache.as_deref(), &spec, &self.stats)?;
        let inputs: Vec<SlotSpec> =
            self.signature.inputs().iter().zip(&entry.input_bytes).map(|(s, b)| slot(s, *b)).collect();
        let outputs: Vec<SlotSpec> =
            self.signature.outputs().iter().zip(&entry.output_bytes).map(|(s, b)| slot(s, *b)).collect();
        let layout = Arc::new(ArenaLayout::new(&inputs, &outputs, self.config.arena_alignment)?);
        let span = |slots: &[saggar_arena::Slot], bytes: &[usize]| {
            slots.iter().zip(bytes).map(|(s, b)| s.offset + b).max().unwrap_or(0)
        };
        let upload_span = span(layout.inputs(), &entry.input_bytes);
        let download_span = span(layout.outputs(), &entry.output_bytes);
        let wait = WhenExhausted::Wait { timeout: None };
        // A program serves at most one request per run context at a time.
        let concurrency = self.config.max_concurrency;
        let arenas = ArenaPool::with_builtins(
            self.device.clone(),
            vec![layout],
            PoolConfig {
                max_arenas: concurrency,
                when_exhausted: wait,
                arena: saggar_arena::ArenaOptions::default()
                    .with_gather(self.config.gather)
                    .with_kernel_copies_up_to(self.config.kernel_copies_up_to),
            },
            self.builtins.clone(),
        )?;
        let (device, scratch_bytes) = (self.device.clone(), entry.scratch_bytes);
        let runs = Pool::new(concurrency, wait, move || {
            let scratch = if scratch_bytes > 0 { Some(device.alloc(scratch_bytes)?) } else { None };
            Ok(ShapeRun { arena: arenas.lease()?, scratch, graph: None })
        })?;
        let pad_plans = dims
            .iter()
            .enumerate()
            .map(|(i, d)| self.pad_plan(i, d.as_ref(), Chunk::whole(1, 1)))
            .collect::<Result<_>>()?;
        let slice_plans = entry
            .output_dims
            .iter()
            .enumerate()
            .map(|(o, d)| self.slice_plan(o, d, Chunk::whole(1, 1)))
            .collect::<Result<_>>()?;
        Ok(ShapeProgram { runs, entry, upload_span, download_span, pad_plans, slice_plans })
    }

    /// Enqueues one run of `sp` on `run`'s arena: the single upload, the program, the single
    /// download.
    fn enqueue_shape_run(&self, stream: &B::Stream, sp: &ShapeProgram<B, C::Program>, run: &ShapeRun<B>) -> Result<()> {
        let arena = &run.arena;
        let outs: Vec<DeviceSlice> = (0..sp.entry.output_bytes.len())
            .map(|o| arena.output_slot(o).sub(0, sp.entry.output_bytes[o]))
            .collect::<std::result::Result<_, _>>()?;
        // SAFETY: the arena (staging, slots, read-back) and the scratch belong to `run`, which the
        // program keeps until it is dropped, after its arena's fence; the caller fences the arena
        // after this work (or after every launch of a graph holding it).
        unsafe {
            arena.enqueue_upload(stream, sp.upload_span)?;
            sp.entry.program.launch(stream, arena.input_bindings(), &outs, run.scratch())?;
            arena.enqueue_download(stream, sp.download_span)?;
        }
        Ok(())
    }

    /// Runs a checked host request (binding order) on its per-shape program, on `stream` (the run
    /// context's): replays the run slot's graph (capturing it on the slot's first run) or launches
    /// eagerly. Returns whether a graph was replayed.
    pub(crate) fn run_shape_program_host<T: AsMut<[u8]>>(
        &self,
        stream: &B::Stream,
        key: StableShapeKey,
        ordered: &[HostTensor<'_>],
        outputs: &mut [T],
    ) -> Result<bool> {
        let sp = self.shape_program(key, ordered, self.host_values(ordered)?)?;
        let mut run = sp.runs.lease()?;
        run.arena.gather_host_with(|i| InputSource::Host { data: ordered[i].data, plan: sp.pad_plans[i] })?;
        let replayed = if !self.config.graphs.enabled {
            self.enqueue_shape_run(stream, &sp, &run)?;
            Stats::bump(&self.stats.eager_runs);
            false
        } else {
            if run.graph.is_none() {
                let graph = capture::<B>(stream, || self.enqueue_shape_run(stream, &sp, &run))?;
                let exec = self.device.instantiate(&graph)?;
                Stats::bump(&self.stats.captures);
                match self.graph_memory.reserve(exec.memory_bytes(), None) {
                    Some(bytes) => run.graph = Some((exec, bytes)),
                    None => {
                        Stats::bump(&self.stats.graphs_over_budget);
                        self.replay_shape(stream, &exec)?;
                        return self.finish_shape_run(stream, &sp, &mut run, outputs).map(|()| true);
                    }
                }
            }
            let (exec, _) = run.graph.as_ref().expect("captured above");
            self.replay_shape(stream, exec)?;
            true
        };
        self.finish_shape_run(stream, &sp, &mut run, outputs)?;
        Ok(replayed)
    }

    fn replay_shape(&self, stream: &B::Stream, exec: &B::GraphExec) -> Result<()> {
        // SAFETY: the graph holds the run slot's arena and scratch, which outlive it (see
        // `enqueue_shape_run`); the caller fences the arena after the launch.
        unsafe { stream.launch_graph(exec)? };
        Stats::bump(&self.stats.replays);
        Ok(())
    }

    /// Fences the run's arena and scatters its outputs (waiting for the fence).
    fn finish_shape_run<T: AsMut<[u8]>>(
        &self,
        stream: &B::Stream,
        sp: &ShapeProgram<B, C::Program>,
        run: &mut ShapeRun<B>,
        outputs: &mut [T],
    ) -> Result<()> {
        run.arena.fence(stream)?;
        run.arena.scatter_outputs_with(outputs, |o| sp.slice_plans[o])?;
        Ok(())
    }

    /// Runs a checked device request (`io` from [`crate::request::check_device_io`]) on its
    /// per-shape program, eagerly on the caller's buffers with a run slot's scratch, and waits for it
    /// (the slot goes back to the program afterwards).
    pub(crate) fn run_shape_program_device<T: AsRef<[u64]>>(
        &self,
        key: StableShapeKey,
        dims: &[T],
        io: &DeviceIo,
        stream: &B::Stream,
    ) -> Result<()> {
        let sp = self.shape_program(key, dims, self.device_values(dims, io, stream)?)?;
        // Outputs whose extents the values fix were sized from the caller's shapes: they must be the
        // program's.
        if let Some(o) = (0..sp.entry.output_bytes.len()).find(|&o| io.outputs()[o].len() != sp.entry.output_bytes[o]) {
            let spec = &self.signature.outputs()[o];
            let elements = io.outputs()[o].len() / spec.dtype().size_bytes().max(1);
            return Err(DispatchError::OutputShape {
                output: spec.name().to_string(),
                expected: sp.entry.output_dims[o].clone(),
                actual: (spec.name().to_string(), spec.dtype(), vec![elements as u64]),
            });
        }
        let run = sp.runs.lease()?;
        let trim = |slices: &[DeviceSlice], bytes: &[usize]| {
            slices.iter().zip(bytes).map(|(s, b)| s.sub(0, *b)).collect::<std::result::Result<Vec<_>, _>>()
        };
        let ins = trim(io.inputs(), &sp.entry.input_bytes)?;
        let outs = trim(io.outputs(), &sp.entry.output_bytes)?;
        // SAFETY: the caller's buffers stay valid until the run is waited for; the slot's scratch until
        // the synchronize below, before the slot goes back.
        unsafe { sp.entry.program.launch(stream, &ins, &outs, run.scratch())? };
        stream.synchronize()?;
        Stats::bump(&self.stats.eager_runs);
        Ok(())
    }
}
