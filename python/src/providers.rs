//! Execution providers: ONNX Runtime's names mapped onto saggar's backends, and the choice among
//! those a session asks for.
//!
//! `CUDAExecutionProvider` is the cuda backend; `ROCMExecutionProvider` and
//! `MIGraphXExecutionProvider` the hip backend; `CPUExecutionProvider` the host backend. saggar's
//! own names (`cuda`, `hip`, `host`) are accepted too. As in ONNX Runtime, the list is a
//! preference: a provider with no device here is skipped with a warning, and the CPU provider is
//! always the last resort. Without a list every provider with a device is tried, GPUs first.

use saggar_device::BackendKind;

/// ONNX Runtime's name of the CUDA provider.
pub(crate) const CUDA: &str = "CUDAExecutionProvider";
/// ONNX Runtime's name of the ROCm provider.
pub(crate) const ROCM: &str = "ROCMExecutionProvider";
/// ONNX Runtime's name of the MIGraphX provider.
pub(crate) const MIGRAPHX: &str = "MIGraphXExecutionProvider";
/// ONNX Runtime's name of the CPU provider.
pub(crate) const CPU: &str = "CPUExecutionProvider";

/// Every provider name saggar maps, as `get_all_providers()` lists them.
pub(crate) const ALL: [&str; 4] = [CUDA, ROCM, MIGRAPHX, CPU];

/// ONNX Runtime providers saggar has no backend for: accepted in a list and skipped with a warning,
/// as ONNX Runtime skips providers its build lacks.
const ABSENT: &[&str] = &[
    "TensorrtExecutionProvider",
    "NvTensorRTRTXExecutionProvider",
    "OpenVINOExecutionProvider",
    "DmlExecutionProvider",
    "CoreMLExecutionProvider",
    "DnnlExecutionProvider",
    "AzureExecutionProvider",
    "QNNExecutionProvider",
    "XnnpackExecutionProvider",
    "NnapiExecutionProvider",
    "ACLExecutionProvider",
    "ArmNNExecutionProvider",
    "WebGpuExecutionProvider",
    "VitisAIExecutionProvider",
    "CANNExecutionProvider",
    "JsExecutionProvider",
    "SNPEExecutionProvider",
    "RknpuExecutionProvider",
];

/// A provider saggar runs: its backend and the ONNX Runtime name `get_providers()` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Provider {
    pub(crate) kind: BackendKind,
    pub(crate) name: &'static str,
}

impl Provider {
    /// The CPU provider: the host backend.
    pub(crate) const HOST: Provider = Provider { kind: BackendKind::Host, name: CPU };
}

/// A provider to try, on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub(crate) provider: Provider,
    pub(crate) device_id: usize,
}

/// What a name in a `providers` list is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parsed {
    Runs(Provider),
    Absent(&'static str),
}

fn parse(name: &str) -> Result<Parsed, String> {
    let provider = |kind, name| Ok(Parsed::Runs(Provider { kind, name }));
    match name {
        CUDA | "cuda" => provider(BackendKind::Cuda, CUDA),
        ROCM | "hip" | "rocm" => provider(BackendKind::Hip, ROCM),
        MIGRAPHX => provider(BackendKind::Hip, MIGRAPHX),
        CPU | "host" | "cpu" => provider(BackendKind::Host, CPU),
        other => match ABSENT.iter().find(|a| **a == other) {
            Some(absent) => Ok(Parsed::Absent(absent)),
            None => Err(format!(
                "unknown execution provider `{other}`: saggar runs {} (or its own names cuda, hip, host)",
                ALL.join(", ")
            )),
        },
    }
}

/// The providers to try, in order, and the warnings to show: `requested` names with the device id
/// each asks for (`None`: `default_device`); without a list, every GPU provider, then the CPU.
/// `devices(kind)` says how many devices a backend has here, or why it has none. The CPU provider
/// ends every list.
pub(crate) fn candidates(
    requested: Option<&[(String, Option<usize>)]>,
    default_device: usize,
    devices: &dyn Fn(BackendKind) -> Result<usize, String>,
) -> Result<(Vec<Candidate>, Vec<String>), String> {
    let mut warnings = Vec::new();
    let mut out: Vec<Candidate> = Vec::new();
    let wanted: Vec<(Provider, Option<usize>, bool)> = match requested {
        None => vec![
            (Provider { kind: BackendKind::Cuda, name: CUDA }, None, false),
            (Provider { kind: BackendKind::Hip, name: ROCM }, None, false),
        ],
        Some(list) => {
            let mut wanted = Vec::new();
            for (name, device) in list {
                match parse(name)? {
                    Parsed::Runs(p) => wanted.push((p, *device, true)),
                    Parsed::Absent(name) => {
                        warnings.push(format!("saggar has no {name}; it is skipped (saggar runs {})", ALL.join(", ")))
                    }
                }
            }
            wanted
        }
    };
    for (provider, device, explicit) in wanted {
        let device_id = if provider.kind == BackendKind::Host { 0 } else { device.unwrap_or(default_device) };
        let available = match devices(provider.kind) {
            Ok(n) if device_id < n => Ok(()),
            Ok(n) => Err(format!("device {device_id} does not exist ({n} found)")),
            Err(reason) => Err(reason),
        };
        match available {
            Ok(()) => {
                if !out.iter().any(|c| c.provider.kind == provider.kind && c.device_id == device_id) {
                    out.push(Candidate { provider, device_id });
                }
            }
            Err(reason) if explicit => {
                warnings.push(format!("{} is not available here ({reason}); the next provider is used", provider.name))
            }
            Err(_) => {}
        }
    }
    if !out.iter().any(|c| c.provider.kind == BackendKind::Host) {
        out.push(Candidate { provider: Provider::HOST, device_id: 0 });
    }
    Ok((out, warnings))
}

