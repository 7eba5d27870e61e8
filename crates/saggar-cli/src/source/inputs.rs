//! The host inputs of a run: one set per distinct batch of the trace, each holding every model input
//! in the source's input order. The bytes live in 8-byte aligned buffers, so a tensor of any element
//! type is aligned as the session requires; several sets may read one buffer (a built-in model's
//! batch `b` reads the first `b` rows of inputs generated once for the largest batch).

use saggar_dispatch::HostTensor;
use saggar_onnx::Tensor;
use saggar_shape::TensorSpec;

use crate::error::{CliError, Result};

/// Bytes kept in `u64` words.
#[derive(Debug)]
struct Aligned {
    words: Vec<u64>,
    len: usize,
}

impl Aligned {
    fn new(bytes: &[u8]) -> Aligned {
        let mut words = vec![0u64; bytes.len().div_ceil(8).max(1)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Aligned { words, len: bytes.len() }
    }

    fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u64, u8>(&self.words)[..self.len]
    }
}

/// One input of one set: the first `len` bytes of buffer `buffer`, with dimensions `dims`.
#[derive(Debug, Clone)]
pub struct InputView {
    /// The buffer ([`InputSets::add_buffer`]).
    pub buffer: usize,
    /// Bytes of the input.
    pub len: usize,
    /// Its dimensions.
    pub dims: Vec<u64>,
}

#[derive(Debug)]
struct InputSet {
    batch: u64,
    inputs: Vec<InputView>,
    output_dims: Option<Vec<Vec<u64>>>,
}

/// The inputs of every distinct batch of a run (see the module docs).
#[derive(Debug)]
pub struct InputSets {
    specs: Vec<TensorSpec>,
    buffers: Vec<Aligned>,
    sets: Vec<InputSet>,
}

impl InputSets {
    /// No sets yet, for a model with inputs `specs`.
    pub fn new(specs: Vec<TensorSpec>) -> InputSets {
        InputSets { specs, buffers: Vec::new(), sets: Vec::new() }
    }

    /// Adds a buffer holding `bytes` and returns its index.
    pub fn add_buffer(&mut self, bytes: &[u8]) -> usize {
        self.buffers.push(Aligned::new(bytes));
        self.buffers.len() - 1
    }

    /// Adds a set of `batch` rows reading `inputs` (one per model input), whose output shapes are
    /// `output_dims` when the source knows them without a run.
    pub fn add_set(&mut self, batch: u64, inputs: Vec<InputView>, output_dims: Option<Vec<Vec<u64>>>) {
        self.sets.push(InputSet { batch, inputs, output_dims });
    }

    /// Adds a set of `batch` rows holding `tensors`, each in a buffer of its own.
    pub fn add_tensors(&mut self, batch: u64, tensors: &[Tensor], output_dims: Option<Vec<Vec<u64>>>) {
        let inputs = tensors
            .iter()
            .map(|t| {
                let bytes = t.to_le_bytes();
                let dims = t.dims().iter().map(|&d| d as u64).collect();
                InputView { buffer: self.add_buffer(&bytes), len: bytes.len(), dims }
            })
            .collect();
        self.add_set(batch, inputs, output_dims);
    }

    /// How many sets there are.
    pub fn count(&self) -> usize {
        self.sets.len()
    }

    /// The model's inputs, in the order of each set's tensors.
    pub fn specs(&self) -> &[TensorSpec] {
        &self.specs
    }

    /// The batch of set `set`.
    pub fn batch(&self, set: usize) -> u64 {
        self.sets[set].batch
    }

    /// The bytes of input `input` of set `set`.
    pub fn bytes(&self, set: usize, input: usize) -> &[u8] {
        let view = &self.sets[set].inputs[input];
        &self.buffers[view.buffer].bytes()[..view.len]
    }

    /// The output shapes of set `set`, when the source knew them.
    pub fn output_dims(&self, set: usize) -> Option<&[Vec<u64>]> {
        self.sets[set].output_dims.as_deref()
    }

    /// Set `set` as the session's host tensors.
    pub fn host(&self, set: usize) -> Vec<HostTensor<'_>> {
        self.specs
            .iter()
            .zip(&self.sets[set].inputs)
            .enumerate()
            .map(|(i, (spec, view))| HostTensor {
                name: spec.name(),
                dtype: spec.dtype(),
                dims: &view.dims,
                data: self.bytes(set, i),
            })
            .collect()
    }

    /// Set `set` as tensors (for an eager evaluation, or to write them out).
    pub fn tensors(&self, set: usize) -> Result<Vec<Tensor>> {
        let dims: Vec<&[u64]> = self.sets[set].inputs.iter().map(|v| &v.dims[..]).collect();
        let bytes: Vec<&[u8]> = (0..self.specs.len()).map(|i| self.bytes(set, i)).collect();
        tensors(&self.specs, &dims, &bytes)
    }
}

/// Tensors of `specs`' element types with dimensions `dims` from little-endian `bytes` (a request's
/// inputs or outputs).
pub fn tensors<D: AsRef<[u64]>, T: AsRef<[u8]>>(specs: &[TensorSpec], dims: &[D], bytes: &[T]) -> Result<Vec<Tensor>> {
    specs
        .iter()
        .zip(dims)
        .zip(bytes)
        .map(|((spec, dims), bytes)| {
            let dims = dims.as_ref().iter().map(|&d| d as usize).collect();
            Tensor::from_le_bytes(spec.dtype(), dims, bytes.as_ref()).map_err(|e| {
                CliError::failure(format!("tensor `{}`: {e}", spec.name()), "this is a bug in saggar; please report it")
            })
        })
        .collect()
}
