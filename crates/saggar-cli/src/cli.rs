//! The command line, declared with clap's derive API: commands, flags, defaults, help texts and
//! their examples. Values are parsed and validated here (trace specs, bucket policies, device
//! lists), so a malformed value is a usage error (exit code 2) before any work starts.

use std::path::PathBuf;
use std::str::FromStr;

use clap::{Args, Parser, Subcommand, ValueEnum};
use saggar_device::{BackendChoice, BackendKind};
use saggar_onnx::Precision;

use crate::buckets::{BucketArg, parse_max_batch};
use crate::trace::{MAX_REQUESTS, TraceSpec};

const ROOT_EXAMPLES: &str = "\
Examples:
  saggar devices
  saggar check --onnx model.onnx
  saggar perf
  saggar perf --backend host --trace uniform:1..64 --requests 5000 --json perf.json
  saggar warmup --cache-dir /var/cache/saggar --devices all --json warmup.json
  saggar cache verify --cache-dir /var/cache/saggar

Exit codes: 0 success, 1 failure, 2 bad arguments or bad input files.";

const DEVICES_EXAMPLES: &str = "\
Examples:
  saggar devices
  saggar devices --json devices.json";

const PERF_EXAMPLES: &str = "\
Outputs are checked against the eager CPU reference (saggar_models::reference_forward) for --verify
requests spread over the trace; a value matches when |actual - expected| <= 1e-3 * max(1, |expected|).
Latency is measured per request around the session call, after untimed warmup runs (--warmup-runs,
--warmup-time); throughput is timed requests over wall time. Every --stage-every K-th request is split
into stages (queue wait, check, gather, enqueue, device span, sync, scatter).

Examples:
  saggar perf
  saggar perf --backend host --trace const:8 --requests 2000 --json out.json
  saggar perf --backend cuda --trace uniform:1..64 --graphs on --binding direct
  saggar perf --model mlp --trace zipf:1.1:64 --buckets adaptive:6 --concurrency 4
  saggar perf --model-config my-recsys.json --trace file:batches.txt --json -
  saggar perf --backend host --onnx model.onnx --trace uniform:1..32 --requests 500
  saggar perf --backend host --onnx model.onnx --load-inputs test_data_set_0 --check-outputs test_data_set_0 --json -
  saggar perf --backend cuda --onnx bert.onnx --shapes input_ids:1x128 --shapes attention_mask:1x128 --trace const:1
  saggar perf --backend cuda --model mlp --warmup-runs 100 --duration 10 --stage-every 1 --export-times times.jsonl
  saggar perf --backend cuda --onnx model.onnx --trace uniform:1..8 --export-outputs outs --quiet --json out.json";

const WARMUP_EXAMPLES: &str = "\
Examples:
  saggar warmup --cache-dir /var/cache/saggar --json warmup.json
  saggar warmup --cache-dir /var/cache/saggar --backend cuda --devices 0,1,2,3 --buckets stepped --max-batch 128
  saggar warmup --cache-dir /var/cache/saggar --buckets adaptive:6 --trace zipf:1.1:64
  saggar warmup --backend host --onnx model.onnx --max-batch 16 --quiet";

const CHECK_EXAMPLES: &str = "\
Exits with 1 if a backend checked refuses the model (every refused node is listed), 2 if the file
is not a readable ONNX model.

Examples:
  saggar check --onnx model.onnx
  saggar check --onnx model.onnx --backend cuda --json check.json
  saggar check --onnx bert.onnx --shapes input_ids:1x128 --shapes attention_mask:1x128";

const OPS_EXAMPLES: &str = "\
Examples:
  saggar ops
  saggar ops --json ops.json";

const SERVE_EXAMPLES: &str = "\
Serves every model of a Triton-style repository (DIR/<model>/<version>/model.onnx, optional
DIR/<model>/config.pbtxt) over the KServe v2 / Open Inference Protocol: HTTP on --http-port, gRPC on
--grpc-port, Prometheus metrics on --metrics-port /metrics. SIGTERM or SIGINT stop accepting, let
requests in flight complete and exit 0 (1 if --shutdown-timeout passed first). See docs/serving.md.

Examples:
  saggar serve --model-repository models
  saggar serve --model-repository models --backend cuda --devices 0,1 --cache-dir /var/cache/saggar
  saggar serve --model-repository models --host 0.0.0.0 --model-control-mode explicit --load-model bert";

