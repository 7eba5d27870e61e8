//! One arena: a pinned staging buffer, a device arena with the layout's slots, and an optional pinned
//! read-back buffer for coalesced outputs.

use std::sync::{Arc, OnceLock};

use crossbeam::utils::CachePadded;
use saggar_device::{
    Backend, CodeObject, Device, DeviceBuffer, DevicePtr, DeviceSlice, Event, KernelArg, LaunchConfig, Module,
    PinnedBuffer, Stream, builtin,
};
use saggar_shape::{PadPlan, SlicePlan, pad_rows_into, slice_rows};
use smallvec::SmallVec;

use crate::error::{ArenaError, Result};
use crate::gather::{
    GatherOptions, GatherStats, Gatherer, Plan, copy_bytes, on_helper_thread, prefetch_to_l2, store_fence,
};
use crate::layout::{ArenaLayout, Slot};

/// Where one input comes from.
#[derive(Debug, Clone, Copy)]
pub enum InputSource<'a> {
    /// Host memory: gathered into the staging buffer (padded per the plan) and sent with the single
    /// host-to-device copy.
    Host {
        /// The request's whole tensor.
        data: &'a [u8],
        /// Which rows to take and how far to pad (a pass-through plan for inputs without a batch axis).
        plan: PadPlan,
    },
    /// Device memory the caller already owns.
    Device {
        /// The request's whole tensor.
        data: DeviceSlice,
        /// Which rows to take and how far to pad.
        plan: PadPlan,
        /// Bind the caller's memory directly, or copy it into the arena slot.
        mode: DeviceInputMode,
    },
}

/// What to do with an input that is already on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceInputMode {
    /// Copy it (device to device, padding with one kernel launch) into its arena slot, so the
    /// binding has the arena's stable address.
    CopyIntoSlot,
    /// Bind the caller's pointer directly when no padding is needed; falls back to
    /// [`DeviceInputMode::CopyIntoSlot`] when it is.
    DirectBind,
}

/// How an input ended up bound, reported per input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindingKind {
    /// Gathered on the host and sent with the coalesced copy.
    Staged,
    /// Copied device to device (and padded, if needed) into its slot.
    DeviceCopy,
    /// The caller's device memory, bound as is.
    DirectBind,
}

/// What [`Arena::stage_inputs`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StageReport {
    /// Inputs gathered from host memory.
    pub staged: usize,
    /// Device inputs copied into their slots.
    pub device_copies: usize,
    /// Device inputs bound directly.
    pub direct_binds: usize,
    /// Device inputs that asked for direct binding but needed padding, so were copied.
    pub direct_bind_refused: usize,
    /// Host-to-device copies enqueued (0 or 1).
    pub host_to_device_copies: usize,
    /// Bytes sent by that copy.
    pub staged_bytes: usize,
}

/// Where one output goes on the host.
#[derive(Debug)]
pub struct OutputTarget<'a> {
    /// The request's whole output tensor.
    pub data: &'a mut [u8],
    /// Which rows of the program's output to return, and where.
    pub plan: SlicePlan,
}

/// How arenas are built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ArenaOptions {
    /// Allocate a pinned read-back buffer so outputs come back with one device-to-host copy.
    pub coalesce_outputs: bool,
    /// How the host side of a gather is spread over threads.
    pub gather: GatherOptions,
    /// The single copies ([`Arena::enqueue_upload`], [`Arena::enqueue_download`]) of at most this many
    /// bytes are made by a kernel (`saggar_copy_bytes`) that reads or writes the pinned buffer where
    /// the device maps it, instead of by the copy engine; larger ones, and every copy where pinned
    /// memory is not mapped or the kernel is unavailable, use the copy engine. 0: always the copy
    /// engine. A small copy costs the copy engine several microseconds of start-up and hand-over to
    /// and from the kernels around it, which the kernel does not. A large one is another matter: the
    /// kernel takes SMs that other streams' work would use while a copy engine ran beside it, and
    /// past about a megabyte the copy engine's bandwidth wins even alone. Measurements:
    /// `docs/gpu-runs/kernel-copy-limits.md` and `docs/gpu-runs/cuda-harnesses.md`.
    pub kernel_copies_up_to: usize,
}

/// [`ArenaOptions::kernel_copies_up_to`] by default: 64 KiB, the copies of small batches, whose
/// latency the copy engine's start-up dominates. Larger limits (up to 1 MiB) serve one request at
/// a time faster still, but cost throughput when several streams run at once.
pub const DEFAULT_KERNEL_COPIES_UP_TO: usize = 64 << 10;

