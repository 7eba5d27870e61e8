//! Requests written in place ([`Session::request`]): the caller writes its inputs straight into a
//! leased run context's pinned staging buffer and reads its outputs straight from the pinned
//! read-back buffer, so a run needs no gather and no scatter: it pads in place and launches the
//! bucket's pinned-copy graph on the arena's slots (one host-to-device copy, the program, one
//! download; the graph the pinned path replays after its gather), then waits.
//!
//! The views borrow the [`Request`]: an input view borrows it mutably and an output view shares
//! it, so the borrow checker stops a view from outliving its request and a request from running
//! while a view is held.

use saggar_arena::Lease;
use saggar_device::{Backend, Device, Stream};
use saggar_shape::{Dim, TensorSpec};

use crate::compiler::ProgramCompiler;
use crate::context::{LastRun, RunContext, Slots};
use crate::error::{DispatchError, Result};
use crate::group::InFlight;
use crate::plan::{Model, Single};
use crate::session::{Inner, Session};
use crate::tensors::{BindingMode, RunInfo, RunPath};

/// Names a model's input or output: by its index in binding order (a `usize`) or by its name.
pub trait TensorRef: sealed::Sealed {
    /// The tensor's index in `specs`, or the typed error that names what is missing.
    #[doc(hidden)]
    fn index_in(&self, role: &'static str, specs: &[TensorSpec]) -> Result<usize>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for usize {}
    impl Sealed for &str {}
    impl Sealed for &String {}
}

impl TensorRef for usize {
    fn index_in(&self, role: &'static str, specs: &[TensorSpec]) -> Result<usize> {
        if *self < specs.len() {
            Ok(*self)
        } else {
            Err(DispatchError::NoSuchTensor { role, index: *self, count: specs.len() })
        }
    }
}

impl TensorRef for &str {
    fn index_in(&self, role: &'static str, specs: &[TensorSpec]) -> Result<usize> {
        specs
            .iter()
            .position(|s| s.name() == *self)
            .ok_or_else(|| DispatchError::NoSuchName { role, name: (*self).to_string() })
    }
}

impl TensorRef for &String {
    fn index_in(&self, role: &'static str, specs: &[TensorSpec]) -> Result<usize> {
        self.as_str().index_in(role, specs)
    }
}

/// One batch size's request written in place, made by [`Session::request`]. It holds a leased
/// run context (stream, arena, graphs) for its whole life and returns it when dropped, whatever
/// state it is in; the batch's bucket and padding plans are chosen once, when it is made.
///
/// Fill the inputs through [`Request::input_mut`] (views of the real rows in pinned staging), call
/// [`Request::run`], read the outputs through [`Request::output`] (views of the real rows in the
/// pinned read-back buffer), and repeat: what was written stays in staging between runs, so a
/// caller rewrites only the inputs that change. Runs count in the session's stats like every other
/// path (ultra-fast, or fast on the first run after the context served another shape).
///
/// A request serves batches from 1 to the largest bucket: it is one chunk on one program, so a
/// larger batch is refused when the request is made ([`DispatchError::RequestBatch`]); split it
/// into several requests, or use [`Session::run`], which splits. A model with a padded axis is
/// served at the axis's buckets ([`Session::request_shaped`]): the inputs are written at a
/// bucket's extent, so no padding along the axis is needed. Models served per shape have no
/// precompiled program to write into ([`DispatchError::RequestNeedsBuckets`]).
///
/// A view cannot outlive its request:
///
/// ```compile_fail
/// # use saggar_device::Backend;
/// # use saggar_dispatch::{ProgramCompiler, Result, Session};
/// fn view_outlives<B: Backend, C: ProgramCompiler<B>>(session: &Session<B, C>) -> Result<()> {
///     let view: &mut [f32] = {
///         let mut request = session.request(1)?;
///         request.input_mut::<f32>(0)?
///     };
///     view[0] = 1.0;
///     Ok(())
/// }
/// ```
///
/// nor can a request run while a view is held:
///
/// ```compile_fail
/// # use saggar_device::Backend;
/// # use saggar_dispatch::{ProgramCompiler, Result, Session};
/// fn run_while_viewed<B: Backend, C: ProgramCompiler<B>>(session: &Session<B, C>) -> Result<()> {
///     let mut request = session.request(1)?;
///     let output: &[f32] = request.output::<f32>(0)?;
///     request.run()?;
///     println!("{}", output[0]);
///     Ok(())
/// }
/// ```
///
/// while the same code with the views used in their place compiles:
///
/// ```
/// # use saggar_device::Backend;
/// # use saggar_dispatch::{ProgramCompiler, Result, Session};
/// fn in_place<B: Backend, C: ProgramCompiler<B>>(session: &Session<B, C>) -> Result<f32> {
///     let mut request = session.request(1)?;
///     request.input_mut::<f32>(0)?[0] = 1.0;
///     request.run()?;
///     Ok(request.output::<f32>(0)?[0])
/// }
/// ```
///
/// # Thread safety
/// `Send`: a request may move to another thread; it is one caller's (its methods that write take
/// `&mut self`). Concurrent requests each hold their own run context, so their views never alias.
pub struct Request<'s, B: Backend, C: ProgramCompiler<B>> {
    session: &'s Session<B, C>,
    lease: Lease<RunContext<B>>,
    route: Single,
    this: LastRun,
    /// The padded axis's extent, for a model with one.
    axis_extent: Option<u64>,
    input_dims: Vec<Vec<u64>>,
    output_dims: Vec<Vec<u64>>,
    /// Whether the read-back buffer holds this request's outputs (its last run succeeded).
    ran: bool,
    /// A [`crate::SessionGroup`]'s count of this device's requests in flight, released on drop.
    in_flight: Option<InFlight<'s>>,
}

