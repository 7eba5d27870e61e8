//! Both models end to end on CUDA: NVRTC compiles the generated source per bucket, and the outputs
//! equal the CPU reference within 1e-4, for both GEMM variants, several buckets, graph capture and
//! replay, out-of-range indices, and bad artifacts. Without a CUDA device each test prints
//! `SKIPPED cuda::<test>: <reason>` and returns.

#![cfg(feature = "cuda")]

mod common;

use common::*;
use saggar_device::cuda::CudaBackend;
use saggar_device::host::HostBackend;
use saggar_device::{Backend, BackendKind, CodeFormat, Device};
use saggar_models::artifact::ArtifactHeader;
use saggar_models::{ArtifactError, GemmVariant, ModelError, ModelKind, ReferenceCompiler, generate_inputs};

fn open(test: &str) -> Option<<CudaBackend as Backend>::Device> {
    saggar_device::conformance::open_or_skip::<CudaBackend>(test)
}

#[test]
fn default_recsys_matches_reference_at_several_buckets() {
    let Some(device) = open("default_recsys_matches_reference_at_several_buckets") else { return };
    for gemm in [GemmVariant::SplitK, GemmVariant::Naive] {
        let compiler = ReferenceCompiler::from_config(ModelKind::Recsys.default_config()).unwrap().with_gemm(gemm);
        check_end_to_end::<CudaBackend>(&compiler, &device, &[1, 3, 4, 8, 9, 64], 1);
    }
}

#[test]
fn small_recsys_and_mlp_match_reference() {
    let Some(device) = open("small_recsys_and_mlp_match_reference") else { return };
    for two_outputs in [false, true] {
        let compiler = ReferenceCompiler::from_config(small_recsys(two_outputs)).unwrap();
        check_end_to_end::<CudaBackend>(&compiler, &device, &[1, 2, 5, 16, 33], 2);
    }
    for gemm in [GemmVariant::SplitK, GemmVariant::Naive] {
        let compiler = ReferenceCompiler::from_config(ModelKind::Mlp.default_config()).unwrap().with_gemm(gemm);
        check_end_to_end::<CudaBackend>(&compiler, &device, &[1, 3, 4, 7, 128], 4);
    }
}

#[test]
fn out_of_range_sparse_indices_contribute_nothing() {
    let Some(device) = open("out_of_range_sparse_indices_contribute_nothing") else { return };
    let config = small_recsys(true);
    let compiler = ReferenceCompiler::from_config(config.clone()).unwrap();
    let program = load::<CudaBackend>(&compiler, &device, &compile::<CudaBackend>(&compiler, &device, 4));
    let mut inputs = generate_inputs(&config, 4, 9);
    let bad = [-1i32, -2_000_000_000, 50, 51, i32::MAX, 0, 49, 7, 1_000_000, -50, 3, 50];
    inputs[5] = bad.iter().flat_map(|v| v.to_le_bytes()).collect();
    inputs[6] = bad.iter().rev().flat_map(|v| v.to_le_bytes()).collect();
    let outputs = run(&device, &program, &config, &inputs, 4);
    assert_matches_reference(&compiler, &inputs, 4, &outputs);
}

#[test]
fn launch_can_be_captured_and_replayed() {
    let Some(device) = open("launch_can_be_captured_and_replayed") else { return };
    let compiler = ReferenceCompiler::from_config(ModelKind::Recsys.default_config()).unwrap();
    check_graph_replay::<CudaBackend>(&compiler, &device, 8);
    check_graph_replay::<CudaBackend>(&compiler, &device, 1);
}

#[test]
fn artifacts_hold_gpu_code_and_reject_corruption() {
    let Some(device) = open("artifacts_hold_gpu_code_and_reject_corruption") else { return };
    let compiler = ReferenceCompiler::from_config(small_recsys(false)).unwrap();
    let bytes = compile::<CudaBackend>(&compiler, &device, 4);
    let (header, code) = ArtifactHeader::parse(&bytes).unwrap();
    assert_eq!(header.backend, BackendKind::Cuda);
    assert!(matches!(code.format, CodeFormat::Ptx | CodeFormat::Cubin), "{:?}", code.format);
    // A second device handle (or another process) loads the same bytes.
    let again = CudaBackend::open(device.info().ordinal).unwrap();
    let program = load::<CudaBackend>(&compiler, &again, &bytes);
    let inputs = generate_inputs(compiler.config(), 4, 1);
    assert_matches_reference(&compiler, &inputs, 4, &run(&again, &program, compiler.config(), &inputs, 4));

    for n in [0, 10, 70, bytes.len() / 2, bytes.len() - 1] {
        let e = try_load::<CudaBackend>(&compiler, &device, &bytes[..n]).unwrap_err();
        assert!(matches!(model_error(&e), ModelError::Artifact(ArtifactError::Truncated { .. })), "{n}: {e}");
    }
    let mut flipped = bytes.clone();
    let middle = bytes.len() / 2;
    flipped[middle] ^= 1;
    let e = try_load::<CudaBackend>(&compiler, &device, &flipped).unwrap_err();
    assert!(matches!(model_error(&e), ModelError::Artifact(ArtifactError::Checksum)), "{e}");

    // A host artifact does not load on CUDA.
    let host = HostBackend::open(0).unwrap();
    let host_bytes = compile::<HostBackend>(&compiler, &host, 4);
    let e = try_load::<CudaBackend>(&compiler, &device, &host_bytes).unwrap_err();
    assert!(
        matches!(
            model_error(&e),
            ModelError::Artifact(ArtifactError::WrongBackend {
                artifact: BackendKind::Host,
                device: BackendKind::Cuda
            })
        ),
        "{e}"
    );
}

#[test]
fn host_and_cuda_agree() {
    let Some(device) = open("host_and_cuda_agree") else { return };
    let compiler = ReferenceCompiler::from_config(ModelKind::Recsys.default_config()).unwrap();
    let host = HostBackend::open(0).unwrap();
    let inputs = generate_inputs(compiler.config(), 8, 21);
    let on_cuda = run(
        &device,
        &load::<CudaBackend>(&compiler, &device, &compile::<CudaBackend>(&compiler, &device, 8)),
        compiler.config(),
        &inputs,
        8,
    );
    let on_host = run(
        &host,
        &load::<HostBackend>(&compiler, &host, &compile::<HostBackend>(&compiler, &host, 8)),
        compiler.config(),
        &inputs,
        8,
    );
    let host_values: Vec<Vec<f32>> = on_host.iter().map(|b| saggar_models::le_f32s(b)).collect();
    let cmp = saggar_models::compare_outputs(&host_values, &on_cuda, TOLERANCE).unwrap();
    assert!(cmp.all_match(), "{cmp:?}");
}
