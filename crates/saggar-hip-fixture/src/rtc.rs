//! The exported hipRTC entry points, over NVRTC.
//!
//! A program is the fixture's own object (returned to the caller as the opaque `hiprtcProgram`): the
//! NVRTC program, the notes the fixture adds to the compile log, and, once compiled, the code object, a
//! fixture envelope around NVRTC's PTX (see `envelope`).
//!
//! Options are mapped, not guessed at: `--offload-arch=sm_XY` (what saggar's HIP backend passes, from the
//! `gcnArchName` the fixture reports) becomes `--gpu-architecture=compute_XY`, so the PTX targets exactly
//! the device's virtual architecture, as saggar's CUDA backend compiles; an AMD target (`gfx...`) is
//! refused with `HIPRTC_ERROR_INVALID_OPTION` and a log line saying why; clang's `-ffast-math` becomes
//! NVRTC's `--use_fast_math`; every other option goes to NVRTC unchanged, which refuses what it does
//! not know with `NVRTC_ERROR_INVALID_OPTION` (mapped to the hipRTC code of the same number).

#![allow(non_snake_case)]

use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr;

use cudarc::nvrtc::sys::{self as nvrtc, nvrtcResult};

use crate::abi::{HiprtcStatus, rtc_code};
use crate::driver;
use crate::envelope;
use crate::errors::{hiprtc_from_nvrtc, hiprtc_name, say_once};

/// A hipRTC program of the fixture.
struct Program {
    nvrtc: nvrtc::nvrtcProgram,
    /// Lines the fixture puts before NVRTC's log (why an option was refused).
    notes: String,
    /// The envelope, once compiled.
    code: Option<Vec<u8>>,
}

/// Runs a hipRTC entry point; a panic becomes `HIPRTC_ERROR_INTERNAL_ERROR`.
fn rtc_ffi(name: &'static str, body: impl FnOnce() -> Result<(), HiprtcStatus>) -> HiprtcStatus {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => rtc_code::SUCCESS,
        Ok(Err(status)) => status,
        Err(_) => {
            say_once(format!("panic in {name}"), || format!("{name} panicked; returning HIPRTC_ERROR_INTERNAL_ERROR"));
            rtc_code::INTERNAL_ERROR
        }
    }
}

fn check(call: &'static str, result: nvrtcResult) -> Result<(), HiprtcStatus> {
    if result == nvrtcResult::NVRTC_SUCCESS { Ok(()) } else { Err(hiprtc_from_nvrtc(call, result)) }
}

fn loaded() -> Result<(), HiprtcStatus> {
    driver::nvrtc().map_err(|_| rtc_code::INTERNAL_ERROR)
}

/// The program behind a handle.
///
/// # Safety
/// `prog` must be null or a handle from [`hiprtcCreateProgram`] not yet destroyed, used by one thread at a
/// time (hipRTC's rule for a program).
unsafe fn program<'a>(prog: *mut c_void) -> Result<&'a mut Program, HiprtcStatus> {
    // SAFETY: the caller's contract: null or a live, unshared `Program`.
    unsafe { prog.cast::<Program>().as_mut() }.ok_or(rtc_code::INVALID_PROGRAM)
}

/// What one hipRTC option becomes for NVRTC: `Ok(Some)` an NVRTC option, `Ok(None)` nothing, `Err` a
/// refusal with the reason for the log.
pub(crate) fn map_option(option: &str) -> Result<Option<String>, String> {
    let target = option.strip_prefix("--offload-arch=").or_else(|| option.strip_prefix("--gpu-architecture="));
    if let Some(target) = target {
        let Some(sm) = target.strip_prefix("sm_") else {
            return Err(format!(
                "saggar-hip-fixture: `{option}` names a target the fixture cannot compile for: it compiles for NVIDIA \
                 GPUs only, through NVRTC, and takes `sm_XY` (the gcnArchName it reports)"
            ));
        };
        let digits = sm.trim_end_matches(['a', 'f']);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || sm.len() > digits.len() + 1 {
            return Err(format!("saggar-hip-fixture: `{option}`: expected sm_ followed by digits (sm_90, sm_90a)"));
        }
        return Ok(Some(format!("--gpu-architecture=compute_{sm}")));
    }
    Ok(Some(match option {
        "-ffast-math" => "--use_fast_math".to_string(),
        other => other.to_string(),
    }))
}

