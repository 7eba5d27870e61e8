//! The artifact format: saggar-dispatch's step-program container
//! ([`saggar_dispatch::steps::StepArtifact`], whose byte layout its module documents) in this
//! compiler's [`ARTIFACT_FORMAT`], holding
//!
//! - as the model hash, the config hash: BLAKE3 of the config's canonical JSON (the weights are not
//!   in the artifact: a load uploads them once per device);
//! - as the source hash, BLAKE3 of the source compiled: the model's CUDA/HIP C++ (the same for
//!   every batch), or the host plan's description;
//! - two compiler fields: the GEMM variant tag (1 naive, 2 split-K; recorded for host artifacts too,
//!   where it changes nothing), then the batch the program computes;
//! - exactly one code object.
//!
//! [`ArtifactHeader`] is this compiler's view of it. [`ArtifactHeader::parse`] fails with an
//! [`ArtifactError`] on bytes the container refuses (every length checked before reading, then
//! the checksum) and on fields no writer of this format produces.

use saggar_device::{BackendKind, CodeObject};
use saggar_dispatch::steps::{ArtifactFormat, StepArtifact};

use crate::error::ArtifactError;
use crate::plan::GemmVariant;

/// The first eight bytes of every artifact.
pub const ARTIFACT_MAGIC: [u8; 8] = *b"SAGGARMD";
/// The artifact format this build writes and reads.
pub const ARTIFACT_VERSION: u32 = 3;
/// The magic and version together, as the container takes them.
pub const ARTIFACT_FORMAT: ArtifactFormat = ArtifactFormat { magic: ARTIFACT_MAGIC, version: ARTIFACT_VERSION };

/// What an artifact says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactHeader {
    /// The backend it was compiled for.
    pub backend: BackendKind,
    /// The GEMM variant of its GPU code (recorded for host artifacts too, where it changes nothing).
    pub gemm: GemmVariant,
    /// BLAKE3 of the model config's canonical JSON.
    pub config_hash: [u8; 32],
    /// Rows the program computes.
    pub batch: u64,
    /// The bucket of the compile request, if it named one.
    pub bucket: Option<u64>,
    /// Concrete input dimensions, in binding order.
    pub input_dims: Vec<Vec<u64>>,
    /// BLAKE3 of the source the code object was compiled from.
    pub source_hash: [u8; 32],
}

impl ArtifactHeader {
    /// The artifact: this header and `code`, checksummed.
    pub fn encode(&self, code: &CodeObject) -> Vec<u8> {
        StepArtifact {
            backend: self.backend,
            model_hash: self.config_hash,
            bucket: self.bucket,
            input_dims: self.input_dims.clone(),
            source_hash: self.source_hash,
            fields: ArtifactHeader::fields(self.gemm, self.batch),
            codes: vec![code.clone()],
        }
        .encode(ARTIFACT_FORMAT)
    }

    /// Parses an artifact into its header and code object.
    pub fn parse(bytes: &[u8]) -> Result<(ArtifactHeader, CodeObject), ArtifactError> {
        let artifact = StepArtifact::parse(bytes, ARTIFACT_FORMAT)?;
        let header = ArtifactHeader::of(&artifact)?;
        let code = artifact.codes.into_iter().next().expect("`of` checked there is exactly one code object");
        Ok((header, code))
    }

    /// The compiler fields of an artifact of `gemm` code computing `batch` rows.
    pub(crate) fn fields(gemm: GemmVariant, batch: u64) -> Vec<u64> {
        vec![u64::from(gemm.tag()), batch]
    }

    /// This compiler's view of a parsed container: its two fields and one code object checked.
    pub(crate) fn of(artifact: &StepArtifact) -> Result<ArtifactHeader, ArtifactError> {
        let malformed = |reason: String| ArtifactError::Malformed { reason };
        let [gemm, batch] = artifact.fields[..] else {
            return Err(malformed(format!("{} compiler fields, 2 expected", artifact.fields.len())));
        };
        let gemm = u8::try_from(gemm)
            .ok()
            .and_then(GemmVariant::from_tag)
            .ok_or_else(|| malformed(format!("unknown GEMM variant tag {gemm}")))?;
        if artifact.codes.len() != 1 {
            return Err(malformed(format!("{} code objects, 1 expected", artifact.codes.len())));
        }
        Ok(ArtifactHeader {
            backend: artifact.backend,
            gemm,
            config_hash: artifact.model_hash,
            batch,
            bucket: artifact.bucket,
            input_dims: artifact.input_dims.clone(),
            source_hash: artifact.source_hash,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use saggar_device::{CodeFormat, KernelSignature, ParamKind};

    fn sample() -> (ArtifactHeader, CodeObject) {
        let header = ArtifactHeader {
            backend: BackendKind::Host,
            gemm: GemmVariant::SplitK,
            config_hash: [7; 32],
            batch: 4,
            bucket: Some(4),
            input_dims: vec![vec![4, 8], vec![4, 2]],
            source_hash: [3; 32],
        };
        let code = CodeObject {
            format: CodeFormat::HostPlan,
            image: b"plan".to_vec(),
            kernels: vec![KernelSignature::new("k", &[ParamKind::Ptr])],
        };
        (header, code)
    }

    #[test]
    fn round_trip() {
        let (header, code) = sample();
        assert_eq!(ArtifactHeader::parse(&header.encode(&code)).unwrap(), (header, code));
    }

    #[test]
    fn every_truncation_and_every_bit_flip_is_an_error() {
        let (header, code) = sample();
        let bytes = header.encode(&code);
        for n in 0..bytes.len() {
            assert!(ArtifactHeader::parse(&bytes[..n]).is_err(), "prefix of {n} bytes parsed");
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut flipped = bytes.clone();
                flipped[i] ^= 1 << bit;
                assert!(ArtifactHeader::parse(&flipped).is_err(), "flip of bit {bit} of byte {i} parsed");
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(ArtifactHeader::parse(&longer), Err(ArtifactError::TrailingBytes { extra: 1 }));
    }

    #[test]
    fn containers_this_compiler_never_writes_are_malformed() {
        let (header, code) = sample();
        let container = |fields: Vec<u64>, codes: Vec<CodeObject>| {
            let artifact = StepArtifact {
                backend: header.backend,
                model_hash: header.config_hash,
                bucket: header.bucket,
                input_dims: header.input_dims.clone(),
                source_hash: header.source_hash,
                fields,
                codes,
            };
            ArtifactHeader::parse(&artifact.encode(ARTIFACT_FORMAT))
        };
        let malformed = |r: Result<_, ArtifactError>| matches!(r, Err(ArtifactError::Malformed { .. }));
        assert!(malformed(container(vec![2], vec![code.clone()])), "one field");
        assert!(malformed(container(vec![9, 4], vec![code.clone()])), "unknown GEMM tag");
        assert!(malformed(container(vec![2 + (1 << 8), 4], vec![code.clone()])), "a tag past u8");
        assert!(malformed(container(vec![2, 4], vec![code.clone(), code.clone()])), "two code objects");
        assert!(container(vec![2, 4], vec![code]).is_ok());
    }

    #[test]
    fn the_cache_key_document_lists_this_format() {
        let row = format!("| `saggar-models` | `SAGGARMD` | {ARTIFACT_VERSION} |");
        assert!(include_str!("../../../docs/cache-key.md").contains(&row), "docs/cache-key.md must list {row}");
    }
}
