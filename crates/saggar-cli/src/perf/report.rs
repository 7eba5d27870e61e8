//! The `saggar perf` report: its types, whose JSON field names are a contract (docs/cli.md), the
//! table for people, and the report assembled from what a run measured and the session's counters.

use saggar_cache::CompileCache;
use saggar_dispatch::StatsSnapshot;
use serde::Serialize;

use super::bench::{Measured, Record};
use super::stages::{BucketCopies, ProgramReady, Stages, Startup, first_runs};
use crate::cli::{PerfArgs, Toggle};
use crate::output::Table;
use crate::source::check::Check;
use crate::source::profile::ProfileReport;
use crate::source::{ModelInfo, Verify};

/// Latency statistics of `saggar perf`, in microseconds.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p99_9: f64,
    /// Slowest request.
    pub max: f64,
    /// Fastest request.
    pub min: f64,
    /// Mean.
    pub mean: f64,
    /// Standard deviation (population).
    pub stddev: f64,
}

impl Latency {
    /// Nearest-rank percentiles of per-request latencies in nanoseconds (sorted in place).
    pub fn from_nanos(latencies: &mut [u64]) -> Latency {
        latencies.sort_unstable();
        let n = latencies.len();
        if n == 0 {
            return Latency {
                p50: 0.0,
                p90: 0.0,
                p95: 0.0,
                p99: 0.0,
                p99_9: 0.0,
                max: 0.0,
                min: 0.0,
                mean: 0.0,
                stddev: 0.0,
            };
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        let rank = |q: f64| latencies[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        let sum: u128 = latencies.iter().map(|&l| u128::from(l)).sum();
        let mean_ns = sum as f64 / n as f64;
        let variance = latencies.iter().map(|&l| (l as f64 - mean_ns).powi(2)).sum::<f64>() / n as f64;
        Latency {
            p50: us(rank(0.50)),
            p90: us(rank(0.90)),
            p95: us(rank(0.95)),
            p99: us(rank(0.99)),
            p99_9: us(rank(0.999)),
            max: us(latencies[n - 1]),
            min: us(latencies[0]),
            mean: mean_ns / 1000.0,
            stddev: variance.sqrt() / 1000.0,
        }
    }
}

/// Requests per run path.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Paths {
    /// Same shape, binding mode and batch as the context's last run.
    pub ultra_fast: u64,
    /// A ready program for the bucket.
    pub fast: u64,
    /// Full validation (and possibly a split or a compile).
    pub standard: u64,
}

/// Requests that failed, by kind of error (see `saggar_dispatch::FailureKind`). With the
/// requests per path they add up to all requests.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Failures {
    /// All failed requests.
    pub failed: u64,
    /// Requests that did not fit the model (shapes, dtypes, names, buffers).
    pub request: u64,
    /// Requests above the session's request limits.
    pub limit: u64,
    /// Device failures.
    pub device: u64,
    /// Compile, load or cache failures.
    pub compile: u64,
    /// Anything else.
    pub other: u64,
}

/// Rows computed for requests and for padding.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Padding {
    /// Real rows.
    pub useful_rows: u64,
    /// Padding rows.
    pub padded_rows: u64,
    /// Padded rows over all rows computed.
    pub waste_ratio: f64,
    /// Bucket tables swapped in by `--live-buckets`.
    pub refits: u64,
    /// Live refits that failed (the buckets were kept).
    pub refit_failures: u64,
}

/// Where programs came from, and the cache's own health counters.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CacheCounters {
    /// Artifacts found in the cache's memory tier.
    pub memory_hits: u64,
    /// Artifacts loaded from disk.
    pub disk_loads: u64,
    /// Programs compiled.
    pub compiles: u64,
    /// Corrupt entries found, evicted and recompiled.
    pub corrupt_evicted: u64,
    /// Entries that could not be written (the artifact was still used).
    pub publish_failures: u64,
    /// Entries written whose directory fsync failed (they may not survive a power loss).
    pub dir_sync_failures: u64,
    /// The cache directory.
    pub dir: String,
}

