//! saggar-models: saggar's reference compiler and model family, so the whole stack runs end to end on
//! every backend.
#![doc = include_str!("../README.md")]
//!
//! # Models
//! Two families, configured in JSON ([`ModelConfig`], format in `docs/models.md`):
//! - `recsys`, a recommender: dense inputs `dense_{i}` `[batch, w]` f32 and sparse inputs `sparse_{j}`
//!   `[batch, k]` i32 indexing embedding tables; embedding-bag sums, concatenation, then an MLP to
//!   `score` `[batch, 1]` (and optionally `features`, the last hidden layer). The default is the
//!   190-input recommender the benchmarks use.
//! - `mlp`: `x` `[batch, in]` through hidden ReLU layers to `y` `[batch, out]`.
//!
//! Weights ([`Weights`]) come from a seed (SplitMix64, documented) or a safetensors file checked
//! against the config, and export to safetensors with documented names for PyTorch peers.
//!
//! # Compiler
//! [`ReferenceCompiler`] implements [`saggar_dispatch::ProgramCompiler`] for every backend:
//! CUDA/HIP C++ specialised per bucket and compiled by NVRTC/hipRTC, or a plan of host kernels on the
//! host backend. Artifacts are a checked header plus the code object ([`artifact`]); weights are
//! uploaded once per device at load and shared by all bucket programs ([`ModelProgram`]).
//!
//! # Reference
//! [`reference_forward`] runs a model eagerly on the CPU; [`generate_inputs`] makes deterministic
//! inputs; [`compare_outputs`] compares device outputs with the reference.
//!
//! # Example
//! ```
//! use saggar_device::host::HostBackend;
//! use saggar_device::{Backend, Device, DeviceBuffer, Stream};
//! use saggar_dispatch::{CompileRequest, Program, ProgramCompiler};
//! use saggar_models::{ModelConfig, ReferenceCompiler, compare_outputs, generate_inputs, reference_forward};
//!
//! let config = ModelConfig::from_json(r#"{"model": "mlp", "input": 16, "hidden": [32], "output": 4}"#)?;
//! let compiler = ReferenceCompiler::from_config(config.clone())?;
//! let device = HostBackend::open(0)?;
//! let dims = config.input_dims(3);
//! let request = CompileRequest::new(&dims, Some(3));
//! let artifact = ProgramCompiler::<HostBackend>::compile(&compiler, &device, &request)?;
//! let program = ProgramCompiler::<HostBackend>::load(&compiler, &device, &request, &artifact)?;
//!
//! let inputs = generate_inputs(&config, 3, 7);
//! let x = device.alloc(inputs[0].len())?;
//! let y = device.alloc(3 * 4 * 4)?;
//! let scratch = device.alloc(program.scratch_bytes())?;
//! let stream = device.create_stream()?;
//! stream.upload(&inputs[0], x.as_slice())?;
//! // SAFETY: every buffer outlives the synchronize below.
//! unsafe { program.launch(&stream, &[x.as_slice()], &[y.as_slice()], scratch.as_slice())? };
//! stream.synchronize()?;
//! let mut out = vec![0u8; y.len()];
//! stream.download(y.as_slice(), &mut out)?;
//!
//! let expected = reference_forward(&config, compiler.weights(), &inputs, 3)?;
//! assert!(compare_outputs(&expected, &[out], 1e-4)?.all_match());
//! # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod artifact;
mod codegen;
mod compiler;
mod config;
mod error;
mod host_kernels;
mod plan;
mod prng;
mod reference;
mod weights;

pub use compiler::{COMPILER_NAME, ModelProgram, ReferenceCompiler};
pub use config::{
    BATCH_DIM, DEFAULT_SEED, LayerShape, MAX_BATCH, MAX_EXTENT, MAX_FEATURES, MAX_INPUTS, MAX_TENSOR_ELEMENTS,
    MlpConfig, ModelConfig, ModelKind, RecsysConfig, WeightSource,
};
pub use error::{ArtifactError, ModelError};
pub use plan::{ALIGN, GemmVariant};
pub use reference::{OutputComparison, compare_outputs, generate_inputs, le_f32s, reference_forward};
pub use weights::{METADATA_CONFIG, METADATA_LAYOUT, Tensor, TensorLayout, Weights, tensor_layouts};
