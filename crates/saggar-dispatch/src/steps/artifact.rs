//! The artifact container of step-program compilers: a header, one or more code objects, and a
//! checksum. Each compiler names its own [`ArtifactFormat`] (magic and version) and may keep a
//! few small fields of its own in the header; the rest of the layout is this one.
//!
//! All integers are little-endian.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic ([`ArtifactFormat::magic`]) |
//! | 8 | 4 | format version ([`ArtifactFormat::version`]) |
//! | 12 | 1 | backend: 1 CUDA, 2 HIP, 3 host |
//! | 13 | 3 | reserved, zero |
//! | 16 | 32 | model hash (raw bytes; what the compiler hashes is its own) |
//! | 48 | 8 | bucket (0 when the request named none) |
//! | 56 | 32 | source hash: BLAKE3 of the source the code objects were compiled from |
//! | 88 | 4 | compiler field count `f`, at most [`MAX_FIELDS`] |
//! | 92 | 8 `f` | the compiler's fields (u64 each) |
//! | ... | 4 | input count `n`, at most [`MAX_INPUTS`] |
//! | ... | ... | per input: rank (u32, at most [`MAX_RANK`]), then `rank` extents (u64 each) |
//! | ... | 4 | code object count `c`, 1 to [`MAX_CODE_OBJECTS`] |
//! | ... | ... | per code object: length `L` (u64), then `L` bytes of `CodeObject::to_bytes()` |
//! | ... | 32 | BLAKE3 of every byte before it |
//!
//! [`StepArtifact::parse`] checks every count against its bound and every length against the
//! bytes left before it allocates or reads, then the checksum, and only then parses the code
//! objects, so truncated, extended or bit-flipped bytes give an [`ArtifactError`], never a panic
//! or an allocation their length fields ask for.

use saggar_device::{BackendKind, CodeObject, KernelSource};

use crate::compiler::CompileRequest;

/// Most compiler fields a header holds.
pub const MAX_FIELDS: u32 = 16;
/// Most inputs a header records.
pub const MAX_INPUTS: u32 = 4096;
/// Highest rank of a recorded input.
pub const MAX_RANK: u32 = 4096;
/// Most code objects an artifact holds.
pub const MAX_CODE_OBJECTS: u32 = 4096;
const CHECKSUM_LEN: usize = 32;

/// Whose artifacts these are: the first eight bytes and the format version a compiler writes and
/// reads. The version is part of the compiler's identity (and so of the cache key), and changes
/// whenever this container or the compiler's use of it changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArtifactFormat {
    /// The first eight bytes.
    pub magic: [u8; 8],
    /// The format version.
    pub version: u32,
}

/// A step-program artifact: what it was compiled for and its code objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepArtifact {
    /// The backend it was compiled for.
    pub backend: BackendKind,
    /// The model it was compiled from, as its compiler hashes it.
    pub model_hash: [u8; 32],
    /// The bucket of the compile request, if it named one.
    pub bucket: Option<u64>,
    /// Concrete input dimensions of the compile request, in binding order.
    pub input_dims: Vec<Vec<u64>>,
    /// BLAKE3 of the source the code objects were compiled from: loads on one GPU device share the
    /// modules of one source ([`super::ProgramLoader`]).
    pub source_hash: [u8; 32],
    /// The compiler's own fields, at most [`MAX_FIELDS`].
    pub fields: Vec<u64>,
    /// The code objects, at least one.
    pub codes: Vec<CodeObject>,
}

