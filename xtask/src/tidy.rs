//! `cargo xtask tidy`: checks of the source tree that rustc, clippy and rustfmt do not make, in the
//! manner of rust-analyzer's `xtask/src/tidy.rs`. Each check is a function over one file's path and
//! text; the tests at the bottom run them over the real tree (`real_tree_*`), so `cargo test
//! --workspace` fails on a violation, and `cargo xtask tidy` prints every violation.
//!
//! Over every `.rs` file under `crates/*/src`:
//! - **Long files**: at most [`MAX_FILE_LINES`] lines of code: lines that are not blank, not `//`
//!   comments (doc comments included) and not inside a `#[cfg(test)]` module. A longer file carries
//!   a line `// tidy: long file: <reason>` ([`LONG_FILE_MARKER`]).
//! - **Long functions**: at most [`MAX_FN_LINES`] lines from the line of `fn` to the closing brace,
//!   test modules included. Only functions with a body count: a trait method or `extern` declaration
//!   ends in `;`. A longer function carries `// tidy: long fn: <reason>` ([`LONG_FN_MARKER`]) among the
//!   comment and attribute lines directly above its `fn` line.
//! - **Module docs**: the file's first line is a `//!` comment.
//! - **Layers**: in a crate with a [`Layering`] ([`ONNX_LAYERING`]), no file imports a module of a
//!   higher layer than its own, except the upward imports the layering lists as known.
//!
//! A marker with no reason after the colon is itself a violation.
//!
//! The checks read source as text, not as a syntax tree: [`code_only`] blanks comments and string
//! and character literals so that braces, `fn` and `crate::` are found in code only. Imports are
//! found as `crate::` paths (`use crate::x`, `crate::{x, y}`, or a path in an expression); an item
//! the crate root re-exports (`crate::Compiler`, from `pub use compiler::Compiler;` in `lib.rs`)
//! counts as an import of the module it comes from. `super::` paths are not followed.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

/// Most lines of code a file may have without [`LONG_FILE_MARKER`] (see the module docs).
pub(crate) const MAX_FILE_LINES: usize = 600;
/// Most lines a function may span without [`LONG_FN_MARKER`].
pub(crate) const MAX_FN_LINES: usize = 120;
/// Starts the comment line that lets a file be longer than [`MAX_FILE_LINES`]; the reason follows.
pub(crate) const LONG_FILE_MARKER: &str = "// tidy: long file:";
/// Starts the comment line, above a function, that lets it be longer than [`MAX_FN_LINES`].
pub(crate) const LONG_FN_MARKER: &str = "// tidy: long fn:";

/// A crate's layers: the modules at the top of its `src/` (a file `x.rs` or a folder `x/`) and their
/// ranks. A file may import (`crate::x`) modules of its own rank or lower; modules not listed are
/// neither checked nor protected.
#[derive(Debug)]
pub(crate) struct Layering {
    /// The crate's source folder, relative to the workspace root.
    pub(crate) src: &'static str,
    /// `(module, rank)`, lowest first.
    pub(crate) layers: &'static [(&'static str, u32)],
    /// Upward imports allowed for now, `(module, imported module)`: the ones the tree had when the
    /// layering was written down, to be deleted as they go.
    pub(crate) known_upward: &'static [(&'static str, &'static str)],
}

/// saggar-onnx's layers (`docs/ARCHITECTURE.md`): the foundation (`error`, `tensor`) <- `import` (the
/// ONNX file format) <- `ops` <- `graph` (the IR, its import through the op registry, the passes, and
/// the model builders) <- `plan` <- `fuse` <- `lower` <- the compiler and what runs on it.
pub(crate) const ONNX_LAYERING: Layering = Layering {
    src: "crates/saggar-onnx/src",
    layers: &[
        ("error", 0),
        ("tensor", 0),
        ("import", 1),
        ("ops", 2),
        ("graph", 3),
        ("builder", 3),
        ("synthetic", 3),
        ("plan", 4),
        ("fuse", 5),
        ("lower", 6),
        ("compiler", 7),
        ("gpu_emulation", 7),
    ],
    known_upward: &[],
};

/// One broken rule, at a line of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    /// The file, as given to the check (relative to the workspace root for the real tree).
    pub(crate) path: String,
    /// 1-based.
    pub(crate) line: usize,
    pub(crate) message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.path, self.line, self.message)
    }
}

fn violation(path: &str, line: usize, message: String) -> Violation {
    Violation { path: path.to_string(), line, message }
}

