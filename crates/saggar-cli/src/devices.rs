//! `saggar devices`: every backend saggar knows, in `auto` order, with its devices or the reason it has
//! none. A missing backend is information, not an error: the command succeeds either way.

use saggar_device::{BackendKind, probe_all};
use serde::Serialize;

use crate::cli::DevicesArgs;
use crate::error::Result;
use crate::output::{Table, emit, format_bytes};

/// One device, as JSON.
#[derive(Debug, Serialize)]
struct DeviceEntry {
    ordinal: usize,
    name: String,
    arch: String,
    memory_bytes: u64,
    driver: String,
}

/// One backend, as JSON.
#[derive(Debug, Serialize)]
struct BackendEntry {
    backend: String,
    available: bool,
    /// Why the backend has no device (absent when it has some).
    reason: Option<String>,
    devices: Vec<DeviceEntry>,
}

/// `saggar devices --json`.
#[derive(Debug, Serialize)]
struct DevicesOutput {
    /// The backend `--backend auto` picks.
    auto: String,
    backends: Vec<BackendEntry>,
}

/// Runs `saggar devices`.
pub fn run(args: &DevicesArgs) -> Result<()> {
    let backends: Vec<BackendEntry> = probe_all()
        .into_iter()
        .map(|report| match report.devices {
            Ok(devices) => BackendEntry {
                backend: report.kind.name().to_string(),
                available: true,
                reason: None,
                devices: devices
                    .into_iter()
                    .map(|d| DeviceEntry {
                        ordinal: d.ordinal,
                        name: d.name,
                        arch: d.arch,
                        memory_bytes: d.total_memory,
                        driver: d.driver_version,
                    })
                    .collect(),
            },
            Err(e) => BackendEntry {
                backend: report.kind.name().to_string(),
                available: false,
                reason: Some(crate::error::one_line(&match e {
                    saggar_device::Error::BackendUnavailable { reason, .. } => reason,
                    other => other.to_string(),
                })),
                devices: Vec::new(),
            },
        })
        .collect();
    let auto = backends.iter().find(|b| b.available).map_or(BackendKind::Host.name(), |b| b.backend.as_str());
    let output = DevicesOutput { auto: auto.to_string(), backends };
    emit(args.json.as_deref(), &output, || table(&output))
}

fn table(output: &DevicesOutput) -> String {
    let mut t = Table::with_header(&["BACKEND", "DEVICE", "NAME", "ARCH", "MEMORY", "DRIVER"]);
    let mut missing = String::new();
    for backend in &output.backends {
        match &backend.reason {
            Some(reason) => missing.push_str(&format!("{}: unavailable: {reason}\n", backend.backend)),
            None => {
                for d in &backend.devices {
                    t.row(vec![
                        backend.backend.clone(),
                        d.ordinal.to_string(),
                        d.name.clone(),
                        d.arch.clone(),
                        format_bytes(d.memory_bytes),
                        d.driver.clone(),
                    ]);
                }
            }
        }
    }
    format!("{}{missing}--backend auto uses: {}\n", t.render(), output.auto)
}
