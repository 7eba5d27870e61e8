//! The artifact format of [`crate::OnnxCompiler`]: saggar-dispatch's step-program container
//! ([`saggar_dispatch::steps::StepArtifact`], whose byte layout its module documents) with magic
//! `SAGGARON` and version [`crate::ARTIFACT_VERSION`], holding
//!
//! - as the model hash, the model's BLAKE3 ([`crate::OnnxModel::model_hash`], raw bytes);
//! - as the source hash, BLAKE3 of the kernel source: the generated CUDA/HIP C++, the same for
//!   every bucket of a model, or the host plan's description;
//! - the request's bucket and input shapes, and no compiler fields;
//! - the source's code objects, one per translation unit (one on the host).
//!
//! The plan itself is not stored: loading specialises and lowers the model again for the request's
//! input shapes (deterministic, and cheap next to a compile), checks that the request's source is
//! the artifact's, then the step-program loader checks that the code objects declare every kernel
//! with the same signature.

use saggar_dispatch::steps::{ArtifactError, ArtifactFormat};

use crate::compiler::ARTIFACT_VERSION;
use crate::error::OnnxError;

/// The magic and version of this compiler's artifacts.
pub(crate) const FORMAT: ArtifactFormat = ArtifactFormat { magic: *b"SAGGARON", version: ARTIFACT_VERSION };

/// An artifact that does not load, as this crate reports it.
pub(crate) fn error(error: ArtifactError) -> OnnxError {
    OnnxError::Artifact { reason: error.to_string() }
}

#[cfg(test)]
mod tests {
    use saggar_device::{BackendKind, CodeFormat, CodeObject};
    use saggar_dispatch::steps::StepArtifact;

    use super::*;

    #[test]
    fn round_trip_and_corruption() {
        let code = CodeObject { format: CodeFormat::HostPlan, image: b"plan".to_vec(), kernels: Vec::new() };
        let other = CodeObject { format: CodeFormat::HostPlan, image: b"unit 1".to_vec(), kernels: Vec::new() };
        let artifact = StepArtifact {
            backend: BackendKind::Host,
            model_hash: [7; 32],
            bucket: Some(4),
            input_dims: vec![vec![4, 8]],
            source_hash: [3; 32],
            fields: Vec::new(),
            codes: vec![code, other],
        };
        let bytes = artifact.encode(FORMAT);
        assert_eq!(StepArtifact::parse(&bytes, FORMAT).unwrap(), artifact);
        let none = StepArtifact { codes: Vec::new(), ..artifact.clone() };
        assert!(StepArtifact::parse(&none.encode(FORMAT), FORMAT).is_err(), "an artifact has at least one code object");
        for cut in [0, 9, bytes.len() - 1] {
            assert!(StepArtifact::parse(&bytes[..cut], FORMAT).is_err());
        }
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert!(StepArtifact::parse(&flipped, FORMAT).is_err());
        let older = ArtifactFormat { version: ARTIFACT_VERSION - 1, ..FORMAT };
        assert!(StepArtifact::parse(&artifact.encode(older), FORMAT).is_err(), "another version");
        let error = error(StepArtifact::parse(&bytes[..9], FORMAT).unwrap_err());
        assert!(matches!(error, OnnxError::Artifact { .. }), "{error}");
    }

    #[test]
    fn the_cache_key_document_lists_this_format() {
        let row = format!("| `saggar-onnx` | `SAGGARON` | {ARTIFACT_VERSION} |");
        assert!(include_str!("../../../../docs/cache-key.md").contains(&row), "docs/cache-key.md must list {row}");
    }
}
