//! `saggar perf --onnx FILE --dump-profile`: where one program's device time goes, per step
//! (kernel launch or BLAS-Lt matmul), with the ONNX nodes each step computes, sorted by time, and
//! the steps summed per op pattern ([`saggar_onnx::OnnxCompiler::profile`]).

use saggar_device::Backend;
use saggar_onnx::{MAX_PROFILE_ITERATIONS, OnnxCompiler, ProgramProfile, StepProfile, Tensor};
use serde::Serialize;

use crate::error::{CliError, Result};
use crate::output::Table;

/// Profiled runs when `--iterations` is not given.
const DEFAULT_ITERATIONS: u64 = 100;

/// Op patterns listed in the table.
const TOP_PATTERNS: usize = 10;

/// The `profile` section of the perf report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProfileReport {
    /// The batch whose program was profiled.
    pub batch: u64,
    /// Its input shapes.
    pub input_dims: Vec<Vec<u64>>,
    /// Runs timed; each step's time is its median over them.
    pub iterations: usize,
    /// Median of a whole run (first event to last), in microseconds.
    pub total_us: f64,
    /// Sum of the steps' medians, in microseconds.
    pub steps_us: f64,
    /// Every step in program order.
    pub steps: Vec<ProfileStep>,
    /// The steps summed per op pattern, the most time first.
    pub op_patterns: Vec<ProfilePattern>,
    /// Nodes that run no step of their own (views).
    pub untimed_nodes: Vec<String>,
    /// Nodes computed at compile time for these shapes.
    pub folded_nodes: Vec<String>,
}

/// One step, with its share of the time.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProfileStep {
    /// The step (its fields appear at this level in the JSON).
    #[serde(flatten)]
    pub step: StepProfile,
    /// Share of the sum of the steps, in percent.
    pub percent: f64,
}

/// Steps of one op pattern, summed.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProfilePattern {
    /// Op types joined by `+`.
    pub ops: String,
    /// Steps with it.
    pub steps: usize,
    /// Sum of their medians, in microseconds.
    pub us: f64,
    /// Share of the sum of the steps, in percent.
    pub percent: f64,
}

/// Profiles `compiler`'s program of `batch` (inputs `inputs`) on a fresh handle of device `ordinal`.
pub fn run<B: Backend>(
    compiler: &OnnxCompiler,
    ordinal: usize,
    batch: u64,
    inputs: &[Tensor],
    requests: Option<u64>,
) -> Result<ProfileReport> {
    let iterations = requests.unwrap_or(DEFAULT_ITERATIONS).min(MAX_PROFILE_ITERATIONS as u64) as usize;
    let device = B::open(ordinal)?;
    let profile = compiler.profile::<B>(&device, inputs, iterations).map_err(|e| {
        CliError::failure(
            format!("--dump-profile at batch {batch}: {e}"),
            "the same program runs in the session; rerun without --dump-profile to see whether it fails there too",
        )
    })?;
    Ok(report(batch, &profile))
}

fn share(part: f64, whole: f64) -> f64 {
    if whole > 0.0 { 100.0 * part / whole } else { 0.0 }
}

fn report(batch: u64, profile: &ProgramProfile) -> ProfileReport {
    let steps_us = profile.steps_us();
    ProfileReport {
        batch,
        input_dims: profile.input_dims.clone(),
        iterations: profile.iterations,
        total_us: profile.total_median_us,
        steps_us,
        steps: profile
            .steps
            .iter()
            .map(|s| ProfileStep { step: s.clone(), percent: share(s.median_us, steps_us) })
            .collect(),
        op_patterns: profile
            .by_ops()
            .into_iter()
            .map(|p| ProfilePattern { percent: share(p.us, steps_us), ops: p.ops, steps: p.steps, us: p.us })
            .collect(),
        untimed_nodes: profile.untimed_nodes.clone(),
        folded_nodes: profile.folded_nodes.clone(),
    }
}

impl ProfileReport {
    /// The steps sorted by time and the top op patterns, as text.
    pub fn table(&self) -> String {
        let mut out = format!(
            "profile: batch {}, {} steps, median of {} runs: steps {:.1} µs, whole run {:.1} µs\n",
            self.batch,
            self.steps.len(),
            self.iterations,
            self.steps_us,
            self.total_us
        );
        let mut by_time: Vec<&ProfileStep> = self.steps.iter().collect();
        by_time.sort_by(|a, b| b.step.median_us.total_cmp(&a.step.median_us));
        let mut t = Table::with_header(&["STEP", "KIND", "NODES", "US", "%"]);
        for s in by_time {
            t.row(vec![
                s.step.index.to_string(),
                s.step.kind.clone(),
                s.step.label(),
                format!("{:.2}", s.step.median_us),
                format!("{:.1}", s.percent),
            ]);
        }
        out.push_str(&t.render());
        out.push_str(&format!(
            "top op patterns ({} of {}):\n",
            self.op_patterns.len().min(TOP_PATTERNS),
            self.op_patterns.len()
        ));
        let mut t = Table::with_header(&["OPS", "STEPS", "US", "%"]);
        for p in self.op_patterns.iter().take(TOP_PATTERNS) {
            t.row(vec![p.ops.clone(), p.steps.to_string(), format!("{:.2}", p.us), format!("{:.1}", p.percent)]);
        }
        out.push_str(&t.render());
        if !self.untimed_nodes.is_empty() {
            out.push_str(&format!("no step of their own (views): {}\n", self.untimed_nodes.join(", ")));
        }
        if !self.folded_nodes.is_empty() {
            out.push_str(&format!("folded at compile time: {}\n", self.folded_nodes.join(", ")));
        }
        out
    }
}
