//! The hipBLASLt entry points saggar's HIP backend calls (`crates/saggar-device/src/gpu/blas/` with the
//! numbering of `crates/saggar-device/src/hip/blas.rs`), mapped onto cuBLASLt through cudarc's
//! `cublaslt::sys` (libcublasLt loaded at run time).
//!
//! hipBLASLt and cuBLASLt have the same functions with the same arguments; what differs is numbering,
//! translated here: operations (`HIPBLAS_OP_N` 111 is `CUBLAS_OP_N` 0), compute types, descriptor,
//! layout and preference attributes, and status codes. The algorithm does not fit: hipBLASLt's
//! `hipblasLtMatmulAlgo_t` holds 16 bytes of data, cuBLASLt's 64. The fixture keeps every algorithm a
//! heuristic query returned in a table ([`ALGOS`]) and writes its index into the HIP algorithm's data;
//! `hipblasLtMatmul` looks it up (an index the table never issued is `HIPBLAS_STATUS_INVALID_VALUE`).
//! The table only grows, by one entry per heuristic result: saggar queries once per planned matmul.
//!
//! The calls use whatever CUDA context is current on the thread: saggar's HIP backend made its device
//! current (through the fixture's `hipSetDevice`, the same libcuda) before it calls hipBLASLt.

use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use cudarc::cublaslt::sys as lt;

use crate::errors::say_once;

/// `hipblasStatus_t`.
pub type HipblasStatus = c_int;

/// hipBLAS status codes (hipblas-common.h).
mod status {
    use std::ffi::c_int;
    pub const SUCCESS: c_int = 0;
    pub const NOT_INITIALIZED: c_int = 1;
    pub const ALLOC_FAILED: c_int = 2;
    pub const INVALID_VALUE: c_int = 3;
    pub const MAPPING_ERROR: c_int = 4;
    pub const EXECUTION_FAILED: c_int = 5;
    pub const INTERNAL_ERROR: c_int = 6;
    pub const NOT_SUPPORTED: c_int = 7;
    pub const ARCH_MISMATCH: c_int = 8;
    pub const UNKNOWN: c_int = 11;
}

/// `hipblasLtMatmulAlgo_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HipAlgo {
    data: [u8; 16],
    max_workspace_bytes: usize,
}

/// `hipblasLtMatmulHeuristicResult_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HipHeuristicResult {
    algo: HipAlgo,
    workspace_size: usize,
    state: HipblasStatus,
    waves_count: f32,
    reserved: [c_int; 4],
}

const _: () = assert!(std::mem::size_of::<HipAlgo>() == 24 && std::mem::size_of::<HipHeuristicResult>() == 56);

/// Every cuBLASLt algorithm handed out, by index (the index plus one is written into the HIP algorithm).
static ALGOS: Mutex<Vec<lt::cublasLtMatmulAlgo_t>> = Mutex::new(Vec::new());

type LtResult = Result<(), HipblasStatus>;

fn from_cublas(call: &'static str, status: lt::cublasStatus_t) -> LtResult {
    use lt::cublasStatus_t::*;
    let hip = match status {
        CUBLAS_STATUS_SUCCESS => return Ok(()),
        CUBLAS_STATUS_NOT_INITIALIZED => status::NOT_INITIALIZED,
        CUBLAS_STATUS_ALLOC_FAILED => status::ALLOC_FAILED,
        CUBLAS_STATUS_INVALID_VALUE => status::INVALID_VALUE,
        CUBLAS_STATUS_ARCH_MISMATCH => status::ARCH_MISMATCH,
        CUBLAS_STATUS_MAPPING_ERROR => status::MAPPING_ERROR,
        CUBLAS_STATUS_EXECUTION_FAILED => status::EXECUTION_FAILED,
        CUBLAS_STATUS_INTERNAL_ERROR => status::INTERNAL_ERROR,
        CUBLAS_STATUS_NOT_SUPPORTED => status::NOT_SUPPORTED,
        _ => status::UNKNOWN,
    };
    say_once(format!("{call} {status:?}"), || format!("{call} returned {status:?}"));
    Err(hip)
}