impl ArenaOptions {
    /// These options with (or without) the pinned read-back buffer for one-copy outputs.
    pub fn with_coalesce_outputs(mut self, coalesce: bool) -> ArenaOptions {
        self.coalesce_outputs = coalesce;
        self
    }

    /// These options with gathers spread and stored as `gather` says.
    pub fn with_gather(mut self, gather: GatherOptions) -> ArenaOptions {
        self.gather = gather;
        self
    }

    /// These options with the single copies of at most `bytes` made by a kernel
    /// ([`ArenaOptions::kernel_copies_up_to`]; 0: always the copy engine).
    pub fn with_kernel_copies_up_to(mut self, bytes: usize) -> ArenaOptions {
        self.kernel_copies_up_to = bytes;
        self
    }
}

impl Default for ArenaOptions {
    fn default() -> ArenaOptions {
        ArenaOptions {
            coalesce_outputs: true,
            gather: GatherOptions::default(),
            kernel_copies_up_to: DEFAULT_KERNEL_COPIES_UP_TO,
        }
    }
}

/// What every arena of one pool shares: the device, the layouts (see [`crate::ArenaPool::with_layouts`]),
/// the gather helpers and how each layout's inputs are split among them, and the built-in kernels
/// (compiled when the pool is made if kernel copies are on, else on first need by padding).
pub(crate) struct ArenaContext<B: Backend> {
    pub(crate) device: B::Device,
    /// At least one; every layout has the same inputs and outputs, at its own offsets.
    pub(crate) layouts: Box<[Arc<ArenaLayout>]>,
    pub(crate) options: ArenaOptions,
    gatherer: Arc<Gatherer>,
    /// Per layout: part `p` of a gather is inputs `part_starts[p]..part_starts[p + 1]`, balanced by
    /// slot bytes.
    part_starts: Box<[Vec<usize>]>,
    builtins: OnceLock<std::result::Result<Builtins<B>, saggar_device::Error>>,
}

/// Loads the built-in kernels an arena launches from `code` (saggar-device's built-in source,
/// compiled for `device`).
fn load_builtins<B: Backend>(
    device: &B::Device,
    code: &CodeObject,
) -> std::result::Result<Builtins<B>, saggar_device::Error> {
    let module = device.load_module(code)?;
    Ok(Builtins { pad: module.kernel(builtin::COPY_ROWS)?, copy: module.kernel(builtin::COPY_BYTES)? })
}

/// The built-in kernels an arena launches.
struct Builtins<B: Backend> {
    /// Device inputs padded into their slots.
    pad: B::Kernel,
    /// The single copies, where they are made by a kernel.
    copy: B::Kernel,
}

impl<B: Backend> ArenaContext<B> {
    /// A pool's shared state. `builtins`, the built-in kernels already compiled for `device` (from a
    /// compile cache, say), saves compiling them here.
    pub(crate) fn new(
        device: B::Device,
        layouts: Vec<Arc<ArenaLayout>>,
        options: ArenaOptions,
        builtins: Option<CodeObject>,
    ) -> Result<ArenaContext<B>> {
        let Some(first) = layouts.first() else {
            return Err(ArenaError::Layout { reason: "a pool needs at least one layout".into() });
        };
        if let Some(other) = layouts
            .iter()
            .find(|l| l.inputs().len() != first.inputs().len() || l.outputs().len() != first.outputs().len())
        {
            return Err(ArenaError::Layout {
                reason: format!(
                    "the layouts of one pool must have the same inputs and outputs ({} and {} against {} and {})",
                    other.inputs().len(),
                    other.outputs().len(),
                    first.inputs().len(),
                    first.outputs().len()
                ),
            });
        }
        let gatherer = Gatherer::shared(options.gather).map_err(|e| ArenaError::Gather {
            reason: format!("cannot start gather helper threads ({e}); set GatherOptions::helpers to 0"),
        })?;
        let part_starts = layouts
            .iter()
            .map(|layout| {
                let parts = options.gather.parts_for(layout.inputs().len(), layout.input_span());
                balanced_parts(layout.inputs(), parts)
            })
            .collect();
        let ctx = ArenaContext {
            device,
            layouts: layouts.into_boxed_slice(),
            options,
            gatherer,
            part_starts,
            builtins: OnceLock::new(),
        };
        // Code that does not load (compiled for another device, say) is compiled again below.
        if let Some(loaded) = builtins.and_then(|code| load_builtins(&ctx.device, &code).ok()) {
            let _ = ctx.builtins.set(Ok(loaded));
        }
        if options.kernel_copies_up_to > 0 {
            // Now, not at the first copy: that one may be recorded into a graph, and a module load is
            // no work to do during a capture. A failure leaves the copies to the copy engine.
            let _ = ctx.builtins();
        }
        Ok(ctx)
    }

