//! Counters for every path, graph event, compile and load, padding waste, and a latency histogram.
//! Plain relaxed atomics on the hot path; read as one [`StatsSnapshot`].

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::error::{DispatchError, FailureKind};
use crate::tensors::RunPath;

/// Latency buckets: bucket `i` holds runs that took `[2^i, 2^(i+1))` nanoseconds.
const LATENCY_BUCKETS: usize = 40;

/// Kinds of failure counted apart (see [`FailureCounts`]).
const FAILURE_KINDS: usize = 5;

#[derive(Debug)]
pub(crate) struct Stats {
    pub(crate) requests: AtomicU64,
    pub(crate) failed: AtomicU64,
    /// Failures by [`FailureKind`], in the order of [`FailureCounts`]' fields.
    failed_by_kind: [AtomicU64; FAILURE_KINDS],
    pub(crate) ultra_fast: AtomicU64,
    pub(crate) fast: AtomicU64,
    pub(crate) standard: AtomicU64,
    pub(crate) captures: AtomicU64,
    pub(crate) replays: AtomicU64,
    pub(crate) updates: AtomicU64,
    pub(crate) recaptures: AtomicU64,
    pub(crate) eager_fallbacks: AtomicU64,
    pub(crate) eager_runs: AtomicU64,
    pub(crate) evicted_graphs: AtomicU64,
    pub(crate) compiles: AtomicU64,
    pub(crate) disk_loads: AtomicU64,
    pub(crate) memory_hits: AtomicU64,
    pub(crate) waited_for_compile: AtomicU64,
    pub(crate) program_loads: AtomicU64,
    pub(crate) useful_rows: AtomicU64,
    pub(crate) padded_rows: AtomicU64,
    pub(crate) split_requests: AtomicU64,
    pub(crate) refit_windows: AtomicU64,
    pub(crate) refits: AtomicU64,
    pub(crate) refit_failures: AtomicU64,
    pub(crate) retired_graphs: AtomicU64,
    pub(crate) graph_bytes: AtomicU64,
    pub(crate) graph_bytes_peak: AtomicU64,
    pub(crate) graphs_over_budget: AtomicU64,
    pub(crate) shape_programs: AtomicU64,
    pub(crate) shape_program_evictions: AtomicU64,
    pub(crate) shape_overflow_runs: AtomicU64,
    pub(crate) value_input_reads: AtomicU64,
    pub(crate) segment_reads: AtomicU64,
    pub(crate) parallel_compiles: AtomicU64,
    latency_ns: [AtomicU64; LATENCY_BUCKETS],
    latency_max_ns: AtomicU64,
}

impl Default for Stats {
    fn default() -> Stats {
        Stats {
            requests: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            failed_by_kind: std::array::from_fn(|_| AtomicU64::new(0)),
            ultra_fast: AtomicU64::new(0),
            fast: AtomicU64::new(0),
            standard: AtomicU64::new(0),
            captures: AtomicU64::new(0),
            replays: AtomicU64::new(0),
            updates: AtomicU64::new(0),
            recaptures: AtomicU64::new(0),
            eager_fallbacks: AtomicU64::new(0),
            eager_runs: AtomicU64::new(0),
            evicted_graphs: AtomicU64::new(0),
            compiles: AtomicU64::new(0),
            disk_loads: AtomicU64::new(0),
            memory_hits: AtomicU64::new(0),
            waited_for_compile: AtomicU64::new(0),
            program_loads: AtomicU64::new(0),
            useful_rows: AtomicU64::new(0),
            padded_rows: AtomicU64::new(0),
            split_requests: AtomicU64::new(0),
            refit_windows: AtomicU64::new(0),
            refits: AtomicU64::new(0),
            refit_failures: AtomicU64::new(0),
            retired_graphs: AtomicU64::new(0),
            graph_bytes: AtomicU64::new(0),
            graph_bytes_peak: AtomicU64::new(0),
            graphs_over_budget: AtomicU64::new(0),
            shape_programs: AtomicU64::new(0),
            shape_program_evictions: AtomicU64::new(0),
            shape_overflow_runs: AtomicU64::new(0),
            value_input_reads: AtomicU64::new(0),
            segment_reads: AtomicU64::new(0),
            parallel_compiles: AtomicU64::new(0),
            latency_ns: std::array::from_fn(|_| AtomicU64::new(0)),
            latency_max_ns: AtomicU64::new(0),
        }
    }
}