/// Refuses an argument the fixture does not map, saying so once.
fn unsupported(what: String) -> HipblasStatus {
    say_once(what.clone(), || format!("saggar-hip-fixture: {what} is not supported"));
    status::NOT_SUPPORTED
}

/// Runs an entry point: cuBLASLt must load (cudarc panics otherwise), and a panic becomes
/// `HIPBLAS_STATUS_UNKNOWN` rather than unwinding across the C ABI.
fn entry(name: &'static str, body: impl FnOnce() -> LtResult) -> HipblasStatus {
    // SAFETY: only probes whether the library loads.
    if !unsafe { lt::is_culib_present() } {
        say_once("no cublasLt".into(), || format!("{name}: libcublasLt could not be loaded"));
        return status::NOT_INITIALIZED;
    }
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => status::SUCCESS,
        Ok(Err(s)) => s,
        Err(_) => {
            say_once(format!("panic in {name}"), || format!("{name} panicked; returning HIPBLAS_STATUS_UNKNOWN"));
            status::UNKNOWN
        }
    }
}

fn non_null<T>(p: *mut T) -> Result<*mut T, HipblasStatus> {
    if p.is_null() { Err(status::INVALID_VALUE) } else { Ok(p) }
}

/// `hipDataType` → `cudaDataType_t` for the element types saggar's matmuls use: `HIP_R_32F` (0),
/// `HIP_R_16F` (2), `HIP_R_16BF` (14), `HIP_R_8I` (3) and `HIP_R_32I` (10), the CUDA numbers.
fn data_type(t: c_int) -> Result<lt::cudaDataType_t, HipblasStatus> {
    use lt::cudaDataType_t::*;
    match t {
        0 => Ok(CUDA_R_32F),
        2 => Ok(CUDA_R_16F),
        14 => Ok(CUDA_R_16BF),
        3 => Ok(CUDA_R_8I),
        10 => Ok(CUDA_R_32I),
        other => Err(unsupported(format!("hipDataType {other}"))),
    }
}

/// The alignment in bytes saggar guarantees for `layout`'s pointers (by its
/// `CUBLASLT_MATRIX_LAYOUT_TYPE`, one [`data_type`] made): one element, except `i8` matrices, which
/// saggar's matmul checks refuse unless 4-byte aligned (cuBLASLt's integer kernels need that much and
/// offer no algorithm for 1-byte alignment).
///
/// # Safety
/// `layout` must be a live layout.
unsafe fn element_bytes(layout: *mut c_void) -> Result<u32, HipblasStatus> {
    use lt::cudaDataType_t::*;
    let mut ty = lt::cudaDataType_t::CUDA_R_32F;
    let mut written = 0usize;
    // SAFETY: `layout` is live (this function's contract); `ty` is writable for its 4 bytes (the
    // attribute is a `cudaDataType`, as `ty`).
    from_cublas("cublasLtMatrixLayoutGetAttribute", unsafe {
        lt::cublasLtMatrixLayoutGetAttribute(
            layout.cast(),
            lt::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_TYPE,
            (&mut ty as *mut lt::cudaDataType_t).cast(),
            std::mem::size_of::<lt::cudaDataType_t>(),
            &mut written,
        )
    })?;
    match ty {
        CUDA_R_16F | CUDA_R_16BF => Ok(2),
        CUDA_R_8I => Ok(4),
        _ => Ok(4),
    }
}

/// `hipblasLtCreate` → `cublasLtCreate`.
///
/// # Safety
/// `handle` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipblasLtCreate(handle: *mut *mut c_void) -> HipblasStatus {
    entry("hipblasLtCreate", || {
        let out = non_null(handle)?.cast::<lt::cublasLtHandle_t>();
        // SAFETY: `out` is non-null and writable (this function's contract).
        from_cublas("cublasLtCreate", unsafe { lt::cublasLtCreate(out) })
    })
}