/// Why artifact bytes cannot be loaded.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactError {
    /// Fewer bytes than the header or a length field promises.
    #[error("truncated: {needed} bytes needed for {what}, {available} available")]
    Truncated {
        /// The part being read.
        what: &'static str,
        /// Bytes needed from the start of that part.
        needed: u64,
        /// Bytes left.
        available: u64,
    },
    /// Not an artifact of this compiler's format.
    #[error("not an artifact of this compiler (bad magic)")]
    BadMagic,
    /// Made by a build of the compiler with another artifact format.
    #[error("artifact format version {found} is not supported (this build reads version {supported})")]
    UnsupportedVersion {
        /// The version in the artifact.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The bytes were modified after they were written.
    #[error("checksum mismatch: the artifact is corrupted")]
    Checksum,
    /// Bytes after the checksum.
    #[error("{extra} unexpected trailing bytes")]
    TrailingBytes {
        /// How many.
        extra: u64,
    },
    /// A field holds a value no writer produces.
    #[error("malformed: {reason}")]
    Malformed {
        /// Which field and why.
        reason: String,
    },
    /// Compiled for another backend.
    #[error("compiled for the {artifact} backend, cannot load on {device}")]
    WrongBackend {
        /// The artifact's backend.
        artifact: BackendKind,
        /// The device's backend.
        device: BackendKind,
    },
    /// Compiled from another model.
    #[error("compiled for model {artifact}, but this compiler's model hashes to {compiler}")]
    ModelMismatch {
        /// The artifact's model hash (hex).
        artifact: String,
        /// This compiler's model hash (hex).
        compiler: String,
    },
    /// Compiled for a request whose program differs from the one being loaded.
    #[error("compiled for {artifact}, but loaded for {requested}; the cache key must include every input shape")]
    RequestMismatch {
        /// What the artifact was compiled for.
        artifact: String,
        /// What the load asked for.
        requested: String,
    },
    /// A code object does not parse, or none declares a kernel the plan launches.
    #[error("code object: {reason}")]
    CodeObject {
        /// Why.
        reason: String,
    },
}

