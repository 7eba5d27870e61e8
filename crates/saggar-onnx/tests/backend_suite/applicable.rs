//! Whether a backend test is inside the declared op set: every node of the default domain at the
//! model's opset, every graph input, output and constant of a declared element type, every size
//! under the suite's guard. A test outside it is "not applicable", with the first reason found.

use std::path::Path;

use prost::Message as _;
use saggar_onnx::ops::{MAX_OPSET, MIN_OPSET, lookup};
use saggar_onnx::proto::{AttributeProto, ModelProto, TypeProto, attribute_type, dtype_from_onnx};
use saggar_onnx::tensor::is_supported_dtype;

/// Largest model or test-data file run: a bigger declared tensor is skipped, so one huge case cannot
/// exhaust the machine or the time budget.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Why a test is not applicable, or `None` when it is. Reasons are short and grouped in the report
/// (`op Loop`, `opset 22`, `dtype f64`).
pub fn not_applicable(dir: &Path) -> Result<Option<String>, String> {
    let model_path = dir.join("model.onnx");
    if let Some(reason) = oversized(dir)? {
        return Ok(Some(reason));
    }
    let bytes = std::fs::read(&model_path).map_err(|e| format!("{}: {e}", model_path.display()))?;
    let model = ModelProto::decode(bytes.as_slice()).map_err(|e| format!("model.onnx is not a ModelProto: {e}"))?;
    let opset =
        model.opset_import.iter().find(|o| o.domain.is_empty() || o.domain == "ai.onnx").map_or(0, |o| o.version);
    let Some(graph) = &model.graph else { return Ok(Some("no graph".into())) };
    for node in &graph.node {
        if !(node.domain.is_empty() || node.domain == "ai.onnx") {
            return Ok(Some(format!("domain {}", node.domain)));
        }
    }
    // Undeclared ops first (grouped per op), then declared ops outside the declared opsets.
    let at = u32::try_from(opset).unwrap_or(0);
    for node in &graph.node {
        if saggar_onnx::ops::supported_opsets(&node.op_type) == "none" {
            return Ok(Some(format!("op {}", node.op_type)));
        }
    }
    if !(MIN_OPSET..=MAX_OPSET).contains(&at) {
        return Ok(Some(format!("opset {opset}")));
    }
    for node in &graph.node {
        if lookup(&node.op_type, at).is_none() {
            return Ok(Some(format!("op {} at opset {opset}", node.op_type)));
        }
    }
    for info in graph.input.iter().chain(&graph.output) {
        if let Some(reason) = type_reason(info.r#type.as_ref()) {
            return Ok(Some(reason));
        }
    }
    for t in &graph.initializer {
        if let Some(reason) = dtype_reason(i64::from(t.data_type)) {
            return Ok(Some(reason));
        }
    }
    for attr in graph.node.iter().flat_map(|n| &n.attribute) {
        if let Some(reason) = attribute_reason(attr) {
            return Ok(Some(reason));
        }
    }
    Ok(None)
}

/// `Some("over 64 MiB")` when the model or a data file exceeds [`MAX_FILE_BYTES`].
fn oversized(dir: &Path) -> Result<Option<String>, String> {
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).map_err(|e| format!("{}: {e}", p.display()));
    if size(&dir.join("model.onnx"))? > MAX_FILE_BYTES {
        return Ok(Some("over 64 MiB".into()));
    }
    for set in data_set_dirs(dir)? {
        for entry in std::fs::read_dir(&set).map_err(|e| format!("{}: {e}", set.display()))?.flatten() {
            if size(&entry.path())? > MAX_FILE_BYTES {
                return Ok(Some("over 64 MiB".into()));
            }
        }
    }
    Ok(None)
}

/// The `test_data_set_N` folders of a test, in order of N.
pub fn data_set_dirs(dir: &Path) -> Result<Vec<std::path::PathBuf>, String> {
    let mut sets: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n = name.strip_prefix("test_data_set_")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    sets.sort();
    Ok(sets.into_iter().map(|(_, p)| p).collect())
}

fn dtype_reason(code: i64) -> Option<String> {
    match dtype_from_onnx(code) {
        Some(d) if is_supported_dtype(d) => None,
        Some(d) => Some(format!("dtype {d}")),
        None => Some(format!("dtype code {code}")),
    }
}

fn type_reason(ty: Option<&TypeProto>) -> Option<String> {
    let ty = ty?;
    match &ty.tensor_type {
        Some(t) => dtype_reason(i64::from(t.elem_type)),
        None if ty.sequence_type.is_some() => Some("sequence type".into()),
        None if ty.optional_type.is_some() => Some("optional type".into()),
        None => Some("non-tensor type".into()),
    }
}

/// Element types a node makes from its attributes (`Cast`'s `to`, constant tensors).
fn attribute_reason(attr: &AttributeProto) -> Option<String> {
    if let Some(t) = &attr.t {
        return dtype_reason(i64::from(t.data_type));
    }
    let int = attr.r#type == attribute_type::INT || attr.r#type == 0;
    if int && matches!(attr.name.as_str(), "to" | "dtype" | "output_datatype") {
        return dtype_reason(attr.i);
    }
    None
}
