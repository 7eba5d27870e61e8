//! `saggar warmup`: precompiles a model's buckets into a cache directory for one or more devices, then
//! exits. One device gets a [`Session`]; several get a [`SessionGroup`], in which the first device
//! compiles and the others load what it published. Across processes the cache's locks make every
//! bucket compile once in total, however many `saggar warmup` processes start together.

use std::sync::Arc;
use std::time::Instant;

use saggar_cache::CompileCache;
use saggar_device::{Backend, BackendVisitor, Device as _};
use saggar_dispatch::{ProgramCompiler, Routing, Session, SessionConfig, SessionGroup, StatsSnapshot};
use serde::Serialize;

use crate::buckets::{BucketArg, Buckets};
use crate::cli::WarmupArgs;
use crate::environment::Environment;
use crate::error::{CliError, Result};
use crate::output::{Table, emit};
use crate::progress::{Bar, ProgressMode};
use crate::source::ModelSource;
use crate::source::builtin::Builtin;
use crate::source::onnx::Onnx;

/// Runs `saggar warmup`.
pub fn run(args: &WarmupArgs, env: &Environment) -> Result<()> {
    match &args.model.onnx {
        Some(path) => warm(&Onnx::load(path, &args.model)?, args, env),
        None => warm(&Builtin::load(&args.model)?, args, env),
    }
}

/// Warms `source`'s buckets and prints the report.
fn warm<S: ModelSource>(source: &S, args: &WarmupArgs, env: &Environment) -> Result<()> {
    // Only an adaptive policy needs the trace; do not read a trace file otherwise.
    let trace = match args.buckets.buckets {
        BucketArg::Adaptive(_) => args.trace.trace.generate(args.trace.requests, args.trace.seed)?,
        _ => Vec::new(),
    };
    let buckets = args.buckets.buckets.resolve(args.buckets.max_batch, &trace)?;
    let cache = env.open_cache(args.cache_dir.as_deref())?;
    let backend = saggar_device::resolve(args.backend.choice())?;
    let plan = WarmupPlan { args, env, source, buckets: &buckets, cache };
    let report = saggar_device::visit_backend(backend, plan)??;
    emit(args.json.as_deref(), &report, || report.table())
}

struct WarmupPlan<'a, S> {
    args: &'a WarmupArgs,
    env: &'a Environment,
    source: &'a S,
    buckets: &'a Buckets,
    cache: Arc<CompileCache>,
}

impl<S: ModelSource> BackendVisitor for WarmupPlan<'_, S> {
    type Output = Result<WarmupReport>;

    fn visit<B: Backend>(self) -> Result<WarmupReport> {
        execute::<B, _, _>(&self, self.source.compiler::<B>())
    }
}

fn execute<B: Backend, S: ModelSource, C: ProgramCompiler<B>>(
    plan: &WarmupPlan<'_, S>,
    compiler: Arc<C>,
) -> Result<WarmupReport> {
    let WarmupPlan { args, env, source, buckets, cache } = plan;
    let ordinals = args.devices.ordinals::<B>()?;
    let devices = crate::cli::open_devices::<B>(&ordinals)?;
    let opened_s = env.started.elapsed().as_secs_f64();
    let infos: Vec<_> = devices.iter().map(|d| d.info().clone()).collect();
    // When each device's last program became ready, from the start of the process.
    let device_ready = std::sync::Mutex::new(vec![opened_s; devices.len()]);
    let ready = |i: usize| {
        if let Ok(mut ready) = device_ready.lock() {
            ready[i] = env.started.elapsed().as_secs_f64();
        }
    };
    // Warmup only precompiles: one run context per device is enough.
    let config =
        SessionConfig::builder().buckets(buckets.spec.clone()).cache(cache.clone()).max_concurrency(1).build()?;
    let bar = Bar::new(
        ProgressMode::new(env.stderr_is_terminal, args.progress),
        "warmup",
        (buckets.list.len() * devices.len()) as u64,
    );
    let started = Instant::now();
    let stats: Result<Vec<StatsSnapshot>> = if devices.len() == 1 {
        let device = devices.into_iter().next().expect("one device");
        Session::builder(device, compiler)
            .config(config)
            .on_progress(|p| {
                ready(0);
                bar.program_ready(None, p)
            })
            .build()
            .map(|s| vec![s.stats()])
            .map_err(CliError::from)
    } else {
        SessionGroup::<B, C>::new(devices, compiler, config, Routing::default(), &|i, p| {
            ready(i);
            bar.program_ready(Some(ordinals[i]), p)
        })
        .map(|g| g.stats())
        .map_err(CliError::from)
    };
    bar.finish();
    let stats = stats?;
    let wall_s = started.elapsed().as_secs_f64();
    let ready_s = env.started.elapsed().as_secs_f64();
    let device_ready = device_ready.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    let devices: Vec<WarmupDevice> = infos
        .into_iter()
        .zip(&stats)
        .zip(device_ready)
        .map(|((info, s), ready_s)| WarmupDevice {
            ready_s,
            ordinal: info.ordinal,
            name: info.name,
            arch: info.arch,
            compiles: s.compiles,
            disk_loads: s.disk_loads,
            memory_hits: s.memory_hits,
        })
        .collect();
    Ok(WarmupReport {
        backend: B::KIND.name().to_string(),
        model: source.info().name.clone(),
        cache_dir: cache.dir().display().to_string(),
        buckets: buckets.list.clone(),
        compiles: devices.iter().map(|d| d.compiles).sum(),
        disk_loads: devices.iter().map(|d| d.disk_loads).sum(),
        memory_hits: devices.iter().map(|d| d.memory_hits).sum(),
        devices,
        opened_s,
        wall_s,
        ready_s,
    })
}

/// A device of a warmup.
#[derive(Debug, Clone, Serialize, PartialEq)]
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
    /// Seconds from the start of the process to its last program ready.
    pub ready_s: f64,
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
    /// Seconds from the start of the process to every device opened (at once).
    pub opened_s: f64,
    /// Seconds from the start of session creation to every device ready.
    pub wall_s: f64,
    /// Seconds from the start of the process to every device ready: the time to ready, import and
    /// device contexts included (what a cold start costs before the first request can be served).
    pub ready_s: f64,
}

impl WarmupReport {
    /// The report for people.
    pub fn table(&self) -> String {
        let buckets: Vec<String> = self.buckets.iter().map(u64::to_string).collect();
        let mut out = format!(
            "warmed model `{}` into {} in {:.3} s (ready {:.3} s after start): buckets {}; {} compiled, {} loaded from \
             disk, {} from memory\n",
            self.model,
            self.cache_dir,
            self.wall_s,
            self.ready_s,
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
