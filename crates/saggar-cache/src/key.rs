//! The cache key: what identifies a compiled artifact, its canonical text and its entry id.
//!
//! The canonical text is the single source of truth. The entry id (the file name on disk) is
//! derived from it by BLAKE3, and the full text is stored in every entry header and compared on
//! load, so two keys that ever shared an id would see a miss, never each other's program.
//! `docs/cache-key.md` specifies the encoding so the id can be computed outside the process.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::FORMAT_VERSION;
use crate::model_hash::ModelHash;

/// The first line of every canonical key text. It names the encoding, so a future encoding can
/// never produce the same bytes (and therefore the same id) as this one.
pub const KEY_TEXT_HEADER: &str = "saggar-cache-key/1";

/// Longest accepted text for any single key field or option value, in bytes.
pub const MAX_FIELD_LEN: usize = 4096;

/// Longest accepted canonical key text, in bytes (it is stored in every entry header).
pub const MAX_KEY_TEXT_LEN: usize = 32 * 1024;

/// Number of bytes of the BLAKE3 digest kept in an [`EntryId`] (128 bits).
pub const ENTRY_ID_LEN: usize = 16;

/// Errors in the fields of a [`CacheKey`], or in a canonical key text being parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// A required field was not set or is empty.
    #[error("cache key field `{field}` is missing or empty")]
    MissingField {
        /// The field name as it appears in the canonical text.
        field: &'static str,
    },
    /// A field contains a control character (line breaks would make the encoding ambiguous).
    #[error("cache key field `{field}` contains a control character; use printable text only")]
    ControlCharacter {
        /// The field name, or `option:<name>` for an option.
        field: String,
    },
    /// A field is longer than [`MAX_FIELD_LEN`], or the whole text longer than [`MAX_KEY_TEXT_LEN`].
    #[error("cache key field `{field}` is {len} bytes long; the limit is {max}")]
    TooLong {
        /// The field name, `option:<name>`, or `key text` for the whole encoding.
        field: String,
        /// Its length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// The model hash is not 16 to 128 hexadecimal digits.
    #[error("model hash `{value}` is not a hex content hash (16 to 128 hex digits, e.g. a BLAKE3 or SHA-256 digest)")]
    InvalidModelHash {
        /// The rejected value.
        value: String,
    },
    /// An option name is empty or contains `=`.
    #[error("option name `{name}` is invalid: it must be non-empty and must not contain `=`")]
    InvalidOptionName {
        /// The rejected name.
        name: String,
    },
    /// A canonical key text could not be parsed.
    #[error("malformed canonical key text at line {line}: {reason}")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        reason: String,
    },
}

/// The identity of a compiled artifact: everything that changes the generated code.
///
/// Build one with [`CacheKey::builder`]. A key is immutable; its canonical text and its
/// [`EntryId`] are computed once, at build time, so lookups hash nothing.
///
/// # Canonical text
///
/// One field per line, each line ending in `\n`, in this fixed order:
///
/// ```text
/// saggar-cache-key/1
/// model_hash=<lowercase hex>
/// shape=<text>
/// backend=<text>
/// arch=<text>
/// compiler=<text>
/// compiler_version=<text>
/// format_version=<decimal>
/// option:<name>=<value>        (zero or more, sorted by name, bytewise)
/// ```
///
/// Field values are UTF-8 without control characters, so the encoding needs no escaping and is
/// unambiguous. The [`EntryId`] is the first 16 bytes of `BLAKE3(canonical text)`, in hex.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    model_hash: String,
    shape: String,
    backend: String,
    arch: String,
    compiler: String,
    compiler_version: String,
    format_version: u32,
    options: BTreeMap<String, String>,
    text: String,
    id: EntryId,
}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheKey")
            .field("id", &self.id)
            .field("model_hash", &self.model_hash)
            .field("shape", &self.shape)
            .field("backend", &self.backend)
            .field("arch", &self.arch)
            .field("compiler", &self.compiler)
            .field("compiler_version", &self.compiler_version)
            .field("format_version", &self.format_version)
            .field("options", &self.options)
            .finish()
    }
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (model {}, shape {}, {} {} via {} {})",
            self.id,
            short(&self.model_hash),
            self.shape,
            self.backend,
            self.arch,
            self.compiler,
            self.compiler_version
        )
    }
}

fn short(hex: &str) -> &str {
    &hex[..hex.len().min(12)]
}

