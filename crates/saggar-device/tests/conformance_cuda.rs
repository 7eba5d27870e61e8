//! The conformance suite on the CUDA backend. On a machine with an NVIDIA GPU every test runs on device 0
//! (select another with `CUDA_VISIBLE_DEVICES`); without one, each test prints why it is skipped.

#![cfg(feature = "cuda")]

saggar_device::conformance_tests!(saggar_device::cuda::CudaBackend);