    pub(crate) fn gather_stats(&self) -> GatherStats {
        self.gatherer.stats()
    }

    fn builtins(&self) -> Result<&Builtins<B>> {
        let compiled =
            self.builtins.get_or_init(|| load_builtins(&self.device, &self.device.compile(&builtin::source())?));
        compiled.as_ref().map_err(|e| ArenaError::Device(e.clone()))
    }

    fn pad_kernel(&self) -> Result<&B::Kernel> {
        Ok(&self.builtins()?.pad)
    }

    /// The kernel for a single copy of `bytes` to or from mapped pinned memory, where one is made by
    /// a kernel ([`ArenaOptions::kernel_copies_up_to`]); never compiles (the pool did, if ever).
    fn copy_kernel(&self, bytes: usize) -> Option<&B::Kernel> {
        if bytes > self.options.kernel_copies_up_to {
            return None;
        }
        self.builtins.get()?.as_ref().ok().map(|b| &b.copy)
    }
}

/// One arena. Its device addresses never change for its whole life, so a graph captured against its
/// slots stays valid: that is what makes pinned-copy graph mode free of pointer drift.
///
/// # Thread safety
/// `Send + Sync`. Mutation needs `&mut`; a pool hands each request its own arena.
pub struct Arena<B: Backend> {
    pub(crate) ctx: Arc<ArenaContext<B>>,
    device_memory: B::DeviceBuffer,
    pub(crate) staging: B::PinnedBuffer,
    pub(crate) readback: Option<B::PinnedBuffer>,
    /// Recorded after the last enqueued operation that touches pinned memory.
    in_flight: B::Event,
    pub(crate) pending: bool,
    /// The layout in use (an index into the context's layouts).
    pub(crate) variant: usize,
    /// Each input's whole slot in that layout, at its stable address.
    slots: Vec<DeviceSlice>,
    bindings: Vec<DeviceSlice>,
    kinds: Vec<BindingKind>,
}

impl<B: Backend> std::fmt::Debug for Arena<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arena")
            .field("device_memory", &self.device_memory)
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

/// Checks a caller buffer's alignment. An empty buffer is never read or written, and Rust gives an
/// empty slice a dangling address aligned only to its own element type, so it is not checked.
fn check_aligned(role: &'static str, name: &str, address: usize, len: usize, align: usize) -> Result<()> {
    // `align` is a power of two (the layout checks it): a mask, not a division, on the per-input path.
    debug_assert!(align.is_power_of_two());
    if len == 0 || address & (align - 1) == 0 {
        Ok(())
    } else {
        Err(ArenaError::Misaligned { role, name: name.into(), address, align })
    }
}

impl<B: Backend> Arena<B> {
    pub(crate) fn new(ctx: Arc<ArenaContext<B>>) -> Result<Arena<B>> {
        // Every layout's slots lie in the same memory: sized for the largest of each span.
        let most = |span: fn(&ArenaLayout) -> usize| ctx.layouts.iter().map(|l| span(l)).max().unwrap_or(0);
        let (input_span, output_span) = (most(ArenaLayout::input_span), most(ArenaLayout::output_span));
        let layout = &ctx.layouts[0];
        let device_memory = ctx.device.alloc(most(ArenaLayout::device_bytes))?;
        // Zero the arena once: the single copies move whole spans, gaps between slots included, and a
        // span must never carry uninitialised memory (compute-sanitizer's initcheck would flag it).
        let stream = ctx.device.create_stream()?;
        stream.memset(device_memory.as_slice(), 0)?;
        stream.synchronize()?;
        let staging = ctx.device.alloc_pinned(input_span.max(1))?;
        // Outputs of zero elements still get a (one-byte) read-back buffer, as inputs do a staging one:
        // a model whose outputs are all empty is served like any other.
        let readback =
            if ctx.options.coalesce_outputs { Some(ctx.device.alloc_pinned(output_span.max(1))?) } else { None };
        let in_flight = ctx.device.create_untimed_event()?;
        let n = layout.inputs().len();
        let slots: Vec<DeviceSlice> = layout.inputs().iter().map(|s| slot_view(&device_memory, 0, s)).collect();
        Ok(Arena {
            ctx,
            device_memory,
            staging,
            readback,
            in_flight,
            pending: false,
            variant: 0,
            bindings: slots.clone(),
            slots,
            kinds: vec![BindingKind::Staged; n],
        })
    }