impl Stats {
    #[inline]
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    #[inline]
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// Counts a request that succeeded, on the path that served it.
    #[inline]
    pub(crate) fn record_path(&self, path: RunPath) {
        Stats::bump(match path {
            RunPath::UltraFast => &self.ultra_fast,
            RunPath::Fast => &self.fast,
            RunPath::Standard => &self.standard,
        });
    }

    /// Counts a request that failed, by the kind of its error.
    #[cold]
    pub(crate) fn record_failure(&self, error: &DispatchError) {
        let kind = match error.failure_kind() {
            FailureKind::Request => 0,
            FailureKind::Limit => 1,
            FailureKind::Device => 2,
            FailureKind::Compile => 3,
            _ => 4,
        };
        Stats::bump(&self.failed);
        Stats::bump(&self.failed_by_kind[kind]);
    }

    pub(crate) fn record_latency(&self, elapsed: Duration) {
        let ns = elapsed.as_nanos().min(u64::MAX as u128) as u64;
        let bucket = (63 - ns.max(1).leading_zeros() as usize).min(LATENCY_BUCKETS - 1);
        self.latency_ns[bucket].fetch_add(1, Relaxed);
        self.latency_max_ns.fetch_max(ns, Relaxed);
    }

    pub(crate) fn snapshot(&self) -> StatsSnapshot {
        let load = |c: &AtomicU64| c.load(Relaxed);
        StatsSnapshot {
            requests: load(&self.requests),
            failed: load(&self.failed),
            failures: FailureCounts {
                request: load(&self.failed_by_kind[0]),
                limit: load(&self.failed_by_kind[1]),
                device: load(&self.failed_by_kind[2]),
                compile: load(&self.failed_by_kind[3]),
                other: load(&self.failed_by_kind[4]),
            },
            ultra_fast: load(&self.ultra_fast),
            fast: load(&self.fast),
            standard: load(&self.standard),
            captures: load(&self.captures),
            replays: load(&self.replays),
            updates: load(&self.updates),
            recaptures: load(&self.recaptures),
            eager_fallbacks: load(&self.eager_fallbacks),
            eager_runs: load(&self.eager_runs),
            evicted_graphs: load(&self.evicted_graphs),
            compiles: load(&self.compiles),
            disk_loads: load(&self.disk_loads),
            memory_hits: load(&self.memory_hits),
            waited_for_compile: load(&self.waited_for_compile),
            program_loads: load(&self.program_loads),
            useful_rows: load(&self.useful_rows),
            padded_rows: load(&self.padded_rows),
            split_requests: load(&self.split_requests),
            refit_windows: load(&self.refit_windows),
            refits: load(&self.refits),
            refit_failures: load(&self.refit_failures),
            retired_graphs: load(&self.retired_graphs),
            graph_bytes: load(&self.graph_bytes),
            graph_bytes_peak: load(&self.graph_bytes_peak),
            graphs_over_budget: load(&self.graphs_over_budget),
            shape_programs: load(&self.shape_programs),
            shape_program_evictions: load(&self.shape_program_evictions),
            shape_overflow_runs: load(&self.shape_overflow_runs),
            value_input_reads: load(&self.value_input_reads),
            segment_reads: load(&self.segment_reads),
            parallel_compiles: load(&self.parallel_compiles),
            latency: LatencyHistogram {
                buckets: std::array::from_fn(|i| load(&self.latency_ns[i])),
                max_ns: load(&self.latency_max_ns),
            },
        }
    }
}

/// A log2 histogram of run latencies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LatencyHistogram {
    /// `buckets[i]`: runs that took `[2^i, 2^(i+1))` ns.
    pub buckets: [u64; LATENCY_BUCKETS],
    /// The slowest run, in ns.
    pub max_ns: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram { buckets: [0; LATENCY_BUCKETS], max_ns: 0 }
    }
}