/// `hiprtcVersion` → `nvrtcVersion` (the version reported is NVRTC's).
///
/// # Safety
/// Both pointers must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hiprtcVersion(major: *mut c_int, minor: *mut c_int) -> HiprtcStatus {
    rtc_ffi("hiprtcVersion", || {
        loaded()?;
        if major.is_null() || minor.is_null() {
            return Err(rtc_code::INVALID_INPUT);
        }
        // SAFETY: both pointers are non-null and writable by the caller's contract.
        check("nvrtcVersion", unsafe { nvrtc::nvrtcVersion(major, minor) })
    })
}

/// `hiprtcGetErrorString`: hipRTC's name of the code (static).
#[unsafe(no_mangle)]
pub extern "C" fn hiprtcGetErrorString(status: HiprtcStatus) -> *const c_char {
    hiprtc_name(status).as_ptr()
}

/// `hiprtcCreateProgram` → `nvrtcCreateProgram` (same parameters).
///
/// # Safety
/// As `nvrtcCreateProgram`: `prog` writable, `src` NUL-terminated, `name` null or NUL-terminated, the
/// header arrays `num_headers` long (or null when it is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hiprtcCreateProgram(
    prog: *mut *mut c_void,
    src: *const c_char,
    name: *const c_char,
    num_headers: c_int,
    headers: *const *const c_char,
    include_names: *const *const c_char,
) -> HiprtcStatus {
    rtc_ffi("hiprtcCreateProgram", || {
        loaded()?;
        if prog.is_null() || src.is_null() || num_headers < 0 {
            return Err(rtc_code::INVALID_INPUT);
        }
        let mut handle: nvrtc::nvrtcProgram = ptr::null_mut();
        // SAFETY: the caller guarantees the strings and arrays; `handle` is writable.
        check("nvrtcCreateProgram", unsafe {
            nvrtc::nvrtcCreateProgram(&mut handle, src, name, num_headers, headers, include_names)
        })?;
        let program = Box::new(Program { nvrtc: handle, notes: String::new(), code: None });
        // SAFETY: `prog` is non-null and writable by the caller's contract.
        unsafe { prog.write(Box::into_raw(program).cast()) };
        Ok(())
    })
}

/// `hiprtcCompileProgram` → `nvrtcCompileProgram` with the options mapped (module docs), then
/// `nvrtcGetPTX`, wrapped in the fixture's envelope.
///
/// # Safety
/// `prog` must be a live program; `options` must hold `num_options` NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hiprtcCompileProgram(
    prog: *mut c_void,
    num_options: c_int,
    options: *const *const c_char,
) -> HiprtcStatus {
    rtc_ffi("hiprtcCompileProgram", || {
        loaded()?;
        // SAFETY: the caller's contract.
        let program = unsafe { program(prog) }?;
        program.code = None;
        program.notes.clear();
        let count = usize::try_from(num_options).map_err(|_| rtc_code::INVALID_INPUT)?;
        if count > 0 && options.is_null() {
            return Err(rtc_code::INVALID_INPUT);
        }
        let mut mapped = Vec::with_capacity(count);
        let mut arch = String::from("NVRTC's default architecture");
        for i in 0..count {
            // SAFETY: `options` holds `count` pointers to NUL-terminated strings (the caller's contract).
            let option = unsafe { CStr::from_ptr(*options.add(i)) }.to_string_lossy().into_owned();
            match map_option(&option) {
                Ok(Some(nvrtc_option)) => {
                    if let Some(a) = nvrtc_option.strip_prefix("--gpu-architecture=") {
                        arch = a.to_string();
                    }
                    mapped.push(std::ffi::CString::new(nvrtc_option).map_err(|_| rtc_code::INVALID_OPTION)?);
                }
                Ok(None) => {}
                Err(reason) => {
                    program.notes = reason;
                    return Err(rtc_code::INVALID_OPTION);
                }
            }
        }
        let pointers: Vec<*const c_char> = mapped.iter().map(|o| o.as_ptr()).collect();
        let n = c_int::try_from(pointers.len()).map_err(|_| rtc_code::INVALID_INPUT)?;
        // SAFETY: the program is live; `pointers` holds `n` NUL-terminated strings that outlive the call.
        check("nvrtcCompileProgram", unsafe { nvrtc::nvrtcCompileProgram(program.nvrtc, n, pointers.as_ptr()) })?;
        let mut size = 0usize;
        // SAFETY: the program compiled; writes one size.
        check("nvrtcGetPTXSize", unsafe { nvrtc::nvrtcGetPTXSize(program.nvrtc, &mut size) })?;
        let mut ptx = vec![0u8; size.max(1)];
        // SAFETY: `ptx` holds `size` bytes (at least one), which is what NVRTC writes, NUL included.
        check("nvrtcGetPTX", unsafe { nvrtc::nvrtcGetPTX(program.nvrtc, ptx.as_mut_ptr().cast()) })?;
        let end = ptx.iter().position(|&b| b == 0).unwrap_or(ptx.len());
        program.code = Some(envelope::build(&ptx[..end], &arch));
        Ok(())
    })
}

