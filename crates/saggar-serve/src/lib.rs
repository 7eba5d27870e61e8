//! saggar-serve: the KServe v2 / Open Inference Protocol over HTTP and gRPC for saggar sessions.
#![doc = include_str!("../README.md")]
//!
//! # Design
//!
//! - **One request path.** Both transports decode a request into an [`InferRequest`] (every size
//!   checked before anything of that size is allocated) and call [`LoadedModel::infer`]: the
//!   request is checked against the model (names, datatypes, shapes, batch), queued, merged with
//!   others into one batch, run once through the model's sessions, and its rows split back.
//! - **Dynamic batching** (`batcher.rs`, `merge.rs`): one bounded queue per model; executor threads
//!   (`instance_group` `count` per device, every device's from the same queue) take the oldest
//!   request and every queued one with the same merge key while the rows fit `max_batch_size`,
//!   waiting up to `max_queue_delay_microseconds`. The batch is written in place (`runner.rs`):
//!   each request's rows straight into a staged session request's pinned staging, its outputs
//!   copied once from the pinned read-back buffer into each request's response; the session pads
//!   the batch to its bucket and replays that bucket's graph. Requests of a padded axis (a
//!   sequence) merge within one bucket of that axis, padded to it.
//! - **Backends chosen at run time** (`executor.rs`): a model's sessions sit behind the object-safe
//!   [`Executor`] trait, so the server is compiled once, not once per backend.
//! - **Triton's conventions**: the repository layout ([`repository`]), `config.pbtxt` ([`config`],
//!   read by a small text-format reader, [`pbtxt`]), the gRPC service's messages and field numbers
//!   (`grpc/proto.rs`), metric names and labels ([`metrics`]).
//! - **Faults**: bad requests are 4xx (gRPC `INVALID_ARGUMENT`, `NOT_FOUND`) with a message naming
//!   what is wrong; a full queue is 503 (`UNAVAILABLE`) at once; the server keeps serving.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod batcher;
pub mod config;
pub mod datatype;
mod error;
mod executor;
pub mod grpc;
mod http;
mod load;
mod merge;
pub mod metrics;
mod model;
pub mod pbtxt;
pub mod repository;
mod runner;
mod server;
mod state;
pub mod tensor;

pub use error::{Result, ServeError};
pub use executor::{DeviceMemory, Executor};
pub use model::{InferRequest, InferResponse, LoadedModel, TensorMeta};
pub use server::{ServeOptions, ServerHandle, run};
pub use state::{IndexEntry, ModelControl, ModelState, State};

/// The `platform` of every model in metadata and configuration.
pub const PLATFORM: &str = "saggar_onnx";
