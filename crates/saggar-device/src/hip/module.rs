//! Modules and kernels of the HIP backend: `hipModuleLoadData` from an AMD code object, kernel handles
//! from `hipModuleGetFunction`, each with the signature its code object declares and the limits HIP
//! reports for it, so every launch is checked before it reaches HIP.
//!
//! `hipModuleLoadData` takes a pointer and no length: it trusts the offsets written inside the image. A
//! truncated or corrupted image (a damaged cache entry) would make it read past the end of the buffer,
//! so saggar checks the headers first ([`check_image`]): every table and section the image points to must
//! lie inside it.

use std::ffi::{CString, c_void};
use std::sync::Arc;

use crate::api::{Kernel, Module};
use crate::code::{CodeFormat, CodeObject};
use crate::error::{Error, Result};
use crate::hip::HipBackend;
use crate::hip::device::{self, DeviceShared, SendHandle};
use crate::hip::result::{self, has_code};
use crate::hip::sys::{self, code, func_attribute};
use crate::types::{KernelSignature, LaunchConfig};

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

/// A loaded module, shared by its kernels and by every graph that launched one of them.
pub(crate) struct ModuleShared {
    device: Arc<DeviceShared>,
    raw: sys::hipModule_t,
    signatures: Vec<Arc<KernelSignature>>,
    /// The image the module was loaded from. HIP documents no promise to copy it, and some releases
    /// read it lazily, so saggar keeps it for as long as the module is loaded.
    _image: Box<[u8]>,
}

// SAFETY: a `hipModule_t` is an opaque handle the runtime accepts from any thread; the rest is immutable.
unsafe impl Send for ModuleShared {}
// SAFETY: as above.
unsafe impl Sync for ModuleShared {}

impl Drop for ModuleShared {
    fn drop(&mut self) {
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if !raw.is_null() {
            let raw = SendHandle::new(raw);
            device::release(&self.device, "module.drop", move || {
                // SAFETY: `raw` was swapped out, so it is unloaded once. No kernel of it can be launched any
                // more: kernels and graphs hold this module by `Arc`, so this runs after the last of them is
                // gone (work they enqueued may still run, which the launch contracts leave to the caller).
                unsafe { result::module::unload("module.drop", raw.into_inner()) }
            });
        }
    }
}

impl std::fmt::Debug for ModuleShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipModule")
            .field("device", &self.device.ordinal())
            .field("kernels", &self.signatures.iter().map(|s| s.name.as_str()).collect::<Vec<_>>())
            .finish()
    }
}

/// A loaded module of the HIP backend (`hipModuleLoadData`), unloaded when the module, its kernels and
/// every graph that launched one of its kernels are gone.
///
/// # Thread safety
/// `Send + Sync`: a module is immutable once loaded; kernels may be looked up from any thread.
#[derive(Debug)]
pub struct HipModule {
    shared: Arc<ModuleShared>,
}

impl HipModule {
    /// Loads `code`; the device is current (the caller entered it).
    pub(crate) fn load(device: Arc<DeviceShared>, code: &CodeObject) -> Result<HipModule> {
        let op = "device.load_module";
        if code.format != CodeFormat::HipCodeObject {
            return Err(Error::CodeObject {
                reason: format!("a HIP device loads HipCodeObject code objects, not {:?}", code.format),
            });
        }
        check_image(&code.image).map_err(|reason| Error::CodeObject { reason })?;
        let image: Box<[u8]> = code.image.clone().into_boxed_slice();
        // SAFETY: `image` is a whole code object (checked above: every offset inside it lies inside it),
        // kept alive by the module for as long as HIP may read it.
        let raw = match unsafe { result::module::load_data(op, image.as_ptr().cast::<c_void>()) } {
            Ok(raw) => raw,
            Err(e) if is_bad_image(&e) => return Err(Error::CodeObject { reason: e.to_string() }),
            Err(e) => return Err(e),
        };
        Ok(HipModule {
            shared: Arc::new(ModuleShared {
                device,
                raw,
                signatures: code.kernels.iter().cloned().map(Arc::new).collect(),
                _image: image,
            }),
        })
    }
}

