//! Single launches of generated kernels of the form `(meta, in, out)` on the CPU, each output
//! checked bit for bit: the kernel-level emulation tests' harness.

use std::collections::HashSet;
use std::fmt::Write as _;

use super::build_and_run;
use crate::ops::gpu::{GpuKernel, PRELUDE, kernel_definition};

/// The launches gathered into one program, and the bytes each must write.
pub(crate) struct SingleLaunches {
    dir: tempfile::TempDir,
    source: String,
    main: String,
    names: HashSet<String>,
    expected: Vec<(String, Vec<u8>)>,
}

impl SingleLaunches {
    pub(crate) fn new() -> SingleLaunches {
        let source = [saggar_device::builtin::PRELUDE, PRELUDE].concat();
        let (main, names, expected) = (String::from("int main() {\n"), HashSet::new(), Vec::new());
        SingleLaunches { dir: tempfile::tempdir().unwrap(), source, main, names, expected }
    }

    /// A launch of `kernel` in `blocks` blocks of `threads` threads on `meta` and the input `x` from
    /// byte `skip` on, which must write `want` (described by `what`).
    pub(crate) fn push(
        &mut self,
        kernel: &dyn GpuKernel,
        meta: &[i64],
        (x, skip): (&[u8], usize),
        (blocks, threads): (u32, u32),
        want: Vec<u8>,
        what: String,
    ) {
        let (name, definition) = kernel_definition(kernel);
        if self.names.insert(name.clone()) {
            let _ = writeln!(self.source, "{definition}");
        }
        let k = self.expected.len();
        let file = |name: String| self.dir.path().join(name).to_string_lossy().into_owned();
        let meta: Vec<u8> = meta.iter().flat_map(|w| w.to_le_bytes()).collect();
        std::fs::write(file(format!("meta{k}.bin")), &meta).unwrap();
        std::fs::write(file(format!("x{k}.bin")), x).unwrap();
        let _ = writeln!(
            self.main,
            "  {{ unsigned char* m = load(\"{}\", {}); unsigned char* x = load(\"{}\", {}); unsigned char* o = load(nullptr, {});\n    launch({name}, {blocks}, 1, 1, {threads}, 1, {{m, x + {skip}, o}}); store(\"{}\", o, {}); }}",
            file(format!("meta{k}.bin")),
            meta.len(),
            file(format!("x{k}.bin")),
            x.len(),
            want.len(),
            file(format!("o{k}.bin")),
            want.len()
        );
        self.expected.push((what, want));
    }

    /// Builds and runs the launches and compares their outputs (nothing without g++).
    pub(crate) fn check(mut self) {
        self.main.push_str("  return 0;\n}\n");
        if build_and_run(self.dir.path(), &self.source, &self.main).is_none() {
            return;
        }
        for (k, (what, want)) in self.expected.iter().enumerate() {
            let got = std::fs::read(self.dir.path().join(format!("o{k}.bin"))).unwrap();
            let first = got.iter().zip(want).position(|(g, w)| g != w);
            assert!(got.len() == want.len() && first.is_none(), "{what}: bytes differ from byte {first:?} on");
        }
    }
}
