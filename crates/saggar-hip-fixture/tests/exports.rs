//! The built library, read as the dynamic loader reads it: every symbol saggar's HIP backend imports
//! (parsed from `crates/saggar-device/src/hip/sys.rs` and `rtc.rs`) is a defined dynamic symbol of
//! `libsaggar_hip_fixture.so`, and the hip*/hiprtc* symbols it exports are exactly those in the fixture's
//! own table (`saggar_hip_fixture_symbols`), so no entry point exists that the table, and with it the
//! "mapped or not supported" test, does not cover. Runs without a GPU.

use std::collections::BTreeSet;
use std::ffi::{CStr, c_char};
use std::path::{Path, PathBuf};

/// The library cargo built for this test run: `libsaggar_hip_fixture.so` beside this test binary (in
/// `target/<profile>/deps`) or one directory up.
fn built_library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("the test binary's directory");
    let candidates = [deps.join("libsaggar_hip_fixture.so"), deps.join("../libsaggar_hip_fixture.so")];
    candidates.iter().find(|p| p.is_file()).cloned().unwrap_or_else(|| {
        panic!("libsaggar_hip_fixture.so was not built beside the test binary; looked at {candidates:?}")
    })
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> usize {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) as usize
}

/// The defined, global function symbols of an ELF64 shared library's `.dynsym` (what `nm -D
/// --defined-only` lists as `T`).
fn exported_functions(path: &Path) -> BTreeSet<String> {
    const SHT_DYNSYM: u32 = 11;
    const STB_GLOBAL: u8 = 1;
    const STT_FUNC: u8 = 2;
    let elf = std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    assert_eq!(&elf[..4], b"\x7fELF");
    assert_eq!((elf[4], elf[5]), (2, 1), "a 64-bit little-endian ELF file");
    let (shoff, shentsize, shnum) = (u64_at(&elf, 40), usize::from(u16_at(&elf, 58)), usize::from(u16_at(&elf, 60)));
    let section = |i: usize| {
        let at = shoff + i * shentsize;
        (u32_at(&elf, at + 4), u64_at(&elf, at + 24), u64_at(&elf, at + 32), u32_at(&elf, at + 40) as usize)
    };
    let (_, sym_off, sym_size, strtab) =
        (0..shnum).map(section).find(|s| s.0 == SHT_DYNSYM).expect("the library has a .dynsym section");
    let (_, str_off, str_size, _) = section(strtab);
    let strings = &elf[str_off..str_off + str_size];
    let mut names = BTreeSet::new();
    for at in (sym_off..sym_off + sym_size).step_by(24) {
        let (name, info, shndx) = (u32_at(&elf, at) as usize, elf[at + 4], u16_at(&elf, at + 6));
        if shndx == 0 || info >> 4 != STB_GLOBAL || info & 0xf != STT_FUNC {
            continue;
        }
        let name = CStr::from_bytes_until_nul(&strings[name..]).expect("a NUL-terminated name");
        names.insert(name.to_str().expect("an ASCII name").to_string());
    }
    names
}

/// The hip* functions saggar's HIP backend declares, and the hipRTC functions it resolves by name.
fn backend_symbols() -> BTreeSet<String> {
    let hip_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../saggar-device/src/hip");
    let sys = std::fs::read_to_string(hip_dir.join("sys.rs")).expect("saggar-device's hip/sys.rs");
    let rtc = std::fs::read_to_string(hip_dir.join("rtc.rs")).expect("saggar-device's hip/rtc.rs");
    let block = &sys[sys.find("unsafe extern \"C\" {").expect("sys.rs has an extern block")..];
    let block = &block[..block.find("\n}\n").expect("the extern block ends")];
    let mut names = BTreeSet::new();
    for line in block.lines() {
        let line = line.trim_start();
        if let Some(rest) = line.strip_prefix("pub safe fn ").or_else(|| line.strip_prefix("pub fn ")) {
            names.insert(rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect());
        }
    }
    for text in [&sys, &rtc] {
        for piece in text.split('"').skip(1).step_by(2) {
            if piece.starts_with("hiprtc") && piece.chars().all(|c| c.is_ascii_alphanumeric()) {
                names.insert(piece.to_string());
            }
        }
    }
    names
}

