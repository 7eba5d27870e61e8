//! The artifact format: a small header, the code object, and a checksum.
//!
//! All integers are little-endian.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `SAGGARMD` |
//! | 8 | 4 | format version, [`ARTIFACT_VERSION`] |
//! | 12 | 1 | backend: 1 CUDA, 2 HIP, 3 host |
//! | 13 | 1 | GEMM variant: 1 naive, 2 split-K |
//! | 14 | 2 | reserved, zero |
//! | 16 | 32 | config hash: BLAKE3 of the config's canonical JSON |
//! | 48 | 8 | batch (rows the program computes) |
//! | 56 | 8 | bucket (0 when the request named none) |
//! | 64 | 4 | input count `n` |
//! | 68 | ... | per input: rank (u32), then `rank` extents (u64 each) |
//! | ... | 8 | code object length `L` |
//! | ... | L | `CodeObject::to_bytes()` |
//! | ... | 32 | BLAKE3 of every byte before it |
//!
//! [`ArtifactHeader::parse`] checks every length before reading, then the checksum, so truncated,
//! extended or bit-flipped bytes give an [`ArtifactError`], never a panic.

use saggar_device::{BackendKind, CodeObject};

use crate::error::ArtifactError;
use crate::plan::GemmVariant;

/// The first eight bytes of every artifact.
pub const ARTIFACT_MAGIC: [u8; 8] = *b"SAGGARMD";
/// The artifact format this build writes and reads.
pub const ARTIFACT_VERSION: u32 = 2;
const CHECKSUM_LEN: usize = 32;

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
}

fn backend_tag(kind: BackendKind) -> u8 {
    match kind {
        BackendKind::Cuda => 1,
        BackendKind::Hip => 2,
        BackendKind::Host => 3,
    }
}

fn backend_from_tag(tag: u8) -> Option<BackendKind> {
    match tag {
        1 => Some(BackendKind::Cuda),
        2 => Some(BackendKind::Hip),
        3 => Some(BackendKind::Host),
        _ => None,
    }
}

impl ArtifactHeader {
    /// The artifact: this header, `code`, and the checksum.
    pub fn encode(&self, code: &CodeObject) -> Vec<u8> {
        let code = code.to_bytes();
        let mut out = Vec::with_capacity(128 + code.len());
        out.extend_from_slice(&ARTIFACT_MAGIC);
        out.extend_from_slice(&ARTIFACT_VERSION.to_le_bytes());
        out.push(backend_tag(self.backend));
        out.push(self.gemm.tag());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&self.config_hash);
        out.extend_from_slice(&self.batch.to_le_bytes());
        out.extend_from_slice(&self.bucket.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&(self.input_dims.len() as u32).to_le_bytes());
        for dims in &self.input_dims {
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
        }
        out.extend_from_slice(&(code.len() as u64).to_le_bytes());
        out.extend_from_slice(&code);
        let checksum = blake3::hash(&out);
        out.extend_from_slice(checksum.as_bytes());
        out
    }

    /// Parses an artifact into its header and code object.
    pub fn parse(bytes: &[u8]) -> Result<(ArtifactHeader, CodeObject), ArtifactError> {
        let mut r = Reader { bytes, pos: 0 };
        if r.take(8, "magic")? != ARTIFACT_MAGIC {
            return Err(ArtifactError::BadMagic);
        }
        let version = r.u32("format version")?;
        if version != ARTIFACT_VERSION {
            return Err(ArtifactError::UnsupportedVersion { found: version, supported: ARTIFACT_VERSION });
        }
        let fixed = r.take(4, "backend and GEMM tags")?;
        let backend =
            backend_from_tag(fixed[0]).ok_or_else(|| malformed(format!("unknown backend tag {}", fixed[0])))?;
        let gemm = GemmVariant::from_tag(fixed[1])
            .ok_or_else(|| malformed(format!("unknown GEMM variant tag {}", fixed[1])))?;
        if fixed[2..] != [0, 0] {
            return Err(malformed("reserved bytes are not zero".into()));
        }
        let config_hash: [u8; 32] = r.take(32, "config hash")?.try_into().expect("32 bytes");
        let batch = r.u64("batch")?;
        let bucket = match r.u64("bucket")? {
            0 => None,
            b => Some(b),
        };
        let count = r.u32("input count")? as usize;
        let mut input_dims = Vec::with_capacity(count.min(4096));
        for _ in 0..count {
            let rank = r.u32("input rank")? as usize;
            if rank > 16 {
                return Err(malformed(format!("input rank {rank} is implausible")));
            }
            let mut dims = Vec::with_capacity(rank);
            for _ in 0..rank {
                dims.push(r.u64("input extent")?);
            }
            input_dims.push(dims);
        }
        let code_len = usize::try_from(r.u64("code object length")?)
            .map_err(|_| malformed("code object length overflows".into()))?;
        let code = r.take(code_len, "code object")?;
        let body_end = r.pos;
        let checksum = r.take(CHECKSUM_LEN, "checksum")?;
        if r.pos != bytes.len() {
            return Err(ArtifactError::TrailingBytes { extra: (bytes.len() - r.pos) as u64 });
        }
        if blake3::hash(&bytes[..body_end]).as_bytes() != checksum {
            return Err(ArtifactError::Checksum);
        }
        let code = CodeObject::from_bytes(code).map_err(|e| ArtifactError::CodeObject { reason: e.to_string() })?;
        Ok((ArtifactHeader { backend, gemm, config_hash, batch, bucket, input_dims }, code))
    }
}

fn malformed(reason: String) -> ArtifactError {
    ArtifactError::Malformed { reason }
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ArtifactError> {
        let available = self.bytes.len() - self.pos;
        if n > available {
            return Err(ArtifactError::Truncated { what, needed: n as u64, available: available as u64 });
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, ArtifactError> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().expect("4 bytes")))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, ArtifactError> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().expect("8 bytes")))
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
}