impl LatencyHistogram {
    /// An upper bound of the `q` quantile (0..=1) in ns: the top of the bucket it falls in.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        let total: u64 = self.buckets.iter().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return (1u64 << (i + 1)).min(self.max_ns.max(1));
            }
        }
        self.max_ns
    }

    /// Adds `other`'s runs to these.
    pub fn add(&mut self, other: &LatencyHistogram) {
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            *mine += theirs;
        }
        self.max_ns = self.max_ns.max(other.max_ns);
    }
}

/// A session's counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// Requests received. Once every request has returned (and every [`crate::Pending`] run was
    /// waited for or dropped), `ultra_fast + fast + standard + failed == requests`.
    pub requests: u64,
    /// Requests that returned an error (including enqueued runs whose wait failed).
    pub failed: u64,
    /// [`StatsSnapshot::failed`] by kind of error.
    pub failures: FailureCounts,
    /// Requests served by the ultra-fast path (counted only once they succeeded).
    pub ultra_fast: u64,
    /// Requests served by the fast path (counted only once they succeeded).
    pub fast: u64,
    /// Requests served by the standard path (counted only once they succeeded).
    pub standard: u64,
    /// Graphs captured and instantiated.
    pub captures: u64,
    /// Graph replays.
    pub replays: u64,
    /// In-place graph updates after pointer drift.
    pub updates: u64,
    /// Re-captures (update refused or disabled, or a mode change).
    pub recaptures: u64,
    /// Graph entries that fell back to eager launches after too much consecutive drift.
    pub eager_fallbacks: u64,
    /// Runs launched eagerly (graphs off, fallen back, or per-shape programs).
    pub eager_runs: u64,
    /// Graphs evicted by the graph-memory budget.
    pub evicted_graphs: u64,
    /// Programs compiled by this session.
    pub compiles: u64,
    /// Artifacts loaded from the disk cache.
    pub disk_loads: u64,
    /// Artifacts found in the cache's memory tier.
    pub memory_hits: u64,
    /// Lookups that waited for another thread or process to compile.
    pub waited_for_compile: u64,
    /// Artifacts loaded into programs on the device.
    pub program_loads: u64,
    /// Real rows computed.
    pub useful_rows: u64,
    /// Padding rows computed.
    pub padded_rows: u64,
    /// Requests split into several chunks (counted only once they succeeded).
    pub split_requests: u64,
    /// Intervals of requests live re-bucketing fitted buckets to (swapped or not).
    pub refit_windows: u64,
    /// Bucket tables swapped in by live re-bucketing.
    pub refits: u64,
    /// Live refits that failed (a compile error, a program that does not fit the arena, or the
    /// program table full); the session keeps its table.
    pub refit_failures: u64,
    /// Graphs dropped because their bucket left the table (their memory leaves `graph_bytes`).
    pub retired_graphs: u64,
    /// Device memory the session's executable graphs hold now, as measured when each was instantiated (see `GraphExec::memory_bytes`).
    pub graph_bytes: u64,
    /// The most graph memory the session held at once.
    pub graph_bytes_peak: u64,
    /// Captured graphs that did not fit the graph-memory budget even after trimming: launched once, not kept.
    pub graphs_over_budget: u64,
    /// Per-shape programs alive in the session's program table now.
    pub shape_programs: u64,
    /// Per-shape programs evicted from the table (least recently used first) to stay within its limit.
    pub shape_program_evictions: u64,
    /// Per-shape requests run on a program that could not be kept, because every program in the full table was in use.
    pub shape_overflow_runs: u64,
    /// Device requests whose value inputs ([`crate::ModelSpec::value_inputs`]) were copied to the host
    /// to find their program: one synchronisation each.
    pub value_input_reads: u64,
    /// Segment boundaries crossed by requests of a segmented model ([`crate::Segments`]): each reads
    /// the earlier segments' outputs back, the values fixing the next segment's shapes among them
    /// (one synchronisation each).
    pub segment_reads: u64,
    /// Programs compiled on more than one thread at once (thread-safe compilers), at session creation
    /// or for the cells live re-bucketing adds.
    pub parallel_compiles: u64,
    /// Run latencies.
    pub latency: LatencyHistogram,
}

