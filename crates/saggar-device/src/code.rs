//! Kernel source and compiled code objects.
//!
//! A [`KernelSource`] is what runtime compilation takes: one translation unit of CUDA/HIP C++ plus the
//! signatures of the `extern "C"` kernels it defines. A [`CodeObject`] is what it produces (PTX, a cubin,
//! an AMD code object, or on the host backend a plan of named host kernels) and what modules are loaded
//! from. Code objects carry the kernel signatures with them, so a module loaded from cached bytes can
//! still check every launch.

use crate::error::{Error, Result};
use crate::types::{KernelSignature, ParamKind};

/// One translation unit for runtime compilation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelSource {
    /// A name for logs and errors (the program's file name for NVRTC / hipRTC).
    pub name: String,
    /// CUDA / HIP C++ source. Kernels must be `extern "C"` so their names are not mangled.
    pub code: String,
    /// The kernels the source defines.
    pub kernels: Vec<KernelSignature>,
    /// Extra compiler options (`-DBATCH=8`, `--use_fast_math`).
    pub options: Vec<String>,
}

impl KernelSource {
    /// A source with no extra options.
    pub fn new(name: impl Into<String>, code: impl Into<String>, kernels: Vec<KernelSignature>) -> KernelSource {
        KernelSource { name: name.into(), code: code.into(), kernels, options: Vec::new() }
    }
}

/// The format of a code object's image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CodeFormat {
    /// NVIDIA PTX text (the driver JIT-compiles it at load).
    Ptx,
    /// NVIDIA cubin.
    Cubin,
    /// AMD code object (ELF) as hipRTC produces it.
    HipCodeObject,
    /// A plan of host kernels, by name (host backend).
    HostPlan,
}

impl CodeFormat {
    const fn tag(self) -> u8 {
        match self {
            CodeFormat::Ptx => 1,
            CodeFormat::Cubin => 2,
            CodeFormat::HipCodeObject => 3,
            CodeFormat::HostPlan => 4,
        }
    }

    fn from_tag(tag: u8) -> Option<CodeFormat> {
        Some(match tag {
            1 => CodeFormat::Ptx,
            2 => CodeFormat::Cubin,
            3 => CodeFormat::HipCodeObject,
            4 => CodeFormat::HostPlan,
            _ => return None,
        })
    }
}

/// A compiled code object: the image, its format, and the signatures of its kernels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeObject {
    /// What the image is.
    pub format: CodeFormat,
    /// The bytes a module is loaded from.
    pub image: Vec<u8>,
    /// The kernels in it.
    pub kernels: Vec<KernelSignature>,
}

const CODE_OBJECT_MAGIC: &[u8; 8] = b"SAGGARC1";

impl CodeObject {
    /// The signature of a kernel in this object.
    pub fn signature(&self, name: &str) -> Option<&KernelSignature> {
        self.kernels.iter().find(|k| k.name == name)
    }

    /// Serialises the object (format, signatures, image) for storage, e.g. in saggar-cache.
    /// Layout: magic, format tag, kernel count (u32 LE), per kernel: name length (u32 LE), name,
    /// param count (u32 LE), one tag byte per param; then image length (u64 LE) and the image.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.image.len() + 64);
        out.extend_from_slice(CODE_OBJECT_MAGIC);
        out.push(self.format.tag());
        out.extend_from_slice(&(self.kernels.len() as u32).to_le_bytes());
        for k in &self.kernels {
            out.extend_from_slice(&(k.name.len() as u32).to_le_bytes());
            out.extend_from_slice(k.name.as_bytes());
            out.extend_from_slice(&(k.params.len() as u32).to_le_bytes());
            out.extend(k.params.iter().map(|p| param_tag(*p)));
        }
        out.extend_from_slice(&(self.image.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.image);
        out
    }

    /// Parses [`CodeObject::to_bytes`]; every length is checked, so truncated or corrupted bytes give
    /// an error, never a panic.
    pub fn from_bytes(bytes: &[u8]) -> Result<CodeObject> {
        let mut r = Reader { bytes, pos: 0 };
        if r.take(8)? != CODE_OBJECT_MAGIC {
            return Err(bad("wrong magic: not a saggar code object"));
        }
        let format = CodeFormat::from_tag(r.take(1)?[0]).ok_or_else(|| bad("unknown code format tag"))?;
        let count = r.u32()? as usize;
        let mut kernels = Vec::with_capacity(count.min(1024));
        for _ in 0..count {
            let name_len = r.u32()? as usize;
            let name = std::str::from_utf8(r.take(name_len)?).map_err(|_| bad("kernel name is not UTF-8"))?.to_string();
            let params_len = r.u32()? as usize;
            let params = r
                .take(params_len)?
                .iter()
                .map(|t| param_from_tag(*t).ok_or_else(|| bad("unknown parameter tag")))
                .collect::<Result<Vec<_>>>()?;
            kernels.push(KernelSignature { name, params });
        }
        let image_len = usize::try_from(r.u64()?).map_err(|_| bad("image length overflows"))?;
        let image = r.take(image_len)?.to_vec();
        if r.pos != bytes.len() {
            return Err(bad("trailing bytes after the image"));
        }
        Ok(CodeObject { format, image, kernels })
    }
}

fn bad(reason: &str) -> Error {
    Error::CodeObject { reason: reason.to_string() }
}

fn param_tag(p: ParamKind) -> u8 {
    match p {
        ParamKind::Ptr => 1,
        ParamKind::U32 => 2,
        ParamKind::I32 => 3,
        ParamKind::U64 => 4,
        ParamKind::I64 => 5,
        ParamKind::F32 => 6,
        ParamKind::F64 => 7,
    }
}

fn param_from_tag(t: u8) -> Option<ParamKind> {
    Some(match t {
        1 => ParamKind::Ptr,
        2 => ParamKind::U32,
        3 => ParamKind::I32,
        4 => ParamKind::U64,
        5 => ParamKind::I64,
        6 => ParamKind::F32,
        7 => ParamKind::F64,
        _ => return None,
    })
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|end| *end <= self.bytes.len()).ok_or_else(|| bad("truncated"))?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CodeObject {
        CodeObject {
            format: CodeFormat::Ptx,
            image: b"// ptx".to_vec(),
            kernels: vec![KernelSignature::new("k", &[ParamKind::Ptr, ParamKind::F32])],
        }
    }

    #[test]
    fn round_trip() {
        let c = sample();
        assert_eq!(CodeObject::from_bytes(&c.to_bytes()).unwrap(), c);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = sample().to_bytes();
        for n in 0..bytes.len() {
            assert!(CodeObject::from_bytes(&bytes[..n]).is_err(), "prefix of {n} bytes parsed");
        }
    }
}