/// A source file: its path relative to the workspace root, with `/` separators, and its text.
#[derive(Debug)]
pub(crate) struct SourceFile {
    pub(crate) path: String,
    pub(crate) text: String,
}

/// `cargo xtask tidy`: runs every check over the tree at `root` and prints each violation.
pub(crate) fn run(root: &Path) -> Result<(), String> {
    let files = crate_sources(root)?;
    let violations = check_all(&files);
    for v in &violations {
        println!("{v}");
    }
    match violations.len() {
        0 => {
            println!("tidy: {} files, no violations", files.len());
            Ok(())
        }
        n => Err(format!("{n} tidy violations in {} files", files.len())),
    }
}

/// Every check over `files`.
pub(crate) fn check_all(files: &[SourceFile]) -> Vec<Violation> {
    let mut found = Vec::new();
    for file in files {
        found.extend(missing_module_doc(&file.path, &file.text));
        found.extend(reasonless_markers(&file.path, &file.text));
        found.extend(long_file(&file.path, &file.text));
        found.extend(long_functions(&file.path, &file.text));
    }
    found.extend(layer_violations(files, &ONNX_LAYERING));
    found
}

/// Every `.rs` file under `crates/*/src` and `python/src` (the Python package's crate) of the
/// workspace at `root`, sorted by path.
pub(crate) fn crate_sources(root: &Path) -> Result<Vec<SourceFile>, String> {
    let mut paths = Vec::new();
    let crates = root.join("crates");
    for entry in read_dir(&crates)?.into_iter().chain([root.join("python")]) {
        let src = entry.join("src");
        if src.is_dir() {
            collect_rs(&src, &mut paths)?;
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let relative = path.strip_prefix(root).unwrap_or(&path);
            let parts: Vec<String> = relative.components().map(|c| c.as_os_str().to_string_lossy().into()).collect();
            Ok(SourceFile { path: parts.join("/"), text })
        })
        .collect()
}

fn read_dir(dir: &Path) -> Result<Vec<std::path::PathBuf>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    entries.map(|e| e.map(|e| e.path()).map_err(|e| format!("cannot list {}: {e}", dir.display()))).collect()
}

