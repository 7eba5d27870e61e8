//! Output: aligned tables for people on stdout, JSON for scripts (`--json FILE`, `-` for stdout),
//! and the report types of `saggar perf` and `saggar warmup`, whose JSON field names are a contract
//! (docs/cli.md): fields may be added, never renamed.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::error::{CliError, Result};

/// Writes `text` to stdout. A closed pipe (`saggar cache ls | head`) is not an error.
pub fn print_stdout(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::failure(format!("cannot write to stdout: {e}"), "check where stdout is redirected")),
    }
}

/// Whether `--json` names stdout.
pub fn json_to_stdout(json: Option<&Path>) -> bool {
    json.is_some_and(|p| p.as_os_str() == "-")
}

/// Writes `value` as pretty JSON to `path` (`-`: stdout).
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::failure(format!("cannot encode the JSON report: {e}"), "this is a bug in saggar"))?;
    text.push('\n');
    if path.as_os_str() == "-" {
        return print_stdout(&text);
    }
    std::fs::write(path, text).map_err(|e| {
        CliError::failure(
            format!("cannot write the JSON report to {}: {e}", path.display()),
            "check that the folder exists and is writable",
        )
    })
}

/// Prints the table `table()` (unless `--json -` takes stdout) and writes the JSON if asked.
pub fn emit<T: Serialize>(json: Option<&Path>, value: &T, table: impl FnOnce() -> String) -> Result<()> {
    if !json_to_stdout(json) {
        print_stdout(&table())?;
    }
    match json {
        Some(path) => write_json(path, value),
        None => Ok(()),
    }
}

/// A table of left-aligned columns separated by two spaces.
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with a header row.
    pub fn with_header(header: &[&str]) -> Table {
        Table { rows: vec![header.iter().map(|h| h.to_string()).collect()] }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The rows, aligned, each ending in a newline; trailing spaces trimmed.
    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| self.rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                let _ = write!(line, "{cell:<width$}  ", width = widths[c]);
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `1536` -> `1.5 KiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

/// `90 s` -> `1m`, the largest whole unit.
pub fn format_age(age: Duration) -> String {
    let s = age.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

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

impl From<&saggar_dispatch::StatsSnapshot> for Failures {
    fn from(stats: &saggar_dispatch::StatsSnapshot) -> Failures {
        let f = &stats.failures;
        Failures {
            failed: stats.failed,
            request: f.request,
            limit: f.limit,
            device: f.device,
            compile: f.compile,
            other: f.other,
        }
    }
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

/// The check against the eager reference.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Verify {
    /// Requests checked.
    pub checked: u64,
    /// Requests with at least one value outside the tolerance.
    pub mismatches: u64,
    /// The relative tolerance: `|actual - expected| <= tolerance * max(1, |expected|)`.
    pub tolerance: f64,
    /// Output values compared.
    pub values_checked: u64,
    /// Output values outside the tolerance.
    pub value_mismatches: u64,
    /// The largest relative error seen (`null` if a value was NaN).
    pub max_rel_error: f64,
}

/// The `saggar perf` report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PerfReport {
    /// Backend name.
    pub backend: String,
    /// Device name.
    pub device: String,
    /// Device ordinal.
    pub device_ordinal: usize,
    /// Device architecture.
    pub arch: String,
    /// Model name.
    pub model: String,
    /// Where the model config came from.
    pub model_source: String,
    /// Number of model inputs.
    pub model_inputs: usize,
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
    pub startup: crate::stages::Startup,
    /// Per-stage times of the sampled requests.
    pub stages: crate::stages::Stages,
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
    pub check: Option<crate::onnx::Check>,
    /// `--dump-profile` (ONNX models): each step's device time in one program.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<crate::onnx::ProfileReport>,
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
        row("model", format!("{} ({} inputs, {})", self.model, self.model_inputs, self.model_source));
        row("device", format!("{} {} \"{}\" ({})", self.backend, self.device_ordinal, self.device, self.arch));
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
        let v = &self.verify;
        row(
            "verify",
            format!(
                "{} requests checked, {} mismatches (tolerance rel {:e}, max rel error {:.2e})",
                v.checked, v.mismatches, v.tolerance, v.max_rel_error
            ),
        );
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
        t.render()
    }
}

/// A device of a warmup.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct WarmupDevice {
    /// Its ordinal.
    pub ordinal: usize,
    /// Its name.
    pub name: String,
    /// Its architecture.
    pub arch: String,
    /// Programs compiled for it.
    pub compiles: u64,
    /// Programs loaded from disk for it.
    pub disk_loads: u64,
    /// Programs found in the cache's memory tier for it.
    pub memory_hits: u64,
}

/// The `saggar warmup` report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WarmupReport {
    /// Backend name.
    pub backend: String,
    /// The devices warmed.
    pub devices: Vec<WarmupDevice>,
    /// Model name.
    pub model: String,
    /// The cache directory.
    pub cache_dir: String,
    /// The buckets precompiled.
    pub buckets: Vec<u64>,
    /// Programs compiled, all devices together.
    pub compiles: u64,
    /// Programs loaded from disk, all devices together.
    pub disk_loads: u64,
    /// Programs found in the cache's memory tier, all devices together.
    pub memory_hits: u64,
    /// Seconds from start to every device ready.
    pub wall_s: f64,
}

impl WarmupReport {
    /// The report for people.
    pub fn table(&self) -> String {
        let buckets: Vec<String> = self.buckets.iter().map(u64::to_string).collect();
        let mut out = format!(
            "warmed model `{}` into {} in {:.3} s: buckets {}; {} compiled, {} loaded from disk, {} from memory\n",
            self.model,
            self.cache_dir,
            self.wall_s,
            buckets.join(","),
            self.compiles,
            self.disk_loads,
            self.memory_hits
        );
        let mut t = Table::with_header(&["DEVICE", "NAME", "ARCH", "COMPILED", "DISK LOADS", "MEMORY HITS"]);
        for d in &self.devices {
            t.row(vec![
                format!("{} {}", self.backend, d.ordinal),
                d.name.clone(),
                d.arch.clone(),
                d.compiles.to_string(),
                d.disk_loads.to_string(),
                d.memory_hits.to_string(),
            ]);
        }
        out.push_str(&t.render());
        out
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

    #[test]
    fn tables_align_columns() {
        let mut t = Table::with_header(&["A", "LONG HEADER"]);
        t.row(vec!["wide cell".into(), "x".into()]);
        assert_eq!(t.render(), "A          LONG HEADER\nwide cell  x\n");
    }

    #[test]
    fn sizes_and_ages_are_human() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(3 << 30), "3.0 GiB");
        assert_eq!(format_age(Duration::from_secs(59)), "59s");
        assert_eq!(format_age(Duration::from_secs(90)), "1m");
        assert_eq!(format_age(Duration::from_secs(7200)), "2h");
        assert_eq!(format_age(Duration::from_secs(200_000)), "2d");
    }
}
