//! saggar-dispatch: the execution dispatcher.
#![doc = include_str!("../README.md")]
//!
//! # Design
//!
//! A [`Session`] serves one model on one device. At creation it detects the batch axis, chooses
//! buckets (a saggar-shape policy), and precompiles every bucket through saggar-cache: cached artifacts
//! are loaded in parallel, misses compiled one at a time (in parallel for a compiler that declares
//! itself thread-safe, once per model for one whose artifact serves every bucket: see
//! [`CompilerCapabilities`]), all pinned to the session's device. Each `run` then takes one of three
//! paths, each counted:
//!
//! - **ultra-fast**: the same symbolic dimensions, binding mode and actual batch as the run context's
//!   last run: reuse its plans, rebind, replay;
//! - **fast**: a program is ready for the bucket: plan padding and slicing, bind, replay (capturing the
//!   graph on first use);
//! - **standard**: full validation by name, splitting of batches above the largest bucket, and, for
//!   a model with other symbolic dimensions, its shape's program from a bounded table (made through
//!   the cache under the shape's own lock on first use, least recently used out) replaying a graph
//!   per shape.
//!
//! Graphs are kept per run context, keyed by (program, [`BindingMode`]) and tagged with the mode
//! that captured them, so an entry is only ever replayed by its own mode:
//!
//! - [`BindingMode::PinnedCopy`] (host tensors): one gather into pinned staging, a graph holding the
//!   single upload, the program on the arena's stable slots, and the single download; outputs are
//!   sliced back to the real batch. Arena addresses never change, so these graphs never drift.
//! - [`BindingMode::DirectBind`] (device tensors at an exact bucket): the caller's pointers are baked
//!   and compared on every run; drift tries an in-place update, then a re-capture; more than
//!   [`GraphConfig::max_consecutive_drift`] CONSECUTIVE mismatches make the entry fall back to eager
//!   launches; a match resets the count.
//! - [`BindingMode::Stabilized`] (device tensors that need padding or slicing): copied into
//!   persistent slots before replay and back after (XLA's address stabilization). Outputs that need
//!   slicing are never direct-bound.
//!
//! A [`Request`] ([`Session::request`]) serves callers that can write their inputs straight into
//! pinned staging: it keeps a leased run context for one batch size, hands out views of the inputs'
//! real rows in staging and of the outputs' in read-back, and each run pads in place, sends one
//! copy, replays the pinned-copy graph and brings the outputs back with one copy: no gather, no
//! scatter. The views borrow the request, so none outlives it or a later run.
//!
//! Buckets may form a grid: batch buckets by buckets of one more symbolic dimension declared a
//! [`PaddedAxis`] (a sequence), with a pad value per input. Host requests are padded along it with
//! those values (the batch still by repeating its last row) and every output that carries it is
//! sliced back; an axis not declared is never padded (its model is served per shape). With
//! [`LiveBuckets`], the session counts the sizes it serves (relaxed atomics) and a background
//! thread re-fits the buckets every interval, compiles the new cells through the cache and swaps
//! the bucket table atomically; runs in flight keep the table they read.
//!
//! Concurrency: a session is `Send + Sync`; each run leases its own context (stream, arena, scratch,
//! graphs), so there is no global run lock and results never mix. A [`SessionGroup`] runs one
//! session per device and compiles once for all of them.
//!
//! The bugs the seeds fixed after the fact are impossible here by construction and pinned by tests
//! (see `tests/seed_regressions.rs`).

#![cfg_attr(docsrs, feature(doc_cfg))]

mod binding;
mod buckets;
mod builder;
mod compiler;
mod config;
mod context;
mod error;
mod graphs;
mod group;
mod path_device;
mod path_host;
mod path_padded;
mod per_shape;
mod plan;
mod programs;
mod refit;
mod request;
pub mod resident;
mod segments;
mod session;
mod slab;
mod staged;
mod stats;
pub mod steps;
mod tensors;
mod timing;

pub use binding::DeviceBinding;
pub use builder::SessionBuilder;
pub use compiler::{
    CompileRequest, CompilerCapabilities, CompilerError, CompilerIdentity, MAX_VALUE_INPUT_BYTES, ModelSpec, Program,
    ProgramCompiler,
};
pub use config::{
    BucketSpec, CaptureWhen, GRAPH_NODE_BYTES, GraphConfig, LiveBuckets, PadValue, PaddedAxis, SessionConfig,
    SessionConfigBuilder,
};
pub use error::{DispatchError, FailureKind, FileError, Result};
pub use group::{Routing, SessionGroup};
pub use programs::{ProgramSource, Progress, SAGGAR_FORMAT_VERSION, cache_key, model_cache_key};
pub use request::RequestLimits;
pub use saggar_arena::{DEFAULT_KERNEL_COPIES_UP_TO, GatherOptions, GatherStats};
pub use saggar_cache::ModelHash;
pub use segments::{Repeat, Segment, SegmentSource, Segments};
pub use session::{Pending, Session};
pub use staged::{Request, TensorRef};
pub use stats::{FailureCounts, LatencyHistogram, StatsSnapshot};
pub use tensors::{BindingMode, DeviceTensor, HostTensor, OwnedTensor, RunInfo, RunPath};
pub use timing::{CopyTimes, StageTimer, StageTimes};
