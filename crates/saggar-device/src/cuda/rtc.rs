//! Runtime compilation with NVRTC: CUDA C++ source to a cubin for a compute capability.
//!
//! The source is compiled with `--gpu-architecture=sm_XY` for the device's compute capability, so
//! NVRTC emits the machine code itself and a load (a warm start from the compile cache included)
//! never waits for the driver's PTX JIT. NVRTC is
//! loaded at run time like the driver; where it is missing, compiling is [`Error::BackendUnavailable`]
//! (loading precompiled PTX or cubin still works). A source that does not compile is
//! [`Error::Compile`] with NVRTC's log.

use std::ffi::{CString, c_char};

use crate::code::{CodeFormat, CodeObject, KernelSource};
use crate::cuda::result::{self, nvrtc};
use crate::error::{Error, Result};

/// Compiles `source` to a cubin for compute capability `(major, minor)`, e.g. `(9, 0)` for Hopper.
///
/// Needs only NVRTC, not a device or the driver: a cache can be seeded offline for a known architecture.
pub fn compile_for(source: &KernelSource, compute_capability: (u32, u32)) -> Result<CodeObject> {
    let op = "device.compile";
    result::library::nvrtc()?;
    let compile_error = |log: String| Error::Compile { name: source.name.clone(), log };
    let code =
        CString::new(source.code.as_str()).map_err(|_| compile_error("the source contains a NUL byte".into()))?;
    let name =
        CString::new(source.name.as_str()).map_err(|_| compile_error("the source name contains a NUL byte".into()))?;
    let (major, minor) = compute_capability;
    let mut options = vec![format!("--gpu-architecture=sm_{major}{minor}")];
    options.extend(source.options.iter().cloned());
    let options = options
        .into_iter()
        .map(|o| CString::new(o).map_err(|_| compile_error("a compiler option contains a NUL byte".into())))
        .collect::<Result<Vec<_>>>()?;
    let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();

    let program = nvrtc::create(op, &code, &name)?;
    // SAFETY: `program` is live until the destroy below; `options` outlives the calls.
    let compiled = unsafe { compile_program(op, program, &option_ptrs) };
    // SAFETY: `program` is live and not used after this.
    let destroyed = unsafe { nvrtc::destroy(op, program) };
    let image = match (compiled, destroyed) {
        (Ok(Ok(image)), Ok(())) => image,
        (Ok(Ok(_)), Err(e)) => return Err(e),
        (Ok(Err(log)), _) => return Err(compile_error(log)),
        (Err(e), _) => return Err(e),
    };
    Ok(CodeObject { format: CodeFormat::Cubin, image, kernels: source.kernels.clone() })
}

/// Compiles; `Ok(Err(log))` when the source does not compile.
///
/// # Safety
/// `program` must be live; every option must point to a NUL-terminated string that outlives the call.
unsafe fn compile_program(
    op: &'static str,
    program: nvrtc::Program,
    options: &[*const c_char],
) -> Result<std::result::Result<Vec<u8>, String>> {
    // SAFETY: the caller's promises.
    match unsafe { nvrtc::compile(op, program, options) } {
        Ok(()) => {}
        Err(e) if nvrtc::is_compilation_error(&e) => {
            // SAFETY: as above.
            let log =
                unsafe { nvrtc::log(op, program) }.unwrap_or_else(|l| format!("(the log could not be read: {l})"));
            let log = if log.is_empty() { e.to_string() } else { log };
            return Ok(Err(log));
        }
        Err(e) => {
            // An invalid option (NVRTC_ERROR_INVALID_OPTION) also leaves a useful log.
            // SAFETY: as above.
            let log = unsafe { nvrtc::log(op, program) }.unwrap_or_default();
            return Ok(Err(if log.is_empty() { e.to_string() } else { format!("{e}\n{log}") }));
        }
    }
    // SAFETY: as above; the program compiled for a real architecture.
    unsafe { nvrtc::cubin(op, program) }.map(Ok)
}

/// NVRTC's version, e.g. `(13, 0)`, or why NVRTC cannot be used.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    result::library::nvrtc()?;
    nvrtc::version("cuda.nvrtc_version")
}