impl CacheKey {
    /// Starts a key. Every field except the options is required.
    pub fn builder() -> CacheKeyBuilder {
        CacheKeyBuilder::default()
    }

    /// Hex BLAKE3 digest of a model's bytes, suitable for [`CacheKeyBuilder::model_hash`].
    pub fn hash_model_bytes(model: &[u8]) -> String {
        ModelHash::of_bytes(model).into()
    }

    /// Parses a canonical key text (for example the one stored in an entry header).
    ///
    /// Only the exact canonical form is accepted: re-encoding the parsed key gives back the same
    /// bytes, so the id of a parsed key is the id of the text.
    pub fn from_canonical_text(text: &str) -> Result<CacheKey, KeyError> {
        if text.len() > MAX_KEY_TEXT_LEN {
            return Err(KeyError::TooLong { field: "key text".into(), len: text.len(), max: MAX_KEY_TEXT_LEN });
        }
        let body = text.strip_suffix('\n').ok_or_else(|| KeyError::Malformed {
            line: text.lines().count().max(1),
            reason: "the text must end with a line break".into(),
        })?;
        let mut lines = body.split('\n').enumerate().map(|(i, l)| (i + 1, l));
        if lines.next().map(|(_, l)| l) != Some(KEY_TEXT_HEADER) {
            return Err(KeyError::Malformed {
                line: 1,
                reason: format!("expected the header line `{KEY_TEXT_HEADER}`"),
            });
        }
        let mut next = |field: &'static str| -> Result<(usize, String), KeyError> {
            let (n, line) =
                lines.next().ok_or(KeyError::Malformed { line: 0, reason: format!("missing line `{field}=`") })?;
            let value = line
                .strip_prefix(field)
                .and_then(|rest| rest.strip_prefix('='))
                .ok_or_else(|| KeyError::Malformed { line: n, reason: format!("expected `{field}=`") })?;
            Ok((n, value.to_owned()))
        };
        let mut builder = CacheKey::builder()
            .model_hash(next("model_hash")?.1)
            .shape(next("shape")?.1)
            .backend(next("backend")?.1)
            .arch(next("arch")?.1)
            .compiler(next("compiler")?.1)
            .compiler_version(next("compiler_version")?.1);
        let (n, version) = next("format_version")?;
        let format_version: u32 = version
            .parse()
            .ok()
            .filter(|_| !version.starts_with('+') && (version == "0" || !version.starts_with('0')))
            .ok_or_else(|| KeyError::Malformed {
                line: n,
                reason: format!("format_version `{version}` is not a canonical decimal u32"),
            })?;
        builder.format_version = format_version;
        for (n, line) in lines {
            let rest = line
                .strip_prefix("option:")
                .ok_or_else(|| KeyError::Malformed { line: n, reason: "expected `option:<name>=<value>`".into() })?;
            let (name, value) = rest
                .split_once('=')
                .ok_or_else(|| KeyError::Malformed { line: n, reason: "option line without `=`".into() })?;
            if builder.options.contains_key(name) {
                return Err(KeyError::Malformed { line: n, reason: format!("option `{name}` appears twice") });
            }
            builder = builder.option(name, value);
        }
        let key = builder.build()?;
        if key.text != text {
            return Err(KeyError::Malformed {
                line: 0,
                reason: "not in canonical form (model hash must be lowercase, options sorted by name)".into(),
            });
        }
        Ok(key)
    }

    /// The canonical text (see the type documentation). This is what the id hashes and what every
    /// entry header stores.
    pub fn canonical_text(&self) -> &str {
        &self.text
    }

    /// The entry id: the first 128 bits of `BLAKE3(canonical text)`, also the entry's file stem.
    pub fn id(&self) -> EntryId {
        self.id
    }

    /// Lowercase hex content hash of the model.
    pub fn model_hash(&self) -> &str {
        &self.model_hash
    }

    /// Canonical shape or bucket text, as supplied by the caller.
    pub fn shape(&self) -> &str {
        &self.shape
    }

    /// Backend name (for example `hip`, `cuda`, `host`).
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// Device architecture (for example `gfx942`, `sm_90`).
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// Compiler name (for example `migraphx`, `nvrtc`).
    pub fn compiler(&self) -> &str {
        &self.compiler
    }

    /// Compiler version text.
    pub fn compiler_version(&self) -> &str {
        &self.compiler_version
    }

    /// saggar's cache format version this key was made for ([`FORMAT_VERSION`] for keys built here).
    pub fn format_version(&self) -> u32 {
        self.format_version
    }

    /// Options that change the generated code, sorted by name.
    pub fn options(&self) -> &BTreeMap<String, String> {
        &self.options
    }
}

