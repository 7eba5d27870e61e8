//! Prometheus text on `--metrics-port` `/metrics`, under Triton's metric names and labels (`model`,
//! `version`), so Triton's dashboards work, plus saggar's own counters from each model's sessions.
//!
//! Counters are relaxed atomics updated once per request and once per batch; rendering reads them
//! and the sessions' [`saggar_dispatch::StatsSnapshot`]s when scraped.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::executor::Executor;

/// Largest batch size counted exactly in the batch-size histogram.
const HISTOGRAM_SIZES: usize = 4097;

/// One model's request counters.
#[derive(Debug)]
pub struct ModelMetrics {
    success: AtomicU64,
    failure: AtomicU64,
    inferences: AtomicU64,
    executions: AtomicU64,
    request_us: AtomicU64,
    queue_us: AtomicU64,
    compute_us: AtomicU64,
    /// Batches executed per size in rows (the last slot counts every larger batch).
    batch_sizes: Box<[AtomicU64]>,
}

impl Default for ModelMetrics {
    fn default() -> ModelMetrics {
        ModelMetrics {
            success: AtomicU64::new(0),
            failure: AtomicU64::new(0),
            inferences: AtomicU64::new(0),
            executions: AtomicU64::new(0),
            request_us: AtomicU64::new(0),
            queue_us: AtomicU64::new(0),
            compute_us: AtomicU64::new(0),
            batch_sizes: (0..HISTOGRAM_SIZES).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u128::from(u64::MAX)) as u64
}

impl ModelMetrics {
    /// A request that succeeded: `rows` inferences, its total, queue and compute times.
    pub fn success(&self, rows: u64, total: Duration, queue: Duration, compute: Duration) {
        self.success.fetch_add(1, Relaxed);
        self.inferences.fetch_add(rows, Relaxed);
        self.request_us.fetch_add(micros(total), Relaxed);
        self.queue_us.fetch_add(micros(queue), Relaxed);
        self.compute_us.fetch_add(micros(compute), Relaxed);
    }

    /// A request that failed, for any reason (a bad request, a full queue, a failed run).
    pub fn failure(&self, total: Duration) {
        self.failure.fetch_add(1, Relaxed);
        self.request_us.fetch_add(micros(total), Relaxed);
    }

    /// One batch of `rows` rows executed.
    pub fn execution(&self, rows: u64) {
        self.executions.fetch_add(1, Relaxed);
        let slot = (rows as usize).min(HISTOGRAM_SIZES - 1);
        self.batch_sizes[slot].fetch_add(1, Relaxed);
    }

    /// Successful requests.
    pub fn successes(&self) -> u64 {
        self.success.load(Relaxed)
    }

    /// Batches executed.
    pub fn executions(&self) -> u64 {
        self.executions.load(Relaxed)
    }
}

/// What the renderer needs of a loaded model.
#[derive(Debug, Clone, Copy)]
pub struct ModelView<'a> {
    /// Its name.
    pub name: &'a str,
    /// The version served.
    pub version: u64,
    /// Its request counters.
    pub metrics: &'a ModelMetrics,
    /// Its sessions.
    pub executor: &'a dyn Executor,
}

struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
}

const FAMILIES: &[Family] = &[
    Family {
        name: "nv_inference_request_success",
        kind: "counter",
        help: "Number of successful inference requests, all batch sizes",
    },
    Family {
        name: "nv_inference_request_failure",
        kind: "counter",
        help: "Number of failed inference requests, all batch sizes",
    },
    Family {
        name: "nv_inference_count",
        kind: "counter",
        help: "Number of inferences performed (a batch of n counts n)",
    },
    Family { name: "nv_inference_exec_count", kind: "counter", help: "Number of model executions performed (batches)" },
    Family {
        name: "nv_inference_request_duration_us",
        kind: "counter",
        help: "Cumulative inference request duration in microseconds (queue and compute included)",
    },
    Family {
        name: "nv_inference_queue_duration_us",
        kind: "counter",
        help: "Cumulative inference queuing duration in microseconds",
    },
    Family {
        name: "nv_inference_compute_infer_duration_us",
        kind: "counter",
        help: "Cumulative compute inference duration in microseconds (merge, run and split of the request's batch)",
    },
    Family { name: "saggar_padded_rows", kind: "counter", help: "Padding rows computed by the model's sessions" },
    Family { name: "saggar_useful_rows", kind: "counter", help: "Real rows computed by the model's sessions" },
    Family { name: "saggar_padding_waste_ratio", kind: "gauge", help: "Padded rows over all rows computed" },
    Family { name: "saggar_graph_replays", kind: "counter", help: "Executable graph replays" },
    Family { name: "saggar_graph_captures", kind: "counter", help: "Executable graphs captured" },
    Family { name: "saggar_cache_disk_loads", kind: "counter", help: "Programs loaded from the compile cache on disk" },
    Family {
        name: "saggar_cache_memory_hits",
        kind: "counter",
        help: "Programs found in the compile cache's memory tier",
    },
    Family { name: "saggar_compiles", kind: "counter", help: "Programs compiled" },
    Family { name: "saggar_queue_size", kind: "gauge", help: "Requests waiting in the model's queue" },
];