    /// The layout in use.
    pub fn layout(&self) -> &ArenaLayout {
        &self.ctx.layouts[self.variant]
    }

    /// The index of the layout in use among the pool's layouts ([`crate::ArenaPool::with_layouts`]).
    pub fn layout_index(&self) -> usize {
        self.variant
    }

    /// Switches to the pool's layout `index` (a no-op when it is the one in use): from now on every
    /// slot, gather, copy and view is at that layout's offsets. The staging buffer's contents are not
    /// moved, so inputs written in place must be written again after a switch. Every layout keeps
    /// its device addresses for the arena's life, so graphs captured against each stay valid.
    pub fn use_layout(&mut self, index: usize) -> Result<()> {
        if index == self.variant {
            return Ok(());
        }
        let count = self.ctx.layouts.len();
        let layout = self.ctx.layouts.get(index).ok_or_else(|| ArenaError::Layout {
            reason: format!("layout {index} does not exist: the pool has {count}"),
        })?;
        for (view, slot) in self.slots.iter_mut().zip(layout.inputs()) {
            *view = slot_view(&self.device_memory, 0, slot);
        }
        self.bindings.copy_from_slice(&self.slots);
        self.kinds.fill(BindingKind::Staged);
        self.variant = index;
        Ok(())
    }

    /// The whole slot of input `index` (its capacity), at its stable device address.
    pub fn input_slot(&self, index: usize) -> DeviceSlice {
        slot_view(&self.device_memory, 0, &self.layout().inputs()[index])
    }

    /// The whole slot of output `index`, at its stable device address.
    pub fn output_slot(&self, index: usize) -> DeviceSlice {
        let layout = self.layout();
        slot_view(&self.device_memory, layout.output_offset(), &layout.outputs()[index])
    }

    /// The device memory each input is bound to after the last [`Arena::stage_inputs`], in input order.
    pub fn input_bindings(&self) -> &[DeviceSlice] {
        &self.bindings
    }

    /// How the split gathers of this arena's gatherer ran so far (shared by every pool of the process
    /// with the same [`GatherOptions`]).
    pub fn gather_stats(&self) -> GatherStats {
        self.ctx.gather_stats()
    }

    /// How each input was bound by the last [`Arena::stage_inputs`].
    pub fn binding_kinds(&self) -> &[BindingKind] {
        &self.kinds
    }

    /// Waits until the stream has passed every operation of this arena that touches pinned memory.
    pub fn wait_idle(&mut self) -> Result<()> {
        if self.pending {
            self.in_flight.synchronize()?;
            self.pending = false;
        }
        Ok(())
    }

    /// Marks the pinned buffers in use by everything `stream` has enqueued so far: records the
    /// arena's event, which [`Arena::wait_idle`] (and every host access to the pinned buffers) waits
    /// for. Call it after enqueueing work that reads the staging buffer or writes the read-back
    /// buffer, including after launching a graph that captured such copies.
    pub fn fence(&mut self, stream: &B::Stream) -> Result<()> {
        self.pending = true;
        if let Err(e) = stream.record(&self.in_flight) {
            // Without the event the only safe way to know the copies are done is to wait for them.
            stream.synchronize()?;
            self.pending = false;
            return Err(e.into());
        }
        // The work is enqueued: waking parked gather helpers now overlaps with it.
        self.ctx.gatherer.wake_parked();
        Ok(())
    }

