//! Loading modules on the HIP backend: `hipModuleLoadData` from an AMD code object, and the limits HIP
//! reports for a kernel (`hipFuncGetAttribute`), so every launch is checked before it reaches HIP.
//!
//! `hipModuleLoadData` takes a pointer and no length: it trusts the offsets written inside the image. A
//! truncated or corrupted image (a damaged cache entry) would make it read past the end of the buffer,
//! so saggar checks the headers first ([`check_image`]): every table and section the image points to must
//! lie inside it.

use std::ffi::c_void;

use crate::code::{CodeFormat, CodeObject};
use crate::error::{Error, Result};
use crate::gpu::{Driver, ErrorClass, LoadedModule};
use crate::hip::HipDriver;
use crate::hip::result;
use crate::hip::sys::{self, func_attribute};
use crate::rules::{DeviceLimits, KernelLimits};

/// `EM_AMDGPU`, the ELF machine of AMD GPU code objects.
const EM_AMDGPU: u16 = 224;
/// The magic of a clang offload bundle (what `hipcc --genco` writes for several architectures).
const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
/// The magic of a compressed clang offload bundle (ROCm 6.2+ `--offload-compress`).
const COMPRESSED_BUNDLE_MAGIC: &[u8] = b"CCOB";

fn read_u16(bytes: &[u8], at: usize) -> Option<u16> {
    bytes.get(at..at.checked_add(2)?).map(|b| u16::from_le_bytes([b[0], b[1]]))
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    bytes.get(at..at.checked_add(4)?).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
}

fn read_u64(bytes: &[u8], at: usize) -> Option<u64> {
    bytes.get(at..at.checked_add(8)?).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

/// Whether `offset..offset + len` lies inside `total` bytes.
fn fits(offset: u64, len: u64, total: usize) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= total as u64)
}