/// Renders every model's metrics and each device's memory as Prometheus text.
pub fn render(models: &[(ModelView<'_>, usize)]) -> String {
    let mut out = String::new();
    for family in FAMILIES {
        let _ = writeln!(out, "# HELP {} {}\n# TYPE {} {}", family.name, family.help, family.name, family.kind);
        for (m, queued) in models {
            let value = value(family.name, m, *queued);
            let _ = writeln!(out, "{}{{model=\"{}\",version=\"{}\"}} {value}", family.name, m.name, m.version);
        }
    }
    batch_histogram(&mut out, models);
    gpu_memory(&mut out, models);
    out
}

fn value(family: &str, m: &ModelView<'_>, queued: usize) -> String {
    let c = m.metrics;
    let stats = m.executor.stats();
    let sum = |f: fn(&saggar_dispatch::StatsSnapshot) -> u64| stats.iter().map(f).sum::<u64>();
    let n = match family {
        "nv_inference_request_success" => c.success.load(Relaxed),
        "nv_inference_request_failure" => c.failure.load(Relaxed),
        "nv_inference_count" => c.inferences.load(Relaxed),
        "nv_inference_exec_count" => c.executions.load(Relaxed),
        "nv_inference_request_duration_us" => c.request_us.load(Relaxed),
        "nv_inference_queue_duration_us" => c.queue_us.load(Relaxed),
        "nv_inference_compute_infer_duration_us" => c.compute_us.load(Relaxed),
        "saggar_padded_rows" => sum(|s| s.padded_rows),
        "saggar_useful_rows" => sum(|s| s.useful_rows),
        "saggar_padding_waste_ratio" => {
            let (padded, useful) = (sum(|s| s.padded_rows), sum(|s| s.useful_rows));
            let total = padded + useful;
            return format!("{}", if total == 0 { 0.0 } else { padded as f64 / total as f64 });
        }
        "saggar_graph_replays" => sum(|s| s.replays),
        "saggar_graph_captures" => sum(|s| s.captures),
        "saggar_cache_disk_loads" => sum(|s| s.disk_loads),
        "saggar_cache_memory_hits" => sum(|s| s.memory_hits),
        "saggar_compiles" => sum(|s| s.compiles),
        "saggar_queue_size" => queued as u64,
        _ => 0,
    };
    n.to_string()
}

/// `saggar_batch_size`: a histogram of executed batch sizes, buckets at powers of two.
fn batch_histogram(out: &mut String, models: &[(ModelView<'_>, usize)]) {
    let _ = writeln!(out, "# HELP saggar_batch_size Rows per executed batch\n# TYPE saggar_batch_size histogram");
    for (m, _) in models {
        let counts: Vec<u64> = m.metrics.batch_sizes.iter().map(|c| c.load(Relaxed)).collect();
        let labels = format!("model=\"{}\",version=\"{}\"", m.name, m.version);
        let (mut cumulative, mut sum, mut le) = (0u64, 0u64, 1usize);
        for (size, &n) in counts.iter().enumerate() {
            sum += n * size as u64;
        }
        for (size, &n) in counts.iter().enumerate() {
            cumulative += n;
            if size == le {
                let _ = writeln!(out, "saggar_batch_size_bucket{{{labels},le=\"{le}\"}} {cumulative}");
                le *= 2;
            }
        }
        let _ = writeln!(out, "saggar_batch_size_bucket{{{labels},le=\"+Inf\"}} {cumulative}");
        let _ =
            writeln!(out, "saggar_batch_size_sum{{{labels}}} {sum}\nsaggar_batch_size_count{{{labels}}} {cumulative}");
    }
}

/// `nv_gpu_memory_used_bytes` and `nv_gpu_memory_total_bytes` per device of any loaded model.
fn gpu_memory(out: &mut String, models: &[(ModelView<'_>, usize)]) {
    let mut devices: Vec<crate::executor::DeviceMemory> = Vec::new();
    for (m, _) in models {
        for d in m.executor.memory() {
            if !devices.iter().any(|seen| seen.device == d.device) {
                devices.push(d);
            }
        }
    }
    for (name, help, used) in [
        ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", true),
        ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", false),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for d in &devices {
            let v = if used { d.used } else { d.total };
            let _ = writeln!(out, "{name}{{gpu_uuid=\"{}\",gpu=\"{}\"}} {v}", d.device, d.name.replace('"', "'"));
        }
    }
}