/// HIP errors that mean "this image cannot be loaded here", which saggar reports as a bad code object.
fn is_bad_image(error: &Error) -> bool {
    [code::INVALID_IMAGE, code::NO_BINARY_FOR_GPU, code::INVALID_KERNEL_FILE, code::SHARED_OBJECT_INIT_FAILED]
        .into_iter()
        .any(|code| has_code(error, code))
}

impl Module for HipModule {
    type Backend = HipBackend;

    fn kernel(&self, name: &str) -> Result<HipKernel> {
        let op = "module.kernel";
        let shared = &self.shared;
        let no_such = || {
            let mut names: Vec<_> = shared.signatures.iter().map(|s| s.name.as_str()).collect();
            names.sort_unstable();
            Error::NoSuchKernel {
                kernel: name.to_string(),
                module: "HIP code object module".into(),
                available: names.join(", "),
            }
        };
        let signature = shared.signatures.iter().find(|s| s.name == name).cloned().ok_or_else(no_such)?;
        let c_name = CString::new(name).map_err(|_| no_such())?;
        shared.device.enter(op)?;
        // SAFETY: the module is live while `shared` is.
        let raw = match unsafe { result::function::get(op, shared.raw, &c_name) } {
            Ok(raw) => raw,
            Err(e)
                if [code::NOT_FOUND, code::INVALID_SYMBOL, code::INVALID_DEVICE_FUNCTION]
                    .iter()
                    .any(|&c| has_code(&e, c)) =>
            {
                return Err(no_such());
            }
            Err(e) => return Err(e),
        };
        // HIP may not report an attribute for module functions on every release; the device's limit is
        // the fallback (a kernel's own limits are never larger).
        // SAFETY: `raw` belongs to the live module.
        let attr = |a| unsafe { result::function::attribute(op, raw, a) }.ok().filter(|v| *v > 0).map(|v| v as u32);
        let device = &shared.device.limits;
        let limits = KernelLimits {
            max_threads_per_block: attr(func_attribute::MAX_THREADS_PER_BLOCK)
                .map_or(device.max_threads_per_block, |v| v.min(device.max_threads_per_block)),
            max_dynamic_shared_bytes: attr(func_attribute::MAX_DYNAMIC_SHARED_SIZE_BYTES)
                .map_or(device.max_shared_bytes, |v| v.min(device.max_shared_bytes)),
            max_block: device.max_block,
            max_grid: device.max_grid,
        };
        Ok(HipKernel { module: shared.clone(), raw, signature, limits })
    }
}

/// What one kernel may be launched with: the device's limits, narrowed by the kernel's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KernelLimits {
    pub(crate) max_threads_per_block: u32,
    pub(crate) max_dynamic_shared_bytes: u32,
    pub(crate) max_block: [u32; 3],
    pub(crate) max_grid: [u32; 3],
}

impl KernelLimits {
    /// Why `config` cannot be launched under these limits, if it cannot (after [`LaunchConfig::check`]).
    pub(crate) fn violation(&self, config: &LaunchConfig) -> Option<String> {
        let (b, g) = (config.block, config.grid);
        let (bd, gd) = ([b.x, b.y, b.z], [g.x, g.y, g.z]);
        if bd.iter().zip(&self.max_block).any(|(v, max)| v > max) {
            return Some(format!(
                "block ({}, {}, {}) exceeds the device's maximum block dimensions ({}, {}, {})",
                b.x, b.y, b.z, self.max_block[0], self.max_block[1], self.max_block[2]
            ));
        }
        if b.volume() > u64::from(self.max_threads_per_block) {
            return Some(format!(
                "{} threads per block exceeds this kernel's limit of {}",
                b.volume(),
                self.max_threads_per_block
            ));
        }
        if gd.iter().zip(&self.max_grid).any(|(v, max)| v > max) {
            return Some(format!(
                "grid ({}, {}, {}) exceeds the device's maximum grid dimensions ({}, {}, {})",
                g.x, g.y, g.z, self.max_grid[0], self.max_grid[1], self.max_grid[2]
            ));
        }
        // AMD GPUs dispatch a grid as a count of work-items per dimension, a 32-bit number: HIP refuses a
        // launch whose grid times block exceeds it in any dimension.
        if gd.iter().zip(&bd).any(|(&g, &b)| u64::from(g) * u64::from(b) > u64::from(u32::MAX)) {
            return Some(format!(
                "grid ({}, {}, {}) of blocks ({}, {}, {}) exceeds 2^32 - 1 threads in a dimension, the AMD limit",
                g.x, g.y, g.z, b.x, b.y, b.z
            ));
        }
        if config.shared_mem_bytes > self.max_dynamic_shared_bytes {
            return Some(format!(
                "{} bytes of dynamic shared memory exceed this kernel's limit of {}",
                config.shared_mem_bytes, self.max_dynamic_shared_bytes
            ));
        }
        None
    }
}

