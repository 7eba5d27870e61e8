//! Shape hashing: a fast in-memory hash and a stable on-disk key.
//!
//! Both hash the same canonical stream, so they agree on what "the same shapes" means: inputs
//! sorted by name (then element type, then extents, so even a list with a repeated name has one
//! order), each written as name, element type, rank and extents. The order in which a caller
//! lists its inputs therefore never changes a hash.
//!
//! # The stable key, version 1
//!
//! [`StableShapeKey`] is the 256-bit output of BLAKE3 in key-derivation mode with the context
//! string [`STABLE_KEY_CONTEXT`], over this byte string (all integers little-endian):
//!
//! | field | encoding |
//! |---|---|
//! | input count | `u64` |
//! | then per input, in canonical order: | |
//! | name length in bytes | `u64` |
//! | name | UTF-8 bytes |
//! | element type | one byte, [`DType::code`] |
//! | rank | `u64` |
//! | extents | one `u64` each, outermost first |
//!
//! Any tool can recompute a key from this table with any BLAKE3 implementation; nothing
//! depends on the process, the platform or a hasher's version. A change to the encoding gets a
//! new context string, so keys of different versions never collide. The test
//! `stable_key_is_pinned` in `tests/hashing.rs` fails if the key of a fixed input changes.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{BuildHasher, Hasher};

use smallvec::SmallVec;

use crate::DType;

/// The BLAKE3 key-derivation context of stable shape keys; it carries the encoding version.
pub const STABLE_KEY_CONTEXT: &str = "saggar-shape 2026-11-22 stable shape key v1";

/// The BLAKE3 key-derivation context of [`StableShapeKey::with_values`].
pub const VALUE_KEY_CONTEXT: &str = "saggar-shape 2026-11-28 shape key with input values v1";

/// The concrete shape of one named tensor, borrowed from the caller: what a request gives for
/// one input, or what a program produced for one output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorShape<'a> {
    /// The tensor's name.
    pub name: &'a str,
    /// Its element type.
    pub dtype: DType,
    /// Its extents, outermost first.
    pub dims: &'a [u64],
}

impl<'a> TensorShape<'a> {
    /// A borrowed named shape.
    pub const fn new(name: &'a str, dtype: DType, dims: &'a [u64]) -> TensorShape<'a> {
        TensorShape { name, dtype, dims }
    }

    fn canonical_cmp(&self, other: &TensorShape<'_>) -> Ordering {
        (self.name.as_bytes(), self.dtype.code(), self.dims).cmp(&(
            other.name.as_bytes(),
            other.dtype.code(),
            other.dims,
        ))
    }
}

/// A 64-bit hash of a set of named shapes for in-memory maps, independent of the order in
/// which the shapes are listed.
///
/// Uses ahash with fixed seeds: fast and equal across threads of one build, but NOT stable
/// across ahash versions or platforms. Never write it to disk; use [`StableShapeKey`] for that.
/// Sorting the inputs into canonical order allocates only for more than 16 inputs; a model
/// with a [`Signature`](crate::Signature) hashes its per-run [`Bindings`](crate::Bindings)
/// instead, which never sorts.
pub fn fast_hash(inputs: &[TensorShape<'_>]) -> u64 {
    let mut sink = FastSink(fast_hasher());
    encode_canonical(inputs, &mut sink);
    sink.0.finish()
}

/// The fixed-seed ahash hasher behind every fast hash of this crate.
pub(crate) fn fast_hasher() -> ahash::AHasher {
    // Arbitrary constants (the first digits of pi); fixed so every thread and every map agree.
    ahash::RandomState::with_seeds(
        0x243f_6a88_85a3_08d3,
        0x1319_8a2e_0370_7344,
        0xa409_3822_299f_31d0,
        0x082e_fa98_ec4e_6c89,
    )
    .build_hasher()
}

/// A stable 256-bit key of a set of named shapes, for anything written to disk.
///
/// See the [module documentation](self) for the exact byte encoding. Displays as 64 lower-case
/// hex digits.
///
/// ```
/// use saggar_shape::{DType, StableShapeKey, TensorShape};
/// let a = [TensorShape::new("x", DType::F32, &[1, 3]), TensorShape::new("y", DType::I64, &[1])];
/// let b = [a[1], a[0]];
/// assert_eq!(StableShapeKey::of(&a), StableShapeKey::of(&b));
/// assert_eq!(StableShapeKey::of(&a).to_string().len(), 64);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StableShapeKey([u8; 32]);

impl StableShapeKey {
    /// The key of `inputs`, in any order.
    pub fn of(inputs: &[TensorShape<'_>]) -> StableShapeKey {
        let mut sink = StableSink::new();
        encode_canonical(inputs, &mut sink);
        sink.finish()
    }

    /// This key extended with the values of some inputs (their binding index and bytes): the key
    /// of a program that the values fix as well as the shapes (a `shape` or `axes` tensor given as
    /// a model input). Keys with different values, or of different inputs, differ.
    ///
    /// ```
    /// use saggar_shape::{DType, StableShapeKey, TensorShape};
    ///
    /// let key = StableShapeKey::of(&[TensorShape::new("shape", DType::I64, &[2])]);
    /// let a = key.with_values(&[(0, &[1, 0, 0, 0, 0, 0, 0, 0][..])]);
    /// assert_ne!(a, key);
    /// assert_ne!(a, key.with_values(&[(0, &[2, 0, 0, 0, 0, 0, 0, 0][..])]));
    /// assert_eq!(key.with_values(&[]), key);
    /// ```
    pub fn with_values(self, values: &[(usize, &[u8])]) -> StableShapeKey {
        if values.is_empty() {
            return self;
        }
        let mut hasher = blake3::Hasher::new_derive_key(VALUE_KEY_CONTEXT);
        hasher.update(&self.0);
        for (index, bytes) in values {
            hasher.update(&(*index as u64).to_le_bytes());
            hasher.update(&(bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        }
        StableShapeKey(*hasher.finalize().as_bytes())
    }

    /// The key's 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// A key from its 32 bytes.
    pub const fn from_bytes(bytes: [u8; 32]) -> StableShapeKey {
        StableShapeKey(bytes)
    }

    /// The key as 64 lower-case hex digits.
    pub fn to_hex(&self) -> String {
        self.to_string()
    }

    /// Parses 64 hex digits (either case); `None` for anything else.
    pub fn from_hex(hex: &str) -> Option<StableShapeKey> {
        let digits = hex.as_bytes();
        if digits.len() != 64 {
            return None;
        }
        let mut bytes = [0u8; 32];
        for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
            *byte = (hex_value(pair[0])? << 4) | hex_value(pair[1])?;
        }
        Some(StableShapeKey(bytes))
    }
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

impl fmt::Display for StableShapeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(self, f)
    }
}

impl fmt::LowerHex for StableShapeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 64];
        for (pair, byte) in out.chunks_exact_mut(2).zip(self.0) {
            pair[0] = DIGITS[usize::from(byte >> 4)];
            pair[1] = DIGITS[usize::from(byte & 0xf)];
        }
        // Every byte written above is an ASCII hex digit.
        f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for StableShapeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StableShapeKey({self})")
    }
}

