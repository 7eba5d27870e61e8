//! `nvrtc*`: runtime compilation, one call each. Only reached after NVRTC loaded
//! ([`super::library::nvrtc`]).

use super::*;

pub(crate) use nvrtc_sys::nvrtcProgram as Program;

/// The NVRTC name of a result code (`NVRTC_ERROR_COMPILATION`).
fn result_name(res: nvrtc_sys::nvrtcResult) -> String {
    // SAFETY: `nvrtcGetErrorString` returns a pointer to a static NUL-terminated string for any code.
    let text = unsafe { nvrtc_sys::nvrtcGetErrorString(res) };
    if text.is_null() {
        format!("{res:?}")
    } else {
        // SAFETY: non-null, NUL-terminated, static.
        unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
    }
}

/// [`Error::Vendor`] for a failed NVRTC call.
#[cold]
pub(crate) fn vendor(op: &'static str, res: nvrtc_sys::nvrtcResult) -> Error {
    let name = result_name(res);
    Error::Vendor {
        backend: BackendKind::Cuda,
        op,
        message: format!("NVRTC returned {name}"),
        name,
        code: res as u32 as i64,
    }
}

fn check(op: &'static str, res: nvrtc_sys::nvrtcResult) -> Result<()> {
    if res == nvrtc_sys::nvrtcResult::NVRTC_SUCCESS { Ok(()) } else { Err(vendor(op, res)) }
}

/// NVRTC's version.
pub(crate) fn version(op: &'static str) -> Result<(i32, i32)> {
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: writes two ints.
    check(op, unsafe { nvrtc_sys::nvrtcVersion(&mut major, &mut minor) })?;
    Ok((major, minor))
}

/// A new program from one source with no headers; the caller must [`destroy`] it.
pub(crate) fn create(op: &'static str, source: &CStr, name: &CStr) -> Result<Program> {
    let mut program: Program = ptr::null_mut();
    // SAFETY: both strings are NUL-terminated; zero headers, so the header arrays may be null.
    check(op, unsafe {
        nvrtc_sys::nvrtcCreateProgram(&mut program, source.as_ptr(), name.as_ptr(), 0, ptr::null(), ptr::null())
    })?;
    Ok(program)
}

/// Compiles. `Err` with `NVRTC_ERROR_COMPILATION` means the source did not compile: read [`log`].
///
/// # Safety
/// `program` must be live; every option pointer must name a NUL-terminated string that outlives the call.
pub(crate) unsafe fn compile(op: &'static str, program: Program, options: &[*const c_char]) -> Result<()> {
    // SAFETY: the caller guarantees the program and the option strings.
    check(op, unsafe { nvrtc_sys::nvrtcCompileProgram(program, options.len() as c_int, options.as_ptr()) })
}

/// Whether `error` is NVRTC's "the source did not compile".
pub(crate) fn is_compilation_error(error: &Error) -> bool {
    matches!(error, Error::Vendor { code, .. }
        if *code == nvrtc_sys::nvrtcResult::NVRTC_ERROR_COMPILATION as u32 as i64)
}

/// The compile log.
///
/// # Safety
/// `program` must be live.
pub(crate) unsafe fn log(op: &'static str, program: Program) -> Result<String> {
    let mut size = 0usize;
    // SAFETY: the caller guarantees the program; writes one size.
    check(op, unsafe { nvrtc_sys::nvrtcGetProgramLogSize(program, &mut size) })?;
    let mut buf = vec![0u8; size.max(1)];
    // SAFETY: `buf` holds `size` bytes (the size includes the NUL).
    check(op, unsafe { nvrtc_sys::nvrtcGetProgramLog(program, buf.as_mut_ptr().cast()) })?;
    Ok(String::from_utf8_lossy(&buf).trim_end_matches('\0').trim_end().to_string())
}

/// The compiled program's cubin (machine code for the real architecture it was compiled for).
///
/// # Safety
/// `program` must be live and compiled for a real architecture (`sm_XY`).
pub(crate) unsafe fn cubin(op: &'static str, program: Program) -> Result<Vec<u8>> {
    let mut size = 0usize;
    // SAFETY: the caller guarantees the program; writes one size.
    check(op, unsafe { nvrtc_sys::nvrtcGetCUBINSize(program, &mut size) })?;
    let mut buf = vec![0u8; size];
    // SAFETY: `buf` holds `size` bytes, the whole image.
    check(op, unsafe { nvrtc_sys::nvrtcGetCUBIN(program, buf.as_mut_ptr().cast()) })?;
    Ok(buf)
}

/// Destroys a program.
///
/// # Safety
/// `program` must be live and not used afterwards.
pub(crate) unsafe fn destroy(op: &'static str, program: Program) -> Result<()> {
    let mut program = program;
    // SAFETY: the caller guarantees the program.
    check(op, unsafe { nvrtc_sys::nvrtcDestroyProgram(&mut program) })
}
