//! The HIP backend's device: identity, limits, the current device, pinning and the deferred-error list.

use std::ffi::{c_char, c_int};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::api::Device;
use crate::code::{CodeObject, KernelSource};
use crate::error::{Error, Result};
use crate::hip::context;
use crate::hip::event::HipEvent;
use crate::hip::graph::{HipGraph, HipGraphExec};
use crate::hip::memory::{self, HipDeviceBuffer, HipPinnedBuffer};
use crate::hip::module::HipModule;
use crate::hip::stream::{self, HipStream};
use crate::hip::sys::code;
use crate::hip::{HipBackend, result, rtc};
use crate::pinning::{PinGuard, check_pinned, pinned_device};
use crate::types::{BackendKind, DeviceInfo, MemoryInfo};

/// What a device allows, read once at open so launches are checked without a HIP call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceLimits {
    /// `hipDeviceProp_t::maxThreadsPerBlock`.
    pub(crate) max_threads_per_block: u32,
    /// `hipDeviceProp_t::maxThreadsDim`.
    pub(crate) max_block: [u32; 3],
    /// `hipDeviceProp_t::maxGridSize`.
    pub(crate) max_grid: [u32; 3],
    /// `hipDeviceProp_t::sharedMemPerBlock` (LDS a block may use).
    pub(crate) max_shared_bytes: u32,
}

/// A device as HIP describes it.
struct Described {
    info: DeviceInfo,
    limits: DeviceLimits,
}

/// `"5.2.21153"` from `hipRuntimeGetVersion`'s `major * 10^7 + minor * 10^5 + patch`.
pub(crate) fn format_runtime_version(version: i32) -> String {
    format!("{}.{}.{}", version / 10_000_000, (version / 100_000) % 100, version % 100_000)
}

/// A fixed-size C string field of `hipDeviceProp_t`, up to its first NUL (or the whole field).
fn c_field(field: &[c_char]) -> String {
    let bytes: Vec<u8> = field.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The architecture string of a device: `gcnArchName` as HIP reports it, target features included
/// (`gfx90a:sramecc+:xnack-`), because code built for one feature set does not run on another; it is
/// also exactly what hipRTC's `--offload-arch=` takes. Runtimes too old to fill `gcnArchName` get
/// `gfx` and the deprecated numeric `gcnArch`.
pub(crate) fn arch_name(gcn_arch_name: &str, gcn_arch: i32) -> String {
    let name = gcn_arch_name.trim();
    if name.is_empty() { format!("gfx{gcn_arch}") } else { name.to_string() }
}

fn hip_ordinal(ordinal: usize) -> Option<c_int> {
    c_int::try_from(ordinal).ok()
}

fn describe(ordinal: usize, runtime_version: i32) -> Result<Described> {
    let op = "hip.describe_device";
    let raw = hip_ordinal(ordinal).ok_or_else(|| result::vendor(op, code::INVALID_DEVICE))?;
    let buffer = result::device::properties(op, raw)?;
    let p = &buffer.props;
    let dim = |v: c_int| v.max(0) as u32;
    let limits = DeviceLimits {
        max_threads_per_block: dim(p.maxThreadsPerBlock),
        max_block: [dim(p.maxThreadsDim[0]), dim(p.maxThreadsDim[1]), dim(p.maxThreadsDim[2])],
        max_grid: [dim(p.maxGridSize[0]), dim(p.maxGridSize[1]), dim(p.maxGridSize[2])],
        max_shared_bytes: u32::try_from(p.sharedMemPerBlock).unwrap_or(u32::MAX),
    };
    let total = result::device::total_mem(op, raw).unwrap_or(p.totalGlobalMem);
    let info = DeviceInfo {
        backend: BackendKind::Hip,
        ordinal,
        name: c_field(&p.name),
        arch: arch_name(&c_field(&p.gcnArchName), p.gcnArch),
        total_memory: total as u64,
        driver_version: format!("HIP runtime {}", format_runtime_version(runtime_version)),
    };
    Ok(Described { info, limits })
}

/// What to check when `hipGetDeviceCount` fails with `status`.
fn no_device_hint(status: i64) -> &'static str {
    match status {
        s if s == i64::from(code::NO_DEVICE) => {
            "; no AMD GPU is visible (check the amdgpu driver, access to /dev/kfd and HIP_VISIBLE_DEVICES)"
        }
        s if s == i64::from(code::INSUFFICIENT_DRIVER) => "; the amdgpu kernel driver is too old for this ROCm",
        s if s == i64::from(code::NOT_INITIALIZED) => "; the HIP runtime failed to initialise (check the ROCm install)",
        _ => "",
    }
}