/// Graph counters.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Graphs {
    /// Whether graphs were on.
    pub enabled: bool,
    /// Graphs captured.
    pub captures: u64,
    /// Graph replays.
    pub replays: u64,
    /// In-place updates after pointer drift.
    pub updates: u64,
    /// Re-captures.
    pub recaptures: u64,
    /// Entries that fell back to eager launches.
    pub eager_fallbacks: u64,
    /// Runs launched eagerly.
    pub eager_runs: u64,
    /// Graphs evicted by the graph-memory budget.
    pub evicted: u64,
    /// Device memory the session's graphs held at the end, as measured per graph.
    pub memory_bytes: u64,
    /// The most graph memory the session held at once.
    pub peak_memory_bytes: u64,
    /// Graphs that did not fit the budget: launched once, not kept.
    pub over_budget: u64,
    /// Per-shape programs kept at the end, evicted, and requests run on an unkept one.
    pub shape_programs: u64,
    /// See [`Graphs::shape_programs`].
    pub shape_program_evictions: u64,
    /// See [`Graphs::shape_programs`].
    pub shape_overflow_runs: u64,
}

/// The `saggar perf` report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PerfReport {
    /// Backend name.
    pub backend: String,
    /// Device name.
    pub device: String,
    /// Device ordinal (the first device's with `--devices`).
    pub device_ordinal: usize,
    /// Every device the requests ran on (one without `--devices`), with its share of the timed
    /// requests.
    pub devices: Vec<DeviceShare>,
    /// Device architecture.
    pub arch: String,
    /// Model name.
    pub model: String,
    /// Where the model config came from.
    pub model_source: String,
    /// Number of model inputs.
    pub model_inputs: usize,
    /// The precision the model's products computed in (`--precision`).
    pub precision: String,
    /// Requests run.
    pub requests: u64,
    /// Threads sharing the session.
    pub concurrency: u64,
    /// The trace spec.
    pub trace: String,
    /// The seed.
    pub seed: u64,
    /// Binding: `pinned` or `direct`.
    pub binding: String,
    /// `--kernel-copies-up-to`: the largest single copy made by a kernel (0: the copy engine only).
    pub kernel_copies_up_to: u64,
    /// The bucket policy as given.
    pub bucket_policy: String,
    /// The buckets precompiled.
    pub buckets: Vec<u64>,
    /// Session creation (precompile) time in seconds; the same as `startup.session_s` (the untimed
    /// warmup runs are `startup.warmup_s`).
    pub warmup_s: f64,
    /// `--duration` in seconds, when given.
    pub duration_s: Option<f64>,
    /// Startup: import, session creation per program, warmup runs and first runs per batch.
    pub startup: Startup,
    /// Per-stage times of the sampled requests.
    pub stages: Stages,
    /// Time from the first request to the last response, in seconds.
    pub wall_s: f64,
    /// Requests per second of wall time.
    pub throughput_rps: f64,
    /// Rows (real batch rows) per second of wall time.
    pub rows_per_s: f64,
    /// Per-request latency, measured around each session call.
    pub latency_us: Latency,
    /// Requests per run path.
    pub paths: Paths,
    /// Requests split over several buckets.
    pub split_requests: u64,
    /// Requests that failed, by kind.
    pub failures: Failures,
    /// Padding.
    pub padding: Padding,
    /// Compiles and loads.
    pub cache: CacheCounters,
    /// Graph counters.
    pub graphs: Graphs,
    /// The check against the reference.
    pub verify: Verify,
    /// `--check-outputs` (ONNX models): the outputs compared with the expected ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<Check>,
    /// `--dump-profile` (ONNX models): each step's device time in one program.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<ProfileReport>,
    /// ONNX models: the FLOP rate of the trace's most frequent batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute: Option<Compute>,
}

/// The FLOP rate of one batch: the model's product FLOPs over the median latency of its requests
/// (host in, host out: copies included).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Compute {
    /// The batch.
    pub batch: u64,
    /// FLOPs of one request of that batch (`2 m n k` per matrix product).
    pub flops: u64,
    /// The median latency of that batch's timed requests, microseconds.
    pub p50_us: f64,
    /// `flops / p50`, in TFLOP/s.
    pub tflops: f64,
}

