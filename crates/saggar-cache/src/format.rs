//! The entry file format: a checked header followed by the opaque artifact bytes.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "SAGGARCE" (8 bytes, MAGIC)
//!      8     4  format version, u32 LE (FORMAT_VERSION)
//!     12     4  header length H, u32 LE (offset of the payload)
//!     16     8  payload length P, u64 LE
//!     24    32  BLAKE3 of the payload (b3sum of the payload bytes)
//!     56     4  key text length K, u32 LE
//!     60     K  canonical key text (UTF-8)
//!      .   2+n  backend            (u16 LE length, then UTF-8)
//!      .   2+n  arch               (u16 LE length, then UTF-8)
//!      .   2+n  compiler           (u16 LE length, then UTF-8)
//!      .   2+n  compiler version   (u16 LE length, then UTF-8)
//!   H-32    32  BLAKE3 of header bytes 0..H-32
//!      H     P  payload
//! ```
//!
//! The file length must be exactly `H + P`. The four text fields repeat what the key text says
//! (so tools can read them without parsing the key) and must agree with it.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt as _;

use crate::FORMAT_VERSION;
use crate::error::Corruption;
use crate::key::CacheKey;
use crate::payload::{self, Digest};

/// First 8 bytes of every entry.
pub(crate) const MAGIC: [u8; 8] = *b"SAGGARCE";

const PREFIX_LEN: usize = 60;
const CHECKSUM_LEN: usize = 32;
const MIN_HEADER_LEN: usize = PREFIX_LEN + 4 * 2 + CHECKSUM_LEN;
/// Largest header accepted (the key text is at most 32 KiB, the fields 4 KiB each).
const MAX_HEADER_LEN: usize = 64 * 1024;
/// Bytes read in the first header read; covers typical headers in one system call.
const FIRST_READ_LEN: usize = 4096;

/// A decoded, checked header.
#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub(crate) key: CacheKey,
    pub(crate) header_len: u64,
    pub(crate) payload_len: u64,
    pub(crate) payload_checksum: Digest,
}

/// A read failure: the file is bad, or the OS failed us.
#[derive(Debug)]
pub(crate) enum ReadFailure {
    Corrupt(Corruption),
    Io(io::Error),
}

impl From<Corruption> for ReadFailure {
    fn from(c: Corruption) -> Self {
        ReadFailure::Corrupt(c)
    }
}

/// Encodes the header for `key` and a payload of `payload_len` bytes with checksum `checksum`.
pub(crate) fn encode_header(key: &CacheKey, payload_len: u64, checksum: &Digest) -> Vec<u8> {
    let text = key.canonical_text().as_bytes();
    let fields = [key.backend(), key.arch(), key.compiler(), key.compiler_version()];
    let header_len = PREFIX_LEN + text.len() + fields.iter().map(|f| 2 + f.len()).sum::<usize>() + CHECKSUM_LEN;
    let mut h = Vec::with_capacity(header_len);
    h.extend_from_slice(&MAGIC);
    h.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    // Key validation bounds the text to 32 KiB and each field to 4 KiB, so these fit.
    h.extend_from_slice(&(header_len as u32).to_le_bytes());
    h.extend_from_slice(&payload_len.to_le_bytes());
    h.extend_from_slice(checksum);
    h.extend_from_slice(&(text.len() as u32).to_le_bytes());
    h.extend_from_slice(text);
    for f in fields {
        h.extend_from_slice(&(f.len() as u16).to_le_bytes());
        h.extend_from_slice(f.as_bytes());
    }
    let sum = blake3::hash(&h);
    h.extend_from_slice(sum.as_bytes());
    debug_assert_eq!(h.len(), header_len);
    h
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Reads and checks the header of an entry file of length `file_len`.
pub(crate) fn read_header(file: &File, file_len: u64) -> Result<Header, ReadFailure> {
    if file_len == 0 {
        return Err(Corruption::Empty.into());
    }
    let mut first = [0u8; FIRST_READ_LEN];
    let n = file_len.min(FIRST_READ_LEN as u64) as usize;
    read_exact_at(file, &mut first[..n], 0, file_len)?;
    let got = &first[..n];
    let magic_len = n.min(MAGIC.len());
    if got[..magic_len] != MAGIC[..magic_len] {
        return Err(Corruption::BadMagic.into());
    }
    if n < 16 {
        return Err(Corruption::Truncated { expected: MIN_HEADER_LEN as u64, actual: file_len }.into());
    }
    let version = u32_at(got, 8);
    if version != FORMAT_VERSION {
        return Err(Corruption::UnsupportedVersion { found: version, supported: FORMAT_VERSION }.into());
    }
    let header_len = u32_at(got, 12) as usize;
    if !(MIN_HEADER_LEN..=MAX_HEADER_LEN).contains(&header_len) {
        return Err(Corruption::MalformedHeader("header length out of range").into());
    }
    if file_len < header_len as u64 {
        return Err(Corruption::Truncated { expected: header_len as u64, actual: file_len }.into());
    }
    if header_len <= n {
        Ok(decode_header(&got[..header_len])?)
    } else {
        let mut long = vec![0u8; header_len];
        long[..n].copy_from_slice(got);
        read_exact_at(file, &mut long[n..], n as u64, file_len)?;
        Ok(decode_header(&long)?)
    }
}

fn read_exact_at(file: &File, buf: &mut [u8], at: u64, file_len: u64) -> Result<(), ReadFailure> {
    file.read_exact_at(buf, at).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            // The file shrank under us: only an in-place writer (not saggar) can do that.
            ReadFailure::Corrupt(Corruption::Truncated { expected: file_len, actual: at })
        } else {
            ReadFailure::Io(e)
        }
    })
}

