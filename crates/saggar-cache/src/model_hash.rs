//! The model hash: a validated hex content hash of a model, part of every cache key.

use std::fmt;
use std::str::FromStr;

use crate::key::KeyError;

/// Fewest hex digits a model hash may have (64 bits).
pub const MIN_MODEL_HASH_LEN: usize = 16;

/// Most hex digits a model hash may have (512 bits).
pub const MAX_MODEL_HASH_LEN: usize = 128;

/// A model's content hash: 16 to 128 hex digits, stored in lower case.
///
/// It is checked where it is made, so a bad value fails at the call that supplies it, not later
/// when a cache key is built from it.
///
/// ```
/// use saggar_cache::ModelHash;
///
/// let hash = ModelHash::of_bytes(b"model bytes");
/// assert_eq!(hash.as_str().len(), 64);
/// assert_eq!(ModelHash::parse("00112233445566778899AABBCCDDEEFF")?.as_str(), "00112233445566778899aabbccddeeff");
/// assert!(ModelHash::parse("not hex").is_err());
/// assert!(ModelHash::parse("abcd").is_err(), "too short");
/// # Ok::<(), saggar_cache::KeyError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModelHash(String);

impl ModelHash {
    /// Checks `hex` (16 to 128 hex digits; upper case is folded to lower case).
    pub fn parse(hex: impl Into<String>) -> Result<ModelHash, KeyError> {
        let mut value = hex.into();
        if !(MIN_MODEL_HASH_LEN..=MAX_MODEL_HASH_LEN).contains(&value.len())
            || !value.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(KeyError::InvalidModelHash { value });
        }
        value.make_ascii_lowercase();
        Ok(ModelHash(value))
    }

    /// The BLAKE3 digest of a model's bytes (64 hex digits).
    pub fn of_bytes(model: &[u8]) -> ModelHash {
        ModelHash(blake3::hash(model).to_hex().to_string())
    }

    /// A 256-bit digest (BLAKE3, SHA-256, ...) as 64 hex digits, for models hashed incrementally.
    pub fn from_digest(digest: [u8; 32]) -> ModelHash {
        use std::fmt::Write;
        let mut hex = String::with_capacity(64);
        for byte in digest {
            // Writing to a String cannot fail.
            let _ = write!(hex, "{byte:02x}");
        }
        ModelHash(hex)
    }

    /// The lowercase hex text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ModelHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for ModelHash {
    type Err = KeyError;

    fn from_str(s: &str) -> Result<ModelHash, KeyError> {
        ModelHash::parse(s)
    }
}

impl AsRef<str> for ModelHash {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<ModelHash> for String {
    fn from(hash: ModelHash) -> String {
        hash.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_case_are_checked_where_the_value_is_given() {
        assert!(ModelHash::parse("0".repeat(MIN_MODEL_HASH_LEN - 1)).is_err());
        assert!(ModelHash::parse("0".repeat(MIN_MODEL_HASH_LEN)).is_ok());
        assert!(ModelHash::parse("f".repeat(MAX_MODEL_HASH_LEN)).is_ok());
        assert!(ModelHash::parse("f".repeat(MAX_MODEL_HASH_LEN + 1)).is_err());
        assert!(matches!(
            ModelHash::parse("0123456789abcdeg"),
            Err(KeyError::InvalidModelHash { value }) if value == "0123456789abcdeg"
        ));
        assert_eq!(ModelHash::parse("ABCDEF0123456789").unwrap().as_str(), "abcdef0123456789");
        assert_eq!(ModelHash::of_bytes(b"x").as_str(), blake3::hash(b"x").to_hex().as_str());
        assert_eq!(ModelHash::from_digest(*blake3::hash(b"x").as_bytes()), ModelHash::of_bytes(b"x"));
    }
}
