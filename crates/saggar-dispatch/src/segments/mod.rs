//! Segmented models: a model some of whose extents depend on values it computes (how many elements a
//! NonZero finds, the branch an If takes on a computed condition) runs as a chain of segments, each a
//! model of its own with its own session, programs and graphs.
//!
//! A segment's inputs are model inputs or outputs of earlier segments. The computed values that fix a
//! later segment's extents are among them and are that segment's value inputs
//! ([`crate::ModelSpec::value_inputs`]), so it gets one program per shape and values, from its
//! bounded table. A request runs the segments in order on the device: the model inputs are uploaded
//! once, each segment runs on device buffers ([`Session::run_device`]) and its outputs stay there for
//! the segments that read them; only the small outputs a later segment takes as value inputs are
//! read back (one synchronisation per boundary, counted in [`crate::StatsSnapshot::segment_reads`]),
//! and the model outputs at the end. The device buffers of a request are a workspace the chain
//! keeps, one per concurrent request, each buffer grown to the largest request seen. Calls that must
//! know output extents before running (device tensors, [`crate::Session::output_dims`], requests
//! written in place) answer [`DispatchError::ExtentsDependOnValues`].
//!
//! A segment may be a loop body run once per iteration ([`Repeat`], `repeat.rs`): a `Loop` whose
//! condition is computed from the values it carries.

mod repeat;

use std::sync::{Arc, Mutex};

use saggar_device::{Backend, Device as _, DeviceBuffer as _, DeviceSlice, Stream as _};
use saggar_shape::DType;

use crate::compiler::ProgramCompiler;
use crate::config::SessionConfig;
use crate::error::{DispatchError, Result};
use crate::programs::Progress;
use crate::session::Session;
use crate::stats::StatsSnapshot;
use crate::tensors::{DeviceTensor, HostTensor, OwnedTensor};

pub use self::repeat::Repeat;

/// Where a segment's input, or a model output, comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentSource {
    /// Model input `0`, binding order.
    Input(usize),
    /// Output `output` (binding order) of the earlier segment `segment`.
    Output {
        /// The segment.
        segment: usize,
        /// Its output.
        output: usize,
    },
}

/// One segment: the compiler of its model, and where each of its inputs (binding order) comes from.
pub struct Segment<C> {
    /// The segment's model.
    pub compiler: Arc<C>,
    /// One source per input of the segment's model; for a loop body ([`Segment::repeat`]), per input
    /// after the iteration number and the condition.
    pub inputs: Vec<SegmentSource>,
    /// `Some` for a loop body run once per iteration: its outputs, as later segments see them, are
    /// the carried values' last values, then the scan outputs stacked over the iterations.
    pub repeat: Option<Repeat>,
}

/// The chain a segmented model runs as ([`ProgramCompiler::segments`]).
pub struct Segments<C> {
    /// The segments, in run order: a segment reads only model inputs and earlier segments.
    pub segments: Vec<Segment<C>>,
    /// One source per model output (binding order).
    pub outputs: Vec<SegmentSource>,
}

impl<C> std::fmt::Debug for Segment<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment").field("inputs", &self.inputs).field("repeat", &self.repeat).finish_non_exhaustive()
    }
}

impl<C> std::fmt::Debug for Segments<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segments").field("segments", &self.segments).field("outputs", &self.outputs).finish()
    }
}

/// A segmented model's sessions, one per segment, on one device.
pub(crate) struct Chain<B: Backend, C: ProgramCompiler<B>> {
    device: B::Device,
    sessions: Vec<Session<B, C>>,
    inputs: Vec<Vec<SegmentSource>>,
    /// Per segment, how its loop body repeats (`None` for a segment run once).
    repeats: Vec<Option<Repeat>>,
    outputs: Vec<SegmentSource>,
    /// Per segment, whether each output is a value input of a later segment (read back).
    read_back: Vec<Vec<bool>>,
    /// The first workspace slot of each segment's outputs (slots `0..model inputs` hold the inputs).
    slot_base: Vec<usize>,
    /// The first of each loop body's scratch slots ([`Repeat`]'s iteration state), after every
    /// segment's outputs.
    scratch_base: Vec<usize>,
    /// Workspace slots in all: model inputs, every segment's outputs, then the loops' scratch.
    slots: usize,
    /// The model inputs some segment reads (uploaded once per request).
    uploads: Vec<usize>,
    /// Idle workspaces, one taken per request.
    workspaces: Mutex<Vec<Workspace<B>>>,
}

