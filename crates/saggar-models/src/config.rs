//! Model configs: the recommender (`recsys`) and the plain MLP, read from and written to JSON.
//!
//! A config is a JSON object whose `"model"` field picks the family; every other field has a default,
//! so `{"model": "recsys"}` is the default 190-input recommender. Unknown fields are errors, so a
//! typo does not silently fall back to a default. `docs/models.md` documents every field with a full
//! example.
//!
//! The *architecture* of a config (everything except `name` and `weights`) determines the generated
//! code; [`ModelConfig::canonical_json`] serialises it with sorted keys and no whitespace, and
//! [`ModelConfig::config_hash`] is BLAKE3 of that text. It is stored in every artifact.

use std::path::{Path, PathBuf};

use saggar_dispatch::{FileError, ModelSpec};
use saggar_shape::{DType, Dim, TensorSpec};
use serde::{Deserialize, Serialize};

use crate::error::ModelError;

/// The name of the batch dimension on every input and output.
pub const BATCH_DIM: &str = "batch";
/// The largest batch (bucket) a program can be compiled for.
pub const MAX_BATCH: u64 = 65_536;
/// The largest number of inputs of a recommender: the feature kernel takes one pointer per input plus
/// two, and `(2 + 500) * 8` bytes stays under the classic 4 KiB kernel-parameter limit of CUDA and HIP.
pub const MAX_INPUTS: usize = 500;
/// The largest extent of one dimension (a width, an embedding dimension, a layer size).
pub const MAX_EXTENT: usize = 65_536;
/// The largest number of elements of one weight tensor (4 GiB of f32).
pub const MAX_TENSOR_ELEMENTS: usize = 1 << 30;
/// The largest width of the concatenated feature row of a recommender.
pub const MAX_FEATURES: usize = 1 << 20;

/// The two model families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelKind {
    /// The recommender: dense and sparse inputs, embedding bags, concatenation, an MLP.
    Recsys,
    /// A plain MLP.
    Mlp,
}

impl ModelKind {
    /// `"recsys"` or `"mlp"`, as in configs and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            ModelKind::Recsys => "recsys",
            ModelKind::Mlp => "mlp",
        }
    }

    /// The default config of this family.
    pub fn default_config(self) -> ModelConfig {
        match self {
            ModelKind::Recsys => ModelConfig::Recsys(RecsysConfig::default()),
            ModelKind::Mlp => ModelConfig::Mlp(MlpConfig::default()),
        }
    }
}

impl std::fmt::Display for ModelKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ModelKind {
    type Err = String;
    fn from_str(s: &str) -> Result<ModelKind, String> {
        match s {
            "recsys" => Ok(ModelKind::Recsys),
            "mlp" => Ok(ModelKind::Mlp),
            other => Err(format!("unknown model `{other}` (expected recsys or mlp)")),
        }
    }
}

/// Where the weights come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum WeightSource {
    /// Generated from this seed (see `docs/models.md` for the generator).
    Seed(u64),
    /// Loaded from a safetensors file. A relative path in a config file is relative to the config
    /// file's folder ([`ModelConfig::from_file`] resolves it).
    Safetensors(PathBuf),
}

impl Default for WeightSource {
    fn default() -> WeightSource {
        WeightSource::Seed(DEFAULT_SEED)
    }
}

/// The seed used when a config names no weights.
pub const DEFAULT_SEED: u64 = 1;

/// A recommender: `dense_inputs` inputs `dense_{i}` of shape `[batch, dense_width]` (f32) and
/// `sparse_inputs` inputs `sparse_{j}` of shape `[batch, bag_size]` (i32), each indexing its own
/// embedding table of `[table_rows, embedding_dim]` f32. Each sparse input is embedding-bag summed to
/// `[batch, embedding_dim]`; all dense inputs and bags are concatenated (dense first, in order) to
/// `[batch, dense_inputs * dense_width + sparse_inputs * embedding_dim]`, then an MLP with ReLU after
/// every hidden layer gives `score` `[batch, 1]`, and with `two_outputs` also `features`, the last
/// hidden layer's activations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecsysConfig {
    /// The model's name in logs and cache listings.
    pub name: String,
    /// How many dense inputs.
    pub dense_inputs: usize,
    /// Columns of each dense input.
    pub dense_width: usize,
    /// How many sparse inputs (and embedding tables).
    pub sparse_inputs: usize,
    /// Indices per row of each sparse input (the bag size).
    pub bag_size: usize,
    /// Rows of each embedding table.
    pub table_rows: usize,
    /// Columns of each embedding table.
    pub embedding_dim: usize,
    /// Sizes of the hidden layers, in order (each followed by ReLU).
    pub hidden: Vec<usize>,
    /// Whether the last hidden layer is a second output, `features`.
    pub two_outputs: bool,
    /// Where the weights come from.
    pub weights: WeightSource,
}