/// Builder for [`CacheKey`]; see [`CacheKey::builder`].
#[derive(Debug, Clone)]
pub struct CacheKeyBuilder {
    model_hash: Option<String>,
    shape: Option<String>,
    backend: Option<String>,
    arch: Option<String>,
    compiler: Option<String>,
    compiler_version: Option<String>,
    format_version: u32,
    options: BTreeMap<String, String>,
}

impl Default for CacheKeyBuilder {
    fn default() -> Self {
        CacheKeyBuilder {
            model_hash: None,
            shape: None,
            backend: None,
            arch: None,
            compiler: None,
            compiler_version: None,
            format_version: FORMAT_VERSION,
            options: BTreeMap::new(),
        }
    }
}

impl CacheKeyBuilder {
    /// Hex content hash of the model (16 to 128 hex digits; upper case is folded to lower case),
    /// checked by [`CacheKeyBuilder::build`]. Pass a [`ModelHash`] (checked when it was made, see
    /// [`ModelHash::parse`] and [`ModelHash::of_bytes`]) to fail where a bad value is given.
    pub fn model_hash(mut self, hex: impl Into<String>) -> Self {
        self.model_hash = Some(hex.into().to_ascii_lowercase());
        self
    }

    /// Canonical shape or bucket text (for example saggar-shape's stable shape key).
    pub fn shape(mut self, shape: impl Into<String>) -> Self {
        self.shape = Some(shape.into());
        self
    }

    /// Backend name.
    pub fn backend(mut self, backend: impl Into<String>) -> Self {
        self.backend = Some(backend.into());
        self
    }

    /// Device architecture.
    pub fn arch(mut self, arch: impl Into<String>) -> Self {
        self.arch = Some(arch.into());
        self
    }

    /// Compiler name.
    pub fn compiler(mut self, compiler: impl Into<String>) -> Self {
        self.compiler = Some(compiler.into());
        self
    }

    /// Compiler version.
    pub fn compiler_version(mut self, version: impl Into<String>) -> Self {
        self.compiler_version = Some(version.into());
        self
    }

    /// Adds (or replaces) an option that changes the generated code. Options that do not change
    /// the code must not be part of the key: they would only split the cache.
    pub fn option(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.insert(name.into(), value.into());
        self
    }

    /// Validates the fields and computes the canonical text and the id.
    pub fn build(self) -> Result<CacheKey, KeyError> {
        let model_hash = String::from(ModelHash::parse(required("model_hash", self.model_hash)?)?);
        let shape = required("shape", self.shape)?;
        let backend = required("backend", self.backend)?;
        let arch = required("arch", self.arch)?;
        let compiler = required("compiler", self.compiler)?;
        let compiler_version = required("compiler_version", self.compiler_version)?;
        for (field, value) in [
            ("shape", &shape),
            ("backend", &backend),
            ("arch", &arch),
            ("compiler", &compiler),
            ("compiler_version", &compiler_version),
        ] {
            check_text(field, value)?;
        }
        for (name, value) in &self.options {
            if name.is_empty() || name.contains('=') {
                return Err(KeyError::InvalidOptionName { name: name.clone() });
            }
            check_text(&format!("option:{name}"), name)?;
            check_text(&format!("option:{name}"), value)?;
        }

        let mut text = String::with_capacity(256);
        text.push_str(KEY_TEXT_HEADER);
        text.push('\n');
        for (field, value) in [
            ("model_hash", &model_hash),
            ("shape", &shape),
            ("backend", &backend),
            ("arch", &arch),
            ("compiler", &compiler),
            ("compiler_version", &compiler_version),
        ] {
            text.push_str(field);
            text.push('=');
            text.push_str(value);
            text.push('\n');
        }
        text.push_str(&format!("format_version={}\n", self.format_version));
        for (name, value) in &self.options {
            text.push_str("option:");
            text.push_str(name);
            text.push('=');
            text.push_str(value);
            text.push('\n');
        }
        if text.len() > MAX_KEY_TEXT_LEN {
            return Err(KeyError::TooLong { field: "key text".into(), len: text.len(), max: MAX_KEY_TEXT_LEN });
        }
        let id = EntryId::of_text(&text);
        Ok(CacheKey {
            model_hash,
            shape,
            backend,
            arch,
            compiler,
            compiler_version,
            format_version: self.format_version,
            options: self.options,
            text,
            id,
        })
    }
}