/// Where the canonical stream goes: an ahash hasher or a BLAKE3 hasher.
pub(crate) trait CanonicalSink {
    fn bytes(&mut self, bytes: &[u8]);
    fn u64(&mut self, value: u64);
    fn u8(&mut self, value: u8);
}

pub(crate) struct FastSink(pub(crate) ahash::AHasher);

impl CanonicalSink for FastSink {
    fn bytes(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }
    fn u64(&mut self, value: u64) {
        self.0.write_u64(value);
    }
    fn u8(&mut self, value: u8) {
        self.0.write_u8(value);
    }
}

/// Feeds BLAKE3 through a 4 KiB stack buffer: one `update` per four chunks instead of one
/// per field, which lets BLAKE3 hash chunks in parallel and is several times faster for the
/// many tiny fields of a shape list.
pub(crate) struct StableSink {
    hasher: blake3::Hasher,
    buffer: [u8; 4096],
    filled: usize,
}

impl StableSink {
    pub(crate) fn new() -> StableSink {
        StableSink { hasher: blake3::Hasher::new_derive_key(STABLE_KEY_CONTEXT), buffer: [0; 4096], filled: 0 }
    }

    pub(crate) fn finish(mut self) -> StableShapeKey {
        self.flush();
        StableShapeKey(*self.hasher.finalize().as_bytes())
    }

    fn flush(&mut self) {
        self.hasher.update(&self.buffer[..self.filled]);
        self.filled = 0;
    }
}

impl CanonicalSink for StableSink {
    fn bytes(&mut self, bytes: &[u8]) {
        if self.filled + bytes.len() > self.buffer.len() {
            self.flush();
            if bytes.len() > self.buffer.len() {
                self.hasher.update(bytes);
                return;
            }
        }
        self.buffer[self.filled..self.filled + bytes.len()].copy_from_slice(bytes);
        self.filled += bytes.len();
    }
    fn u64(&mut self, value: u64) {
        self.bytes(&value.to_le_bytes());
    }
    fn u8(&mut self, value: u8) {
        self.bytes(&[value]);
    }
}

/// Writes the input count, then each input in canonical order.
fn encode_canonical(inputs: &[TensorShape<'_>], sink: &mut impl CanonicalSink) {
    let mut order: SmallVec<[&TensorShape<'_>; 16]> = inputs.iter().collect();
    order.sort_unstable_by(|a, b| a.canonical_cmp(b));
    sink.u64(order.len() as u64);
    for input in order {
        encode_input(sink, input.name, input.dtype, input.dims);
    }
}

/// One input of the canonical stream: name length, name, dtype code, rank, extents.
pub(crate) fn encode_input(sink: &mut impl CanonicalSink, name: &str, dtype: DType, dims: &[u64]) {
    sink.u64(name.len() as u64);
    sink.bytes(name.as_bytes());
    sink.u8(dtype.code());
    sink.u64(dims.len() as u64);
    for &extent in dims {
        sink.u64(extent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        let key = StableShapeKey::of(&[TensorShape::new("x", DType::F32, &[2, 3])]);
        let hex = key.to_hex();
        assert_eq!(hex.len(), 64);
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_eq!(StableShapeKey::from_hex(&hex), Some(key));
        assert_eq!(StableShapeKey::from_hex(&hex.to_uppercase()), Some(key));
        assert_eq!(StableShapeKey::from_hex(&hex[1..]), None);
        assert_eq!(StableShapeKey::from_hex(&format!("g{}", &hex[1..])), None);
    }

    #[test]
    fn name_boundaries_are_unambiguous() {
        // Length prefixes keep ("ab", "c") and ("a", "bc") apart.
        let a = [TensorShape::new("ab", DType::U8, &[1]), TensorShape::new("c", DType::U8, &[1])];
        let b = [TensorShape::new("a", DType::U8, &[1]), TensorShape::new("bc", DType::U8, &[1])];
        assert_ne!(StableShapeKey::of(&a), StableShapeKey::of(&b));
        assert_ne!(fast_hash(&a), fast_hash(&b));
    }
}
