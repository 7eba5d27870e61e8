//! Runtime compilation with hipRTC: HIP C++ source to an AMD GPU code object for one architecture.
//!
//! The source is compiled with `--offload-arch=<gcnArchName>`, the device's architecture with its target
//! features (`gfx90a:sramecc+:xnack-`), so the code object runs on exactly the devices that report that
//! string ([`crate::DeviceInfo::arch`], which saggar uses in cache keys). hipRTC is loaded at run time,
//! from libhiprtc (ROCm 6 and later) or from libamdhip64 (ROCm 5.x, where it lives inside the runtime),
//! whichever the installed ROCm ships (see `sys::HIPRTC_CANDIDATES`); where neither has it, compiling is
//! [`Error::BackendUnavailable`] (loading precompiled code objects still works). A source that does not
//! compile is [`Error::Compile`] with hipRTC's log.
//!
//! saggar serialises hipRTC compilations in the process: hipRTC documents no thread-safety guarantee in
//! the ROCm releases saggar supports, and its compiler state (comgr) is process-wide. The compile-once
//! coordinator above compiles one program at a time anyway.
//!
//! # saggar's HIP-on-CUDA test fixture
//! `crates/saggar-hip-fixture` is a test-only library that exports the hip*/hiprtc* symbols over CUDA and
//! NVRTC, so this backend's unchanged code runs on an NVIDIA GPU. Its devices report an NVIDIA
//! architecture (`sm_90`) as `gcnArchName`, which it compiles for; there is no comgr to ask. So when, and
//! only when, the library hipRTC was loaded from exports the fixture's marker symbol
//! ([`FIXTURE_MARKER`]), targets are checked as NVIDIA targets and the comgr probe is skipped
//! ([`Compiler::Fixture`]). No ROCm library exports that symbol, so on AMD nothing changes.

use std::ffi::{CString, c_char};
use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::code::{CodeFormat, CodeObject, KernelSource};
use crate::error::{Error, Result};
use crate::hip::module::{check_image, image_defines_kernel};
use crate::hip::result::{self, hiprtc};
use crate::hip::sys::Hiprtc;

/// One hipRTC compilation at a time, process-wide.
static COMPILE_LOCK: Mutex<()> = Mutex::new(());

/// Checks the spelling of a target: a `gfx` processor, then target features `sramecc` / `xnack`, each
/// `+` or `-`, at most once each (`gfx90a:sramecc+:xnack-`).
pub(crate) fn check_target_syntax(arch: &str) -> std::result::Result<(), String> {
    let mut parts = arch.split(':');
    let processor = parts.next().unwrap_or_default();
    let digits = processor.strip_prefix("gfx").unwrap_or_default();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(format!("`{arch}` is not an AMD GPU target: expected a processor such as gfx90a or gfx942"));
    }
    let mut seen = Vec::new();
    for feature in parts {
        let name = feature.strip_suffix('+').or_else(|| feature.strip_suffix('-'));
        match name {
            Some(name @ ("sramecc" | "xnack")) if !seen.contains(&name) => seen.push(name),
            _ => {
                return Err(format!(
                    "`{arch}`: unknown or repeated target feature `{feature}` (expected sramecc+/- or xnack+/-)"
                ));
            }
        }
    }
    Ok(())
}

/// The symbol by which saggar's HIP-on-CUDA test fixture (`crates/saggar-hip-fixture`) marks itself.
pub(crate) const FIXTURE_MARKER: &str = "saggar_hip_fixture_version";

/// Which hipRTC this process loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compiler {
    /// ROCm's hipRTC: AMD targets, checked against comgr.
    Rocm,
    /// saggar's test fixture (see the module docs): NVIDIA targets (`sm_90`), no comgr.
    Fixture,
}

/// Whether the library `name` (already loaded: hipRTC was resolved from it) exports [`FIXTURE_MARKER`].
pub(crate) fn exports_fixture_marker(name: &str) -> bool {
    // SAFETY: hipRTC was loaded from this library and it stays loaded, so opening it again only takes
    // another reference to it; no initialiser runs. (For a library not yet loaded, opening it runs its
    // initialisers, which have no preconditions for ROCm's libraries or the fixture.)
    let Ok(library) = (unsafe { libloading::Library::new(name) }) else { return false };
    // SAFETY: the symbol is only looked up, never called or read.
    unsafe { library.get::<*const std::ffi::c_void>(FIXTURE_MARKER.as_bytes()) }.is_ok()
}