fn required(field: &'static str, value: Option<String>) -> Result<String, KeyError> {
    match value {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(KeyError::MissingField { field }),
    }
}

fn check_text(field: &str, value: &str) -> Result<(), KeyError> {
    if value.len() > MAX_FIELD_LEN {
        return Err(KeyError::TooLong { field: field.to_owned(), len: value.len(), max: MAX_FIELD_LEN });
    }
    if value.chars().any(char::is_control) {
        return Err(KeyError::ControlCharacter { field: field.to_owned() });
    }
    Ok(())
}

/// A 128-bit entry id: the first 16 bytes of `BLAKE3(canonical key text)`.
///
/// Displayed (and used as the entry file stem) as 32 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId([u8; ENTRY_ID_LEN]);

impl EntryId {
    fn of_text(text: &str) -> EntryId {
        let digest = blake3::hash(text.as_bytes());
        let mut id = [0u8; ENTRY_ID_LEN];
        id.copy_from_slice(&digest.as_bytes()[..ENTRY_ID_LEN]);
        EntryId(id)
    }

    /// The raw id bytes.
    pub fn as_bytes(&self) -> &[u8; ENTRY_ID_LEN] {
        &self.0
    }

    /// 32 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for EntryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for EntryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EntryId({self})")
    }
}

/// Error parsing an [`EntryId`] from text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an entry id (32 lowercase hex digits)")]
pub struct ParseEntryIdError(String);

impl FromStr for EntryId {
    type Err = ParseEntryIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = s.as_bytes();
        if bytes.len() != ENTRY_ID_LEN * 2 {
            return Err(ParseEntryIdError(s.to_owned()));
        }
        let mut id = [0u8; ENTRY_ID_LEN];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let hi = lower_hex_value(pair[0]);
            let lo = lower_hex_value(pair[1]);
            match (hi, lo) {
                (Some(hi), Some(lo)) => id[i] = hi << 4 | lo,
                _ => return Err(ParseEntryIdError(s.to_owned())),
            }
        }
        Ok(EntryId(id))
    }
}