impl Compute {
    /// The rate of the most frequent batch among `records` (`distinct`: the trace's batches, whose
    /// index is the set `flops` takes), if the source counts FLOPs.
    pub fn of(records: &[Record], distinct: &[u64], flops: impl Fn(usize) -> Option<u64>) -> Option<Compute> {
        let count = |b: u64| records.iter().filter(|r| r.batch == b).count();
        let (set, &batch) = distinct.iter().enumerate().max_by_key(|(_, b)| count(**b))?;
        let flops = flops(set)?;
        let mut latencies: Vec<u64> = records.iter().filter(|r| r.batch == batch).map(|r| r.latency_ns).collect();
        latencies.sort_unstable();
        let p50_ns = *latencies.get(latencies.len() / 2)?;
        let p50_us = p50_ns as f64 / 1e3;
        Some(Compute { batch, flops, p50_us, tflops: flops as f64 / (p50_ns.max(1) as f64 * 1e3) })
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { 100.0 * part as f64 / whole as f64 }
}

impl PerfReport {
    /// The report for people.
    pub fn table(&self) -> String {
        let mut t = Table::default();
        let mut row = |k: &str, v: String| t.row(vec![k.to_string(), v]);
        let buckets: Vec<String> = self.buckets.iter().map(u64::to_string).collect();
        row(
            "model",
            format!("{} ({} inputs, {}), {}", self.model, self.model_inputs, self.model_source, self.precision),
        );
        row("device", format!("{} {} \"{}\" ({})", self.backend, self.device_ordinal, self.device, self.arch));
        if self.devices.len() > 1 {
            let shares: Vec<String> = self.devices.iter().map(|d| format!("{}: {}", d.ordinal, d.requests)).collect();
            row("devices", format!("{} in a group, timed requests {}", self.devices.len(), shares.join(", ")));
        }
        row(
            "workload",
            format!(
                "trace {}, {} requests, concurrency {}, binding {}, graphs {}, copies {}",
                self.trace,
                self.requests,
                self.concurrency,
                self.binding,
                if self.graphs.enabled { "on" } else { "off" },
                if self.kernel_copies_up_to == 0 {
                    "by the copy engine".to_string()
                } else {
                    format!("by kernel up to {} B", self.kernel_copies_up_to)
                }
            ),
        );
        row("buckets", format!("{} ({})", buckets.join(","), self.bucket_policy));
        row("startup", self.startup.line());
        row("wall", format!("{:.3} s", self.wall_s));
        row("throughput", format!("{:.1} req/s ({:.0} rows/s)", self.throughput_rps, self.rows_per_s));
        let l = &self.latency_us;
        row(
            "latency",
            format!(
                "p50 {:.1}, p90 {:.1}, p95 {:.1}, p99 {:.1}, p99.9 {:.1}, min {:.1}, max {:.1}, mean {:.1}, stddev {:.1} us",
                l.p50, l.p90, l.p95, l.p99, l.p99_9, l.min, l.max, l.mean, l.stddev
            ),
        );
        row("stages", self.stages.line());
        let p = &self.paths;
        row(
            "paths",
            format!(
                "ultra_fast {} ({:.2}%), fast {}, standard {}, split {}",
                p.ultra_fast,
                percent(p.ultra_fast, self.requests),
                p.fast,
                p.standard,
                self.split_requests
            ),
        );
        let pad = &self.padding;
        row(
            "padding",
            format!(
                "{} useful rows, {} padded rows, waste {:.2}%{}",
                pad.useful_rows,
                pad.padded_rows,
                100.0 * pad.waste_ratio,
                if pad.refits + pad.refit_failures > 0 {
                    format!(", {} live refits ({} failed)", pad.refits, pad.refit_failures)
                } else {
                    String::new()
                }
            ),
        );
        let c = &self.cache;
        row(
            "cache",
            format!(
                "compiles {}, disk loads {}, memory hits {}, corrupt evicted {} ({})",
                c.compiles, c.disk_loads, c.memory_hits, c.corrupt_evicted, c.dir
            ),
        );
        let g = &self.graphs;
        row(
            "graphs",
            format!(
                "captures {}, replays {}, updates {}, recaptures {}, eager fallbacks {}, eager runs {}, memory {} B (peak {} B, evicted {}, over budget {})",
                g.captures,
                g.replays,
                g.updates,
                g.recaptures,
                g.eager_fallbacks,
                g.eager_runs,
                g.memory_bytes,
                g.peak_memory_bytes,
                g.evicted,
                g.over_budget
            ),
        );
        self.result_rows(&mut row);
        t.render()
    }