const CACHE_EXAMPLES: &str = "\
Examples:
  saggar cache ls --cache-dir /var/cache/saggar
  saggar cache verify --cache-dir /var/cache/saggar
  saggar cache gc --cache-dir /var/cache/saggar --max-bytes 1000000000
  saggar cache key --bucket 8 --backend cuda --arch sm_90
  saggar cache import --cache-dir /var/cache/saggar --from /seed/saggar-cache";

const CACHE_IMPORT_EXAMPLES: &str = "\
Every file is verified (header, key, payload checksum) before it is published atomically under the
cache's locks, so a replica can import while another serves from the same directory.

Examples:
  saggar cache import --cache-dir /var/cache/saggar --from /seed/saggar-cache
  saggar cache import --from /seed/saggar-cache --json -";

const CACHE_LS_EXAMPLES: &str = "\
Examples:
  saggar cache ls
  saggar cache ls --cache-dir /var/cache/saggar --json entries.json";

const CACHE_VERIFY_EXAMPLES: &str = "\
Exits with 1 if any entry is corrupt or writable by other users.

Examples:
  saggar cache verify --cache-dir /var/cache/saggar";

const CACHE_GC_EXAMPLES: &str = "\
Examples:
  saggar cache gc --cache-dir /var/cache/saggar
  saggar cache gc --cache-dir /var/cache/saggar --max-bytes 1000000000 --stale-after 60";

const CACHE_KEY_EXAMPLES: &str = "\
Examples:
  saggar cache key --bucket 8
  saggar cache key --model mlp --bucket 64 --backend host --device 0
  saggar cache key --model-config my-recsys.json --bucket 16 --backend cuda --arch sm_90
  saggar cache key --onnx model.onnx --bucket 8 --backend host
  saggar cache key --onnx bert.onnx --bucket 3 --load-inputs test_data_set_0 --backend host";

/// `saggar`: run, warm and inspect saggar sessions from the shell.
#[derive(Debug, Parser)]
#[command(name = "saggar", version, about = "saggar: run, warm and inspect GPU inference sessions", after_help = ROOT_EXAMPLES)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List every backend (cuda, hip, host) with its devices, or the reason it is missing.
    #[command(after_help = DEVICES_EXAMPLES)]
    Devices(DevicesArgs),
    /// Run a batch-size trace through a session and report latency percentiles, throughput, run
    /// paths, padding waste, compiles and loads, graph counters, and a check against the reference.
    #[command(after_help = PERF_EXAMPLES)]
    Perf(Box<PerfArgs>),
    /// Precompile a model's buckets into a cache directory for one or more devices, then exit.
    #[command(after_help = WARMUP_EXAMPLES)]
    Warmup(WarmupArgs),
    /// Say, without running it, whether an ONNX model is supported on each backend, listing every
    /// node a backend refuses (op, opset, node, why).
    #[command(after_help = CHECK_EXAMPLES)]
    Check(CheckArgs),
    /// List the declared ONNX op set: every op with its opset ranges and how each backend runs it.
    #[command(after_help = OPS_EXAMPLES)]
    Ops(OpsArgs),
    /// Serve a model repository over the KServe v2 / Open Inference Protocol (HTTP and gRPC), with
    /// dynamic batching and Prometheus metrics.
    #[command(after_help = SERVE_EXAMPLES)]
    Serve(Box<ServeArgs>),
    /// Inspect and maintain a compile cache directory.
    #[command(subcommand, after_help = CACHE_EXAMPLES)]
    Cache(CacheCommand),
    /// Panics on purpose, to test that a panic prints one error line and exits with 1.
    #[command(hide = true, name = "internal-panic")]
    InternalPanic,
}

/// `--backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// CUDA, then HIP, then the host simulator: the first with a device.
    Auto,
    /// The host simulator (always available).
    Host,
    /// NVIDIA GPUs.
    Cuda,
    /// AMD GPUs.
    Hip,
}

impl BackendArg {
    /// The backend choice.
    pub fn choice(self) -> BackendChoice {
        match self {
            BackendArg::Auto => BackendChoice::Auto,
            BackendArg::Host => BackendChoice::Exactly(BackendKind::Host),
            BackendArg::Cuda => BackendChoice::Exactly(BackendKind::Cuda),
            BackendArg::Hip => BackendChoice::Exactly(BackendKind::Hip),
        }
    }
}

/// `--model`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModelArg {
    /// The recommender (190 inputs by default).
    Recsys,
    /// The plain MLP.
    Mlp,
}

