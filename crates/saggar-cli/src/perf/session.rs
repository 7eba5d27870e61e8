//! The session of a `saggar perf` run (or its session group over several devices), for every model
//! source: its configuration from the flags, its creation with progress and the time each program
//! became ready, and each used bucket's copies timed on their own after the run.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use saggar_cache::CompileCache;
use saggar_device::Backend;
use saggar_dispatch::{
    CaptureWhen, GraphConfig, LiveBuckets, PaddedAxis, ProgramCompiler, ProgramSource, Routing, Session, SessionConfig,
    SessionGroup, StatsSnapshot,
};

use super::bench::Measured;
use super::stages::{BucketCopies, ProgramReady, secs};
use crate::buckets::Buckets;
use crate::cli::{CaptureArg, PerfArgs, Toggle};
use crate::error::Result;
use crate::progress::{Bar, ProgressMode};

/// Device-event samples per bucket when its copies are timed on their own.
const COPY_SAMPLES: usize = 21;

/// The session configuration of `saggar perf` (every model source): buckets, graphs, the cache, and
/// one prewarmed run context per worker thread.
fn session_config(
    args: &PerfArgs,
    buckets: &Buckets,
    cache: Arc<CompileCache>,
    padded_axis: Option<PaddedAxis>,
) -> Result<SessionConfig> {
    let concurrency = args.concurrency as usize;
    let mut builder = SessionConfig::builder();
    if let Some(live) = args.live_buckets {
        builder = builder.live_buckets(LiveBuckets::new(live.every, live.budget));
    }
    if let Some(axis) = padded_axis {
        builder = builder.padded_axis(axis);
    }
    Ok(builder
        .buckets(buckets.spec.clone())
        .graphs(GraphConfig::default().with_enabled(args.graphs == Toggle::On).with_capture(match args.capture {
            CaptureArg::Lazy => CaptureWhen::Lazy,
            CaptureArg::Eager => CaptureWhen::Eager,
        }))
        .cache(cache)
        .max_concurrency(concurrency)
        .prewarm_contexts(concurrency)
        .kernel_copies_up_to(usize::try_from(args.kernel_copies_up_to).unwrap_or(usize::MAX))
        .build()?)
}

/// What `saggar perf` runs its requests on: one session, or a group over several devices
/// (`--devices`).
pub enum Served<B: Backend, C: ProgramCompiler<B>> {
    /// One device.
    One(Session<B, C>),
    /// Several devices, each request on the least loaded one.
    Group(SessionGroup<B, C>),
}

impl<B: Backend, C: ProgramCompiler<B>> Served<B, C> {
    /// The session of the first device: the model's signature and buckets, output shapes, copy
    /// timing and the device named in the report.
    pub fn primary(&self) -> &Session<B, C> {
        match self {
            Served::One(session) => session,
            Served::Group(group) => &group.sessions()[0],
        }
    }

    /// Every session.
    pub fn sessions(&self) -> &[Session<B, C>] {
        match self {
            Served::One(session) => std::slice::from_ref(session),
            Served::Group(group) => group.sessions(),
        }
    }

    /// Each device's counters, in device order.
    pub fn snapshots(&self) -> Vec<StatsSnapshot> {
        self.sessions().iter().map(Session::stats).collect()
    }
}

/// A session (or group) and how its creation went.
pub struct Built<B: Backend, C: ProgramCompiler<B>> {
    /// The session or group.
    pub served: Served<B, C>,
    /// Each program as it became ready.
    pub programs: Vec<ProgramReady>,
    /// Session creation time.
    pub session_s: f64,
}

/// Creates the session of `saggar perf` on `devices` (a session group when there are several), with
/// a progress bar and the time each program became ready.
pub fn build<B: Backend, C: ProgramCompiler<B>>(
    args: &PerfArgs,
    mode: ProgressMode,
    devices: Vec<B::Device>,
    compiler: Arc<C>,
    buckets: &Buckets,
    cache: Arc<CompileCache>,
    padded_axis: Option<PaddedAxis>,
) -> Result<Built<B, C>> {
    let config = session_config(args, buckets, cache, padded_axis)?;
    let count = devices.len();
    let bar = Bar::new(mode, "compile", (buckets.list.len() * count) as u64);
    let programs = Mutex::new(Vec::new());
    let started = Instant::now();
    let ready = |device: Option<usize>, p: &saggar_dispatch::Progress| {
        if let Ok(mut programs) = programs.lock() {
            programs.push(ProgramReady {
                bucket: p.bucket,
                source: match p.source {
                    ProgramSource::Loaded => "loaded",
                    ProgramSource::Compiled => "compiled",
                },
                ready_at_s: started.elapsed().as_secs_f64(),
            });
        }
        bar.program_ready(device, p);
    };
    let served = if count == 1 {
        let device = devices.into_iter().next().expect("one device");
        Session::builder(device, compiler).config(config).on_progress(|p| ready(None, p)).build().map(Served::One)
    } else {
        SessionGroup::new(devices, compiler, config, Routing::LeastLoaded, &|i, p| ready(Some(i), p)).map(Served::Group)
    };
    let session_s = started.elapsed().as_secs_f64();
    bar.finish();
    let programs = programs.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok(Built { served: served?, programs, session_s })
}

/// Each bucket that served a timed request with stages, its copies timed on their own.
pub fn bucket_copies<B: Backend, C: ProgramCompiler<B>, K>(
    session: &Session<B, C>,
    measured: &Measured<K>,
) -> Result<Vec<BucketCopies>> {
    let mut buckets: Vec<u64> =
        measured.records.iter().filter(|r| r.stages.is_some()).filter_map(|r| r.bucket).collect();
    buckets.sort_unstable();
    buckets.dedup();
    if buckets.is_empty() {
        return Ok(Vec::new());
    }
    let timer = session.stage_timer()?;
    let mut copies = Vec::with_capacity(buckets.len());
    for bucket in buckets {
        if let Some(t) = session.copy_times(&timer, bucket, COPY_SAMPLES)? {
            copies.push(BucketCopies {
                bucket,
                upload_bytes: t.upload_bytes,
                download_bytes: t.download_bytes,
                h2d_us: secs(t.h2d) * 1e6,
                d2h_us: secs(t.d2h) * 1e6,
            });
        }
    }
    Ok(copies)
}