/// The ONNX Runtime names of the providers with a device here, GPUs first, `CPUExecutionProvider`
/// last (`get_available_providers()`).
pub(crate) fn available(devices: &dyn Fn(BackendKind) -> Result<usize, String>) -> Vec<&'static str> {
    let mut names = Vec::new();
    if devices(BackendKind::Cuda).is_ok_and(|n| n > 0) {
        names.push(CUDA);
    }
    if devices(BackendKind::Hip).is_ok_and(|n| n > 0) {
        names.extend([ROCM, MIGRAPHX]);
    }
    names.push(CPU);
    names
}

/// How many devices backend `kind` has in this process, or why none (not built in, no driver).
pub(crate) fn device_count(kind: BackendKind) -> Result<usize, String> {
    match saggar_device::enumerate(kind) {
        Ok(devices) if devices.is_empty() => Err("no devices found".into()),
        Ok(devices) => Ok(devices.len()),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_only(kind: BackendKind) -> Result<usize, String> {
        match kind {
            BackendKind::Host => Ok(1),
            _ => Err("no driver".into()),
        }
    }

    fn one_gpu(kind: BackendKind) -> Result<usize, String> {
        match kind {
            BackendKind::Hip => Err("no driver".into()),
            _ => Ok(1),
        }
    }

    fn names(list: &[&str]) -> Vec<(String, Option<usize>)> {
        list.iter().map(|n| (n.to_string(), None)).collect()
    }

    #[test]
    fn onnxruntime_names_map_to_backends() {
        let (c, w) = candidates(Some(&names(&[CUDA])), 0, &one_gpu).unwrap();
        assert_eq!(c[0].provider, Provider { kind: BackendKind::Cuda, name: CUDA });
        assert_eq!(c.last().unwrap().provider, Provider::HOST, "the CPU provider ends every list");
        assert!(w.is_empty());
        let (c, _) = candidates(Some(&names(&["MIGraphXExecutionProvider"])), 0, &|_| Ok(1)).unwrap();
        assert_eq!(c[0].provider, Provider { kind: BackendKind::Hip, name: MIGRAPHX });
        let (c, _) = candidates(Some(&names(&["host"])), 0, &host_only).unwrap();
        assert_eq!(c, [Candidate { provider: Provider::HOST, device_id: 0 }]);
    }

    #[test]
    fn an_unavailable_provider_is_skipped_with_a_warning() {
        let (c, w) = candidates(Some(&names(&[CUDA, CPU])), 0, &host_only).unwrap();
        assert_eq!(c, [Candidate { provider: Provider::HOST, device_id: 0 }]);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("CUDAExecutionProvider is not available here (no driver)"), "{w:?}");
        let (_, w) = candidates(Some(&names(&["TensorrtExecutionProvider", CPU])), 0, &host_only).unwrap();
        assert!(w[0].contains("saggar has no TensorrtExecutionProvider"), "{w:?}");
        let (c, w) = candidates(Some(&[(CUDA.to_string(), Some(3))]), 0, &one_gpu).unwrap();
        assert_eq!(c.len(), 1);
        assert!(w[0].contains("device 3 does not exist (1 found)"), "{w:?}");
    }

    #[test]
    fn unknown_names_are_errors_and_no_list_means_every_gpu_then_cpu() {
        let err = candidates(Some(&names(&["CUDAProvider"])), 0, &one_gpu).unwrap_err();
        assert!(err.contains("unknown execution provider `CUDAProvider`"), "{err}");
        let (c, w) = candidates(None, 2, &|_| Ok(4)).unwrap();
        let kinds: Vec<_> = c.iter().map(|c| (c.provider.kind, c.device_id)).collect();
        assert_eq!(kinds, [(BackendKind::Cuda, 2), (BackendKind::Hip, 2), (BackendKind::Host, 0)]);
        assert!(w.is_empty(), "providers nobody asked for are skipped silently");
        assert_eq!(available(&host_only), [CPU]);
        assert_eq!(available(&one_gpu), [CUDA, CPU]);
    }
}