/// `--graphs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Toggle {
    /// Capture and replay executable graphs.
    On,
    /// Launch every run eagerly.
    Off,
}

/// `--capture`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CaptureArg {
    /// On a bucket's first request in each run context.
    Lazy,
    /// Every bucket in every run context, at session creation.
    Eager,
}

/// `--binding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BindingArg {
    /// The default: pinned.
    Auto,
    /// Inputs and outputs in device buffers (uploaded once per distinct batch), run with
    /// `run_device`: exact-bucket requests are direct-bound, others stabilized.
    Direct,
    /// Host tensors through pinned staging (`run_into`).
    Pinned,
    /// Inputs written in place into pinned staging through a `Session::request` per batch size
    /// (no gather), outputs read in place.
    Request,
}

/// The model flags.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// Model family, with its default config (docs/models.md).
    #[arg(long, value_enum, default_value_t = ModelArg::Recsys)]
    pub model: ModelArg,
    /// A model config JSON file (instead of --model).
    #[arg(long, value_name = "FILE", conflicts_with = "model")]
    pub model_config: Option<PathBuf>,
    /// An ONNX model file (instead of --model), imported with saggar-onnx.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["model", "model_config"])]
    pub onnx: Option<PathBuf>,
    /// With --onnx: the fused attention kernel on CUDA and HIP: auto (chosen per bucket), rows (a
    /// block per query row) or tiled (a block per tile of query rows).
    #[arg(long, value_enum, default_value_t = AttentionArg::Auto)]
    pub attention: AttentionArg,
    /// With --onnx: how one-group convolutions run: auto (channels-last GEMMs where the transposes
    /// between convolutions cancel, else nchw), nhwc, nchw (im2col and a GEMM per image) or direct
    /// (the generated kernel). Part of the cache key.
    #[arg(long, value_enum, default_value_t = ConvArg::Auto)]
    pub conv: ConvArg,
    /// With --onnx: BLAS-Lt candidates timed per matmul shape when a bucket loads, the fastest kept
    /// (1: the library's first choice, untimed).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=16))]
    pub blas_tune: u64,
    /// With --onnx: MiB of BLAS-Lt workspace each run context reserves on CUDA and HIP (the
    /// libraries pick split-K kernels, the fast ones at a few hundred rows, only when it holds
    /// their partial sums). Part of the cache key.
    #[arg(long, value_name = "MIB", default_value_t = DEFAULT_BLAS_WORKSPACE_MIB,
        value_parser = clap::value_parser!(u64).range(0..=MAX_BLAS_WORKSPACE_MIB))]
    pub blas_workspace: u64,
    /// With --onnx: the precision products compute in: fp32 (strict, TF32 off), tf32 (BLAS-Lt
    /// products on TF32 tensor cores), fp16 or bf16 (weight products on f16/bf16 tensor cores, f32
    /// accumulation, everything else f32), int8 (weight products on int8 tensor cores: a QDQ model's
    /// as written, an f32 model's calibrated from --calibration-inputs). Part of the cache key.
    #[arg(long, value_name = "P", default_value = "fp32")]
    pub precision: Precision,
    /// With --fp16/--bf16 precisions: products kept in strict f32, by op type (Gemm) or node name,
    /// comma-separated. Part of the cache key.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub keep_fp32: Vec<String>,
    /// With --precision int8 on an f32 model: the data its activation scales are calibrated from, a
    /// folder of input_N.pb files or of data-set folders (test_data_set_0, ...; at most 64). Part of
    /// the cache key (by digest).
    #[arg(long, value_name = "DIR")]
    pub calibration_inputs: Option<PathBuf>,
}

/// `--blas-workspace`'s default: saggar-onnx's.
pub const DEFAULT_BLAS_WORKSPACE_MIB: u64 = (saggar_onnx::DEFAULT_BLAS_WORKSPACE_BYTES >> 20) as u64;

/// The largest `--blas-workspace`: 1 GiB a run context.
pub const MAX_BLAS_WORKSPACE_MIB: u64 = 1024;

/// `--attention`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AttentionArg {
    /// The tiled kernel where a bucket has enough query tiles, else the row kernel.
    Auto,
    /// A block per query row.
    Rows,
    /// A block per tile of query rows sharing key and value tiles.
    Tiled,
}

