//! Loading a model of the repository: its configuration (the file's, or derived from the model),
//! the ONNX import, the metadata the protocol shows, the session configuration (buckets up to
//! `max_batch_size`, a padded axis, graphs, the shared compile cache), the sessions on their
//! devices, and the queue with its executor threads. Sessions compile or load every bucket here,
//! so a model is ready only once all of them are.

use std::sync::Arc;

use saggar_cache::CompileCache;
use saggar_device::BackendKind;
use saggar_dispatch::{BucketSpec, CaptureWhen, GraphConfig, PadValue, SessionConfig};
use saggar_onnx::{OnnxCompiler, OnnxModel, OnnxOptions};
use saggar_shape::{DType, Dim, TensorSpec};

use crate::batcher::{Batcher, Policy};
use crate::config::{BucketSetting, DEFAULT_MAX_BATCH_SIZE, ModelConfig, TensorConfig};
use crate::merge::{Layout, TensorLayout};
use crate::metrics::ModelMetrics;
use crate::model::{LoadedModel, TensorMeta};
use crate::repository::ModelEntry;
use crate::runner::runner;

/// What every model load shares: the server's flags.
#[derive(Debug, Clone)]
pub struct LoadSettings {
    /// The backend.
    pub backend: BackendKind,
    /// Device ordinals (`--devices`); empty for all. A model's `instance_group { gpus }` wins.
    pub devices: Vec<usize>,
    /// The compile cache every model's sessions share.
    pub cache: Arc<CompileCache>,
    /// Most requests waiting per model (`--max-queue`).
    pub max_queue: usize,
}

/// Loads the latest version of `entry`.
pub fn load(entry: &ModelEntry, settings: &LoadSettings) -> Result<LoadedModel, String> {
    let (version, path) = entry.latest().ok_or("no version folder holds a model.onnx")?.clone();
    let mut config = match &entry.config {
        Some(file) => {
            let text = read_config(file)?;
            ModelConfig::parse(&text, &entry.name).map_err(|e| format!("{}: {e}", file.display()))?
        }
        None => ModelConfig::default(),
    };
    for field in &config.ignored {
        tracing::warn!(model = %entry.name, field = %field, "config.pbtxt field not honoured by saggar");
    }
    let model = OnnxModel::load(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let compiler = Arc::new(OnnxCompiler::new(model, OnnxOptions::default().with_precision(config.precision)));
    let onnx = compiler.onnx_model();
    let batch_symbol = onnx.batch_layout().symbol().map(str::to_string);
    let max_batch = match (config.max_batch_size, &batch_symbol) {
        (None, Some(_)) => DEFAULT_MAX_BATCH_SIZE,
        (None, None) => 0,
        (Some(n), None) if n > 0 => {
            return Err(format!("max_batch_size {n}, but no input of the model has a symbolic batch dimension"));
        }
        (Some(n), _) => n,
    };
    config.max_batch_size = Some(max_batch);
    if max_batch == 0 {
        config.batching = None;
    }
    let batched = |spec: &TensorSpec| {
        max_batch > 0 && batch_symbol.is_some() && spec.dims().first().and_then(Dim::symbol) == batch_symbol.as_deref()
    };
    let axis_symbol = config.pad_axis.as_ref().map(|p| p.symbol.clone());
    let axis_of = |spec: &TensorSpec| {
        spec.dims().iter().position(|d| d.symbol().is_some() && d.symbol() == axis_symbol.as_deref())
    };
    if let Some(symbol) = &axis_symbol
        && !onnx.inputs().iter().any(|s| axis_of(s).is_some())
    {
        return Err(format!("pad_axis `{symbol}`: no input of the model has a dimension named `{symbol}`"));
    }
    let inputs = metadata(onnx.inputs(), &config.inputs, &batched, "input")?;
    let outputs = metadata(onnx.outputs(), &config.outputs, &batched, "output")?;
    let pad = config.pad_axis.as_ref().map_or(0.0, |p| p.value);
    let layout = Arc::new(Layout {
        inputs: onnx
            .inputs()
            .iter()
            .map(|s| Ok(TensorLayout { batched: batched(s), axis: axis_of(s), pad: pad_element(s.dtype(), pad)? }))
            .collect::<Result<_, String>>()?,
        outputs: onnx
            .outputs()
            .iter()
            .map(|s| TensorLayout { batched: batched(s), axis: axis_of(s), pad: Vec::new() })
            .collect(),
        axis_buckets: config.pad_axis.as_ref().map(|p| p.sizes.clone()).unwrap_or_default(),
    });
    let session_config = session_config(&config, &compiler, max_batch, settings.cache.clone())?;
    let devices = config.gpus.clone().unwrap_or_else(|| settings.devices.clone());
    let executor = crate::executor::start(settings.backend, &devices, compiler.clone(), session_config)?;
    let metrics = Arc::new(ModelMetrics::default());
    let batching = config.batching.clone().unwrap_or_default();
    let policy = Policy {
        max_batch: if config.batching.is_some() { max_batch } else { 0 },
        max_queue_delay: batching.max_queue_delay,
        preferred: batching.preferred,
        buckets: executor.buckets(),
        max_queue: settings.max_queue,
    };
    let run = runner(entry.name.clone(), executor.clone(), layout.clone(), outputs.clone(), metrics.clone());
    let batcher = Batcher::start(&entry.name, policy, executor.devices(), config.instance_count, run);
    Ok(LoadedModel {
        name: entry.name.clone(),
        version,
        versions: entry.versions.iter().map(|v| v.0).collect(),
        config,
        inputs,
        outputs,
        max_batch,
        layout,
        executor,
        batcher,
        metrics,
    })
}

/// Reads a `config.pbtxt` of at most [`crate::pbtxt::MAX_TEXT_BYTES`].
fn read_config(file: &std::path::Path) -> Result<String, String> {
    let len = std::fs::metadata(file).map_err(|e| format!("{}: {e}", file.display()))?.len();
    if len > crate::pbtxt::MAX_TEXT_BYTES as u64 {
        return Err(format!("{}: {len} bytes, above the limit of {}", file.display(), crate::pbtxt::MAX_TEXT_BYTES));
    }
    std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))
}