/// The kind of the loaded hipRTC, found once per process.
fn compiler(api: &Hiprtc) -> Compiler {
    static COMPILER: OnceLock<Compiler> = OnceLock::new();
    *COMPILER.get_or_init(|| if exports_fixture_marker(&api.library_name) { Compiler::Fixture } else { Compiler::Rocm })
}

/// Checks the spelling of a target for `compiler`: [`check_target_syntax`] for ROCm; for the fixture, an
/// NVIDIA target, `sm_` and digits with an optional `a` or `f` suffix (`sm_90`, `sm_90a`).
pub(crate) fn check_target_syntax_for(compiler: Compiler, arch: &str) -> std::result::Result<(), String> {
    match compiler {
        Compiler::Rocm => check_target_syntax(arch),
        Compiler::Fixture => {
            let sm = arch.strip_prefix("sm_").unwrap_or_default();
            let digits = sm.strip_suffix(['a', 'f']).unwrap_or(sm);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!(
                    "`{arch}` is not a target of saggar's HIP-on-CUDA test fixture: expected an NVIDIA target such as sm_90"
                ));
            }
            Ok(())
        }
    }
}

/// Checks that the installed compiler knows `arch` before hipRTC compiles for it: hipRTC aborts the
/// process on a processor or feature it does not know (ROCm 5.2 does, for `gfx942` or a typo). The
/// spelling is checked always; the processor and its features are checked against comgr, the compiler
/// library hipRTC itself uses, when comgr can be loaded (it is present wherever hipRTC works; if saggar
/// cannot find it under the names it knows, the spelling check is all that stands between a bad target
/// and hipRTC). The test fixture has no comgr: its targets are checked for spelling only.
fn check_target(compiler: Compiler, arch: &str) -> std::result::Result<(), String> {
    check_target_syntax_for(compiler, arch)?;
    if compiler == Compiler::Fixture {
        return Ok(());
    }
    match result::comgr::library() {
        Some(comgr) if !result::comgr::isa_is_known(comgr, &format!("amdgcn-amd-amdhsa--{arch}")) => Err(format!(
            "the installed ROCm compiler does not know target `{arch}` (a processor newer than this ROCm, or a \
             target feature the processor does not have); hipRTC would abort the process on it"
        )),
        _ => Ok(()),
    }
}

/// The compiler options for `arch`: the target first, then the source's own options.
pub(crate) fn compile_options(arch: &str, source: &KernelSource) -> Vec<String> {
    let mut options = vec![format!("--offload-arch={arch}")];
    options.extend(source.options.iter().cloned());
    options
}

/// Compiles `source` to an AMD GPU code object for architecture `arch`, as [`crate::DeviceInfo::arch`]
/// names it (`gfx942`, `gfx90a:sramecc+:xnack-`).
///
/// Needs only hipRTC, not a device: a cache can be seeded offline for a known architecture. Every kernel
/// the source declares must be defined (as `extern "C"`) in the result, or this is [`Error::Compile`].
pub fn compile_for_arch(source: &KernelSource, arch: &str) -> Result<CodeObject> {
    let op = "device.compile";
    let api = result::library::hiprtc()?;
    let compile_error = |log: String| Error::Compile { name: source.name.clone(), log };
    let compiler = compiler(api);
    check_target_syntax_for(compiler, arch).map_err(compile_error)?;
    let code =
        CString::new(source.code.as_str()).map_err(|_| compile_error("the source contains a NUL byte".into()))?;
    let name =
        CString::new(source.name.as_str()).map_err(|_| compile_error("the source name contains a NUL byte".into()))?;
    let options = compile_options(arch, source)
        .into_iter()
        .map(|o| CString::new(o).map_err(|_| compile_error("a compiler option contains a NUL byte".into())))
        .collect::<Result<Vec<_>>>()?;
    let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();

    let image = {
        let _one_at_a_time = COMPILE_LOCK.lock();
        let program = hiprtc::create(api, op, &code, &name)?;
        // Checked once the program exists: creating it makes hipRTC load its comgr, which the check then
        // asks, rather than some other installation's.
        let compiled = match check_target(compiler, arch) {
            // SAFETY: `program` is live until the destroy below; `options` outlives the calls.
            Ok(()) => unsafe { compile_program(api, op, program, &option_ptrs) },
            Err(reason) => Ok(Err(reason)),
        };
        // SAFETY: `program` is live and not used after this.
        let destroyed = unsafe { hiprtc::destroy(api, op, program) };
        match (compiled, destroyed) {
            (Ok(Ok(image)), Ok(())) => image,
            (Ok(Ok(_)), Err(e)) => return Err(e),
            (Ok(Err(log)), _) => return Err(compile_error(log)),
            (Err(e), _) => return Err(e),
        }
    };
    check_image(&image)
        .map_err(|reason| compile_error(format!("hipRTC produced an unusable code object: {reason}")))?;
    let missing: Vec<&str> =
        source.kernels.iter().map(|k| k.name.as_str()).filter(|k| !image_defines_kernel(&image, k)).collect();
    if !missing.is_empty() {
        return Err(compile_error(format!(
            "the source declares kernel(s) {} but the code object does not define them (are they `extern \"C\" \
             __global__`?)",
            missing.join(", ")
        )));
    }
    Ok(CodeObject { format: CodeFormat::HipCodeObject, image, kernels: source.kernels.clone() })
}