/// `--conv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConvArg {
    /// Channels-last where the layout pass cancels most transposes, else nchw.
    Auto,
    /// Channels-last: one tall GEMM over the batch, the bias in its epilogue.
    Nhwc,
    /// Channels-first: im2col and a GEMM per image.
    Nchw,
    /// The generated direct-convolution kernel.
    Direct,
}

/// The bucket flags.
#[derive(Debug, Clone, Args)]
pub struct BucketArgs {
    /// Bucket policy: pow2, stepped, adaptive:K (K buckets fitted to the trace) or list:1,2,4,...
    #[arg(long, value_name = "POLICY", default_value = "pow2")]
    pub buckets: BucketArg,
    /// Largest bucket of pow2 and stepped; larger requests are split.
    #[arg(long, value_name = "M", default_value = "64", value_parser = parse_max_batch)]
    pub max_batch: u64,
}

/// A `--live-buckets EVERY:BUDGET` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveBucketsArg {
    /// Requests between refits.
    pub every: u64,
    /// Buckets fitted.
    pub budget: usize,
}

impl FromStr for LiveBucketsArg {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<LiveBucketsArg, String> {
        let (every, budget) =
            text.split_once(':').ok_or_else(|| format!("`{text}`: expected EVERY:BUDGET, e.g. 500:4"))?;
        let every: u64 = every.parse().map_err(|_| format!("`{every}` is not a number of requests"))?;
        let budget: usize = budget.parse().map_err(|_| format!("`{budget}` is not a number of buckets"))?;
        if every == 0 || budget == 0 {
            return Err("the interval and the budget must be at least 1".into());
        }
        Ok(LiveBucketsArg { every, budget })
    }
}

/// A `--pad-axis SYMBOL:SIZES` value: the symbol and its bucket sizes, ascending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PadAxisArg {
    /// The symbolic dimension padded.
    pub symbol: String,
    /// Its bucket sizes, ascending, without repeats.
    pub sizes: Vec<u64>,
}

impl FromStr for PadAxisArg {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<PadAxisArg, String> {
        let (symbol, sizes) =
            text.split_once(':').ok_or_else(|| format!("`{text}`: expected SYMBOL:SIZES, e.g. seq:32,64,128"))?;
        if symbol.is_empty() {
            return Err(format!("`{text}`: the symbol is empty"));
        }
        let mut list = sizes
            .split(',')
            .map(|n| match n.trim().parse::<u64>() {
                Ok(v) if v > 0 => Ok(v),
                _ => Err(format!("`{n}` is not a size (a whole number, at least 1)")),
            })
            .collect::<std::result::Result<Vec<u64>, String>>()?;
        list.sort_unstable();
        list.dedup();
        Ok(PadAxisArg { symbol: symbol.to_string(), sizes: list })
    }
}

/// The trace flags.
#[derive(Debug, Clone, Args)]
pub struct TraceArgs {
    /// Batch sizes: const:B, uniform:A..B (inclusive), zipf:S:MAX, or file:PATH (one size per line).
    #[arg(long, value_name = "SPEC", default_value = "const:8")]
    pub trace: TraceSpec,
    /// Number of requests (`saggar perf`: timed requests, at least this many with --duration)
    /// [default: 2000; a file trace: its length].
    #[arg(long, visible_alias = "iterations", value_name = "N", value_parser = clap::value_parser!(u64).range(1..=MAX_REQUESTS))]
    pub requests: Option<u64>,
    /// Seed of the trace and of the generated inputs.
    #[arg(long, value_name = "SEED", default_value_t = 1)]
    pub seed: u64,
}