    /// The table's rows about the results: verify, compute, accuracy, check.
    fn result_rows(&self, row: &mut impl FnMut(&str, String)) {
        let v = &self.verify;
        row(
            "verify",
            format!(
                "{} requests checked, {} mismatches (tolerance rel {:e}, max rel error {:.2e})",
                v.checked, v.mismatches, v.tolerance, v.max_rel_error
            ),
        );
        if let Some(c) = &self.compute {
            let gflop = c.flops as f64 / 1e9;
            row(
                "compute",
                format!("batch {}: {gflop:.2} GFLOP of products a request, {:.1} TFLOP/s at p50", c.batch, c.tflops),
            );
        }
        for a in v.accuracy.iter().filter(|_| self.precision != "fp32") {
            row(
                "accuracy",
                format!(
                    "{}: max abs error {:.2e}, rel {:.2e} (vs strict f32)",
                    a.name, a.max_abs_error, a.max_rel_error
                ),
            );
        }
        if let Some(c) = &self.check {
            row(
                "check",
                format!(
                    "{} outputs against {}: {} (max abs error {:.2e}, max rel error {:.2e}, rtol {:e}, atol {:e})",
                    c.outputs.len(),
                    c.dir,
                    if c.passed { "passed" } else { "FAILED" },
                    c.max_abs_error,
                    c.max_rel_error,
                    c.rtol,
                    c.atol
                ),
            );
        }
    }
}

/// One device of the run and how many timed requests it served.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DeviceShare {
    /// Device ordinal.
    pub ordinal: usize,
    /// Device name.
    pub name: String,
    /// Timed requests it served (the failed ones included).
    pub requests: u64,
}

impl DeviceShare {
    /// `device`'s share: `requests`.
    pub fn new(device: &saggar_device::DeviceInfo, requests: u64) -> DeviceShare {
        DeviceShare { ordinal: device.ordinal, name: device.name.clone(), requests }
    }
}

/// The session's counters at three moments: after creation, after the warmup, after the timed runs.
#[derive(Debug, Clone, Copy)]
pub struct Snapshots {
    /// After creation.
    pub built: StatsSnapshot,
    /// After the warmup.
    pub warm: StatsSnapshot,
    /// After the timed runs.
    pub done: StatsSnapshot,
}

/// What one run did, as its report tells it.
pub struct RunFacts<'a, K> {
    /// The device the session ran on (the first of a group).
    pub device: &'a saggar_device::DeviceInfo,
    /// Every device, with its share of the timed requests.
    pub devices: Vec<DeviceShare>,
    /// The buckets the session serves at the end.
    pub buckets: Vec<u64>,
    /// Session creation time.
    pub session_s: f64,
    /// Each program as it became ready during session creation.
    pub programs: &'a [ProgramReady],
    /// The session's compile cache.
    pub cache: &'a CompileCache,
    /// What the model source says about the model.
    pub model: &'a ModelInfo,
    /// How the model source names the trace.
    pub trace: &'a str,
    /// `pinned`, `request` or `direct`.
    pub binding: &'static str,
    /// Why no stages were timed, for bindings that do not time them.
    pub stages_unavailable: Option<String>,
    /// The warmup and the timed requests.
    pub measured: &'a Measured<K>,
    /// The trace's distinct batches, ascending.
    pub distinct: &'a [u64],
    /// The session's counters around the warmup and the timed requests.
    pub snapshots: Snapshots,
    /// Each used bucket's copies timed on their own.
    pub copies: Vec<BucketCopies>,
    /// The check against the model's eager reference.
    pub verify: Verify,
}

impl PerfReport {
    /// The report of a run with the flags `args` (without `check` and `profile`).
    pub fn new<K>(args: &PerfArgs, run: RunFacts<'_, K>) -> PerfReport {
        let RunFacts { measured, snapshots, .. } = run;
        let Counters { paths, split_requests, failures, padding, cache, graphs } =
            Counters::timed(&snapshots.done, &snapshots.warm, run.cache, args.graphs == Toggle::On);
        let mut latencies: Vec<u64> = measured.records.iter().map(|r| r.latency_ns).collect();
        let requests = measured.records.len() as u64;
        let rows: u64 = measured.records.iter().map(|r| r.batch).sum();
        let wall_s = measured.wall.as_secs_f64();
        let startup = Startup {
            import_s: run.model.import_s,
            session_s: run.session_s,
            programs: run.programs.to_vec(),
            warmup_runs: measured.warmup_runs,
            warmup_s: measured.warmup_wall.as_secs_f64(),
            warmup_captures: snapshots.warm.captures.saturating_sub(snapshots.built.captures),
            first_runs: first_runs(measured, run.distinct),
            timed_captures: snapshots.done.captures.saturating_sub(snapshots.warm.captures),
        };
        PerfReport {
            backend: run.device.backend.name().to_string(),
            device: run.device.name.clone(),
            device_ordinal: run.device.ordinal,
            devices: run.devices,
            arch: run.device.arch.clone(),
            model: run.model.name.clone(),
            model_source: run.model.origin.clone(),
            model_inputs: run.model.inputs,
            precision: run.model.precision.to_string(),
            requests,
            concurrency: args.concurrency,
            trace: run.trace.to_string(),
            seed: args.trace.seed,
            binding: run.binding.to_string(),
            kernel_copies_up_to: args.kernel_copies_up_to,
            bucket_policy: args.buckets.buckets.to_string(),
            buckets: run.buckets,
            warmup_s: run.session_s,
            duration_s: args.duration,
            startup,
            stages: Stages::summarize(args.stage_every, &measured.records, run.copies, run.stages_unavailable),
            wall_s,
            throughput_rps: requests as f64 / wall_s.max(1e-9),
            rows_per_s: rows as f64 / wall_s.max(1e-9),
            latency_us: Latency::from_nanos(&mut latencies),
            paths,
            split_requests,
            failures,
            padding,
            cache,
            graphs,
            verify: run.verify,
            check: None,
            profile: None,
            compute: None,
        }
    }
}

