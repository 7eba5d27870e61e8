//! Translation units of a model's generated source: the kernels are split into a few units, each
//! the shared prelude plus a contiguous run of the kernel definitions, compiled concurrently
//! (NVRTC and hipRTC compile one program per call on one thread, so one large source is compiled
//! serially). Runs are balanced by the definitions' text, so a long kernel (a tiled attention
//! kernel takes a second to compile on its own) gets a unit to itself while short ones share one.
//! The split depends only on the kernel list, so every bucket of a model gets the same units; each
//! unit becomes its own code object and module.

use saggar_device::{CodeObject, Device, KernelSignature, KernelSource};

/// Most units of one source.
pub(crate) const MAX_UNITS: usize = 8;
/// Definition text a unit takes before another unit is worth its fixed cost (the prelude, a
/// compiler invocation).
pub(crate) const MIN_UNIT_BYTES: usize = 4096;

/// The units of a source made of `prelude` and one definition per kernel (same order as
/// `kernels`), named `name.N.cu`: at most [`MAX_UNITS`], each a contiguous run of definitions of
/// at most the larger of the longest definition, an even share of the whole text and
/// [`MIN_UNIT_BYTES`] (the last unit takes what is left past [`MAX_UNITS`]).
pub(crate) fn split(
    name: &str,
    prelude: &str,
    definitions: &[String],
    kernels: &[KernelSignature],
) -> Vec<KernelSource> {
    let total: usize = definitions.iter().map(String::len).sum();
    let longest = definitions.iter().map(String::len).max().unwrap_or(0);
    let target = longest.max(total.div_ceil(MAX_UNITS)).max(MIN_UNIT_BYTES);
    // The first definition of each unit.
    let mut starts = vec![0];
    let mut size = 0;
    for (i, d) in definitions.iter().enumerate() {
        if size > 0 && size + d.len() > target && starts.len() < MAX_UNITS {
            starts.push(i);
            size = 0;
        }
        size += d.len();
    }
    let mut out = Vec::with_capacity(starts.len());
    for (u, &start) in starts.iter().enumerate() {
        let end = starts.get(u + 1).copied().unwrap_or(definitions.len());
        let defs = &definitions[start..end];
        let mut code = String::with_capacity(prelude.len() + defs.iter().map(String::len).sum::<usize>() + defs.len());
        code.push_str(prelude);
        for d in defs {
            code.push('\n');
            code.push_str(d);
        }
        out.push(KernelSource::new(format!("{name}.{u}.cu"), code, kernels[start..end].to_vec()));
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

    fn kernels(lengths: &[usize]) -> (Vec<String>, Vec<KernelSignature>) {
        lengths
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let head = format!("void k{i}() {{}}\n");
                let pad = len.saturating_sub(head.len());
                (head + &" ".repeat(pad), KernelSignature::new(format!("k{i}"), &[ParamKind::Ptr]))
            })
            .unzip()
    }

    #[test]
    fn units_cover_every_kernel_once_in_order_with_the_prelude() {
        for n in [0, 1, 4, 5, 13, 40, 200] {
            for len in [16, 3000, 9000] {
                let (defs, sigs) = kernels(&vec![len; n]);
                let units = split("m", "// prelude\n", &defs, &sigs);
                assert!(!units.is_empty() && units.len() <= MAX_UNITS, "{n} kernels of {len} bytes: {}", units.len());
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
    }

    #[test]
    fn long_definitions_get_units_of_their_own_and_short_ones_share() {
        // The BERT test model's definitions (bytes): three tiled attention kernels among short ones.
        let lengths = [3526, 6484, 1100, 787, 2480, 2672, 6391, 6391, 6391, 4432, 1676];
        let (defs, sigs) = kernels(&lengths);
        let units = split("m", "", &defs, &sigs);
        let members: Vec<Vec<String>> =
            units.iter().map(|u| u.kernels.iter().map(|k| k.name.clone()).collect()).collect();
        let expect: Vec<Vec<&str>> = vec![
            vec!["k0"],
            vec!["k1"],
            vec!["k2", "k3", "k4"],
            vec!["k5"],
            vec!["k6"],
            vec!["k7"],
            vec!["k8"],
            vec!["k9", "k10"],
        ];
        assert_eq!(members, expect);
        // Short definitions only: one unit until their text is worth a second.
        let (defs, sigs) = kernels(&[500; 8]);
        assert_eq!(split("m", "", &defs, &sigs).len(), 1);
        let (defs, sigs) = kernels(&[500; 9]);
        assert_eq!(split("m", "", &defs, &sigs).len(), 2);
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
