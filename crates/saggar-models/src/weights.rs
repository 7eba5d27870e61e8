//! Model weights: generated from a seed, or loaded from and exported to safetensors.
//!
//! Tensor names and layouts (documented in `docs/models.md` for the PyTorch peers):
//!
//! | tensor | shape | meaning |
//! |---|---|---|
//! | `emb.{j}.weight` | `[table_rows, embedding_dim]` | embedding table of `sparse_{j}` (recommender only) |
//! | `mlp.{l}.weight` | `[inputs, outputs]` | layer `l`, row-major **`[in, out]`**: `y = x @ W + b` (the transpose of `torch.nn.Linear.weight`) |
//! | `mlp.{l}.bias` | `[outputs]` | layer `l`'s bias |
//!
//! All tensors are little-endian f32. Seeded weights draw each tensor from its own SplitMix64 stream
//! ([`crate::prng`]): embeddings uniform in `[-1, 1)`, layer weights uniform in `[-a, a)` with
//! `a = sqrt(6 / inputs)` (He-uniform, so activations stay O(1) through ReLU layers), biases uniform in
//! `[-0.1, 0.1)`.

use std::collections::HashMap;
use std::path::Path;

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use saggar_dispatch::{FileError, ModelHash};

use crate::config::{ModelConfig, WeightSource};
use crate::error::ModelError;
use crate::prng::SplitMix64;

/// The name and shape of one weight tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorLayout {
    /// The safetensors name.
    pub name: String,
    /// The shape.
    pub shape: Vec<usize>,
}

impl TensorLayout {
    /// Number of elements.
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }
}

/// The weight tensors a config implies, in canonical order: embedding tables by input, then for each
/// layer its weight and bias.
pub fn tensor_layouts(config: &ModelConfig) -> Vec<TensorLayout> {
    layouts_with_init_scale(config).into_iter().map(|(layout, _)| layout).collect()
}

/// [`tensor_layouts`] with the half-width of each tensor's seeded uniform distribution.
fn layouts_with_init_scale(config: &ModelConfig) -> Vec<(TensorLayout, f32)> {
    let mut out = Vec::new();
    if let ModelConfig::Recsys(c) = config {
        for j in 0..c.sparse_inputs {
            let layout = TensorLayout { name: format!("emb.{j}.weight"), shape: vec![c.table_rows, c.embedding_dim] };
            out.push((layout, 1.0));
        }
    }
    for (l, layer) in config.layers().iter().enumerate() {
        let he_uniform = (6.0f64 / layer.inputs as f64).sqrt() as f32;
        out.push((
            TensorLayout { name: format!("mlp.{l}.weight"), shape: vec![layer.inputs, layer.outputs] },
            he_uniform,
        ));
        out.push((TensorLayout { name: format!("mlp.{l}.bias"), shape: vec![layer.outputs] }, 0.1));
    }
    out
}

/// One tensor's values.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// Name and shape.
    pub layout: TensorLayout,
    /// Row-major values.
    pub data: Vec<f32>,
}

/// The weights of one model, in the canonical order of [`tensor_layouts`].
#[derive(Debug, Clone, PartialEq)]
pub struct Weights {
    tensors: Vec<Tensor>,
    embeddings: usize,
}

/// Metadata key under which an exported file records the config's canonical JSON.
pub const METADATA_CONFIG: &str = "saggar_models.config";
/// Metadata key under which an exported file records the weight layout convention.
pub const METADATA_LAYOUT: &str = "saggar_models.layout";

impl Weights {
    /// The weights `config.weights()` names: generated from its seed or read from its file.
    pub fn for_config(config: &ModelConfig) -> Result<Weights, ModelError> {
        match config.weights() {
            WeightSource::Seed(seed) => Weights::generate(config, *seed),
            WeightSource::Safetensors(path) => Weights::load_safetensors(config, path),
        }
    }

    /// Weights generated from `seed` (see the module docs for the generator).
    pub fn generate(config: &ModelConfig, seed: u64) -> Result<Weights, ModelError> {
        config.validate()?;
        let tensors = layouts_with_init_scale(config)
            .into_iter()
            .map(|(layout, scale)| {
                let mut rng = SplitMix64::for_name(seed, &layout.name);
                let data = (0..layout.elements()).map(|_| rng.next_signed_unit() * scale).collect();
                Tensor { layout, data }
            })
            .collect();
        Ok(Weights::from_tensors_unchecked(config, tensors))
    }