impl<B: Backend, C: ProgramCompiler<B>> std::fmt::Debug for Request<'_, B, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("batch", &self.batch())
            .field("bucket", &self.bucket())
            .field("input_dims", &self.input_dims)
            .finish_non_exhaustive()
    }
}

impl<B: Backend, C: ProgramCompiler<B>> Session<B, C> {
    /// Leases a run context and its arena for requests of `batch` rows written in place (see
    /// [`Request`]). For a model without a batch axis, `batch` is 1; a model with a padded axis
    /// takes [`Session::request_shaped`]. Waits for a free run context as [`Session::run`] does.
    pub fn request(&self, batch: u64) -> Result<Request<'_, B, C>> {
        Request::new(self, RequestShape::Batch(batch), None)
    }

    /// [`Session::request`] for requests whose inputs have the dimensions `input_dims` (in binding
    /// order): the way to lease one for a model with a padded axis, whose extent must then be one
    /// of the axis's buckets ([`DispatchError::PaddedAxisNeedsHostTensors`] otherwise: pad the
    /// inputs to a bucket with the session's pad values, or use [`Session::run`], which pads). The
    /// batch may be anything from 1 to the largest bucket, as for [`Session::request`].
    pub fn request_shaped<S: AsRef<[u64]>>(&self, input_dims: &[S]) -> Result<Request<'_, B, C>> {
        Request::new(self, RequestShape::Dims(input_dims.iter().map(|d| d.as_ref().to_vec()).collect()), None)
    }
}

/// What a [`Request`] is made for: a batch (of a model whose only symbol is its batch) or its
/// inputs' dimensions.
#[derive(Debug)]
pub(crate) enum RequestShape {
    Batch(u64),
    Dims(Vec<Vec<u64>>),
}