/// Decodes a complete header (`h.len()` is the header length it declares).
pub(crate) fn decode_header(h: &[u8]) -> Result<Header, Corruption> {
    let body_len = h.len() - CHECKSUM_LEN;
    if blake3::hash(&h[..body_len]).as_bytes() != &h[body_len..] {
        return Err(Corruption::HeaderChecksum);
    }
    let payload_len = u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"));
    let payload_checksum: Digest = h[24..56].try_into().expect("32 bytes");
    let text_len = u32_at(h, 56) as usize;
    let mut at = PREFIX_LEN;
    let text = take(h, &mut at, text_len, body_len)?;
    let text = std::str::from_utf8(text).map_err(|_| Corruption::MalformedHeader("key text is not UTF-8"))?;
    let key = CacheKey::from_canonical_text(text)
        .map_err(|_| Corruption::MalformedHeader("key text is not a canonical key"))?;
    let expected = [
        ("backend disagrees with the key", key.backend()),
        ("arch disagrees with the key", key.arch()),
        ("compiler disagrees with the key", key.compiler()),
        ("compiler version disagrees with the key", key.compiler_version()),
    ];
    for (what, want) in expected {
        let len_bytes = take(h, &mut at, 2, body_len)?;
        let len = u16::from_le_bytes([len_bytes[0], len_bytes[1]]) as usize;
        let field = take(h, &mut at, len, body_len)?;
        if field != want.as_bytes() {
            return Err(Corruption::MalformedHeader(what));
        }
    }
    if at != body_len {
        return Err(Corruption::MalformedHeader("field lengths do not add up to the header length"));
    }
    Ok(Header { key, header_len: h.len() as u64, payload_len, payload_checksum })
}

fn take<'a>(h: &'a [u8], at: &mut usize, len: usize, end: usize) -> Result<&'a [u8], Corruption> {
    let stop = at
        .checked_add(len)
        .filter(|&s| s <= end)
        .ok_or(Corruption::MalformedHeader("a field runs past the end of the header"))?;
    let out = &h[*at..stop];
    *at = stop;
    Ok(out)
}

/// Reads the payload described by `header` and checks its length and checksum.
pub(crate) fn read_payload(
    file: &File,
    header: &Header,
    file_len: u64,
    threads: usize,
) -> Result<Vec<u8>, ReadFailure> {
    let expected = header.header_len.saturating_add(header.payload_len);
    if file_len < expected {
        return Err(Corruption::Truncated { expected, actual: file_len }.into());
    }
    if file_len > expected {
        return Err(Corruption::TrailingBytes { expected, actual: file_len }.into());
    }
    let len = usize::try_from(header.payload_len)
        .map_err(|_| ReadFailure::Corrupt(Corruption::MalformedHeader("payload too large")))?;
    let (bytes, digest) = payload::read_with_checksum(file, header.header_len, len, threads).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            ReadFailure::Corrupt(Corruption::Truncated { expected, actual: file_len })
        } else {
            ReadFailure::Io(e)
        }
    })?;
    if digest != header.payload_checksum {
        return Err(Corruption::PayloadChecksum.into());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn key() -> CacheKey {
        CacheKey::builder()
            .model_hash("00112233445566778899aabbccddeeff")
            .shape("batch=2")
            .backend("host")
            .arch("x86_64")
            .compiler("ref")
            .compiler_version("1")
            .build()
            .unwrap()
    }

    fn file_with(bytes: &[u8]) -> File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        f
    }

    fn entry(payload: &[u8]) -> Vec<u8> {
        let mut e = encode_header(&key(), payload.len() as u64, blake3::hash(payload).as_bytes());
        e.extend_from_slice(payload);
        e
    }

    fn read(bytes: &[u8]) -> Result<Vec<u8>, Corruption> {
        let f = file_with(bytes);
        let len = bytes.len() as u64;
        let run = || -> Result<Vec<u8>, ReadFailure> {
            let h = read_header(&f, len)?;
            assert_eq!(h.key, key());
            read_payload(&f, &h, len, 2)
        };
        run().map_err(|e| match e {
            ReadFailure::Corrupt(c) => c,
            ReadFailure::Io(e) => panic!("io error {e}"),
        })
    }

    #[test]
    fn round_trip() {
        for len in [0usize, 1, 1000, 300_000] {
            let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
            assert_eq!(read(&entry(&payload)).unwrap(), payload);
        }
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let good = entry(b"a small artifact");
        for byte in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[byte] ^= 1 << bit;
                assert!(read(&bad).is_err(), "flip of bit {bit} in byte {byte} went unnoticed");
            }
        }
    }

    #[test]
    fn reasons_are_specific() {
        let good = entry(b"payload bytes");
        assert_eq!(read(&[]), Err(Corruption::Empty));
        assert!(matches!(read(&good[..good.len() - 1]), Err(Corruption::Truncated { .. })));
        assert!(matches!(read(&good[..10]), Err(Corruption::Truncated { .. })));
        let mut longer = good.clone();
        longer.push(0);
        assert!(matches!(read(&longer), Err(Corruption::TrailingBytes { .. })));
        let mut magic = good.clone();
        magic[0] = b'X';
        assert_eq!(read(&magic), Err(Corruption::BadMagic));
        let mut version = good.clone();
        version[8] = 9;
        assert_eq!(read(&version), Err(Corruption::UnsupportedVersion { found: 9, supported: FORMAT_VERSION }));
        let mut payload = good.clone();
        *payload.last_mut().unwrap() ^= 0x80;
        assert_eq!(read(&payload), Err(Corruption::PayloadChecksum));
        let mut header = good.clone();
        header[70] ^= 1;
        assert_eq!(read(&header), Err(Corruption::HeaderChecksum));
    }
}