/// The fixture's table, read from the library itself.
fn fixture_table(path: &Path) -> Vec<(String, String)> {
    // SAFETY: loading the fixture runs only Rust's runtime initialisation (it loads CUDA lazily, on the
    // first HIP call, which this test does not make).
    let library = unsafe { libloading::Library::new(path) }.expect("the fixture loads");
    // SAFETY: the symbol is `extern "C" fn() -> *const c_char`, returning a static string.
    let symbols = unsafe { library.get::<unsafe extern "C" fn() -> *const c_char>(b"saggar_hip_fixture_symbols") }
        .expect("the fixture exports its table");
    // SAFETY: a static NUL-terminated string, valid while the library is loaded (it is, until the end of
    // this function, after the text is copied).
    let text = unsafe { CStr::from_ptr(symbols()) }.to_str().expect("UTF-8").to_owned();
    text.lines()
        .map(|line| {
            let mut fields = line.split('\t');
            (fields.next().unwrap().to_string(), fields.next().expect("a mapping kind").to_string())
        })
        .collect()
}

#[test]
fn every_symbol_the_hip_backend_imports_is_exported() {
    let library = built_library();
    let exported = exported_functions(&library);
    let imported = backend_symbols();
    assert!(imported.len() >= 49, "parsed only {} symbols from saggar-device's hip/: {imported:?}", imported.len());
    let missing: Vec<_> = imported.difference(&exported).collect();
    assert!(missing.is_empty(), "{} does not export {missing:?}", library.display());
    assert!(exported.contains("saggar_hip_fixture_version"), "the marker the HIP backend looks for");
    eprintln!("{}: exports all {} symbols saggar's HIP backend imports", library.display(), imported.len());
}

#[test]
fn the_exports_are_exactly_the_fixtures_table() {
    let library = built_library();
    let exported: BTreeSet<String> =
        exported_functions(&library).into_iter().filter(|n| n.starts_with("hip")).collect();
    let table = fixture_table(&library);
    let listed: BTreeSet<String> = table.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(exported, listed, "exported hip*/hiprtc* symbols and the fixture's table differ");
    for (name, kind) in &table {
        assert!(kind == "mapped" || kind == "not-supported", "{name}: {kind}");
    }
    let not_supported: Vec<_> = table.iter().filter(|(_, k)| k == "not-supported").map(|(n, _)| n).collect();
    eprintln!(
        "{} exported: {} mapped, not supported: {not_supported:?}",
        table.len(),
        table.len() - not_supported.len()
    );
}

/// The hipBLASLt functions saggar's shared BLAS layer resolves by name (`sym!("...")` in
/// `crates/saggar-device/src/gpu/blas/`, under the prefix `hip/blas.rs` gives) are all exported.
#[test]
fn every_hipblaslt_function_the_backend_resolves_is_exported() {
    let device = Path::new(env!("CARGO_MANIFEST_DIR")).join("../saggar-device/src");
    let folder = device.join("gpu/blas");
    let mut files: Vec<_> = std::fs::read_dir(&folder)
        .expect("saggar-device's gpu/blas/")
        .map(|entry| entry.expect("an entry of gpu/blas/").path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    let shared: String = files.iter().map(|f| std::fs::read_to_string(f).expect("a file of gpu/blas/")).collect();
    let spec = std::fs::read_to_string(device.join("hip/blas.rs")).expect("saggar-device's hip/blas.rs");
    assert!(spec.contains("prefix: \"hipblasLt\""), "the HIP backend's hipBLASLt prefix");
    let resolved: BTreeSet<String> = shared
        .split("sym!(\"")
        .skip(1)
        .map(|rest| format!("hipblasLt{}", &rest[..rest.find('"').expect("a closing quote")]))
        .collect();
    assert!(resolved.len() >= 13, "parsed only {resolved:?}");
    let exported = exported_functions(&built_library());
    let missing: Vec<_> = resolved.difference(&exported).collect();
    assert!(missing.is_empty(), "the fixture does not export {missing:?}");
    eprintln!("the fixture exports all {} hipBLASLt functions the HIP backend resolves", resolved.len());
}