impl<'s, B: Backend, C: ProgramCompiler<B>> Request<'s, B, C> {
    pub(crate) fn new(
        session: &'s Session<B, C>,
        shape: RequestShape,
        in_flight: Option<InFlight<'s>>,
    ) -> Result<Self> {
        let inner = &*session.inner;
        let (grid, largest) = match &inner.model {
            Model::Bucketed(grid) => (Some(grid), grid.table.load().batch.largest()),
            Model::Static => (None, 1),
            Model::PerShape => return Err(DispatchError::RequestNeedsBuckets),
        };
        let input_dims = match shape {
            RequestShape::Dims(dims) => dims,
            RequestShape::Batch(_) if grid.is_some_and(|g| g.axis.is_some()) => {
                return Err(DispatchError::RequestNeedsBuckets);
            }
            RequestShape::Batch(batch) => {
                if batch == 0 || batch > largest {
                    return Err(DispatchError::RequestBatch { batch, largest });
                }
                inner.signature.inputs().iter().map(|spec| dims_at(spec, batch)).collect()
            }
        };
        let bindings = inner.signature.check(&input_dims)?;
        inner.guard.check(&bindings, &input_dims)?;
        let batch = bindings.batch().unwrap_or(1);
        if batch == 0 || batch > largest {
            return Err(DispatchError::RequestBatch { batch, largest });
        }
        let route = match (inner.single(&bindings), grid) {
            (Some(route), _) => route,
            (None, Some(grid)) => return Err(grid.axis_error_of(&bindings)),
            (None, None) => return Err(DispatchError::RequestBatch { batch, largest }),
        };
        let axis_extent = grid.and_then(|g| g.axis_extent(&bindings));
        let output_dims = (0..inner.signature.outputs().len())
            .map(|o| Ok(bindings.output_shape(o)?.to_vec()))
            .collect::<Result<Vec<_>>>()?;
        let this = LastRun { mode: BindingMode::PinnedCopy, batch: bindings.batch(), program: inner.main[route.k].id };
        let mut lease = {
            let _pin = inner.device.pin()?;
            inner.contexts.lease()?
        };
        // Planning rewrites the context's plans and switches its arena to this program's layout, so
        // whatever the context ran last can no longer take the ultra-fast path, even if this request
        // is dropped before it runs.
        lease.last = None;
        let slots = lease.slots.as_mut().ok_or(DispatchError::RequestNeedsBuckets)?;
        inner.plan_chunk(slots, &input_dims, route.k, route.chunk)?;
        Ok(Request { session, lease, route, this, axis_extent, input_dims, output_dims, ran: false, in_flight })
    }

