//! Loading a vendor's BLAS-Lt library: what it is called and how it numbers things ([`LtSpec`]), its
//! functions ([`LtApi`]), loaded once per process, and its status codes as errors.

use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::blas::{BlasConfig, MatmulDesc, MatmulType};
use crate::error::{Error, Result};
use crate::gpu::driver::Driver;

/// What a vendor's BLAS-Lt library is called and how it numbers things.
#[derive(Debug)]
pub struct LtSpec {
    /// The library's name in messages (`cuBLASLt`).
    pub library: &'static str,
    /// File names tried in order when no path is configured.
    pub candidates: &'static [&'static str],
    /// What to install when none loads.
    pub hint: &'static str,
    /// The functions' prefix (`cublasLt`, `hipblasLt`).
    pub prefix: &'static str,
    /// `CUBLAS_OP_N` / `HIPBLAS_OP_N` and the transposed operation.
    pub op: [c_int; 2],
    /// Compute types: strict `f32`, `f32` with TF32 allowed, `i32` (for `i8` inputs).
    pub compute: [c_int; 3],
    /// The data types of [`MatmulType::F32`], [`MatmulType::F16`], [`MatmulType::BF16`],
    /// [`MatmulType::I8`] and [`MatmulType::I32`] (`CUDA_R_32F`, `CUDA_R_16F`, `CUDA_R_16BF`,
    /// `CUDA_R_8I`, `CUDA_R_32I`; `HIP_R_*`).
    pub data_types: [c_int; 5],
    /// Matmul-descriptor attributes: TRANSA, TRANSB, EPILOGUE, BIAS_POINTER, BIAS_DATA_TYPE.
    pub desc_attrs: [c_int; 5],
    /// Layout attributes: BATCH_COUNT, STRIDED_BATCH_OFFSET.
    pub layout_attrs: [c_int; 2],
    /// The preference attribute MAX_WORKSPACE_BYTES.
    pub pref_max_workspace: c_int,
    /// The preference attributes MIN_ALIGNMENT_A/B/C/D_BYTES, where the library has them (cuBLASLt
    /// assumes 256-byte aligned matrices unless told otherwise).
    pub pref_min_alignment: Option<[c_int; 4]>,
    /// Status codes and their vendor names.
    pub statuses: &'static [(c_int, &'static str)],
    /// Bytes of one heuristic result (`cublasLtMatmulHeuristicResult_t`: 96,
    /// `hipblasLtMatmulHeuristicResult_t`: 56); the algorithm is its first field.
    pub heuristic_result_bytes: usize,
    /// Bytes of the algorithm at the start of a heuristic result (`cublasLtMatmulAlgo_t`: 64,
    /// `hipblasLtMatmulAlgo_t`: 24), a multiple of 8.
    pub algo_bytes: usize,
}

impl LtSpec {
    /// The library's number for `ty`.
    pub(super) fn data_type(&self, ty: MatmulType) -> c_int {
        match ty {
            MatmulType::F32 => self.data_types[0],
            MatmulType::F16 => self.data_types[1],
            MatmulType::BF16 => self.data_types[2],
            MatmulType::I8 => self.data_types[3],
            MatmulType::I32 => self.data_types[4],
        }
    }
}

pub(super) type Status = c_int;
pub(super) type Handle = *mut c_void;
pub(super) type SetAttr = unsafe extern "C" fn(*mut c_void, c_int, *const c_void, usize) -> Status;

