//! A model's configuration: Triton's `config.pbtxt` fields that map onto a saggar session, or, without
//! a file, the same settings derived from the model (as Triton's auto-complete does).
//!
//! Honoured: `max_batch_size`; `dynamic_batching { max_queue_delay_microseconds,
//! preferred_batch_size }`; `instance_group { count, gpus }`; `input`/`output` `{ name, data_type,
//! dims }`; and `parameters` for saggar's settings: `buckets` (`pow2`, `stepped`, `list:1,2,4,...`),
//! `pad_axis` (`SYMBOL:16,32,64`), `pad_value`, `precision` (`fp32`, `tf32`, `fp16`, `bf16`, `int8`
//! for QDQ models), `graphs` (`on`, `off`) and `capture` (`lazy`, `eager`). `name`, `platform`, `backend` and `version_policy` are
//! accepted; any other field is named in a warning and ignored, and an unknown `parameters` key is
//! an error, so a typo cannot silently change nothing.

use std::time::Duration;

use saggar_onnx::Precision;
use saggar_shape::DType;

use crate::datatype::parse_config;
use crate::pbtxt::{self, Message, Value};

/// The largest batch any configuration may ask for.
pub const MAX_BATCH_SIZE: u64 = 4096;
/// `max_batch_size` of a model without a `config.pbtxt` whose inputs have a batch dimension.
pub const DEFAULT_MAX_BATCH_SIZE: u64 = 64;

/// Dynamic batching: how long the first request of a batch may wait for others, and the batch
/// sizes worth stopping at.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Batching {
    /// `max_queue_delay_microseconds`.
    pub max_queue_delay: Duration,
    /// `preferred_batch_size`: a batch stops growing when it reaches one of these.
    pub preferred: Vec<u64>,
}

/// An `input` or `output` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorConfig {
    /// `name`.
    pub name: String,
    /// `data_type`, if given.
    pub dtype: Option<DType>,
    /// `dims` (without the batch dimension when `max_batch_size` > 0); -1 is variable.
    pub dims: Option<Vec<i64>>,
}

/// `parameters { key: "pad_axis" ... }` and `pad_value`.
#[derive(Debug, Clone, PartialEq)]
pub struct PadAxisSetting {
    /// The symbolic dimension padded (such as `seq`).
    pub symbol: String,
    /// Its buckets.
    pub sizes: Vec<u64>,
    /// The value padded positions get.
    pub value: f64,
}

/// The bucket policy of `parameters { key: "buckets" ... }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BucketSetting {
    /// 1, 2, 4, ... up to `max_batch_size`.
    Pow2,
    /// 1, 2, 4, then multiples of 8 up to `max_batch_size`.
    Stepped,
    /// Exactly these.
    List(Vec<u64>),
}

/// A model's configuration, from its file or derived.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// `max_batch_size`: 0 for a model served without batching; `None` until derived.
    pub max_batch_size: Option<u64>,
    /// `dynamic_batching`, if on.
    pub batching: Option<Batching>,
    /// `instance_group` `count`: executors per device taking batches from the model's queue.
    pub instance_count: usize,
    /// `instance_group` `gpus`: device ordinals; `None` for the server's `--devices`.
    pub gpus: Option<Vec<usize>>,
    /// `input` entries.
    pub inputs: Vec<TensorConfig>,
    /// `output` entries.
    pub outputs: Vec<TensorConfig>,
    /// `buckets`.
    pub buckets: BucketSetting,
    /// `pad_axis` and `pad_value`.
    pub pad_axis: Option<PadAxisSetting>,
    /// `precision`.
    pub precision: Precision,
    /// `graphs`.
    pub graphs: bool,
    /// `capture`: every bucket's graph at load (`eager`) or on first use (`lazy`).
    pub capture_eager: bool,
    /// Whether it came from a `config.pbtxt`.
    pub from_file: bool,
    /// Fields of the file that are not honoured, for the load's warning.
    pub ignored: Vec<String>,
}

impl Default for ModelConfig {
    /// The configuration of a model without a `config.pbtxt` (auto-complete): batching and
    /// dynamic batching with no added delay when the model has a batch dimension.
    fn default() -> ModelConfig {
        ModelConfig {
            max_batch_size: None,
            batching: Some(Batching::default()),
            instance_count: 1,
            gpus: None,
            inputs: Vec::new(),
            outputs: Vec::new(),
            buckets: BucketSetting::Pow2,
            pad_axis: None,
            precision: Precision::Fp32,
            graphs: true,
            capture_eager: false,
            from_file: false,
            ignored: Vec::new(),
        }
    }
}

const ACCEPTED: &[&str] = &["name", "platform", "backend", "version_policy"];

