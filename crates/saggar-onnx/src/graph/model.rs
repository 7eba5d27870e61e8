//! [`OnnxModel`]: a checked, optimised ONNX model: decoded, imported into the [`crate::graph::ir`]
//! graph, its shapes inferred and its constants folded.

use std::path::{Path, PathBuf};

use prost::Message;
use saggar_shape::TensorSpec;

use crate::error::OnnxError;
use crate::graph::build;
use crate::graph::ir::Graph;
use crate::graph::passes;
use crate::import::limits::{ImportLimits, read_limited};
use crate::ops::evaluate::evaluate;
use crate::ops::shape_util::is_unnamed;
use crate::tensor::Tensor;

/// The spec of a graph output: the inferred type, where an extent inference could not name is
/// taken from the model's declared output type when that is fixed or a symbol the inputs bind (so a
/// session can size the output before running).
fn output_spec(graph: &Graph, out: &crate::graph::ir::GraphOutput, inputs: &[TensorSpec]) -> TensorSpec {
    let Some(ty) = graph.ty(out.value) else {
        return TensorSpec::new(out.name.as_str(), saggar_shape::DType::F32, Vec::new());
    };
    let bound = |s: &str| inputs.iter().flat_map(TensorSpec::dims).any(|d| d.symbol() == Some(s));
    let dims = ty
        .dims
        .iter()
        .enumerate()
        .map(|(axis, d)| {
            let declared = out.declared.as_ref().filter(|t| t.rank() == ty.rank()).map(|t| &t.dims[axis]);
            match declared {
                Some(decl) if is_unnamed(d) && (decl.as_fixed().is_some() || decl.symbol().is_some_and(bound)) => {
                    decl.clone()
                }
                _ => d.clone(),
            }
        })
        .collect::<Vec<_>>();
    TensorSpec::new(out.name.as_str(), ty.dtype, dims)
}

/// Most elements of one tensor [`OnnxModel::run_once`] computes (1 GiB of f32).
pub const RUN_ONCE_MAX_ELEMENTS: usize = 1 << 28;

/// An imported ONNX model: checked, shapes inferred, constants folded, ready to compile.
///
/// # Thread safety
/// Immutable after import; `Send + Sync`.
#[derive(Debug, Clone)]
pub struct OnnxModel {
    name: String,
    path: Option<PathBuf>,
    graph: Graph,
    model_hash: String,
    inputs: Vec<TensorSpec>,
    outputs: Vec<TensorSpec>,
    metadata: ModelMetadata,
}

/// What a model file says about itself (`ModelProto`'s descriptive fields), for tools that show
/// it (ONNX Runtime's `get_modelmeta`). Nothing here changes how the model runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelMetadata {
    /// The tool that made the file (`"pytorch"`).
    pub producer_name: String,
    /// Its version.
    pub producer_version: String,
    /// The model's reverse-DNS namespace.
    pub domain: String,
    /// The model's version; `None` when the file leaves it at 0 (unset).
    pub model_version: Option<i64>,
    /// The model's documentation.
    pub doc_string: String,
    /// The graph's name.
    pub graph_name: String,
    /// The graph's documentation.
    pub graph_doc_string: String,
    /// Free-form key/value metadata, in file order.
    pub properties: Vec<(String, String)>,
}

impl ModelMetadata {
    fn of(proto: &crate::import::proto::ModelProto) -> ModelMetadata {
        let graph = proto.graph.as_ref();
        ModelMetadata {
            producer_name: proto.producer_name.clone(),
            producer_version: proto.producer_version.clone(),
            domain: proto.domain.clone(),
            model_version: (proto.model_version != 0).then_some(proto.model_version),
            doc_string: proto.doc_string.clone(),
            graph_name: graph.map(|g| g.name.clone()).unwrap_or_default(),
            graph_doc_string: graph.map(|g| g.doc_string.clone()).unwrap_or_default(),
            properties: proto.metadata_props.iter().map(|p| (p.key.clone(), p.value.clone())).collect(),
        }
    }
}

impl OnnxModel {
    /// Loads the model at `path` (external data from its folder) with the default limits.
    pub fn load(path: impl AsRef<Path>) -> Result<OnnxModel, OnnxError> {
        OnnxModel::load_with_limits(path, &ImportLimits::default())
    }

