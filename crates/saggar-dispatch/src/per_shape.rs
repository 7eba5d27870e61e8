//! Per-shape programs: a model with symbolic dimensions besides the batch gets one program per
//! concrete shape, compiled (through the cache) on first use and kept in a table that is looked up
//! under a read lock and written once per new shape. Each runs eagerly, with arenas sized for
//! exactly its shape (no padding).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use saggar_arena::{ArenaLayout, ArenaPool, InputSource, PoolConfig, SlotSpec, WhenExhausted};
use saggar_device::{Backend, Device, DevicePtr, DeviceSlice, Stream};
use saggar_shape::{Chunk, SlicePlan, StableShapeKey};

use crate::compiler::{Program, ProgramCompiler};
use crate::context::DeviceIo;
use crate::error::Result;
use crate::programs::{self, ProgramEntry, ProgramSpec, slot};
use crate::session::Inner;
use crate::stats::Stats;
use crate::tensors::HostTensor;

/// A program compiled for one concrete shape of a per-shape model, with arenas sized for exactly
/// that shape.
pub(crate) struct ShapeProgram<B: Backend, P> {
    entry: ProgramEntry<P>,
    arenas: ArenaPool<B>,
}

/// Per-shape programs by the stable key of their input shapes.
pub(crate) type ShapePrograms<B, P> = RwLock<HashMap<StableShapeKey, Arc<ShapeProgram<B, P>>>>;

impl<B: Backend, C: ProgramCompiler<B>> Inner<B, C> {
    /// The program for a per-shape model's concrete shape (`key` of `dims`, binding order): from
    /// this session, else through the cache. Lookup, compile and insert keep the first program
    /// made for a shape, so concurrent first requests share one.
    fn shape_program<T: AsRef<[u64]>>(
        &self,
        key: StableShapeKey,
        dims: &[T],
    ) -> Result<Arc<ShapeProgram<B, C::Program>>> {
        if let Some(found) = self.shape_programs.read().get(&key) {
            return Ok(found.clone());
        }
        let spec = ProgramSpec { bucket: None, input_dims: dims.iter().map(|d| d.as_ref().to_vec()).collect() };
        let entry =
            programs::get_or_compile(&*self.compiler, &self.device, self.config.cache.as_deref(), &spec, &self.stats)?;
        let inputs: Vec<SlotSpec> =
            self.signature.inputs().iter().zip(&entry.input_bytes).map(|(s, b)| slot(s, *b)).collect();
        let outputs: Vec<SlotSpec> =
            self.signature.outputs().iter().zip(&entry.output_bytes).map(|(s, b)| slot(s, *b)).collect();
        let layout = Arc::new(ArenaLayout::new(&inputs, &outputs, self.config.arena_alignment)?);
        let pool_config = PoolConfig {
            max_arenas: self.config.max_concurrency,
            when_exhausted: WhenExhausted::Wait { timeout: None },
            arena: saggar_arena::ArenaOptions::default().with_gather(self.config.gather),
        };
        let program =
            Arc::new(ShapeProgram { arenas: ArenaPool::new(self.device.clone(), layout, pool_config)?, entry });
        Ok(self.shape_programs.write().entry(key).or_insert(program).clone())
    }

    /// Scratch memory for one run of `sp`, and its slice (null when it needs none). The buffer
    /// must outlive the run.
    fn shape_scratch(&self, sp: &ShapeProgram<B, C::Program>) -> Result<(Option<B::DeviceBuffer>, DeviceSlice)> {
        let scratch = if sp.entry.scratch_bytes > 0 { Some(self.device.alloc(sp.entry.scratch_bytes)?) } else { None };
        let slice =
            scratch.as_ref().map_or(DeviceSlice::from_raw(DevicePtr::NULL, 0), saggar_device::DeviceBuffer::as_slice);
        Ok((scratch, slice))
    }

    /// Runs a checked host request (binding order) on its per-shape program, eagerly on that
    /// program's own arena.
    pub(crate) fn run_shape_program_host<T: AsMut<[u8]>>(
        &self,
        key: StableShapeKey,
        ordered: &[HostTensor<'_>],
        outputs: &mut [T],
    ) -> Result<()> {
        let sp = self.shape_program(key, ordered)?;
        let stream = self.device.create_stream()?;
        let mut arena = sp.arenas.lease()?;
        let sources: Vec<InputSource<'_>> = ordered
            .iter()
            .enumerate()
            .map(|(i, t)| Ok(InputSource::Host { data: t.data, plan: self.pad_plan(i, t.dims, Chunk::whole(1, 1))? }))
            .collect::<Result<_>>()?;
        arena.stage_inputs(&stream, &sources)?;
        let ins: Vec<DeviceSlice> = arena.input_bindings().to_vec();
        let outs: Vec<DeviceSlice> = (0..sp.entry.output_bytes.len())
            .map(|o| arena.output_slot(o).sub(0, sp.entry.output_bytes[o]))
            .collect::<std::result::Result<_, _>>()?;
        let (_scratch, scratch) = self.shape_scratch(&sp)?;
        // SAFETY: the arena and `_scratch` outlive the synchronize below.
        unsafe { sp.entry.program.launch(&stream, &ins, &outs, scratch)? };
        arena.download_outputs(&stream)?;
        let plans: Vec<SlicePlan> = sp
            .entry
            .output_dims
            .iter()
            .enumerate()
            .map(|(o, d)| self.slice_plan(o, d, Chunk::whole(1, 1)))
            .collect::<Result<_>>()?;
        arena.scatter_outputs_with(outputs, |o| plans[o])?;
        stream.synchronize()?;
        Stats::bump(&self.stats.eager_runs);
        Ok(())
    }

    /// Runs a checked device request (`io` from [`crate::request::check_device_io`]) on its
    /// per-shape program, eagerly on the caller's buffers.
    pub(crate) fn run_shape_program_device<T: AsRef<[u64]>>(
        &self,
        key: StableShapeKey,
        dims: &[T],
        io: &DeviceIo,
        stream: &B::Stream,
    ) -> Result<()> {
        let sp = self.shape_program(key, dims)?;
        let trim = |slices: &[DeviceSlice], bytes: &[usize]| {
            slices.iter().zip(bytes).map(|(s, b)| s.sub(0, *b)).collect::<std::result::Result<Vec<_>, _>>()
        };
        let ins = trim(io.inputs(), &sp.entry.input_bytes)?;
        let outs = trim(io.outputs(), &sp.entry.output_bytes)?;
        let (_scratch, scratch) = self.shape_scratch(&sp)?;
        // SAFETY: the caller's buffers stay valid until the run is waited for; `_scratch` until the
        // synchronize below.
        unsafe { sp.entry.program.launch(stream, &ins, &outs, scratch)? };
        stream.synchronize()?;
        Stats::bump(&self.stats.eager_runs);
        Ok(())
    }
}
