//! saggar: a GPU inference execution runtime, as a family of reusable crates.
#![doc = include_str!("../README.md")]
//!
//! # Modules
//!
//! This facade re-exports every saggar crate under one name, so an application can depend on `saggar` alone
//! while a library that needs one piece (say, only the compile cache) depends on that crate directly.
//!
//! | module | crate | job |
//! |---|---|---|
//! | [`device`] | `saggar-device` | devices, streams, events, memory, modules, stream capture, executable graphs |
//! | [`shape`] | `saggar-shape` | tensor specs, shape hashing, batch buckets, pad and slice plans |
//! | [`cache`] | `saggar-cache` | compile once, load everywhere: locked, atomic, checked on-disk cache |
//! | [`arena`] | `saggar-arena` | pinned staging and one-copy inputs, leased per request |
//! | [`dispatch`] | `saggar-dispatch` | sessions, run paths, graph capture and replay, pointer drift, groups |
//! | [`models`] | `saggar-models` | the reference compiler and model family (recsys, MLP) |
//! | [`onnx`] | `saggar-onnx` | ONNX import, shape inference, constant folding, host lowering |
//! | `serve` (feature `serve`) | `saggar-serve` | the KServe v2 / Open Inference Protocol over HTTP and gRPC, dynamic batching, metrics |
//!
//! [`prelude`] gathers the names most programs use.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use saggar_arena as arena;
pub use saggar_cache as cache;
pub use saggar_device as device;
pub use saggar_dispatch as dispatch;
pub use saggar_models as models;
pub use saggar_onnx as onnx;
/// The server of `saggar serve` (feature `serve`: it brings an async runtime, HTTP and gRPC).
#[cfg(feature = "serve")]
#[cfg_attr(docsrs, doc(cfg(feature = "serve")))]
pub use saggar_serve as serve;
pub use saggar_shape as shape;

pub mod prelude;