    fn from_tensors_unchecked(config: &ModelConfig, tensors: Vec<Tensor>) -> Weights {
        let embeddings = match config {
            ModelConfig::Recsys(c) => c.sparse_inputs,
            ModelConfig::Mlp(_) => 0,
        };
        Weights { tensors, embeddings }
    }

    /// Weights from safetensors bytes, checked against `config`: every tensor present, f32, of the
    /// expected shape, and no tensor the model lacks.
    pub fn from_safetensors(config: &ModelConfig, bytes: &[u8]) -> Result<Weights, ModelError> {
        config.validate()?;
        let file = SafeTensors::deserialize(bytes)?;
        let layouts = tensor_layouts(config);
        let mut tensors = Vec::with_capacity(layouts.len());
        for layout in layouts {
            let view = match file.tensor(&layout.name) {
                Ok(view) => view,
                Err(safetensors::SafeTensorError::TensorNotFound(_)) => {
                    return Err(ModelError::MissingTensor { name: layout.name, expected: layout.shape });
                }
                Err(e) => return Err(e.into()),
            };
            if view.dtype() != Dtype::F32 {
                return Err(ModelError::TensorDtype { name: layout.name, actual: format!("{:?}", view.dtype()) });
            }
            if view.shape() != layout.shape.as_slice() {
                return Err(ModelError::TensorShape {
                    name: layout.name,
                    expected: layout.shape,
                    actual: view.shape().to_vec(),
                });
            }
            let data = view.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            tensors.push(Tensor { layout, data });
        }
        let mut names = file.names();
        names.sort_unstable();
        if let Some(extra) = names.into_iter().find(|name| !tensors.iter().any(|t| t.layout.name == *name)) {
            return Err(ModelError::UnexpectedTensor { name: extra.to_string() });
        }
        Ok(Weights::from_tensors_unchecked(config, tensors))
    }

    /// Weights from a safetensors file (see [`Weights::from_safetensors`]).
    pub fn load_safetensors(config: &ModelConfig, path: &Path) -> Result<Weights, ModelError> {
        let bytes = std::fs::read(path).map_err(FileError::at("reading safetensors weights", path))?;
        Weights::from_safetensors(config, &bytes)
    }

    /// The weights as a safetensors file, with the config's canonical JSON and the layout convention
    /// in the metadata.
    pub fn to_safetensors(&self, config: &ModelConfig) -> Result<Vec<u8>, ModelError> {
        let bytes: Vec<Vec<u8>> = self.tensors.iter().map(|t| f32s_to_le_bytes(&t.data)).collect();
        let views = self
            .tensors
            .iter()
            .zip(&bytes)
            .map(|(t, b)| Ok((t.layout.name.clone(), TensorView::new(Dtype::F32, t.layout.shape.clone(), b)?)))
            .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()?;
        let metadata = HashMap::from([
            (METADATA_CONFIG.to_string(), config.canonical_json()),
            (
                METADATA_LAYOUT.to_string(),
                "mlp.{l}.weight is [in, out] row-major (y = x @ W + b); emb.{j}.weight is [rows, dim]".to_string(),
            ),
        ]);
        Ok(safetensors::serialize(views, Some(metadata))?)
    }

    /// Writes [`Weights::to_safetensors`] to `path`.
    pub fn save_safetensors(&self, config: &ModelConfig, path: &Path) -> Result<(), ModelError> {
        let bytes = self.to_safetensors(config)?;
        Ok(std::fs::write(path, bytes).map_err(FileError::at("writing safetensors weights", path))?)
    }

