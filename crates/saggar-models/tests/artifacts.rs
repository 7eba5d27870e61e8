//! Artifact bytes that must not load: truncated, bit-flipped, extended, made for another model or
//! another backend. Every case is a typed error, never a panic, and the compiler keeps serving.

mod common;

use common::*;
use saggar_device::host::HostBackend;
use saggar_device::{Backend, BackendKind};
use saggar_dispatch::{CompileRequest, ProgramCompiler};
use saggar_models::artifact::{ARTIFACT_MAGIC, ARTIFACT_VERSION, ArtifactHeader};
use saggar_models::{ArtifactError, MlpConfig, ModelConfig, ModelError, ReferenceCompiler};

fn artifact_error(
    compiler: &ReferenceCompiler,
    device: &<HostBackend as Backend>::Device,
    bytes: &[u8],
) -> ArtifactError {
    match try_load::<HostBackend>(compiler, device, bytes) {
        Ok(_) => panic!("corrupted artifact of {} bytes loaded", bytes.len()),
        Err(e) => match model_error(&e) {
            ModelError::Artifact(a) => a.clone(),
            other => panic!("expected an artifact error, got {other}"),
        },
    }
}

#[test]
fn truncated_artifacts_are_typed_errors() {
    let compiler = ReferenceCompiler::from_config(small_recsys(true)).unwrap();
    let device = HostBackend::open(0).unwrap();
    let bytes = compile::<HostBackend>(&compiler, &device, 4);
    assert!(bytes.starts_with(&ARTIFACT_MAGIC));
    for n in 0..bytes.len() {
        let e = artifact_error(&compiler, &device, &bytes[..n]);
        assert!(matches!(e, ArtifactError::Truncated { .. }), "prefix of {n}: {e}");
    }
    // The compiler still loads the intact artifact afterwards.
    load::<HostBackend>(&compiler, &device, &bytes);
}

#[test]
fn every_flipped_byte_is_a_typed_error() {
    let compiler = ReferenceCompiler::from_config(small_recsys(false)).unwrap();
    let device = HostBackend::open(0).unwrap();
    let bytes = compile::<HostBackend>(&compiler, &device, 2);
    for i in 0..bytes.len() {
        let mut flipped = bytes.clone();
        flipped[i] ^= 0x5A;
        // Whatever field the flip lands in, loading fails with a typed artifact error.
        let e = artifact_error(&compiler, &device, &flipped);
        if i >= 64 {
            assert!(
                matches!(
                    e,
                    ArtifactError::Checksum
                        | ArtifactError::Truncated { .. }
                        | ArtifactError::TrailingBytes { .. }
                        | ArtifactError::Malformed { .. }
                ),
                "byte {i}: {e}"
            );
        }
    }
    let e = artifact_error(&compiler, &device, &[bytes.clone(), vec![0]].concat());
    assert_eq!(e, ArtifactError::TrailingBytes { extra: 1 });
    let mut bad_magic = bytes.clone();
    bad_magic[0] = b'X';
    assert_eq!(artifact_error(&compiler, &device, &bad_magic), ArtifactError::BadMagic);
    let mut future = bytes;
    future[8..12].copy_from_slice(&(ARTIFACT_VERSION + 1).to_le_bytes());
    assert!(matches!(artifact_error(&compiler, &device, &future), ArtifactError::UnsupportedVersion { .. }));
}

#[test]
fn artifacts_of_another_model_or_backend_are_refused() {
    let device = HostBackend::open(0).unwrap();
    let small = ReferenceCompiler::from_config(small_recsys(false)).unwrap();
    let mlp =
        ReferenceCompiler::from_config(ModelConfig::Mlp(MlpConfig { input: 15, ..MlpConfig::default() })).unwrap();
    let bytes = compile::<HostBackend>(&small, &device, 2);
    assert!(matches!(artifact_error(&mlp, &device, &bytes), ArtifactError::ModelMismatch { .. }));

    // The same artifact relabelled as CUDA (with a valid checksum) is refused on the host.
    let (mut header, code) = ArtifactHeader::parse(&bytes).unwrap();
    header.backend = BackendKind::Cuda;
    let relabelled = header.encode(&code);
    assert_eq!(
        artifact_error(&small, &device, &relabelled),
        ArtifactError::WrongBackend { artifact: BackendKind::Cuda, device: BackendKind::Host }
    );

    // A header whose dimensions disagree with its batch, re-checksummed, is malformed.
    let (mut header, code) = ArtifactHeader::parse(&bytes).unwrap();
    header.batch = 3;
    assert!(matches!(artifact_error(&small, &device, &header.encode(&code)), ArtifactError::Malformed { .. }));
    let (mut header, code) = ArtifactHeader::parse(&bytes).unwrap();
    header.input_dims.pop();
    assert!(matches!(artifact_error(&small, &device, &header.encode(&code)), ArtifactError::Malformed { .. }));

    // A code object that lacks a kernel of the plan.
    let (header, mut code) = ArtifactHeader::parse(&bytes).unwrap();
    code.kernels.pop();
    assert!(matches!(artifact_error(&small, &device, &header.encode(&code)), ArtifactError::CodeObject { .. }));
}

#[test]
fn header_records_the_request() {
    let compiler = ReferenceCompiler::from_config(small_recsys(false)).unwrap();
    let device = HostBackend::open(0).unwrap();
    let bytes = compile::<HostBackend>(&compiler, &device, 5);
    let (header, code) = ArtifactHeader::parse(&bytes).unwrap();
    assert_eq!(header.backend, BackendKind::Host);
    assert_eq!(header.batch, 5);
    assert_eq!(header.bucket, Some(5));
    assert_eq!(header.config_hash, compiler.config().config_hash());
    assert_eq!(header.input_dims, compiler.config().input_dims(5));
    assert_eq!(code.format, saggar_device::CodeFormat::HostPlan);
    // Compiling is deterministic: the same request gives the same bytes.
    assert_eq!(compile::<HostBackend>(&compiler, &device, 5), bytes);
}

#[test]
fn an_artifact_loaded_for_another_request_is_refused() {
    let compiler = ReferenceCompiler::from_config(small_recsys(false)).unwrap();
    let device = HostBackend::open(0).unwrap();
    let bytes = compile::<HostBackend>(&compiler, &device, 4);
    let other_batch = compiler.config().input_dims(8);
    for request in [CompileRequest::new(&other_batch, Some(8)), CompileRequest::new(&other_batch, Some(4))] {
        match ProgramCompiler::<HostBackend>::load(&compiler, &device, &request, &bytes) {
            Ok(_) => panic!("an artifact for batch 4 loaded for {request:?}"),
            Err(e) => {
                assert!(matches!(model_error(&e), ModelError::Artifact(ArtifactError::RequestMismatch { .. })), "{e}")
            }
        }
    }
    let four = compiler.config().input_dims(4);
    let wrong_bucket = CompileRequest::new(&four, None);
    assert!(ProgramCompiler::<HostBackend>::load(&compiler, &device, &wrong_bucket, &bytes).is_err());
    // The matching request loads.
    ProgramCompiler::<HostBackend>::load(&compiler, &device, &CompileRequest::new(&four, Some(4)), &bytes).unwrap();
}