    /// Gathers every host input into its staging slot in one pass (padding rows past the real batch
    /// with copies of the last real row) and binds it to its device slot. Device inputs are left for
    /// [`Arena::copy_device_inputs`]. Waits first for the previous use of the staging buffer.
    /// Returns the used span of the staging buffer (what [`Arena::enqueue_upload`] must send).
    pub fn gather_host(&mut self, inputs: &[InputSource<'_>]) -> Result<usize> {
        let slots = self.layout().inputs().len();
        if inputs.len() != slots {
            return Err(ArenaError::Count { role: "input", expected: slots, actual: inputs.len() });
        }
        // `move`: the closure holds the slice itself, so a helper reaches the inputs through one
        // line of this thread's stack, not two.
        self.gather_host_with(move |index| inputs[index])
    }

    /// [`Arena::gather_host`] with the inputs given by a function of the input index, so callers need
    /// not build a slice. Large layouts are gathered in parts at once, on the pool's gather helpers
    /// (see [`GatherOptions`]); each part checks and copies its own inputs. On error the first failing
    /// input in input order is reported; the staging buffer's contents are then unspecified until
    /// the next successful gather.
    pub fn gather_host_with<'a>(&mut self, source: impl Fn(usize) -> InputSource<'a> + Sync) -> Result<usize> {
        self.wait_idle()?;
        let Arena { ctx, staging, slots, bindings, kinds, variant, .. } = self;
        let layout = &*ctx.layouts[*variant];
        let streaming = ctx.options.gather.stores.streaming_for(B::KIND);
        let staging = staging.as_mut_slice();
        let starts = &ctx.part_starts[*variant];
        // A gather that runs alone (one part, the helpers parked or busy) is one pass on this
        // thread: the same code as a gather without helpers, so never slower than one.
        let busy = match ctx.gatherer.plan(starts.len().saturating_sub(1)) {
            Plan::Split(busy) => busy,
            Plan::Alone => {
                let mut part = Part { first: 0, base: 0, staging, bindings, kinds, outcome: None };
                return gather_part(layout, &mut part, &source, slots, streaming, false);
            }
        };
        // Split the staging buffer, the bindings and the kinds at the parts' first inputs: each part
        // writes only its own.
        // One cache line (pair) per part: parts of neighbouring helpers must not share lines.
        let mut parts: SmallVec<[CachePadded<Part<'_>>; 8]> = SmallVec::new();
        let (mut staging, mut bindings, mut kinds) = (staging, &mut bindings[..], &mut kinds[..]);
        for window in starts.windows(2) {
            let (first, end) = (window[0], window[1]);
            let base = layout.inputs()[first].offset;
            let next = layout.inputs().get(end).map_or(base + staging.len(), |s| s.offset);
            let (s_part, s_rest) = std::mem::take(&mut staging).split_at_mut(next - base);
            let (b_part, b_rest) = std::mem::take(&mut bindings).split_at_mut(end - first);
            let (k_part, k_rest) = std::mem::take(&mut kinds).split_at_mut(end - first);
            (staging, bindings, kinds) = (s_rest, b_rest, k_rest);
            let part = Part { first, base, staging: s_part, bindings: b_part, kinds: k_part, outcome: None };
            parts.push(CachePadded::new(part));
        }
        let (slots, source) = (&slots[..], &source);
        ctx.gatherer
            .run_split_mut(
                &mut parts,
                &move |part: &mut CachePadded<Part<'_>>| {
                    let outcome = gather_part(layout, part, source, slots, streaming, true);
                    part.outcome = Some(outcome);
                },
                busy,
            )
            .map_err(|reason| ArenaError::Gather { reason })?;
        let mut span_end = 0;
        for part in parts {
            span_end = span_end.max(CachePadded::into_inner(part).outcome.expect("every part ran")?);
        }
        Ok(span_end)
    }

    /// Enqueues ONE host-to-device copy of the first `span` bytes of the staging buffer into the
    /// arena. May be recorded into a graph. Fences this thread's streaming stores first, so inputs
    /// written with [`Arena::write_staged_input`] (which leaves them unfenced: one fence per copy
    /// instead of one per input) are in memory before the copy can read them.
    ///
    /// # Safety
    /// [`Arena::fence`] must be called after this copy is enqueued (or, if it was captured, after
    /// every launch of the graph that holds it) and before the arena is used again; the arena then
    /// keeps the host from writing the staging buffer while the copy may run.
    pub unsafe fn enqueue_upload(&self, stream: &B::Stream, span: usize) -> Result<()> {
        if span == 0 {
            return Ok(());
        }
        let dst = self.device_memory.slice(0, span)?;
        store_fence();
        if let Some((kernel, src)) = self.kernel_copy(&self.staging, span) {
            // SAFETY: as below; the kernel reads `span` bytes of the mapped staging buffer and writes
            // `span` bytes of the arena, both in range.
            return unsafe { builtin::enqueue_copy_bytes::<B>(stream, kernel, src, dst.ptr(), span as u64) }
                .map_err(Into::into);
        }
        // SAFETY: the staging buffer belongs to this arena and outlives the copy (drop waits for the
        // fence); the caller fences after enqueueing, per this function's contract.
        unsafe { stream.copy_h2d_async(&self.staging, 0, dst)? };
        Ok(())
    }

    /// Orders this thread's streaming stores into staging ([`Arena::write_staged_input`] leaves them
    /// unfenced) before the device may read them through work the host does not enqueue one by one:
    /// a replayed graph that holds the upload. [`Arena::enqueue_upload`] does the same for what it
    /// enqueues, but a graph's replay runs none of the host code it was captured from.
    pub fn publish_staged(&self) {
        store_fence();
    }