/// Failed requests by [`FailureKind`]; the fields add up to [`StatsSnapshot::failed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FailureCounts {
    /// The request did not fit the model ([`FailureKind::Request`]).
    pub request: u64,
    /// The request was above the session's limits ([`FailureKind::Limit`]).
    pub limit: u64,
    /// A device operation failed ([`FailureKind::Device`]).
    pub device: u64,
    /// A compile, a load or the cache failed ([`FailureKind::Compile`]).
    pub compile: u64,
    /// Anything else ([`FailureKind::Other`]).
    pub other: u64,
}

impl FailureCounts {
    /// Adds `other`'s failures to these.
    pub fn add(&mut self, other: &FailureCounts) {
        self.request += other.request;
        self.limit += other.limit;
        self.device += other.device;
        self.compile += other.compile;
        self.other += other.other;
    }

    /// All failures.
    pub fn total(&self) -> u64 {
        self.request + self.limit + self.device + self.compile + self.other
    }
}

impl StatsSnapshot {
    /// Adds `other`'s counters to these (several sessions as one, e.g. a
    /// [`crate::SessionGroup`]'s): every count is summed, and so are the graph memory figures, so
    /// `graph_bytes_peak` becomes the sum of each session's peak (an upper bound of the peak together).
    pub fn add(&mut self, other: &StatsSnapshot) {
        let StatsSnapshot {
            requests,
            failed,
            failures,
            ultra_fast,
            fast,
            standard,
            captures,
            replays,
            updates,
            recaptures,
            eager_fallbacks,
            eager_runs,
            evicted_graphs,
            compiles,
            disk_loads,
            memory_hits,
            waited_for_compile,
            program_loads,
            useful_rows,
            padded_rows,
            split_requests,
            refit_windows,
            refits,
            refit_failures,
            retired_graphs,
            graph_bytes,
            graph_bytes_peak,
            graphs_over_budget,
            shape_programs,
            shape_program_evictions,
            shape_overflow_runs,
            value_input_reads,
            segment_reads,
            parallel_compiles,
            latency,
        } = other;
        for (mine, theirs) in [
            (&mut self.requests, requests),
            (&mut self.failed, failed),
            (&mut self.ultra_fast, ultra_fast),
            (&mut self.fast, fast),
            (&mut self.standard, standard),
            (&mut self.captures, captures),
            (&mut self.replays, replays),
            (&mut self.updates, updates),
            (&mut self.recaptures, recaptures),
            (&mut self.eager_fallbacks, eager_fallbacks),
            (&mut self.eager_runs, eager_runs),
            (&mut self.evicted_graphs, evicted_graphs),
            (&mut self.compiles, compiles),
            (&mut self.disk_loads, disk_loads),
            (&mut self.memory_hits, memory_hits),
            (&mut self.waited_for_compile, waited_for_compile),
            (&mut self.program_loads, program_loads),
            (&mut self.useful_rows, useful_rows),
            (&mut self.padded_rows, padded_rows),
            (&mut self.split_requests, split_requests),
            (&mut self.refit_windows, refit_windows),
            (&mut self.refits, refits),
            (&mut self.refit_failures, refit_failures),
            (&mut self.retired_graphs, retired_graphs),
            (&mut self.graph_bytes, graph_bytes),
            (&mut self.graph_bytes_peak, graph_bytes_peak),
            (&mut self.graphs_over_budget, graphs_over_budget),
            (&mut self.shape_programs, shape_programs),
            (&mut self.shape_program_evictions, shape_program_evictions),
            (&mut self.shape_overflow_runs, shape_overflow_runs),
            (&mut self.value_input_reads, value_input_reads),
            (&mut self.segment_reads, segment_reads),
            (&mut self.parallel_compiles, parallel_compiles),
        ] {
            *mine += theirs;
        }
        self.failures.add(failures);
        self.latency.add(latency);
    }

    /// Several sessions' counters added up ([`StatsSnapshot::add`]); `None` for none.
    pub fn total(snapshots: &[StatsSnapshot]) -> Option<StatsSnapshot> {
        let (first, rest) = snapshots.split_first()?;
        Some(rest.iter().fold(*first, |mut total, s| {
            total.add(s);
            total
        }))
    }

    /// Padded rows over all rows computed.
    pub fn padding_waste_ratio(&self) -> f64 {
        let total = self.useful_rows + self.padded_rows;
        if total == 0 { 0.0 } else { self.padded_rows as f64 / total as f64 }
    }
}
