//! The host path: requests whose inputs and outputs are host memory ([`Session::run`],
//! [`Session::run_into`]). A request in binding order that one main program serves is ultra-fast
//! (the context's last run had the same program, mode and batch: its plans are reused) or fast (the
//! plans are made); any other is standard (split into chunks, or run by a per-shape program). Each
//! chunk is gathered into pinned staging, run in pinned-copy mode, and scattered back.
//!
//! [`Session::run_into_timed`] takes this path too, with a [`StageClock`] that times the stages of
//! an ultra-fast or fast request (`timing.rs`); untimed requests pass `None`.

use saggar_arena::InputSource;
use saggar_device::Backend;

use crate::compiler::ProgramCompiler;
use crate::context::{LastRun, RunContext, Slots};
use crate::error::Result;
use crate::plan::{Model, Single};
use crate::request::{self, Checked};
use crate::session::{Inner, Session};
use crate::tensors::{BindingMode, HostTensor, OwnedTensor, RunInfo, RunPath};
use crate::timing::StageClock;

/// Whether a host request's buffers were checked before its run (outputs allocated at the request's
/// sizes after its inputs were checked) or are the caller's, still to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostBuffers {
    Checked,
    Unchecked,
}

impl<B: Backend, C: ProgramCompiler<B>> Inner<B, C> {
    /// The output shapes of a checked request: from the signature, else (extents that input values
    /// fix) from the request's program.
    pub(crate) fn output_dims(&self, request: &Checked<'_, '_, HostTensor<'_>>) -> Result<Vec<Vec<u64>>> {
        match (0..self.signature.outputs().len())
            .map(|o| request.bindings.output_shape(o).map(|d| d.to_vec()))
            .collect::<std::result::Result<Vec<_>, _>>()
        {
            Ok(dims) => Ok(dims),
            Err(e) => Ok(self.program_output_dims(&request.bindings, &request.ordered)?.ok_or(e)?),
        }
    }
}