impl Default for RecsysConfig {
    /// The benchmarks' recommender: 150 dense inputs `[batch, 8]`, 40 sparse inputs `[batch, 4]` into
    /// tables of `1000 x 16`, hidden layers 512 and 256, one output. Its feature row is
    /// `150 * 8 + 40 * 16 = 1840` wide, so the MLP is 1840 -> 512 -> 256 -> 1.
    fn default() -> RecsysConfig {
        RecsysConfig {
            name: "recsys".into(),
            dense_inputs: 150,
            dense_width: 8,
            sparse_inputs: 40,
            bag_size: 4,
            table_rows: 1000,
            embedding_dim: 16,
            hidden: vec![512, 256],
            two_outputs: false,
            weights: WeightSource::default(),
        }
    }
}

/// A plain MLP: one input `x` `[batch, input]`, hidden layers with ReLU, output `y` `[batch, output]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MlpConfig {
    /// The model's name in logs and cache listings.
    pub name: String,
    /// Input width.
    pub input: usize,
    /// Sizes of the hidden layers, in order (each followed by ReLU).
    pub hidden: Vec<usize>,
    /// Output width (no activation).
    pub output: usize,
    /// Where the weights come from.
    pub weights: WeightSource,
}

impl Default for MlpConfig {
    /// 256 -> 512 -> 512 -> 64.
    fn default() -> MlpConfig {
        MlpConfig {
            name: "mlp".into(),
            input: 256,
            hidden: vec![512, 512],
            output: 64,
            weights: WeightSource::default(),
        }
    }
}

/// A model config of either family; the JSON field `"model"` says which.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "lowercase")]
pub enum ModelConfig {
    /// The recommender.
    Recsys(RecsysConfig),
    /// The plain MLP.
    Mlp(MlpConfig),
}

/// One GEMM + bias (+ ReLU) layer of a model's MLP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerShape {
    /// Input features (rows of the weight matrix).
    pub inputs: usize,
    /// Output features (columns of the weight matrix).
    pub outputs: usize,
    /// Whether ReLU follows (every layer but the last).
    pub relu: bool,
}

impl ModelConfig {
    /// Parses and validates a config from JSON text.
    pub fn from_json(text: &str) -> Result<ModelConfig, ModelError> {
        let config: ModelConfig = serde_json::from_str(text).map_err(|source| ModelError::ConfigJson { source })?;
        config.validate()?;
        Ok(config)
    }

    /// Reads, parses and validates a config file; a relative safetensors path in it becomes relative
    /// to the file's folder.
    pub fn from_file(path: &Path) -> Result<ModelConfig, ModelError> {
        let text = std::fs::read_to_string(path).map_err(FileError::at("reading model config", path))?;
        let mut config = ModelConfig::from_json(&text)?;
        if let WeightSource::Safetensors(file) = config.weights_mut()
            && file.is_relative()
        {
            let base = path.parent().unwrap_or(Path::new(""));
            *file = base.join(&*file);
        }
        Ok(config)
    }