impl ModelConfig {
    /// Parses `config.pbtxt` text of the model in folder `model`.
    pub fn parse(text: &str, model: &str) -> Result<ModelConfig, String> {
        let m = pbtxt::parse(text)?;
        let mut config = ModelConfig { from_file: true, batching: None, ..ModelConfig::default() };
        if let Some(name) = m.get("name").map(scalar).transpose()?
            && name != model
        {
            return Err(format!("name \"{name}\" differs from the model's folder `{model}`"));
        }
        for (field, value) in &m.fields {
            match field.as_str() {
                "max_batch_size" => config.max_batch_size = Some(number(value, field, 0, MAX_BATCH_SIZE)?),
                "dynamic_batching" => config.batching = Some(batching(value)?),
                "instance_group" => instance_group(value, &mut config)?,
                "input" | "output" => {
                    let items = match value {
                        Value::List(items) => items.iter().collect(),
                        v => vec![v],
                    };
                    for item in items {
                        let tensor = tensor(item)?;
                        if field == "input" { config.inputs.push(tensor) } else { config.outputs.push(tensor) }
                    }
                }
                "parameters" => parameter(value, &mut config)?,
                f if ACCEPTED.contains(&f) => {}
                f => config.ignored.push(f.to_string()),
            }
        }
        // Triton enables dynamic batching only when the file asks for it; without
        // `max_batch_size` the model is not batched at all.
        if config.max_batch_size.is_none() {
            config.max_batch_size = Some(0);
        }
        Ok(config)
    }
}

fn scalar(value: &Value) -> Result<String, String> {
    match value {
        Value::Scalar(s) => Ok(s.clone()),
        other => Err(format!("expected a single value, found {other:?}")),
    }
}

fn message<'a>(value: &'a Value, field: &str) -> Result<&'a Message, String> {
    match value {
        Value::Message(m) => Ok(m),
        _ => Err(format!("`{field}` must be a message {{ ... }}")),
    }
}

fn number(value: &Value, field: &str, lo: u64, hi: u64) -> Result<u64, String> {
    let text = scalar(value)?;
    match text.parse::<u64>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(format!("`{field}: {text}` is not a whole number between {lo} and {hi}")),
    }
}

fn batching(value: &Value) -> Result<Batching, String> {
    let m = message(value, "dynamic_batching")?;
    let mut b = Batching::default();
    for (field, v) in &m.fields {
        match field.as_str() {
            "max_queue_delay_microseconds" => {
                b.max_queue_delay = Duration::from_micros(number(v, field, 0, 60_000_000)?);
            }
            "preferred_batch_size" => match v {
                Value::List(items) => {
                    for item in items {
                        b.preferred.push(number(item, field, 1, MAX_BATCH_SIZE)?);
                    }
                }
                v => b.preferred.push(number(v, field, 1, MAX_BATCH_SIZE)?),
            },
            _ => {}
        }
    }
    b.preferred.sort_unstable();
    b.preferred.dedup();
    Ok(b)
}

fn instance_group(value: &Value, config: &mut ModelConfig) -> Result<(), String> {
    let groups: Vec<&Value> = match value {
        Value::List(items) => items.iter().collect(),
        v => vec![v],
    };
    for group in groups {
        let m = message(group, "instance_group")?;
        if let Some(count) = m.get("count") {
            config.instance_count = number(count, "count", 1, 64)? as usize;
        }
        let gpus: Vec<usize> =
            m.all("gpus").map(|g| number(g, "gpus", 0, 1023).map(|g| g as usize)).collect::<Result<_, _>>()?;
        if !gpus.is_empty() {
            config.gpus = Some(gpus);
        }
    }
    Ok(())
}

fn tensor(value: &Value) -> Result<TensorConfig, String> {
    let m = message(value, "input/output")?;
    let name = m.get("name").map(scalar).transpose()?.ok_or("an input or output entry has no `name`")?;
    let dtype = match m.get("data_type").map(scalar).transpose()? {
        Some(t) => Some(parse_config(&t).ok_or_else(|| format!("`{name}`: data_type {t} is not supported"))?),
        None => None,
    };
    let dims: Vec<i64> = m
        .all("dims")
        .map(|d| {
            let t = scalar(d)?;
            match t.parse::<i64>() {
                Ok(n) if n >= -1 => Ok(n),
                _ => Err(format!("`{name}`: dims value `{t}` is not -1 or a whole number")),
            }
        })
        .collect::<Result<_, String>>()?;
    let has_dims = m.get("dims").is_some();
    Ok(TensorConfig { name, dtype, dims: has_dims.then_some(dims) })
}