/// The progress flag of every command that shows progress (`saggar perf`, `saggar warmup`).
#[derive(Debug, Clone, Copy, Args)]
pub struct ProgressArgs {
    /// No progress on stderr (the report and errors are printed as usual).
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// `saggar devices`.
#[derive(Debug, Clone, Args)]
pub struct DevicesArgs {
    /// Also write the list as JSON to FILE (`-`: stdout instead of the table).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `saggar check`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// The ONNX model file.
    #[arg(long, value_name = "FILE")]
    pub onnx: PathBuf,
    /// The backend to check (all: host, cuda and hip). No device is needed: nothing is compiled.
    #[arg(long, value_enum, default_value_t = CheckBackendArg::All)]
    pub backend: CheckBackendArg,
    /// The shape of an input, NAME:DIMS such as input_ids:1x128 (repeatable); other symbolic
    /// dimensions are checked at 1.
    #[arg(long, value_name = "NAME:DIMS")]
    pub shapes: Vec<ShapeArg>,
    /// Also write the report as JSON to FILE (`-`: stdout instead of the table).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `saggar ops`.
#[derive(Debug, Clone, Args)]
pub struct OpsArgs {
    /// Also write the list as JSON to FILE (`-`: stdout instead of the table).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `saggar check --backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CheckBackendArg {
    /// Host, CUDA and HIP.
    All,
    /// The host backend.
    Host,
    /// CUDA.
    Cuda,
    /// HIP.
    Hip,
}

/// `saggar perf`.
#[derive(Debug, Clone, Args)]
pub struct PerfArgs {
    /// Backend.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// Device ordinal within the backend (see `saggar devices`).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub device: usize,
    /// Several devices as one session group (`all` or ordinals such as 0,1): the first compiles, the
    /// others load, and each request goes to the least loaded device. Binding pinned only.
    #[arg(long, value_name = "LIST", conflicts_with = "device")]
    pub devices: Option<DeviceList>,
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// The trace.
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Threads sharing the one session.
    #[arg(long, value_name = "C", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub concurrency: u64,
    /// The buckets.
    #[command(flatten)]
    pub buckets: BucketArgs,
    /// Re-fit the buckets from the traffic while it runs: every EVERY requests, BUDGET buckets fitted to
    /// the requests since the last fit, compiled in the background and swapped in (the largest
    /// bucket stays). Off by default.
    #[arg(long, value_name = "EVERY:BUDGET")]
    pub live_buckets: Option<LiveBucketsArg>,
    /// ONNX models: pad the symbolic dimension SYMBOL (a sequence, say) up to the next of SIZES, with 0
    /// in every input that carries it, and slice the outputs back; requests of any extent up to the
    /// largest size then run from batch x SYMBOL buckets, with graphs. Without it a model with a
    /// symbolic dimension besides the batch compiles a program per shape.
    #[arg(long, value_name = "SYMBOL:SIZES")]
    pub pad_axis: Option<PadAxisArg>,
    /// Capture and replay graphs.
    #[arg(long, value_enum, default_value_t = Toggle::On)]
    pub graphs: Toggle,
    /// When graphs are captured: lazy (on a bucket's first request in each run context) or eager (every
    /// bucket in every run context at session creation, so no capture lands in a measured request).
    #[arg(long, value_enum, default_value_t = CaptureArg::Lazy)]
    pub capture: CaptureArg,
    /// How tensors are bound: pinned (host tensors, run_into), direct (device buffers, run_device), auto = pinned.
    #[arg(long, value_enum, default_value_t = BindingArg::Auto)]
    pub binding: BindingArg,
    /// The single copies of a run between pinned staging and the device of at most BYTES are made by
    /// a kernel through the mapped pinned buffers, larger ones by the copy engine; 0: always the copy
    /// engine.
    #[arg(long, value_name = "BYTES", default_value_t = saggar_dispatch::DEFAULT_KERNEL_COPIES_UP_TO as u64)]
    pub kernel_copies_up_to: u64,
    /// Compile cache directory [default: $XDG_CACHE_HOME/saggar or ~/.cache/saggar].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Requests checked against the eager CPU reference, spread over the trace (rel. tolerance 1e-3).
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub verify: u64,
    /// With --onnx: run every request on the inputs in DIR (ONNX TensorProto files input_0.pb, ... or
    /// NAME.pb) instead of generated ones.
    #[arg(long, value_name = "DIR", requires = "onnx")]
    pub load_inputs: Option<PathBuf>,
    /// With --onnx and --load-inputs: compare the first request's outputs with output_0.pb, ... in DIR
    /// (JSON field `check`; exit 1 on a mismatch).
    #[arg(long, value_name = "DIR", requires = "load_inputs")]
    pub check_outputs: Option<PathBuf>,
    /// Relative tolerance of --check-outputs: |actual - expected| <= atol + rtol * |expected|.
    #[arg(long, value_name = "R", default_value_t = 1e-3, value_parser = parse_tolerance, requires = "check_outputs")]
    pub rtol: f64,
    /// Absolute tolerance of --check-outputs.
    #[arg(long, value_name = "A", default_value_t = 1e-5, value_parser = parse_tolerance, requires = "check_outputs")]
    pub atol: f64,
    /// Also write the report as JSON to FILE (`-`: stdout instead of the table).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// With --onnx: the shape of an input, NAME:DIMS such as input_ids:1x128 (repeatable); fixes its
    /// symbolic dimensions other than the batch, whose extent comes from the trace.
    #[arg(long, value_name = "NAME:DIMS", requires = "onnx", conflicts_with = "load_inputs")]
    pub shapes: Vec<ShapeArg>,
    /// Untimed runs after startup and before the timed ones (each distinct batch in turn), so lazy
    /// graph captures and caches are warm [default: 2 per distinct batch and thread].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(0..=MAX_REQUESTS))]
    pub warmup_runs: Option<u64>,
    /// Untimed seconds of warmup runs (at least; with --warmup-runs, both minimums hold).
    #[arg(long, value_name = "S", default_value = "0.2", value_parser = parse_seconds)]
    pub warmup_time: f64,
    /// Timed seconds (at least): the trace is replayed from its start until both this and
    /// --iterations are reached.
    #[arg(long, value_name = "S", value_parser = parse_positive_seconds)]
    pub duration: Option<f64>,
    /// Time the stages of every K-th request (gather, enqueue, device span, sync, scatter, queue wait;
    /// pinned binding only); 0: none. Costs two event records per timed request.
    #[arg(long, value_name = "K", default_value_t = 8)]
    pub stage_every: u64,
    /// Write one JSON line per timed request to FILE (request, batch, thread, start, latency, path,
    /// bucket, stages).
    #[arg(long, value_name = "FILE")]
    pub export_times: Option<PathBuf>,
    /// Write the outputs of the first request of each distinct batch to DIR/batch_B/output_K.pb
    /// (ONNX TensorProto files); for --onnx models also its inputs as input_K.pb.
    #[arg(long, value_name = "DIR")]
    pub export_outputs: Option<PathBuf>,
    /// Progress on stderr.
    #[command(flatten)]
    pub progress: ProgressArgs,
    /// With --onnx: after the trace, time every step (kernel or matmul) of one program eagerly with
    /// events between steps, --iterations runs [default: 100], and print them by time with the ONNX
    /// nodes each computes (JSON field `profile`).
    #[arg(long, requires = "onnx")]
    pub dump_profile: bool,
    /// The batch whose program --dump-profile times [default: the trace's first batch].
    #[arg(long, value_name = "N", requires = "dump_profile", value_parser = clap::value_parser!(u64).range(1..=crate::trace::MAX_TRACE_BATCH))]
    pub dump_profile_batch: Option<u64>,
}

/// `--shapes NAME:DIMS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeArg {
    /// The input.
    pub name: String,
    /// Its extents.
    pub dims: Vec<u64>,
}

impl FromStr for ShapeArg {
    type Err = String;

