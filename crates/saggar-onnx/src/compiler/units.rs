//! Translation units of a model's generated source: the kernels are split into a few units, each
//! the shared prelude plus a share of the kernel definitions, compiled concurrently (NVRTC and
//! hipRTC compile one program per call on one thread, so one large source is compiled serially).
//! The shares are balanced by the definitions' lengths, largest first, each to the unit with the
//! least so far, and there are at least as many units as heavy definitions (a transformer's
//! tensor-core attention kernels, one per block size, and its fused LayerNorms), so that no unit
//! holds two of the definitions NVRTC takes longest over. The split depends only on the kernel
//! list, so every bucket of a model gets the same units; each unit becomes its own code object and
//! module, its kernels in source order.
//!
//! Concurrent NVRTC compiles scale as if about a quarter of each ran serialised: five units taking
//! 5.4 s one after another (NVRTC 12.9, one core of a build machine) took 2.2 s together on an H200
//! host's 16 cores (CUDA 13), eight taking 4.2 s took 1.5 s. So the cold start falls with the total
//! work as much as with the balance. NVRTC 13 also keeps cubins in the driver's
//! compute cache (`~/.nv/ComputeCache`; `CUDA_CACHE_DISABLE=1` turns it off), so only a machine's
//! first compile of a unit is cold.

use saggar_device::{CodeObject, Device, KernelSignature, KernelSource};

/// Kernels per unit below which another unit is not worth its fixed cost (the prelude, a
/// compiler invocation).
pub(crate) const KERNELS_PER_UNIT: usize = 4;
/// Most units of one source.
pub(crate) const MAX_UNITS: usize = 8;
/// Definitions at least this long get a unit each where [`MAX_UNITS`] allows: the tensor-core
/// attention kernels (11 to 14 KiB of text, heavily unrolled) and the fused LayerNorms and GELU
/// chains (5 to 7 KiB), which NVRTC takes longest over (0.4 to 0.6 s each for sm_90 on one core;
/// a fused elementwise kernel of 2 KiB takes 0.1 s).
pub(crate) const HEAVY_DEFINITION_BYTES: usize = 4 * 1024;

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
    let length = |k: usize| definitions.get(k).map_or(0, String::len);
    let heavy = (0..kernels.len()).filter(|&k| length(k) >= HEAVY_DEFINITION_BYTES).count();
    let units = unit_count(kernels.len()).max(heavy.min(MAX_UNITS));
    // Largest first (ties in source order), each to the lightest unit (ties to the first).
    let mut order: Vec<(usize, usize)> = (0..kernels.len()).map(|k| (length(k), k)).collect();
    order.sort_by_key(|&(len, _)| std::cmp::Reverse(len));
    let mut load = vec![0usize; units];
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); units];
    for (len, k) in order {
        let lightest = (0..units).min_by_key(|&u| load[u]).unwrap_or(0);
        load[lightest] += len;
        members[lightest].push(k);
    }
    let mut out = Vec::with_capacity(units);
    for mut share in members.into_iter().filter(|m| !m.is_empty()) {
        share.sort_unstable();
        let mut code =
            String::with_capacity(prelude.len() + share.iter().map(|&k| definitions[k].len() + 1).sum::<usize>());
        code.push_str(prelude);
        for &k in &share {
            code.push('\n');
            code.push_str(&definitions[k]);
        }
        let sigs = share.iter().map(|&k| kernels[k].clone()).collect();
        out.push(KernelSource::new(format!("{name}.{}.cu", out.len()), code, sigs));
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
    fn units_cover_every_kernel_once_with_the_prelude() {
        for n in [0, 1, 4, 5, 13, 40] {
            let (defs, sigs) = kernels(n);
            let units = split("m", "// prelude\n", &defs, &sigs);
            assert_eq!(units.len(), unit_count(n), "{n} kernels");
            assert!(units.len() <= MAX_UNITS);
            let mut names: Vec<String> = units.iter().flat_map(|u| u.kernels.iter().map(|k| k.name.clone())).collect();
            names.sort_by_key(|k| k[1..].parse::<usize>().unwrap());
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

    /// Five heavy definitions (a transformer's attention kernels, one per block size) among small
    /// ones land in five different units, each unit's kernels in source order; with fifteen kernels
    /// (four units by count) there are five units.
    #[test]
    fn the_largest_definitions_go_to_different_units() {
        for (n, units_expected, heavy_per_unit) in [(24, 6, &[1, 1, 1, 1, 1, 0][..]), (15, 5, &[1, 1, 1, 1, 1])] {
            let (mut defs, sigs) = kernels(n);
            for (k, def) in defs.iter_mut().enumerate().take(10).skip(5) {
                *def = format!("void k{k}() {{}}\n{}", "// body\n".repeat(HEAVY_DEFINITION_BYTES / 8));
            }
            let units = split("m", "", &defs, &sigs);
            assert_eq!(units.len(), units_expected, "{n} kernels");
            let heavy =
                |u: &KernelSource| u.kernels.iter().filter(|k| (5..10).any(|i| k.name == format!("k{i}"))).count();
            assert_eq!(units.iter().map(heavy).collect::<Vec<_>>(), heavy_per_unit, "{n} kernels");
            for u in &units {
                let at: Vec<usize> = u.kernels.iter().map(|k| k.name[1..].parse().unwrap()).collect();
                assert!(at.is_sorted(), "{at:?}");
            }
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