/// A kernel of a loaded HIP module; it keeps its module loaded.
///
/// # Thread safety
/// `Send + Sync`, cheap to clone: a kernel handle is immutable, and HIP allows launching the same
/// function from several threads and streams at once.
#[derive(Clone)]
pub struct HipKernel {
    module: Arc<ModuleShared>,
    raw: sys::hipFunction_t,
    signature: Arc<KernelSignature>,
    limits: KernelLimits,
}

// SAFETY: a `hipFunction_t` is an opaque handle, valid while its module (held by `module`) is loaded, and
// usable from any thread.
unsafe impl Send for HipKernel {}
// SAFETY: as above; the handle is immutable.
unsafe impl Sync for HipKernel {}

impl std::fmt::Debug for HipKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipKernel")
            .field("name", &self.signature.name)
            .field("device", &self.module.device.ordinal())
            .field("max_threads_per_block", &self.limits.max_threads_per_block)
            .finish()
    }
}

impl HipKernel {
    /// The raw HIP handle, for interop and benchmarks; valid while this kernel (or a clone) lives.
    pub fn raw_handle(&self) -> sys::hipFunction_t {
        self.raw
    }

    pub(crate) fn ordinal(&self) -> usize {
        self.module.device.ordinal()
    }

    pub(crate) fn module(&self) -> &Arc<ModuleShared> {
        &self.module
    }

    pub(crate) fn signature_arc(&self) -> &Arc<KernelSignature> {
        &self.signature
    }

    /// Checks `config` against this kernel's and its device's limits (after [`LaunchConfig::check`]).
    #[inline]
    pub(crate) fn check_limits(&self, config: &LaunchConfig) -> Result<()> {
        match self.limits.violation(config) {
            None => Ok(()),
            Some(reason) => Err(Error::InvalidLaunchConfig { kernel: self.signature.name.clone(), reason }),
        }
    }
}

impl Kernel for HipKernel {
    fn signature(&self) -> &KernelSignature {
        &self.signature
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Dim3;

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

    #[test]
    fn launch_limits_include_the_amd_grid_size_limit() {
        let limits = KernelLimits {
            max_threads_per_block: 1024,
            max_dynamic_shared_bytes: 65536,
            max_block: [1024, 1024, 1024],
            max_grid: [u32::MAX >> 1, 65536, 65536],
        };
        let ok = LaunchConfig::for_elements(1 << 20, 256);
        assert_eq!(limits.violation(&ok), None);
        let huge = LaunchConfig { grid: Dim3::x(1 << 30), block: Dim3::x(1024), shared_mem_bytes: 0 };
        assert!(limits.violation(&huge).unwrap().contains("2^32 - 1"));
        let wide = LaunchConfig { grid: Dim3::x(1), block: Dim3 { x: 2048, y: 1, z: 1 }, shared_mem_bytes: 0 };
        assert!(limits.violation(&wide).unwrap().contains("maximum block dimensions"));
        let lds = LaunchConfig { shared_mem_bytes: 65537, ..ok };
        assert!(limits.violation(&lds).unwrap().contains("shared memory"));
        let narrow = KernelLimits { max_threads_per_block: 256, ..limits };
        let block512 = LaunchConfig::for_elements(4096, 512);
        assert!(narrow.violation(&block512).unwrap().contains("limit of 256"));
    }
}