    /// The config as pretty JSON (all fields, defaults included).
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).expect("a config always serialises")
    }

    /// The family.
    pub fn kind(&self) -> ModelKind {
        match self {
            ModelConfig::Recsys(_) => ModelKind::Recsys,
            ModelConfig::Mlp(_) => ModelKind::Mlp,
        }
    }

    /// The model's name.
    pub fn name(&self) -> &str {
        match self {
            ModelConfig::Recsys(c) => &c.name,
            ModelConfig::Mlp(c) => &c.name,
        }
    }

    /// Where the weights come from.
    pub fn weights(&self) -> &WeightSource {
        match self {
            ModelConfig::Recsys(c) => &c.weights,
            ModelConfig::Mlp(c) => &c.weights,
        }
    }

    /// Where the weights come from, for changing.
    pub fn weights_mut(&mut self) -> &mut WeightSource {
        match self {
            ModelConfig::Recsys(c) => &mut c.weights,
            ModelConfig::Mlp(c) => &mut c.weights,
        }
    }

    /// Checks every value; [`ModelConfig::from_json`] calls it, so only configs built in code need to.
    pub fn validate(&self) -> Result<(), ModelError> {
        let invalid = |field: &'static str, reason: String| Err(ModelError::InvalidConfig { field, reason });
        let extent = |field: &'static str, value: usize| {
            if value == 0 || value > MAX_EXTENT {
                invalid(field, format!("is {value}; it must be between 1 and {MAX_EXTENT}"))
            } else {
                Ok(())
            }
        };
        if self.name().is_empty() {
            return invalid("name", "is empty".into());
        }
        match self {
            ModelConfig::Recsys(c) => {
                if c.dense_inputs + c.sparse_inputs == 0 {
                    return invalid("dense_inputs", "and `sparse_inputs` are both 0; a model needs an input".into());
                }
                if c.dense_inputs + c.sparse_inputs > MAX_INPUTS {
                    return invalid(
                        "dense_inputs",
                        format!(
                            "+ `sparse_inputs` is {}; at most {MAX_INPUTS} inputs fit in one kernel's parameters",
                            c.dense_inputs + c.sparse_inputs
                        ),
                    );
                }
                extent("dense_width", c.dense_width)?;
                extent("bag_size", c.bag_size)?;
                extent("embedding_dim", c.embedding_dim)?;
                if c.table_rows == 0 || c.table_rows > i32::MAX as usize {
                    return invalid(
                        "table_rows",
                        format!("is {}; it must be between 1 and {}", c.table_rows, i32::MAX),
                    );
                }
                let table = c.table_rows.checked_mul(c.embedding_dim);
                if table.is_none_or(|n| n > MAX_TENSOR_ELEMENTS) {
                    return invalid(
                        "table_rows",
                        format!("x `embedding_dim` exceeds {MAX_TENSOR_ELEMENTS} elements per table"),
                    );
                }
                if c.two_outputs && c.hidden.is_empty() {
                    return invalid("two_outputs", "needs at least one hidden layer to output".into());
                }
                let features = c.feature_width();
                if features > MAX_FEATURES {
                    return invalid("dense_inputs", format!("make a feature row of {features}, above {MAX_FEATURES}"));
                }
            }
            ModelConfig::Mlp(c) => {
                extent("input", c.input)?;
                extent("output", c.output)?;
            }
        }
        for h in self.hidden() {
            extent("hidden", *h)?;
        }
        for layer in self.layers() {
            if layer.inputs.checked_mul(layer.outputs).is_none_or(|n| n > MAX_TENSOR_ELEMENTS) {
                return invalid(
                    "hidden",
                    format!("a {} x {} layer exceeds {MAX_TENSOR_ELEMENTS} elements", layer.inputs, layer.outputs),
                );
            }
        }
        Ok(())
    }

    fn hidden(&self) -> &[usize] {
        match self {
            ModelConfig::Recsys(c) => &c.hidden,
            ModelConfig::Mlp(c) => &c.hidden,
        }
    }

    /// The MLP's input width: the feature row of a recommender, `input` of an MLP.
    pub fn mlp_input_width(&self) -> usize {
        match self {
            ModelConfig::Recsys(c) => c.feature_width(),
            ModelConfig::Mlp(c) => c.input,
        }
    }

    /// The MLP's layers, first to last; the last has no ReLU.
    pub fn layers(&self) -> Vec<LayerShape> {
        let last = match self {
            ModelConfig::Recsys(_) => 1,
            ModelConfig::Mlp(c) => c.output,
        };
        let mut widths = vec![self.mlp_input_width()];
        widths.extend_from_slice(self.hidden());
        widths.push(last);
        let count = widths.len() - 1;
        (0..count).map(|l| LayerShape { inputs: widths[l], outputs: widths[l + 1], relu: l + 1 < count }).collect()
    }

    /// The inputs in binding order: recommender `dense_0..`, then `sparse_0..`; MLP `x`.
    pub fn input_specs(&self) -> Vec<TensorSpec> {
        let batch = || Dim::symbolic(BATCH_DIM);
        match self {
            ModelConfig::Recsys(c) => (0..c.dense_inputs)
                .map(|i| TensorSpec::new(format!("dense_{i}"), DType::F32, [batch(), (c.dense_width as u64).into()]))
                .chain(
                    (0..c.sparse_inputs).map(|j| {
                        TensorSpec::new(format!("sparse_{j}"), DType::I32, [batch(), (c.bag_size as u64).into()])
                    }),
                )
                .collect(),
            ModelConfig::Mlp(c) => vec![TensorSpec::new("x", DType::F32, [batch(), (c.input as u64).into()])],
        }
    }

    /// The outputs in binding order: recommender `score` (and `features`); MLP `y`.
    pub fn output_specs(&self) -> Vec<TensorSpec> {
        let batch = || Dim::symbolic(BATCH_DIM);
        match self {
            ModelConfig::Recsys(c) => {
                let mut out = vec![TensorSpec::new("score", DType::F32, [batch(), 1.into()])];
                if c.two_outputs
                    && let Some(last) = c.hidden.last()
                {
                    out.push(TensorSpec::new("features", DType::F32, [batch(), (*last as u64).into()]));
                }
                out
            }
            ModelConfig::Mlp(c) => vec![TensorSpec::new("y", DType::F32, [batch(), (c.output as u64).into()])],
        }
    }

    /// Concrete input dimensions for `batch` rows, in binding order (what a compile request carries).
    pub fn input_dims(&self, batch: u64) -> Vec<Vec<u64>> {
        self.input_specs().iter().map(|s| concrete_dims(s, batch)).collect()
    }

    /// Concrete output dimensions for `batch` rows, in binding order.
    pub fn output_dims(&self, batch: u64) -> Vec<Vec<u64>> {
        self.output_specs().iter().map(|s| concrete_dims(s, batch)).collect()
    }

    /// The model as the dispatcher sees it.
    pub fn model_spec(&self) -> ModelSpec {
        ModelSpec::new(self.name(), self.input_specs(), self.output_specs())
    }

    /// Bytes of one row (one batch element) of each input, in binding order.
    pub fn input_row_bytes(&self) -> Vec<usize> {
        self.input_specs().iter().map(row_bytes).collect()
    }

    /// Bytes of one row of each output, in binding order.
    pub fn output_row_bytes(&self) -> Vec<usize> {
        self.output_specs().iter().map(row_bytes).collect()
    }

    /// The architecture as canonical JSON: every field except `name` and `weights`, keys sorted, no
    /// whitespace. Two configs that generate the same code have the same canonical JSON.
    pub fn canonical_json(&self) -> String {
        let mut value = serde_json::to_value(self).expect("a config always serialises");
        if let Some(map) = value.as_object_mut() {
            map.remove("name");
            map.remove("weights");
        }
        let mut out = String::new();
        write_canonical(&value, &mut out);
        out
    }

    /// BLAKE3 of [`ModelConfig::canonical_json`].
    pub fn config_hash(&self) -> [u8; 32] {
        *blake3::hash(self.canonical_json().as_bytes()).as_bytes()
    }
}

