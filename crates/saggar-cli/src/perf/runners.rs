//! The three kinds of request `saggar perf` times, as [`Runner`]s of the one request loop, for any
//! model source (built-in families and ONNX models alike): every distinct batch is one set of host
//! tensors (`sets[s]`) whose outputs take `output_bytes[s][o]` bytes with shapes `output_dims[s][o]`.
//!
//! - [`Pinned`]: host tensors through pinned staging, `Session::run_into` into each worker's output
//!   buffers, or `Session::run_into_timed` for requests whose stages are timed;
//! - [`Staged`]: inputs written in place into pinned staging through a `Session::request` per batch;
//! - [`Direct`]: device tensors (each set uploaded once, shared read-only by the workers) with
//!   `Session::run_device` into each worker's device outputs.
//!
//! Kept outputs are the bytes of each output, in binding order.

use saggar_device::{Backend, Device as _, DeviceBuffer as _, Stream as _};
use saggar_dispatch::{DeviceTensor, HostTensor, ProgramCompiler, Session, SessionGroup, StageTimer};

use super::bench::{self, Ask, LoopPlan, Measured, Ran, Runner};
use super::session::Served;
use crate::cli::BindingArg;
use crate::error::Result;

/// Outputs of one kept request, one byte vector per output.
pub type Kept = Vec<Vec<u8>>;

/// What every runner knows about the requests.
#[derive(Debug, Clone, Copy)]
pub struct Sets<'a> {
    /// Each distinct batch's input tensors, in the session's binding order.
    pub inputs: &'a [Vec<HostTensor<'a>>],
    /// Each set's output shapes.
    pub output_dims: &'a [Vec<Vec<u64>>],
    /// Each set's output sizes in bytes.
    pub output_bytes: &'a [Vec<usize>],
}

impl Sets<'_> {
    /// The largest size of output `o` over every set.
    fn largest(&self, o: usize) -> usize {
        self.output_bytes.iter().map(|set| set[o]).max().unwrap_or(0)
    }

    fn outputs(&self) -> usize {
        self.output_bytes.first().map_or(0, Vec::len)
    }
}

/// Host tensors through pinned staging.
pub struct Pinned<'a, B: Backend, C: ProgramCompiler<B>> {
    /// The session.
    pub session: &'a Session<B, C>,
    /// The requests.
    pub sets: Sets<'a>,
}

/// A pinned worker's output buffers (u64 words, so every element type is aligned; sized for the
/// largest set, each request using a prefix) and its stage timer.
pub struct PinnedWorker<B: Backend> {
    outputs: Vec<Vec<u64>>,
    timer: StageTimer<B>,
}

impl<B: Backend, C: ProgramCompiler<B>> Runner for Pinned<'_, B, C> {
    type Worker<'w>
        = PinnedWorker<B>
    where
        Self: 'w;
    type Kept = Kept;

    fn worker(&self) -> Result<PinnedWorker<B>> {
        let outputs = (0..self.sets.outputs()).map(|o| vec![0u64; self.sets.largest(o).div_ceil(8)]).collect();
        Ok(PinnedWorker { outputs, timer: self.session.stage_timer()? })
    }

    fn run(&self, worker: &mut PinnedWorker<B>, ask: Ask) -> Result<Ran> {
        let bytes = &self.sets.output_bytes[ask.set];
        let mut views: Vec<&mut [u8]> = worker
            .outputs
            .iter_mut()
            .zip(bytes)
            .map(|(words, &n)| &mut bytemuck::cast_slice_mut::<u64, u8>(words)[..n])
            .collect();
        let inputs = &self.sets.inputs[ask.set];
        // A segmented model's stages are its segments' runs: timed as a whole.
        let (info, stages) = if ask.stages && !self.session.is_segmented() {
            let (info, stages) = self.session.run_into_timed(&worker.timer, inputs, &mut views)?;
            (info, Some(stages))
        } else {
            (self.session.run_into(inputs, &mut views)?, None)
        };
        Ok(Ran { path: Some(info.path), bucket: info.bucket, stages })
    }

    fn keep(&self, worker: &mut PinnedWorker<B>, ask: Ask) -> Result<Kept> {
        Ok(kept_views(&worker.outputs, &self.sets.output_bytes[ask.set]))
    }
}

/// The first `bytes[o]` bytes of each output buffer `o`, copied.
fn kept_views(outputs: &[Vec<u64>], bytes: &[usize]) -> Kept {
    outputs.iter().zip(bytes).map(|(words, &n)| bytemuck::cast_slice::<u64, u8>(words)[..n].to_vec()).collect()
}

/// Host tensors through pinned staging on a session group: `SessionGroup::run_into` on the least
/// loaded device, into each worker's output buffers (stages are not timed: they belong to one device).
pub struct Grouped<'a, B: Backend, C: ProgramCompiler<B>> {
    /// The group.
    pub group: &'a SessionGroup<B, C>,
    /// The requests.
    pub sets: Sets<'a>,
}