/// The counters every perf report carries, read once after the run from the session and its cache.
struct Counters {
    paths: Paths,
    split_requests: u64,
    failures: Failures,
    padding: Padding,
    cache: CacheCounters,
    graphs: Graphs,
}

impl Counters {
    /// The counters of the work between `before` and `after` (the timed requests), with the cache's
    /// counters for the whole session.
    fn timed(after: &StatsSnapshot, before: &StatsSnapshot, cache: &CompileCache, graphs_enabled: bool) -> Counters {
        let cache_stats = cache.stats();
        let d = |f: fn(&StatsSnapshot) -> u64| f(after).saturating_sub(f(before));
        let (useful_rows, padded_rows) = (d(|s| s.useful_rows), d(|s| s.padded_rows));
        let total_rows = useful_rows + padded_rows;
        Counters {
            paths: Paths { ultra_fast: d(|s| s.ultra_fast), fast: d(|s| s.fast), standard: d(|s| s.standard) },
            split_requests: d(|s| s.split_requests),
            failures: Failures {
                failed: d(|s| s.failed),
                request: d(|s| s.failures.request),
                limit: d(|s| s.failures.limit),
                device: d(|s| s.failures.device),
                compile: d(|s| s.failures.compile),
                other: d(|s| s.failures.other),
            },
            padding: Padding {
                useful_rows,
                padded_rows,
                waste_ratio: if total_rows == 0 { 0.0 } else { padded_rows as f64 / total_rows as f64 },
                refits: d(|s| s.refits),
                refit_failures: d(|s| s.refit_failures),
            },
            cache: CacheCounters {
                memory_hits: after.memory_hits,
                disk_loads: after.disk_loads,
                compiles: after.compiles,
                corrupt_evicted: cache_stats.corrupt_evicted,
                publish_failures: cache_stats.publish_failures,
                dir_sync_failures: cache_stats.dir_sync_failures,
                dir: cache.dir().display().to_string(),
            },
            graphs: Graphs {
                enabled: graphs_enabled,
                captures: d(|s| s.captures),
                replays: d(|s| s.replays),
                updates: d(|s| s.updates),
                recaptures: d(|s| s.recaptures),
                eager_fallbacks: d(|s| s.eager_fallbacks),
                eager_runs: d(|s| s.eager_runs),
                evicted: d(|s| s.evicted_graphs),
                memory_bytes: after.graph_bytes,
                peak_memory_bytes: after.graph_bytes_peak,
                over_budget: d(|s| s.graphs_over_budget),
                shape_programs: after.shape_programs,
                shape_program_evictions: d(|s| s.shape_program_evictions),
                shape_overflow_runs: d(|s| s.shape_overflow_runs),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut ns: Vec<u64> = (1..=100).rev().map(|i| i * 1000).collect();
        let l = Latency::from_nanos(&mut ns);
        assert_eq!((l.p50, l.p90, l.p99, l.max, l.min), (50.0, 90.0, 99.0, 100.0, 1.0));
        assert!((l.mean - 50.5).abs() < 1e-9);
        assert_eq!((l.p95, l.p99_9), (95.0, 100.0));
        assert!((l.stddev - 28.866).abs() < 1e-3, "{}", l.stddev);
        let one = Latency::from_nanos(&mut [7000]);
        assert_eq!((one.p50, one.p99, one.max, one.stddev), (7.0, 7.0, 7.0, 0.0));
    }
}
