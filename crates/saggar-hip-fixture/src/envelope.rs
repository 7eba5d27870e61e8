//! The fixture's "code object": NVRTC's PTX in an ELF envelope shaped so that saggar's HIP backend,
//! unchanged, accepts it.
//!
//! The HIP backend checks every image before `hipModuleLoadData` (`check_image` in
//! `crates/saggar-device/src/hip/module.rs`): a 64-bit little-endian ELF file with machine `EM_AMDGPU`
//! whose headers and sections lie inside the image; and after compiling it looks for a kernel descriptor
//! name `<kernel>.kd` per declared kernel (`image_defines_kernel`). So the envelope is a minimal ELF file:
//!
//! | section | contents |
//! |---|---|
//! | `.shstrtab` | section names |
//! | `.strtab` | `<kernel>.kd` for every `.entry` in the PTX (what an AMD code object has for each kernel) |
//! | `.saggar_fixture.ptx` | the PTX, NUL-terminated |
//! | `.saggar_fixture.note` | a sentence saying what this is |
//!
//! `e_machine` says `EM_AMDGPU` only because the backend's check accepts nothing else; `e_flags` carries
//! the fixture's mark ([`E_FLAGS_MARK`], "KLNF"), which no AMD code object has (their flags hold a
//! processor number below 0x100 and feature bits), and there is no AMD GPU code in it: ROCm cannot load
//! it, and the fixture's `hipModuleLoadData` refuses real AMD code objects.

use std::ops::Range;

/// `EM_AMDGPU`.
pub const EM_AMDGPU: u16 = 224;
/// The fixture's mark in `e_flags`: "KLNF", little-endian.
pub const E_FLAGS_MARK: u32 = u32::from_le_bytes(*b"KLNF");
/// The section that holds the PTX.
pub const PTX_SECTION: &str = ".saggar_fixture.ptx";
/// The section that says what this file is.
pub const NOTE_SECTION: &str = ".saggar_fixture.note";

const EHDR: usize = 64;
const SHDR: usize = 64;
const SHT_PROGBITS: u32 = 1;
const SHT_STRTAB: u32 = 3;
const SHT_NOTE_LIKE: u32 = SHT_PROGBITS;
/// At most this many sections are read from an image (the envelope has 5).
const MAX_SECTIONS: u16 = 16;

/// The `.entry` (kernel) names of a PTX module, in order.
pub fn ptx_entries(ptx: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry") {
        rest = &rest[at + ".entry".len()..];
        // `.entry` must stand alone: followed by white space, then the name.
        if !rest.starts_with(|c: char| c.is_ascii_whitespace()) {
            continue;
        }
        let name: String = rest
            .trim_start()
            .chars()
            .take_while(|&c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '%'))
            .collect();
        if !name.is_empty() {
            names.push(name);
        }
    }
    names
}

/// Wraps `ptx` (without its NUL) for architecture `arch` (`compute_90`) in an envelope.
pub fn build(ptx: &[u8], arch: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(ptx);
    let mut strtab = vec![0u8];
    for kernel in ptx_entries(&text) {
        strtab.extend_from_slice(kernel.as_bytes());
        strtab.extend_from_slice(b".kd\0");
    }
    let mut ptx_bytes = ptx.to_vec();
    ptx_bytes.push(0);
    let note = format!(
        "saggar-hip-fixture {}: NVRTC PTX for {arch} in an envelope saggar's HIP backend accepts; a TEST FIXTURE \
         artifact, not an AMD GPU code object\0",
        env!("CARGO_PKG_VERSION")
    )
    .into_bytes();

    let names: [&str; 4] = [".shstrtab", ".strtab", PTX_SECTION, NOTE_SECTION];
    let mut shstrtab = vec![0u8];
    let mut name_offsets = Vec::new();
    for name in names {
        name_offsets.push(shstrtab.len() as u32);
        shstrtab.extend_from_slice(name.as_bytes());
        shstrtab.push(0);
    }
    let contents: [(&[u8], u32); 4] =
        [(&shstrtab, SHT_STRTAB), (&strtab, SHT_STRTAB), (&ptx_bytes, SHT_PROGBITS), (&note, SHT_NOTE_LIKE)];
    let shnum = 1 + contents.len();
    let mut offset = EHDR + shnum * SHDR;

    let mut image = vec![0u8; offset];
    image[..4].copy_from_slice(b"\x7fELF");
    image[4] = 2; // ELFCLASS64
    image[5] = 1; // ELFDATA2LSB
    image[6] = 1; // EV_CURRENT
    // e_type stays ET_NONE: nothing can execute or link this file.
    image[18..20].copy_from_slice(&EM_AMDGPU.to_le_bytes());
    image[20..24].copy_from_slice(&1u32.to_le_bytes()); // e_version
    image[40..48].copy_from_slice(&(EHDR as u64).to_le_bytes()); // e_shoff
    image[48..52].copy_from_slice(&E_FLAGS_MARK.to_le_bytes());
    image[52..54].copy_from_slice(&(EHDR as u16).to_le_bytes()); // e_ehsize
    image[58..60].copy_from_slice(&(SHDR as u16).to_le_bytes()); // e_shentsize
    image[60..62].copy_from_slice(&(shnum as u16).to_le_bytes()); // e_shnum
    image[62..64].copy_from_slice(&1u16.to_le_bytes()); // e_shstrndx
    for (i, ((bytes, kind), name)) in contents.iter().zip(&name_offsets).enumerate() {
        let at = EHDR + (i + 1) * SHDR;
        image[at..at + 4].copy_from_slice(&name.to_le_bytes());
        image[at + 4..at + 8].copy_from_slice(&kind.to_le_bytes());
        image[at + 24..at + 32].copy_from_slice(&(offset as u64).to_le_bytes());
        image[at + 32..at + 40].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
        image[at + 48..at + 56].copy_from_slice(&1u64.to_le_bytes()); // sh_addralign
        offset += bytes.len();
    }
    for (bytes, _) in contents {
        image.extend_from_slice(bytes);
    }
    image
}

