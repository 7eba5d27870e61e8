//! Session configuration: one struct, built once.

use std::sync::Arc;

use saggar_cache::CompileCache;
use saggar_shape::{BatchHistogram, BucketPolicy, DType, LOOKUP_TABLE_LIMIT, Splitting};

use crate::error::{DispatchError, Result};
use crate::request::RequestLimits;

/// Which batch buckets a session precompiles.
#[derive(Debug, Clone)]
pub enum BucketSpec {
    /// 1, 2, 4, ... up to `max` (the seeds' `max_dynamic_batch`).
    PowersOfTwo {
        /// The largest bucket (rounded up to a power of two).
        max: u64,
    },
    /// 1, 2, 4, then multiples of 8 up to `max`.
    Stepped {
        /// The largest bucket.
        max: u64,
    },
    /// Exactly these buckets.
    List(Vec<u64>),
    /// `k` buckets that minimise expected padded rows for an observed histogram.
    Adaptive {
        /// Observed batch sizes.
        histogram: BatchHistogram,
        /// How many buckets.
        k: usize,
    },
}

impl BucketSpec {
    pub(crate) fn policy(&self) -> Result<BucketPolicy> {
        Ok(match self {
            BucketSpec::PowersOfTwo { max } => BucketPolicy::powers_of_two(*max)?,
            BucketSpec::Stepped { max } => BucketPolicy::stepped(*max)?,
            BucketSpec::List(list) => BucketPolicy::explicit(list.iter().copied())?,
            BucketSpec::Adaptive { histogram, k } => BucketPolicy::adaptive(histogram, *k)?,
        })
    }
}

/// A symbolic dimension besides the batch along which requests are padded to buckets (a
/// sequence): the session's programs form a grid of batch buckets by buckets of this axis. Every
/// input that carries the symbol is padded with its declared value up to the axis's bucket, and
/// every output that carries it is sliced back to the real extent. A symbol not declared this way
/// is never padded: a model that has one is served per shape.
#[derive(Debug, Clone)]
pub struct PaddedAxis {
    pub(crate) symbol: String,
    pub(crate) buckets: BucketSpec,
    pub(crate) pad_values: Vec<(String, PadValue)>,
}

impl PaddedAxis {
    /// The axis named `symbol` (as the model's inputs name it), bucketed by `buckets`.
    pub fn new(symbol: impl Into<String>, buckets: BucketSpec) -> PaddedAxis {
        PaddedAxis { symbol: symbol.into(), buckets, pad_values: Vec::new() }
    }

    /// Input `input` is padded with `value` along the axis. Every input that carries the symbol
    /// needs one (session creation fails naming the input otherwise).
    pub fn pad(mut self, input: impl Into<String>, value: impl Into<PadValue>) -> PaddedAxis {
        self.pad_values.push((input.into(), value.into()));
        self
    }

    /// The symbol.
    pub fn symbol(&self) -> &str {
        &self.symbol
    }

    /// The axis's buckets.
    pub fn buckets(&self) -> &BucketSpec {
        &self.buckets
    }

    /// The pad value of each declared input.
    pub fn pad_values(&self) -> &[(String, PadValue)] {
        &self.pad_values
    }
}

/// The value padded positions of an input hold, converted to the input's element type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PadValue {
    /// An integer (converted to float types exactly where they hold it).
    Int(i64),
    /// A floating-point value (integer inputs need an integral value in range).
    Float(f64),
}

impl From<i64> for PadValue {
    fn from(v: i64) -> PadValue {
        PadValue::Int(v)
    }
}

impl From<f64> for PadValue {
    fn from(v: f64) -> PadValue {
        PadValue::Float(v)
    }
}

