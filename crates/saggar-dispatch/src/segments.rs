//! Segmented models: a model some of whose extents depend on values it computes (how many elements a
//! NonZero finds, the branch an If takes on a computed condition) runs as a chain of segments, each a
//! model of its own with its own session, programs and graphs.
//!
//! A segment's inputs are model inputs or outputs of earlier segments. The computed values that fix a
//! later segment's extents are among them and are that segment's value inputs
//! ([`crate::ModelSpec::value_inputs`]), so it gets one program per shape and values, from its
//! bounded table. A request runs the segments in order on host tensors: each segment's outputs are
//! read back before the next starts (one synchronisation per boundary, counted in
//! [`crate::StatsSnapshot::segment_reads`]), and the next segment takes them as inputs. Calls that
//! must know output extents before running (device tensors, [`crate::Session::output_dims`],
//! requests written in place) answer [`DispatchError::ExtentsDependOnValues`].

use std::sync::Arc;

use saggar_device::Backend;

use crate::compiler::ProgramCompiler;
use crate::config::SessionConfig;
use crate::error::{DispatchError, Result};
use crate::programs::Progress;
use crate::session::Session;
use crate::stats::StatsSnapshot;
use crate::tensors::{HostTensor, OwnedTensor};

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
    /// One source per input of the segment's model.
    pub inputs: Vec<SegmentSource>,
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
        f.debug_struct("Segment").field("inputs", &self.inputs).finish_non_exhaustive()
    }
}

impl<C> std::fmt::Debug for Segments<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segments").field("segments", &self.segments).field("outputs", &self.outputs).finish()
    }
}

/// A segmented model's sessions, one per segment, on one device.
pub(crate) struct Chain<B: Backend, C: ProgramCompiler<B>> {
    sessions: Vec<Session<B, C>>,
    inputs: Vec<Vec<SegmentSource>>,
    outputs: Vec<SegmentSource>,
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
        for (k, segment) in segments.segments.into_iter().enumerate() {
            let spec = segment.compiler.model();
            if spec.inputs.len() != segment.inputs.len() {
                return Err(DispatchError::Config(format!(
                    "segment {k} of the model takes {} inputs, its wiring names {}",
                    spec.inputs.len(),
                    segment.inputs.len()
                )));
            }
            for source in &segment.inputs {
                check_source(*source, k, model_inputs, &sessions)?;
            }
            sessions.push(Session::new(device.clone(), segment.compiler, config.clone(), progress)?);
            inputs.push(segment.inputs);
        }
        for source in &segments.outputs {
            check_source(*source, sessions.len(), model_inputs, &sessions)?;
        }
        Ok(Chain { sessions, inputs, outputs: segments.outputs })
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
        let mut produced: Vec<Vec<Aligned>> = Vec::with_capacity(self.sessions.len());
        for (k, session) in self.sessions.iter().enumerate() {
            if k > 0 {
                crate::stats::Stats::bump(reads);
            }
            let specs = session.signature().inputs();
            let tensors: Vec<HostTensor<'_>> = self.inputs[k]
                .iter()
                .zip(specs)
                .map(|(source, spec)| match *source {
                    SegmentSource::Input(i) => HostTensor { name: spec.name(), ..ordered[i] },
                    SegmentSource::Output { segment, output } => produced[segment][output].view(spec.name()),
                })
                .collect();
            let outputs = session.run(&tensors)?;
            produced.push(outputs.into_iter().map(Aligned::from).collect());
        }
        Ok(self
            .outputs
            .iter()
            .zip(names)
            .map(|(source, name)| match *source {
                SegmentSource::Input(i) => OwnedTensor {
                    name: name.to_string(),
                    dtype: ordered[i].dtype,
                    dims: ordered[i].dims.to_vec(),
                    data: ordered[i].data.to_vec(),
                },
                SegmentSource::Output { segment, output } => produced[segment][output].owned(name),
            })
            .collect())
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

fn check_source<B: Backend, C: ProgramCompiler<B>>(
    source: SegmentSource,
    before: usize,
    model_inputs: usize,
    sessions: &[Session<B, C>],
) -> Result<()> {
    let ok = match source {
        SegmentSource::Input(i) => i < model_inputs,
        SegmentSource::Output { segment, output } => {
            segment < before && output < sessions[segment].signature().outputs().len()
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

/// A segment's output in 8-byte-aligned memory, so the next segment can take it as an input of any
/// element type.
struct Aligned {
    tensor: OwnedTensor,
    words: Vec<u64>,
}

impl From<OwnedTensor> for Aligned {
    fn from(mut tensor: OwnedTensor) -> Aligned {
        let mut words = vec![0u64; tensor.data.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..tensor.data.len()].copy_from_slice(&tensor.data);
        tensor.data = Vec::new();
        Aligned { tensor, words }
    }
}

impl Aligned {
    fn bytes(&self) -> &[u8] {
        let len = self.tensor.dims.iter().product::<u64>() as usize * self.tensor.dtype.size_bytes();
        &bytemuck::cast_slice::<u64, u8>(&self.words)[..len]
    }

    fn view<'a>(&'a self, name: &'a str) -> HostTensor<'a> {
        HostTensor { name, dtype: self.tensor.dtype, dims: &self.tensor.dims, data: self.bytes() }
    }

    fn owned(&self, name: &str) -> OwnedTensor {
        OwnedTensor {
            name: name.to_string(),
            dtype: self.tensor.dtype,
            dims: self.tensor.dims.clone(),
            data: self.bytes().to_vec(),
        }
    }
}
