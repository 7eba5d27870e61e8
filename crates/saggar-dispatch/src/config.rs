//! Session configuration: one struct, built once.

use std::sync::Arc;

use saggar_cache::CompileCache;
use saggar_shape::{BatchHistogram, BucketPolicy, Splitting};

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
                load_threads: 4,
                compile_threads: std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
                max_shape_programs: 64,
                arena_alignment: saggar_arena::DEFAULT_ALIGNMENT,
                request_limits: RequestLimits::default(),
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

    /// Threads that load disk-cached artifacts in parallel at creation.
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

    /// The most one request may ask for (rows and bytes); larger requests fail with
    /// [`DispatchError::LimitExceeded`] before anything is allocated for them.
    pub fn request_limits(mut self, limits: RequestLimits) -> Self {
        self.config.request_limits = limits;
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
        c.buckets.policy()?;
        Ok(self.config)
    }
}