/// One request's device memory: a stream for its copies and a buffer per slot (model input or
/// segment output), kept between requests and grown when a request needs more.
struct Workspace<B: Backend> {
    stream: B::Stream,
    buffers: Vec<Option<B::DeviceBuffer>>,
}

impl<B: Backend> Workspace<B> {
    /// Slot `slot`'s first `bytes` bytes (a buffer of at least one byte).
    fn slice(&mut self, device: &B::Device, slot: usize, bytes: usize) -> Result<DeviceSlice> {
        let buffer = &mut self.buffers[slot];
        if buffer.as_ref().is_none_or(|b| b.len() < bytes.max(1)) {
            *buffer = None;
            *buffer = Some(device.alloc(bytes.max(1))?);
        }
        match buffer {
            Some(b) => Ok(b.slice(0, bytes)?),
            None => unreachable!("allocated above"),
        }
    }

    /// The first `bytes` bytes of slot `slot`, allocated by an earlier [`Workspace::slice`].
    fn filled(&self, slot: usize, bytes: usize) -> Result<DeviceSlice> {
        match &self.buffers[slot] {
            Some(b) => Ok(b.slice(0, bytes)?),
            None => Err(DispatchError::Config(format!("segment workspace slot {slot} was never written"))),
        }
    }

    /// The first `bytes` bytes of slot `slot`, read back to the host (one synchronisation).
    fn read(&self, slot: usize, bytes: usize) -> Result<Vec<u8>> {
        let mut host = vec![0u8; bytes];
        self.stream.download(self.filled(slot, bytes)?, &mut host)?;
        Ok(host)
    }
}

/// What a request knows of a value produced so far: its type, extents and, for a value read back,
/// its bytes.
struct Produced {
    dtype: DType,
    dims: Vec<u64>,
    bytes: usize,
    host: Option<Vec<u8>>,
}

impl<B: Backend, C: ProgramCompiler<B>> Chain<B, C> {
    /// Checks the wiring (every source names a model input or an earlier segment's output) and
    /// creates a session per segment with the model's configuration.
    pub(crate) fn new(
        device: &B::Device,
        segments: Segments<C>,
        model_inputs: usize,
        config: &SessionConfig,
        progress: &(dyn Fn(&Progress) + Sync),
    ) -> Result<Self> {
        let mut sessions: Vec<Session<B, C>> = Vec::with_capacity(segments.segments.len());
        let mut inputs = Vec::with_capacity(segments.segments.len());
        let mut repeats = Vec::with_capacity(segments.segments.len());
        for (k, segment) in segments.segments.into_iter().enumerate() {
            let spec = segment.compiler.model();
            let own = Repeat::own_inputs(segment.repeat.as_ref());
            if spec.inputs.len() != segment.inputs.len() + own {
                return Err(DispatchError::Config(format!(
                    "segment {k} of the model takes {} inputs, its wiring names {}",
                    spec.inputs.len(),
                    segment.inputs.len() + own
                )));
            }
            if let Some(r) = &segment.repeat {
                r.check(k, spec, segment.inputs.len())?;
                for source in r.trip_count.iter().chain(&r.cond) {
                    check_source(*source, k, model_inputs, &sessions, &repeats)?;
                }
            }
            for source in &segment.inputs {
                check_source(*source, k, model_inputs, &sessions, &repeats)?;
            }
            sessions.push(Session::new(device.clone(), segment.compiler, config.clone(), progress)?);
            inputs.push(segment.inputs);
            repeats.push(segment.repeat);
        }
        for source in &segments.outputs {
            check_source(*source, sessions.len(), model_inputs, &sessions, &repeats)?;
        }
        let mut read_back: Vec<Vec<bool>> =
            sessions.iter().zip(&repeats).map(|(s, r)| vec![false; visible_outputs(s, r.as_ref())]).collect();
        let mut mark = |source: Option<&SegmentSource>| {
            if let Some(SegmentSource::Output { segment, output }) = source {
                read_back[*segment][*output] = true;
            }
        };
        for ((session, sources), r) in sessions.iter().zip(&inputs).zip(&repeats) {
            let own = Repeat::own_inputs(r.as_ref());
            for &v in &session.inner.compiler.model().value_inputs {
                mark(v.checked_sub(own).and_then(|v| sources.get(v)));
            }
            if let Some(r) = r {
                mark(r.trip_count.as_ref());
                mark(r.cond.as_ref());
            }
        }
        let mut slot_base = Vec::with_capacity(sessions.len());
        let mut slots = model_inputs;
        for (session, r) in sessions.iter().zip(&repeats) {
            slot_base.push(slots);
            slots += visible_outputs(session, r.as_ref());
        }
        let mut scratch_base = Vec::with_capacity(sessions.len());
        for r in &repeats {
            scratch_base.push(slots);
            slots += r.as_ref().map_or(0, Repeat::scratch_slots);
        }
        let uploads =
            (0..model_inputs).filter(|&i| inputs.iter().flatten().any(|s| *s == SegmentSource::Input(i))).collect();
        Ok(Chain {
            device: device.clone(),
            sessions,
            inputs,
            repeats,
            outputs: segments.outputs,
            read_back,
            slot_base,
            scratch_base,
            slots,
            uploads,
            workspaces: Mutex::new(Vec::new()),
        })
    }