/// `hipblasLtDestroy` → `cublasLtDestroy`.
///
/// # Safety
/// `handle` must be a live handle from [`hipblasLtCreate`], not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipblasLtDestroy(handle: *mut c_void) -> HipblasStatus {
    // SAFETY: forwarded from this function's contract.
    entry("hipblasLtDestroy", || from_cublas("cublasLtDestroy", unsafe { lt::cublasLtDestroy(handle.cast()) }))
}

/// `hipblasLtMatmulDescCreate` → `cublasLtMatmulDescCreate`: `HIPBLAS_COMPUTE_32F` (2) and
/// `HIPBLAS_COMPUTE_32F_FAST_TF32` (6) with `HIP_R_32F` scales (the compute type of `f32`, `f16` and
/// `bf16` matrices alike), and `HIPBLAS_COMPUTE_32I` (9) with `HIP_R_32I` scales (`i8` matrices).
///
/// # Safety
/// `desc` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipblasLtMatmulDescCreate(
    desc: *mut *mut c_void,
    compute: c_int,
    scale: c_int,
) -> HipblasStatus {
    entry("hipblasLtMatmulDescCreate", || {
        let out = non_null(desc)?.cast::<lt::cublasLtMatmulDesc_t>();
        let compute = match compute {
            2 => lt::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            6 => lt::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
            9 => lt::cublasComputeType_t::CUBLAS_COMPUTE_32I,
            other => return Err(unsupported(format!("hipblasComputeType_t {other}"))),
        };
        let scale = data_type(scale)?;
        // SAFETY: `out` is non-null and writable.
        from_cublas("cublasLtMatmulDescCreate", unsafe { lt::cublasLtMatmulDescCreate(out, compute, scale) })
    })
}

/// `hipblasLtMatmulDescDestroy` → `cublasLtMatmulDescDestroy`.
///
/// # Safety
/// `desc` must be live and not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipblasLtMatmulDescDestroy(desc: *mut c_void) -> HipblasStatus {
    entry("hipblasLtMatmulDescDestroy", || {
        // SAFETY: forwarded from this function's contract.
        from_cublas("cublasLtMatmulDescDestroy", unsafe { lt::cublasLtMatmulDescDestroy(desc.cast()) })
    })
}

/// Reads an `int32_t` attribute value.
///
/// # Safety
/// `buf` must be readable for `size` bytes.
unsafe fn read_i32(buf: *const c_void, size: usize) -> Result<i32, HipblasStatus> {
    if buf.is_null() || size != 4 {
        return Err(status::INVALID_VALUE);
    }
    // SAFETY: four readable bytes (checked above and this function's contract); unaligned read.
    Ok(unsafe { buf.cast::<i32>().read_unaligned() })
}

/// `hipblasLtMatmulDescSetAttribute` → `cublasLtMatmulDescSetAttribute`: TRANSA/TRANSB (operation
/// numbers translated), EPILOGUE (same numbers), BIAS_POINTER, BIAS_DATA_TYPE (the types of
/// [`data_type`]).
///
/// # Safety
/// `desc` must be live; `buf` readable for `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipblasLtMatmulDescSetAttribute(
    desc: *mut c_void,
    attr: c_int,
    buf: *const c_void,
    size: usize,
) -> HipblasStatus {
    use lt::cublasLtMatmulDescAttributes_t::*;
    entry("hipblasLtMatmulDescSetAttribute", || {
        let set = |attr, value: *const c_void, size| {
            // SAFETY: `desc` is live and `value` readable for `size` (this function's contract).
            from_cublas("cublasLtMatmulDescSetAttribute", unsafe {
                lt::cublasLtMatmulDescSetAttribute(desc.cast(), attr, value, size)
            })
        };
        match attr {
            0 | 1 => {
                // SAFETY: forwarded from this function's contract.
                let op: i32 = match unsafe { read_i32(buf, size)? } {
                    111 => 0,
                    112 => 1,
                    other => return Err(unsupported(format!("hipblasOperation_t {other}"))),
                };
                let attr = if attr == 0 { CUBLASLT_MATMUL_DESC_TRANSA } else { CUBLASLT_MATMUL_DESC_TRANSB };
                set(attr, (&op as *const i32).cast(), 4)
            }
            2 => set(CUBLASLT_MATMUL_DESC_EPILOGUE, buf, size),
            3 => set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, buf, size),
            4 => {
                // SAFETY: forwarded from this function's contract.
                let cuda = data_type(unsafe { read_i32(buf, size)? })? as i32;
                set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, (&cuda as *const i32).cast(), 4)
            }
            other => Err(unsupported(format!("hipblasLtMatmulDescAttributes_t {other}"))),
        }
    })
}

