//! `saggar check --onnx FILE`: whether a model is supported on each backend, without running it.
//! The model is imported (every node that cannot be built is listed) and lowered for each backend
//! at one input shape (batch 1; symbolic dimensions from `--shapes`, else 1), compiling nothing, so
//! a GPU backend is checked on a machine without that GPU. Every unsupported node is listed with its
//! op, opset, name and why; the command exits 1 if any backend asked about refuses the model.

use std::path::Path;

use saggar_device::BackendKind;
use saggar_dispatch::SegmentSource;
use saggar_onnx::{OnnxCompiler, OnnxError, OnnxModel, OnnxOptions};
use serde::Serialize;

use crate::cli::{CheckArgs, CheckBackendArg};
use crate::error::{CliError, Result, one_line};
use crate::output::{Table, emit};
use crate::source::onnx::tensors::input_dims;

/// One node a backend refuses.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RefusedNode {
    /// The node's name (or `op_index` when the model gives none); empty for a whole-model refusal.
    pub node: String,
    /// Its op type.
    pub op: String,
    /// The default-domain opset the model imports.
    pub opset: u32,
    /// Why.
    pub reason: String,
}

/// One backend's verdict.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BackendCheck {
    /// `host`, `cuda` or `hip`.
    pub backend: String,
    /// Whether every node runs there.
    pub supported: bool,
    /// The nodes it refuses.
    pub refused: Vec<RefusedNode>,
}

/// The report (`--json`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CheckReport {
    /// The model file.
    pub model: String,
    /// The default-domain opset, when the model imports.
    pub opset: Option<u32>,
    /// Nodes after import and constant folding, when the model imports.
    pub nodes: Option<usize>,
    /// The input shapes lowered.
    pub input_dims: Vec<Vec<u64>>,
    /// The model inputs whose values fix shapes (a `shape` or `axes` given as an input): sessions
    /// compile a program per shape and values, so a backend's verdict is on the op set alone.
    pub value_inputs: Vec<String>,
    /// The segments the model runs as (1 unless some extents depend on values it computes, such as
    /// a NonZero's count: then the first is lowered here and the others' verdict is on the op set).
    pub segments: usize,
    /// One verdict per backend asked about.
    pub backends: Vec<BackendCheck>,
}

/// Runs `saggar check`.
pub fn run(args: &CheckArgs) -> Result<()> {
    let report = check(args)?;
    emit(args.json.as_deref(), &report, || table(&report))?;
    match report.backends.iter().filter(|b| !b.supported).count() {
        0 => Ok(()),
        n => Err(CliError::failure(
            format!("{}: not supported on {n} of {} backends checked", args.onnx.display(), report.backends.len()),
            "each refused node is listed above; serve the model on a backend that runs it, or re-export it without those ops",
        )),
    }
}

fn backends(arg: CheckBackendArg) -> Vec<BackendKind> {
    match arg {
        CheckBackendArg::All => vec![BackendKind::Host, BackendKind::Cuda, BackendKind::Hip],
        CheckBackendArg::Host => vec![BackendKind::Host],
        CheckBackendArg::Cuda => vec![BackendKind::Cuda],
        CheckBackendArg::Hip => vec![BackendKind::Hip],
    }
}

/// The report of `args` (refusals are part of it, not errors).
pub fn check(args: &CheckArgs) -> Result<CheckReport> {
    let path = args.onnx.as_path();
    let kinds = backends(args.backend);
    let model = match OnnxModel::load(path) {
        Ok(model) => model,
        Err(e) if e.refuses_nodes() => {
            // Nothing runs anywhere: every backend refuses the same nodes.
            let refused = refusals(&e, None);
            return Ok(CheckReport {
                model: path.display().to_string(),
                opset: None,
                nodes: None,
                input_dims: Vec::new(),
                value_inputs: Vec::new(),
                segments: 1,
                backends: kinds.iter().map(|k| verdict(*k, refused.clone())).collect(),
            });
        }
        Err(e) => return Err(load_error(path, &e)),
    };
    let opset = model.graph().opset;
    let dims: Vec<Vec<u64>> = input_dims(&model, 1, &args.shapes, Some(1))?
        .into_iter()
        .map(|d| d.into_iter().map(|v| v as u64).collect())
        .collect();
    let nodes = model.graph().nodes.len();
    let compiler = OnnxCompiler::new(model, OnnxOptions::default());
    let inputs = compiler.onnx_model().inputs();
    let value_inputs: Vec<String> = compiler.value_inputs().iter().map(|&i| inputs[i].name().to_string()).collect();
    // A segmented model: its first segment (model inputs only) is lowered; the later ones are
    // compiled per computed value at run time, so their verdict is on the op set.
    let segmented = saggar_dispatch::steps::StepCompiler::segments(&compiler);
    let segments = segmented.as_ref().map_or(1, |s| s.segments.len());
    let first = segmented.as_ref().and_then(|s| s.segments.first());
    let (lowered, lowered_dims): (&OnnxCompiler, Vec<Vec<u64>>) = match first {
        Some(first) => (
            &first.compiler,
            // A loop body's own inputs (its iteration number and condition) are scalars.
            std::iter::repeat_n(Vec::new(), saggar_dispatch::Repeat::own_inputs(first.repeat.as_ref()))
                .chain(first.inputs.iter().map(|s| match s {
                    SegmentSource::Input(i) => dims[*i].clone(),
                    SegmentSource::Output { .. } => Vec::new(),
                }))
                .collect(),
        ),
        None => (&compiler, dims.clone()),
    };
    let keyed = !lowered.value_inputs().is_empty();
    let backends = kinds
        .iter()
        .map(|&kind| {
            let refused = match lowered.plan_summary(&lowered_dims, kind) {
                Ok(_) => Vec::new(),
                // Lowered per value at run time: every node imported, every op has its form.
                Err(e) if keyed && needs_values(&e) => Vec::new(),
                Err(e) => refusals(&e, Some(opset)),
            };
            verdict(kind, refused)
        })
        .collect();
    Ok(CheckReport {
        model: path.display().to_string(),
        opset: Some(opset),
        nodes: Some(nodes),
        input_dims: dims,
        value_inputs,
        segments,
        backends,
    })
}

