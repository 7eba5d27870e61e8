//! The HIP backend on a machine without an AMD GPU (CI): enumeration says clearly that there is no HIP
//! device, `auto` falls back to another backend, and no entry point panics. On a machine with an AMD GPU
//! each test says so and checks the device path instead.
#![cfg(feature = "hip")]

use saggar_device::hip::HipBackend;
use saggar_device::{Backend, BackendChoice, BackendKind, Error};

fn hip_device_present() -> bool {
    HipBackend::enumerate().is_ok_and(|d| !d.is_empty())
}

#[test]
fn enumerate_says_no_hip_device_found() {
    let result = std::panic::catch_unwind(HipBackend::enumerate).expect("enumerate panicked");
    if hip_device_present() {
        eprintln!("NOTE hip: {} HIP device(s) present; the no-device path is not exercised", result.unwrap().len());
        return;
    }
    let err = result.unwrap_err();
    match &err {
        Error::BackendUnavailable { backend: BackendKind::Hip, reason } => {
            assert!(reason.starts_with("no HIP device found: "), "unclear reason: {reason}");
        }
        other => panic!("expected BackendUnavailable, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.starts_with("hip backend unavailable: no HIP device found"), "{text}");
    eprintln!("hip: {text}");
}

#[test]
fn open_any_ordinal_is_a_typed_error() {
    for ordinal in [0, 1, 7, usize::MAX] {
        let result = std::panic::catch_unwind(|| HipBackend::open(ordinal)).expect("open panicked");
        if hip_device_present() {
            let count = HipBackend::enumerate().unwrap().len();
            if ordinal >= count {
                assert!(matches!(result.unwrap_err(), Error::NoSuchDevice { backend: BackendKind::Hip, .. }));
            }
            continue;
        }
        let err = result.unwrap_err();
        assert!(err.is_unavailable(), "open({ordinal}) gave {err:?}");
        assert!(matches!(err, Error::BackendUnavailable { .. } | Error::NoSuchDevice { .. }), "{err:?}");
    }
}

#[test]
fn auto_falls_back_to_another_backend() {
    let chosen = std::panic::catch_unwind(|| saggar_device::resolve(BackendChoice::Auto)).expect("resolve panicked");
    let chosen = chosen.expect("auto always resolves (the host backend is always there)");
    if hip_device_present() {
        assert!(chosen == BackendKind::Hip || chosen == BackendKind::Cuda, "auto chose {chosen}");
        return;
    }
    assert_ne!(chosen, BackendKind::Hip, "auto chose HIP without a HIP device");
    let explicit = saggar_device::resolve(BackendChoice::Exactly(BackendKind::Hip)).unwrap_err();
    assert!(explicit.is_unavailable(), "{explicit:?}");
    assert!(explicit.to_string().contains("no HIP device found"), "{explicit}");
}

#[test]
fn probe_reports_hip_with_its_reason() {
    let reports = std::panic::catch_unwind(saggar_device::probe_all).expect("probe_all panicked");
    let hip = reports.iter().find(|r| r.kind == BackendKind::Hip).expect("a HIP report");
    if hip_device_present() {
        assert!(hip.devices.is_ok());
        return;
    }
    let reason = hip.devices.as_ref().unwrap_err().to_string();
    assert!(reason.contains("no HIP device found"), "{reason}");
    assert!(reports.iter().any(|r| r.kind == BackendKind::Host && r.devices.is_ok()));
}

#[test]
fn runtime_version_and_hiprtc_work_without_a_device() {
    let version = saggar_device::hip::runtime_version().expect("hipRuntimeGetVersion needs no device");
    eprintln!("hip: HIP runtime {version}");
    match saggar_device::hip::hiprtc_library() {
        Ok(library) => eprintln!("hip: hipRTC {:?} from {library}", saggar_device::hip::hiprtc_version().unwrap()),
        Err(e) => {
            assert!(matches!(e, Error::BackendUnavailable { backend: BackendKind::Hip, .. }), "{e:?}");
            assert!(e.to_string().contains("hipRTC not found"), "{e}");
        }
    }
}

#[test]
fn nothing_is_left_behind() {
    let _ = HipBackend::enumerate();
    let _ = HipBackend::open(0);
    assert!(saggar_device::hip::take_orphaned_errors().is_empty());
}