/// What an image is, as far as the fixture's `hipModuleLoadData` is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// A fixture envelope; the PTX (NUL included) lies at this range.
    Envelope {
        /// Where the NUL-terminated PTX lies in the image.
        ptx: Range<usize>,
    },
    /// A real AMD GPU code object or offload bundle: it cannot run on an NVIDIA GPU.
    Amd,
    /// Anything else, with the reason.
    Invalid(String),
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Reads an image that may be an envelope, a byte at a time as far as its own headers say it extends.
/// `read(range)` returns those bytes of the image (the caller guarantees that a range the headers name
/// lies inside the image: saggar's HIP backend checked exactly that before `hipModuleLoadData`).
pub fn classify(read: &dyn Fn(Range<usize>) -> Vec<u8>) -> Image {
    let magic = read(0..4);
    if magic.starts_with(b"__CL") || magic == b"CCOB" {
        return Image::Amd;
    }
    if magic != b"\x7fELF" {
        return Image::Invalid("not an ELF file (the fixture loads only the code objects its hipRTC made)".into());
    }
    let header = read(0..EHDR);
    if header[4] != 2 || header[5] != 1 {
        return Image::Invalid("not a 64-bit little-endian ELF file".into());
    }
    let machine = u16_at(&header, 18);
    let flags = u32_at(&header, 48);
    if machine == EM_AMDGPU && flags != E_FLAGS_MARK {
        return Image::Amd;
    }
    if machine != EM_AMDGPU {
        return Image::Invalid(format!("ELF machine {machine} is not a fixture envelope's"));
    }
    let shoff = u64_at(&header, 40);
    let shentsize = u16_at(&header, 58);
    let shnum = u16_at(&header, 60);
    let shstrndx = u16_at(&header, 62);
    if usize::from(shentsize) != SHDR || shnum == 0 || shnum > MAX_SECTIONS || shstrndx >= shnum || shoff < EHDR as u64
    {
        return Image::Invalid("the envelope's section header table is malformed".into());
    }
    let Ok(shoff) = usize::try_from(shoff) else { return Image::Invalid("section table offset overflows".into()) };
    let table = read(shoff..shoff + usize::from(shnum) * SHDR);
    let section = |i: usize| -> Option<(u32, usize, usize)> {
        let at = i * SHDR;
        let name = u32_at(&table, at);
        let offset = usize::try_from(u64_at(&table, at + 24)).ok()?;
        let size = usize::try_from(u64_at(&table, at + 32)).ok()?;
        offset.checked_add(size)?;
        Some((name, offset, size))
    };
    let Some((_, names_at, names_len)) = section(usize::from(shstrndx)) else {
        return Image::Invalid("the section name table lies outside the address space".into());
    };
    let names = read(names_at..names_at + names_len);
    for i in 1..usize::from(shnum) {
        let Some((name, offset, size)) = section(i) else { continue };
        let name = names.get(name as usize..).unwrap_or_default();
        let name = name.split(|&b| b == 0).next().unwrap_or_default();
        if name == PTX_SECTION.as_bytes() {
            if size == 0 || read(offset + size - 1..offset + size) != [0] {
                return Image::Invalid("the envelope's PTX is not NUL-terminated".into());
            }
            return Image::Envelope { ptx: offset..offset + size };
        }
    }
    Image::Invalid("the envelope has no PTX section".into())
}

