//! `saggar ops`: the declared op set, every op with its opset ranges and how each backend runs it.

use saggar_onnx::ops::{GpuForm, declared};
use serde::Serialize;

use crate::cli::OpsArgs;
use crate::error::Result;
use crate::output::{Table, emit};

/// What the declared op set leaves out, each with the reason.
const OUT_OF_SCOPE: &[(&str, &str)] = &[
    ("ai.onnx.ml", "classical ML operators (trees, SVMs, encoders) over maps and strings: not a GPU workload"),
    ("ai.onnx.preview.training", "training operators (gradients, optimisers): saggar runs inference"),
    ("string tensors", "no device form; tokenisation belongs before the model"),
    ("Sequence, Optional and Map types", "the program's buffers are tensors of fixed element types"),
    ("float8, int4, uint4 and float4 types", "no kernels for them yet"),
];

#[derive(Debug, Serialize)]
struct OpRow {
    op: &'static str,
    /// Inclusive opset ranges.
    opsets: Vec<[u32; 2]>,
    /// `host`, `cuda`, `hip` to `kernel` (device code) or `compile-time` (computed from shapes and
    /// constants when a program is compiled).
    backends: Backends,
}

#[derive(Debug, Serialize)]
struct Backends {
    host: &'static str,
    cuda: &'static str,
    hip: &'static str,
}

#[derive(Debug, Serialize)]
struct OpsReport {
    domain: &'static str,
    count: usize,
    ops: Vec<OpRow>,
    out_of_scope: Vec<OutOfScope>,
}

#[derive(Debug, Serialize)]
struct OutOfScope {
    what: &'static str,
    why: &'static str,
}

/// Runs `saggar ops`.
pub fn run(args: &OpsArgs) -> Result<()> {
    let ops: Vec<OpRow> = declared()
        .into_iter()
        .map(|d| {
            let gpu = match d.gpu {
                GpuForm::Kernel => "kernel",
                GpuForm::CompileTime => "compile-time",
            };
            OpRow {
                op: d.op_type,
                opsets: d.opsets.iter().map(|&(a, b)| [a, b]).collect(),
                backends: Backends { host: "kernel", cuda: gpu, hip: gpu },
            }
        })
        .collect();
    let report = OpsReport {
        domain: "ai.onnx",
        count: ops.len(),
        ops,
        out_of_scope: OUT_OF_SCOPE.iter().map(|&(what, why)| OutOfScope { what, why }).collect(),
    };
    emit(args.json.as_deref(), &report, || table(&report))
}

fn table(report: &OpsReport) -> String {
    let mut t = Table::with_header(&["OP", "OPSETS", "HOST", "CUDA", "HIP"]);
    for op in &report.ops {
        let opsets: Vec<String> = op.opsets.iter().map(|[a, b]| format!("{a}-{b}")).collect();
        t.row(vec![
            op.op.to_string(),
            opsets.join(", "),
            op.backends.host.to_string(),
            op.backends.cuda.to_string(),
            op.backends.hip.to_string(),
        ]);
    }
    let mut out = t.render();
    out.push_str(&format!(
        "{} op types of domain {} (compile-time: computed from shapes and constants when a program is compiled; \
         a GPU backend refuses such a node whose inputs are run-time values)\nout of scope:\n",
        report.count, report.domain
    ));
    for o in &report.out_of_scope {
        out.push_str(&format!("  {}: {}\n", o.what, o.why));
    }
    out
}