/// Checks that an AMD GPU ELF code object is whole: its program headers, section headers and every
/// section with file contents lie inside the image.
fn check_elf(image: &[u8]) -> std::result::Result<(), String> {
    let truncated = || "truncated ELF header".to_string();
    if image.len() < 64 {
        return Err(truncated());
    }
    if image[4] != 2 || image[5] != 1 {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let machine = read_u16(image, 18).ok_or_else(truncated)?;
    if machine != EM_AMDGPU {
        return Err(format!("ELF machine {machine} is not AMD GPU (EM_AMDGPU = {EM_AMDGPU})"));
    }
    let phoff = read_u64(image, 32).ok_or_else(truncated)?;
    let shoff = read_u64(image, 40).ok_or_else(truncated)?;
    let phentsize = u64::from(read_u16(image, 54).ok_or_else(truncated)?);
    let phnum = u64::from(read_u16(image, 56).ok_or_else(truncated)?);
    let shentsize = u64::from(read_u16(image, 58).ok_or_else(truncated)?);
    let shnum = u64::from(read_u16(image, 60).ok_or_else(truncated)?);
    if phnum > 0 && (phentsize < 56 || !fits(phoff, phentsize * phnum, image.len())) {
        return Err("the program header table lies outside the image (truncated?)".into());
    }
    if shnum > 0 && (shentsize < 64 || !fits(shoff, shentsize * shnum, image.len())) {
        return Err("the section header table lies outside the image (truncated?)".into());
    }
    for i in 0..phnum {
        let at = (phoff + i * phentsize) as usize;
        let (offset, size) = (read_u64(image, at + 8), read_u64(image, at + 32));
        match (offset, size) {
            (Some(offset), Some(size)) if fits(offset, size, image.len()) => {}
            _ => return Err(format!("segment {i} lies outside the image (truncated?)")),
        }
    }
    const SHT_NOBITS: u32 = 8;
    for i in 0..shnum {
        let at = (shoff + i * shentsize) as usize;
        let kind = read_u32(image, at + 4);
        let (offset, size) = (read_u64(image, at + 24), read_u64(image, at + 32));
        match (kind, offset, size) {
            (Some(SHT_NOBITS), Some(_), Some(_)) => {}
            (Some(_), Some(offset), Some(size)) if fits(offset, size, image.len()) => {}
            _ => return Err(format!("section {i} lies outside the image (truncated?)")),
        }
    }
    Ok(())
}

/// Checks that a clang offload bundle is whole and that its AMD GPU entries are whole ELF files.
fn check_bundle(image: &[u8]) -> std::result::Result<(), String> {
    let truncated = || "truncated offload bundle".to_string();
    let count = read_u64(image, BUNDLE_MAGIC.len()).ok_or_else(truncated)?;
    let mut at = BUNDLE_MAGIC.len() + 8;
    let mut amdgpu = 0;
    for _ in 0..count {
        let offset = read_u64(image, at).ok_or_else(truncated)?;
        let size = read_u64(image, at + 8).ok_or_else(truncated)?;
        let triple_len = read_u64(image, at + 16).ok_or_else(truncated)?;
        at = at.checked_add(24).ok_or_else(truncated)?;
        let end = usize::try_from(triple_len).ok().and_then(|n| at.checked_add(n)).ok_or_else(truncated)?;
        let triple = image.get(at..end).ok_or_else(truncated)?;
        at = end;
        if !fits(offset, size, image.len()) {
            return Err("an offload bundle entry lies outside the image (truncated?)".into());
        }
        if triple.windows(6).any(|w| w == b"amdgcn") && size > 0 {
            check_elf(&image[offset as usize..(offset + size) as usize])
                .map_err(|e| format!("offload bundle entry {}: {e}", String::from_utf8_lossy(triple)))?;
            amdgpu += 1;
        }
    }
    if amdgpu == 0 {
        return Err("the offload bundle has no AMD GPU (amdgcn) entry".into());
    }
    Ok(())
}

/// Checks an image before `hipModuleLoadData` reads it: an AMD GPU ELF code object or an uncompressed
/// clang offload bundle, whole. Compressed bundles are refused: their v1 header carries no length, so
/// nothing would bound what HIP reads.
pub(crate) fn check_image(image: &[u8]) -> std::result::Result<(), String> {
    if image.is_empty() || image.iter().all(|&b| b == 0) {
        return Err("the code object's image is empty".into());
    }
    if image.starts_with(b"\x7fELF") {
        check_elf(image)
    } else if image.starts_with(BUNDLE_MAGIC) {
        check_bundle(image)
    } else if image.starts_with(COMPRESSED_BUNDLE_MAGIC) {
        Err("compressed offload bundles are not accepted (hipModuleLoadData reads them without a length); \
             unbundle or decompress them with clang-offload-bundler first"
            .into())
    } else {
        Err("not an AMD GPU code object: neither an ELF file nor a clang offload bundle".into())
    }
}

/// Whether a code object defines kernel `name`: AMD GPU code objects carry a kernel descriptor symbol
/// `<name>.kd` for every kernel, whose name is in the ELF string table.
pub(crate) fn image_defines_kernel(image: &[u8], name: &str) -> bool {
    let mut needle = Vec::with_capacity(name.len() + 5);
    needle.push(0);
    needle.extend_from_slice(name.as_bytes());
    needle.extend_from_slice(b".kd\0");
    image.windows(needle.len()).any(|w| w == needle.as_slice())
}

/// Loads `code` with `hipModuleLoadData`, after checking that it is a whole AMD GPU code object. The
/// image is returned to be kept with the module: HIP documents no promise to copy it, and some releases
/// read it lazily.
pub(crate) fn load(op: &'static str, code: &CodeObject) -> Result<LoadedModule<sys::hipModule_t>> {
    if code.format != CodeFormat::HipCodeObject {
        return Err(Error::CodeObject {
            reason: format!("a HIP device loads HipCodeObject code objects, not {:?}", code.format),
        });
    }
    check_image(&code.image).map_err(|reason| Error::CodeObject { reason })?;
    let image: Box<[u8]> = code.image.clone().into_boxed_slice();
    // SAFETY: `image` is a whole code object (checked above: every offset inside it lies inside it), kept
    // alive by the module for as long as HIP may read it.
    match unsafe { result::module::load_data(op, image.as_ptr().cast::<c_void>()) } {
        Ok(raw) => Ok((raw, Some(image))),
        Err(e) if HipDriver::classify(&e) == ErrorClass::BadImage => Err(Error::CodeObject { reason: e.to_string() }),
        Err(e) => Err(e),
    }
}

/// A kernel's limits: the device's, narrowed by what HIP reports for the function. HIP may not report
/// an attribute for module functions on every release; the device's limit is the fallback (a kernel's
/// own limits are never larger).
///
/// # Safety
/// `function` belongs to a live module.
pub(crate) unsafe fn kernel_limits(
    op: &'static str,
    function: sys::hipFunction_t,
    device: &DeviceLimits,
) -> KernelLimits {
    // SAFETY: the caller's contract.
    let attr = |a| unsafe { result::function::attribute(op, function, a) }.ok().filter(|v| *v > 0).map(|v| v as u32);
    KernelLimits::narrow(
        device,
        attr(func_attribute::MAX_THREADS_PER_BLOCK),
        attr(func_attribute::MAX_DYNAMIC_SHARED_SIZE_BYTES),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal AMD GPU ELF header with one section header table of `shnum` entries at `shoff`.
    fn elf(len: usize, shoff: u64, shnum: u16) -> Vec<u8> {
        let mut image = vec![0u8; len];
        image[..4].copy_from_slice(b"\x7fELF");
        image[4] = 2;
        image[5] = 1;
        image[18..20].copy_from_slice(&EM_AMDGPU.to_le_bytes());
        image[40..48].copy_from_slice(&shoff.to_le_bytes());
        image[58..60].copy_from_slice(&64u16.to_le_bytes());
        image[60..62].copy_from_slice(&shnum.to_le_bytes());
        image
    }

    #[test]
    fn whole_elf_images_pass_and_truncated_ones_do_not() {
        let image = elf(64 + 2 * 64, 64, 2);
        assert_eq!(check_image(&image), Ok(()));
        for n in [1, 16, 63, 64, 100, 191] {
            assert!(check_image(&image[..n]).is_err(), "a prefix of {n} bytes passed");
        }
        let mut wrong_machine = image.clone();
        wrong_machine[18] = 62; // EM_X86_64
        assert!(check_image(&wrong_machine).unwrap_err().contains("not AMD GPU"));
        let mut bad_section = image.clone();
        // Section 1 claims 4 KiB of contents at offset 0.
        bad_section[64 + 64 + 32..64 + 64 + 40].copy_from_slice(&4096u64.to_le_bytes());
        assert!(check_image(&bad_section).unwrap_err().contains("section 1"));
    }

    #[test]
    fn bundles_are_checked_entry_by_entry() {
        let elf_image = elf(64, 0, 0);
        let triple = b"hipv4-amdgcn-amd-amdhsa--gfx90a";
        let mut bundle = BUNDLE_MAGIC.to_vec();
        bundle.extend_from_slice(&1u64.to_le_bytes());
        let offset = (bundle.len() + 24 + triple.len()) as u64;
        bundle.extend_from_slice(&offset.to_le_bytes());
        bundle.extend_from_slice(&(elf_image.len() as u64).to_le_bytes());
        bundle.extend_from_slice(&(triple.len() as u64).to_le_bytes());
        bundle.extend_from_slice(triple);
        bundle.extend_from_slice(&elf_image);
        assert_eq!(check_image(&bundle), Ok(()));
        assert!(check_image(&bundle[..bundle.len() - 1]).is_err());
        assert!(check_image(b"CCOB\x01\x00").unwrap_err().contains("compressed"));
        assert!(check_image(b"// ptx").unwrap_err().contains("not an AMD GPU code object"));
        assert!(check_image(&[]).is_err());
    }

    #[test]
    fn kernel_descriptors_are_found_by_name() {
        let image = b"\0junk\0saggar_fill_u32.kd\0saggar_fill_u32\0";
        assert!(image_defines_kernel(image, "saggar_fill_u32"));
        assert!(!image_defines_kernel(image, "fill_u32"));
        assert!(!image_defines_kernel(image, "saggar_axpy_f32"));
    }
}