/// The reason the backend is unavailable when HIP finds no device: `Ok(0)` when HIP reported no devices,
/// `Err` with the error `hipGetDeviceCount` failed with.
pub(crate) fn no_device_reason(status: std::result::Result<usize, &Error>) -> String {
    match status {
        Ok(_) => "no HIP device found: hipGetDeviceCount reported 0 devices (check the amdgpu driver, access to \
                  /dev/kfd and HIP_VISIBLE_DEVICES)"
            .to_string(),
        Err(Error::Vendor { name, code, message, .. }) => {
            let hint = no_device_hint(*code);
            if message == name {
                format!("no HIP device found: hipGetDeviceCount failed with {name} ({code}){hint}")
            } else {
                format!("no HIP device found: hipGetDeviceCount failed with {name} ({code}): {message}{hint}")
            }
        }
        Err(other) => format!("no HIP device found: {other}"),
    }
}

/// The number of devices, or [`Error::BackendUnavailable`] when there are none: on a machine without an
/// AMD GPU `hipGetDeviceCount` fails with `hipErrorNoDevice` (or reports 0), which is not a fault.
fn device_count(op: &'static str) -> Result<usize> {
    match result::runtime::device_count(op) {
        Ok(0) => Err(Error::BackendUnavailable { backend: BackendKind::Hip, reason: no_device_reason(Ok(0)) }),
        Ok(count) => Ok(count),
        Err(e) => Err(Error::BackendUnavailable { backend: BackendKind::Hip, reason: no_device_reason(Err(&e)) }),
    }
}

/// The devices HIP sees, or why there are none.
pub(crate) fn enumerate() -> Result<Vec<DeviceInfo>> {
    let count = device_count("hip.enumerate")?;
    let version = result::runtime::version("hip.enumerate")?;
    (0..count).map(|ordinal| describe(ordinal, version).map(|d| d.info)).collect()
}

/// Opens device `ordinal`.
pub(crate) fn open(ordinal: usize) -> Result<HipDevice> {
    let count = device_count("hip.open")?;
    let raw = match hip_ordinal(ordinal) {
        Some(raw) if ordinal < count => raw,
        _ => return Err(Error::NoSuchDevice { backend: BackendKind::Hip, ordinal, count }),
    };
    let version = result::runtime::version("hip.open")?;
    let described = describe(ordinal, version)?;
    Ok(HipDevice {
        shared: Arc::new(DeviceShared {
            info: described.info,
            limits: described.limits,
            raw,
            next_id: AtomicU64::new(1),
            deferred: Mutex::new(Vec::new()),
        }),
    })
}

/// Errors recorded by destructors of objects whose device is gone, so nobody can take them from it.
static ORPHANED: Mutex<Vec<Error>> = Mutex::new(Vec::new());

/// Errors that destructors of HIP objects recorded after the last handle of their device was gone
/// (errors nobody took from the device before it went away), oldest first. Every other destructor error
/// is on its device: [`Device::take_deferred_errors`].
pub fn take_orphaned_errors() -> Vec<Error> {
    std::mem::take(&mut *ORPHANED.lock())
}

/// A HIP handle moved into a postponed release.
pub(crate) struct SendHandle<T>(T);

// SAFETY: only built from HIP handles and pointers (opaque values the runtime accepts from any thread),
// and only moved so that the one call that releases the handle can run on another thread.
unsafe impl<T> Send for SendHandle<T> {}

impl<T> SendHandle<T> {
    pub(crate) fn new(handle: T) -> SendHandle<T> {
        SendHandle(handle)
    }

    /// The handle (taking the whole wrapper, so a closure that calls this captures the wrapper).
    pub(crate) fn into_inner(self) -> T {
        self.0
    }
}

type Release = Box<dyn FnOnce() -> Result<()> + Send>;

