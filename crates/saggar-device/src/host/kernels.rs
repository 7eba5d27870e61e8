//! Host kernels: functions registered by name that play the part of GPU kernels.
//!
//! A host code object is a plan that names kernels; loading it resolves the names in the process-wide
//! registry, so modules, launches and graphs behave as on a GPU. The built-in kernels
//! ([`crate::builtin`]) are registered on first use; other crates add theirs with [`register_kernel`].

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use crate::builtin;
use crate::code::{CodeFormat, CodeObject, KernelSource};
use crate::error::{Error, Result};
use crate::host::memory::AddressSpace;
use crate::types::{DevicePtr, KernelArg, KernelSignature, LaunchConfig};

/// What a host kernel sees of the device: checked access to its simulated memory.
#[derive(Debug)]
pub struct KernelContext<'a> {
    pub(crate) space: &'a mut AddressSpace,
    pub(crate) kernel: &'a str,
}

impl KernelContext<'_> {
    /// The device bytes `ptr..ptr + len`.
    pub fn bytes(&self, ptr: DevicePtr, len: usize) -> Result<&[u8]> {
        self.space.region("kernel read", ptr, len)
    }

    /// The device bytes `ptr..ptr + len`, for writing.
    pub fn bytes_mut(&mut self, ptr: DevicePtr, len: usize) -> Result<&mut [u8]> {
        self.space.region_mut("kernel write", ptr, len)
    }

    /// Copies `len` bytes between device ranges (which may overlap).
    pub fn copy(&mut self, src: DevicePtr, dst: DevicePtr, len: usize) -> Result<()> {
        self.space.copy("kernel copy", src, dst, len)
    }

    /// Reads `n` little-endian `f32`s.
    pub fn read_f32s(&self, ptr: DevicePtr, n: usize) -> Result<Vec<f32>> {
        let len = n.checked_mul(4).ok_or_else(|| self.fault("f32 count overflows"))?;
        Ok(self.bytes(ptr, len)?.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
    }

    /// Writes `values` as little-endian `f32`s.
    pub fn write_f32s(&mut self, ptr: DevicePtr, values: &[f32]) -> Result<()> {
        let dst = self.bytes_mut(ptr, values.len() * 4)?;
        for (chunk, v) in dst.chunks_exact_mut(4).zip(values) {
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }

    /// A [`Error::KernelFault`] for this kernel.
    pub fn fault(&self, message: impl Into<String>) -> Error {
        Error::KernelFault { kernel: self.kernel.to_string(), message: message.into() }
    }
}

/// The function behind a host kernel. Arguments have already been checked against the signature.
pub type HostKernelFn = dyn Fn(&mut KernelContext<'_>, &LaunchConfig, &[KernelArg]) -> Result<()> + Send + Sync;

#[derive(Clone)]
pub(crate) struct RegisteredKernel {
    pub(crate) signature: Arc<KernelSignature>,
    pub(crate) func: Arc<HostKernelFn>,
}

fn registry() -> &'static RwLock<HashMap<String, RegisteredKernel>> {
    static REGISTRY: OnceLock<RwLock<HashMap<String, RegisteredKernel>>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut map = HashMap::new();
        for (signature, func) in builtins() {
            map.insert(signature.name.clone(), RegisteredKernel { signature: Arc::new(signature), func });
        }
        RwLock::new(map)
    })
}