/// The full log: the fixture's notes, then NVRTC's.
fn full_log(program: &Program) -> Result<Vec<u8>, HiprtcStatus> {
    let mut size = 0usize;
    // SAFETY: the program is live; writes one size.
    check("nvrtcGetProgramLogSize", unsafe { nvrtc::nvrtcGetProgramLogSize(program.nvrtc, &mut size) })?;
    let mut log = vec![0u8; size.max(1)];
    // SAFETY: `log` holds `size` bytes (at least one), what NVRTC writes, NUL included.
    check("nvrtcGetProgramLog", unsafe { nvrtc::nvrtcGetProgramLog(program.nvrtc, log.as_mut_ptr().cast()) })?;
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let mut text = program.notes.clone().into_bytes();
    if !text.is_empty() && end > 0 {
        text.push(b'\n');
    }
    text.extend_from_slice(&log[..end]);
    text.push(0);
    Ok(text)
}

/// `hiprtcGetProgramLogSize`: the size of [`hiprtcGetProgramLog`]'s text, NUL included.
///
/// # Safety
/// `prog` must be a live program; `size` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hiprtcGetProgramLogSize(prog: *mut c_void, size: *mut usize) -> HiprtcStatus {
    rtc_ffi("hiprtcGetProgramLogSize", || {
        loaded()?;
        // SAFETY: the caller's contract.
        let program = unsafe { program(prog) }?;
        if size.is_null() {
            return Err(rtc_code::INVALID_INPUT);
        }
        let log = full_log(program)?;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { size.write(log.len()) };
        Ok(())
    })
}

/// `hiprtcGetProgramLog`: the fixture's notes, then `nvrtcGetProgramLog`'s text, NUL-terminated.
///
/// # Safety
/// `prog` must be a live program; `log` must have room for [`hiprtcGetProgramLogSize`] bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hiprtcGetProgramLog(prog: *mut c_void, log: *mut c_char) -> HiprtcStatus {
    rtc_ffi("hiprtcGetProgramLog", || {
        loaded()?;
        // SAFETY: the caller's contract.
        let program = unsafe { program(prog) }?;
        if log.is_null() {
            return Err(rtc_code::INVALID_INPUT);
        }
        let text = full_log(program)?;
        // SAFETY: `log` has room for the size `hiprtcGetProgramLogSize` reported, which is `text.len()`.
        unsafe { ptr::copy_nonoverlapping(text.as_ptr(), log.cast::<u8>(), text.len()) };
        Ok(())
    })
}