impl PadValue {
    /// One element of `dtype` holding the value, little-endian, in the first `size_bytes` bytes;
    /// `None` when the type cannot hold it exactly (or is a type saggar does not convert to:
    /// 8-bit floats, and non-zero half floats).
    pub(crate) fn encode(self, dtype: DType) -> Option<[u8; 8]> {
        let float = match self {
            PadValue::Int(v) => v as f64,
            PadValue::Float(v) => v,
        };
        let int = match self {
            PadValue::Int(v) => Some(i128::from(v)),
            PadValue::Float(v) if v.fract() == 0.0 && v.abs() < 1e30 => Some(v as i128),
            PadValue::Float(_) => None,
        };
        let mut out = [0u8; 8];
        let mut put = |bytes: &[u8]| out[..bytes.len()].copy_from_slice(bytes);
        macro_rules! integer {
            ($t:ty) => {
                put(&<$t>::try_from(int?).ok()?.to_le_bytes())
            };
        }
        match dtype {
            DType::Bool => put(&[u8::try_from(int.filter(|v| *v == 0 || *v == 1)?).ok()?]),
            DType::U8 => integer!(u8),
            DType::I8 => integer!(i8),
            DType::U16 => integer!(u16),
            DType::I16 => integer!(i16),
            DType::U32 => integer!(u32),
            DType::I32 => integer!(i32),
            DType::U64 => integer!(u64),
            DType::I64 => integer!(i64),
            DType::F32 if f64::from(float as f32) == float || float.is_nan() => put(&(float as f32).to_le_bytes()),
            DType::F64 => put(&float.to_le_bytes()),
            // bfloat16 is the top half of an f32; only values it holds exactly are accepted.
            DType::BF16 if (float as f32).to_bits() & 0xFFFF == 0 => {
                put(&(((float as f32).to_bits() >> 16) as u16).to_le_bytes())
            }
            DType::F16 if float == 0.0 => put(&[0, 0]),
            _ => return None,
        }
        Some(out)
    }
}

/// Live re-bucketing: the session records how many requests it sees of each batch (and padded
/// axis extent), and every `every` requests a background thread fits the `budget` buckets that
/// minimise padding over the requests since the last fit ([`BucketPolicy::adaptive`], per axis),
/// compiles the buckets it lacks through the cache, and swaps the bucket table atomically. The
/// largest configured bucket always stays (the arena is sized for it), so every request the
/// session served before is still served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveBuckets {
    pub(crate) every: u64,
    pub(crate) budget: usize,
    pub(crate) max_programs: usize,
}

impl LiveBuckets {
    /// A refit every `every` requests, choosing `budget` buckets per axis.
    pub fn new(every: u64, budget: usize) -> LiveBuckets {
        LiveBuckets { every, budget, max_programs: 256 }
    }

    /// The most programs the session keeps loaded (initial and refitted; programs of retired
    /// buckets stay loaded, their graphs do not). A refit that would need more is skipped and
    /// counted as failed. Default 256.
    pub fn with_max_programs(mut self, n: usize) -> LiveBuckets {
        self.max_programs = n;
        self
    }

    /// Requests between refits.
    pub fn every(&self) -> u64 {
        self.every
    }

    /// Buckets per axis.
    pub fn budget(&self) -> usize {
        self.budget
    }
}

/// When graphs are captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureWhen {
    /// On a bucket's first request in a run context.
    Lazy,
    /// At session creation, for every bucket, in the prewarmed run contexts (pinned-copy mode).
    Eager,
}

/// Graph capture and replay settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct GraphConfig {
    /// Capture and replay graphs at all (off: every run launches eagerly).
    pub enabled: bool,
    /// Lazy or eager capture.
    pub capture: CaptureWhen,
    /// Direct-bind pointer drift: after more than this many CONSECUTIVE runs whose pointers differ
    /// from the baked ones, the entry falls back to eager launches. A match resets the count.
    pub max_consecutive_drift: u32,
    /// On drift, try an in-place graph update before re-capturing.
    pub try_update: bool,
    /// Graph memory (measured per graph) allowed for the whole session, across its run contexts;
    /// least recently used graphs of any context are evicted when a capture would exceed it, and a
    /// graph that still does not fit is launched once and not kept. `None`: unbounded.
    pub memory_budget_bytes: Option<u64>,
}

