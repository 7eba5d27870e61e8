//! Choosing a backend at run time.
//!
//! Code above saggar-device is generic over [`Backend`]. A program that learns its backend at run time
//! (a `--backend` flag) turns the [`BackendKind`] into a type once, with [`visit_backend`], and runs a
//! generic function with it. `auto` tries CUDA, then HIP, then the host backend.

use crate::api::Backend;
use crate::error::{Error, Result};
use crate::host::HostBackend;
use crate::types::{BackendKind, DeviceInfo};

/// A generic computation to run with a backend chosen at run time.
pub trait BackendVisitor {
    /// What the computation returns.
    type Output;
    /// Runs the computation with backend `B`.
    fn visit<B: Backend>(self) -> Self::Output;
}

/// Runs `visitor` with the backend `kind` names, or fails if that backend is not built in.
pub fn visit_backend<V: BackendVisitor>(kind: BackendKind, visitor: V) -> Result<V::Output> {
    match kind {
        BackendKind::Host => Ok(visitor.visit::<HostBackend>()),
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => Ok(visitor.visit::<crate::cuda::CudaBackend>()),
        #[cfg(feature = "hip")]
        BackendKind::Hip => Ok(visitor.visit::<crate::hip::HipBackend>()),
        #[allow(unreachable_patterns)]
        other => Err(not_built(other)),
    }
}

fn not_built(kind: BackendKind) -> Error {
    Error::BackendUnavailable {
        backend: kind,
        reason: format!("saggar was built without the `{kind}` feature; rebuild with `--features {kind}`"),
    }
}

struct Enumerate;

impl BackendVisitor for Enumerate {
    type Output = Result<Vec<DeviceInfo>>;
    fn visit<B: Backend>(self) -> Self::Output {
        B::enumerate()
    }
}

/// The devices of backend `kind`, or why there are none.
pub fn enumerate(kind: BackendKind) -> Result<Vec<DeviceInfo>> {
    visit_backend(kind, Enumerate)?
}

/// What one backend offers on this machine.
#[derive(Debug, Clone)]
pub struct BackendReport {
    /// The backend.
    pub kind: BackendKind,
    /// Its devices, or the reason it has none.
    pub devices: Result<Vec<DeviceInfo>>,
}

/// Probes every backend, in `auto` order.
pub fn probe_all() -> Vec<BackendReport> {
    BackendKind::AUTO_ORDER
        .iter()
        .map(|&kind| BackendReport {
            kind,
            devices: enumerate(kind).and_then(|d| {
                if d.is_empty() {
                    Err(Error::BackendUnavailable { backend: kind, reason: "no devices found".into() })
                } else {
                    Ok(d)
                }
            }),
        })
        .collect()
}

/// A backend request: a specific backend or the first one with a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// CUDA, then HIP, then host.
    #[default]
    Auto,
    /// Exactly this backend.
    Exactly(BackendKind),
}

impl std::str::FromStr for BackendChoice {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        if s == "auto" {
            Ok(BackendChoice::Auto)
        } else {
            s.parse().map(BackendChoice::Exactly).map_err(|e| format!("{e}, or auto"))
        }
    }
}

/// Resolves a choice to a backend that has at least one device. For `Auto` the host backend always
/// qualifies, so this only fails for an explicit backend that is unavailable.
pub fn resolve(choice: BackendChoice) -> Result<BackendKind> {
    match choice {
        BackendChoice::Exactly(kind) => {
            let devices = enumerate(kind)?;
            if devices.is_empty() {
                return Err(Error::BackendUnavailable { backend: kind, reason: "no devices found".into() });
            }
            Ok(kind)
        }
        BackendChoice::Auto => {
            Ok(probe_all().into_iter().find(|r| r.devices.is_ok()).map(|r| r.kind).unwrap_or(BackendKind::Host))
        }
    }
}
