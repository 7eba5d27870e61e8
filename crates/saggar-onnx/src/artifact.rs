//! The artifact format of [`crate::OnnxCompiler`]: a header, the code object, and a checksum.
//!
//! All integers are little-endian.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `SAGONNX3` |
//! | 8 | 1 | backend: 1 CUDA, 2 HIP, 3 host |
//! | 9 | 32 | model hash (BLAKE3, raw bytes) |
//! | 41 | 8 | bucket (0 when the request named none) |
//! | 49 | 4 | input count `n` |
//! | 53 | ... | per input: rank (u32), then `rank` extents (u64 each) |
//! | ... | 32 | BLAKE3 of the kernel source (the same for every bucket of a model on GPU) |
//! | ... | 4 | code object count `c` (the source's translation units; 1 on the host) |
//! | ... | 8 | per code object: length `L` |
//! | ... | L | then `CodeObject::to_bytes()` |
//! | ... | 32 | BLAKE3 of every byte before it |
//!
//! The plan itself is not stored: loading specialises and lowers the model again for the recorded
//! input shapes (deterministic, and cheap next to a compile), then checks the code objects name
//! every kernel with the same signature.

use saggar_device::{BackendKind, CodeObject};

use crate::error::OnnxError;

const MAGIC: [u8; 8] = *b"SAGONNX3";
const CHECKSUM_LEN: usize = 32;
/// Largest rank and input count accepted when parsing (bounds allocations on corrupt bytes).
const MAX_COUNT: u32 = 4096;

/// What an artifact says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) backend: BackendKind,
    pub(crate) model_hash: [u8; 32],
    pub(crate) bucket: Option<u64>,
    pub(crate) input_dims: Vec<Vec<u64>>,
    pub(crate) source_hash: [u8; 32],
}

fn backend_code(b: BackendKind) -> u8 {
    match b {
        BackendKind::Cuda => 1,
        BackendKind::Hip => 2,
        BackendKind::Host => 3,
    }
}

fn malformed(reason: impl Into<String>) -> OnnxError {
    OnnxError::Artifact { reason: reason.into() }
}

impl Header {
    pub(crate) fn encode(&self, codes: &[CodeObject]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        out.push(backend_code(self.backend));
        out.extend_from_slice(&self.model_hash);
        out.extend_from_slice(&self.bucket.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&(self.input_dims.len() as u32).to_le_bytes());
        for dims in &self.input_dims {
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
        }
        out.extend_from_slice(&self.source_hash);
        out.extend_from_slice(&(codes.len() as u32).to_le_bytes());
        for code in codes {
            let code = code.to_bytes();
            out.extend_from_slice(&(code.len() as u64).to_le_bytes());
            out.extend_from_slice(&code);
        }
        let checksum = blake3::hash(&out);
        out.extend_from_slice(checksum.as_bytes());
        out
    }

    pub(crate) fn parse(bytes: &[u8]) -> Result<(Header, Vec<CodeObject>), OnnxError> {
        if bytes.len() < MAGIC.len() + CHECKSUM_LEN || bytes[..8] != MAGIC {
            return Err(malformed("not a saggar-onnx artifact (bad magic or too short)"));
        }
        let (body, checksum) = bytes.split_at(bytes.len() - CHECKSUM_LEN);
        if blake3::hash(body).as_bytes() != checksum {
            return Err(malformed("checksum mismatch (truncated or corrupted)"));
        }
        let mut r = Reader { bytes: body, at: 8 };
        let backend = match r.take(1)?[0] {
            1 => BackendKind::Cuda,
            2 => BackendKind::Hip,
            3 => BackendKind::Host,
            other => return Err(malformed(format!("unknown backend code {other}"))),
        };
        let mut model_hash = [0u8; 32];
        model_hash.copy_from_slice(r.take(32)?);
        let bucket = match r.u64()? {
            0 => None,
            b => Some(b),
        };
        let n = r.u32()?;
        if n > MAX_COUNT {
            return Err(malformed(format!("{n} inputs")));
        }
        let mut input_dims = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let rank = r.u32()?;
            if rank > MAX_COUNT {
                return Err(malformed(format!("rank {rank}")));
            }
            input_dims.push((0..rank).map(|_| r.u64()).collect::<Result<Vec<_>, _>>()?);
        }
        let mut source_hash = [0u8; 32];
        source_hash.copy_from_slice(r.take(32)?);
        let count = r.u32()?;
        if count == 0 || count > MAX_COUNT {
            return Err(malformed(format!("{count} code objects")));
        }
        let mut codes = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let len = usize::try_from(r.u64()?).map_err(|_| malformed("code length overflows"))?;
            codes.push(CodeObject::from_bytes(r.take(len)?).map_err(|e| malformed(e.to_string()))?);
        }
        if r.at != body.len() {
            return Err(malformed("trailing bytes after the code objects"));
        }
        Ok((Header { backend, model_hash, bucket, input_dims, source_hash }, codes))
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], OnnxError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or_else(|| malformed("truncated"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, OnnxError> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64, OnnxError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use saggar_device::CodeFormat;

    #[test]
    fn round_trip_and_corruption() {
        let code = CodeObject { format: CodeFormat::HostPlan, image: b"plan".to_vec(), kernels: Vec::new() };
        let other = CodeObject { format: CodeFormat::HostPlan, image: b"unit 1".to_vec(), kernels: Vec::new() };
        let codes = vec![code, other];
        let header = Header {
            backend: BackendKind::Host,
            model_hash: [7; 32],
            bucket: Some(4),
            input_dims: vec![vec![4, 8]],
            source_hash: [3; 32],
        };
        let bytes = header.encode(&codes);
        assert_eq!(Header::parse(&bytes).unwrap(), (header.clone(), codes));
        assert!(Header::parse(&header.encode(&[])).is_err(), "an artifact has at least one code object");
        for cut in [0, 9, bytes.len() - 1] {
            assert!(Header::parse(&bytes[..cut]).is_err());
        }
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert!(Header::parse(&flipped).is_err());
    }
}
