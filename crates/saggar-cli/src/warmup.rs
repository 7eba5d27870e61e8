//! `saggar warmup`: precompiles a model's buckets into a cache directory for one or more devices, then
//! exits. One device gets a [`Session`]; several get a [`SessionGroup`], in which the first device
//! compiles and the others load what it published. Across processes the cache's locks make every
//! bucket compile once in total, however many `saggar warmup` processes start together.

use std::sync::Arc;
use std::time::Instant;

use saggar_cache::CompileCache;
use saggar_device::{Backend, BackendVisitor, Device as _};
use saggar_dispatch::{ProgramCompiler, Routing, Session, SessionConfig, SessionGroup, StatsSnapshot};
use saggar_models::ReferenceCompiler;
use saggar_onnx::OnnxCompiler;

use crate::buckets::{BucketArg, Buckets};
use crate::cli::{DeviceList, WarmupArgs};
use crate::environment::Environment;
use crate::error::{CliError, Result};
use crate::model;
use crate::progress::Bar;
use crate::report::{self, WarmupDevice, WarmupReport};

/// Runs `saggar warmup`.
pub fn run(args: &WarmupArgs, env: &Environment) -> Result<()> {
    let (name, compiler) = match &args.model.onnx {
        Some(path) => {
            let loaded = crate::onnx::load(path, crate::onnx::options(&args.model))?;
            (loaded.model().name().to_string(), Compiler::Onnx(loaded.compiler))
        }
        None => {
            let model = model::load(&args.model)?;
            (model.name().to_string(), Compiler::Reference(model.compiler))
        }
    };
    // Only an adaptive policy needs the trace; do not read a trace file otherwise.
    let trace = match args.buckets.buckets {
        BucketArg::Adaptive(_) => args.trace.trace.generate(args.trace.requests, args.trace.seed)?,
        _ => Vec::new(),
    };
    let buckets = args.buckets.buckets.resolve(args.buckets.max_batch, &trace)?;
    let cache_dir = env.cache_dir(args.cache_dir.as_deref())?;
    let cache = crate::cache::open_cache(&cache_dir)?;
    let backend = saggar_device::resolve(args.backend.choice())?;
    let plan = WarmupPlan { args, env, name: &name, compiler, buckets: &buckets, cache };
    let report = saggar_device::visit_backend(backend, plan)??;
    report::emit(args.json.as_deref(), &report, || report.table())
}

/// The model's compiler: the reference models or an ONNX file.
enum Compiler {
    Reference(Arc<ReferenceCompiler>),
    Onnx(Arc<OnnxCompiler>),
}

struct WarmupPlan<'a> {
    args: &'a WarmupArgs,
    env: &'a Environment,
    name: &'a str,
    compiler: Compiler,
    buckets: &'a Buckets,
    cache: Arc<CompileCache>,
}

impl BackendVisitor for WarmupPlan<'_> {
    type Output = Result<WarmupReport>;

    fn visit<B: Backend>(self) -> Result<WarmupReport> {
        match &self.compiler {
            Compiler::Reference(c) => execute::<B, _>(&self, c.clone()),
            Compiler::Onnx(c) => execute::<B, _>(&self, c.clone()),
        }
    }
}

fn execute<B: Backend, C: ProgramCompiler<B>>(plan: &WarmupPlan<'_>, compiler: Arc<C>) -> Result<WarmupReport> {
    let WarmupPlan { args, env, name, buckets, cache, .. } = plan;
    let ordinals: Vec<usize> = match &args.devices {
        DeviceList::All => (0..B::enumerate()?.len()).collect(),
        DeviceList::Some(list) => list.clone(),
    };
    if ordinals.is_empty() {
        return Err(CliError::failure(format!("the {} backend has no devices", B::KIND), "run `saggar devices`"));
    }
    let devices: Vec<B::Device> = ordinals.iter().map(|&o| B::open(o)).collect::<saggar_device::Result<_>>()?;
    let infos: Vec<_> = devices.iter().map(|d| d.info().clone()).collect();
    // Warmup only precompiles: one run context per device is enough.
    let config =
        SessionConfig::builder().buckets(buckets.spec.clone()).cache(cache.clone()).max_concurrency(1).build()?;
    let bar = Bar::new(
        crate::progress::ProgressMode::new(env.stderr_is_terminal, args.progress),
        "warmup",
        (buckets.list.len() * devices.len()) as u64,
    );
    let started = Instant::now();
    let stats: Result<Vec<StatsSnapshot>> = if devices.len() == 1 {
        let device = devices.into_iter().next().expect("one device");
        Session::builder(device, compiler)
            .config(config)
            .on_progress(|p| bar.program_ready(None, p))
            .build()
            .map(|s| vec![s.stats()])
            .map_err(CliError::from)
    } else {
        SessionGroup::<B, C>::new(devices, compiler, config, Routing::default(), &|i, p| {
            bar.program_ready(Some(ordinals[i]), p)
        })
        .map(|g| g.stats())
        .map_err(CliError::from)
    };
    bar.finish();
    let stats = stats?;
    let wall_s = started.elapsed().as_secs_f64();
    let devices: Vec<WarmupDevice> = infos
        .into_iter()
        .zip(&stats)
        .map(|(info, s)| WarmupDevice {
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
        model: name.to_string(),
        cache_dir: cache.dir().display().to_string(),
        buckets: buckets.list.clone(),
        compiles: devices.iter().map(|d| d.compiles).sum(),
        disk_loads: devices.iter().map(|d| d.disk_loads).sum(),
        memory_hits: devices.iter().map(|d| d.memory_hits).sum(),
        devices,
        wall_s,
    })
}