fn malformed(reason: String) -> ArtifactError {
    ArtifactError::Malformed { reason }
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

fn put_u32(out: &mut Vec<u8>, v: usize) {
    out.extend_from_slice(&(v as u32).to_le_bytes());
}

/// BLAKE3 of `source`'s code: what [`StepArtifact::source_hash`] records of the source its code
/// objects were compiled from.
pub fn source_hash(source: &KernelSource) -> [u8; 32] {
    *blake3::hash(source.code.as_bytes()).as_bytes()
}

impl StepArtifact {
    /// The artifact of `codes`, compiled from `source` for `request` on `backend` from the model
    /// hashing to `model_hash`, with no compiler fields.
    pub fn for_request(
        backend: BackendKind,
        model_hash: [u8; 32],
        request: &CompileRequest<'_>,
        source: &KernelSource,
        codes: Vec<CodeObject>,
    ) -> StepArtifact {
        StepArtifact {
            backend,
            model_hash,
            bucket: request.bucket,
            input_dims: request.input_dims.to_vec(),
            source_hash: source_hash(source),
            fields: Vec::new(),
            codes,
        }
    }

    /// The artifact's bytes in `format`.
    pub fn encode(&self, format: ArtifactFormat) -> Vec<u8> {
        let codes: Vec<Vec<u8>> = self.codes.iter().map(CodeObject::to_bytes).collect();
        let mut out = Vec::with_capacity(256 + codes.iter().map(|c| c.len() + 8).sum::<usize>());
        out.extend_from_slice(&format.magic);
        out.extend_from_slice(&format.version.to_le_bytes());
        out.extend_from_slice(&[backend_tag(self.backend), 0, 0, 0]);
        out.extend_from_slice(&self.model_hash);
        out.extend_from_slice(&self.bucket.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&self.source_hash);
        put_u32(&mut out, self.fields.len());
        for field in &self.fields {
            out.extend_from_slice(&field.to_le_bytes());
        }
        put_u32(&mut out, self.input_dims.len());
        for dims in &self.input_dims {
            put_u32(&mut out, dims.len());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
        }
        put_u32(&mut out, codes.len());
        for code in &codes {
            out.extend_from_slice(&(code.len() as u64).to_le_bytes());
            out.extend_from_slice(code);
        }
        let checksum = blake3::hash(&out);
        out.extend_from_slice(checksum.as_bytes());
        out
    }

    /// Parses artifact bytes of `format`. See the module docs for what is checked.
    pub fn parse(bytes: &[u8], format: ArtifactFormat) -> Result<StepArtifact, ArtifactError> {
        let mut r = Reader { bytes, pos: 0 };
        if r.take(8, "magic")? != format.magic {
            return Err(ArtifactError::BadMagic);
        }
        let version = r.u32("format version")?;
        if version != format.version {
            return Err(ArtifactError::UnsupportedVersion { found: version, supported: format.version });
        }
        let fixed = r.take(4, "backend tag")?;
        let backend =
            backend_from_tag(fixed[0]).ok_or_else(|| malformed(format!("unknown backend tag {}", fixed[0])))?;
        if fixed[1..] != [0, 0, 0] {
            return Err(malformed("reserved bytes are not zero".into()));
        }
        let model_hash = r.hash("model hash")?;
        let bucket = match r.u64("bucket")? {
            0 => None,
            b => Some(b),
        };
        let source_hash = r.hash("source hash")?;
        let fields = r.u64s("compiler fields", MAX_FIELDS)?;
        let count = r.count("inputs", MAX_INPUTS, 4)?;
        let mut input_dims = Vec::with_capacity(count);
        for _ in 0..count {
            input_dims.push(r.u64s("input extents", MAX_RANK)?);
        }
        let count = r.count("code objects", MAX_CODE_OBJECTS, 8)?;
        if count == 0 {
            return Err(malformed("no code object".into()));
        }
        let mut images = Vec::with_capacity(count);
        for _ in 0..count {
            let len = usize::try_from(r.u64("code object length")?)
                .map_err(|_| malformed("code object length overflows".into()))?;
            images.push(r.take(len, "code object")?);
        }
        let body_end = r.pos;
        let checksum = r.take(CHECKSUM_LEN, "checksum")?;
        if r.pos != bytes.len() {
            return Err(ArtifactError::TrailingBytes { extra: (bytes.len() - r.pos) as u64 });
        }
        if blake3::hash(&bytes[..body_end]).as_bytes() != checksum {
            return Err(ArtifactError::Checksum);
        }
        let codes = images
            .into_iter()
            .map(|image| CodeObject::from_bytes(image).map_err(|e| ArtifactError::CodeObject { reason: e.to_string() }))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(StepArtifact { backend, model_hash, bucket, input_dims, source_hash, fields, codes })
    }

    /// Checks that the artifact was compiled for `backend` from the model hashing to `model_hash`.
    pub fn check_made_for(&self, backend: BackendKind, model_hash: &[u8; 32]) -> Result<(), ArtifactError> {
        if self.backend != backend {
            return Err(ArtifactError::WrongBackend { artifact: self.backend, device: backend });
        }
        if self.model_hash != *model_hash {
            let hex = |hash: &[u8; 32]| blake3::Hash::from(*hash).to_hex().to_string();
            return Err(ArtifactError::ModelMismatch { artifact: hex(&self.model_hash), compiler: hex(model_hash) });
        }
        Ok(())
    }
}

/// Reads the artifact's bytes in order; every read checks the bytes left first.
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

    fn hash(&mut self, what: &'static str) -> Result<[u8; 32], ArtifactError> {
        Ok(self.take(32, what)?.try_into().expect("32 bytes"))
    }

    /// A count of `what` (u32), at most `max`, whose items of at least `item_bytes` each fit in the
    /// bytes left.
    fn count(&mut self, what: &'static str, max: u32, item_bytes: usize) -> Result<usize, ArtifactError> {
        let count = self.u32(what)?;
        if count > max {
            return Err(malformed(format!("{count} {what}, at most {max}")));
        }
        let needed = count as usize * item_bytes;
        let available = self.bytes.len() - self.pos;
        if needed > available {
            return Err(ArtifactError::Truncated { what, needed: needed as u64, available: available as u64 });
        }
        Ok(count as usize)
    }

    /// A count (u32, at most `max`) and that many u64s.
    fn u64s(&mut self, what: &'static str, max: u32) -> Result<Vec<u64>, ArtifactError> {
        let count = self.count(what, max, 8)?;
        let bytes = self.take(count * 8, what)?;
        Ok(bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect())
    }
}