/// `hipblasLtMatrixLayoutCreate` → `cublasLtMatrixLayoutCreate` (the types of [`data_type`]).
///
/// # Safety
/// `layout` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipblasLtMatrixLayoutCreate(
    layout: *mut *mut c_void,
    data: c_int,
    rows: u64,
    cols: u64,
    ld: i64,
) -> HipblasStatus {
    entry("hipblasLtMatrixLayoutCreate", || {
        let out = non_null(layout)?.cast::<lt::cublasLtMatrixLayout_t>();
        let data = data_type(data)?;
        // SAFETY: `out` is non-null and writable.
        from_cublas("cublasLtMatrixLayoutCreate", unsafe { lt::cublasLtMatrixLayoutCreate(out, data, rows, cols, ld) })
    })
}

/// `hipblasLtMatrixLayoutDestroy` → `cublasLtMatrixLayoutDestroy`.
///
/// # Safety
/// `layout` must be live and not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipblasLtMatrixLayoutDestroy(layout: *mut c_void) -> HipblasStatus {
    entry("hipblasLtMatrixLayoutDestroy", || {
        // SAFETY: forwarded from this function's contract.
        from_cublas("cublasLtMatrixLayoutDestroy", unsafe { lt::cublasLtMatrixLayoutDestroy(layout.cast()) })
    })
}

/// `hipblasLtMatrixLayoutSetAttribute` → `cublasLtMatrixLayoutSetAttribute`, attributes renumbered
/// (the values have the same types in both).
///
/// # Safety
/// `layout` must be live; `buf` readable for `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipblasLtMatrixLayoutSetAttribute(
    layout: *mut c_void,
    attr: c_int,
    buf: *const c_void,
    size: usize,
) -> HipblasStatus {
    use lt::cublasLtMatrixLayoutAttribute_t::*;
    entry("hipblasLtMatrixLayoutSetAttribute", || {
        let attr = match attr {
            0 => CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
            1 => CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
            3 => CUBLASLT_MATRIX_LAYOUT_ORDER,
            4 => CUBLASLT_MATRIX_LAYOUT_ROWS,
            5 => CUBLASLT_MATRIX_LAYOUT_COLS,
            6 => CUBLASLT_MATRIX_LAYOUT_LD,
            other => return Err(unsupported(format!("hipblasLtMatrixLayoutAttribute_t {other}"))),
        };
        // SAFETY: forwarded from this function's contract.
        from_cublas("cublasLtMatrixLayoutSetAttribute", unsafe {
            lt::cublasLtMatrixLayoutSetAttribute(layout.cast(), attr, buf, size)
        })
    })
}

/// `hipblasLtMatmulPreferenceCreate` → `cublasLtMatmulPreferenceCreate` (the minimum alignments are
/// set by [`hipblasLtMatmulAlgoGetHeuristic`], once the matrices' types are known).
///
/// # Safety
/// `pref` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipblasLtMatmulPreferenceCreate(pref: *mut *mut c_void) -> HipblasStatus {
    entry("hipblasLtMatmulPreferenceCreate", || {
        let out = non_null(pref)?.cast::<lt::cublasLtMatmulPreference_t>();
        // SAFETY: `out` is non-null and writable.
        from_cublas("cublasLtMatmulPreferenceCreate", unsafe { lt::cublasLtMatmulPreferenceCreate(out) })
    })
}

