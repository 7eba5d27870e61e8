//! The device path: requests whose inputs and outputs are device memory the caller owns
//! ([`Session::run_device`], [`Session::enqueue_device`], and the runs of a
//! [`crate::DeviceBinding`]). A request at an exact bucket is direct-bound (its pointers are baked
//! into a graph, see `graphs.rs`); one that needs padding or splitting is stabilized: copied into
//! the arena's persistent slots, run there, and its real rows copied back.

use saggar_arena::{DeviceInputMode, InputSource};
use saggar_device::{Backend, Stream};
use saggar_shape::Bindings;

use crate::compiler::ProgramCompiler;
use crate::context::{DeviceIo, LastRun, RunContext, Slots};
use crate::error::Result;
use crate::plan::{DeviceRoute, Model};
use crate::programs::ProgramEntry;
use crate::request::{self, Checked};
use crate::session::{Inner, Pending, Session};
use crate::tensors::{BindingMode, DeviceTensor, RunInfo, RunPath};

impl<B: Backend, C: ProgramCompiler<B>> Session<B, C> {
    /// Runs one request whose inputs and outputs are in device memory the caller owns, and waits for
    /// it. Exact-bucket requests are direct-bound (the caller's pointers are baked into a graph and
    /// checked every run); padded or split ones are stabilized (copied into persistent slots).
    pub fn run_device(&self, inputs: &[DeviceTensor<'_>], outputs: &[DeviceTensor<'_>]) -> Result<RunInfo> {
        self.enqueue_device(inputs, outputs)?.wait()
    }

    /// Like [`Session::run_device`] but returns once the work is enqueued; the outputs are ready when
    /// the returned [`Pending`] is waited for (or dropped). The caller's device memory must stay
    /// valid until then.
    pub fn enqueue_device(&self, inputs: &[DeviceTensor<'_>], outputs: &[DeviceTensor<'_>]) -> Result<Pending<B>> {
        self.enqueue_with(|inner, ctx| inner.run_device(ctx, inputs, outputs))
    }
}