/// [`classify`] over a byte slice (bounds-checked: a range past the end reads as zeros).
#[cfg(test)]
pub fn classify_slice(image: &[u8]) -> Image {
    classify(&|range: Range<usize>| {
        let mut out = vec![0u8; range.len()];
        if let Some(src) = image.get(range.start..range.end.min(image.len())) {
            out[..src.len()].copy_from_slice(src);
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = "//\n.version 8.0\n.target sm_90\n.address_size 64\n\n\t// .globl\tsaggar_fill_u32\n\
                       .visible .entry saggar_fill_u32(\n\t.param .u64 a\n)\n{\n\tret;\n}\n\
                       .visible .entry _Z1kPf(\n)\n{\n\tret;\n}\n";

    #[test]
    fn entries_are_found_mangled_or_not() {
        assert_eq!(ptx_entries(PTX), ["saggar_fill_u32", "_Z1kPf"]);
        assert!(ptx_entries(".entryx foo(").is_empty());
        assert!(ptx_entries("").is_empty());
    }

    #[test]
    fn the_envelope_carries_the_ptx_and_kernel_descriptor_names() {
        let image = build(PTX.as_bytes(), "compute_90");
        let Image::Envelope { ptx } = classify_slice(&image) else { panic!("{:?}", classify_slice(&image)) };
        assert_eq!(&image[ptx.start..ptx.end - 1], PTX.as_bytes());
        assert_eq!(image[ptx.end - 1], 0);
        let has = |needle: &[u8]| image.windows(needle.len()).any(|w| w == needle);
        assert!(has(b"\0saggar_fill_u32.kd\0"), "the backend's image_defines_kernel looks for this");
        assert!(has(b"\0_Z1kPf.kd\0"));
        assert!(!has(b"\0k.kd\0"), "an unmangled name appears only for extern \"C\" kernels");
        assert!(has(b"not an AMD GPU code object"));
    }

    /// The same checks as `check_elf` in saggar's HIP backend (crates/saggar-device/src/hip/module.rs): the
    /// machine is EM_AMDGPU and every section lies inside the image.
    #[test]
    fn the_envelope_passes_the_hip_backends_image_check() {
        let image = build(PTX.as_bytes(), "compute_90");
        assert_eq!(u16_at(&image, 18), EM_AMDGPU);
        let (shoff, shentsize, shnum) = (u64_at(&image, 40) as usize, u16_at(&image, 58), u16_at(&image, 60));
        assert_eq!((shentsize, u16_at(&image, 56)), (64, 0), "64-byte section headers, no program headers");
        assert!(shoff + usize::from(shnum) * 64 <= image.len());
        for i in 0..usize::from(shnum) {
            let at = shoff + i * 64;
            let (offset, size) = (u64_at(&image, at + 24) as usize, u64_at(&image, at + 32) as usize);
            assert!(offset + size <= image.len(), "section {i} lies outside the image");
        }
    }

    #[test]
    fn real_amd_code_objects_and_junk_are_told_apart() {
        let mut amd = build(PTX.as_bytes(), "compute_90");
        amd[48..52].copy_from_slice(&0x40u32.to_le_bytes()); // EF_AMDGPU_MACH_AMDGCN_GFX90A
        assert_eq!(classify_slice(&amd), Image::Amd);
        assert_eq!(classify_slice(b"__CLANG_OFFLOAD_BUNDLE__...."), Image::Amd);
        assert_eq!(classify_slice(b"CCOB\x01\0\0\0"), Image::Amd);
        assert!(matches!(classify_slice(b"// PTX text"), Image::Invalid(_)));
        let mut x86 = build(PTX.as_bytes(), "compute_90");
        x86[18..20].copy_from_slice(&62u16.to_le_bytes());
        assert!(matches!(classify_slice(&x86), Image::Invalid(_)));
        let mut unterminated = build(PTX.as_bytes(), "compute_90");
        let Image::Envelope { ptx } = classify_slice(&unterminated) else { unreachable!() };
        unterminated[ptx.end - 1] = b'x';
        assert!(matches!(classify_slice(&unterminated), Image::Invalid(_)));
        let mut bad_table = build(PTX.as_bytes(), "compute_90");
        bad_table[60..62].copy_from_slice(&200u16.to_le_bytes());
        assert!(matches!(classify_slice(&bad_table), Image::Invalid(_)));
    }
}