#[cfg(test)]
mod tests {
    use saggar_device::{CodeFormat, KernelSignature, ParamKind};

    use super::*;

    const FORMAT: ArtifactFormat = ArtifactFormat { magic: *b"SAGTESTA", version: 7 };
    /// Offset of the compiler field count.
    const FIELDS_AT: usize = 88;

    fn code(image: &[u8]) -> CodeObject {
        CodeObject {
            format: CodeFormat::HostPlan,
            image: image.to_vec(),
            kernels: vec![KernelSignature::new("k", &[ParamKind::Ptr, ParamKind::U32])],
        }
    }

    fn sample() -> StepArtifact {
        StepArtifact {
            backend: BackendKind::Hip,
            model_hash: [7; 32],
            bucket: Some(4),
            input_dims: vec![vec![4, 8], vec![4], Vec::new()],
            source_hash: [3; 32],
            fields: vec![2, 4],
            codes: vec![code(b"unit 0"), code(b"unit 1")],
        }
    }

    /// `bytes` with its checksum made valid again.
    fn rechecksum(mut bytes: Vec<u8>) -> Vec<u8> {
        let body = bytes.len() - CHECKSUM_LEN;
        let checksum = blake3::hash(&bytes[..body]);
        bytes[body..].copy_from_slice(checksum.as_bytes());
        bytes
    }

