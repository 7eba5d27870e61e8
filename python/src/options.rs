//! `SessionOptions` read into [`Settings`], and the session configuration and compiler options
//! they make.
//!
//! The options object is read by attribute, with a default for every attribute it lacks, so
//! `saggar.SessionOptions` (defined in Python, `saggar/_options.py`) and an ONNX Runtime
//! `SessionOptions` both work. The ONNX Runtime attributes that mean something to saggar are read
//! (`intra_op_num_threads`, `log_severity_level`); the others are accepted and ignored. saggar's
//! own settings: `buckets`, `max_batch`, `pad_axes`, `precision`, `graphs`, `capture`,
//! `cache_dir`, `device_id`, `devices`, `max_request_rows`, `max_request_bytes`.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use saggar_cache::{CacheConfig, CompileCache};
use saggar_dispatch::{BucketSpec, CaptureWhen, GraphConfig, RequestLimits, SessionConfig};
use saggar_onnx::{OnnxCompiler, OnnxOptions, Precision};

use crate::errors::invalid;

/// The largest bucket a session may be asked to precompile (the reference compiler's limit too):
/// every bucket is compiled and given arena memory at session creation.
pub(crate) const MAX_BUCKET: u64 = 65_536;
/// The most buckets a `buckets` list may name.
const MAX_BUCKETS: usize = 64;

/// How the batch buckets are chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Buckets {
    /// 1, 2, 4, ... up to `max_batch`.
    PowersOfTwo,
    /// 1, 2, 4, then multiples of 8 up to `max_batch`.
    Stepped,
    /// Exactly these.
    List(Vec<u64>),
}

/// A session's settings, read once from its `SessionOptions`.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) buckets: Buckets,
    pub(crate) max_batch: u64,
    /// The padded axis: a symbol and its buckets (inputs carrying it are padded with 0).
    pub(crate) pad_axis: Option<(String, Vec<u64>)>,
    pub(crate) precision: Precision,
    pub(crate) graphs: bool,
    pub(crate) capture: CaptureWhen,
    pub(crate) cache_dir: Option<PathBuf>,
    pub(crate) device_id: usize,
    /// A session group over these device ordinals.
    pub(crate) devices: Option<Vec<usize>>,
    /// `intra_op_num_threads` when positive: the threads session creation compiles and loads with.
    pub(crate) threads: Option<usize>,
    /// The most one request may ask for (`max_request_rows`, `max_request_bytes`).
    pub(crate) limits: RequestLimits,
    /// ONNX Runtime's severity: 0 verbose, 1 info, 2 warning (the default), 3 error, 4 fatal.
    /// Warnings are shown at 2 and below.
    pub(crate) log_severity_level: i64,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            buckets: Buckets::PowersOfTwo,
            max_batch: 64,
            pad_axis: None,
            precision: Precision::Fp32,
            graphs: true,
            capture: CaptureWhen::Lazy,
            cache_dir: None,
            device_id: 0,
            devices: None,
            threads: None,
            limits: RequestLimits::default(),
            log_severity_level: 2,
        }
    }
}

/// The attribute `name` of `options`, or `None` when it lacks it or it is `None`.
fn attr<'py>(options: &Bound<'py, PyAny>, name: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
    match options.getattr(name) {
        Ok(v) if v.is_none() => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyAttributeError>(options.py()) => Ok(None),
        Err(e) => Err(e),
    }
}

/// `value` as `T`, or an `InvalidArgument` naming the option and what it takes.
fn extract<'py, T: FromPyObjectOwned<'py>>(value: &Bound<'py, PyAny>, name: &str, takes: &str) -> PyResult<T> {
    value.extract::<T>().map_err(|_| invalid(format!("SessionOptions.{name} must be {takes}, not {value}")))
}