    /// The segment count.
    pub(crate) fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Runs a checked request (inputs in binding order) through every segment and returns the
    /// model's outputs, named `names`. Counts one segment read per boundary in `reads`.
    pub(crate) fn run(
        &self,
        ordered: &[HostTensor<'_>],
        names: &[&str],
        reads: &std::sync::atomic::AtomicU64,
    ) -> Result<Vec<OwnedTensor>> {
        let idle = self.workspaces.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop();
        let mut ws = match idle {
            Some(ws) => ws,
            None => {
                Workspace { stream: self.device.create_stream()?, buffers: (0..self.slots).map(|_| None).collect() }
            }
        };
        let outputs = self.run_in(&mut ws, ordered, names, reads)?;
        // A workspace whose request failed is dropped: its stream may hold the failure.
        self.workspaces.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(ws);
        Ok(outputs)
    }

    fn run_in(
        &self,
        ws: &mut Workspace<B>,
        ordered: &[HostTensor<'_>],
        names: &[&str],
        reads: &std::sync::atomic::AtomicU64,
    ) -> Result<Vec<OwnedTensor>> {
        for &i in &self.uploads {
            let t = &ordered[i];
            let slice = ws.slice(&self.device, i, t.data.len())?;
            if !t.data.is_empty() {
                ws.stream.upload(t.data, slice)?;
            }
        }
        let mut produced: Vec<Vec<Produced>> = Vec::with_capacity(self.sessions.len());
        for k in 0..self.sessions.len() {
            if k > 0 {
                crate::stats::Stats::bump(reads);
            }
            let outs = match &self.repeats[k] {
                Some(r) => self.run_repeat(k, r, ws, ordered, &produced, reads)?,
                None => self.run_segment(k, ws, ordered, &produced)?,
            };
            produced.push(outs);
        }
        self.outputs
            .iter()
            .zip(names)
            .map(|(source, name)| self.model_output(ws, ordered, &produced, *source, name))
            .collect()
    }

    /// Runs segment `k` on the workspace: sizes its outputs from its inputs' extents and the values
    /// read back so far, runs it on device buffers, and reads back the outputs later segments are
    /// keyed by.
    fn run_segment(
        &self,
        k: usize,
        ws: &mut Workspace<B>,
        ordered: &[HostTensor<'_>],
        produced: &[Vec<Produced>],
    ) -> Result<Vec<Produced>> {
        let session = &self.sessions[k];
        // The request as the segment sees it, on the host: extents, and the bytes of the values read
        // back (its value inputs); the output extents follow from it.
        let view: Vec<HostTensor<'_>> = self.inputs[k]
            .iter()
            .zip(session.signature().inputs())
            .map(|(source, spec)| match *source {
                SegmentSource::Input(i) => HostTensor { name: spec.name(), ..ordered[i] },
                SegmentSource::Output { segment, output } => {
                    let p = &produced[segment][output];
                    HostTensor {
                        name: spec.name(),
                        dtype: p.dtype,
                        dims: &p.dims,
                        data: p.host.as_deref().unwrap_or(&[]),
                    }
                }
            })
            .collect();
        let out_dims = session.request_output_dims(&view)?;
        let out_specs = session.signature().outputs();
        let mut out_bytes = Vec::with_capacity(out_specs.len());
        for (o, (spec, dims)) in out_specs.iter().zip(&out_dims).enumerate() {
            let bytes = crate::request::request_bytes(spec, dims)?;
            ws.slice(&self.device, self.slot_base[k] + o, bytes)?;
            out_bytes.push(bytes);
        }
        let device_inputs = self.inputs[k]
            .iter()
            .zip(&view)
            .map(|(source, t)| {
                let bytes = match *source {
                    SegmentSource::Input(_) => t.data.len(),
                    SegmentSource::Output { segment, output } => produced[segment][output].bytes,
                };
                Ok(DeviceTensor {
                    name: t.name,
                    dtype: t.dtype,
                    dims: t.dims,
                    data: ws.filled(self.slot(*source), bytes)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let device_outputs = out_specs
            .iter()
            .zip(&out_dims)
            .enumerate()
            .map(|(o, (spec, dims))| {
                let data = ws.filled(self.slot_base[k] + o, out_bytes[o])?;
                Ok(DeviceTensor { name: spec.name(), dtype: spec.dtype(), dims, data })
            })
            .collect::<Result<Vec<_>>>()?;
        session.run_device(&device_inputs, &device_outputs)?;
        let outs = out_specs.iter().zip(out_dims).enumerate();
        outs.map(|(o, (spec, dims))| self.produced(k, o, ws, spec.dtype(), dims, out_bytes[o])).collect()
    }

    /// Output `o` of segment `k`, in its workspace slot: read back when a later segment is keyed by it.
    fn produced(
        &self,
        k: usize,
        o: usize,
        ws: &Workspace<B>,
        dtype: DType,
        dims: Vec<u64>,
        bytes: usize,
    ) -> Result<Produced> {
        let host = if self.read_back[k][o] { Some(ws.read(self.slot_base[k] + o, bytes)?) } else { None };
        Ok(Produced { dtype, dims, bytes, host })
    }

    /// The workspace slot holding `source`'s bytes.
    fn slot(&self, source: SegmentSource) -> usize {
        match source {
            SegmentSource::Input(i) => i,
            SegmentSource::Output { segment, output } => self.slot_base[segment] + output,
        }
    }

    /// Model output `name` from its source: a model input's bytes, or a segment's output (its bytes
    /// read back, or downloaded now).
    fn model_output(
        &self,
        ws: &Workspace<B>,
        ordered: &[HostTensor<'_>],
        produced: &[Vec<Produced>],
        source: SegmentSource,
        name: &str,
    ) -> Result<OwnedTensor> {
        match source {
            SegmentSource::Input(i) => Ok(OwnedTensor {
                name: name.to_string(),
                dtype: ordered[i].dtype,
                dims: ordered[i].dims.to_vec(),
                data: ordered[i].data.to_vec(),
            }),
            SegmentSource::Output { segment, output } => {
                let p = &produced[segment][output];
                let data = match &p.host {
                    Some(bytes) => bytes.clone(),
                    None => ws.read(self.slot(source), p.bytes)?,
                };
                Ok(OwnedTensor { name: name.to_string(), dtype: p.dtype, dims: p.dims.clone(), data })
            }
        }
    }

    /// Adds the segments' counters to the model session's `total`, requests, failures and latencies
    /// aside (the model's session counts those once per request).
    pub(crate) fn add_stats(&self, total: &mut StatsSnapshot) {
        for session in &self.sessions {
            let mut s = session.stats();
            s.requests = 0;
            s.failed = 0;
            s.failures = Default::default();
            s.latency = Default::default();
            total.add(&s);
        }
    }
}

/// The outputs later segments see of `session`: a loop body's, less its condition.
fn visible_outputs<B: Backend, C: ProgramCompiler<B>>(session: &Session<B, C>, repeat: Option<&Repeat>) -> usize {
    session.signature().outputs().len() - usize::from(repeat.is_some())
}

fn check_source<B: Backend, C: ProgramCompiler<B>>(
    source: SegmentSource,
    before: usize,
    model_inputs: usize,
    sessions: &[Session<B, C>],
    repeats: &[Option<Repeat>],
) -> Result<()> {
    let ok = match source {
        SegmentSource::Input(i) => i < model_inputs,
        SegmentSource::Output { segment, output } => {
            segment < before && output < visible_outputs(&sessions[segment], repeats[segment].as_ref())
        }
    };
    if ok {
        Ok(())
    } else {
        Err(DispatchError::Config(format!(
            "segment wiring names {source:?}, which does not exist before segment {before}"
        )))
    }
}