impl RecsysConfig {
    /// Width of the concatenated feature row: `dense_inputs * dense_width + sparse_inputs * embedding_dim`.
    pub fn feature_width(&self) -> usize {
        self.dense_inputs
            .saturating_mul(self.dense_width)
            .saturating_add(self.sparse_inputs.saturating_mul(self.embedding_dim))
    }
}

fn concrete_dims(spec: &TensorSpec, batch: u64) -> Vec<u64> {
    spec.dims().iter().map(|d| d.as_fixed().unwrap_or(batch)).collect()
}

fn row_bytes(spec: &TensorSpec) -> usize {
    let width = spec.dims()[1].as_fixed().expect("every model tensor is [batch, fixed]") as usize;
    width * spec.dtype().size_bytes()
}

/// JSON with object keys sorted and no whitespace, whatever map type serde_json was built with.
fn write_canonical(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_recsys_config_is_the_default() {
        let c = ModelConfig::from_json(r#"{"model": "recsys"}"#).unwrap();
        assert_eq!(c, ModelConfig::Recsys(RecsysConfig::default()));
        assert_eq!(c.input_specs().len(), 190);
        assert_eq!(c.mlp_input_width(), 1840);
        let layers = c.layers();
        assert_eq!(layers.len(), 3);
        assert_eq!((layers[2].inputs, layers[2].outputs, layers[2].relu), (256, 1, false));
        assert!(layers[0].relu && layers[1].relu);
    }

    #[test]
    fn json_round_trip_and_canonical_form() {
        let c = ModelKind::Mlp.default_config();
        let back = ModelConfig::from_json(&c.to_json_pretty()).unwrap();
        assert_eq!(back, c);
        assert_eq!(c.canonical_json(), r#"{"hidden":[512,512],"input":256,"model":"mlp","output":64}"#);
        let mut renamed = c.clone();
        if let ModelConfig::Mlp(m) = &mut renamed {
            m.name = "other".into();
            m.weights = WeightSource::Seed(99);
        }
        assert_eq!(renamed.config_hash(), c.config_hash(), "name and weights do not change the architecture");
    }

    #[test]
    fn unknown_fields_and_bad_values_are_typed_errors() {
        let e = ModelConfig::from_json(r#"{"model": "recsys", "dense_input": 3}"#).unwrap_err();
        assert!(matches!(e, ModelError::ConfigJson { .. }), "{e}");
        let e = ModelConfig::from_json(r#"{"model": "mlp", "input": 0}"#).unwrap_err();
        assert!(matches!(e, ModelError::InvalidConfig { field: "input", .. }), "{e}");
        let e = ModelConfig::from_json(r#"{"model": "recsys", "hidden": [], "two_outputs": true}"#).unwrap_err();
        assert!(matches!(e, ModelError::InvalidConfig { field: "two_outputs", .. }), "{e}");
        let e = ModelConfig::from_json(r#"{"model": "transformer"}"#).unwrap_err();
        assert!(matches!(e, ModelError::ConfigJson { .. }), "{e}");
    }
}