/// A list of bucket sizes, each checked, ascending without repeats.
fn sizes(value: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<u64>> {
    let mut list: Vec<i64> = extract(value, name, "a list of sizes")?;
    if list.is_empty() || list.len() > MAX_BUCKETS {
        return Err(invalid(format!("SessionOptions.{name} must list 1 to {MAX_BUCKETS} sizes, not {}", list.len())));
    }
    if let Some(bad) = list.iter().find(|&&b| !(1..=MAX_BUCKET as i64).contains(&b)) {
        return Err(invalid(format!("SessionOptions.{name}: size {bad} is not between 1 and {MAX_BUCKET}")));
    }
    list.sort_unstable();
    list.dedup();
    Ok(list.into_iter().map(|b| b as u64).collect())
}

/// Reads `options` (any object; `None` for the defaults).
pub(crate) fn read(options: Option<&Bound<'_, PyAny>>) -> PyResult<Settings> {
    let mut s = Settings::default();
    let Some(o) = options else { return Ok(s) };
    if let Some(v) = attr(o, "max_batch")? {
        let max: i64 = extract(&v, "max_batch", "a whole number")?;
        if !(1..=MAX_BUCKET as i64).contains(&max) {
            return Err(invalid(format!("SessionOptions.max_batch must be between 1 and {MAX_BUCKET}, not {max}")));
        }
        s.max_batch = max as u64;
    }
    if let Some(v) = attr(o, "buckets")? {
        s.buckets = if let Ok(text) = v.cast::<PyString>() {
            match &*text.to_cow()? {
                "pow2" => Buckets::PowersOfTwo,
                "stepped" => Buckets::Stepped,
                other => {
                    return Err(invalid(format!(
                        "SessionOptions.buckets must be \"pow2\", \"stepped\" or a list of batch sizes, not \"{other}\""
                    )));
                }
            }
        } else {
            Buckets::List(sizes(&v, "buckets")?)
        };
    }
    if let Some(v) = attr(o, "pad_axes")? {
        let axes = v.cast::<PyDict>().map_err(|_| invalid("SessionOptions.pad_axes must be a dict {symbol: sizes}"))?;
        if axes.len() > 1 {
            return Err(invalid(format!("SessionOptions.pad_axes names {} axes; saggar pads one", axes.len())));
        }
        if let Some((symbol, list)) = axes.iter().next() {
            let symbol: String = extract(&symbol, "pad_axes", "a dict keyed by symbol names")?;
            s.pad_axis = Some((symbol, sizes(&list, "pad_axes")?));
        }
    }
    if let Some(v) = attr(o, "precision")? {
        let name =
            extract::<String>(&v, "precision", "\"fp32\", \"tf32\", \"fp16\", \"bf16\" or \"int8\" (QDQ models)")?;
        s.precision = match name.as_str() {
            "strict" => Precision::Fp32,
            other => other.parse().map_err(|e: String| invalid(format!("SessionOptions.precision: {e}")))?,
        };
    }
    if let Some(v) = attr(o, "graphs")? {
        s.graphs = extract(&v, "graphs", "True or False")?;
    }
    if let Some(v) = attr(o, "capture")? {
        s.capture = match extract::<String>(&v, "capture", "\"lazy\" or \"eager\"")?.as_str() {
            "lazy" => CaptureWhen::Lazy,
            "eager" => CaptureWhen::Eager,
            other => {
                return Err(invalid(format!("SessionOptions.capture must be \"lazy\" or \"eager\", not \"{other}\"")));
            }
        };
    }
    if let Some(v) = attr(o, "cache_dir")? {
        s.cache_dir = Some(extract::<PathBuf>(&v, "cache_dir", "a directory path")?);
    }
    if let Some(v) = attr(o, "device_id")? {
        s.device_id = extract(&v, "device_id", "a device ordinal (0, 1, ...)")?;
    }
    if let Some(v) = attr(o, "devices")? {
        let devices: Vec<usize> = extract(&v, "devices", "a list of device ordinals")?;
        if devices.is_empty() {
            return Err(invalid("SessionOptions.devices must name at least one device"));
        }
        s.devices = Some(devices);
    }
    if let Some(v) = attr(o, "intra_op_num_threads")? {
        let n: i64 = extract(&v, "intra_op_num_threads", "a whole number")?;
        s.threads = usize::try_from(n).ok().filter(|&n| n > 0);
    }
    if let Some(v) = attr(o, "max_request_rows")? {
        s.limits.max_rows = extract(&v, "max_request_rows", "a whole number of rows")?;
    }
    if let Some(v) = attr(o, "max_request_bytes")? {
        s.limits.max_bytes = extract(&v, "max_request_bytes", "a whole number of bytes")?;
    }
    if let Some(v) = attr(o, "log_severity_level")? {
        s.log_severity_level = extract(&v, "log_severity_level", "a whole number from 0 to 4")?;
    }
    Ok(s)
}

impl Settings {
    /// The compiler options: the precision; everything else saggar-onnx's defaults.
    pub(crate) fn onnx_options(&self) -> OnnxOptions {
        OnnxOptions::default().with_precision(self.precision)
    }

    /// The session configuration for `compiler`'s model: buckets, the padded axis, graphs and the
    /// compile cache. An unusable cache directory is an `InvalidArgument`.
    pub(crate) fn session_config(&self, compiler: &OnnxCompiler) -> PyResult<SessionConfig> {
        let buckets = match &self.buckets {
            Buckets::PowersOfTwo => BucketSpec::PowersOfTwo { max: self.max_batch },
            Buckets::Stepped => BucketSpec::Stepped { max: self.max_batch },
            Buckets::List(list) => BucketSpec::List(list.clone()),
        };
        let mut builder = SessionConfig::builder()
            .buckets(buckets)
            .request_limits(self.limits)
            .graphs(GraphConfig::default().with_enabled(self.graphs).with_capture(self.capture));
        if let Some((symbol, sizes)) = &self.pad_axis {
            builder = builder.padded_axis(compiler.padded_axis(symbol, BucketSpec::List(sizes.clone()), 0));
        }
        if let Some(dir) = &self.cache_dir {
            let cache = CompileCache::open(CacheConfig::builder(dir).build())
                .map_err(|e| invalid(format!("SessionOptions.cache_dir {}: {e}", dir.display())))?;
            builder = builder.cache(Arc::new(cache));
        }
        if let Some(n) = self.threads {
            builder = builder.compile_threads(n).load_threads(n);
        }
        builder.build().map_err(crate::errors::dispatch)
    }

    /// Whether warnings are shown (`log_severity_level` at 2, warning, or below).
    pub(crate) fn warns(&self) -> bool {
        self.log_severity_level <= 2
    }
}
