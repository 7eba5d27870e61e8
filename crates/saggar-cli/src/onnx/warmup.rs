//! `saggar warmup --onnx FILE`: every bucket of an ONNX model precompiled into the cache for each
//! device, as `saggar warmup` does for the built-in families.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use saggar_device::{Backend, BackendVisitor, Device as _};
use saggar_dispatch::{Routing, Session, SessionConfig, SessionGroup, StatsSnapshot};
use saggar_onnx::OnnxCompiler;

use super::{LoadedOnnx, load};
use crate::buckets::{BucketArg, Buckets};
use crate::cli::{DeviceList, WarmupArgs};
use crate::environment::Environment;
use crate::error::{CliError, Result};
use crate::progress::Bar;
use crate::report;

/// `saggar warmup --onnx FILE`: every bucket of the model precompiled into the cache for each device.
pub fn warmup(args: &WarmupArgs, env: &Environment, path: &Path) -> Result<()> {
    let loaded = load(path)?;
    let trace = match args.buckets.buckets {
        BucketArg::Adaptive(_) => args.trace.trace.generate(args.trace.requests, args.trace.seed)?,
        _ => Vec::new(),
    };
    let buckets = args.buckets.buckets.resolve(args.buckets.max_batch, &trace)?;
    let cache = crate::cache::open_cache(&env.cache_dir(args.cache_dir.as_deref())?)?;
    let backend = saggar_device::resolve(args.backend.choice())?;
    let plan = WarmupPlan { args, env, loaded: &loaded, buckets: &buckets, cache };
    let report = saggar_device::visit_backend(backend, plan)??;
    report::emit(args.json.as_deref(), &report, || report.table())
}

struct WarmupPlan<'a> {
    args: &'a WarmupArgs,
    env: &'a Environment,
    loaded: &'a LoadedOnnx,
    buckets: &'a Buckets,
    cache: Arc<saggar_cache::CompileCache>,
}

impl BackendVisitor for WarmupPlan<'_> {
    type Output = Result<report::WarmupReport>;

    fn visit<B: Backend>(self) -> Self::Output {
        let WarmupPlan { args, env, loaded, buckets, cache } = self;
        let ordinals: Vec<usize> = match &args.devices {
            DeviceList::All => (0..B::enumerate()?.len()).collect(),
            DeviceList::Some(list) => list.clone(),
        };
        if ordinals.is_empty() {
            return Err(CliError::failure(format!("the {} backend has no devices", B::KIND), "run `saggar devices`"));
        }
        let devices: Vec<B::Device> = ordinals.iter().map(|&o| B::open(o)).collect::<saggar_device::Result<_>>()?;
        let infos: Vec<_> = devices.iter().map(|d| d.info().clone()).collect();
        let config =
            SessionConfig::builder().buckets(buckets.spec.clone()).cache(cache.clone()).max_concurrency(1).build()?;
        let bar = Bar::new(env.stderr_is_terminal, "warmup", (buckets.list.len() * devices.len()) as u64);
        let started = Instant::now();
        let compiler = loaded.compiler.clone();
        let stats: Result<Vec<StatsSnapshot>> = if devices.len() == 1 {
            let device = devices.into_iter().next().expect("one device");
            Session::<B, OnnxCompiler>::new(device, compiler, config, &|p| bar.program_ready(None, p))
                .map(|s| vec![s.stats()])
                .map_err(CliError::from)
        } else {
            SessionGroup::<B, OnnxCompiler>::new(devices, compiler, config, Routing::default(), &|i, p| {
                bar.program_ready(Some(ordinals[i]), p)
            })
            .map(|g| g.stats())
            .map_err(CliError::from)
        };
        bar.finish();
        let stats = stats?;
        let devices: Vec<report::WarmupDevice> = infos
            .into_iter()
            .zip(&stats)
            .map(|(info, s)| report::WarmupDevice {
                ordinal: info.ordinal,
                name: info.name,
                arch: info.arch,
                compiles: s.compiles,
                disk_loads: s.disk_loads,
                memory_hits: s.memory_hits,
            })
            .collect();
        Ok(report::WarmupReport {
            backend: B::KIND.name().to_string(),
            model: loaded.model().name().to_string(),
            cache_dir: cache.dir().display().to_string(),
            buckets: buckets.list.clone(),
            compiles: devices.iter().map(|d| d.compiles).sum(),
            disk_loads: devices.iter().map(|d| d.disk_loads).sum(),
            memory_hits: devices.iter().map(|d| d.memory_hits).sum(),
            devices,
            wall_s: started.elapsed().as_secs_f64(),
        })
    }
}