/// Compiles; `Ok(Err(log))` when the source does not compile.
///
/// # Safety
/// `program` must be live; every option must point to a NUL-terminated string that outlives the call.
unsafe fn compile_program(
    api: &Hiprtc,
    op: &'static str,
    program: hiprtc::Program,
    options: &[*const c_char],
) -> Result<std::result::Result<Vec<u8>, String>> {
    // SAFETY: the caller's promises.
    match unsafe { hiprtc::compile(api, op, program, options) } {
        Ok(()) => {}
        Err(e) if hiprtc::is_compilation_error(&e) => {
            // SAFETY: as above.
            let log = unsafe { hiprtc::log(api, op, program) }
                .unwrap_or_else(|l| format!("(the log could not be read: {l})"));
            let log = if log.is_empty() { e.to_string() } else { log };
            return Ok(Err(log));
        }
        Err(e) => {
            // An invalid option (HIPRTC_ERROR_INVALID_OPTION) also leaves a useful log.
            // SAFETY: as above.
            let log = unsafe { hiprtc::log(api, op, program) }.unwrap_or_default();
            return Ok(Err(if log.is_empty() { e.to_string() } else { format!("{e}\n{log}") }));
        }
    }
    // SAFETY: as above; the program compiled.
    unsafe { hiprtc::code(api, op, program) }.map(Ok)
}

/// hipRTC's version, e.g. `(9, 0)` on ROCm 5.2, or why hipRTC cannot be used.
pub fn hiprtc_version() -> Result<(i32, i32)> {
    let api = result::library::hiprtc()?;
    hiprtc::version(api, "hip.hiprtc_version")
}

