//! `saggar ops`: the declared op set, every op with its opset ranges, the element types it takes and
//! how each backend runs it.

use std::collections::BTreeMap;

use saggar_onnx::ops::types::{OpTypes, onnx_type_name};
use saggar_onnx::ops::{GpuForm, declared};
use saggar_shape::DType;
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
    /// The opset whose schema `types` follows: the newest the op is declared at.
    types_opset: u32,
    /// Per type constraint of the schema, the element types saggar runs (ONNX names).
    types: BTreeMap<&'static str, Vec<&'static str>>,
    /// Per type constraint, the types the schema allows that saggar refuses, each with the reason.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    refused: BTreeMap<&'static str, BTreeMap<&'static str, &'static str>>,
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
            let types = d.types();
            OpRow {
                op: d.op_type,
                opsets: d.opsets.iter().map(|&(a, b)| [a, b]).collect(),
                types_opset: types.map_or(0, |t| t.opset),
                types: types.map(type_lists).unwrap_or_default(),
                refused: types.map(refusals).unwrap_or_default(),
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

/// ONNX's names of a list of element types.
fn names(types: impl IntoIterator<Item = DType>) -> Vec<&'static str> {
    types.into_iter().filter_map(onnx_type_name).collect()
}

fn type_lists(t: &OpTypes) -> BTreeMap<&'static str, Vec<&'static str>> {
    t.constraints.iter().map(|c| (c.name, names(c.types.iter().copied()))).collect()
}

fn refusals(t: &OpTypes) -> BTreeMap<&'static str, BTreeMap<&'static str, &'static str>> {
    t.constraints
        .iter()
        .filter(|c| !c.refused.is_empty())
        .map(|c| (c.name, c.refused.iter().filter_map(|&(d, why)| Some((onnx_type_name(d)?, why))).collect()))
        .collect()
}

/// The TYPES column: `T: floats,ints; T1: bool`, saggar's short type names, `floats` for f32, f16,
/// bf16 and f64, `ints` for the eight integer types, `all` for those and bool, `-` for none.
fn types_cell(types: &BTreeMap<&'static str, Vec<&'static str>>) -> String {
    const FLOATS: [&str; 4] = ["float", "float16", "bfloat16", "double"];
    const INTS: [&str; 8] = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"];
    let short = |name: &str| {
        saggar_onnx::ops::types::onnx_type(name).map_or_else(|| name.to_string(), |d| d.name().to_string())
    };
    let cell = |list: &[&str]| {
        let has = |group: &[&str]| group.iter().all(|g| list.contains(g));
        let (floats, ints) = (has(&FLOATS), has(&INTS));
        if floats && ints && list.contains(&"bool") {
            return "all".to_string();
        }
        let mut parts = Vec::new();
        if floats {
            parts.push("floats".to_string());
        }
        if ints {
            parts.push("ints".to_string());
        }
        let grouped = |n: &&str| (floats && FLOATS.contains(n)) || (ints && INTS.contains(n));
        parts.extend(list.iter().filter(|n| !grouped(n)).map(|n| short(n)));
        if parts.is_empty() { "-".to_string() } else { parts.join(",") }
    };
    types.iter().map(|(c, list)| format!("{c}: {}", cell(list))).collect::<Vec<_>>().join("; ")
}

fn table(report: &OpsReport) -> String {
    let mut t = Table::with_header(&["OP", "OPSETS", "HOST", "CUDA", "HIP", "TYPES"]);
    for op in &report.ops {
        let opsets: Vec<String> = op.opsets.iter().map(|[a, b]| format!("{a}-{b}")).collect();
        t.row(vec![
            op.op.to_string(),
            opsets.join(", "),
            op.backends.host.to_string(),
            op.backends.cuda.to_string(),
            op.backends.hip.to_string(),
            types_cell(&op.types),
        ]);
    }
    let mut out = t.render();
    out.push_str(&format!(
        "{} op types of domain {} (compile-time: computed from shapes and constants when a program is compiled; \
         a GPU backend refuses such a node whose inputs are run-time values)\n\
         TYPES: the element types of each type constraint at the op's newest opset; floats: f32, f16, bf16, f64 \
         (f16 and bf16 are computed in f32); ints: i8 to i64 and u8 to u64; all: floats, ints and bool \
         (`--json` lists the types the schema allows that saggar refuses, with the reasons)\nout of scope:\n",
        report.count, report.domain
    ));
    for o in &report.out_of_scope {
        out.push_str(&format!("  {}: {}\n", o.what, o.why));
    }
    out
}
