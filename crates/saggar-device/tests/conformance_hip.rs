//! The conformance suite on the HIP backend. On a machine without an AMD GPU every test prints
//! `SKIPPED hip::<test>: hip backend unavailable: no HIP device found: ...` and returns.
#![cfg(feature = "hip")]

saggar_device::conformance_tests!(saggar_device::hip::HipBackend);