/// Sets `pref`'s minimum alignments of A, B, C and D to what saggar guarantees for each layout's type
/// ([`element_bytes`]: 4 bytes for `f32`, `i32` and `i8`, 2 for `f16` and `bf16`): hipBLASLt has no
/// alignment preferences, while cuBLASLt would otherwise assume 256-byte aligned matrices.
///
/// # Safety
/// `pref` and every layout must be live.
unsafe fn align_to_elements(pref: *mut c_void, layouts: [*mut c_void; 4]) -> LtResult {
    use lt::cublasLtMatmulPreferenceAttributes_t::*;
    let attrs = [
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
    ];
    for (attr, layout) in attrs.into_iter().zip(layouts) {
        // SAFETY: the layout is live (this function's contract).
        let element = unsafe { element_bytes(layout)? };
        // SAFETY: `pref` is live; the value is a uint32_t.
        from_cublas("cublasLtMatmulPreferenceSetAttribute", unsafe {
            lt::cublasLtMatmulPreferenceSetAttribute(pref.cast(), attr, (&element as *const u32).cast(), 4)
        })?;
    }
    Ok(())
}

/// `hipblasLtMatmulPreferenceDestroy` → `cublasLtMatmulPreferenceDestroy`.
///
/// # Safety
/// `pref` must be live and not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipblasLtMatmulPreferenceDestroy(pref: *mut c_void) -> HipblasStatus {
    entry("hipblasLtMatmulPreferenceDestroy", || {
        // SAFETY: forwarded from this function's contract.
        from_cublas("cublasLtMatmulPreferenceDestroy", unsafe { lt::cublasLtMatmulPreferenceDestroy(pref.cast()) })
    })
}

/// `hipblasLtMatmulPreferenceSetAttribute` → `cublasLtMatmulPreferenceSetAttribute` (SEARCH_MODE and
/// MAX_WORKSPACE_BYTES have the same numbers and types in both).
///
/// # Safety
/// `pref` must be live; `buf` readable for `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipblasLtMatmulPreferenceSetAttribute(
    pref: *mut c_void,
    attr: c_int,
    buf: *const c_void,
    size: usize,
) -> HipblasStatus {
    use lt::cublasLtMatmulPreferenceAttributes_t::*;
    entry("hipblasLtMatmulPreferenceSetAttribute", || {
        let attr = match attr {
            0 => CUBLASLT_MATMUL_PREF_SEARCH_MODE,
            1 => CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            other => return Err(unsupported(format!("hipblasLtMatmulPreferenceAttributes_t {other}"))),
        };
        // SAFETY: forwarded from this function's contract.
        from_cublas("cublasLtMatmulPreferenceSetAttribute", unsafe {
            lt::cublasLtMatmulPreferenceSetAttribute(pref.cast(), attr, buf, size)
        })
    })
}