    /// The session it runs on.
    pub fn session(&self) -> &'s Session<B, C> {
        self.session
    }

    /// The request's batch (`None` for a model without a batch axis).
    pub fn batch(&self) -> Option<u64> {
        self.this.batch
    }

    /// The bucket it runs as (`None` for a model without a batch axis).
    pub fn bucket(&self) -> Option<u64> {
        self.session.inner.main[self.route.k].bucket
    }

    /// The inputs' dimensions, in binding order.
    pub fn input_dims(&self) -> &[Vec<u64>] {
        &self.input_dims
    }

    /// The outputs' dimensions (the real batch), in binding order.
    pub fn output_dims(&self) -> &[Vec<u64>] {
        &self.output_dims
    }

    /// A view of `input`'s real rows (by index in binding order, or by name) in pinned staging, as
    /// elements of `T`, which must have the input's element size. Write the input there; it stays
    /// until it is written again, also across runs.
    pub fn input_mut<T: bytemuck::Pod>(&mut self, input: impl TensorRef) -> Result<&mut [T]> {
        let specs = self.session.inner.signature.inputs();
        let index = input.index_in("input", specs)?;
        check_element::<T>("input", &specs[index])?;
        let Slots { arena, pad_plans, .. } = slots(&mut self.lease)?;
        let bytes = arena.staged_input_mut(index, &pad_plans[index])?;
        cast::<T, _>("input", &specs[index], bytemuck::try_cast_slice_mut(bytes))
    }

    /// [`Request::input_mut`] as bytes, whatever the input's element type (for callers that hold
    /// their inputs as bytes).
    pub fn input_bytes_mut(&mut self, input: impl TensorRef) -> Result<&mut [u8]> {
        let index = input.index_in("input", self.session.inner.signature.inputs())?;
        let Slots { arena, pad_plans, .. } = slots(&mut self.lease)?;
        Ok(arena.staged_input_mut(index, &pad_plans[index])?)
    }

    /// Copies `data` (exactly the input's real rows, as elements of `T`, which must have the input's
    /// element size) into `input`'s slot in pinned staging with streaming stores on GPU backends:
    /// the way to fill a request from inputs that already exist elsewhere. Bytes written through
    /// [`Request::input_mut`] with ordinary stores stay dirty in this core's cache, and the run's
    /// copy then has to snoop them out of it, which makes it slower; streamed bytes are already in
    /// memory.
    pub fn write_input<T: bytemuck::Pod>(&mut self, input: impl TensorRef, data: &[T]) -> Result<()> {
        let specs = self.session.inner.signature.inputs();
        let index = input.index_in("input", specs)?;
        check_element::<T>("input", &specs[index])?;
        self.write_index(index, bytemuck::cast_slice(data))
    }

    /// [`Request::write_input`] from bytes, whatever the input's element type.
    pub fn write_input_bytes(&mut self, input: impl TensorRef, data: &[u8]) -> Result<()> {
        let index = input.index_in("input", self.session.inner.signature.inputs())?;
        self.write_index(index, data)
    }

    fn write_index(&mut self, index: usize, data: &[u8]) -> Result<()> {
        let Slots { arena, pad_plans, .. } = slots(&mut self.lease)?;
        Ok(arena.write_staged_input(index, &pad_plans[index], data)?)
    }

    /// Bytes the run's one host-to-device copy sends: the request's bucket's inputs, packed in its
    /// own layout (slot alignment gaps included).
    pub fn upload_bytes(&self) -> usize {
        self.session.inner.upload_span[self.route.k]
    }

    /// Bytes the run's one device-to-host copy brings back (the bucket's outputs, packed likewise).
    pub fn download_bytes(&self) -> usize {
        self.session.inner.download_span[self.route.k]
    }

    /// Runs the request: pads every input in place to the bucket (repeating its last real row; no
    /// work when the batch is the bucket), replays the bucket's graph that holds ONE host-to-device
    /// copy of the bucket's inputs, the program on the arena's slots and one download of the
    /// outputs (or enqueues the same eagerly when graphs are off), and waits for the stream: one
    /// graph launch and one stream synchronize, no event, no gather, no allocation. The copies are
    /// made by the copy engine or, up to [`crate::SessionConfigBuilder::kernel_copies_up_to`], by a
    /// kernel through the mapped pinned buffers.
    pub fn run(&mut self) -> Result<RunInfo> {
        let inner = &*self.session.inner;
        self.ran = false;
        let (route, this) = (self.route, self.this);
        if let (Model::Bucketed(grid), Some(batch)) = (&inner.model, this.batch) {
            grid.observe_request(batch, self.axis_extent);
        }
        let info = inner.counted(|| {
            let _pin = inner.device.pin()?;
            inner.run_on(&mut self.lease, |inner, ctx| inner.run_staged(ctx, route, this))
        });
        let info = match &self.in_flight {
            Some(flight) => flight.observe(info)?,
            None => info?,
        };
        inner.stats.record_path(info.path);
        self.ran = true;
        Ok(info)
    }

    /// A view of `output`'s real rows (by index in binding order, or by name) in the pinned
    /// read-back buffer, as elements of `T`, which must have the output's element size. Valid until
    /// the request runs again or is dropped. Fails with [`DispatchError::RequestNotRun`] until a run
    /// succeeded.
    pub fn output<T: bytemuck::Pod>(&self, output: impl TensorRef) -> Result<&[T]> {
        let specs = self.session.inner.signature.outputs();
        let index = output.index_in("output", specs)?;
        check_element::<T>("output", &specs[index])?;
        let bytes = self.output_bytes(index)?;
        cast::<T, _>("output", &specs[index], bytemuck::try_cast_slice(bytes))
    }

    /// [`Request::output`] as bytes, whatever the output's element type.
    pub fn output_bytes(&self, output: impl TensorRef) -> Result<&[u8]> {
        let index = output.index_in("output", self.session.inner.signature.outputs())?;
        if !self.ran {
            return Err(DispatchError::RequestNotRun);
        }
        let slots = self.lease.slots.as_ref().ok_or(DispatchError::RequestNeedsBuckets)?;
        Ok(slots.arena.downloaded_output(index, &slots.slice_plans[index])?)
    }
}

