//! Translation units of a model's generated source: the kernels are split into a few units, each
//! the shared prelude plus a contiguous share of the kernel definitions, compiled concurrently
//! (NVRTC and hipRTC compile one program per call on one thread, so one large source is compiled
//! serially). The split depends only on the kernel list, so every bucket of a model gets the same
//! units; each unit becomes its own code object and module.

use saggar_device::{CodeObject, Device, KernelSignature, KernelSource};

/// Kernels per unit below which another unit is not worth its fixed cost (the prelude, a
/// compiler invocation).
pub(crate) const KERNELS_PER_UNIT: usize = 4;
/// Most units of one source.
pub(crate) const MAX_UNITS: usize = 8;

/// How many units `kernels` kernels are split into.
pub(crate) fn unit_count(kernels: usize) -> usize {
    kernels.div_ceil(KERNELS_PER_UNIT).clamp(1, MAX_UNITS)
}

/// The units of a source made of `prelude` and one definition per kernel (same order as
/// `kernels`), named `name.N.cu`.
pub(crate) fn split(
    name: &str,
    prelude: &str,
    definitions: &[String],
    kernels: &[KernelSignature],
) -> Vec<KernelSource> {
    let units = unit_count(kernels.len());
    let per = kernels.len().div_ceil(units).max(1);
    let mut out = Vec::with_capacity(units);
    for (u, (defs, sigs)) in definitions.chunks(per).zip(kernels.chunks(per)).enumerate() {
        let mut code = String::with_capacity(prelude.len() + defs.iter().map(String::len).sum::<usize>() + defs.len());
        code.push_str(prelude);
        for d in defs {
            code.push('\n');
            code.push_str(d);
        }
        out.push(KernelSource::new(format!("{name}.{u}.cu"), code, sigs.to_vec()));
    }
    if out.is_empty() {
        out.push(KernelSource::new(format!("{name}.0.cu"), prelude.to_string(), Vec::new()));
    }
    out
}

/// Compiles `units` on `device`, one thread per unit, returning the code objects in unit order or
/// the first unit's error.
pub(crate) fn compile_all<D: Device>(device: &D, units: &[KernelSource]) -> saggar_device::Result<Vec<CodeObject>> {
    if let [one] = units {
        return Ok(vec![device.compile(one)?]);
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = units.iter().map(|unit| scope.spawn(move || device.compile(unit))).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(saggar_device::Error::Compile {
                        name: "saggar-onnx unit".into(),
                        log: "the compiling thread panicked".into(),
                    })
                })
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use saggar_device::ParamKind;

    use super::*;

    fn kernels(n: usize) -> (Vec<String>, Vec<KernelSignature>) {
        (0..n)
            .map(|i| (format!("void k{i}() {{}}\n"), KernelSignature::new(format!("k{i}"), &[ParamKind::Ptr])))
            .unzip()
    }

    #[test]
    fn units_cover_every_kernel_once_in_order_with_the_prelude() {
        for n in [0, 1, 4, 5, 13, 40] {
            let (defs, sigs) = kernels(n);
            let units = split("m", "// prelude\n", &defs, &sigs);
            assert_eq!(units.len(), unit_count(n), "{n} kernels");
            assert!(units.len() <= MAX_UNITS);
            let names: Vec<String> = units.iter().flat_map(|u| u.kernels.iter().map(|k| k.name.clone())).collect();
            assert_eq!(names, sigs.iter().map(|k| k.name.clone()).collect::<Vec<_>>());
            for u in &units {
                assert!(u.code.starts_with("// prelude\n"));
                for k in &u.kernels {
                    assert!(u.code.contains(&format!("void {}()", k.name)), "a unit defines its kernels");
                }
            }
            assert_eq!(split("m", "// prelude\n", &defs, &sigs), units, "deterministic");
        }
    }

    #[test]
    fn host_units_compile_concurrently_into_one_code_object_each() {
        use saggar_device::Backend as _;
        use saggar_device::host::HostBackend;
        let device = HostBackend::open(0).unwrap();
        let sigs: Vec<KernelSignature> = (0..3).map(|i| KernelSignature::new(format!("u{i}"), &[])).collect();
        let units: Vec<KernelSource> =
            sigs.iter().map(|s| KernelSource::new(format!("{}.plan", s.name), "plan", vec![s.clone()])).collect();
        for s in &sigs {
            saggar_device::host::register_kernel(s.clone(), |_, _, _| Ok(())).unwrap();
        }
        let codes = compile_all(&device, &units).unwrap();
        assert_eq!(codes.len(), 3);
        for (code, s) in codes.iter().zip(&sigs) {
            assert!(code.signature(&s.name).is_some());
        }
    }
}