impl Default for GraphConfig {
    fn default() -> GraphConfig {
        GraphConfig {
            enabled: true,
            capture: CaptureWhen::Lazy,
            max_consecutive_drift: 3,
            try_update: true,
            memory_budget_bytes: None,
        }
    }
}

impl GraphConfig {
    /// Turns graph capture and replay on or off (off: every run launches eagerly).
    pub fn with_enabled(mut self, enabled: bool) -> GraphConfig {
        self.enabled = enabled;
        self
    }

    /// Lazy or eager capture.
    pub fn with_capture(mut self, capture: CaptureWhen) -> GraphConfig {
        self.capture = capture;
        self
    }

    /// The number of CONSECUTIVE drifting direct-bind runs after which an entry launches eagerly.
    pub fn with_max_consecutive_drift(mut self, runs: u32) -> GraphConfig {
        self.max_consecutive_drift = runs;
        self
    }

    /// Whether drift tries an in-place graph update before re-capturing.
    pub fn with_try_update(mut self, try_update: bool) -> GraphConfig {
        self.try_update = try_update;
        self
    }

    /// The graph memory a session may hold (`None`: unbounded).
    pub fn with_memory_budget_bytes(mut self, bytes: Option<u64>) -> GraphConfig {
        self.memory_budget_bytes = bytes;
        self
    }
}

/// The device memory the host backend models per graph node. GPU backends measure each graph's
/// memory instead (see [`saggar_device::GraphExec::memory_bytes`]); on the host backend a budget of
/// `n * GRAPH_NODE_BYTES` holds `n` nodes' worth of graphs.
pub const GRAPH_NODE_BYTES: u64 = saggar_device::host::HOST_GRAPH_NODE_BYTES;

/// How a session behaves. Build with [`SessionConfig::builder`].
#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub(crate) buckets: BucketSpec,
    pub(crate) splitting: Splitting,
    pub(crate) graphs: GraphConfig,
    pub(crate) max_concurrency: usize,
    pub(crate) prewarm_contexts: usize,
    pub(crate) cache: Option<Arc<CompileCache>>,
    pub(crate) load_threads: usize,
    pub(crate) compile_threads: usize,
    pub(crate) max_shape_programs: usize,
    pub(crate) arena_alignment: usize,
    pub(crate) request_limits: RequestLimits,
    pub(crate) gather: saggar_arena::GatherOptions,
    pub(crate) kernel_copies_up_to: usize,
    pub(crate) padded_axis: Option<PaddedAxis>,
    pub(crate) live: Option<LiveBuckets>,
}

impl SessionConfig {
    /// A builder with the defaults: powers of two up to 64, splitting on, graphs on (lazy capture,
    /// drift limit 3, update before re-capture), up to 8 concurrent runs, no disk cache, 64
    /// per-shape programs, compile threads as many as cores, and the default [`RequestLimits`].
    pub fn builder() -> SessionConfigBuilder {
        SessionConfigBuilder {
            config: SessionConfig {
                buckets: BucketSpec::PowersOfTwo { max: 64 },
                splitting: Splitting::Allowed,
                graphs: GraphConfig::default(),
                max_concurrency: 8,
                prewarm_contexts: 1,
                cache: None,
                load_threads: std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
                compile_threads: std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
                max_shape_programs: 64,
                arena_alignment: saggar_arena::DEFAULT_ALIGNMENT,
                request_limits: RequestLimits::default(),
                gather: saggar_arena::GatherOptions::auto(),
                kernel_copies_up_to: saggar_arena::DEFAULT_KERNEL_COPIES_UP_TO,
                padded_axis: None,
                live: None,
            },
        }
    }

    /// The graph settings.
    pub fn graphs(&self) -> &GraphConfig {
        &self.graphs
    }

    /// The most one request may ask for.
    pub fn request_limits(&self) -> RequestLimits {
        self.request_limits
    }
}