impl<B: Backend, C: ProgramCompiler<B>> Inner<B, C> {
    /// Checks a device request (inputs in any order) and its buffers, recording them in `io`:
    /// returns the checked request and its route when it needs no split. Every `run_device` call
    /// brings new shapes and buffers, so each is checked; a [`crate::DeviceBinding`] keeps the
    /// result and its runs skip this.
    pub(crate) fn check_device_request<'r>(
        &'r self,
        inputs: &'r [DeviceTensor<'r>],
        outputs: &[DeviceTensor<'_>],
        io: &mut DeviceIo,
    ) -> Result<(Checked<'r, 'r, DeviceTensor<'r>>, Option<DeviceRoute>)> {
        self.refuse_chain()?;
        request::check_output_count(&self.signature, outputs.len())?;
        let request = request::check(&self.signature, &self.guard, inputs)?;
        if let Model::Bucketed(grid) = &self.model {
            grid.observe(&request.bindings);
        }
        let route = self.device_route(&request.bindings);
        request::check_device_io(&request.bindings, &request.ordered, outputs, self.exact_program(route), io)?;
        Ok((request, route))
    }

    /// The program whose shapes a request on `route` has exactly (direct bind), if any.
    fn exact_program(&self, route: Option<DeviceRoute>) -> Option<&ProgramEntry<C::Program>> {
        route.filter(|r| r.mode == BindingMode::DirectBind).map(|r| &*self.main[r.k])
    }

    fn run_device<'r>(
        &'r self,
        ctx: &mut RunContext<B>,
        inputs: &'r [DeviceTensor<'r>],
        outputs: &[DeviceTensor<'_>],
    ) -> Result<RunInfo> {
        let mut io = std::mem::take(&mut ctx.io);
        let result = self.check_device_request(inputs, outputs, &mut io).and_then(|(request, route)| {
            // Only a request in binding order takes the ultra-fast and fast paths.
            let route = route.filter(|_| request.in_order);
            self.run_device_checked(ctx, route, &request.ordered, || Ok(request.bindings), &io)
        });
        ctx.io = io;
        result
    }

    /// Runs a checked device request (`io` from [`request::check_device_io`]): on `route`'s main
    /// program when it has one, on the standard path otherwise (which plans with the request's
    /// `bindings`).
    pub(crate) fn run_device_checked<'s, T: AsRef<[u64]>>(
        &'s self,
        ctx: &mut RunContext<B>,
        route: Option<DeviceRoute>,
        dims: &[T],
        bindings: impl FnOnce() -> Result<Bindings<'s>>,
        io: &DeviceIo,
    ) -> Result<RunInfo> {
        if let Some(route) = route
            && let RunContext { slots: Some(slots), last, stream, .. } = ctx
        {
            return self.run_device_single(stream, slots, last, route, dims, io);
        }
        ctx.last = None;
        self.run_device_standard(ctx, dims, &bindings()?, io)
    }

    /// Runs a single-chunk device request on its main program: ultra-fast when the context's last
    /// run had the same program, mode and batch, fast otherwise.
    fn run_device_single<T: AsRef<[u64]>>(
        &self,
        stream: &B::Stream,
        slots: &mut Slots<B>,
        last: &mut Option<LastRun>,
        route: DeviceRoute,
        dims: &[T],
        io: &DeviceIo,
    ) -> Result<RunInfo> {
        let DeviceRoute { k, chunk, mode, batch } = route;
        let this = LastRun { mode, batch, program: self.main[k].id };
        let path = if *last == Some(this) { RunPath::UltraFast } else { RunPath::Fast };
        if path == RunPath::Fast {
            self.plan_chunk(slots, dims, k, chunk)?;
        }
        *last = None;
        let replayed = match mode {
            BindingMode::DirectBind => self.direct_chunk(stream, slots, k, io)?,
            _ => self.stabilized_chunk(stream, slots, k, io)?,
        };
        *last = Some(this);
        self.count_chunk(chunk);
        Ok(RunInfo { path, mode, batch, bucket: self.main[k].bucket, chunks: 1, replayed })
    }

    /// Runs each chunk of a checked device request stabilized; per-shape models run their program
    /// for the request's shapes eagerly.
    fn run_device_standard<T: AsRef<[u64]>>(
        &self,
        ctx: &mut RunContext<B>,
        dims: &[T],
        bindings: &Bindings<'_>,
        io: &DeviceIo,
    ) -> Result<RunInfo> {
        let batch = bindings.batch();
        let RunContext { slots: Some(slots), stream, .. } = ctx else {
            // Only per-shape models have contexts without slots.
            self.run_shape_program_device(bindings.stable_key(), dims, io, &ctx.stream)?;
            return Ok(RunInfo {
                path: RunPath::Standard,
                mode: BindingMode::DirectBind,
                batch,
                bucket: None,
                chunks: 1,
                replayed: false,
            });
        };
        let chunks = self.chunks(bindings)?;
        let mut replayed = true;
        for chunk in chunks.iter() {
            let k = chunks.program(chunk)?;
            self.plan_chunk(slots, dims, k, chunk)?;
            replayed &= self.stabilized_chunk(stream, slots, k, io)?;
            self.count_chunk(chunk);
        }
        self.count_split(&chunks);
        let bucket = chunks.iter().next().map(|c| c.bucket);
        Ok(RunInfo {
            path: RunPath::Standard,
            mode: BindingMode::Stabilized,
            batch,
            bucket,
            chunks: u32::try_from(chunks.count()).unwrap_or(u32::MAX),
            replayed,
        })
    }

    /// Stabilized: the caller's device inputs (in `io`, checked) are copied (and padded) into the
    /// arena's persistent slots, the program runs there (graph or eager), and each output's real rows
    /// are copied back.
    fn stabilized_chunk(&self, stream: &B::Stream, slots: &mut Slots<B>, k: usize, io: &DeviceIo) -> Result<bool> {
        {
            let Slots { arena, pad_plans, .. } = &mut *slots;
            let sources: Vec<InputSource<'_>> = io
                .inputs()
                .iter()
                .zip(pad_plans.iter())
                .map(|(data, plan)| InputSource::Device {
                    data: *data,
                    plan: *plan,
                    mode: DeviceInputMode::CopyIntoSlot,
                })
                .collect();
            arena.copy_device_inputs(stream, &sources)?;
        }
        let replayed = self.run_on_slots(stream, slots, k, BindingMode::Stabilized)?;
        for (o, (plan, data)) in slots.slice_plans.iter().zip(io.outputs()).enumerate() {
            let range = plan.dst_range();
            if !range.is_empty() {
                stream
                    .copy_d2d(slots.arena.output_slot(o).sub(0, range.len())?, data.sub(range.start, range.len())?)?;
            }
        }
        Ok(replayed)
    }
}
