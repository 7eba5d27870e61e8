//! The HIP device as the runtime describes it (identity, architecture, limits), why there is none when
//! there is none, and the vendor state of an opened device.

use std::ffi::{c_char, c_int};

use crate::error::{Error, Result};
use crate::gpu::Opened;
use crate::hip::result;
use crate::hip::sys::code;
use crate::rules::DeviceLimits;
use crate::types::{BackendKind, DeviceInfo};

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
        // LDS a block may use.
        max_shared_bytes: u32::try_from(p.sharedMemPerBlock).unwrap_or(u32::MAX),
        // AMD GPUs dispatch a grid as a count of work-items per dimension, a 32-bit number: HIP refuses a
        // launch whose grid times block exceeds it in any dimension.
        max_threads_per_dim: u64::from(u32::MAX),
        // HIP has no programmatic dependent launch.
        programmatic_launch: false,
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
pub(crate) fn open(ordinal: usize) -> Result<Opened<super::HipDriver>> {
    let count = device_count("hip.open")?;
    let raw = match hip_ordinal(ordinal) {
        Some(raw) if ordinal < count => raw,
        _ => return Err(Error::NoSuchDevice { backend: BackendKind::Hip, ordinal, count }),
    };
    let version = result::runtime::version("hip.open")?;
    let described = describe(ordinal, version)?;
    Ok(Opened { info: described.info, limits: described.limits, state: HipOrdinal(raw) })
}

/// The HIP backend's per-device state: the ordinal as HIP takes it. HIP has no contexts to retain: the
/// runtime API acts on the device current on the calling thread (`hipSetDevice`: "Set default device to
/// be used for subsequent hip API calls from this thread"), so every operation makes this device current
/// first (the shared layer caches which one it made current, per thread).
///
/// # Thread safety
/// `Send + Sync`: a plain integer, valid on every thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HipOrdinal(pub(crate) c_int);

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
