//! The names most programs that serve models with saggar use: `use saggar::prelude::*;`.
//!
//! It holds the traits whose methods are called on devices, streams and programs (so they are in
//! scope), the session and its configuration, the tensors a request passes, the compiler
//! interface, the cache and its key, and the shape types a model is declared with.
//!
//! ```
//! use saggar::prelude::*;
//!
//! let device = HostBackend::open(0)?;
//! let spec = TensorSpec::new("x", DType::F32, [Dim::symbolic("batch"), Dim::Fixed(4)]);
//! assert_eq!(spec.name(), "x");
//! assert_eq!(device.info().ordinal, 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub use saggar_cache::{CacheConfig, CacheKey, CompileCache, ModelHash};
pub use saggar_device::host::HostBackend;
pub use saggar_device::{Backend, Device, DeviceBuffer, DeviceSlice, Module, PinnedBuffer, Stream};
pub use saggar_dispatch::{
    BindingMode, BucketSpec, CompileRequest, CompilerError, CompilerIdentity, DeviceBinding, DeviceTensor,
    DispatchError, GraphConfig, HostTensor, ModelSpec, OwnedTensor, Program, ProgramCompiler, RunInfo, RunPath,
    Session, SessionConfig, SessionGroup,
};
pub use saggar_shape::{BucketPolicy, DType, Dim, Signature, Splitting, TensorSpec};