/// Releases postponed because they were requested where HIP forbids unsafe calls (during a capture).
static POSTPONED: Mutex<Vec<(Arc<DeviceShared>, &'static str, Release)>> = Mutex::new(Vec::new());
/// `POSTPONED.len()`, readable without the lock.
static POSTPONED_COUNT: AtomicUsize = AtomicUsize::new(0);

/// For destructors: runs `release` (a free, an unload, a destroy) with `device` current now, or, while
/// this thread may not make unsafe calls because of an active capture, at the next point where it may
/// ([`flush_postponed_releases`]). A free is one of the calls stream capture forbids in thread-local and
/// global mode (HIP follows CUDA: `hipFree` synchronises the device and is not captured); making it
/// there would fail or break the capture. Errors are recorded on the device either way.
pub(crate) fn release(
    device: &Arc<DeviceShared>,
    op: &'static str,
    release: impl FnOnce() -> Result<()> + Send + 'static,
) {
    if stream::unsafe_calls_forbidden() {
        let mut postponed = POSTPONED.lock();
        postponed.push((device.clone(), op, Box::new(release)));
        POSTPONED_COUNT.store(postponed.len(), Ordering::Release);
    } else {
        device.release_with(op, release);
    }
}

/// Runs the postponed releases, if this thread may make unsafe calls; called at the end of a capture,
/// before allocations, at device synchronisation and when a stream is dropped. Cheap when there are none.
pub(crate) fn flush_postponed_releases() {
    if POSTPONED_COUNT.load(Ordering::Acquire) == 0 || stream::unsafe_calls_forbidden() {
        return;
    }
    let pending = {
        let mut postponed = POSTPONED.lock();
        POSTPONED_COUNT.store(0, Ordering::Release);
        std::mem::take(&mut *postponed)
    };
    for (device, op, release) in pending {
        device.release_with(op, release);
    }
}

/// What every object of one opened device shares: identity, limits and the deferred-error list. Objects
/// hold it by `Arc`, so an object can always name (and make current) its device.
#[derive(Debug)]
pub(crate) struct DeviceShared {
    pub(crate) info: DeviceInfo,
    pub(crate) limits: DeviceLimits,
    /// The ordinal as HIP takes it.
    raw: c_int,
    pub(crate) next_id: AtomicU64,
    deferred: Mutex<Vec<Error>>,
}

impl DeviceShared {
    /// The device ordinal.
    #[inline]
    pub(crate) fn ordinal(&self) -> usize {
        self.info.ordinal
    }

    /// The ordinal as HIP takes it.
    #[inline]
    pub(crate) fn raw_ordinal(&self) -> c_int {
        self.raw
    }

    /// Records an error met where it cannot be returned (a destructor).
    pub(crate) fn defer(&self, error: Error) {
        self.deferred.lock().push(error);
    }

    /// The entry of every operation: fails with [`Error::WrongDevice`] if another HIP device is pinned to
    /// this thread, then makes this device current (a thread-local compare when it already is).
    #[inline]
    pub(crate) fn enter(&self, op: &'static str) -> Result<()> {
        check_pinned(op, BackendKind::Hip, self.ordinal())?;
        context::make_current(op, self.raw)
    }

    /// For calls that, like the host backend's, are not tied to the pinned device (event queries): makes
    /// this device current unless another HIP device is pinned here, in which case the call runs with
    /// that device current, which HIP accepts for events and streams of any device.
    #[inline]
    pub(crate) fn touch(&self, op: &'static str) -> Result<()> {
        match pinned_device(BackendKind::Hip) {
            Some(other) if other != self.ordinal() => Ok(()),
            _ => context::make_current(op, self.raw),
        }
    }

    /// For destructors: runs `f` with this device current, restores the previous device, and records any
    /// error on the device instead of returning it.
    pub(crate) fn release_with(&self, op: &'static str, f: impl FnOnce() -> Result<()>) {
        if let Err(e) = context::with_device(op, self.raw, f) {
            self.defer(e);
        }
    }
}

impl Drop for DeviceShared {
    fn drop(&mut self) {
        let left = std::mem::take(&mut *self.deferred.lock());
        if !left.is_empty() {
            ORPHANED.lock().extend(left);
        }
    }
}

/// An opened HIP device. Each [`crate::Backend::open`] gives an independent handle with its own
/// deferred-error list; all of them drive the same GPU.
///
/// # Thread safety
/// `Send + Sync`, cheap to clone. HIP's runtime API is thread-safe and acts on the device current on the
/// calling thread ("Set default device to be used for subsequent hip API calls from this thread",
/// `hipSetDevice`), so every operation makes its device current on the calling thread first; a device
/// may therefore be used from any thread. [`Device::pin`] makes that explicit and turns a use of another
/// device into [`Error::WrongDevice`].
#[derive(Debug, Clone)]
pub struct HipDevice {
    pub(crate) shared: Arc<DeviceShared>,
}

impl HipDevice {
    /// The architecture as HIP names it, target features included (`gfx90a:sramecc+:xnack-`); the
    /// same string as [`DeviceInfo::arch`], and what compilation targets.
    pub fn gcn_arch_name(&self) -> &str {
        &self.shared.info.arch
    }
}

impl Device for HipDevice {
    type Backend = HipBackend;

    fn info(&self) -> &DeviceInfo {
        &self.shared.info
    }

    fn pin(&self) -> Result<PinGuard> {
        let op = "device.pin";
        let previous = result::device::get(op)?;
        let ordinal = self.shared.raw_ordinal();
        result::device::set(op, ordinal)?;
        context::note_current(ordinal);
        let device = self.shared.clone();
        let restore = move || match result::device::set("device.unpin", previous) {
            Ok(()) => context::note_current(previous),
            Err(e) => device.defer(e),
        };
        Ok(PinGuard::push(BackendKind::Hip, self.shared.ordinal(), Some(Box::new(restore))))
    }

    fn memory_info(&self) -> Result<MemoryInfo> {
        self.shared.enter("device.memory_info")?;
        let (free, total) = result::memory::info("device.memory_info")?;
        Ok(MemoryInfo { free: free as u64, total: total as u64 })
    }

    fn create_stream(&self) -> Result<HipStream> {
        self.shared.enter("device.create_stream")?;
        HipStream::new(self.shared.clone())
    }

    fn create_event(&self) -> Result<HipEvent> {
        self.shared.enter("device.create_event")?;
        HipEvent::new(self.shared.clone(), true)
    }

    fn create_untimed_event(&self) -> Result<HipEvent> {
        self.shared.enter("device.create_untimed_event")?;
        HipEvent::new(self.shared.clone(), false)
    }

    fn alloc(&self, bytes: usize) -> Result<HipDeviceBuffer> {
        memory::alloc(&self.shared, bytes)
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<HipPinnedBuffer> {
        memory::alloc_pinned(&self.shared, bytes)
    }

    fn compile(&self, source: &KernelSource) -> Result<CodeObject> {
        check_pinned("device.compile", BackendKind::Hip, self.shared.ordinal())?;
        rtc::compile_for_arch(source, &self.shared.info.arch)
    }

    fn load_module(&self, code: &CodeObject) -> Result<HipModule> {
        self.shared.enter("device.load_module")?;
        HipModule::load(self.shared.clone(), code)
    }

    fn instantiate(&self, graph: &HipGraph) -> Result<HipGraphExec> {
        self.shared.enter("device.instantiate")?;
        HipGraphExec::instantiate(self.shared.clone(), graph)
    }

    fn synchronize(&self) -> Result<()> {
        let op = "device.synchronize";
        self.shared.enter(op)?;
        stream::forbid_during_capture(op)?;
        flush_postponed_releases();
        result::device::synchronize(op).map_err(|e| stream::map_fault(op, e, None, 0))
    }

    fn take_deferred_errors(&self) -> Vec<Error> {
        std::mem::take(&mut *self.shared.deferred.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hip::sys;

    #[test]
    fn runtime_versions_are_formatted_as_rocm_does() {
        assert_eq!(format_runtime_version(50_221_153), "5.2.21153");
        assert_eq!(format_runtime_version(60_342_134), "6.3.42134");
    }

    #[test]
    fn arch_names_keep_target_features() {
        assert_eq!(arch_name("gfx90a:sramecc+:xnack-", 910), "gfx90a:sramecc+:xnack-");
        assert_eq!(arch_name("", 906), "gfx906");
        assert_eq!(c_field(&[b'g' as c_char, b'f' as c_char, b'x' as c_char, 0, b'z' as c_char]), "gfx");
    }

    #[test]
    fn no_device_reasons_say_so_clearly() {
        let e = result::vendor("hip.enumerate", code::NO_DEVICE);
        let reason = no_device_reason(Err(&e));
        assert!(reason.starts_with("no HIP device found: hipGetDeviceCount failed with hipErrorNoDevice (100)"));
        assert!(no_device_reason(Ok(0)).starts_with("no HIP device found: hipGetDeviceCount reported 0 devices"));
    }

    #[test]
    fn limits_come_from_the_pre_6_0_property_layout() {
        // The offsets saggar reads must not move between the bindings and ROCm 5.2's header.
        assert_eq!(std::mem::offset_of!(sys::hipDeviceProp_t, maxGridSize), 296);
    }
}