/// Builds a [`SessionConfig`].
#[derive(Debug, Clone)]
pub struct SessionConfigBuilder {
    config: SessionConfig,
}

impl SessionConfigBuilder {
    /// Which buckets to precompile.
    pub fn buckets(mut self, buckets: BucketSpec) -> Self {
        self.config.buckets = buckets;
        self
    }

    /// Whether batches above the largest bucket are split (on) or refused (off).
    pub fn splitting(mut self, splitting: Splitting) -> Self {
        self.config.splitting = splitting;
        self
    }

    /// Graph settings.
    pub fn graphs(mut self, graphs: GraphConfig) -> Self {
        self.config.graphs = graphs;
        self
    }

    /// The most requests that run at once on one session (each gets its own run context: stream,
    /// arena, scratch and graphs). Further requests wait.
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.config.max_concurrency = n;
        self
    }

    /// Run contexts created at session creation (eager capture captures in these).
    pub fn prewarm_contexts(mut self, n: usize) -> Self {
        self.config.prewarm_contexts = n;
        self
    }

    /// A compile cache shared with other sessions and processes. Without one, every session
    /// compiles its buckets itself.
    pub fn cache(mut self, cache: Arc<CompileCache>) -> Self {
        self.config.cache = Some(cache);
        self
    }

    /// Threads that load programs in parallel at creation (disk-cached artifacts, and every bucket's
    /// load of a model's one artifact). Default: the number of cores.
    pub fn load_threads(mut self, n: usize) -> Self {
        self.config.load_threads = n;
        self
    }

    /// Threads that compile cache misses in parallel at creation, for a compiler that declares
    /// itself thread-safe ([`crate::CompilerCapabilities::thread_safe`]); others compile one at a
    /// time. Default: the number of cores.
    pub fn compile_threads(mut self, n: usize) -> Self {
        self.config.compile_threads = n;
        self
    }

    /// The most per-shape programs (of models with symbolic dimensions besides the batch) a session
    /// keeps; the least recently used one nobody is running is evicted to make room, and a request
    /// that finds every kept program in use runs on a program that is not kept. Default 64.
    pub fn max_shape_programs(mut self, n: usize) -> Self {
        self.config.max_shape_programs = n;
        self
    }

    /// Alignment of arena slots.
    pub fn arena_alignment(mut self, alignment: usize) -> Self {
        self.config.arena_alignment = alignment;
        self
    }

    /// How the host inputs of [`crate::Session::run`] and [`crate::Session::run_into`] are gathered
    /// into pinned staging: helper threads, when a layout is split among them, how long idle helpers
    /// spin before they park (what they cost in CPU, counted in [`crate::Session::gather_stats`]),
    /// and the stores. Default: [`saggar_arena::GatherOptions::auto`]; `GatherOptions::INLINE`
    /// gathers on the calling thread alone.
    pub fn gather(mut self, options: saggar_arena::GatherOptions) -> Self {
        self.config.gather = options;
        self
    }

    /// The single copies of a run (staging to the device, the outputs back) of at most `bytes` are
    /// made by a kernel that reaches the pinned buffers where the device maps them, larger ones by
    /// the copy engine; 0: always the copy engine. Default:
    /// [`crate::DEFAULT_KERNEL_COPIES_UP_TO`] (see [`saggar_arena::ArenaOptions::kernel_copies_up_to`]).
    pub fn kernel_copies_up_to(mut self, bytes: usize) -> Self {
        self.config.kernel_copies_up_to = bytes;
        self
    }

    /// The most one request may ask for (rows and bytes); larger requests fail with
    /// [`DispatchError::LimitExceeded`] before anything is allocated for them.
    pub fn request_limits(mut self, limits: RequestLimits) -> Self {
        self.config.request_limits = limits;
        self
    }

    /// A symbolic dimension besides the batch that requests are padded along (a sequence); see
    /// [`PaddedAxis`].
    pub fn padded_axis(mut self, axis: PaddedAxis) -> Self {
        self.config.padded_axis = Some(axis);
        self
    }

    /// Re-fits the buckets from live traffic in the background; see [`LiveBuckets`].
    pub fn live_buckets(mut self, live: LiveBuckets) -> Self {
        self.config.live = Some(live);
        self
    }

    /// The configuration, checked.
    pub fn build(self) -> Result<SessionConfig> {
        let c = &self.config;
        if c.max_concurrency == 0 {
            return Err(DispatchError::Config("max_concurrency must be at least 1".into()));
        }
        if c.prewarm_contexts > c.max_concurrency {
            return Err(DispatchError::Config(format!(
                "prewarm_contexts ({}) exceeds max_concurrency ({})",
                c.prewarm_contexts, c.max_concurrency
            )));
        }
        if c.load_threads == 0 || c.compile_threads == 0 {
            return Err(DispatchError::Config("load_threads and compile_threads must be at least 1".into()));
        }
        if c.max_shape_programs == 0 {
            return Err(DispatchError::Config("max_shape_programs must be at least 1".into()));
        }
        if c.request_limits.max_rows == 0 || c.request_limits.max_bytes == 0 {
            return Err(DispatchError::Config("request limits must allow at least one row and one byte".into()));
        }
        let batch = c.buckets.policy()?;
        let axis = c.padded_axis.as_ref().map(|a| a.buckets.policy()).transpose()?;
        if let Some(live) = &c.live {
            if live.every == 0 || live.budget == 0 {
                return Err(DispatchError::Config(
                    "live buckets need a refit interval and a budget of at least 1".into(),
                ));
            }
            let largest = batch.largest().max(axis.as_ref().map_or(1, BucketPolicy::largest));
            if largest > LOOKUP_TABLE_LIMIT {
                return Err(DispatchError::Config(format!(
                    "live buckets record a histogram per size: the largest bucket {largest} exceeds {LOOKUP_TABLE_LIMIT}"
                )));
            }
        }
        Ok(self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pad_values_encode_exactly_or_not_at_all() {
        let bytes = |v: PadValue, t: DType| v.encode(t).map(|b| b[..t.size_bytes()].to_vec());
        assert_eq!(bytes(PadValue::Int(0), DType::I64), Some(vec![0; 8]));
        assert_eq!(bytes(PadValue::Int(-1), DType::I32), Some(vec![0xFF; 4]));
        assert_eq!(bytes(PadValue::Float(2.0), DType::U8), Some(vec![2]));
        assert_eq!(bytes(PadValue::Float(0.5), DType::I64), None, "not an integer");
        assert_eq!(bytes(PadValue::Int(300), DType::U8), None, "out of range");
        assert_eq!(bytes(PadValue::Int(-1), DType::U32), None, "out of range");
        assert_eq!(bytes(PadValue::Int(1), DType::Bool), Some(vec![1]));
        assert_eq!(bytes(PadValue::Int(2), DType::Bool), None);
        assert_eq!(bytes(PadValue::Float(-0.5), DType::F32), Some((-0.5f32).to_le_bytes().to_vec()));
        assert_eq!(bytes(PadValue::Float(0.1), DType::F32), None, "0.1 is not an f32");
        assert_eq!(bytes(PadValue::Float(1.0), DType::BF16), Some(vec![0x80, 0x3F]));
        assert_eq!(bytes(PadValue::Int(0), DType::F16), Some(vec![0, 0]));
        assert_eq!(bytes(PadValue::Int(1), DType::F16), None, "non-zero half floats are not converted");
    }

    #[test]
    fn live_buckets_are_checked() {
        let build = |live: LiveBuckets, max: u64| {
            SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max }).live_buckets(live).build()
        };
        assert!(build(LiveBuckets::new(0, 4), 64).is_err());
        assert!(build(LiveBuckets::new(10, 0), 64).is_err());
        assert!(build(LiveBuckets::new(10, 4), LOOKUP_TABLE_LIMIT + 1).is_err(), "a histogram per size");
        assert!(build(LiveBuckets::new(10, 4), 64).is_ok());
    }
}
