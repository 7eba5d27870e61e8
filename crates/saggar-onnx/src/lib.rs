//! saggar-onnx: ONNX models imported, checked and run through saggar sessions.
//!
//! # Pipeline
//! 1. [`OnnxModel::load`] reads a `.onnx` file (protobuf, [`proto`]) with its external data (side
//!    files inside the model's folder only), checks sizes before allocating, and builds the [`ir`]
//!    graph: values with element types and symbolic dimensions from `dim_param`, nodes with their
//!    parsed [`ops::Op`]. An op outside the declared op set, an opset outside 1..=24 or an attribute
//!    value no op implements is an [`OnnxError`] here, at import, naming the node.
//! 2. The graph passes infer shapes and types, fold constants (the Shape/Gather/Concat chains
//!    exporters emit), remove Identity/Dropout and dead nodes, fold BatchNormalization into Conv.
//! 3. [`OnnxCompiler`] implements saggar-dispatch's `ProgramCompiler`: per concrete input shape it
//!    specialises the graph (every dimension known, every shape chain folded), groups nodes into
//!    fused kernels (`fuse`), plans activation memory by liveness and lowers each group (`lower`):
//!    to a registered host kernel on the host backend, to generated CUDA/HIP kernels (one source per
//!    model, compiled once) on GPUs; MatMul and Gemm go through the backend's BLAS-Lt library
//!    (cuBLASLt, hipBLASLt, the host's own GEMM) where the operands allow. Initializers are uploaded
//!    once per device and shared by every program.
//! 4. [`OnnxCompiler::profile`] runs one program eagerly with timed events between its steps and
//!    reports each step's median time with the ONNX nodes it computes (`saggar perf --dump-profile`).
//!
//! # Layers
//! Each imports only the ones below it: `import` (the ONNX file format) < [`ops`] (the op set, one
//! folder per family with its kernels) < `graph` (the IR, its import, the passes) < `plan` (what a
//! lowered program is) < `fuse` (multi-node fusions) < `lower` (groups to steps) < the compiler.
//!
//! [`tensor_pb`] reads and writes ONNX `TensorProto` files (`input_0.pb`) for test data.

#![doc = include_str!("../README.md")]

#[cfg(target_endian = "big")]
compile_error!("saggar-onnx reads tensors in place as little-endian bytes");

pub mod builder;
mod compiler;
pub mod error;
mod fuse;
#[cfg(test)]
mod gpu_emulation;
mod graph;
mod import;
mod lower;
pub mod ops;
mod plan;
pub mod synthetic;
pub mod tensor;

pub use graph::ir;
pub use import::{proto, tensor_pb};

pub use compiler::profile::{MAX_PROFILE_ITERATIONS, OpsTotal, ProgramProfile, StepProfile};
pub use compiler::run::run_on_host;
pub use compiler::{
    ARTIFACT_VERSION, COMPILER_NAME, Calibration, DEFAULT_BLAS_WORKSPACE_BYTES, OnnxCompiler, OnnxOptions, OnnxProgram,
    Precision,
};
pub use error::OnnxError;
pub use fuse::attention::AttentionKernel;
pub use graph::build::{MAX_IR_VERSION, MIN_IR_VERSION};
pub use graph::model::{ModelMetadata, OnnxModel, RUN_ONCE_MAX_ELEMENTS};
pub use graph::passes::conv_gemm::ConvEngine;
pub use graph::passes::segments::DEFAULT_MAX_LOOP_ITERATIONS;
pub use import::limits::ImportLimits;
pub use lower::blas::GemmEngine;
pub use plan::PlanSummary;
pub use saggar_device::MatmulPrecision;
pub use tensor::{Tensor, TensorData};
pub use tensor_pb::{NamedTensor, read_tensor_pb, write_tensor_pb};