fn parameter(value: &Value, config: &mut ModelConfig) -> Result<(), String> {
    let m = message(value, "parameters")?;
    let key = m.get("key").map(scalar).transpose()?.ok_or("a `parameters` entry has no `key`")?;
    let text = match m.get("value") {
        Some(Value::Message(v)) => v.get("string_value").map(scalar).transpose()?,
        Some(v) => Some(scalar(v)?),
        None => None,
    }
    .ok_or_else(|| format!("parameter `{key}` has no value {{ string_value: ... }}"))?;
    let bad = |expected: &str| format!("parameter `{key}`: `{text}` is not {expected}");
    match key.as_str() {
        "buckets" => {
            config.buckets = match text.split_once(':') {
                None if text == "pow2" => BucketSetting::Pow2,
                None if text == "stepped" => BucketSetting::Stepped,
                Some(("list", list)) => BucketSetting::List(sizes(list).ok_or_else(|| bad("list:1,2,4,..."))?),
                _ => return Err(bad("pow2, stepped or list:1,2,4,...")),
            }
        }
        "pad_axis" => {
            let (symbol, list) = text.split_once(':').ok_or_else(|| bad("SYMBOL:16,32,64"))?;
            let sizes = sizes(list).ok_or_else(|| bad("SYMBOL:16,32,64"))?;
            let value = config.pad_axis.as_ref().map_or(0.0, |p| p.value);
            config.pad_axis = Some(PadAxisSetting { symbol: symbol.trim().to_string(), sizes, value });
        }
        "pad_value" => {
            let value: f64 = text.trim().parse().map_err(|_| bad("a number"))?;
            match &mut config.pad_axis {
                Some(axis) => axis.value = value,
                None => return Err("parameter `pad_value` needs a `pad_axis` parameter before it".to_string()),
            }
        }
        "precision" => {
            config.precision = text.parse().map_err(|_| bad("fp32, tf32, fp16, bf16 or int8 (QDQ models)"))?;
        }
        "graphs" | "capture" => {
            let on = match (key.as_str(), text.as_str()) {
                ("graphs", "on") | ("capture", "eager") => true,
                ("graphs", "off") | ("capture", "lazy") => false,
                _ => return Err(bad(if key == "graphs" { "on or off" } else { "lazy or eager" })),
            };
            if key == "graphs" { config.graphs = on } else { config.capture_eager = on }
        }
        _ => {
            return Err(format!(
                "unknown parameter `{key}` (saggar's are buckets, pad_axis, pad_value, precision, graphs, capture)"
            ));
        }
    }
    Ok(())
}

fn sizes(list: &str) -> Option<Vec<u64>> {
    let mut v: Vec<u64> = list
        .split(',')
        .map(|s| s.trim().parse::<u64>().ok().filter(|n| (1..=1 << 20).contains(n)))
        .collect::<Option<_>>()?;
    v.sort_unstable();
    v.dedup();
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_that_map_are_read() {
        let text = r#"
            name: "bert" platform: "onnxruntime_onnx" max_batch_size: 32
            input [ { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] } ]
            output { name: "out" dims: [ 4 ] }
            dynamic_batching { max_queue_delay_microseconds: 250 preferred_batch_size: [ 16, 8 ] }
            instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0, 1 ] } ]
            parameters { key: "buckets" value: { string_value: "list:1,4,32" } }
            parameters { key: "pad_axis" value: { string_value: "seq:16,64" } }
            parameters { key: "pad_value" value: { string_value: "0" } }
            parameters { key: "precision" value: { string_value: "tf32" } }
            parameters { key: "graphs" value: { string_value: "off" } }
            optimization { cuda { graphs: true } }
        "#;
        let c = ModelConfig::parse(text, "bert").unwrap();
        assert_eq!(c.max_batch_size, Some(32));
        let b = c.batching.unwrap();
        assert_eq!((b.max_queue_delay, b.preferred), (Duration::from_micros(250), vec![8, 16]));
        assert_eq!((c.instance_count, c.gpus), (2, Some(vec![0, 1])));
        assert_eq!(c.inputs[0].dtype, Some(DType::I64));
        assert_eq!(c.inputs[0].dims, Some(vec![-1]));
        assert_eq!(c.outputs[0].dims, Some(vec![4]));
        assert_eq!(c.buckets, BucketSetting::List(vec![1, 4, 32]));
        assert_eq!(c.pad_axis.unwrap().sizes, [16, 64]);
        assert_eq!((c.precision, c.graphs), (Precision::Tf32, false));
        assert_eq!(c.ignored, ["optimization"]);
    }

    #[test]
    fn a_file_without_max_batch_size_does_not_batch() {
        let c = ModelConfig::parse("name: \"m\"", "m").unwrap();
        assert_eq!((c.max_batch_size, c.batching), (Some(0), None));
        let derived = ModelConfig::default();
        assert_eq!(derived.max_batch_size, None, "derived from the model at load");
        assert!(derived.batching.is_some());
    }

    #[test]
    fn bad_values_are_named() {
        for (text, what) in [
            ("name: \"other\"", "differs"),
            ("max_batch_size: -1", "max_batch_size"),
            ("max_batch_size: 99999", "max_batch_size"),
            ("input { data_type: TYPE_FP32 }", "no `name`"),
            ("input { name: \"x\" data_type: TYPE_STRING }", "TYPE_STRING"),
            ("input { name: \"x\" dims: [ -2 ] }", "-2"),
            ("parameters { key: \"bucket\" value: { string_value: \"pow2\" } }", "unknown parameter `bucket`"),
            ("parameters { key: \"buckets\" value: { string_value: \"list:0\" } }", "list:0"),
            ("parameters { key: \"precision\" value: { string_value: \"fp8\" } }", "fp8"),
            ("parameters { key: \"pad_value\" value: { string_value: \"1\" } }", "pad_axis"),
            ("dynamic_batching: 3", "message"),
        ] {
            let e = ModelConfig::parse(text, "m").unwrap_err();
            assert!(e.contains(what), "{text}: {e}");
        }
    }
}