/// `hipblasLtMatmulAlgoGetHeuristic` → `cublasLtMatmulAlgoGetHeuristic`, with `pref` asking for
/// element-aligned matrices first ([`align_to_elements`]); each returned algorithm is kept in
/// [`ALGOS`] and named by its index in the HIP result.
///
/// # Safety
/// Every handle must be live; `results` writable for `requested` results; `returned` writable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn hipblasLtMatmulAlgoGetHeuristic(
    handle: *mut c_void,
    desc: *mut c_void,
    a: *mut c_void,
    b: *mut c_void,
    c: *mut c_void,
    d: *mut c_void,
    pref: *mut c_void,
    requested: c_int,
    results: *mut HipHeuristicResult,
    returned: *mut c_int,
) -> HipblasStatus {
    entry("hipblasLtMatmulAlgoGetHeuristic", || {
        let (results, returned) = (non_null(results)?, non_null(returned)?);
        let count = usize::try_from(requested).map_err(|_| status::INVALID_VALUE)?.min(64);
        // SAFETY: `pref` and the layouts are live (this function's contract).
        unsafe { align_to_elements(pref, [a, b, c, d])? };
        // SAFETY: cuBLASLt's result is plain data; all-zero is a valid value.
        let mut cuda: Vec<lt::cublasLtMatmulHeuristicResult_t> = vec![unsafe { std::mem::zeroed() }; count];
        let mut got: c_int = 0;
        // SAFETY: every handle is live (this function's contract); `cuda` holds `count` results.
        from_cublas("cublasLtMatmulAlgoGetHeuristic", unsafe {
            lt::cublasLtMatmulAlgoGetHeuristic(
                handle.cast(),
                desc.cast(),
                a.cast(),
                b.cast(),
                c.cast(),
                d.cast(),
                pref.cast(),
                count as c_int,
                cuda.as_mut_ptr(),
                &mut got,
            )
        })?;
        let got = usize::try_from(got).unwrap_or(0).min(count);
        let mut algos = ALGOS.lock().map_err(|_| status::INTERNAL_ERROR)?;
        for (i, result) in cuda.iter().take(got).enumerate() {
            algos.push(result.algo);
            let mut data = [0u8; 16];
            data[..8].copy_from_slice(&(algos.len() as u64).to_le_bytes());
            let hip = HipHeuristicResult {
                algo: HipAlgo { data, max_workspace_bytes: result.workspaceSize },
                workspace_size: result.workspaceSize,
                state: if result.state == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS { 0 } else { status::UNKNOWN },
                waves_count: result.wavesCount,
                reserved: [0; 4],
            };
            // SAFETY: `results` is writable for `requested` >= `got` results (this function's contract).
            unsafe { results.add(i).write(hip) };
        }
        // SAFETY: `returned` is non-null and writable.
        unsafe { returned.write(got as c_int) };
        Ok(())
    })
}