/// `hiprtcGetCodeSize`: the size of the compiled code object (the envelope).
///
/// # Safety
/// `prog` must be a live program; `size` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hiprtcGetCodeSize(prog: *mut c_void, size: *mut usize) -> HiprtcStatus {
    rtc_ffi("hiprtcGetCodeSize", || {
        loaded()?;
        // SAFETY: the caller's contract.
        let program = unsafe { program(prog) }?;
        let code = program.code.as_ref().ok_or(rtc_code::INVALID_PROGRAM)?;
        if size.is_null() {
            return Err(rtc_code::INVALID_INPUT);
        }
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { size.write(code.len()) };
        Ok(())
    })
}

/// `hiprtcGetCode`: copies the compiled code object (the envelope).
///
/// # Safety
/// `prog` must be a live, compiled program; `code` must have room for [`hiprtcGetCodeSize`] bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hiprtcGetCode(prog: *mut c_void, code: *mut c_char) -> HiprtcStatus {
    rtc_ffi("hiprtcGetCode", || {
        loaded()?;
        // SAFETY: the caller's contract.
        let program = unsafe { program(prog) }?;
        let image = program.code.as_ref().ok_or(rtc_code::INVALID_PROGRAM)?;
        if code.is_null() {
            return Err(rtc_code::INVALID_INPUT);
        }
        // SAFETY: `code` has room for the size `hiprtcGetCodeSize` reported, which is `image.len()`.
        unsafe { ptr::copy_nonoverlapping(image.as_ptr(), code.cast::<u8>(), image.len()) };
        Ok(())
    })
}

/// `hiprtcDestroyProgram` → `nvrtcDestroyProgram`, then frees the fixture's program and nulls the handle.
///
/// # Safety
/// `prog` must point to a live program handle, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hiprtcDestroyProgram(prog: *mut *mut c_void) -> HiprtcStatus {
    rtc_ffi("hiprtcDestroyProgram", || {
        loaded()?;
        if prog.is_null() {
            return Err(rtc_code::INVALID_PROGRAM);
        }
        // SAFETY: `prog` is non-null and readable by the caller's contract.
        let handle = unsafe { prog.read() };
        if handle.is_null() {
            return Err(rtc_code::INVALID_PROGRAM);
        }
        // SAFETY: `handle` came from `Box::into_raw` in `hiprtcCreateProgram` and is destroyed once (the
        // caller's contract); it is nulled below.
        let mut program = unsafe { Box::from_raw(handle.cast::<Program>()) };
        // SAFETY: `prog` is writable by the caller's contract.
        unsafe { prog.write(ptr::null_mut()) };
        // SAFETY: the NVRTC program is live and destroyed once, here.
        check("nvrtcDestroyProgram", unsafe { nvrtc::nvrtcDestroyProgram(&mut program.nvrtc) })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_map_to_the_virtual_architecture() {
        assert_eq!(map_option("--offload-arch=sm_90"), Ok(Some("--gpu-architecture=compute_90".into())));
        assert_eq!(map_option("--offload-arch=sm_90a"), Ok(Some("--gpu-architecture=compute_90a".into())));
        assert_eq!(map_option("--offload-arch=sm_100"), Ok(Some("--gpu-architecture=compute_100".into())));
        assert_eq!(map_option("--gpu-architecture=sm_80"), Ok(Some("--gpu-architecture=compute_80".into())));
        for bad in [
            "--offload-arch=gfx90a",
            "--offload-arch=gfx90a:sramecc+:xnack-",
            "--offload-arch=sm_",
            "--offload-arch=sm_9x",
            "--offload-arch=sm_90af",
        ] {
            assert!(map_option(bad).is_err(), "{bad} was accepted");
        }
        assert!(map_option("--offload-arch=gfx942").unwrap_err().contains("NVIDIA GPUs only"));
    }

    #[test]
    fn other_options_pass_through_or_are_respelled() {
        assert_eq!(map_option("-ffast-math"), Ok(Some("--use_fast_math".into())));
        assert_eq!(map_option("-DBATCH=8"), Ok(Some("-DBATCH=8".into())));
        assert_eq!(map_option("-std=c++17"), Ok(Some("-std=c++17".into())));
    }
}
