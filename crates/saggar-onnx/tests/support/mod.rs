//! Shared by the tests over the checked-in models: their folders, data sets and the comparison rule.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use saggar_dispatch::{HostTensor, OwnedTensor};
use saggar_onnx::{Tensor, TensorData, read_tensor_pb};

/// The checked-in models (`models/<name>/`).
pub const MODELS: [&str; 4] = ["bert", "dlrm", "mlp", "cnn"];

/// The tolerance the models are checked with (their expected outputs are PyTorch's).
pub const RTOL: f32 = 1e-3;
/// See [`RTOL`].
pub const ATOL: f32 = 1e-5;

/// `models/<name>`.
pub fn model_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join(name)
}

/// `(inputs, expected outputs)` of every data set of a model folder, in order.
pub fn data_sets(dir: &Path) -> Vec<(Vec<Tensor>, Vec<Tensor>)> {
    let mut sets = Vec::new();
    for n in 0.. {
        let set = dir.join(format!("test_data_set_{n}"));
        if !set.is_dir() {
            break;
        }
        let read = |prefix: &str| {
            (0..)
                .map(|k| set.join(format!("{prefix}_{k}.pb")))
                .take_while(|p| p.exists())
                .map(|p| read_tensor_pb(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).tensor)
                .collect::<Vec<_>>()
        };
        sets.push((read("input"), read("output")));
    }
    sets
}

/// Panics unless `got` has `want`'s shape and type and every element is within
/// `ATOL + RTOL * |want|` (integers and booleans exactly).
pub fn assert_close(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.dims(), want.dims(), "{what}: shape");
    match (got.data(), want.data()) {
        (TensorData::F32(g), TensorData::F32(w)) => {
            let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs() - (ATOL + RTOL * b.abs())).fold(f32::MIN, f32::max);
            assert!(worst <= 0.0, "{what}: exceeds tolerance by {worst}");
        }
        (g, w) => assert_eq!(g, w, "{what}"),
    }
}

/// A session output as a tensor.
pub fn owned_to_tensor(t: &OwnedTensor) -> Tensor {
    Tensor::from_le_bytes(t.dtype, t.dims.iter().map(|&d| d as usize).collect(), &t.data).expect("well-formed output")
}

/// Host request tensors: their dims and bytes, held so [`Request::host`] can borrow them.
pub struct Request {
    names: Vec<String>,
    tensors: Vec<Tensor>,
    dims: Vec<Vec<u64>>,
    bytes: Vec<Vec<u8>>,
}

impl Request {
    /// A request feeding `tensors` to the inputs named `names` (binding order).
    pub fn new(names: &[&str], tensors: &[Tensor]) -> Request {
        Request {
            names: names.iter().map(ToString::to_string).collect(),
            tensors: tensors.to_vec(),
            dims: tensors.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect(),
            bytes: tensors.iter().map(Tensor::to_le_bytes).collect(),
        }
    }

    /// The request's tensors in binding order.
    pub fn host(&self) -> Vec<HostTensor<'_>> {
        (0..self.names.len())
            .map(|k| HostTensor {
                name: &self.names[k],
                dtype: self.tensors[k].dtype(),
                dims: &self.dims[k],
                data: &self.bytes[k],
            })
            .collect()
    }

    /// The input tensors.
    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }
}
