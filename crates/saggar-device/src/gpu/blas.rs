//! BLAS-Lt on a GPU backend, written once for cuBLASLt and hipBLASLt: their APIs have the same
//! functions with the same arguments under two prefixes, and differ only in enum numbers and the size
//! of the heuristic result, which a vendor states in its [`LtSpec`]. The library is loaded at run time
//! with libloading (cudarc's own loader panics when the library is absent and cannot be pointed at a
//! path), so a missing library is [`Error::LibraryUnavailable`] naming the files tried.
//!
//! The row-major matmul of [`crate::blas`] is the column-major `C^T = op(B)^T op(A)^T`: the vendor's
//! `A` is our `B` and its `B` our `A`, every matrix is read with the leading dimension of its row-major
//! storage, and a bias over the columns of our `C` is the vendor's bias over the rows of `D`.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::api::{Device as _, DeviceBuffer as _, Event as _, Stream as _};
use crate::blas::{
    Blas, BlasConfig, Epilogue, MatmulDesc, MatmulOperands, MatmulPrecision, TUNE_MAX_FLOP, TUNE_MIN_FLOP,
};
use crate::error::{Error, Result};
use crate::gpu::device::{self, DeviceShared};
use crate::gpu::driver::Driver;
use crate::gpu::{Device, GpuBackend, Stream};
use crate::rules;

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
    /// Compute types: strict `f32`, `f32` with TF32 allowed.
    pub compute: [c_int; 2],
    /// The `f32` data type (`CUDA_R_32F`, `HIP_R_32F`).
    pub r_32f: c_int,
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

/// Epilogue numbers, the same in both libraries: DEFAULT, RELU, BIAS, RELU_BIAS, GELU, GELU_BIAS.
fn epilogue_code(epilogue: Epilogue, bias: bool) -> u32 {
    match (epilogue, bias) {
        (Epilogue::None, false) => 1,
        (Epilogue::Relu, false) => 2,
        (Epilogue::None, true) => 4,
        (Epilogue::Relu, true) => 6,
        (Epilogue::GeluTanh, false) => 32,
        (Epilogue::GeluTanh, true) => 36,
    }
}

type Status = c_int;
type Handle = *mut c_void;
type SetAttr = unsafe extern "C" fn(*mut c_void, c_int, *const c_void, usize) -> Status;