    fn from_str(text: &str) -> Result<ShapeArg, String> {
        let form = "expected NAME:DIMS such as input_ids:1x128";
        let (name, dims) = text.rsplit_once(':').ok_or_else(|| format!("`{text}` has no `:`; {form}"))?;
        if name.is_empty() {
            return Err(format!("`{text}` names no input; {form}"));
        }
        let dims = dims
            .split('x')
            .map(|d| match d.parse::<u64>() {
                Ok(v) if (1..=1 << 24).contains(&v) => Ok(v),
                _ => Err(format!("`{d}` in `{text}` is not an extent from 1 to 16777216; {form}")),
            })
            .collect::<Result<Vec<u64>, String>>()?;
        Ok(ShapeArg { name: name.to_string(), dims })
    }
}

/// `--warmup-time`: finite, non-negative seconds, at most a day.
fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=86_400.0).contains(&v) => Ok(v),
        _ => Err(format!("`{text}` is not a number of seconds from 0 to 86400")),
    }
}

/// `--duration`: positive seconds, at most a day.
fn parse_positive_seconds(text: &str) -> Result<f64, String> {
    match parse_seconds(text) {
        Ok(v) if v > 0.0 => Ok(v),
        _ => Err(format!("`{text}` is not a number of seconds above 0 and at most 86400")),
    }
}

/// `--rtol`, `--atol`: a finite, non-negative number.
fn parse_tolerance(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("`{text}` is not a tolerance; expected a non-negative number such as 1e-3")),
    }
}

/// `--devices`: some ordinals, or all of the backend's devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceList {
    /// Every device of the backend.
    All,
    /// These ordinals, in this order, without repeats.
    Some(Vec<usize>),
}