impl<B: Backend, C: ProgramCompiler<B>> Inner<B, C> {
    /// One run of a request written in place, on its leased context.
    fn run_staged(&self, ctx: &mut RunContext<B>, route: Single, this: LastRun) -> Result<RunInfo> {
        let RunContext { slots: Some(slots), last, stream, .. } = ctx else {
            return Err(DispatchError::RequestNeedsBuckets);
        };
        let Single { k, chunk } = route;
        let path = if *last == Some(this) { RunPath::UltraFast } else { RunPath::Fast };
        *last = None;
        if chunk.rows < chunk.bucket {
            let Slots { arena, pad_plans, .. } = &mut *slots;
            arena.pad_staged(|i| pad_plans[i])?;
        }
        // The pinned-copy path's graph: the upload of the bucket's packed span, the program on the
        // arena's slots and the download, in one launch, then one wait, which covers both copies, so
        // no fence event is needed to keep the host off the pinned buffers while they are in flight.
        let enqueued = (|| {
            let replayed = self.run_on_slots(stream, slots, k, BindingMode::PinnedCopy)?;
            stream.synchronize()?;
            Ok(replayed)
        })();
        let replayed = match enqueued {
            Ok(replayed) => replayed,
            Err(e) => {
                if let Err(fence) = slots.arena.fence(stream) {
                    tracing::error!(error = %fence, "saggar-dispatch: fencing a failed request's copies failed");
                }
                return Err(e);
            }
        };
        slots.arena.wait_idle()?;
        *last = Some(this);
        self.count_chunk(chunk);
        Ok(RunInfo {
            path,
            mode: BindingMode::PinnedCopy,
            batch: this.batch,
            bucket: self.main[k].bucket,
            chunks: 1,
            replayed,
        })
    }
}

/// A tensor's dimensions at `batch` rows: the model's only symbol, if any, is its batch.
fn dims_at(spec: &TensorSpec, batch: u64) -> Vec<u64> {
    spec.dims()
        .iter()
        .map(|d| match d {
            Dim::Fixed(extent) => *extent,
            Dim::Symbolic(_) => batch,
        })
        .collect()
}

fn slots<B: Backend>(ctx: &mut RunContext<B>) -> Result<&mut Slots<B>> {
    ctx.slots.as_mut().ok_or(DispatchError::RequestNeedsBuckets)
}

/// Checks that `T` has the element size of `spec`'s dtype.
fn check_element<T>(role: &'static str, spec: &TensorSpec) -> Result<()> {
    let element_bytes = std::mem::size_of::<T>();
    if element_bytes != spec.dtype().size_bytes() {
        return Err(DispatchError::ElementType {
            role,
            name: spec.name().to_string(),
            dtype: spec.dtype(),
            element_bytes,
        });
    }
    Ok(())
}

/// A cast's result as a typed error (staging and read-back slots are aligned to their element
/// size, and their lengths are whole elements, so a failure means `T` is over-aligned).
fn cast<T, V>(role: &'static str, spec: &TensorSpec, cast: Result<V, bytemuck::PodCastError>) -> Result<V> {
    cast.map_err(|_| DispatchError::ElementType {
        role,
        name: spec.name().to_string(),
        dtype: spec.dtype(),
        element_bytes: std::mem::size_of::<T>(),
    })
}