/// The library's functions, loaded once per handle. The library stays loaded while this lives.
pub(super) struct LtApi {
    pub(super) create: unsafe extern "C" fn(*mut Handle) -> Status,
    pub(super) destroy: unsafe extern "C" fn(Handle) -> Status,
    pub(super) desc_create: unsafe extern "C" fn(*mut Handle, c_int, c_int) -> Status,
    pub(super) desc_destroy: unsafe extern "C" fn(Handle) -> Status,
    pub(super) desc_set: SetAttr,
    pub(super) layout_create: unsafe extern "C" fn(*mut Handle, c_int, u64, u64, i64) -> Status,
    pub(super) layout_destroy: unsafe extern "C" fn(Handle) -> Status,
    pub(super) layout_set: SetAttr,
    pub(super) pref_create: unsafe extern "C" fn(*mut Handle) -> Status,
    pub(super) pref_destroy: unsafe extern "C" fn(Handle) -> Status,
    pub(super) pref_set: SetAttr,
    #[allow(clippy::type_complexity)]
    pub(super) heuristic: unsafe extern "C" fn(
        Handle,
        Handle,
        Handle,
        Handle,
        Handle,
        Handle,
        Handle,
        c_int,
        *mut c_void,
        *mut c_int,
    ) -> Status,
    #[allow(clippy::type_complexity)]
    pub(super) matmul: unsafe extern "C" fn(
        Handle,
        Handle,
        *const c_void,
        *const c_void,
        Handle,
        *const c_void,
        Handle,
        *const c_void,
        *const c_void,
        Handle,
        *mut c_void,
        Handle,
        *const c_void,
        *mut c_void,
        usize,
        *mut c_void,
    ) -> Status,
    _library: libloading::Library,
}

