//! The process-wide registry of host kernels: each kernel name is registered with the host backend
//! once ([`saggar_device::host::register_kernel`]), whichever lowering meets it first.

use std::collections::HashSet;
use std::sync::OnceLock;

use parking_lot::Mutex;
use saggar_device::host::{KernelContext, register_kernel};
use saggar_device::{KernelArg, KernelSignature, LaunchConfig};

/// Registers `func` under `signature` unless this process already registered that name (names
/// hash everything a kernel computes with, so one name is one computation).
pub(crate) fn register_once<F>(signature: KernelSignature, func: F) -> Result<(), saggar_device::Error>
where
    F: Fn(&mut KernelContext<'_>, &LaunchConfig, &[KernelArg]) -> saggar_device::Result<()> + Send + Sync + 'static,
{
    let mut done = registered().lock();
    if !done.contains(&signature.name) {
        let name = signature.name.clone();
        register_kernel(signature, func)?;
        done.insert(name);
    }
    Ok(())
}

fn registered() -> &'static Mutex<HashSet<String>> {
    static DONE: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    DONE.get_or_init(|| Mutex::new(HashSet::new()))
}
