//! Where a model comes from: a built-in family of saggar-models ([`builtin::Builtin`]) or an ONNX
//! file ([`onnx::Onnx`]). Each is a [`ModelSource`]: what the commands need to know of a model to
//! build its sessions, feed them, verify their outputs and describe the model in reports. The
//! commands do everything else the same way for every source.
//!
//! This layer imports no command: `perf`, `warmup` and `cache` sit above it.

pub mod builtin;
pub mod check;
pub mod inputs;
pub mod onnx;
pub mod profile;

use std::sync::Arc;

use saggar_device::Backend;
use saggar_dispatch::{PaddedAxis, ProgramCompiler};
use saggar_onnx::Tensor;
use serde::Serialize;

use self::check::Check;
use self::inputs::InputSets;
use self::profile::ProfileReport;
use crate::cli::TraceArgs;
use crate::error::Result;

/// The relative tolerance of `--verify`: a value matches when
/// `|actual - expected| <= VERIFY_TOLERANCE * max(1, |expected|)`.
pub const VERIFY_TOLERANCE: f64 = 1e-3;

/// A model the commands run, and what differs between models when `saggar perf` runs one: its
/// compiler, the batches and inputs of its requests, and the eager reference its outputs are
/// checked against. Sources are chosen at run time and used through generic functions (the trait
/// has generic methods, so it is not a trait object).
pub trait ModelSource {
    /// What the source says about its model in reports.
    fn info(&self) -> &ModelInfo;

    /// The compiler that builds the model's programs (the same for every backend).
    fn compiler<B: Backend>(&self) -> Arc<impl ProgramCompiler<B>>;

    /// The session's padded axis (`--pad-axis`), for sources that have one.
    fn padded_axis(&self) -> Option<PaddedAxis> {
        None
    }

    /// The batch of each request, and how the report names them: by default `--trace` generated
    /// for `--requests` and `--seed`.
    fn trace(&self, args: &TraceArgs) -> Result<Trace> {
        Trace::generated(args)
    }

    /// The inputs of each of `batches` (the trace's distinct batches, ascending), one set each, in
    /// the same order.
    fn inputs(&self, batches: &[u64], seed: u64) -> Result<InputSets>;

    /// Compares the kept requests' outputs with the model's eager reference.
    fn verify(&self, inputs: &InputSets, kept: &[KeptRun<'_>]) -> Result<Verify>;

    /// Whether `--export-outputs` writes each exported request's inputs beside its outputs.
    fn exports_inputs(&self) -> bool {
        false
    }

    /// The floating-point operations of one request on the inputs of set `set` (the products a
    /// FLOP rate counts), when the source can tell.
    fn flops(&self, _inputs: &InputSets, _set: usize) -> Option<u64> {
        None
    }

    /// `--check-outputs`: `first`, the first kept request's outputs, compared with the expected ones.
    fn check(&self, _first: &[Tensor]) -> Option<Check> {
        None
    }

    /// `--dump-profile`: one program of the trace's (`trace`) profiled step by step on a fresh handle
    /// of device `ordinal`, on the inputs of its batch.
    fn profile<B: Backend>(
        &self,
        _ordinal: usize,
        _inputs: &InputSets,
        _trace: &[u64],
    ) -> Result<Option<ProfileReport>> {
        Ok(None)
    }
}

/// What a source says about its model in reports and messages.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// The model's name (`model`).
    pub name: String,
    /// Where it came from (`model_source`): a family with its default config, or a file.
    pub origin: String,
    /// How many inputs it has (`model_inputs`).
    pub inputs: usize,
    /// Seconds spent reading and importing it (`startup.import_s`).
    pub import_s: f64,
    /// What `--verify` compares its outputs with, for messages.
    pub reference: &'static str,
    /// The precision its products compute in (`precision`: `fp32` unless `--precision` says).
    pub precision: &'static str,
}

/// The batches of a run's requests.
#[derive(Debug, Clone)]
pub struct Trace {
    /// The batch of each request, in order.
    pub batches: Vec<u64>,
    /// How the report names them (`trace`).
    pub label: String,
}

impl Trace {
    /// `--trace` generated for `--requests` and `--seed`, named as given.
    pub fn generated(args: &TraceArgs) -> Result<Trace> {
        Ok(Trace { batches: args.trace.generate(args.requests, args.seed)?, label: args.trace.to_string() })
    }
}

/// One kept request: the input set it ran and its outputs (binding order) with their shapes.
#[derive(Debug, Clone, Copy)]
pub struct KeptRun<'a> {
    /// The input set (index into the run's [`InputSets`]).
    pub set: usize,
    /// Each output's bytes.
    pub outputs: &'a [Vec<u8>],
    /// Each output's dimensions.
    pub dims: &'a [Vec<u64>],
}

/// The check against the eager reference.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Verify {
    /// Requests checked.
    pub checked: u64,
    /// Requests with at least one value outside the tolerance.
    pub mismatches: u64,
    /// The relative tolerance: `|actual - expected| <= tolerance * max(1, |expected|)`.
    pub tolerance: f64,
    /// Output values compared.
    pub values_checked: u64,
    /// Output values outside the tolerance.
    pub value_mismatches: u64,
    /// The largest relative error seen (`null` if a value was NaN).
    pub max_rel_error: f64,
    /// Per output, the largest errors over the checked requests against the reference (for a model
    /// run at a reduced precision: the strict-f32 evaluation of the same model and inputs).
    pub accuracy: Vec<OutputAccuracy>,
}

/// One output's largest errors against the reference over the checked requests.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OutputAccuracy {
    /// The output.
    pub name: String,
    /// `max |actual - expected|`.
    pub max_abs_error: f64,
    /// `max |actual - expected|` over `max |expected|` of the same request's output.
    pub max_rel_error: f64,
}

impl Default for Verify {
    /// Nothing checked yet, at [`VERIFY_TOLERANCE`].
    fn default() -> Verify {
        Verify {
            checked: 0,
            mismatches: 0,
            tolerance: VERIFY_TOLERANCE,
            values_checked: 0,
            value_mismatches: 0,
            max_rel_error: 0.0,
            accuracy: Vec::new(),
        }
    }
}

impl Verify {
    /// Counts one checked request: `values` compared, `mismatches` of them outside the tolerance,
    /// and its largest relative error.
    pub fn add(&mut self, values: u64, mismatches: u64, max_rel_error: f64) {
        self.checked += 1;
        self.values_checked += values;
        self.value_mismatches += mismatches;
        self.mismatches += u64::from(mismatches > 0);
        self.max_rel_error = self.max_rel_error.max(max_rel_error);
    }

    /// Folds one checked request's errors of output `name` into [`Verify::accuracy`]: the largest
    /// absolute error, and that error relative to the largest expected magnitude `scale`.
    pub fn add_accuracy(&mut self, name: &str, max_abs_error: f64, scale: f64) {
        let rel = if scale > 0.0 { max_abs_error / scale } else { max_abs_error };
        match self.accuracy.iter_mut().find(|a| a.name == name) {
            Some(a) => {
                a.max_abs_error = a.max_abs_error.max(max_abs_error);
                a.max_rel_error = a.max_rel_error.max(rel);
            }
            None => self.accuracy.push(OutputAccuracy { name: name.to_string(), max_abs_error, max_rel_error: rel }),
        }
    }
}