impl<B: Backend, C: ProgramCompiler<B>> Runner for Grouped<'_, B, C> {
    type Worker<'w>
        = Vec<Vec<u64>>
    where
        Self: 'w;
    type Kept = Kept;

    fn worker(&self) -> Result<Vec<Vec<u64>>> {
        Ok((0..self.sets.outputs()).map(|o| vec![0u64; self.sets.largest(o).div_ceil(8)]).collect())
    }

    fn run(&self, outputs: &mut Vec<Vec<u64>>, ask: Ask) -> Result<Ran> {
        let bytes = &self.sets.output_bytes[ask.set];
        let mut views: Vec<&mut [u8]> = outputs
            .iter_mut()
            .zip(bytes)
            .map(|(words, &n)| &mut bytemuck::cast_slice_mut::<u64, u8>(words)[..n])
            .collect();
        let (_, info) = self.group.run_into(&self.sets.inputs[ask.set], &mut views)?;
        Ok(Ran { path: Some(info.path), bucket: info.bucket, stages: None })
    }

    fn keep(&self, outputs: &mut Vec<Vec<u64>>, ask: Ask) -> Result<Kept> {
        Ok(kept_views(outputs, &self.sets.output_bytes[ask.set]))
    }
}

/// Inputs written in place: one `Session::request_shaped` at a time per worker, leased again when
/// the request's shape changes (the previous one returned first, so workers never hold more run
/// contexts than there are). Each request's time covers the lease when there is one, writing its
/// inputs, and the run.
pub struct Staged<'a, B: Backend, C: ProgramCompiler<B>> {
    /// The session.
    pub session: &'a Session<B, C>,
    /// The requests.
    pub sets: Sets<'a>,
}

impl<B: Backend, C: ProgramCompiler<B>> Runner for Staged<'_, B, C> {
    type Worker<'w>
        = Option<(usize, saggar_dispatch::Request<'w, B, C>)>
    where
        Self: 'w;
    type Kept = Kept;

    fn worker(&self) -> Result<Self::Worker<'_>> {
        Ok(None)
    }

    fn run<'w>(&'w self, current: &mut Self::Worker<'w>, ask: Ask) -> Result<Ran> {
        if current.as_ref().is_none_or(|(set, _)| *set != ask.set) {
            *current = None;
            let dims: Vec<&[u64]> = self.sets.inputs[ask.set].iter().map(|t| t.dims).collect();
            *current = Some((ask.set, self.session.request_shaped(&dims)?));
        }
        let Some((_, request)) = current.as_mut() else { unreachable!("leased above") };
        for (index, tensor) in self.sets.inputs[ask.set].iter().enumerate() {
            // Streamed into pinned staging, so the run's copy finds no dirty cache lines to snoop.
            request.write_input_bytes(index, tensor.data)?;
        }
        let info = request.run()?;
        Ok(Ran { path: Some(info.path), bucket: info.bucket, stages: None })
    }

    fn keep<'w>(&'w self, current: &mut Self::Worker<'w>, _ask: Ask) -> Result<Kept> {
        let Some((_, request)) = current.as_ref() else { unreachable!("kept after a run") };
        Ok((0..self.sets.outputs())
            .map(|o| request.output_bytes(o).map(<[u8]>::to_vec))
            .collect::<saggar_dispatch::Result<Vec<_>>>()?)
    }
}

/// Uploads every set's inputs once (for [`Direct`]): one device buffer per input per set.
pub fn upload_sets<B: Backend>(device: &B::Device, sets: &Sets<'_>) -> Result<Vec<Vec<B::DeviceBuffer>>> {
    let _pin = device.pin()?;
    let stream = device.create_stream()?;
    sets.inputs
        .iter()
        .map(|set| {
            set.iter()
                .map(|tensor| {
                    let buffer = device.alloc(tensor.data.len())?;
                    stream.upload(tensor.data, buffer.as_slice())?;
                    Ok(buffer)
                })
                .collect::<Result<Vec<_>>>()
        })
        .collect()
}

/// The device tensors of [`upload_sets`]' buffers.
pub fn device_sets<'a, B: Backend>(sets: &Sets<'a>, buffers: &'a [Vec<B::DeviceBuffer>]) -> Vec<Vec<DeviceTensor<'a>>> {
    sets.inputs
        .iter()
        .zip(buffers)
        .map(|(set, buffers)| {
            set.iter()
                .zip(buffers)
                .map(|(t, buffer)| DeviceTensor { name: t.name, dtype: t.dtype, dims: t.dims, data: buffer.as_slice() })
                .collect()
        })
        .collect()
}