    /// The copy kernel and `pinned`'s device address, when a copy of `bytes` to or from it is made by
    /// a kernel.
    fn kernel_copy(&self, pinned: &B::PinnedBuffer, bytes: usize) -> Option<(&B::Kernel, DevicePtr)> {
        Some((self.ctx.copy_kernel(bytes)?, pinned.device_ptr()?))
    }

    /// Whether the single copies of `bytes` are made by a kernel rather than the copy engine (see
    /// [`ArenaOptions::kernel_copies_up_to`]).
    pub fn copies_by_kernel(&self, bytes: usize) -> bool {
        self.kernel_copy(&self.staging, bytes).is_some()
    }

    /// Enqueues ONE device-to-host copy of the first `span` bytes of the output span into the pinned
    /// read-back buffer. May be recorded into a graph. Needs [`ArenaOptions::coalesce_outputs`].
    ///
    /// # Safety
    /// As [`Arena::enqueue_upload`]: fence afterwards; [`Arena::scatter_outputs`] waits for the fence.
    pub unsafe fn enqueue_download(&self, stream: &B::Stream, span: usize) -> Result<()> {
        let readback = self.readback.as_ref().ok_or(ArenaError::NotDownloaded)?;
        let layout = self.layout();
        let src = self.device_memory.slice(layout.output_offset(), span.min(layout.output_span()))?;
        if let Some((kernel, dst)) = self.kernel_copy(readback, src.len()) {
            // SAFETY: as below; the kernel reads `src` (in the arena) and writes as many bytes of
            // the mapped read-back buffer, which is at least the output span long.
            return unsafe { builtin::enqueue_copy_bytes::<B>(stream, kernel, src.ptr(), dst, src.len() as u64) }
                .map_err(Into::into);
        }
        // SAFETY: the read-back buffer belongs to this arena, which waits for the fence before the
        // host reads it or frees it; the caller fences per this function's contract.
        unsafe { stream.copy_d2h_async(src, readback, 0)? };
        Ok(())
    }

