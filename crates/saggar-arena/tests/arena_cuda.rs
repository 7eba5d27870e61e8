//! The backend-generic arena checks on CUDA (GPU bundle); skipped with the reason where there is no
//! CUDA device.
#![cfg(feature = "cuda")]

mod common;

arena_backend_tests!(saggar_device::cuda::CudaBackend);