/// The protocol's view of the model's tensors, with the configuration's `data_type` and `dims`
/// checked against the model and fixing symbolic extents they name.
fn metadata(
    specs: &[TensorSpec],
    configured: &[TensorConfig],
    batched: &dyn Fn(&TensorSpec) -> bool,
    kind: &str,
) -> Result<Vec<TensorMeta>, String> {
    if let Some(c) = configured.iter().find(|c| !specs.iter().any(|s| s.name() == c.name)) {
        return Err(format!("config.pbtxt names {kind} `{}`, which the model does not have", c.name));
    }
    specs
        .iter()
        .map(|spec| {
            let mut shape: Vec<i64> = spec.dims().iter().map(|d| d.as_fixed().map_or(-1, |v| v as i64)).collect();
            if batched(spec) {
                shape[0] = -1;
            }
            if let Some(c) = configured.iter().find(|c| c.name == spec.name()) {
                if let Some(dtype) = c.dtype
                    && dtype != spec.dtype()
                {
                    return Err(format!("config.pbtxt: {kind} `{}` is {dtype} in the model", c.name));
                }
                if let Some(dims) = &c.dims {
                    let skip = usize::from(batched(spec));
                    if dims.len() + skip != shape.len() {
                        return Err(format!(
                            "config.pbtxt: {kind} `{}` has dims {dims:?}; the model's shape is {shape:?}{}",
                            c.name,
                            if skip == 1 { " (dims leave out the batch)" } else { "" }
                        ));
                    }
                    for (s, &d) in shape[skip..].iter_mut().zip(dims) {
                        match (*s, d) {
                            (-1, d) => *s = d,
                            (s, d) if d == -1 || s == d => {}
                            (s, d) => {
                                return Err(format!(
                                    "config.pbtxt: {kind} `{}` dim {d} where the model has {s}",
                                    c.name
                                ));
                            }
                        }
                    }
                }
            }
            Ok(TensorMeta { name: spec.name().to_string(), dtype: spec.dtype(), shape })
        })
        .collect()
}

/// One element of value `pad` in `dtype`'s bytes.
fn pad_element(dtype: DType, pad: f64) -> Result<Vec<u8>, String> {
    let value = if dtype.name().starts_with('f') || dtype.name().starts_with("bf") {
        serde_json::Value::from(pad)
    } else if pad.fract() == 0.0 {
        serde_json::Value::from(pad as i64)
    } else {
        return Err(format!("pad_value {pad} is not a whole number, for an input of {dtype}"));
    };
    crate::tensor::from_json("pad_value", dtype, &value.to_string(), 1).map_err(|e| e.to_string())
}

fn session_config(
    config: &ModelConfig,
    compiler: &OnnxCompiler,
    max_batch: u64,
    cache: Arc<CompileCache>,
) -> Result<SessionConfig, String> {
    let max = if max_batch == 0 { DEFAULT_MAX_BATCH_SIZE } else { max_batch };
    let buckets = match &config.buckets {
        BucketSetting::Pow2 => BucketSpec::PowersOfTwo { max },
        BucketSetting::Stepped => BucketSpec::Stepped { max },
        BucketSetting::List(list) => BucketSpec::List(list.clone()),
    };
    let capture = if config.capture_eager { CaptureWhen::Eager } else { CaptureWhen::Lazy };
    let mut builder = SessionConfig::builder()
        .buckets(buckets)
        .graphs(GraphConfig::default().with_enabled(config.graphs).with_capture(capture))
        .cache(cache)
        .max_concurrency(config.instance_count.max(1))
        .prewarm_contexts(config.instance_count.max(1));
    if let Some(axis) = &config.pad_axis {
        let pad =
            if axis.value.fract() == 0.0 { PadValue::Int(axis.value as i64) } else { PadValue::Float(axis.value) };
        builder = builder.padded_axis(compiler.padded_axis(&axis.symbol, BucketSpec::List(axis.sizes.clone()), pad));
    }
    builder.build().map_err(|e| e.to_string())
}
