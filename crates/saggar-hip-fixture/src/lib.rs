//! **TEST FIXTURE — never a product, never published, never shipped.** A shared library that exports
//! the `hip*` and `hiprtc*` symbols saggar's HIP backend imports, implemented over the CUDA driver API and
//! NVRTC, so that the HIP backend's own, unchanged code, and its conformance suite, run on an NVIDIA GPU.
//!
//! # Why
//! No AMD GPU is reachable where saggar is developed, so without this the HIP backend's call sequences
//! (capture, instantiate, update, launch, pinned copies, hipRTC) would first run on real hardware in a
//! user's hands. HIP's own NVIDIA path maps each `hip*` call onto the matching CUDA call; this fixture does
//! the same at the library boundary. The GPU bundle (`cargo xtask gpu-bundle`) copies it, under the names
//! the HIP backend's test binaries load (`libamdhip64.so.5`, `libamdhip64.so`, `libhiprtc.so`), into
//! `hip-fixture/`, and `run.sh` runs those binaries with that directory first on the library path. The
//! results are reported as "HIP backend on CUDA via fixture", never as an AMD result.
//!
//! # What it proves, and what it does not
//! It proves the HIP backend's logic and call sequences: which calls it makes, in which order, with which
//! arguments, and what it does with each answer, against a real GPU runtime with real stream capture and
//! real executable graphs. It does not prove AMD-specific behaviour: ROCm's graph performance and
//! `hipGraphExecUpdate` costs, HIP's non-atomic updates (CUDA's are atomic), AMD code-object formats and
//! comgr, ROCm's allocator, or any `hipDeviceProp_t` value an AMD GPU reports. `docs/amd.md` says more.
//!
//! # Design
//! - `abi`: the HIP ABI (codes, flags, `hipDeviceProp_t` and `hipKernelNodeParams` in hip-runtime-sys
//!   0.1.2's layout, checked field by field). The fixture does not link hip-runtime-sys (that would link
//!   libamdhip64, which this library replaces).
//! - `errors`: HIP's error names, the CUDA → HIP error table (every pair has the same number and
//!   meaning; a CUDA result HIP has no code for is `hipErrorUnknown`, reported on standard error), and
//!   `errors::not_supported`, where every unmappable call or argument ends.
//! - `driver`: libcuda and libnvrtc loaded at run time through cudarc (`fallback-dynamic-loading`, as
//!   saggar's CUDA backend), and HIP's per-thread current device over primary contexts.
//! - `runtime` / `rtc`: the exported functions, one per HIP / hipRTC symbol.
//! - `blaslt`: the hipBLASLt functions the HIP backend's BLAS calls, over cuBLASLt (cudarc's `cublaslt`
//!   bindings), numbering translated.
//! - `envelope`: the "code object" the fixture's hipRTC returns: NVRTC's PTX inside a minimal ELF file
//!   shaped so that the HIP backend's unchanged image checks accept it.
//! - `table`: the list of every exported symbol and whether it is mapped (naming the CUDA calls) or not
//!   supported; `saggar_hip_fixture_version` (the marker the HIP backend looks for) and
//!   `saggar_hip_fixture_symbols` (the table as text).
//!
//! # Safety
//! Every exported function that takes pointers is `unsafe extern "C"` with HIP's contract in its
//! `# Safety` section; every `unsafe` block carries a `// SAFETY:` comment. No Rust panic crosses the C
//! ABI: each body runs under `catch_unwind`, and a panic becomes `hipErrorUnknown`.

mod abi;
mod blaslt;
mod driver;
mod envelope;
mod errors;
mod graph;
mod launch;
mod rtc;
mod runtime;
mod table;