    /// Loads the model at `path` with `limits`.
    pub fn load_with_limits(path: impl AsRef<Path>, limits: &ImportLimits) -> Result<OnnxModel, OnnxError> {
        let path = path.as_ref();
        let bytes = read_limited(path, limits.max_file_bytes, "reading ONNX model")?;
        let dir = path.parent().map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p });
        let name = path.file_stem().map_or_else(|| "model".to_string(), |s| s.to_string_lossy().into_owned());
        let mut model = OnnxModel::from_bytes_in(&bytes, &name, dir, limits)?;
        model.path = Some(path.to_path_buf());
        Ok(model)
    }

    /// Imports a model from bytes. It may not use external data (there is no folder to read it
    /// from); use [`OnnxModel::load`] for such models.
    pub fn from_bytes(bytes: &[u8], name: &str, limits: &ImportLimits) -> Result<OnnxModel, OnnxError> {
        OnnxModel::from_bytes_in(bytes, name, None, limits)
    }

    fn from_bytes_in(
        bytes: &[u8],
        name: &str,
        dir: Option<&Path>,
        limits: &ImportLimits,
    ) -> Result<OnnxModel, OnnxError> {
        if bytes.len() as u64 > limits.max_file_bytes {
            return Err(OnnxError::TooLarge {
                what: format!("model `{name}`"),
                size: bytes.len() as u64,
                limit: limits.max_file_bytes,
                field: "max_file_bytes",
            });
        }
        let mut proto = crate::import::proto::ModelProto::decode(bytes).map_err(|e| OnnxError::Decode {
            what: name.to_string(),
            message: "ModelProto",
            reason: e.to_string(),
        })?;
        let metadata = ModelMetadata::of(&proto);
        crate::import::half::widen(&mut proto);
        let mut graph = build::import(&proto, dir, limits)?;
        passes::optimise(&mut graph, limits.max_fold_elements)?;
        let mut hasher = blake3::Hasher::new();
        hasher.update(bytes);
        let mut model = OnnxModel::from_graph(name, graph, hasher);
        model.metadata = metadata;
        Ok(model)
    }

    /// The model of an optimised `graph`; `hasher` has seen the file and sees the constants here
    /// (external data is part of the model).
    fn from_graph(name: &str, graph: Graph, mut hasher: blake3::Hasher) -> OnnxModel {
        for v in &graph.values {
            if let Some(t) = &v.constant {
                hasher.update(v.name.as_bytes());
                hasher.update(&t.to_le_bytes());
            }
        }
        OnnxModel::from_graph_hashed(name, graph, hasher.finalize().to_hex().to_string())
    }

    /// This model with another graph (the same inputs; outputs as `graph` has them), for the
    /// calibration pass's probes: named and hashed as this model.
    pub(crate) fn with_graph(&self, graph: Graph) -> OnnxModel {
        let mut model = OnnxModel::from_graph_hashed(&self.name, graph, self.model_hash.clone());
        model.path = self.path.clone();
        model
    }

    /// Segment `k` of this model (`graph`, cut by the segments pass): named after the model, its
    /// hash the model's and `k`'s.
    pub(crate) fn segment(&self, k: usize, graph: Graph) -> OnnxModel {
        let mut hasher = blake3::Hasher::new();
        hasher.update(self.model_hash.as_bytes());
        hasher.update(format!("segment {k}").as_bytes());
        let mut model = OnnxModel::from_graph_hashed(
            &format!("{}.segment{k}", self.name),
            graph,
            hasher.finalize().to_hex().to_string(),
        );
        model.path = self.path.clone();
        model
    }

    fn from_graph_hashed(name: &str, graph: Graph, model_hash: String) -> OnnxModel {
        let spec = |id: crate::graph::ir::ValueId, name: &str| {
            let ty = graph
                .ty(id)
                .cloned()
                .unwrap_or_else(|| crate::ops::ValueType::new(saggar_shape::DType::F32, Vec::new()));
            TensorSpec::new(name, ty.dtype, ty.dims)
        };
        let inputs: Vec<TensorSpec> = graph.inputs.iter().map(|&id| spec(id, &graph.value(id).name)).collect();
        let outputs = graph.outputs.iter().map(|o| output_spec(&graph, o, &inputs)).collect();
        OnnxModel {
            name: name.to_string(),
            path: None,
            model_hash,
            graph,
            inputs,
            outputs,
            metadata: ModelMetadata::default(),
        }
    }

    /// A copy of the model with the inputs at `values`' indices replaced by those constant values,
    /// folded through the graph. For inputs that decide shapes (Slice bounds, Reshape targets,
    /// Split sizes given as model inputs): a program is compiled per shape, so such values must be
    /// known when it is compiled.
    pub fn with_constant_inputs(&self, values: &[(usize, Tensor)]) -> Result<OnnxModel, OnnxError> {
        let mut graph = self.graph.clone();
        let mut bound = Vec::with_capacity(values.len());
        for (index, tensor) in values {
            let id = *graph.inputs.get(*index).ok_or_else(|| OnnxError::Request {
                model: self.name.clone(),
                reason: format!("input {index} does not exist ({} inputs)", graph.inputs.len()),
            })?;
            let value = graph.value_mut(id);
            let fits = value.ty.as_ref().is_some_and(|t| {
                t.dtype == tensor.dtype()
                    && t.rank() == tensor.dims().len()
                    && t.dims.iter().zip(tensor.dims()).all(|(d, &n)| d.as_fixed().is_none_or(|f| f == n as u64))
            });
            if !fits {
                return Err(OnnxError::Request {
                    model: self.name.clone(),
                    reason: format!(
                        "input `{}` is {}, the value given is {} {:?}",
                        value.name,
                        value.ty.as_ref().map_or_else(|| "untyped".to_string(), ToString::to_string),
                        tensor.dtype(),
                        tensor.dims()
                    ),
                });
            }
            value.ty = Some(crate::ops::ValueType::fixed(tensor.dtype(), tensor.dims()));
            value.constant = Some(std::sync::Arc::new(tensor.clone()));
            bound.push(id);
        }
        graph.inputs.retain(|id| !bound.contains(id));
        passes::optimise(&mut graph, ImportLimits::default().max_fold_elements)?;
        let mut hasher = blake3::Hasher::new();
        hasher.update(self.model_hash.as_bytes());
        let mut model = OnnxModel::from_graph(&self.name, graph, hasher);
        model.path = self.path.clone();
        model.metadata = self.metadata.clone();
        Ok(model)
    }

    /// The model's name (the file stem).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file it was loaded from.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// What the file says about itself (producer, versions, documentation, properties).
    pub fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    /// The optimised graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// BLAKE3 of the model file and its constants, hex.
    pub fn model_hash(&self) -> &str {
        &self.model_hash
    }

    /// Inputs in binding order, with symbolic dimensions from `dim_param`.
    pub fn inputs(&self) -> &[TensorSpec] {
        &self.inputs
    }

    /// Outputs in binding order, with inferred dimensions.
    pub fn outputs(&self) -> &[TensorSpec] {
        &self.outputs
    }

    /// The batch axis as a session sees it: saggar-shape's detection (the symbolic axis 0 the
    /// inputs share) over [`OnnxModel::inputs`] and [`OnnxModel::outputs`]. A model whose only
    /// symbolic dimension is that batch is served from buckets; others take the per-shape path.
    pub fn batch_layout(&self) -> saggar_shape::BatchLayout {
        saggar_shape::BatchLayout::detect(&self.inputs, &self.outputs)
    }

    /// Evaluates the model once, eagerly on the host, op by op (no device, no memory plan): the
    /// reference the compiled programs are checked against. A tensor of more than
    /// [`RUN_ONCE_MAX_ELEMENTS`] elements is refused before it is allocated.
    pub fn run_once(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, OnnxError> {
        match passes::segments::split(&self.graph)? {
            None => self.run_once_whole(inputs),
            Some(split) => passes::segments::run_split(
                split,
                inputs,
                passes::segments::DEFAULT_MAX_LOOP_ITERATIONS,
                |k, segment, ins| self.segment(k, segment.graph.clone()).run_once_whole(ins),
            ),
        }
    }

    /// [`OnnxModel::run_once`] of a model one program runs (no segments).
    fn run_once_whole(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, OnnxError> {
        let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
        let bound: Vec<(usize, Vec<u8>)> = passes::value_inputs::value_inputs(&self.graph)
            .into_iter()
            .filter_map(|i| inputs.get(i).map(|t| (i, t.to_le_bytes())))
            .collect();
        let graph = passes::specialise(&self.graph, &dims, &bound, &self.name)?;
        evaluate_graph(&graph, inputs, &self.name)
    }
}

/// Evaluates a specialised `graph` of model `model` node by node on `inputs` with the reference
/// kernels: [`OnnxModel::run_once`]'s evaluator, and the graph passes' tests'.
pub(crate) fn evaluate_graph(graph: &Graph, inputs: &[Tensor], model: &str) -> Result<Vec<Tensor>, OnnxError> {
    let mut values: Vec<Option<std::sync::Arc<Tensor>>> = graph.values.iter().map(|v| v.constant.clone()).collect();
    for (&id, t) in graph.inputs.iter().zip(inputs) {
        let want = graph.ty(id).map(|ty| ty.dtype);
        if want != Some(t.dtype()) {
            return Err(OnnxError::Request {
                model: model.to_string(),
                reason: format!("input `{}` is {}, the model takes {want:?}", graph.value(id).name, t.dtype()),
            });
        }
        values[id.0] = Some(std::sync::Arc::new(t.clone()));
    }
    for node in &graph.nodes {
        let args: Vec<Option<&Tensor>> = node.inputs.iter().map(|i| i.and_then(|i| values[i.0].as_deref())).collect();
        let outs = evaluate(node.op.as_ref(), &args, RUN_ONCE_MAX_ELEMENTS).map_err(|source| OnnxError::Node {
            node: node.name.clone(),
            op: node.op_type.clone(),
            opset: graph.opset,
            source: Box::new(source),
        })?;
        for (id, t) in node.outputs.iter().zip(outs) {
            values[id.0] = Some(std::sync::Arc::new(t));
        }
    }
    graph
        .outputs
        .iter()
        .map(|o| {
            values[o.value.0]
                .as_deref()
                .cloned()
                .ok_or_else(|| OnnxError::Graph { reason: format!("output `{}` was not computed", o.name) })
        })
        .collect()
}