impl DeviceList {
    /// The ordinals on backend `B` (every device for `all`); fails when there are none.
    pub fn ordinals<B: saggar_device::Backend>(&self) -> crate::error::Result<Vec<usize>> {
        let ordinals: Vec<usize> = match self {
            DeviceList::All => (0..B::enumerate()?.len()).collect(),
            DeviceList::Some(list) => list.clone(),
        };
        if ordinals.is_empty() {
            return Err(crate::error::CliError::failure(
                format!("the {} backend has no devices", B::KIND),
                "run `saggar devices`",
            ));
        }
        Ok(ordinals)
    }
}

/// Opens the devices `ordinals` of backend `B` at once, one thread each (creating a GPU's context
/// takes a while, and N of them one after another would add up), in order.
pub fn open_devices<B: saggar_device::Backend>(ordinals: &[usize]) -> crate::error::Result<Vec<B::Device>> {
    let opened: Vec<saggar_device::Result<B::Device>> = std::thread::scope(|scope| {
        let handles: Vec<_> = ordinals.iter().map(|&o| scope.spawn(move || B::open(o))).collect();
        handles.into_iter().map(|h| h.join().expect("opening a device does not panic")).collect()
    });
    Ok(opened.into_iter().collect::<saggar_device::Result<Vec<_>>>()?)
}

impl FromStr for DeviceList {
    type Err = String;

    fn from_str(text: &str) -> Result<DeviceList, String> {
        if text == "all" {
            return Ok(DeviceList::All);
        }
        let mut ordinals = Vec::new();
        for part in text.split(',') {
            let ordinal: usize = part
                .trim()
                .parse()
                .map_err(|_| format!("`{part}` is not a device ordinal; expected `all` or a list such as 0,1,2"))?;
            if !ordinals.contains(&ordinal) {
                ordinals.push(ordinal);
            }
        }
        Ok(DeviceList::Some(ordinals))
    }
}

/// `saggar warmup`.
#[derive(Debug, Clone, Args)]
pub struct WarmupArgs {
    /// Compile cache directory to fill [default: $XDG_CACHE_HOME/saggar or ~/.cache/saggar].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Devices to warm: `all` or ordinals such as 0,1,2 (several: one compile, the others load).
    #[arg(long, value_name = "LIST", default_value = "0")]
    pub devices: DeviceList,
    /// Backend.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// The buckets.
    #[command(flatten)]
    pub buckets: BucketArgs,
    /// The trace (only used to fit --buckets adaptive:K, exactly as `saggar perf` does).
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Also write the summary as JSON to FILE (`-`: stdout instead of the table).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Progress on stderr.
    #[command(flatten)]
    pub progress: ProgressArgs,
}

/// `--model-control-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModelControlArg {
    /// Load every model of the repository at start; no load or unload through the API.
    None,
    /// Load models through the repository API (and --load-model at start).
    Explicit,
}

/// `saggar serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The model repository: DIR/<model>/<version>/model.onnx, optional DIR/<model>/config.pbtxt.
    #[arg(long, value_name = "DIR")]
    pub model_repository: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: std::net::IpAddr,
    /// Inference over HTTP/REST.
    #[arg(long, default_value_t = 8000)]
    pub http_port: u16,
    /// Inference over gRPC.
    #[arg(long, default_value_t = 8001)]
    pub grpc_port: u16,
    /// Prometheus metrics (`/metrics`).
    #[arg(long, default_value_t = 8002)]
    pub metrics_port: u16,
    /// Backend.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// Devices: `all` or ordinals such as 0,1 (a model's instance_group gpus win).
    #[arg(long, value_name = "LIST", default_value = "all")]
    pub devices: DeviceList,
    /// Compile cache directory shared by every model [default: $XDG_CACHE_HOME/saggar or ~/.cache/saggar].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Largest request body (HTTP) or message (gRPC), in bytes; larger ones are refused before they are read.
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 20)]
    pub max_request_bytes: usize,
    /// Most requests waiting per model; more are answered 503 / UNAVAILABLE at once.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_queue: usize,
    /// How models are loaded.
    #[arg(long, value_enum, default_value_t = ModelControlArg::None)]
    pub model_control_mode: ModelControlArg,
    /// A model to load at start with --model-control-mode explicit (repeatable).
    #[arg(long, value_name = "MODEL")]
    pub load_model: Vec<String>,
    /// Seconds a shutdown waits for requests in flight.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub shutdown_timeout: f64,
}