/// `spec`'s library from `path`, or from its default names, loaded once per process and kept loaded
/// like the driver (a BLAS-Lt library takes a hundred milliseconds or more to load and relocate,
/// which a second session, or a model reloaded from the compile cache, must not pay again); a
/// failure names every file tried and is not kept, so a corrected setup is tried afresh.
pub(super) fn load(spec: &'static LtSpec, path: Option<&PathBuf>) -> Result<Arc<LtApi>> {
    type Loaded = Vec<(&'static str, Option<PathBuf>, Arc<LtApi>)>;
    static LOADED: Mutex<Loaded> = Mutex::new(Vec::new());
    let mut loaded = LOADED.lock();
    if let Some((_, _, api)) = loaded.iter().find(|(library, p, _)| *library == spec.library && p.as_ref() == path) {
        return Ok(api.clone());
    }
    let api = Arc::new(open(spec, path)?);
    loaded.push((spec.library, path.cloned(), api.clone()));
    Ok(api)
}

/// Opens `spec`'s library from `path`, or from its default names; a failure names every file tried.
fn open(spec: &'static LtSpec, path: Option<&PathBuf>) -> Result<LtApi> {
    let tried: Vec<String> = match path {
        Some(p) => vec![p.display().to_string()],
        None => spec.candidates.iter().map(|c| c.to_string()).collect(),
    };
    let unavailable = |tried: &[String], reason: String| Error::LibraryUnavailable {
        library: spec.library,
        tried: tried.into(),
        reason,
        hint: spec.hint,
    };
    let mut last = String::from("no file to try");
    let mut library = None;
    for file in &tried {
        // SAFETY: loading a shared library runs its initialisers; the vendor's BLAS-Lt library (or the
        // file the user configured in its place) is trusted to be that library.
        match unsafe { libloading::Library::new(file) } {
            Ok(lib) => {
                library = Some(lib);
                break;
            }
            Err(e) => last = e.to_string(),
        }
    }
    let library = library.ok_or_else(|| unavailable(&tried, last))?;
    macro_rules! sym {
        ($suffix:literal) => {{
            let name = format!("{}{}\0", spec.prefix, $suffix);
            // SAFETY: the symbol is the vendor's function of that name, whose C signature the field's
            // type spells (checked against the cuBLASLt and hipBLASLt headers); the pointer is copied out
            // and used only while `_library` keeps the library loaded.
            match unsafe { library.get(name.as_bytes()) } {
                Ok(f) => *f,
                Err(e) => return Err(unavailable(&tried, format!("it lacks {}: {e}", name.trim_end_matches('\0')))),
            }
        }};
    }
    Ok(LtApi {
        create: sym!("Create"),
        destroy: sym!("Destroy"),
        desc_create: sym!("MatmulDescCreate"),
        desc_destroy: sym!("MatmulDescDestroy"),
        desc_set: sym!("MatmulDescSetAttribute"),
        layout_create: sym!("MatrixLayoutCreate"),
        layout_destroy: sym!("MatrixLayoutDestroy"),
        layout_set: sym!("MatrixLayoutSetAttribute"),
        pref_create: sym!("MatmulPreferenceCreate"),
        pref_destroy: sym!("MatmulPreferenceDestroy"),
        pref_set: sym!("MatmulPreferenceSetAttribute"),
        heuristic: sym!("MatmulAlgoGetHeuristic"),
        matmul: sym!("Matmul"),
        _library: library,
    })
}

/// Loads the BLAS-Lt library of `D` as `config` says, without creating anything: the check that
/// [`crate::Device::create_blas`] makes first, callable without a device.
pub fn probe_library<D: Driver>(config: &BlasConfig) -> Result<()> {
    load(D::BLAS_LT, config.library_path.as_ref()).map(drop)
}

/// A status as a result.
#[inline]
pub(super) fn check<D: Driver>(op: &'static str, status: Status) -> Result<()> {
    if status == 0 {
        return Ok(());
    }
    let name = D::BLAS_LT.statuses.iter().find(|(c, _)| *c == status).map_or("unknown status", |(_, n)| n);
    Err(Error::Vendor {
        backend: D::KIND,
        op,
        name: name.to_string(),
        code: i64::from(status),
        message: format!("{} returned {name}", D::BLAS_LT.library),
    })
}

/// `e` with the matmul it came from appended to its message: the shape, strides, transposes,
/// epilogue and the operands' alignment, so a refused call can be reproduced.
pub(super) fn with_matmul(
    e: Error,
    desc: &MatmulDesc,
    ptrs: &[u64; 4],
    workspace: u64,
    workspace_bytes: usize,
) -> Error {
    match e {
        Error::Vendor { backend, op, name, code, message } => {
            let align = |p: u64| if p == 0 { 0 } else { 1u64 << p.trailing_zeros().min(12) };
            let message = format!(
                "{message} for m={} n={} k={} batch={} strides a={} b={} c={} trans_a={} trans_b={} bias={} \
                 epilogue={:?} precision={:?} types={}->{}; alignment a={} b={} c={} bias={} workspace={} bytes, workspace {workspace_bytes} bytes",
                desc.m,
                desc.n,
                desc.k,
                desc.batch,
                desc.stride_a,
                desc.stride_b,
                desc.stride_c,
                desc.trans_a,
                desc.trans_b,
                desc.bias,
                desc.epilogue,
                desc.precision,
                desc.inputs.name(),
                desc.output.name(),
                align(ptrs[0]),
                align(ptrs[1]),
                align(ptrs[2]),
                align(ptrs[3]),
                align(workspace),
            );
            Error::Vendor { backend, op, name, code, message }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configured library path that does not exist is refused with the library's name, the path
    /// tried and the hint, as the error a session would report; no device is needed to see it.
    fn missing_library_is_named<D: Driver>() {
        let path = PathBuf::from("/nonexistent/saggar-test/libblaslt-missing.so");
        let config = BlasConfig { library_path: Some(path.clone()), ..BlasConfig::default() };
        match probe_library::<D>(&config) {
            Err(Error::LibraryUnavailable { library, tried, reason, hint }) => {
                assert_eq!(library, D::BLAS_LT.library);
                assert_eq!(&*tried, [path.display().to_string()]);
                assert!(!reason.is_empty());
                assert!(hint.contains(crate::blas::LIBRARY_ENV), "the hint names the variable: {hint}");
            }
            other => panic!("expected LibraryUnavailable, got {other:?}"),
        }
        let shown = probe_library::<D>(&config).unwrap_err().to_string();
        assert!(shown.contains("libblaslt-missing.so") && shown.contains(D::BLAS_LT.library), "{shown}");
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn missing_cublaslt_is_a_typed_error() {
        missing_library_is_named::<crate::cuda::CudaDriver>();
    }

    #[cfg(feature = "hip")]
    #[test]
    fn missing_hipblaslt_is_a_typed_error() {
        missing_library_is_named::<crate::hip::HipDriver>();
    }
}