impl<B: Backend, C: ProgramCompiler<B>> Session<B, C> {
    /// The output shapes of a request whose value inputs ([`crate::ModelSpec::value_inputs`]) carry
    /// their bytes; the other inputs' data is not read. A segment chain sizes the device buffers of
    /// a segment's outputs with it.
    pub(crate) fn request_output_dims(&self, inputs: &[HostTensor<'_>]) -> Result<Vec<Vec<u64>>> {
        let request = request::check(&self.inner.signature, &self.inner.guard, inputs)?;
        self.inner.output_dims(&request)
    }

    /// Runs one request from host memory and returns every output, sliced to the request's batch.
    /// The request's limits and input buffers are checked before its outputs are allocated.
    pub fn run(&self, inputs: &[HostTensor<'_>]) -> Result<Vec<OwnedTensor>> {
        if let Some(chain) = &self.inner.chain {
            let inner = &*self.inner;
            return inner.counted(|| {
                let request = request::check(&inner.signature, &inner.guard, inputs)?;
                request::check_host_inputs(&inner.signature, &request.ordered)?;
                let names: Vec<&str> = inner.signature.outputs().iter().map(|o| o.name()).collect();
                chain.run(&request.ordered, &names, &inner.stats.segment_reads)
            });
        }
        let (result, _lease) = self.inner.instrumented(|inner, ctx| {
            let request = request::check(&inner.signature, &inner.guard, inputs)?;
            request::check_host_inputs(&inner.signature, &request.ordered)?;
            let dims = inner.output_dims(&request)?;
            let specs = inner.signature.outputs();
            let mut buffers: Vec<AlignedBuffer> = specs
                .iter()
                .zip(&dims)
                .map(|(spec, d)| Ok(AlignedBuffer::new(request::request_bytes(spec, d)?)))
                .collect::<Result<_>>()?;
            let info = inner.run_host_checked(ctx, &request, &mut buffers, HostBuffers::Checked, None)?;
            let outputs = specs
                .iter()
                .zip(dims)
                .zip(buffers)
                .map(|((spec, dims), buf)| OwnedTensor {
                    name: spec.name().to_string(),
                    dtype: spec.dtype(),
                    dims,
                    data: buf.into_vec(),
                })
                .collect();
            Ok((outputs, info))
        });
        let (outputs, info) = result?;
        self.inner.stats.record_path(info.path);
        Ok(outputs)
    }

    /// Runs one request from host memory into the caller's output buffers (binding order, each sized
    /// for the request's real batch). Allocates nothing on the ultra-fast and fast paths.
    pub fn run_into<T: AsMut<[u8]>>(&self, inputs: &[HostTensor<'_>], outputs: &mut [T]) -> Result<RunInfo> {
        if self.inner.chain.is_some() {
            return self.run_chain_into(inputs, outputs);
        }
        let (result, _lease) = self.inner.instrumented(|inner, ctx| inner.run_host_into(ctx, inputs, outputs, None));
        let info = result?;
        self.inner.stats.record_path(info.path);
        Ok(info)
    }
}

impl<B: Backend, C: ProgramCompiler<B>> Session<B, C> {
    /// [`Session::run_into`] of a segmented model: runs it, then copies each output into the
    /// caller's buffer, which must hold its bytes (the extents are known only now).
    fn run_chain_into<T: AsMut<[u8]>>(&self, inputs: &[HostTensor<'_>], outputs: &mut [T]) -> Result<RunInfo> {
        request::check_output_count(&self.inner.signature, outputs.len())?;
        let produced = self.run(inputs)?;
        for (buffer, tensor) in outputs.iter_mut().zip(&produced) {
            let buffer = buffer.as_mut();
            if buffer.len() < tensor.data.len() {
                return Err(crate::DispatchError::BufferTooSmall {
                    role: "output",
                    name: tensor.name.clone(),
                    needed: tensor.data.len(),
                    actual: buffer.len(),
                });
            }
            buffer[..tensor.data.len()].copy_from_slice(&tensor.data);
        }
        Ok(RunInfo {
            path: RunPath::Standard,
            mode: BindingMode::PinnedCopy,
            batch: None,
            bucket: None,
            chunks: 1,
            replayed: false,
        })
    }
}

/// A host buffer of `len` bytes aligned to 8, so outputs of any element type can be scattered into it.
struct AlignedBuffer {
    words: Vec<u64>,
    len: usize,
}

impl AlignedBuffer {
    fn new(len: usize) -> AlignedBuffer {
        AlignedBuffer { words: vec![0; len.div_ceil(8)], len }
    }

    fn into_vec(self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_le_bytes()).take(self.len).collect()
    }
}

impl AsMut<[u8]> for AlignedBuffer {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `words` holds at least `len` initialised bytes, u8 has no alignment requirement, and
        // the returned slice borrows `self` mutably.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

impl<B: Backend, C: ProgramCompiler<B>> Inner<B, C> {
    /// Checks a host request into the caller's output buffers and runs it ([`Session::run_into`],
    /// and [`Session::run_into_timed`] with a clock).
    pub(crate) fn run_host_into<T: AsMut<[u8]>>(
        &self,
        ctx: &mut RunContext<B>,
        inputs: &[HostTensor<'_>],
        outputs: &mut [T],
        clock: Option<&mut StageClock<'_, B>>,
    ) -> Result<RunInfo> {
        request::check_output_count(&self.signature, outputs.len())?;
        let request = request::check(&self.signature, &self.guard, inputs)?;
        self.run_host_checked(ctx, &request, outputs, HostBuffers::Unchecked, clock)
    }

    /// Runs a checked host request: recorded for live re-bucketing, padded along the padded axis
    /// when the model has one (`path_padded.rs`; its stages are not timed), then run exactly.
    pub(crate) fn run_host_checked<T: AsMut<[u8]>>(
        &self,
        ctx: &mut RunContext<B>,
        request: &Checked<'_, '_, HostTensor<'_>>,
        outputs: &mut [T],
        buffers: HostBuffers,
        clock: Option<&mut StageClock<'_, B>>,
    ) -> Result<RunInfo> {
        if let Model::Bucketed(grid) = &self.model {
            grid.observe(&request.bindings);
            if let Some(axis) = &grid.axis {
                if let Some(clock) = clock {
                    clock.checked();
                }
                return self.run_host_padded(ctx, grid, axis, request, outputs, buffers);
            }
        }
        self.run_host_exact(ctx, request, outputs, buffers, clock)
    }

    /// Runs a checked host request whose extents are a grid cell's (but for the batch): ultra-fast
    /// or fast when it came in binding order and one main program serves it (with its stages timed
    /// on `clock`), standard otherwise (only the check timed).
    pub(crate) fn run_host_exact<T: AsMut<[u8]>>(
        &self,
        ctx: &mut RunContext<B>,
        request: &Checked<'_, '_, HostTensor<'_>>,
        outputs: &mut [T],
        buffers: HostBuffers,
        mut clock: Option<&mut StageClock<'_, B>>,
    ) -> Result<RunInfo> {
        let bindings = &request.bindings;
        if request.in_order
            && let Some(Single { k, chunk }) = self.single(bindings)
            && let RunContext { slots: Some(slots), last, stream, .. } = ctx
        {
            // The arena's gather and scatter check each buffer against its plan as they copy.
            let batch = bindings.batch();
            let this = LastRun { mode: BindingMode::PinnedCopy, batch, program: self.main[k].id };
            let path = if *last == Some(this) { RunPath::UltraFast } else { RunPath::Fast };
            if path == RunPath::Fast {
                self.plan_chunk(slots, &request.ordered, k, chunk)?;
            }
            *last = None;
            if let Some(clock) = clock.as_deref_mut() {
                clock.checked();
            }
            let replayed = self.pinned_chunk(stream, slots, k, &request.ordered, outputs, clock)?;
            *last = Some(this);
            self.count_chunk(chunk);
            return Ok(RunInfo {
                path,
                mode: BindingMode::PinnedCopy,
                batch,
                bucket: self.main[k].bucket,
                chunks: 1,
                replayed,
            });
        }
        if let Some(clock) = clock {
            clock.checked();
        }
        ctx.last = None;
        if buffers == HostBuffers::Unchecked {
            // Every buffer is checked before the first chunk runs (or a per-shape program compiles),
            // so a short one fails the request before any work or output write.
            request::check_host_inputs(&self.signature, &request.ordered)?;
            request::check_host_outputs(bindings, outputs)?;
        }
        self.run_host_standard(ctx, request, outputs)
    }

    /// Runs each chunk of a checked host request whose buffers were checked; per-shape models run
    /// their program for the request's shapes.
    fn run_host_standard<T: AsMut<[u8]>>(
        &self,
        ctx: &mut RunContext<B>,
        request: &Checked<'_, '_, HostTensor<'_>>,
        outputs: &mut [T],
    ) -> Result<RunInfo> {
        let (ordered, bindings) = (&request.ordered[..], &request.bindings);
        let batch = bindings.batch();
        let RunContext { slots: Some(slots), last, stream, .. } = ctx else {
            // Only per-shape models have contexts without slots.
            let replayed = self.run_shape_program_host(&ctx.stream, bindings.stable_key(), ordered, outputs)?;
            return Ok(RunInfo {
                path: RunPath::Standard,
                mode: BindingMode::PinnedCopy,
                batch,
                bucket: None,
                chunks: 1,
                replayed,
            });
        };
        let (chunks, mut first, mut replayed) = (self.chunks(bindings)?, None, true);
        for chunk in chunks.iter() {
            let k = chunks.program(chunk)?;
            first = first.or(self.main[k].bucket);
            self.plan_chunk(slots, ordered, k, chunk)?;
            replayed &= self.pinned_chunk(stream, slots, k, ordered, outputs, None)?;
            self.count_chunk(chunk);
        }
        if !chunks.is_split()
            && let Some(only) = chunks.iter().next()
        {
            *last =
                Some(LastRun { mode: BindingMode::PinnedCopy, batch, program: self.main[chunks.program(only)?].id });
        }
        self.count_split(&chunks);
        Ok(RunInfo {
            path: RunPath::Standard,
            mode: BindingMode::PinnedCopy,
            batch,
            bucket: first,
            chunks: u32::try_from(chunks.count()).unwrap_or(u32::MAX),
            replayed,
        })
    }

    /// One chunk of a host request on main program `k`, with the plans already in the slots: its
    /// inputs gathered, run, and its outputs scattered, each stage timed on `clock` if given.
    fn pinned_chunk<T: AsMut<[u8]>>(
        &self,
        stream: &B::Stream,
        slots: &mut Slots<B>,
        k: usize,
        inputs: &[HostTensor<'_>],
        outputs: &mut [T],
        mut clock: Option<&mut StageClock<'_, B>>,
    ) -> Result<bool> {
        {
            let Slots { arena, pad_plans, .. } = &mut *slots;
            arena.gather_host_with(|i| InputSource::Host { data: inputs[i].data, plan: pad_plans[i] })?;
        }
        if let Some(clock) = clock.as_deref_mut() {
            clock.gathered(stream)?;
        }
        let replayed = self.run_on_slots(stream, slots, k, BindingMode::PinnedCopy)?;
        if let Some(clock) = clock.as_deref_mut() {
            clock.enqueued(stream)?;
        }
        let Slots { arena, slice_plans, .. } = slots;
        arena.fence(stream)?;
        if let Some(clock) = clock.as_deref_mut() {
            clock.synchronize()?;
        }
        arena.scatter_outputs_with(outputs, |o| slice_plans[o])?;
        if let Some(clock) = clock {
            clock.scattered();
        }
        Ok(replayed)
    }
}