fn collect_rs(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<(), String> {
    for path in read_dir(dir)? {
        if path.is_dir() {
            collect_rs(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The file's first line is not a `//!` comment.
pub(crate) fn missing_module_doc(path: &str, text: &str) -> Option<Violation> {
    let first = text.lines().next().unwrap_or("");
    (!first.starts_with("//!")).then(|| violation(path, 1, "the file does not start with a `//!` module doc".into()))
}

/// What a line holds of a marker: none, the marker with a reason, or the marker without one.
#[derive(Debug, PartialEq, Eq)]
enum Marker {
    Absent,
    Reasoned,
    Reasonless,
}

fn marker(line: &str, prefix: &str) -> Marker {
    match line.trim().strip_prefix(prefix) {
        None => Marker::Absent,
        Some(reason) if reason.trim().is_empty() => Marker::Reasonless,
        Some(_) => Marker::Reasoned,
    }
}

/// Markers of either kind that give no reason: they excuse nothing, and say so.
pub(crate) fn reasonless_markers(path: &str, text: &str) -> Vec<Violation> {
    text.lines()
        .enumerate()
        .flat_map(|(i, line)| {
            [LONG_FILE_MARKER, LONG_FN_MARKER]
                .into_iter()
                .filter(move |prefix| marker(line, prefix) == Marker::Reasonless)
                .map(move |prefix| violation(path, i + 1, format!("`{prefix}` needs a reason after the colon")))
        })
        .collect()
}

/// Lines of code outside test modules: not blank and not `//` comments.
pub(crate) fn code_lines(text: &str) -> usize {
    let tests = test_module_lines(text);
    text.lines()
        .enumerate()
        .filter(|(i, _)| !tests.iter().any(|(first, last)| (*first..=*last).contains(&(i + 1))))
        .filter(|(_, line)| {
            let line = line.trim();
            !line.is_empty() && !line.starts_with("//")
        })
        .count()
}

/// The file is longer than [`MAX_FILE_LINES`] lines of code and carries no [`LONG_FILE_MARKER`] with a
/// reason.
pub(crate) fn long_file(path: &str, text: &str) -> Option<Violation> {
    let lines = code_lines(text);
    let excused = text.lines().any(|line| marker(line, LONG_FILE_MARKER) == Marker::Reasoned);
    (lines > MAX_FILE_LINES && !excused).then(|| {
        let message = format!(
            "{lines} lines of code (most {MAX_FILE_LINES}): split it, or say why in `{LONG_FILE_MARKER} <reason>`"
        );
        violation(path, 1, message)
    })
}

/// Functions longer than [`MAX_FN_LINES`] without a [`LONG_FN_MARKER`] above them.
pub(crate) fn long_functions(path: &str, text: &str) -> Vec<Violation> {
    let lines: Vec<&str> = text.lines().collect();
    functions(text)
        .into_iter()
        .filter(|f| f.lines() > MAX_FN_LINES && !fn_marked(&lines, f.first))
        .map(|f| {
            let message = format!(
                "fn {} spans {} lines (most {MAX_FN_LINES}): split it, or say why in `{LONG_FN_MARKER} <reason>` above it",
                f.name,
                f.lines()
            );
            violation(path, f.first, message)
        })
        .collect()
}

/// Whether a [`LONG_FN_MARKER`] with a reason is among the comment and attribute lines directly
/// above line `first` (1-based).
fn fn_marked(lines: &[&str], first: usize) -> bool {
    lines[..first - 1]
        .iter()
        .rev()
        .take_while(|line| {
            let line = line.trim();
            line.starts_with("//") || line.starts_with("#[")
        })
        .any(|line| marker(line, LONG_FN_MARKER) == Marker::Reasoned)
}

/// A function with a body: its name and its first (`fn`) and last (closing brace) lines, 1-based.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Function {
    pub(crate) name: String,
    pub(crate) first: usize,
    pub(crate) last: usize,
}

impl Function {
    pub(crate) fn lines(&self) -> usize {
        self.last - self.first + 1
    }
}

/// Every function with a body in `text`, nested ones included: `fn` followed by a name, then a
/// signature that reaches a `{` before a `;` outside parentheses and brackets (`[u8; 4]`).
pub(crate) fn functions(text: &str) -> Vec<Function> {
    let code = code_only(text);
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    for at in words(&code).filter(|&(_, w)| w == "fn").map(|(at, _)| at) {
        let rest = &code[at + 2..];
        let name_at = at + 2 + (rest.len() - rest.trim_start().len());
        let name: String = code[name_at..].chars().take_while(|&c| is_ident(c) || c == '#').collect();
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) || name_at == at + 2 {
            continue; // `fn(..)` as a type, or `fn $name` in a macro.
        }
        let mut depth = 0i32;
        let mut open = None;
        for (i, &b) in bytes.iter().enumerate().skip(name_at) {
            match b {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b';' if depth == 0 => break,
                b'{' if depth == 0 => {
                    open = Some(i);
                    break;
                }
                _ => {}
            }
        }
        if let Some(close) = open.and_then(|open| matching_brace(bytes, open)) {
            found.push(Function { name, first: line_of(&code, at), last: line_of(&code, close) });
        }
    }
    found
}

/// The index of the `}` closing the `{` at `open`, in code from [`code_only`].
fn matching_brace(bytes: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The words (identifiers and keywords) of `code` with their byte offsets.
fn words(code: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut start = None;
    code.char_indices().chain([(code.len(), ' ')]).filter_map(move |(i, c)| match (start, is_ident(c)) {
        (None, true) => {
            start = Some(i);
            None
        }
        (Some(s), false) => {
            start = None;
            Some((s, &code[s..i]))
        }
        _ => None,
    })
}

/// The 1-based line of byte offset `at`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1
}

/// The first and last lines (1-based) of every inline `#[cfg(test)]` module, and the line of every
/// `#[cfg(test)] mod x;` declaration.
pub(crate) fn test_module_lines(text: &str) -> Vec<(usize, usize)> {
    const ATTR: &str = "#[cfg(test)]";
    let code = code_only(text);
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(offset) = code[from..].find(ATTR) {
        let at = from + offset;
        from = at + ATTR.len();
        let Some(close) = module_end(&code, from) else { continue };
        found.push((line_of(&code, at), line_of(&code, close)));
    }
    found
}

/// Where the module declared after offset `from` ends (its `}` or `;`), if what follows the
/// attributes there is a module.
fn module_end(code: &str, mut from: usize) -> Option<usize> {
    loop {
        let rest = code[from..].trim_start();
        from = code.len() - rest.len();
        if !rest.starts_with("#[") {
            break;
        }
        from += matching_bracket(&code[from..])? + 1;
    }
    let mut item = words(&code[from..]);
    let mut word = item.next()?.1;
    if word == "pub" {
        word = item.next()?.1;
        if word == "crate" || word == "super" {
            word = item.next()?.1;
        }
    }
    if word != "mod" {
        return None;
    }
    let end = from + code[from..].find(['{', ';'])?;
    if code.as_bytes()[end] == b';' { Some(end) } else { matching_brace(code.as_bytes(), end) }
}

/// The offset of the `]` closing the `#[` that `attr` starts with.
fn matching_bracket(attr: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, b) in attr.bytes().enumerate() {
        match b {
            b'[' => depth += 1,
            b']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Imports of a higher layer: every file of `files` under `layering.src` whose module has a rank,
/// against every `crate::` path in its code to a module of higher rank.
pub(crate) fn layer_violations(files: &[SourceFile], layering: &Layering) -> Vec<Violation> {
    let prefix = format!("{}/", layering.src);
    let rank = |module: &str| layering.layers.iter().find(|(m, _)| *m == module).map(|&(_, r)| r);
    let lib = files.iter().find(|f| f.path == format!("{prefix}lib.rs"));
    let reexports = lib.map(|f| root_reexports(&f.text)).unwrap_or_default();
    // A root item's module, through re-exports of re-exports (`pub use import::tensor_pb;` then
    // `pub use tensor_pb::NamedTensor;`).
    let module_of = |head: &str| {
        let mut at = head.to_string();
        for _ in 0..8 {
            match reexports.get(&at) {
                Some(module) if rank(&at).is_none() => at = module.clone(),
                _ => break,
            }
        }
        at
    };
    let mut found = Vec::new();
    for file in files {
        let Some(in_src) = file.path.strip_prefix(&prefix) else { continue };
        let Some(module) = top_module(in_src) else { continue };
        let Some(own) = rank(module) else { continue };
        for (line, head) in crate_imports(&file.text) {
            let target = module_of(&head);
            if layering.known_upward.contains(&(module, target.as_str())) {
                continue;
            }
            if let Some(theirs) = rank(&target).filter(|&r| r > own) {
                let via = if head == target { String::new() } else { format!(" (through the root's `{head}`)") };
                let message = format!(
                    "`{module}` (layer {own}) imports `crate::{target}` (layer {theirs}){via}: a layer may import only its own and lower ones"
                );
                found.push(violation(&file.path, line, message));
            }
        }
    }
    found
}

/// The names a crate root re-exports from its own modules, each with the module it comes from:
/// `pub use compiler::{Compiler, Options as Opts};` gives `Compiler`, `Options` and `Opts` →
/// `compiler`. Read from the code of `pub use` items only (names of path segments come along, which
/// is harmless: a path segment is not an item the root defines).
pub(crate) fn root_reexports(lib: &str) -> HashMap<String, String> {
    let code = code_only(lib);
    let mut map = HashMap::new();
    for item in code.split(';') {
        let Some(path) = item.trim().strip_prefix("pub use ") else { continue };
        let path = path.trim_start();
        let path = path.strip_prefix("crate::").or_else(|| path.strip_prefix("self::")).unwrap_or(path);
        let head: String = path.chars().take_while(|&c| is_ident(c)).collect();
        for (_, name) in words(&path[head.len()..]).filter(|&(_, w)| w != "as" && w != head) {
            map.insert(name.to_string(), head.clone());
        }
    }
    map
}

/// The module at the top of `src/` that a file (given relative to `src/`) belongs to; `None` for
/// the crate root.
pub(crate) fn top_module(in_src: &str) -> Option<&str> {
    match in_src.split_once('/') {
        Some((folder, _)) => Some(folder),
        None => in_src.strip_suffix(".rs").filter(|m| !["lib", "main"].contains(m)),
    }
}

/// The first segment of every `crate::` path in the code of `text`, with its line: `crate::a::b`
/// gives `a`, `crate::{a::b, c}` gives `a` and `c`.
pub(crate) fn crate_imports(text: &str) -> Vec<(usize, String)> {
    let code = code_only(text);
    let mut found = Vec::new();
    for at in words(&code).filter(|&(_, w)| w == "crate").map(|(at, _)| at) {
        let Some(path) = code[at + "crate".len()..].trim_start().strip_prefix("::") else { continue };
        let path = path.trim_start();
        let line = line_of(&code, at);
        if let Some(group) = path.strip_prefix('{') {
            found.extend(group_heads(group).into_iter().map(|head| (line, head)));
        } else {
            found.push((line, path.chars().take_while(|&c| is_ident(c)).collect()));
        }
    }
    found.retain(|(_, head)| !head.is_empty());
    found
}

/// The first segment of each entry of a `{a::b, c, d::{e}}` group, read from just after its `{`.
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 1usize;
    let mut entry_start = true;
    let mut chars = group.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '{' => depth += 1,
            '}' if depth == 1 => break,
            '}' => depth -= 1,
            ',' if depth == 1 => entry_start = true,
            c if entry_start && is_ident(c) => {
                heads.push(group[i..].chars().take_while(|&c| is_ident(c)).collect());
                entry_start = false;
                while chars.next_if(|&(_, c)| is_ident(c)).is_some() {}
            }
            c if c.is_whitespace() => {}
            _ => entry_start = false,
        }
    }
    heads
}

/// `text` with every comment and every string, byte-string and character literal replaced by
/// spaces (line breaks kept), so offsets and lines stay those of `text`.
pub(crate) fn code_only(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let mut i = 0;
    while i < bytes.len() {
        let end = literal_or_comment_end(bytes, i);
        match end {
            Some(end) => {
                for b in &mut out[i..end] {
                    if *b != b'\n' && *b != b'\r' {
                        *b = b' ';
                    }
                }
                i = end;
            }
            None => i += 1,
        }
    }
    // Only ASCII bytes were written, each over a whole run of characters.
    String::from_utf8(out).expect("blanking whole characters keeps UTF-8")
}

/// If a comment or literal starts at `i`, the offset just past it.
fn literal_or_comment_end(b: &[u8], i: usize) -> Option<usize> {
    let at = |k: usize| b.get(k).copied().unwrap_or(0);
    let after_ident = i > 0 && (at(i - 1).is_ascii_alphanumeric() || at(i - 1) == b'_' || at(i - 1) >= 0x80);
    match at(i) {
        b'/' if at(i + 1) == b'/' => Some(b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| i + p)),
        b'/' if at(i + 1) == b'*' => Some(block_comment_end(b, i)),
        b'"' => Some(string_end(b, i + 1)),
        b'\'' => char_end(b, i),
        b'b' | b'c' | b'r' if !after_ident => prefixed_literal_end(b, i),
        _ => None,
    }
}

fn block_comment_end(b: &[u8], mut i: usize) -> usize {
    let mut depth = 0usize;
    while i < b.len() {
        if b[i..].starts_with(b"/*") {
            depth += 1;
            i += 2;
        } else if b[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    b.len()
}

/// Past the `"` closing a string whose contents start at `i`, skipping escapes.
fn string_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// A character literal at `i` (`'x'`, `'\n'`, `'\u{..}'`), or `None` for a lifetime (`'a`).
fn char_end(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i + 1) == Some(&b'\\') {
        let close = b[i + 3..].iter().position(|&c| c == b'\'')?;
        return Some(i + 3 + close + 1);
    }
    let width = match b.get(i + 1)? {
        c if *c < 0x80 => 1,
        c if *c >= 0xF0 => 4,
        c if *c >= 0xE0 => 3,
        _ => 2,
    };
    (b.get(i + 1 + width) == Some(&b'\'')).then_some(i + width + 2)
}

/// A literal with a prefix at `i`: `b"..."`, `c"..."`, `b'x'`, raw `r"..."`, `r#"..."#`, `br"..."`.
fn prefixed_literal_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i;
    if matches!(b[j], b'b' | b'c') {
        j += 1;
        if b[i] == b'b' && b.get(j) == Some(&b'\'') {
            return char_end(b, j);
        }
    }
    if b.get(j) != Some(&b'r') {
        return (b.get(j) == Some(&b'"')).then(|| string_end(b, j + 1));
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|&&c| c == b'#').count();
    j += hashes;
    if b.get(j) != Some(&b'"') {
        return None; // `r#ident`, or a word starting with r.
    }
    let mut closing = vec![b'"'];
    closing.extend(std::iter::repeat_n(b'#', hashes));
    Some(b[j + 1..].windows(closing.len()).position(|w| w == closing).map_or(b.len(), |p| j + 1 + p + closing.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `count` lines of code, one constant each.
    fn filler(count: usize) -> String {
        (0..count).map(|i| format!("const C{i}: u32 = {i};\n")).collect()
    }

    /// A function `name` spanning `lines` lines.
    fn function(name: &str, lines: usize) -> String {
        let body: String = (0..lines - 2).map(|i| format!("    let _x{i} = {i};\n")).collect();
        format!("fn {name}() {{\n{body}}}\n")
    }

    fn workspace_root() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask is one below the root").to_path_buf()
    }

    fn real_tree() -> Vec<SourceFile> {
        let files = crate_sources(&workspace_root()).expect("read crates/*/src");
        assert!(files.len() > 100, "found only {} source files", files.len());
        assert!(files.iter().any(|f| f.path.starts_with("python/src/")), "the Python package's crate is checked too");
        files
    }

    fn assert_none(violations: Vec<Violation>) {
        let shown: Vec<String> = violations.iter().map(ToString::to_string).collect();
        assert!(shown.is_empty(), "{} violations:\n{}", shown.len(), shown.join("\n"));
    }

    #[test]
    fn code_only_blanks_comments_and_literals() {
        let text = "let s = \"{ fn x() }\"; // fn y() {\nlet c = '{'; let l: &'a str = r#\"}\"#; /* { /* } */ */ x";
        let code = code_only(text);
        assert_eq!(code.len(), text.len());
        assert_eq!(code.lines().count(), 2);
        assert!(!code.contains('{') && !code.contains('}'), "{code}");
        assert!(code.contains("&'a str") && code.ends_with(" x"), "{code}");
        let literals = "b'\\''; br##\"\"#\"##; c\"{\"; 'é'; b\"\\\"\"";
        let code = code_only(literals);
        assert_eq!((code.len(), code.split_whitespace().collect::<String>().as_str()), (literals.len(), ";;;;"));
        assert_eq!(code_only("r#match + bar\"x\""), "r#match + bar   ");
    }

    #[test]
    fn code_lines_skip_blanks_comments_and_test_modules() {
        let text = "//! Doc.\n\nfn a() {}\n// note\n    /// doc\nfn b() {}\n#[cfg(test)]\nmod tests {\n    fn c() {}\n}\nfn d() {}\n";
        assert_eq!(code_lines(text), 3);
        assert_eq!(test_module_lines(text), [(7, 10)]);
        let declared = "fn a() {}\n#[cfg(test)]\n#[path = \"t.rs\"]\npub(crate) mod tests;\nfn b() {}\n";
        assert_eq!(test_module_lines(declared), [(2, 4)]);
        assert_eq!(code_lines(declared), 2);
        assert!(test_module_lines("#[cfg(test)]\nfn only_in_tests() {}\n").is_empty());
    }

    #[test]
    fn a_long_file_needs_a_marker_with_a_reason() {
        let long = format!("//! Doc.\n{}", filler(MAX_FILE_LINES + 1));
        let found = long_file("long.rs", &long).expect("a long file");
        assert!(found.message.contains("601 lines of code"), "{found}");
        let marked = format!("//! Doc.\n// tidy: long file: generated tables, one per opset\n{}", filler(700));
        assert!(long_file("marked.rs", &marked).is_none());
        assert!(reasonless_markers("marked.rs", &marked).is_empty());
        let reasonless = format!("//! Doc.\n// tidy: long file:   \n{}", filler(700));
        assert!(long_file("reasonless.rs", &reasonless).is_some(), "a reasonless marker excuses nothing");
        let found = reasonless_markers("reasonless.rs", &reasonless);
        assert_eq!(found.len(), 1, "a reasonless marker is refused: {found:?}");
        assert!(found[0].message.contains("needs a reason") && found[0].line == 2, "{}", found[0]);
    }

    #[test]
    fn a_file_at_the_limit_passes_and_tests_do_not_count() {
        let at_limit = format!("//! Doc.\n{}\n// a comment\n", filler(MAX_FILE_LINES));
        assert!(long_file("ok.rs", &at_limit).is_none());
        let tests = format!("#[cfg(test)]\nmod tests {{\n{}}}\n", filler(500));
        assert!(long_file("ok.rs", &format!("{at_limit}{tests}")).is_none());
    }

    #[test]
    fn a_long_function_needs_a_marker_with_a_reason() {
        let text = format!("//! Doc.\n{}{}", function("short", MAX_FN_LINES), function("long", MAX_FN_LINES + 1));
        let found = long_functions("f.rs", &text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].line, 2 + MAX_FN_LINES);
        assert!(found[0].message.contains("fn long spans 121 lines"), "{}", found[0]);
        let long = function("long", 200);
        let marked = format!("/// Doc.\n// tidy: long fn: one match over every opcode\n#[inline]\n{long}");
        assert!(long_functions("f.rs", &marked).is_empty());
        for unmarked in [
            format!("// tidy: long fn: a reason\n\n{long}"),
            format!("// tidy: long fn:\n{long}"),
            format!("// tidy: long file: wrong marker\n{long}"),
        ] {
            assert_eq!(long_functions("f.rs", &unmarked).len(), 1, "{unmarked:.60}");
        }
        assert_eq!(reasonless_markers("f.rs", &format!("// tidy: long fn: \n{long}")).len(), 1);
    }

    #[test]
    fn functions_are_bodies_not_declarations() {
        let body = "    let x = 1;\n".repeat(200);
        let text = format!(
            "trait T {{\n    fn declared(&self) -> [u8; 4];\n    fn provided(&self) {{}}\n}}\n\
             unsafe extern \"C\" {{\n    fn hipMalloc(ptr: *mut *mut u8, size: usize) -> i32;\n}}\n\
             struct Api {{ create: unsafe extern \"C\" fn(*mut u8) -> i32 }}\n\
             macro_rules! m {{ ($name:ident) => {{ fn $name() {{}} }} }}\n\
             fn outer(f: fn(u32) -> u32) -> u32 {{\n    fn inner() {{ let _ = \"}}\"; }}\n{body}    f(1)\n}}\n"
        );
        let found = functions(&text);
        let names: Vec<(&str, usize)> = found.iter().map(|f| (f.name.as_str(), f.lines())).collect();
        assert_eq!(names, [("provided", 1), ("outer", 204), ("inner", 1)]);
        assert_eq!(long_functions("f.rs", &text).len(), 1);
    }

    #[test]
    fn module_docs_are_required() {
        assert!(missing_module_doc("a.rs", "//! What this is.\nfn a() {}\n").is_none());
        assert!(missing_module_doc("a.rs", "// A comment.\n//! Doc.\n").is_some());
        assert!(missing_module_doc("a.rs", "").is_some());
    }

    const LAYERS: Layering = Layering {
        src: "c/src",
        layers: &[("ir", 0), ("ops", 1), ("fuse", 2), ("lowering", 3), ("compiler", 4)],
        known_upward: &[("ir", "ops")],
    };

    fn file(path: &str, text: &str) -> SourceFile {
        SourceFile { path: path.into(), text: text.into() }
    }

    #[test]
    fn crate_paths_are_read_from_code_only() {
        let text = "use crate::ops::conv;\nuse crate::{ir::Graph, self as me,\n    fuse::{a, b}};\n\
                    // crate::compiler in a comment\nlet s = \"crate::lowering\";\nlet x = crate :: lowering::f();\n\
                    $crate::compiler::x!();\nuse other_crate::compiler;\n";
        let heads: Vec<(usize, String)> = crate_imports(text);
        let expected = [(1, "ops"), (2, "ir"), (2, "self"), (2, "fuse"), (6, "lowering"), (7, "compiler")];
        assert_eq!(heads, expected.map(|(l, h)| (l, h.to_string())));
        assert_eq!(top_module("ops/conv.rs"), Some("ops"));
        assert_eq!(top_module("lowering.rs"), Some("lowering"));
        assert_eq!(top_module("lib.rs"), None);
    }

    #[test]
    fn an_upward_import_is_a_violation() {
        let files = [
            file("c/src/ops/conv.rs", "//! Conv.\nuse crate::ir::Graph;\nfn f() { crate::lowering::lower(); }\n"),
            file("c/src/fuse/mod.rs", "//! Fuse.\nuse crate::{ops, compiler::Compiler};\n"),
            file("c/src/compiler.rs", "use crate::{fuse, lowering, ops};\n"),
            file("c/src/lib.rs", "pub use crate::compiler::Compiler;\n"),
            file("c/src/other.rs", "use crate::compiler;\n"),
            file("d/src/ops/x.rs", "use crate::compiler;\n"),
        ];
        let found = layer_violations(&files, &LAYERS);
        let at: Vec<(&str, usize)> = found.iter().map(|v| (v.path.as_str(), v.line)).collect();
        assert_eq!(at, [("c/src/ops/conv.rs", 3), ("c/src/fuse/mod.rs", 2)]);
        assert!(found[0].message.contains("`ops` (layer 1) imports `crate::lowering` (layer 3)"), "{}", found[0]);
    }

    #[test]
    fn downward_and_sideways_imports_pass() {
        let files = [
            file("c/src/ops/conv.rs", "use crate::ops::shapes;\nuse crate::ir;\n"),
            file("c/src/ir.rs", "use crate::ops::Op;\n"),
            file("c/src/lowering.rs", "use crate::{fuse, ops::conv, ir::Graph};\n"),
        ];
        assert!(layer_violations(&files, &LAYERS).is_empty());
    }

    #[test]
    fn an_item_re_exported_by_the_root_counts_as_its_module() {
        let files = [
            file(
                "c/src/lib.rs",
                "mod compiler;\npub use compiler::{Compiler, options::Options as Opts};\npub use ir::Graph;\n",
            ),
            file(
                "c/src/fuse/mod.rs",
                "//! Fuse.\n#[cfg(test)]\nmod tests {\n    use crate::{Graph, Opts};\n    use crate::Compiler;\n}\n",
            ),
            file("c/src/ops/x.rs", "//! X.\nfn f() -> crate::Graph { todo!() }\n"),
        ];
        let found = layer_violations(&files, &LAYERS);
        let at: Vec<(&str, usize)> = found.iter().map(|v| (v.path.as_str(), v.line)).collect();
        assert_eq!(at, [("c/src/fuse/mod.rs", 4), ("c/src/fuse/mod.rs", 5)]);
        assert!(
            found[1].message.contains("`crate::compiler` (layer 4) (through the root's `Compiler`)"),
            "{}",
            found[1]
        );
        let map = root_reexports("pub use crate::ops::{conv::Conv, Pool};\n// pub use compiler::X;\n");
        assert_eq!(map.get("Conv").map(String::as_str), Some("ops"));
        assert_eq!(map.get("Pool").map(String::as_str), Some("ops"));
        assert!(!map.contains_key("X"), "comments are not code");
    }

    /// saggar-onnx's table refuses `ops` and `fuse` importing the lowering or the compiler, and an
    /// op family importing the graph; the lowering may import both.
    #[test]
    fn onnx_ops_and_fuse_may_not_import_lower_or_compiler() {
        let files = [
            file("crates/saggar-onnx/src/ops/conv/mod.rs", "use crate::lower::Lowering;\n"),
            file("crates/saggar-onnx/src/ops/mod.rs", "fn f() { crate::compiler::compile(); }\n"),
            file("crates/saggar-onnx/src/fuse/mod.rs", "use crate::{ops, lower::group};\n"),
            file("crates/saggar-onnx/src/fuse/attention/mod.rs", "use crate::compiler::OnnxOptions;\n"),
            file("crates/saggar-onnx/src/ops/norm/gpu.rs", "use crate::graph::ir::Graph;\n"),
            file("crates/saggar-onnx/src/lower/mod.rs", "use crate::{fuse, ops, plan::Step};\n"),
        ];
        let found = layer_violations(&files, &ONNX_LAYERING);
        let paths: Vec<&str> = found.iter().map(|v| v.path.as_str()).collect();
        let refused: Vec<&str> = files[..5].iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, refused, "only `lower` may import `fuse`, `ops` and `plan`");
    }

    /// The real tree: no file under `crates/*/src` has more than [`MAX_FILE_LINES`] lines of code
    /// unless it says why ([`LONG_FILE_MARKER`]).
    #[test]
    fn real_tree_files_are_at_most_600_lines_of_code() {
        assert_none(real_tree().iter().filter_map(|f| long_file(&f.path, &f.text)).collect());
    }

    /// The real tree: no function under `crates/*/src` spans more than [`MAX_FN_LINES`] lines unless
    /// it says why ([`LONG_FN_MARKER`]).
    #[test]
    fn real_tree_functions_are_at_most_120_lines() {
        assert_none(real_tree().iter().flat_map(|f| long_functions(&f.path, &f.text)).collect());
    }

    /// The real tree: every marker under `crates/*/src` gives its reason.
    #[test]
    fn real_tree_markers_give_reasons() {
        assert_none(real_tree().iter().flat_map(|f| reasonless_markers(&f.path, &f.text)).collect());
    }

    /// The real tree: every file under `crates/*/src` starts with a `//!` module doc.
    #[test]
    fn real_tree_files_start_with_module_docs() {
        assert_none(real_tree().iter().filter_map(|f| missing_module_doc(&f.path, &f.text)).collect());
    }

    /// The real tree: no file of a saggar-onnx layer imports a higher layer ([`ONNX_LAYERING`]).
    #[test]
    fn real_tree_onnx_layers_import_only_downward() {
        let files = real_tree();
        let onnx: Vec<&SourceFile> = files.iter().filter(|f| f.path.starts_with(ONNX_LAYERING.src)).collect();
        assert!(onnx.iter().any(|f| f.path.contains("/ops/")), "saggar-onnx's ops are where the layering says");
        assert_none(layer_violations(&files, &ONNX_LAYERING));
    }
}