    /// Copies (or binds) every device-resident input: device to device into its slot, padded with
    /// one kernel launch when needed, or bound directly when asked and no padding is needed.
    pub fn copy_device_inputs(&mut self, stream: &B::Stream, inputs: &[InputSource<'_>]) -> Result<StageReport> {
        let ctx = self.ctx.clone();
        let slots = ctx.layouts[self.variant].inputs();
        if inputs.len() != slots.len() {
            return Err(ArenaError::Count { role: "input", expected: slots.len(), actual: inputs.len() });
        }
        let mut report = StageReport::default();
        for (index, (slot, source)) in slots.iter().zip(inputs).enumerate() {
            let InputSource::Device { data, plan, mode } = *source else { continue };
            check_aligned("input", &slot.name, data.ptr().0 as usize, data.len(), slot.element_bytes)?;
            let src = data.sub(plan.src_range().start, plan.src_range().len())?;
            let padded = plan.padded_rows() > plan.rows();
            if mode == DeviceInputMode::DirectBind && !padded {
                self.bindings[index] = src;
                self.kinds[index] = BindingKind::DirectBind;
                report.direct_binds += 1;
                continue;
            }
            report.direct_bind_refused += usize::from(mode == DeviceInputMode::DirectBind);
            check_fits(slot, &plan)?;
            let dst = slot_view(&self.device_memory, 0, slot).sub(0, plan.dst_len())?;
            if padded {
                let args = [
                    KernelArg::Ptr(dst.ptr()),
                    KernelArg::Ptr(src.ptr()),
                    KernelArg::U64(plan.row_bytes() as u64),
                    KernelArg::U64(plan.rows()),
                    KernelArg::U64(plan.padded_rows()),
                ];
                // SAFETY: `dst` is this arena's slot and `src` the caller's live device memory (the
                // caller keeps it alive until the stream has run the request); the kernel reads
                // `rows` rows of `src` and writes `padded_rows` rows of `dst`, both checked above.
                unsafe {
                    stream.launch(ctx.pad_kernel()?, &LaunchConfig::for_elements(plan.dst_len() as u64, 256), &args)?
                };
            } else {
                stream.copy_d2d(src, dst)?;
            }
            self.bindings[index] = dst;
            self.kinds[index] = BindingKind::DeviceCopy;
            report.device_copies += 1;
        }
        Ok(report)
    }

    /// Gathers the host inputs, sends them with ONE host-to-device copy, then copies or binds the
    /// device-resident inputs. Allocates nothing after the arena is built. On error nothing half-done
    /// is left that could touch freed memory, and the arena serves the next request.
    pub fn stage_inputs(&mut self, stream: &B::Stream, inputs: &[InputSource<'_>]) -> Result<StageReport> {
        let span = self.gather_host(inputs)?;
        let mut report = StageReport::default();
        if span > 0 {
            // SAFETY: fenced right below.
            unsafe { self.enqueue_upload(stream, span)? };
            self.fence(stream)?;
            report.host_to_device_copies = 1;
            report.staged_bytes = span;
        }
        let device = self.copy_device_inputs(stream, inputs)?;
        report.staged = inputs.iter().filter(|i| matches!(i, InputSource::Host { .. })).count();
        report.device_copies = device.device_copies;
        report.direct_binds = device.direct_binds;
        report.direct_bind_refused = device.direct_bind_refused;
        Ok(report)
    }

    /// Enqueues ONE device-to-host copy of the whole output span into the pinned read-back buffer,
    /// fenced. Needs [`ArenaOptions::coalesce_outputs`].
    pub fn download_outputs(&mut self, stream: &B::Stream) -> Result<()> {
        // A previous download must be finished (and read) before the device writes the buffer again.
        self.wait_idle()?;
        // SAFETY: fenced right below.
        unsafe { self.enqueue_download(stream, self.layout().output_span())? };
        self.fence(stream)
    }

    /// Waits for the download, then copies each output's real rows into the caller's buffers.
    pub fn scatter_outputs(&mut self, targets: &mut [OutputTarget<'_>]) -> Result<()> {
        let slots = self.layout().outputs().len();
        if targets.len() != slots {
            return Err(ArenaError::Count { role: "output", expected: slots, actual: targets.len() });
        }
        let plans: Vec<SlicePlan> = targets.iter().map(|t| t.plan).collect();
        let mut buffers: Vec<&mut [u8]> = targets.iter_mut().map(|t| &mut *t.data).collect();
        self.scatter_outputs_with(&mut buffers, |index| plans[index])
    }

    /// [`Arena::scatter_outputs`] with one buffer per output and the plans given by a function of the
    /// output index, so callers need not build targets. Reads what the last download wrote.
    pub fn scatter_outputs_with<T: AsMut<[u8]>>(
        &mut self,
        outputs: &mut [T],
        plan: impl Fn(usize) -> SlicePlan,
    ) -> Result<()> {
        let ctx = self.ctx.clone();
        let slots = ctx.layouts[self.variant].outputs();
        if outputs.len() != slots.len() {
            return Err(ArenaError::Count { role: "output", expected: slots.len(), actual: outputs.len() });
        }
        if self.readback.is_none() {
            return Err(ArenaError::NotDownloaded);
        }
        self.wait_idle()?;
        let readback = self.readback.as_ref().expect("checked above").as_slice();
        for (index, (slot, output)) in slots.iter().zip(outputs.iter_mut()).enumerate() {
            let data = output.as_mut();
            let plan = plan(index);
            check_aligned("output", &slot.name, data.as_ptr() as usize, data.len(), slot.element_bytes)?;
            if plan.src_len() > slot.capacity {
                return Err(ArenaError::Output {
                    output: slot.name.clone(),
                    reason: format!(
                        "the program output of {} bytes exceeds its slot of {}",
                        plan.src_len(),
                        slot.capacity
                    ),
                });
            }
            slice_rows(&readback[slot.offset..slot.offset + slot.capacity], data, &plan)?;
        }
        Ok(())
    }
}

/// The inputs of one part of a gather and the staging bytes, bindings and kinds they own.
struct Part<'s> {
    /// Index of the part's first input.
    first: usize,
    /// Staging offset of `staging[0]`.
    base: usize,
    staging: &'s mut [u8],
    bindings: &'s mut [DeviceSlice],
    kinds: &'s mut [BindingKind],
    /// What gathering the part returned, once it ran on a helper.
    outcome: Option<Result<usize>>,
}

/// Checks and copies (padding per plan) the host inputs of one part into its staging bytes and binds
/// them to their slots, prefetching the part's sources first when `prefetch` (a part of a split
/// gather). Returns the end of the staging span the part used.
fn gather_part<'a>(
    layout: &ArenaLayout,
    part: &mut Part<'_>,
    source: &impl Fn(usize) -> InputSource<'a>,
    slot_views: &[DeviceSlice],
    streaming: bool,
    prefetch: bool,
) -> Result<usize> {
    let Part { first, base, staging, bindings, kinds, .. } = part;
    let (first, base) = (*first, *base);
    let mut span_end = 0usize;
    let result = (|| {
        let end = first + bindings.len();
        // In a split gather, a helper asks for its part's source bytes all at once before copying
        // any: it finds them in another core's cache (the caller wrote them), and many small inputs
        // are short streams the hardware prefetcher does not follow, so the copy loop would
        // otherwise wait for them a few lines at a time. The calling thread does not: its sources
        // are in its own caches or memory, and when it runs every part alone (helpers parked) the
        // prefetch pass would only make it slower than a gather without helpers.
        let mut budget = if prefetch && on_helper_thread() { PREFETCH_BYTES_PER_PART } else { 0 };
        for index in first..end {
            if budget == 0 {
                break;
            }
            if let InputSource::Host { data, plan } = source(index) {
                let bytes = data.get(plan.src_range()).unwrap_or_default();
                let take = bytes.len().min(budget);
                prefetch_to_l2(&bytes[..take]);
                budget -= take;
            }
        }
        for (k, slot) in layout.inputs()[first..end].iter().enumerate() {
            let InputSource::Host { data, plan } = source(first + k) else { continue };
            check_aligned("input", &slot.name, data.as_ptr() as usize, data.len(), slot.element_bytes)?;
            check_fits(slot, &plan)?;
            let range = plan.src_range();
            let Some(real) = data.get(range.clone()) else {
                return Err(ArenaError::InputTooShort {
                    input: slot.name.clone(),
                    needed: range.end,
                    actual: data.len(),
                });
            };
            let dst_len = plan.dst_len();
            let at = slot.offset - base;
            if real.len() == dst_len {
                // The room up to the next slot (or the part's end): the copy may stream a last partial
                // line whole into it.
                let room = layout.inputs().get(first + k + 1).map_or(staging.len(), |next| next.offset - base);
                copy_bytes(real, &mut staging[at..room.max(at + dst_len)], streaming);
            } else {
                pad_rows_into(data, &mut staging[at..at + dst_len], &plan)?;
            }
            span_end = span_end.max(slot.offset + dst_len);
            // Store only what changed (nothing while requests keep their buckets; a new bucket
            // changes bindings only, whose lines parts share at their ends): the kinds, a byte per
            // input, put every part on the same few cache lines, and a store to a line that other
            // helpers are storing to waits for it to come over from their cores, input after input
            // (190 inputs on eight threads: 2 to 3 us per gather on an H200 host).
            let binding = DeviceSlice::from_raw(slot_views[first + k].ptr(), dst_len);
            if bindings[k] != binding {
                bindings[k] = binding;
            }
            if kinds[k] != BindingKind::Staged {
                kinds[k] = BindingKind::Staged;
            }
        }
        Ok(span_end)
    })();
    if streaming {
        store_fence();
    }
    result
}

/// How many source bytes a gather part prefetches before copying (on an H200 host, 190 inputs of
/// 1 KiB: about 1 us less per gather with seven helpers). Beyond this, inputs are long streams the
/// hardware prefetcher follows.
const PREFETCH_BYTES_PER_PART: usize = 64 * 1024;

/// Splits `slots` into at most `parts` contiguous runs of about equal bytes; returns each run's
/// first index, then `slots.len()`.
fn balanced_parts(slots: &[Slot], parts: usize) -> Vec<usize> {
    let total: usize = slots.iter().map(|s| s.capacity).sum();
    let mut starts = vec![0];
    let mut before = 0usize;
    for (index, slot) in slots.iter().enumerate() {
        let part = starts.len();
        if part < parts && index > 0 && before >= total / parts * part {
            starts.push(index);
        }
        before += slot.capacity;
    }
    starts.push(slots.len());
    starts
}

pub(crate) fn check_fits(slot: &Slot, plan: &PadPlan) -> Result<()> {
    if plan.dst_len() > slot.capacity {
        return Err(ArenaError::InputTooLarge {
            input: slot.name.clone(),
            bytes: plan.dst_len(),
            capacity: slot.capacity,
        });
    }
    Ok(())
}

fn slot_view<D: DeviceBuffer>(memory: &D, base: usize, slot: &Slot) -> DeviceSlice {
    memory.slice(base + slot.offset, slot.capacity).expect("the layout places every slot inside the arena")
}

impl<B: Backend> Drop for Arena<B> {
    fn drop(&mut self) {
        // Pinned memory must outlive the stream's use of it: wait before the buffers are freed.
        if self.pending
            && let Err(e) = self.in_flight.synchronize()
        {
            tracing::error!(error = %e, "saggar-arena: waiting for in-flight copies before freeing an arena failed");
        }
    }
}