/// `hipblasLtMatmul` → `cublasLtMatmul`, with the algorithm looked up in [`ALGOS`] (a null algorithm
/// lets cuBLASLt choose, as in both libraries).
///
/// # Safety
/// As `cublasLtMatmul`: every handle live, every pointer naming device memory of the sizes the layouts
/// describe, `alpha` and `beta` readable host values of the descriptor's scale type, `stream` a live stream of the current context.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn hipblasLtMatmul(
    handle: *mut c_void,
    desc: *mut c_void,
    alpha: *const c_void,
    a: *const c_void,
    a_layout: *mut c_void,
    b: *const c_void,
    b_layout: *mut c_void,
    beta: *const c_void,
    c: *const c_void,
    c_layout: *mut c_void,
    d: *mut c_void,
    d_layout: *mut c_void,
    algo: *const HipAlgo,
    workspace: *mut c_void,
    workspace_bytes: usize,
    stream: *mut c_void,
) -> HipblasStatus {
    entry("hipblasLtMatmul", || {
        let cuda_algo = if algo.is_null() {
            None
        } else {
            // SAFETY: a non-null algorithm is readable (this function's contract).
            let data = unsafe { (*algo).data };
            let index = u64::from_le_bytes(data[..8].try_into().expect("8 bytes")) as usize;
            let algos = ALGOS.lock().map_err(|_| status::INTERNAL_ERROR)?;
            Some(*index.checked_sub(1).and_then(|i| algos.get(i)).ok_or(status::INVALID_VALUE)?)
        };
        let algo_ptr = cuda_algo.as_ref().map_or(std::ptr::null(), |a| a as *const lt::cublasLtMatmulAlgo_t);
        // SAFETY: forwarded from this function's contract; `algo_ptr` is null or points at a copy that
        // lives until the call returns.
        from_cublas("cublasLtMatmul", unsafe {
            lt::cublasLtMatmul(
                handle.cast(),
                desc.cast(),
                alpha,
                a,
                a_layout.cast(),
                b,
                b_layout.cast(),
                beta,
                c,
                c_layout.cast(),
                d,
                d_layout.cast(),
                algo_ptr,
                workspace,
                workspace_bytes,
                stream.cast(),
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{EXPORTS, Mapping};

    /// Without libcublasLt every hipBLASLt entry point answers `HIPBLAS_STATUS_NOT_INITIALIZED` (what
    /// hipBLASLt answers without a usable backend) instead of panicking in cudarc's loader; with it, the
    /// GPU bundle's BLAS conformance tests exercise them.
    #[test]
    fn without_cublaslt_every_call_is_not_initialized() {
        // SAFETY: only probes whether the library loads.
        if unsafe { lt::is_culib_present() } {
            eprintln!("SKIPPED without_cublaslt_every_call_is_not_initialized: libcublasLt is installed here");
            return;
        }
        let null = std::ptr::null_mut::<c_void>();
        let mut out = null;
        let mut count: c_int = 0;
        // SAFETY: every call returns before it reads or writes through a pointer (the library is absent).
        let statuses = unsafe {
            [
                ("hipblasLtCreate", hipblasLtCreate(&mut out)),
                ("hipblasLtDestroy", hipblasLtDestroy(null)),
                ("hipblasLtMatmulDescCreate", hipblasLtMatmulDescCreate(&mut out, 2, 0)),
                ("hipblasLtMatmulDescDestroy", hipblasLtMatmulDescDestroy(null)),
                ("hipblasLtMatmulDescSetAttribute", hipblasLtMatmulDescSetAttribute(null, 0, null, 0)),
                ("hipblasLtMatrixLayoutCreate", hipblasLtMatrixLayoutCreate(&mut out, 0, 1, 1, 1)),
                ("hipblasLtMatrixLayoutDestroy", hipblasLtMatrixLayoutDestroy(null)),
                ("hipblasLtMatrixLayoutSetAttribute", hipblasLtMatrixLayoutSetAttribute(null, 0, null, 0)),
                ("hipblasLtMatmulPreferenceCreate", hipblasLtMatmulPreferenceCreate(&mut out)),
                ("hipblasLtMatmulPreferenceDestroy", hipblasLtMatmulPreferenceDestroy(null)),
                ("hipblasLtMatmulPreferenceSetAttribute", hipblasLtMatmulPreferenceSetAttribute(null, 1, null, 0)),
                (
                    "hipblasLtMatmulAlgoGetHeuristic",
                    hipblasLtMatmulAlgoGetHeuristic(
                        null,
                        null,
                        null,
                        null,
                        null,
                        null,
                        null,
                        1,
                        std::ptr::null_mut(),
                        &mut count,
                    ),
                ),
                (
                    "hipblasLtMatmul",
                    hipblasLtMatmul(
                        null,
                        null,
                        null,
                        null,
                        null,
                        null,
                        null,
                        null,
                        null,
                        null,
                        null,
                        null,
                        std::ptr::null(),
                        null,
                        0,
                        null,
                    ),
                ),
            ]
        };
        let listed: Vec<&str> = EXPORTS
            .iter()
            .filter(|(n, m)| n.starts_with("hipblasLt") && matches!(m, Mapping::Mapped(_)))
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(statuses.iter().map(|(n, _)| *n).collect::<Vec<_>>(), listed, "every hipblasLt entry is called");
        for (name, got) in statuses {
            assert_eq!(got, status::NOT_INITIALIZED, "{name}");
        }
    }

    #[test]
    fn heuristic_results_have_hipblaslt_layout() {
        assert_eq!(std::mem::offset_of!(HipHeuristicResult, workspace_size), 24);
        assert_eq!(std::mem::offset_of!(HipHeuristicResult, state), 32);
        assert_eq!(std::mem::offset_of!(HipHeuristicResult, waves_count), 36);
    }
}
