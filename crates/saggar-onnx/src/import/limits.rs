//! [`ImportLimits`], the bounds that keep a hostile file from exhausting memory, and the bounded
//! file read every importer uses.

use saggar_dispatch::FileError;
use std::io::Read;
use std::path::Path;

use crate::error::OnnxError;

/// Bounds checked before anything of that size is allocated. The defaults admit every model the
/// ONNX format can express in one file (2 GiB protobuf limit) with external data up to 16 GiB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportLimits {
    /// Largest `.onnx` (or `.pb`) file read.
    pub max_file_bytes: u64,
    /// Most elements of one tensor (initializer, attribute, test data).
    pub max_tensor_elements: u64,
    /// Most bytes of all initializers together.
    pub max_initializer_bytes: u64,
    /// Most bytes of one tensor's external data.
    pub max_external_bytes: u64,
    /// Most nodes in the graph, the nodes of its subgraphs (If branches, Loop and Scan bodies)
    /// included.
    pub max_nodes: usize,
    /// Deepest nesting of subgraphs (a Loop in an If branch is at depth 2).
    pub max_subgraph_depth: usize,
    /// Largest tensor constant folding makes at import (in elements); larger results stay nodes.
    pub max_fold_elements: usize,
}

impl Default for ImportLimits {
    fn default() -> ImportLimits {
        ImportLimits {
            max_file_bytes: 2 << 30,
            max_tensor_elements: 1 << 32,
            max_initializer_bytes: 16 << 30,
            max_external_bytes: 16 << 30,
            max_nodes: 1 << 20,
            max_subgraph_depth: 16,
            max_fold_elements: 1 << 24,
        }
    }
}

/// Reads at most `limit` bytes of `path`, refusing a larger file before reading it.
pub(crate) fn read_limited(path: &Path, limit: u64, op: &'static str) -> Result<Vec<u8>, OnnxError> {
    let io = FileError::at(op, path);
    let file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    if len > limit {
        return Err(OnnxError::TooLarge {
            what: format!("file `{}`", path.display()),
            size: len,
            limit,
            field: "max_file_bytes",
        });
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(limit).read_to_end(&mut bytes).map_err(io)?;
    Ok(bytes)
}
