//! Devices this process has given up on. A GPU device marked lost ([`lose_device`]) fails every later
//! operation with [`Error::DeviceLost`] at its entry, before any vendor call, so the layers above see
//! one typed error and route around the device (a session group does). Fault drills and tests mark a
//! device lost to rehearse what a fallen-off-the-bus GPU or an uncorrectable ECC error does; a real
//! sticky fault reports itself through the vendor's own errors (`Error::is_device_lost`).
//!
//! The mark is per process and per GPU backend device. Host devices are independent simulated
//! devices per instance, so they take their injected fault from `HostConfig::lose_after_launches`.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::types::BackendKind;

/// Whether any device was marked: the check of every operation is one relaxed load until then.
static ANY: AtomicBool = AtomicBool::new(false);
static LOST: Mutex<Vec<(BackendKind, usize, String)>> = Mutex::new(Vec::new());

/// Marks device `ordinal` of `backend` lost for the rest of this process: every later operation on
/// it fails with [`Error::DeviceLost`] carrying `reason`. There is no way back, as with a real lost
/// GPU; a new process starts with every device usable.
pub fn lose_device(backend: BackendKind, ordinal: usize, reason: impl Into<String>) {
    let mut lost = LOST.lock();
    if !lost.iter().any(|(b, o, _)| *b == backend && *o == ordinal) {
        lost.push((backend, ordinal, reason.into()));
    }
    ANY.store(true, Ordering::Release);
}

/// Fails with [`Error::DeviceLost`] if the device was marked lost.
#[inline]
#[cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(dead_code))]
pub(crate) fn check_alive(backend: BackendKind, ordinal: usize) -> Result<()> {
    if !ANY.load(Ordering::Acquire) {
        return Ok(());
    }
    match LOST.lock().iter().find(|(b, o, _)| *b == backend && *o == ordinal) {
        Some((_, _, reason)) => Err(Error::DeviceLost { backend, ordinal, reason: reason.clone() }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_device_fails_its_checks_and_only_its_own() {
        // Ordinals no machine has, so no other test in this process meets the mark.
        assert!(check_alive(BackendKind::Cuda, 77).is_ok());
        lose_device(BackendKind::Cuda, 77, "fault drill");
        lose_device(BackendKind::Cuda, 77, "again");
        let err = check_alive(BackendKind::Cuda, 77).unwrap_err();
        assert!(err.is_device_lost(), "{err}");
        assert!(err.to_string().contains("cuda device 77 is lost: fault drill"), "{err}");
        assert!(check_alive(BackendKind::Cuda, 78).is_ok());
        assert!(check_alive(BackendKind::Hip, 77).is_ok());
    }
}