    /// Checks that these weights have exactly the tensors `config` implies.
    pub fn check(&self, config: &ModelConfig) -> Result<(), ModelError> {
        let layouts = tensor_layouts(config);
        for layout in &layouts {
            match self.tensor(&layout.name) {
                None => {
                    return Err(ModelError::MissingTensor {
                        name: layout.name.clone(),
                        expected: layout.shape.clone(),
                    });
                }
                Some(t) if t.layout.shape != layout.shape => {
                    return Err(ModelError::TensorShape {
                        name: layout.name.clone(),
                        expected: layout.shape.clone(),
                        actual: t.layout.shape.clone(),
                    });
                }
                Some(_) => {}
            }
        }
        if let Some(extra) = self.tensors.iter().find(|t| !layouts.iter().any(|l| l.name == t.layout.name)) {
            return Err(ModelError::UnexpectedTensor { name: extra.layout.name.clone() });
        }
        if self.tensors.iter().map(|t| &t.layout).ne(layouts.iter()) {
            return Err(ModelError::InvalidConfig {
                field: "weights",
                reason: "tensors are not in canonical order".into(),
            });
        }
        Ok(())
    }

    /// Weights from tensors built in code; they must be exactly the tensors of [`tensor_layouts`], in
    /// that order, each with as many values as its shape has elements.
    pub fn from_tensors(config: &ModelConfig, tensors: Vec<Tensor>) -> Result<Weights, ModelError> {
        config.validate()?;
        if let Some(t) = tensors.iter().find(|t| t.data.len() != t.layout.elements()) {
            return Err(ModelError::TensorShape {
                name: t.layout.name.clone(),
                expected: t.layout.shape.clone(),
                actual: vec![t.data.len()],
            });
        }
        let weights = Weights::from_tensors_unchecked(config, tensors);
        weights.check(config)?;
        Ok(weights)
    }

    /// Every tensor, for changing values in tests (shapes must stay).
    #[cfg(test)]
    pub(crate) fn tensors_mut(&mut self) -> &mut [Tensor] {
        &mut self.tensors
    }

    /// Every tensor, in canonical order.
    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }

    /// A tensor by name.
    pub fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.tensors.iter().find(|t| t.layout.name == name)
    }

    /// The embedding table of sparse input `j`, row-major `[table_rows, embedding_dim]`.
    pub fn embedding(&self, j: usize) -> &[f32] {
        &self.tensors[j].data
    }

    /// Layer `l`'s weight, row-major `[inputs, outputs]`.
    pub fn layer_weight(&self, l: usize) -> &[f32] {
        &self.tensors[self.embeddings + 2 * l].data
    }

    /// Layer `l`'s bias.
    pub fn layer_bias(&self, l: usize) -> &[f32] {
        &self.tensors[self.embeddings + 2 * l + 1].data
    }

    /// BLAKE3 over the config's canonical JSON and every tensor (name, shape, little-endian bytes), hex.
    /// Equal hashes mean equal generated code and equal results.
    pub fn model_hash(&self, config: &ModelConfig) -> String {
        ModelHash::from_digest(self.model_digest(config)).into()
    }

    /// The 256-bit digest behind [`Weights::model_hash`].
    pub(crate) fn model_digest(&self, config: &ModelConfig) -> [u8; 32] {
        let mut hasher = blake3::Hasher::new();
        let canonical = config.canonical_json();
        hasher.update(&(canonical.len() as u64).to_le_bytes());
        hasher.update(canonical.as_bytes());
        for t in &self.tensors {
            hasher.update(&(t.layout.name.len() as u64).to_le_bytes());
            hasher.update(t.layout.name.as_bytes());
            hasher.update(&(t.layout.shape.len() as u64).to_le_bytes());
            for d in &t.layout.shape {
                hasher.update(&(*d as u64).to_le_bytes());
            }
            hash_f32s(&mut hasher, &t.data);
        }
        *hasher.finalize().as_bytes()
    }
}

/// Little-endian bytes of `values`.
pub(crate) fn f32s_to_le_bytes(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * 4);
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

fn hash_f32s(hasher: &mut blake3::Hasher, values: &[f32]) {
    let mut buf = [0u8; 4096];
    for chunk in values.chunks(buf.len() / 4) {
        for (dst, v) in buf.chunks_exact_mut(4).zip(chunk) {
            dst.copy_from_slice(&v.to_le_bytes());
        }
        hasher.update(&buf[..chunk.len() * 4]);
    }
}
