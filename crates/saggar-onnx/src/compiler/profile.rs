//! Per-step device time of one ONNX program: [`OnnxCompiler::profile`] compiles and loads the
//! program for given inputs, runs it eagerly on one stream with a timed event recorded before the
//! first step and after every step, repeats that, and reports each step's median time with what it
//! runs (kernel or matmul shape) and the ONNX nodes it computes.
//!
//! On CUDA and HIP the events time the device's work; on the host backend they time the host thread
//! that runs the stream. Events record between steps, so a step's time includes its launch gap and
//! the sum of the steps is at most the time of the whole run between the first and last event.

use saggar_device::{Backend, Device as _, DeviceBuffer as _, Event as _, Stream as _};
use saggar_dispatch::steps::StepCompiler as _;
use saggar_dispatch::{CompileRequest, Program as _};

use crate::compiler::{OnnxCompiler, OnnxProgram};
use crate::error::OnnxError;
use crate::tensor::Tensor;

/// Largest number of profiled runs [`OnnxCompiler::profile`] accepts.
pub const MAX_PROFILE_ITERATIONS: usize = 1_000_000;

/// One step of a profiled program.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct StepProfile {
    /// The step's position in the program.
    pub index: usize,
    /// What it runs: the kernel's name, or `matmul M×N×K×BATCH` for a BLAS-Lt matmul.
    pub kind: String,
    /// The group of steps it belongs to (a fused group, an attention pattern or a GEMM with its
    /// epilogue may run as several steps); groups are numbered from 0 in program order.
    pub group: usize,
    /// Op types of the group's nodes in graph order (`OutputCopy` for a copy into an output).
    pub ops: Vec<String>,
    /// Names of the group's nodes in graph order.
    pub nodes: Vec<String>,
    /// Median time of the step over the runs, in microseconds.
    pub median_us: f64,
}

impl StepProfile {
    /// The op types joined by `+` and the node names, e.g. `Add+Relu (node_12, node_13)`.
    pub fn label(&self) -> String {
        format!("{} ({})", self.ops.join("+"), self.nodes.join(", "))
    }
}

/// The per-step profile of one program.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ProgramProfile {
    /// The input shapes profiled.
    pub input_dims: Vec<Vec<u64>>,
    /// Runs timed.
    pub iterations: usize,
    /// Every step in program order.
    pub steps: Vec<StepProfile>,
    /// Median time of a whole run (first event to last), in microseconds.
    pub total_median_us: f64,
    /// Nodes that run no step of their own (views sharing their input's bytes).
    pub untimed_nodes: Vec<String>,
    /// Nodes computed at compile time for these input shapes (shape computations and what only
    /// reads them), in graph order.
    pub folded_nodes: Vec<String>,
}

/// The steps of one op pattern, summed ([`ProgramProfile::by_ops`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OpsTotal {
    /// The op types of the steps' groups joined by `+`, e.g. `MatMul+Add`.
    pub ops: String,
    /// Steps with that pattern.
    pub steps: usize,
    /// Sum of their median times, in microseconds.
    pub us: f64,
}

impl ProgramProfile {
    /// Sum of the steps' median times, in microseconds.
    pub fn steps_us(&self) -> f64 {
        self.steps.iter().map(|s| s.median_us).sum()
    }

    /// The steps summed per op pattern, the most time first.
    pub fn by_ops(&self) -> Vec<OpsTotal> {
        let mut totals: Vec<OpsTotal> = Vec::new();
        for step in &self.steps {
            let ops = step.ops.join("+");
            match totals.iter_mut().find(|t| t.ops == ops) {
                Some(t) => {
                    t.steps += 1;
                    t.us += step.median_us;
                }
                None => totals.push(OpsTotal { ops, steps: 1, us: step.median_us }),
            }
        }
        totals.sort_by(|a, b| b.us.total_cmp(&a.us));
        totals
    }
}