/// Registers a host kernel under `signature.name`. Registering the same name again with the same
/// signature replaces the function (so tests can re-register); with a different signature it fails.
pub fn register_kernel<F>(signature: KernelSignature, func: F) -> Result<()>
where
    F: Fn(&mut KernelContext<'_>, &LaunchConfig, &[KernelArg]) -> Result<()> + Send + Sync + 'static,
{
    let mut map = registry().write();
    if let Some(existing) = map.get(&signature.name)
        && *existing.signature != signature
    {
        return Err(Error::KernelAlreadyRegistered { name: signature.name });
    }
    map.insert(signature.name.clone(), RegisteredKernel { signature: Arc::new(signature), func: Arc::new(func) });
    Ok(())
}

pub(crate) fn lookup(name: &str) -> Option<RegisteredKernel> {
    registry().read().get(name).cloned()
}

const PLAN_HEADER: &str = "saggar host plan v1";

/// Host "compilation": every kernel the source declares must be registered with the same signature.
pub(crate) fn compile(source: &KernelSource) -> Result<CodeObject> {
    let mut plan = String::from(PLAN_HEADER);
    for sig in &source.kernels {
        match lookup(&sig.name) {
            Some(k) if *k.signature == *sig => {}
            Some(k) => {
                return Err(Error::Compile {
                    name: source.name.clone(),
                    log: format!(
                        "host kernel `{}` is registered as {:?} but the source declares {:?}",
                        sig.name, k.signature.params, sig.params
                    ),
                });
            }
            None => {
                return Err(Error::Compile {
                    name: source.name.clone(),
                    log: format!(
                        "no host kernel named `{}` is registered; register it with saggar_device::host::register_kernel",
                        sig.name
                    ),
                });
            }
        }
        plan.push('\n');
        plan.push_str(&sig.name);
    }
    Ok(CodeObject { format: CodeFormat::HostPlan, image: plan.into_bytes(), kernels: source.kernels.clone() })
}

/// Resolves a host plan into its kernels.
pub(crate) fn load(code: &CodeObject) -> Result<HashMap<String, RegisteredKernel>> {
    if code.format != CodeFormat::HostPlan {
        return Err(Error::CodeObject { reason: format!("the host backend loads host plans, not {:?}", code.format) });
    }
    let text =
        std::str::from_utf8(&code.image).map_err(|_| Error::CodeObject { reason: "host plan is not UTF-8".into() })?;
    let mut lines = text.lines();
    if lines.next() != Some(PLAN_HEADER) {
        return Err(Error::CodeObject { reason: "not a host plan (bad header)".into() });
    }
    let mut kernels = HashMap::new();
    for name in lines {
        let declared = code.signature(name).ok_or_else(|| Error::CodeObject {
            reason: format!("plan names `{name}` but declares no signature for it"),
        })?;
        let registered = lookup(name).ok_or_else(|| Error::CodeObject {
            reason: format!("host kernel `{name}` is not registered in this process"),
        })?;
        if *registered.signature != *declared {
            return Err(Error::CodeObject {
                reason: format!("host kernel `{name}` is registered with a different signature"),
            });
        }
        kernels.insert(name.to_string(), registered);
    }
    Ok(kernels)
}

fn arg_ptr(args: &[KernelArg], i: usize) -> DevicePtr {
    args[i].as_ptr().expect("signature checked")
}

fn arg_u64(args: &[KernelArg], i: usize) -> u64 {
    match args[i] {
        KernelArg::U64(v) => v,
        KernelArg::U32(v) => v as u64,
        _ => unreachable!("signature checked"),
    }
}

fn arg_f32(args: &[KernelArg], i: usize) -> f32 {
    match args[i] {
        KernelArg::F32(v) => v,
        _ => unreachable!("signature checked"),
    }
}

fn checked_len(ctx: &KernelContext<'_>, a: u64, b: u64) -> Result<usize> {
    a.checked_mul(b).and_then(|v| usize::try_from(v).ok()).ok_or_else(|| ctx.fault("size overflows"))
}

fn fill_u32(ctx: &mut KernelContext<'_>, _: &LaunchConfig, args: &[KernelArg]) -> Result<()> {
    let n = arg_u64(args, 1);
    let value = arg_u64(args, 2) as u32;
    let len = checked_len(ctx, n, 4)?;
    let dst = ctx.bytes_mut(arg_ptr(args, 0), len)?;
    for chunk in dst.chunks_exact_mut(4) {
        chunk.copy_from_slice(&value.to_le_bytes());
    }
    Ok(())
}

fn copy_bytes(ctx: &mut KernelContext<'_>, _: &LaunchConfig, args: &[KernelArg]) -> Result<()> {
    let n = usize::try_from(arg_u64(args, 2)).map_err(|_| ctx.fault("n overflows"))?;
    ctx.copy(arg_ptr(args, 1), arg_ptr(args, 0), n)
}

fn copy_rows(ctx: &mut KernelContext<'_>, _: &LaunchConfig, args: &[KernelArg]) -> Result<()> {
    let (dst, src) = (arg_ptr(args, 0), arg_ptr(args, 1));
    let (row_bytes, real_rows, total_rows) = (arg_u64(args, 2), arg_u64(args, 3), arg_u64(args, 4));
    if real_rows == 0 && total_rows > 0 {
        return Err(ctx.fault("cannot pad from zero real rows"));
    }
    let real_rows = real_rows.min(total_rows);
    let real_len = checked_len(ctx, row_bytes, real_rows)?;
    let rows = ctx.bytes(src, real_len)?.to_vec();
    let total_len = checked_len(ctx, row_bytes, total_rows)?;
    let out = ctx.bytes_mut(dst, total_len)?;
    out[..real_len].copy_from_slice(&rows);
    if real_len < total_len {
        let last = &rows[real_len - row_bytes as usize..];
        for chunk in out[real_len..].chunks_exact_mut(row_bytes as usize) {
            chunk.copy_from_slice(last);
        }
    }
    Ok(())
}

fn axpy_f32(ctx: &mut KernelContext<'_>, _: &LaunchConfig, args: &[KernelArg]) -> Result<()> {
    let n = usize::try_from(arg_u64(args, 0)).map_err(|_| ctx.fault("n overflows"))?;
    let a = arg_f32(args, 1);
    let x = ctx.read_f32s(arg_ptr(args, 2), n)?;
    let mut y = ctx.read_f32s(arg_ptr(args, 3), n)?;
    for (yi, xi) in y.iter_mut().zip(&x) {
        *yi += a * xi;
    }
    ctx.write_f32s(arg_ptr(args, 3), &y)
}

fn gemm_bias_act_f32(ctx: &mut KernelContext<'_>, _: &LaunchConfig, args: &[KernelArg]) -> Result<()> {
    let (m, n, k) = (arg_u64(args, 4) as usize, arg_u64(args, 5) as usize, arg_u64(args, 6) as usize);
    let act = arg_u64(args, 7) as u32;
    let a = ctx.read_f32s(arg_ptr(args, 1), checked_len(ctx, m as u64, k as u64)?)?;
    let b = ctx.read_f32s(arg_ptr(args, 2), checked_len(ctx, k as u64, n as u64)?)?;
    let bias_ptr = arg_ptr(args, 3);
    let bias = if bias_ptr == DevicePtr::NULL { vec![0.0; n] } else { ctx.read_f32s(bias_ptr, n)? };
    let mut out = vec![0.0f32; checked_len(ctx, m as u64, n as u64)?];
    for row in 0..m {
        let out_row = &mut out[row * n..(row + 1) * n];
        out_row.copy_from_slice(&bias);
        for t in 0..k {
            let av = a[row * k + t];
            for (o, bv) in out_row.iter_mut().zip(&b[t * n..(t + 1) * n]) {
                *o += av * bv;
            }
        }
        if act == builtin::ACT_RELU {
            out_row.iter_mut().for_each(|v| *v = v.max(0.0));
        }
    }
    ctx.write_f32s(arg_ptr(args, 0), &out)
}

fn builtins() -> Vec<(KernelSignature, Arc<HostKernelFn>)> {
    let funcs: [(&str, Arc<HostKernelFn>); 5] = [
        (builtin::FILL_U32, Arc::new(fill_u32)),
        (builtin::COPY_BYTES, Arc::new(copy_bytes)),
        (builtin::COPY_ROWS, Arc::new(copy_rows)),
        (builtin::AXPY_F32, Arc::new(axpy_f32)),
        (builtin::GEMM_BIAS_ACT_F32, Arc::new(gemm_bias_act_f32)),
    ];
    let sigs = builtin::signatures();
    funcs
        .into_iter()
        .map(|(name, f)| (sigs.iter().find(|s| s.name == name).expect("every builtin has a signature").clone(), f))
        .collect()
}