/// The library's functions, loaded once per handle. The library stays loaded while this lives.
struct LtApi {
    create: unsafe extern "C" fn(*mut Handle) -> Status,
    destroy: unsafe extern "C" fn(Handle) -> Status,
    desc_create: unsafe extern "C" fn(*mut Handle, c_int, c_int) -> Status,
    desc_destroy: unsafe extern "C" fn(Handle) -> Status,
    desc_set: SetAttr,
    layout_create: unsafe extern "C" fn(*mut Handle, c_int, u64, u64, i64) -> Status,
    layout_destroy: unsafe extern "C" fn(Handle) -> Status,
    layout_set: SetAttr,
    pref_create: unsafe extern "C" fn(*mut Handle) -> Status,
    pref_destroy: unsafe extern "C" fn(Handle) -> Status,
    pref_set: SetAttr,
    #[allow(clippy::type_complexity)]
    heuristic: unsafe extern "C" fn(
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
    matmul: unsafe extern "C" fn(
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
fn load(spec: &'static LtSpec, path: Option<&PathBuf>) -> Result<Arc<LtApi>> {
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
fn check<D: Driver>(op: &'static str, status: Status) -> Result<()> {
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
fn with_matmul(e: Error, desc: &MatmulDesc, ptrs: &[u64; 4], workspace: u64, workspace_bytes: usize) -> Error {
    match e {
        Error::Vendor { backend, op, name, code, message } => {
            let align = |p: u64| if p == 0 { 0 } else { 1u64 << p.trailing_zeros().min(12) };
            let message = format!(
                "{message} for m={} n={} k={} batch={} strides a={} b={} c={} trans_a={} trans_b={} bias={} \
                 epilogue={:?} precision={:?}; alignment a={} b={} c={} bias={} workspace={} bytes, workspace {workspace_bytes} bytes",
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

/// Room for either library's heuristic result (cuBLASLt: 96 bytes; hipBLASLt: 56), 8-byte aligned.
type HeuristicResult = [u64; 16];

/// Most candidates asked of the heuristic when tuning.
const MAX_TUNE_CANDIDATES: usize = 16;

/// Timed runs of each candidate (after one untimed run).
const TUNE_RUNS: u32 = 3;

/// What a tuned choice depends on: the library, the device, the workspace, the description and
/// the alignment it was planned for.
type TunedKey = (&'static str, usize, usize, MatmulDesc, u32);

/// The heuristic result kept for each tuned problem, process-wide: run contexts and sessions have
/// their own handles, and a problem is timed once per process.
static TUNED: std::sync::LazyLock<Mutex<HashMap<TunedKey, HeuristicResult>>> =
    std::sync::LazyLock::new(|| Mutex::new(HashMap::new()));

/// What decides which kernels of the library a plan launches: the library, the device, the
/// description, the operand alignment and the algorithm (its configuration words). The size is part
/// of it: the libraries launch other kernel instances (and reductions) for other sizes with the same
/// configuration.
type KernelKey = (&'static str, usize, MatmulDesc, u32, [u64; 8]);

/// The kernels [`Blas::prepare`] has launched once in this process (through [`LoadGate`]), so a
/// launch during a capture never loads code.
static LOADED_KERNELS: std::sync::LazyLock<Mutex<std::collections::HashSet<KernelKey>>> =
    std::sync::LazyLock::new(|| Mutex::new(std::collections::HashSet::new()));

/// Held by the one thread timing candidates, process-wide: sessions load their buckets on several
/// threads, and candidates timed side by side would measure each other's kernels.
static TIMING: Mutex<()> = Mutex::new(());

/// Floating-point operations of one call of `desc`.
fn flop(desc: &MatmulDesc) -> u64 {
    2u64.saturating_mul(desc.m).saturating_mul(desc.n).saturating_mul(desc.k).saturating_mul(desc.batch.max(1))
}

/// The most workspace the heuristic may plan for below [`TUNE_MIN_FLOP`]: with more offered, its
/// choices for problems this small ran slower (the BERT test model at batch 1 on an H100, GEMMs of
/// 1 to 4 MFLOP: 180 us a request with 32 MiB, 146 us with 4 MiB), where larger problems at a few
/// hundred rows need it for their split-K kernels (BERT-base at batch 1: 1.95 ms against 2.89 ms).
const SMALL_PROBLEM_WORKSPACE: usize = 4 << 20;

/// The workspace the heuristic is offered for `desc` by a handle with `workspace` bytes.
fn preferred_workspace(desc: &MatmulDesc, workspace: usize) -> usize {
    if flop(desc) < TUNE_MIN_FLOP { workspace.min(SMALL_PROBLEM_WORKSPACE) } else { workspace }
}

/// Elements a strided-batched operand of `rows x cols` spans.
fn span(desc: &MatmulDesc, rows: u64, cols: u64, stride: u64) -> u64 {
    (desc.batch.max(1) - 1).saturating_mul(stride).saturating_add(rows.saturating_mul(cols))
}

/// A planned matmul: the descriptor, the three layouts (C doubles as D) and the chosen algorithm.
struct Plan {
    desc: Handle,
    layouts: [Handle; 3],
    algo: Box<HeuristicResult>,
    alpha: f32,
    beta: f32,
    /// Held while the descriptor's bias pointer is written and read by the call that follows, so two
    /// threads never race on it (plans without a bias are never written after planning).
    bias: Mutex<()>,
}

// SAFETY: a plan's handles are plain host objects of the library, which may be used from any thread;
// after planning the only write (the bias pointer) happens under `bias`.
unsafe impl Send for Plan {}
// SAFETY: as above.
unsafe impl Sync for Plan {}

/// The largest operand alignment a plan asks for: what the fast kernels need.
const MAX_ALIGNMENT: u32 = 16;

/// The alignment in bytes every matrix of `desc` keeps when the first batch starts at `ptrs`: the
/// largest power of two up to [`MAX_ALIGNMENT`] dividing every address and every batch stride.
fn alignment(desc: &MatmulDesc, ptrs: &[u64]) -> u32 {
    let strides = [desc.stride_a, desc.stride_b, desc.stride_c].map(|s| if desc.batch > 1 { s * 4 } else { 0 });
    let all = ptrs.iter().chain(&strides).fold(u64::from(MAX_ALIGNMENT), |acc, &v| acc | v);
    1 << all.trailing_zeros().min(MAX_ALIGNMENT.trailing_zeros())
}

/// Plans by description and the operand alignment they were chosen for.
type PlanKey = (MatmulDesc, u32);

/// The handle's state behind its `Arc`.
struct Shared<D: Driver> {
    device: Arc<DeviceShared<D>>,
    api: Arc<LtApi>,
    handle: Handle,
    workspace_bytes: usize,
    /// [`BlasConfig::tune_candidates`].
    tune_candidates: usize,
    /// One plan per description and alignment. The lock is this handle's, never global, and held only
    /// to find a plan.
    plans: Mutex<HashMap<PlanKey, Arc<Plan>>>,
}

/// A BLAS-Lt handle of a GPU device ([`Blas`]).
///
/// # Thread safety
/// `Send + Sync`: the library's handle may be used from any thread (cuBLASLt: "the cuBLASLt handle is
/// thread safe"), and the plans are behind this handle's lock.
pub struct GpuBlas<D: Driver> {
    shared: Arc<Shared<D>>,
}

// SAFETY: the raw handles are owned by this value and destroyed once, in `Drop`; the libraries allow
// their use from any thread, and the only write to a plan after planning (its bias pointer) happens
// under that plan's lock.
unsafe impl<D: Driver> Send for Shared<D> {}
// SAFETY: as above.
unsafe impl<D: Driver> Sync for Shared<D> {}

impl<D: Driver> std::fmt::Debug for GpuBlas<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuBlas")
            .field("library", &D::BLAS_LT.library)
            .field("device", &self.shared.device.ordinal())
            .field("workspace_bytes", &self.shared.workspace_bytes)
            .finish()
    }
}

impl<D: Driver> GpuBlas<D> {
    pub(crate) fn new(device: &Device<D>, config: &BlasConfig) -> Result<GpuBlas<D>> {
        let op = "device.create_blas";
        device.shared.enter(op)?;
        device::forbid_during_capture::<D>(op)?;
        let api = load(D::BLAS_LT, config.library_path.as_ref())?;
        let mut handle = std::ptr::null_mut();
        // Creating a handle loads and allocates the library's device state: kept apart from captures.
        // SAFETY: `handle` is writable; the device's context is current (entered above).
        check::<D>(op, device::loading_code::<D, _>(|| unsafe { (api.create)(&mut handle) }))?;
        Ok(GpuBlas {
            shared: Arc::new(Shared {
                device: device.shared.clone(),
                api,
                handle,
                workspace_bytes: config.workspace_bytes,
                tune_candidates: config.tune_candidates.min(MAX_TUNE_CANDIDATES),
                plans: Mutex::new(HashMap::new()),
            }),
        })
    }
}

impl<D: Driver> Shared<D> {
    /// Sets one attribute of a descriptor, layout or preference.
    ///
    /// # Safety
    /// `object` is a live object of the kind `set` belongs to.
    unsafe fn set<T>(&self, op: &'static str, set: SetAttr, object: Handle, attr: c_int, value: &T) -> Result<()> {
        let bytes = std::mem::size_of::<T>();
        // SAFETY: `value` is readable for `bytes`; `object` is live (this function's contract).
        check::<D>(op, unsafe { set(object, attr, (value as *const T).cast(), bytes) })
    }

    /// A new plan for `desc` (already checked). Without `tune`, host calls only: nothing is enqueued
    /// or allocated on the device. With `tune` ([`Blas::prepare`]), a small problem's candidates
    /// are timed ([`Shared::run_candidates`]) unless this process timed them before, and the chosen
    /// kernels are launched once unless this process launched them before
    /// ([`Shared::load_kernels`]), so a later launch during a capture loads no code.
    fn plan(&self, desc: &MatmulDesc, align: u32, tune: bool) -> Result<Plan> {
        let op = "blas.prepare";
        let spec = D::BLAS_LT;
        let api = &self.api;
        let mut plan = Plan {
            desc: std::ptr::null_mut(),
            layouts: [std::ptr::null_mut(); 3],
            algo: Box::new([0; 16]),
            alpha: desc.alpha(),
            beta: desc.beta(),
            bias: Mutex::new(()),
        };
        let compute = spec.compute[usize::from(desc.precision == MatmulPrecision::Tf32)];
        // SAFETY: the out-pointer is writable; `plan` owns what is created and destroys it on drop.
        check::<D>(op, unsafe { (api.desc_create)(&mut plan.desc, compute, spec.r_32f) })?;
        let plan = PlanGuard { shared: self, plan: Some(plan) };
        let p = plan.plan.as_ref().expect("set above");
        // The vendor's A is our B (see the module docs), its B our A.
        let [transa, transb, epilogue, _, bias_type] = spec.desc_attrs;
        let op_of = |t: bool| spec.op[usize::from(t)];
        // SAFETY: `p.desc` was created above and is live for these `set`s.
        unsafe {
            self.set(op, api.desc_set, p.desc, transa, &op_of(desc.trans_b))?;
            self.set(op, api.desc_set, p.desc, transb, &op_of(desc.trans_a))?;
            self.set(op, api.desc_set, p.desc, epilogue, &epilogue_code(desc.epilogue, desc.bias))?;
            if desc.bias {
                self.set(op, api.desc_set, p.desc, bias_type, &spec.r_32f)?;
            }
        }
        let (m, n, k) = (desc.m, desc.n, desc.k);
        // Column-major (rows, cols, ld) of the vendor's A (our B), B (our A) and C/D (our C^T).
        let shapes = [
            if desc.trans_b { (k, n, k) } else { (n, k, n) },
            if desc.trans_a { (m, k, m) } else { (k, m, k) },
            (n, m, n),
        ];
        let strides = [desc.stride_b, desc.stride_a, desc.stride_c];
        let mut plan = plan;
        for (i, ((rows, cols, ld), stride)) in shapes.into_iter().zip(strides).enumerate() {
            let mut layout = std::ptr::null_mut();
            // SAFETY: the out-pointer is writable.
            check::<D>(op, unsafe { (api.layout_create)(&mut layout, spec.r_32f, rows, cols, ld as i64) })?;
            plan.plan.as_mut().expect("set above").layouts[i] = layout;
            if desc.batch > 1 {
                let [count_attr, stride_attr] = spec.layout_attrs;
                // SAFETY: `layout` was created above and is live; the values have the attributes' types
                // (int32_t, int64_t); the checks bound both.
                unsafe {
                    self.set(op, api.layout_set, layout, count_attr, &(desc.batch as i32))?;
                    self.set(op, api.layout_set, layout, stride_attr, &(stride as i64))?;
                }
            }
        }
        let mut pref = std::ptr::null_mut();
        // SAFETY: the out-pointer is writable.
        check::<D>(op, unsafe { (api.pref_create)(&mut pref) })?;
        let result = (|| {
            let workspace = preferred_workspace(desc, self.workspace_bytes) as u64;
            // SAFETY: `pref` is live (created above, destroyed below).
            unsafe { self.set(op, api.pref_set, pref, spec.pref_max_workspace, &workspace)? };
            for attr in spec.pref_min_alignment.into_iter().flatten() {
                // SAFETY: as above; the attribute is a uint32_t.
                unsafe { self.set(op, api.pref_set, pref, attr, &align)? };
            }
            let key: TunedKey = (spec.library, self.device.ordinal(), self.workspace_bytes, *desc, align);
            let prepared = tune;
            let tune = tune && self.tune_candidates > 1 && (TUNE_MIN_FLOP..=TUNE_MAX_FLOP).contains(&flop(desc));
            // Taken before looking the problem up, so a problem another thread is timing is timed once.
            let _timing = tune.then(|| TIMING.lock());
            if tune && let Some(found) = TUNED.lock().get(&key) {
                *plan.plan.as_mut().expect("set above").algo = *found;
                return Ok(());
            }
            let wanted = if tune { self.tune_candidates } else { 1 };
            let size = spec.heuristic_result_bytes;
            let mut results = vec![0u64; (wanted * size).div_ceil(8)];
            let p = plan.plan.as_ref().expect("set above");
            let [a, b, c] = p.layouts;
            let mut returned: c_int = 0;
            // SAFETY: every handle is live; `results` holds `wanted` results of the library's size.
            check::<D>(op, unsafe {
                (api.heuristic)(
                    self.handle,
                    p.desc,
                    a,
                    b,
                    c,
                    c,
                    pref,
                    wanted as c_int,
                    results.as_mut_ptr().cast(),
                    &mut returned,
                )
            })?;
            if returned < 1 {
                return Err(Error::InvalidMatmul {
                    m,
                    n,
                    k,
                    batch: desc.batch,
                    reason: format!("{} has no algorithm for it on this device", spec.library),
                });
            }
            let count = (returned as usize).min(wanted);
            // A candidate that cannot be timed leaves the heuristic's first choice. Timing launches
            // every candidate, so it loads their code: kept apart from captures.
            let chosen = if count > 1 {
                device::loading_code::<D, _>(|| self.run_candidates(p, desc, &results, count, TUNE_RUNS)).unwrap_or(0)
            } else {
                0
            };
            // Results are a multiple of 8 bytes long, so each starts on a word of `results`.
            let mut algo: HeuristicResult = [0; 16];
            let words = size.div_ceil(8);
            algo[..words].copy_from_slice(&results[chosen * size / 8..][..words]);
            *plan.plan.as_mut().expect("set above").algo = algo;
            if tune {
                TUNED.lock().insert(key, algo);
            }
            if prepared {
                self.load_kernels(plan.plan.as_ref().expect("set above"), desc, align, count > 1);
            }
            Ok(())
        })();
        // SAFETY: `pref` is live and not used again.
        let destroyed = check::<D>(op, unsafe { (api.pref_destroy)(pref) });
        result?;
        destroyed?;
        Ok(plan.plan.take().expect("set above"))
    }

    /// Launches `plan`'s algorithm once, outside any capture ([`LoadGate`]), unless this process
    /// has launched the same kernels before (`ran`: tuning just launched it): the library loads a
    /// kernel's code at its first launch, which must not happen while a capture is open. A launch
    /// that fails leaves the kernels unmarked, to be tried by the next plan that needs them.
    fn load_kernels(&self, plan: &Plan, desc: &MatmulDesc, align: u32, ran: bool) {
        let words = D::BLAS_LT.algo_bytes / 8;
        let mut algo = [0u64; 8];
        algo[..words].copy_from_slice(&plan.algo[..words]);
        let key: KernelKey = (D::BLAS_LT.library, self.device.ordinal(), *desc, align, algo);
        {
            let mut loaded = LOADED_KERNELS.lock();
            if ran {
                loaded.insert(key);
            }
            if loaded.contains(&key) {
                return;
            }
        }
        let launched = device::loading_code::<D, _>(|| self.run_candidates(plan, desc, &plan.algo[..], 1, 0));
        if launched.is_ok() {
            LOADED_KERNELS.lock().insert(key);
        }
    }

    /// Runs each of the first `count` heuristic results in `results` (each
    /// [`LtSpec::heuristic_result_bytes`] long, a multiple of 8) for `plan` once untimed, then
    /// `timed_runs` times between two events, on a private stream, on zeroed scratch operands of
    /// `desc`'s sizes and a workspace of this handle's size, all freed afterwards; returns the
    /// index of the fastest (0 when none is timed). A candidate the library refuses is skipped.
    fn run_candidates(
        &self,
        plan: &Plan,
        desc: &MatmulDesc,
        results: &[u64],
        count: usize,
        timed_runs: u32,
    ) -> Result<usize> {
        let op = "blas.tune";
        device::forbid_during_capture::<D>(op)?;
        let device = Device { shared: self.device.clone() };
        let f32s = |elements: u64| usize::try_from(elements.saturating_mul(4).max(4)).unwrap_or(usize::MAX);
        let (rows_a, cols_a) = if desc.trans_a { (desc.k, desc.m) } else { (desc.m, desc.k) };
        let (rows_b, cols_b) = if desc.trans_b { (desc.n, desc.k) } else { (desc.k, desc.n) };
        let a = device.alloc(f32s(span(desc, rows_a, cols_a, desc.stride_a)))?;
        let b = device.alloc(f32s(span(desc, rows_b, cols_b, desc.stride_b)))?;
        let c = device.alloc(f32s(span(desc, desc.m, desc.n, desc.stride_c)))?;
        let bias = device.alloc(f32s(desc.n))?;
        let workspace = device.alloc(self.workspace_bytes.max(4))?;
        let stream = device.create_stream()?;
        for buffer in [&a, &b, &c, &bias] {
            stream.memset(buffer.as_slice(), 0)?;
        }
        if desc.bias {
            let ptr = bias.as_slice().ptr().0 as *const c_void;
            // SAFETY: the descriptor is live and not shared yet (the plan is being made).
            unsafe { self.set(op, self.api.desc_set, plan.desc, D::BLAS_LT.desc_attrs[3], &ptr)? };
        }
        let [la, lb, lc] = plan.layouts;
        let size = D::BLAS_LT.heuristic_result_bytes;
        let run = |index: usize| -> Result<()> {
            let algo = results[index * size / 8..].as_ptr();
            stream.enqueue_library(op, |raw| {
                // SAFETY: every handle is live; the scratch operands are live allocations of the
                // sizes `desc` spans, kept until this function returns (after the last synchronize);
                // the algorithm is one the heuristic returned for this descriptor and layouts.
                check::<D>(op, unsafe {
                    (self.api.matmul)(
                        self.handle,
                        plan.desc,
                        (&plan.alpha as *const f32).cast(),
                        b.as_slice().ptr().0 as *const c_void,
                        la,
                        a.as_slice().ptr().0 as *const c_void,
                        lb,
                        (&plan.beta as *const f32).cast(),
                        c.as_slice().ptr().0 as *const c_void,
                        lc,
                        c.as_slice().ptr().0 as *mut c_void,
                        lc,
                        algo.cast(),
                        workspace.as_slice().ptr().0 as *mut c_void,
                        self.workspace_bytes,
                        D::blas_stream(raw),
                    )
                })
            })
        };
        let (start, end) = (device.create_event()?, device.create_event()?);
        let mut best: Option<(std::time::Duration, usize)> = None;
        for index in 0..count {
            let untimed = run(index);
            if timed_runs == 0 {
                untimed?;
                continue;
            }
            if untimed.is_err() {
                continue;
            }
            stream.record(&start)?;
            let timed = (0..timed_runs).try_for_each(|_| run(index));
            stream.record(&end)?;
            end.synchronize()?;
            if timed.is_err() {
                continue;
            }
            let took = end.elapsed_since(&start)?;
            if best.is_none_or(|(t, _)| took < t) {
                best = Some((took, index));
            }
        }
        stream.synchronize()?;
        Ok(best.map_or(0, |(_, index)| index))
    }

    /// Destroys a plan's objects, returning the first error.
    fn destroy(&self, plan: Plan) -> Result<()> {
        let mut first = Ok(());
        for layout in plan.layouts.into_iter().filter(|l| !l.is_null()) {
            // SAFETY: each layout is live and destroyed once (the plan is consumed).
            let r = check::<D>("blas.drop", unsafe { (self.api.layout_destroy)(layout) });
            first = first.and(r);
        }
        if !plan.desc.is_null() {
            // SAFETY: as above.
            let r = check::<D>("blas.drop", unsafe { (self.api.desc_destroy)(plan.desc) });
            first = first.and(r);
        }
        first
    }
}

/// Destroys a half-made plan if planning fails.
struct PlanGuard<'a, D: Driver> {
    shared: &'a Shared<D>,
    plan: Option<Plan>,
}

impl<D: Driver> Drop for PlanGuard<'_, D> {
    fn drop(&mut self) {
        if let Some(plan) = self.plan.take()
            && let Err(e) = self.shared.destroy(plan)
        {
            self.shared.device.defer(e);
        }
    }
}

impl<D: Driver> Drop for Shared<D> {
    fn drop(&mut self) {
        // The library releases the handle's resources in the device's context.
        if let Err(e) = self.device.enter("blas.drop") {
            self.device.defer(e);
        }
        // Only the map holds plans once no call is running (calls borrow the handle).
        let plans: Vec<Plan> = self.plans.get_mut().drain().filter_map(|(_, p)| Arc::into_inner(p)).collect();
        let mut first = Ok(());
        for plan in plans {
            first = first.and(self.destroy(plan));
        }
        if !self.handle.is_null() {
            let handle = std::mem::replace(&mut self.handle, std::ptr::null_mut());
            // Destroying it frees the library's device state: kept apart from captures.
            // SAFETY: the handle is live and destroyed once (replaced by null above).
            let destroyed = device::loading_code::<D, _>(|| unsafe { (self.api.destroy)(handle) });
            first = first.and(check::<D>("blas.drop", destroyed));
        }
        if let Err(e) = first {
            self.device.defer(e);
        }
    }
}

impl<D: Driver> Blas for GpuBlas<D> {
    type Backend = GpuBackend<D>;

    fn workspace_bytes(&self) -> usize {
        self.shared.workspace_bytes
    }

    fn prepare(&self, desc: &MatmulDesc) -> Result<()> {
        rules::check_matmul_desc(desc)?;
        self.shared.plan_for(desc, alignment(desc, &[]), true).map(drop)
    }

    unsafe fn matmul(&self, stream: &Stream<D>, desc: &MatmulDesc, operands: &MatmulOperands) -> Result<()> {
        let op = "blas.matmul";
        let shared = &*self.shared;
        rules::check_matmul(desc, operands, shared.workspace_bytes)?;
        rules::check_same_device(op, stream.device_ordinal(), shared.device.ordinal())?;
        let bias_ptr = operands.bias.map_or(0, |b| b.ptr().0);
        let ptrs = [operands.a.ptr().0, operands.b.ptr().0, operands.c.ptr().0, bias_ptr];
        let plan = shared.plan_for(desc, alignment(desc, &ptrs), false)?;
        let [a, b, c] = plan.layouts;
        stream.enqueue_library(op, |raw| {
            let _bias_guard = operands.bias.map(|bias| {
                let guard = plan.bias.lock();
                let attr = D::BLAS_LT.desc_attrs[3];
                let ptr = bias.ptr().0 as *const c_void;
                // SAFETY: the descriptor is live; under the plan's bias lock no other call reads or
                // writes its bias pointer until this call has read it.
                unsafe { shared.set(op, shared.api.desc_set, plan.desc, attr, &ptr) }.map(|()| guard)
            });
            let _bias_guard = _bias_guard.transpose()?;
            let workspace = operands.workspace.ptr().0 as *mut c_void;
            // SAFETY: every handle is live; the operands were checked against the description and the
            // caller promised they stay live (this function's contract); alpha and beta are host values
            // read during the call; the algorithm was chosen for this descriptor, these layouts and
            // operands of this alignment.
            check::<D>(op, unsafe {
                (shared.api.matmul)(
                    shared.handle,
                    plan.desc,
                    (&plan.alpha as *const f32).cast(),
                    operands.b.ptr().0 as *const c_void,
                    a,
                    operands.a.ptr().0 as *const c_void,
                    b,
                    (&plan.beta as *const f32).cast(),
                    operands.c.ptr().0 as *const c_void,
                    c,
                    operands.c.ptr().0 as *mut c_void,
                    c,
                    plan.algo.as_ptr().cast(),
                    workspace,
                    shared.workspace_bytes,
                    D::blas_stream(raw),
                )
            })
            .map_err(|e| with_matmul(e, desc, &ptrs, workspace as u64, shared.workspace_bytes))
        })
    }
}

impl<D: Driver> Shared<D> {
    /// The plan of `desc` for operands aligned to `align` bytes, made on first use: tuned when
    /// `tune` ([`Blas::prepare`]), else host calls only, so a first use during a capture creates
    /// nothing on the device.
    fn plan_for(&self, desc: &MatmulDesc, align: u32, tune: bool) -> Result<Arc<Plan>> {
        let key = (*desc, align);
        if let Some(plan) = self.plans.lock().get(&key) {
            return Ok(plan.clone());
        }
        self.device.enter("blas.prepare")?;
        let plan = self.plan(desc, align, tune)?;
        let mut plans = self.plans.lock();
        if let Some(theirs) = plans.get(&key) {
            // Another thread planned it meanwhile; keep theirs.
            let theirs = theirs.clone();
            drop(plans);
            self.destroy(plan)?;
            return Ok(theirs);
        }
        let plan = Arc::new(plan);
        plans.insert(key, plan.clone());
        Ok(plan)
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

    #[test]
    fn alignment_is_the_largest_power_of_two_up_to_16_of_addresses_and_strides() {
        let desc = MatmulDesc::gemm(3, 5, 7);
        assert_eq!(alignment(&desc, &[]), 16);
        assert_eq!(alignment(&desc, &[0x1000, 0x2040, 0x3008]), 8);
        assert_eq!(alignment(&desc, &[0x1004]), 4);
        let batched = MatmulDesc { batch: 2, ..desc };
        assert_eq!(alignment(&batched, &[0x1000]), 4, "a stride of 21 floats is 4-byte aligned");
        let even = MatmulDesc { batch: 2, stride_a: 24, stride_b: 40, stride_c: 16, ..desc };
        assert_eq!(alignment(&even, &[0x1000]), 16);
    }

    #[test]
    fn small_problems_are_offered_at_most_4_mib_of_workspace() {
        let small = MatmulDesc::gemm(128, 256, 64);
        let large = MatmulDesc::gemm(128, 768, 768);
        assert_eq!(preferred_workspace(&small, 32 << 20), 4 << 20);
        assert_eq!(preferred_workspace(&small, 1 << 20), 1 << 20, "never more than the handle has");
        assert_eq!(preferred_workspace(&large, 32 << 20), 32 << 20);
    }

    #[test]
    fn flop_and_spans_of_a_strided_batch() {
        let desc = MatmulDesc { batch: 3, stride_a: 100, ..MatmulDesc::gemm(4, 5, 6) };
        assert_eq!(flop(&desc), 2 * 4 * 5 * 6 * 3);
        assert_eq!(span(&desc, 4, 6, desc.stride_a), 2 * 100 + 24);
        assert_eq!(span(&MatmulDesc::gemm(4, 5, 6), 4, 6, 0), 24);
    }

    #[test]
    fn a_conformance_case_is_in_the_timed_range() {
        let timed = crate::conformance_blas::cases()
            .iter()
            .filter(|(_, desc)| (TUNE_MIN_FLOP..=TUNE_MAX_FLOP).contains(&flop(desc)))
            .count();
        assert!(timed >= 1, "the GPU conformance run must exercise timed candidates");
    }

    /// Tuning copies results out of a `u64` buffer by words and keeps one in a [`HeuristicResult`].
    fn result_size_fits<D: Driver>() {
        let size = D::BLAS_LT.heuristic_result_bytes;
        assert!(size % 8 == 0 && size <= std::mem::size_of::<HeuristicResult>(), "{size}");
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn cublaslt_results_fit() {
        result_size_fits::<crate::cuda::CudaDriver>();
    }

    #[cfg(feature = "hip")]
    #[test]
    fn hipblaslt_results_fit() {
        result_size_fits::<crate::hip::HipDriver>();
    }

    #[test]
    fn epilogue_codes_are_the_vendors() {
        assert_eq!(epilogue_code(Epilogue::None, false), 1);
        assert_eq!(epilogue_code(Epilogue::Relu, true), 6);
        assert_eq!(epilogue_code(Epilogue::GeluTanh, true), 36);
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