    fn put_u32_at(bytes: &mut [u8], at: usize, v: u32) {
        bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    #[test]
    fn round_trip() {
        for artifact in [sample(), StepArtifact { bucket: None, fields: Vec::new(), ..sample() }] {
            assert_eq!(StepArtifact::parse(&artifact.encode(FORMAT), FORMAT).unwrap(), artifact);
        }
    }

    #[test]
    fn every_truncation_is_a_truncated_error() {
        let bytes = sample().encode(FORMAT);
        for n in 0..bytes.len() {
            let e = StepArtifact::parse(&bytes[..n], FORMAT).unwrap_err();
            assert!(matches!(e, ArtifactError::Truncated { .. }), "prefix of {n} bytes: {e}");
        }
    }

    #[test]
    fn every_bit_flip_is_an_error() {
        let bytes = sample().encode(FORMAT);
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut flipped = bytes.clone();
                flipped[i] ^= 1 << bit;
                let e = StepArtifact::parse(&flipped, FORMAT).unwrap_err();
                if i >= 12 {
                    assert!(
                        matches!(
                            e,
                            ArtifactError::Checksum
                                | ArtifactError::Truncated { .. }
                                | ArtifactError::TrailingBytes { .. }
                                | ArtifactError::Malformed { .. }
                        ),
                        "flip of bit {bit} of byte {i}: {e}"
                    );
                }
            }
        }
    }

    #[test]
    fn trailing_bytes_another_magic_and_another_version_are_refused() {
        let bytes = sample().encode(FORMAT);
        let longer = [bytes.clone(), vec![0]].concat();
        assert_eq!(StepArtifact::parse(&longer, FORMAT), Err(ArtifactError::TrailingBytes { extra: 1 }));
        let other = ArtifactFormat { magic: *b"SAGTESTB", ..FORMAT };
        assert_eq!(StepArtifact::parse(&bytes, other), Err(ArtifactError::BadMagic));
        let newer = ArtifactFormat { version: 8, ..FORMAT };
        assert_eq!(
            StepArtifact::parse(&bytes, newer),
            Err(ArtifactError::UnsupportedVersion { found: 7, supported: 8 })
        );
    }

    /// Counts past their bound are malformed, and counts within it that the bytes left cannot hold
    /// are truncated: either way before anything is allocated for them.
    #[test]
    fn absurd_counts_are_refused_before_allocating() {
        let bytes = sample().encode(FORMAT);
        let inputs_at = FIELDS_AT + 4 + 2 * 8;
        let first_rank_at = inputs_at + 4;
        let codes_at = first_rank_at + (4 + 16) + (4 + 8) + 4;
        // The bytes after the sample's field count could hold `MAX_FIELDS` fields, so that count is
        // only checked against its bound.
        let counts = [
            (FIELDS_AT, MAX_FIELDS, false),
            (inputs_at, MAX_INPUTS, true),
            (first_rank_at, MAX_RANK, true),
            (codes_at, MAX_CODE_OBJECTS, true),
        ];
        for (at, bound, bound_overruns) in counts {
            let patch = |count: u32| {
                let mut patched = bytes.clone();
                put_u32_at(&mut patched, at, count);
                StepArtifact::parse(&rechecksum(patched), FORMAT).unwrap_err()
            };
            for count in [u32::MAX, bound + 1] {
                let e = patch(count);
                assert!(matches!(e, ArtifactError::Malformed { .. }), "count {count} at {at}: {e}");
            }
            if bound_overruns {
                let e = patch(bound);
                assert!(matches!(e, ArtifactError::Truncated { .. }), "count {bound} at {at}: {e}");
            }
        }
        let mut huge_code = bytes.clone();
        huge_code[codes_at + 4..codes_at + 12].copy_from_slice(&u64::MAX.to_le_bytes());
        let e = StepArtifact::parse(&rechecksum(huge_code), FORMAT).unwrap_err();
        assert!(matches!(e, ArtifactError::Truncated { .. } | ArtifactError::Malformed { .. }), "{e}");
    }

    #[test]
    fn fields_no_writer_produces_are_malformed() {
        let none = StepArtifact { codes: Vec::new(), ..sample() };
        let e = StepArtifact::parse(&none.encode(FORMAT), FORMAT).unwrap_err();
        assert!(matches!(e, ArtifactError::Malformed { .. }), "no code object: {e}");
        let bytes = sample().encode(FORMAT);
        for (at, value) in [(12, 9), (13, 1), (15, 1)] {
            let mut patched = bytes.clone();
            patched[at] = value;
            let e = StepArtifact::parse(&rechecksum(patched), FORMAT).unwrap_err();
            assert!(matches!(e, ArtifactError::Malformed { .. }), "byte {at} = {value}: {e}");
        }
    }

    #[test]
    fn a_code_object_that_does_not_parse_is_a_code_object_error() {
        let bytes = sample().encode(FORMAT);
        // The first code object starts with its own magic.
        let first = bytes.windows(8).position(|w| w == b"SAGGARC1").unwrap();
        let mut patched = bytes.clone();
        patched[first] ^= 1;
        let e = StepArtifact::parse(&rechecksum(patched), FORMAT).unwrap_err();
        assert!(matches!(e, ArtifactError::CodeObject { .. }), "{e}");
    }

    #[test]
    fn an_artifact_loads_only_for_its_backend_and_model() {
        let artifact = sample();
        artifact.check_made_for(BackendKind::Hip, &[7; 32]).unwrap();
        assert_eq!(
            artifact.check_made_for(BackendKind::Cuda, &[7; 32]),
            Err(ArtifactError::WrongBackend { artifact: BackendKind::Hip, device: BackendKind::Cuda })
        );
        let e = artifact.check_made_for(BackendKind::Hip, &[8; 32]).unwrap_err();
        assert!(matches!(e, ArtifactError::ModelMismatch { .. }), "{e}");
    }
}