fn lower_hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(crate) fn sample() -> CacheKey {
        CacheKey::builder()
            .model_hash("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
            .shape("batch=4;input:f32[4,3,224,224]")
            .backend("hip")
            .arch("gfx942")
            .compiler("migraphx")
            .compiler_version("2.12.0")
            .option("fp16", "true")
            .option("exhaustive_tune", "false")
            .build()
            .unwrap()
    }

    #[test]
    fn canonical_text_has_fixed_order_and_sorted_options() {
        let key = sample();
        assert_eq!(
            key.canonical_text(),
            "saggar-cache-key/1\n\
             model_hash=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n\
             shape=batch=4;input:f32[4,3,224,224]\n\
             backend=hip\n\
             arch=gfx942\n\
             compiler=migraphx\n\
             compiler_version=2.12.0\n\
             format_version=2\n\
             option:exhaustive_tune=false\n\
             option:fp16=true\n"
        );
        let digest = blake3::hash(key.canonical_text().as_bytes()).to_hex();
        assert_eq!(key.id().to_hex(), &digest[..32]);
    }

    #[test]
    fn every_field_changes_the_id() {
        let base = sample();
        let variants = [
            CacheKey::builder().model_hash("0f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
            CacheKey::builder().shape("batch=8;input:f32[8,3,224,224]"),
            CacheKey::builder().backend("cuda"),
            CacheKey::builder().arch("gfx90a"),
            CacheKey::builder().compiler("other"),
            CacheKey::builder().compiler_version("2.12.1"),
        ];
        for v in variants {
            let v = CacheKeyBuilder {
                model_hash: v.model_hash.or(Some(base.model_hash.clone())),
                shape: v.shape.or(Some(base.shape.clone())),
                backend: v.backend.or(Some(base.backend.clone())),
                arch: v.arch.or(Some(base.arch.clone())),
                compiler: v.compiler.or(Some(base.compiler.clone())),
                compiler_version: v.compiler_version.or(Some(base.compiler_version.clone())),
                format_version: FORMAT_VERSION,
                options: base.options.clone(),
            }
            .build()
            .unwrap();
            assert_ne!(v.id(), base.id(), "{v:?}");
        }
        let plain = CacheKey::builder()
            .model_hash(base.model_hash())
            .shape(base.shape())
            .backend(base.backend())
            .arch(base.arch())
            .compiler(base.compiler())
            .compiler_version(base.compiler_version());
        let mut next_format = plain.clone();
        next_format.format_version = FORMAT_VERSION + 1;
        let plain_id = plain.clone().build().unwrap().id();
        assert_ne!(next_format.build().unwrap().id(), plain_id);
        assert_ne!(plain.option("x", "").build().unwrap().id(), plain_id);
    }

    #[test]
    fn rejects_bad_fields() {
        let ok = || {
            CacheKey::builder()
                .model_hash("00112233445566778899aabbccddeeff")
                .shape("s")
                .backend("b")
                .arch("a")
                .compiler("c")
                .compiler_version("v")
        };
        assert!(ok().build().is_ok());
        assert!(matches!(ok().shape("").build(), Err(KeyError::MissingField { field: "shape" })));
        assert!(matches!(ok().shape("a\nb").build(), Err(KeyError::ControlCharacter { .. })));
        assert!(matches!(ok().model_hash("xyz").build(), Err(KeyError::InvalidModelHash { .. })));
        assert!(matches!(ok().option("a=b", "c").build(), Err(KeyError::InvalidOptionName { .. })));
        assert!(matches!(ok().option("a", "x\ry").build(), Err(KeyError::ControlCharacter { .. })));
        assert!(matches!(ok().arch("x".repeat(MAX_FIELD_LEN + 1)).build(), Err(KeyError::TooLong { .. })));
        // Upper-case hex is folded so the same digest always gives the same key.
        assert_eq!(ok().model_hash("00112233445566778899AABBCCDDEEFF").build().unwrap(), ok().build().unwrap());
    }

    #[test]
    fn parse_rejects_non_canonical_text() {
        let text = sample().canonical_text().to_owned();
        assert!(CacheKey::from_canonical_text(&text).is_ok());
        assert!(CacheKey::from_canonical_text(text.trim_end()).is_err());
        let swapped = text.replace(
            "option:exhaustive_tune=false\noption:fp16=true\n",
            "option:fp16=true\noption:exhaustive_tune=false\n",
        );
        assert!(CacheKey::from_canonical_text(&swapped).is_err());
        let upper = text.replace("9f86d", "9F86D");
        assert!(CacheKey::from_canonical_text(&upper).is_err());
        let leading_zero = text.replace("format_version=2", "format_version=02");
        assert!(CacheKey::from_canonical_text(&leading_zero).is_err());
        let dup = format!("{text}option:fp16=true\n");
        assert!(CacheKey::from_canonical_text(&dup).is_err());
        assert!(CacheKey::from_canonical_text("").is_err());
        assert!(CacheKey::from_canonical_text("saggar-cache-key/2\n").is_err());
    }

    #[test]
    fn entry_id_round_trips_through_text() {
        let id = sample().id();
        assert_eq!(id.to_hex().parse::<EntryId>().unwrap(), id);
        assert!("ABCDEF00112233445566778899aabbcc".parse::<EntryId>().is_err());
        assert!("abc".parse::<EntryId>().is_err());
    }

    fn field() -> impl Strategy<Value = String> {
        "[^\\p{Cc}]{1,24}"
    }

    proptest! {
        #[test]
        fn canonical_text_round_trips(
            hash in "[0-9a-f]{16,128}",
            shape in field(), backend in field(), arch in field(),
            compiler in field(), version in field(),
            options in proptest::collection::btree_map("[^\\p{Cc}=]{1,12}", "[^\\p{Cc}]{0,12}", 0..5),
        ) {
            let mut b = CacheKey::builder()
                .model_hash(hash).shape(shape).backend(backend).arch(arch)
                .compiler(compiler).compiler_version(version);
            for (k, v) in options {
                b = b.option(k, v);
            }
            let key = b.build().unwrap();
            let parsed = CacheKey::from_canonical_text(key.canonical_text()).unwrap();
            prop_assert_eq!(parsed.id(), key.id());
            prop_assert_eq!(parsed, key);
        }
    }
}
