//! Kernel templates: each generated kernel kind keeps its C++ in a `.cu` file of its op family,
//! read with `include_str!`. The file starts with `//` lines documenting the kernel (what it computes,
//! its `meta` table); the rest is the kernel's parameter list and body, in which `@NAME@` marks a
//! value the kind fills in (an element type, a constant, a fragment of code).

use saggar_shape::DType;

/// The kernel text of `template`: its leading `//` lines dropped, every `@NAME@` replaced by the value
/// `values` gives for `NAME`. A placeholder without a value stays as it is (and then fails to compile);
/// every kind's tests render each of its variants and check that none is left.
pub(crate) fn render(template: &str, values: &[(&str, &str)]) -> String {
    let body = strip_header(template);
    let mut out = String::with_capacity(body.len() + 64);
    let mut rest = body;
    while let Some(start) = rest.find('@') {
        let after = &rest[start + 1..];
        let value = after.find('@').and_then(|end| {
            let key = &after[..end];
            values.iter().find(|(k, _)| *k == key).map(|(_, v)| (end, *v))
        });
        match value {
            Some((end, v)) => {
                out.push_str(&rest[..start]);
                out.push_str(v);
                rest = &after[end + 1..];
            }
            None => {
                out.push_str(&rest[..=start]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `text` without its leading `//` lines (a template's or prelude's own documentation).
pub(crate) const fn strip_header(text: &str) -> &str {
    let bytes = text.as_bytes();
    let mut at = 0;
    while at + 1 < bytes.len() && bytes[at] == b'/' && bytes[at + 1] == b'/' {
        while at < bytes.len() && bytes[at] != b'\n' {
            at += 1;
        }
        at += 1;
    }
    if at > bytes.len() {
        at = bytes.len();
    }
    match std::str::from_utf8(bytes.split_at(at).1) {
        Ok(rest) => rest,
        // Unreachable: the split is just after a newline or at the end.
        Err(_) => "",
    }
}

/// The unsigned C++ type of `bytes`-byte elements (copies move bits).
pub(crate) fn bits_type(bytes: u8) -> &'static str {
    match bytes {
        1 => "unsigned char",
        2 => "unsigned short",
        4 => "unsigned int",
        _ => "unsigned long long",
    }
}

/// The C++ type of an index tensor's elements (`int` or `long long`).
pub(crate) fn index_type(d: DType) -> &'static str {
    if d == DType::I32 { "int" } else { "long long" }
}

/// An `f32` constant from its bits, exact in C++.
pub(crate) fn float_literal(bits: u32) -> String {
    format!("__int_as_float({})", bits as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_drops_the_header_and_fills_placeholders() {
        let t = "// doc\n// more doc\n(const @T@* x) { y = @T@(0) + @N@; } // @kept@\n";
        assert_eq!(render(t, &[("T", "float"), ("N", "3")]), "(const float* x) { y = float(0) + 3; } // @kept@\n");
        assert_eq!(render("no header @", &[]), "no header @");
        assert_eq!(render("// only a header", &[]), "");
    }
}