/// The library hipRTC was loaded from (`libhiprtc.so`, or `libamdhip64.so` on ROCm 5.x), or why
/// hipRTC cannot be used.
pub fn hiprtc_library() -> Result<&'static str> {
    result::library::hiprtc().map(|api| api.library_name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{KernelSignature, ParamKind};

    #[test]
    fn the_target_comes_first_and_user_options_follow() {
        let mut source = crate::builtin::source();
        source.options = vec!["-DBATCH=8".into()];
        assert_eq!(
            compile_options("gfx90a:sramecc+:xnack-", &source),
            ["--offload-arch=gfx90a:sramecc+:xnack-", "-DBATCH=8"]
        );
    }

    /// hipRTC compiles for an explicit architecture without a GPU, so this runs wherever hipRTC loads:
    /// the built-in kernels (whose prelude is written for NVRTC and hipRTC alike) compile, a syntax
    /// error is `Error::Compile` with the compiler's log, and a declared kernel the source does not
    /// define is refused.
    #[test]
    fn builtin_kernels_compile_for_an_explicit_architecture() {
        let library = match hiprtc_library() {
            Ok(library) => library,
            Err(e) => {
                eprintln!("SKIPPED hip::rtc: {e}");
                assert!(matches!(e, Error::BackendUnavailable { .. }), "{e:?}");
                return;
            }
        };
        let (major, minor) = hiprtc_version().expect("hiprtcVersion");
        eprintln!("NOTE hip: hipRTC {major}.{minor} from {library}");
        let code = compile_for_arch(&crate::builtin::source(), "gfx90a").expect("the built-in kernels compile");
        assert_eq!(code.format, CodeFormat::HipCodeObject);
        assert!(code.image.starts_with(b"\x7fELF"), "hipRTC returns an ELF code object");
        assert_eq!(check_image(&code.image), Ok(()));
        for kernel in &code.kernels {
            assert!(image_defines_kernel(&code.image, &kernel.name), "{} is not in the code object", kernel.name);
        }
        // The code object survives saggar's serialisation, as it would through the compile cache.
        assert_eq!(CodeObject::from_bytes(&code.to_bytes()).unwrap(), code);
        // Every truncation of a real code object is caught before hipModuleLoadData would read it.
        for n in (0..code.image.len()).step_by(97) {
            assert!(check_image(&code.image[..n]).is_err(), "a prefix of {n} bytes passed");
        }

        let broken = KernelSource::new(
            "broken.hip",
            "extern \"C\" __global__ void k(float* x) { x[0] = undefined_name; }",
            vec![KernelSignature::new("k", &[ParamKind::Ptr])],
        );
        match compile_for_arch(&broken, "gfx90a").unwrap_err() {
            Error::Compile { name, log } => {
                assert_eq!(name, "broken.hip");
                assert!(log.contains("undefined_name"), "the log should name the error: {log}");
            }
            other => panic!("expected Error::Compile, got {other:?}"),
        }

        let mangled = KernelSource::new(
            "mangled.hip",
            "__global__ void k(float* x) { x[0] = 1.0f; }",
            vec![KernelSignature::new("k", &[ParamKind::Ptr])],
        );
        match compile_for_arch(&mangled, "gfx90a").unwrap_err() {
            Error::Compile { log, .. } => assert!(log.contains("extern \"C\""), "{log}"),
            other => panic!("expected Error::Compile, got {other:?}"),
        }

        // Targets hipRTC would abort the process on are refused first; features are accepted where the
        // processor has them.
        assert!(compile_for_arch(&crate::builtin::source(), "gfx90a:sramecc+:xnack-").is_ok());
        for bad in ["", " ", "foo", "gfx", "gfx90a:", "gfx90a:bogus+", "gfx90a:xnack+:xnack-", "GFX90A"] {
            match compile_for_arch(&crate::builtin::source(), bad) {
                Err(Error::Compile { log, .. }) => assert!(log.contains("target"), "{bad}: {log}"),
                other => panic!("target `{bad}` gave {other:?}"),
            }
        }
        if result::comgr::library().is_some() {
            for unknown in ["gfx9999", "gfx1030:xnack+", "gfx900:sramecc+"] {
                match compile_for_arch(&crate::builtin::source(), unknown) {
                    Err(Error::Compile { log, .. }) => assert!(log.contains("does not know"), "{unknown}: {log}"),
                    other => panic!("target `{unknown}` gave {other:?}"),
                }
            }
        } else {
            eprintln!("NOTE hip: comgr not found; targets are checked for spelling only");
        }
    }

    /// The fixture's targets are accepted only where hipRTC is the fixture; ROCm's checks are unchanged.
    #[test]
    fn fixture_targets_only_with_the_fixture() {
        for arch in ["sm_90", "sm_90a", "sm_100", "sm_120f"] {
            assert_eq!(check_target_syntax_for(Compiler::Fixture, arch), Ok(()), "{arch}");
            assert!(check_target_syntax_for(Compiler::Rocm, arch).is_err(), "ROCm accepted `{arch}`");
        }
        for bad in ["", "sm_", "sm_9x", "sm_90af", "gfx90a", "compute_90", "SM_90"] {
            assert!(check_target_syntax_for(Compiler::Fixture, bad).is_err(), "the fixture accepted `{bad}`");
        }
        for arch in ["gfx942", "gfx90a:sramecc+:xnack-", "gfx1100"] {
            assert_eq!(check_target_syntax_for(Compiler::Rocm, arch), check_target_syntax(arch));
        }
        assert_eq!(check_target_syntax_for(Compiler::Rocm, "gfx90a:bogus+"), check_target_syntax("gfx90a:bogus+"));
    }

    /// ROCm's libraries do not carry the fixture's marker, so a real hipRTC is never taken for it.
    #[test]
    fn rocm_is_not_the_fixture() {
        assert!(!exports_fixture_marker("libc.so.6"));
        assert!(!exports_fixture_marker("libsaggar-no-such-library.so"));
        match result::library::hiprtc() {
            Ok(api) => {
                assert!(
                    !exports_fixture_marker(&api.library_name),
                    "{} carries the fixture's marker",
                    api.library_name
                );
                assert_eq!(compiler(api), Compiler::Rocm);
            }
            Err(e) => eprintln!("SKIPPED hip::rtc::rocm_is_not_the_fixture (hipRTC part): {e}"),
        }
    }

    #[test]
    fn target_spelling() {
        assert_eq!(check_target_syntax("gfx942"), Ok(()));
        assert_eq!(check_target_syntax("gfx90a:sramecc+:xnack-"), Ok(()));
        assert_eq!(check_target_syntax("gfx1100"), Ok(()));
        for bad in ["", "sm_90", "gfx", "gfx90z", "gfx90a:", "gfx90a:xnack", "gfx90a:xnack+:xnack+", "gfx90a:foo+"] {
            assert!(check_target_syntax(bad).is_err(), "`{bad}` passed");
        }
    }
}