/// Device tensors: `Session::run_device` with each worker's output buffers, one set per distinct
/// batch, so exact-bucket requests are direct-bound with stable pointers.
pub struct Direct<'a, B: Backend, C: ProgramCompiler<B>> {
    /// The session.
    pub session: &'a Session<B, C>,
    /// The requests (their output shapes and sizes).
    pub sets: Sets<'a>,
    /// The device copies of every set's inputs ([`device_sets`]).
    pub device_inputs: &'a [Vec<DeviceTensor<'a>>],
}

/// A direct worker's stream (for reading kept outputs back), output buffers and their tensors.
pub struct DirectWorker<'a, B: Backend> {
    stream: B::Stream,
    buffers: Vec<Vec<B::DeviceBuffer>>,
    outputs: Vec<Vec<DeviceTensor<'a>>>,
}

impl<'a, B: Backend, C: ProgramCompiler<B>> Runner for Direct<'a, B, C> {
    type Worker<'w>
        = DirectWorker<'a, B>
    where
        Self: 'w;
    type Kept = Kept;

    fn worker(&self) -> Result<DirectWorker<'a, B>> {
        let device = self.session.device();
        let _pin = device.pin()?;
        let stream = device.create_stream()?;
        let specs = self.session.signature().outputs();
        let buffers: Vec<Vec<B::DeviceBuffer>> = self
            .sets
            .output_bytes
            .iter()
            .map(|set| set.iter().map(|&n| device.alloc(n)).collect())
            .collect::<saggar_device::Result<_>>()?;
        let output_dims = self.sets.output_dims;
        let outputs = buffers
            .iter()
            .zip(output_dims)
            .map(|(set, dims)| {
                specs
                    .iter()
                    .zip(set)
                    .zip(dims)
                    .map(|((spec, buffer), dims)| DeviceTensor {
                        name: spec.name(),
                        dtype: spec.dtype(),
                        dims,
                        data: buffer.as_slice(),
                    })
                    .collect()
            })
            .collect();
        Ok(DirectWorker { stream, buffers, outputs })
    }

    fn run(&self, worker: &mut DirectWorker<'a, B>, ask: Ask) -> Result<Ran> {
        let info = self.session.run_device(&self.device_inputs[ask.set], &worker.outputs[ask.set])?;
        Ok(Ran { path: Some(info.path), bucket: info.bucket, stages: None })
    }

    fn keep(&self, worker: &mut DirectWorker<'a, B>, ask: Ask) -> Result<Kept> {
        let mut kept = Vec::with_capacity(worker.buffers[ask.set].len());
        for buffer in &worker.buffers[ask.set] {
            let mut bytes = vec![0u8; buffer.len()];
            worker.stream.download(buffer.as_slice(), &mut bytes)?;
            kept.push(bytes);
        }
        Ok(kept)
    }
}

/// What [`run`] measured, and how it bound the tensors.
pub struct Bound {
    /// The loop's measurements.
    pub measured: Measured<Kept>,
    /// `pinned`, `request` or `direct`.
    pub binding: &'static str,
    /// Why no stages were timed, for bindings that do not time them.
    pub stages_unavailable: Option<String>,
}

/// Runs the loop `plan` with the runner of `binding`; `warm` runs between the warmup and the timed
/// requests. A session group runs host tensors through pinned staging only.
pub fn run<B: Backend, C: ProgramCompiler<B>>(
    binding: BindingArg,
    served: &Served<B, C>,
    sets: Sets<'_>,
    mut plan: LoopPlan<'_>,
    warm: impl FnOnce(),
) -> Result<Bound> {
    let session = match served {
        Served::One(session) => session,
        // `pipeline::run` refuses --devices with another binding before anything is compiled.
        Served::Group(group) => {
            plan.stage_every = 0;
            return Ok(Bound {
                measured: bench::run(&Grouped { group, sets }, &plan, warm)?,
                binding: "pinned",
                stages_unavailable: Some("stages are timed on one device (--device), not a group".to_string()),
            });
        }
    };
    let unavailable = || Some("stages are timed with --binding pinned only".to_string());
    Ok(match binding {
        BindingArg::Pinned | BindingArg::Auto => Bound {
            measured: bench::run(&Pinned { session, sets }, &plan, warm)?,
            binding: "pinned",
            stages_unavailable: None,
        },
        BindingArg::Request => {
            plan.stage_every = 0;
            Bound {
                measured: bench::run(&Staged { session, sets }, &plan, warm)?,
                binding: "request",
                stages_unavailable: unavailable(),
            }
        }
        BindingArg::Direct => {
            plan.stage_every = 0;
            let buffers = upload_sets::<B>(session.device(), &sets)?;
            let device_inputs = device_sets::<B>(&sets, &buffers);
            Bound {
                measured: bench::run(&Direct { session, sets, device_inputs: &device_inputs }, &plan, warm)?,
                binding: "direct",
                stages_unavailable: unavailable(),
            }
        }
    })
}