/// Whether a compile failed only for want of the values sessions bind per request: an extent they
/// fix, or control flow they decide.
fn needs_values(e: &OnnxError) -> bool {
    match e {
        OnnxError::ShapeDependsOnData { .. } => true,
        OnnxError::Node { op, .. } => matches!(op.as_str(), "If" | "Loop" | "Scan"),
        _ => false,
    }
}

fn verdict(kind: BackendKind, refused: Vec<RefusedNode>) -> BackendCheck {
    BackendCheck { backend: kind.name().to_string(), supported: refused.is_empty(), refused }
}

fn refusals(e: &OnnxError, model_opset: Option<u32>) -> Vec<RefusedNode> {
    e.node_errors()
        .iter()
        .map(|e| match e {
            OnnxError::UnsupportedOp { node, op, opset, supported, .. } => RefusedNode {
                node: node.clone(),
                op: op.clone(),
                opset: *opset,
                reason: format!("not in the declared op set ({supported})"),
            },
            OnnxError::Node { node, op, opset, source } => {
                RefusedNode { node: node.clone(), op: op.clone(), opset: *opset, reason: one_line(&source.to_string()) }
            }
            OnnxError::UnsupportedOnBackend { node, op, reason, .. } => RefusedNode {
                node: node.clone(),
                op: op.clone(),
                opset: model_opset.unwrap_or_default(),
                reason: one_line(reason),
            },
            other => RefusedNode {
                node: String::new(),
                op: String::new(),
                opset: model_opset.unwrap_or_default(),
                reason: one_line(&other.to_string()),
            },
        })
        .collect()
}

fn load_error(path: &Path, e: &OnnxError) -> CliError {
    match e {
        OnnxError::Decode { .. } => CliError::usage(
            format!("--onnx {}: {e}", path.display()),
            "the file is not an ONNX model (a serialized ModelProto); export one with torch.onnx.export or check the path",
        ),
        _ => CliError::usage(
            format!("--onnx {}: {e}", path.display()),
            "check that the file is a complete ONNX model (with its external data files next to it)",
        ),
    }
}

fn table(report: &CheckReport) -> String {
    let mut out = report.model.clone();
    if let (Some(opset), Some(nodes)) = (report.opset, report.nodes) {
        out.push_str(&format!(": opset {opset}, {nodes} nodes, checked at input shapes {:?}", report.input_dims));
    }
    out.push('\n');
    if !report.value_inputs.is_empty() {
        out.push_str(&format!(
            "shapes depend on the values of inputs {}: sessions compile a program per shape and values, so the \
             verdicts are on the op set (a value no op accepts fails when it is sent)\n",
            report.value_inputs.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
        ));
    }
    if report.segments > 1 {
        out.push_str(&format!(
            "extents depend on values the model computes: it runs as {} segments, each compiled per computed \
             value; the first is lowered here, the others' verdicts are on the op set\n",
            report.segments
        ));
    }
    let mut t = Table::with_header(&["BACKEND", "VERDICT"]);
    for b in &report.backends {
        let verdict = if b.supported { "supported".to_string() } else { format!("{} nodes refused", b.refused.len()) };
        t.row(vec![b.backend.clone(), verdict]);
    }
    out.push_str(&t.render());
    for b in report.backends.iter().filter(|b| !b.supported) {
        out.push_str(&format!("refused on {}:\n", b.backend));
        let mut t = Table::with_header(&["NODE", "OP", "OPSET", "WHY"]);
        for r in &b.refused {
            t.row(vec![r.node.clone(), r.op.clone(), r.opset.to_string(), r.reason.clone()]);
        }
        out.push_str(&t.render());
    }
    out
}
