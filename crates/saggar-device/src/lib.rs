//! saggar-device: one Rust API over HIP, CUDA and a host backend that reproduces GPU hazards.
#![doc = include_str!("../README.md")]
//!
//! # Design
//! The API is a trait with associated types ([`Backend`]), in the manner of wgpu-hal: each backend
//! is a type whose associated types are its device, stream, event, buffers, module, kernel, graph and
//! executable graph, each implementing the trait of the same name. Code above is generic over
//! `B: Backend`, so nothing on the launch path is a virtual call; a program that picks its backend at
//! run time does so once, with [`visit_backend`].
//!
//! Device memory is addressed by [`DevicePtr`] numbers, never host pointers, and ranges of it by
//! [`DeviceSlice`] values that carry no lifetime, because that is what a captured graph holds. Kernel
//! arguments are typed ([`KernelArg`]), and pointer arguments are explicit, so the graph layer knows
//! which parameters can drift. Code objects carry their kernels' signatures ([`CodeObject`]), so every
//! launch is checked in number and kind before it reaches a vendor API.
//!
//! Errors cover what the caller cannot rule out in advance (a missing driver, an out-of-memory, an
//! asynchronous fault) and every bad input; nothing panics on bad input. Destructors cannot return
//! errors, so they record them on their device ([`Device::take_deferred_errors`]).
//!
//! Matrix multiplication goes through the vendor's BLAS-Lt library ([`blas`]: cuBLASLt, hipBLASLt,
//! loaded at run time; the host backend has its own GEMM), with a handle per device
//! ([`Device::create_blas`]) that plans each description outside capture and takes the workspace with
//! every call.
//!
//! What can break host memory safety is `unsafe`: asynchronous copies to and from pinned host memory,
//! kernel launches and graph replays (see [`api`] for the contract).
//!
//! # Backends
//! - [`host`], always built: a simulated GPU for tests and laptops.
//! - `cuda` (feature `cuda`, on by default): NVIDIA through cudarc's driver and NVRTC bindings, loading
//!   libcuda at run time, so it builds everywhere and reports "no CUDA driver found" where there is none.
//! - `hip` (feature `hip`): AMD through hip-runtime-sys; links libamdhip64.
//!
//! # Conformance
//! With the `conformance` feature, `conformance` holds one test suite, generic over the backend,
//! that every backend runs (`conformance_tests!`). It is a test harness: enable it from
//! dev-dependencies only.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod api;
pub mod blas;
pub mod builtin;
pub mod code;
#[cfg(feature = "conformance")]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub mod conformance;
#[cfg(feature = "conformance")]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub mod conformance_blas;
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub mod cuda;
mod error;
pub mod float16;
#[cfg(any(feature = "cuda", feature = "hip"))]
pub mod gpu;
#[cfg(feature = "hip")]
#[cfg_attr(docsrs, doc(cfg(feature = "hip")))]
pub mod hip;
pub mod host;
mod lost;
mod pinning;
pub mod rules;
mod select;
mod types;

pub use api::{
    Backend, CaptureStatus, Device, DeviceBuffer, Event, Graph, GraphExec, Kernel, Module, PinnedBuffer, Stream,
};
pub use blas::{
    Blas, BlasConfig, DEFAULT_TUNE_CANDIDATES, Epilogue, MATMUL_TYPES, MatmulDesc, MatmulOperands, MatmulPrecision,
    MatmulType, TUNE_MAX_FLOP, TUNE_MIN_FLOP,
};
pub use code::{CodeFormat, CodeObject, KernelSource};
pub use error::{Error, Result};
pub use lost::lose_device;
pub use pinning::{PinGuard, check_pinned, pinned_device};
pub use select::{BackendChoice, BackendReport, BackendVisitor, enumerate, probe_all, resolve, visit_backend};
pub use types::{
    BackendKind, CaptureMode, DeviceInfo, DevicePtr, DeviceSlice, Dim3, KernelArg, KernelSignature, LaunchConfig,
    MemoryInfo, ParamKind,
};