impl OnnxCompiler {
    /// Compiles and loads the program for `inputs`' shapes on `device` (no compile cache), uploads
    /// `inputs`, runs it once untimed, then `iterations` times with a timed event around every step,
    /// and returns each step's median time with what it runs and the nodes it computes.
    ///
    /// The timed runs allocate nothing: events, bindings and the per-step time columns exist before
    /// the first one.
    ///
    /// # Errors
    /// [`OnnxError::Request`] when `iterations` is 0 or above [`MAX_PROFILE_ITERATIONS`] or the
    /// inputs do not fit the model; compile, load and device errors as a session would report them.
    pub fn profile<B: Backend>(
        &self,
        device: &B::Device,
        inputs: &[Tensor],
        iterations: usize,
    ) -> Result<ProgramProfile, OnnxError> {
        let request_error = |reason: String| OnnxError::Request { model: self.onnx_model().name().into(), reason };
        if !(1..=MAX_PROFILE_ITERATIONS).contains(&iterations) {
            return Err(request_error(format!(
                "{iterations} profiled runs asked, 1..={MAX_PROFILE_ITERATIONS} allowed"
            )));
        }
        if inputs.len() != self.onnx_model().inputs().len() {
            return Err(request_error(format!(
                "{} inputs given, the model has {}",
                inputs.len(),
                self.onnx_model().inputs().len()
            )));
        }
        let input_dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
        let request = CompileRequest::new(&input_dims, None);
        let artifact = self.parse_artifact::<B>(&self.compile_steps::<B>(device, &request)?)?;
        let lowered = self.lower(&input_dims, &[], B::KIND)?;
        let kinds = crate::plan::labels::kinds(&lowered.steps);
        let labels = lowered.labels.clone();
        let program: OnnxProgram<B> = self.load_lowered::<B>(device, &request, &artifact, lowered)?;
        let (scratch_bytes, input_bytes, output_bytes) =
            (program.scratch_bytes(), program.input_bytes(), program.output_bytes());
        let stream = device.create_stream()?;
        let mut input_buffers = Vec::with_capacity(inputs.len());
        for (tensor, &need) in inputs.iter().zip(input_bytes) {
            let bytes = tensor.to_le_bytes();
            if bytes.len() != need {
                return Err(request_error(format!("an input holds {} bytes, the program reads {need}", bytes.len())));
            }
            let buffer = device.alloc(need.max(1))?;
            if !bytes.is_empty() {
                stream.upload(&bytes, buffer.slice(0, bytes.len())?)?;
            }
            input_buffers.push(buffer);
        }
        let output_buffers = output_bytes.iter().map(|&n| device.alloc(n.max(1))).collect::<Result<Vec<_>, _>>()?;
        let scratch = device.alloc(scratch_bytes.max(1))?;
        let ins: Vec<_> = input_buffers.iter().map(|b| b.as_slice()).collect();
        let outs: Vec<_> = output_buffers.iter().map(|b| b.as_slice()).collect();
        let n = program.launches();
        let events = (0..=n).map(|_| device.create_event()).collect::<Result<Vec<_>, _>>()?;
        // SAFETY: the bindings are buffers of this device sized by the program's own plan
        // (its binding sizes), alive until the stream is synchronised below; the program checks them.
        unsafe { program.enqueue(&stream, 0..n, &ins, &outs, scratch.as_slice())? };
        stream.synchronize()?;
        let mut times: Vec<Vec<f64>> = (0..n).map(|_| Vec::with_capacity(iterations)).collect();
        let mut totals = Vec::with_capacity(iterations);
        let us = |end: &B::Event, start: &B::Event| -> Result<f64, OnnxError> {
            Ok(end.elapsed_since(start)?.as_secs_f64() * 1e6)
        };
        for _ in 0..iterations {
            stream.record(&events[0])?;
            for i in 0..n {
                // SAFETY: as for the untimed run above.
                unsafe { program.enqueue(&stream, i..i + 1, &ins, &outs, scratch.as_slice())? };
                stream.record(&events[i + 1])?;
            }
            events[n].synchronize()?;
            for (i, column) in times.iter_mut().enumerate() {
                column.push(us(&events[i + 1], &events[i])?);
            }
            totals.push(us(&events[n], &events[0])?);
        }
        stream.synchronize()?;
        let steps = times
            .iter_mut()
            .enumerate()
            .map(|(index, column)| {
                let group = labels.step_group.get(index).copied().unwrap_or(0);
                let label = labels.groups.get(group);
                StepProfile {
                    index,
                    kind: kinds.get(index).cloned().unwrap_or_default(),
                    group,
                    ops: label.map(|l| l.ops.clone()).unwrap_or_default(),
                    nodes: label.map(|l| l.nodes.clone()).unwrap_or_default(),
                    median_us: median(column),
                }
            })
            .collect();
        // A node lowered as several parts (a Conv as im2col + matmul) is named `NODE:part`.
        let named: std::collections::HashSet<&str> = labels
            .groups
            .iter()
            .flat_map(|g| g.nodes.iter())
            .chain(&labels.untimed)
            .map(|n| n.split(':').next().unwrap_or(n))
            .collect();
        let folded_nodes = self
            .onnx_model()
            .graph()
            .nodes
            .iter()
            .filter(|n| !named.contains(n.name.as_str()))
            .map(|n| n.name.clone())
            .collect();
        Ok(ProgramProfile {
            input_dims,
            iterations,
            steps,
            total_median_us: median(&mut totals),
            untimed_nodes: labels.untimed.clone(),
            folded_nodes,
        })
    }
}

/// The median of `values` (reordered); 0 when empty.
fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 { values[mid] } else { (values[mid - 1] + values[mid]) / 2.0 }
}