/// `saggar cache ...`.
#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// List entries: key fields, size, age.
    #[command(after_help = CACHE_LS_EXAMPLES)]
    Ls(CacheLsArgs),
    /// Verify every entry's header, key and payload checksum (exit 1 if any is bad).
    #[command(after_help = CACHE_VERIFY_EXAMPLES)]
    Verify(CacheVerifyArgs),
    /// Remove corrupt entries, stale temp files of dead writers and orphan lock files; optionally
    /// trim to a size.
    #[command(after_help = CACHE_GC_EXAMPLES)]
    Gc(CacheGcArgs),
    /// Print the cache key (and entry file) a model, bucket and device would use.
    #[command(after_help = CACHE_KEY_EXAMPLES)]
    Key(CacheKeyArgs),
    /// Import the entries (`*.sce` files) of another cache directory, each verified first: how a
    /// pre-seeded cache reaches every replica (exit 1 if any file was refused).
    #[command(after_help = CACHE_IMPORT_EXAMPLES)]
    Import(CacheImportArgs),
}

/// `saggar cache import`.
#[derive(Debug, Clone, Args)]
pub struct CacheImportArgs {
    /// Compile cache directory to import into (created if missing) [default: $XDG_CACHE_HOME/saggar or ~/.cache/saggar].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// The folder whose entry files are imported (a cache directory `saggar warmup` filled, or a copy of one).
    #[arg(long, value_name = "DIR")]
    pub from: PathBuf,
    /// Also write the report as JSON to FILE (`-`: stdout instead of the table).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `saggar cache ls`.
#[derive(Debug, Clone, Args)]
pub struct CacheLsArgs {
    /// Compile cache directory [default: $XDG_CACHE_HOME/saggar or ~/.cache/saggar].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Also write the listing as JSON to FILE (`-`: stdout instead of the table).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `saggar cache verify`.
#[derive(Debug, Clone, Args)]
pub struct CacheVerifyArgs {
    /// Compile cache directory [default: $XDG_CACHE_HOME/saggar or ~/.cache/saggar].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Also write the report as JSON to FILE (`-`: stdout instead of the table).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `saggar cache gc`.
#[derive(Debug, Clone, Args)]
pub struct CacheGcArgs {
    /// Compile cache directory [default: $XDG_CACHE_HOME/saggar or ~/.cache/saggar].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Also evict least recently used entries until the entries total at most BYTES.
    #[arg(long, value_name = "BYTES")]
    pub max_bytes: Option<u64>,
    /// Age in seconds after which a temp file whose writer is gone counts as stale.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub stale_after: u64,
    /// Also write the report as JSON to FILE (`-`: stdout instead of the table).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `saggar cache key`.
#[derive(Debug, Clone, Args)]
pub struct CacheKeyArgs {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// The bucket (batch rows the program is compiled for).
    #[arg(long, value_name = "B", value_parser = parse_max_batch)]
    pub bucket: u64,
    /// Backend (with --arch: required, not auto).
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// Device ordinal whose architecture to use [default: 0].
    #[arg(long, value_name = "N", conflicts_with = "arch")]
    pub device: Option<usize>,
    /// Architecture to use without opening a device (sm_90, gfx942, host-v1, ...).
    #[arg(long, value_name = "ARCH")]
    pub arch: Option<String>,
    /// With --onnx: take every symbolic dimension besides the batch from the inputs in DIR
    /// (input_0.pb, ... or NAME.pb), as a session compiling per shape keys that program.
    #[arg(long, value_name = "DIR", requires = "onnx")]
    pub load_inputs: Option<PathBuf>,
    /// Compile cache directory the entry path is shown for [default: $XDG_CACHE_HOME/saggar or ~/.cache/saggar].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Also write the key as JSON to FILE (`-`: stdout instead of the text).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn device_lists_parse() {
        assert_eq!("all".parse::<DeviceList>().unwrap(), DeviceList::All);
        assert_eq!("2,0,2".parse::<DeviceList>().unwrap(), DeviceList::Some(vec![2, 0]));
        assert!("0,x".parse::<DeviceList>().is_err());
        assert!("".parse::<DeviceList>().is_err());
    }

    #[test]
    fn every_command_has_an_example() {
        let root = Cli::command();
        let mut commands = vec![root.clone()];
        while let Some(command) = commands.pop() {
            if command.is_hide_set() {
                continue;
            }
            let help = command.get_after_help().map(ToString::to_string).unwrap_or_default();
            assert!(help.contains("Examples:"), "`{}` has no example", command.get_name());
            commands.extend(command.get_subcommands().cloned());
        }
    }
}
