//! Payload checksums and the verified payload read.
//!
//! The checksum is the standard BLAKE3 hash of the payload (what `b3sum` prints), computed over
//! fixed 256 KiB leaves that are merged with BLAKE3's own tree rules, so several threads can
//! hash one payload and still produce that standard hash. The read path fuses reading and
//! hashing: each thread `pread`s a leaf straight into the final buffer and hashes it while it
//! is still in cache. The buffer is never zero-filled first, which is the only reason this
//! module contains `unsafe`.

use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;

use blake3::hazmat::{ChainingValue, HasherExt, Mode, merge_subtrees_non_root, merge_subtrees_root};

/// Leaf size: a power of two, so every leaf starts a complete BLAKE3 subtree.
const LEAF_LEN: usize = 256 * 1024;

/// Below this, one thread does the work (spawning costs more than it saves).
const PARALLEL_MIN_LEN: usize = 1 << 20;

/// A BLAKE3 digest.
pub(crate) type Digest = [u8; 32];

/// BLAKE3 of `data`, identical to `blake3::hash(data)`, using up to `threads` threads.
pub(crate) fn checksum(data: &[u8], threads: usize) -> Digest {
    if data.len() <= LEAF_LEN {
        return *blake3::hash(data).as_bytes();
    }
    let leaves = data.len().div_ceil(LEAF_LEN);
    let mut cvs = vec![[0u8; 32]; leaves];
    let workers = worker_count(data.len(), leaves, threads);
    let per = leaves.div_ceil(workers);
    std::thread::scope(|s| {
        let mut rest = &mut cvs[..];
        let mut first = 0;
        while !rest.is_empty() {
            let n = per.min(rest.len());
            let (mine, tail) = rest.split_at_mut(n);
            rest = tail;
            let mut job = move || {
                for (i, cv) in mine.iter_mut().enumerate() {
                    let start = (first + i) * LEAF_LEN;
                    let end = (start + LEAF_LEN).min(data.len());
                    *cv = leaf_cv(start, &data[start..end]);
                }
            };
            if rest.is_empty() {
                job();
            } else {
                s.spawn(job);
            }
            first += n;
        }
    });
    root(&cvs, data.len() as u64)
}

/// Reads `len` bytes at `offset` of `file` into a new buffer and returns it with its BLAKE3
/// digest, using up to `threads` threads. Fails with `UnexpectedEof` if the file is shorter.
pub(crate) fn read_with_checksum(
    file: &File,
    offset: u64,
    len: usize,
    threads: usize,
) -> io::Result<(Vec<u8>, Digest)> {
    let mut buf: Vec<u8> = Vec::new();
    buf.try_reserve_exact(len).map_err(|e| io::Error::new(io::ErrorKind::OutOfMemory, e))?;
    let digest = {
        let spare = &mut buf.spare_capacity_mut()[..len];
        if len <= LEAF_LEN {
            let bytes = pread_exact(file, spare, offset)?;
            *blake3::hash(bytes).as_bytes()
        } else {
            let leaves = len.div_ceil(LEAF_LEN);
            let mut cvs = vec![[0u8; 32]; leaves];
            let workers = worker_count(len, leaves, threads);
            let per = leaves.div_ceil(workers);
            std::thread::scope(|s| -> io::Result<()> {
                let mut handles = Vec::with_capacity(workers);
                let mut rest_buf = spare;
                let mut rest_cvs = &mut cvs[..];
                let mut first = 0;
                let mut inline = Ok(());
                while !rest_cvs.is_empty() {
                    let n = per.min(rest_cvs.len());
                    let (cv_part, cv_tail) = rest_cvs.split_at_mut(n);
                    let bytes = (n * LEAF_LEN).min(rest_buf.len());
                    let (buf_part, buf_tail) = rest_buf.split_at_mut(bytes);
                    rest_cvs = cv_tail;
                    rest_buf = buf_tail;
                    let mut job = move || read_leaves(file, offset, first, buf_part, cv_part);
                    if rest_cvs.is_empty() {
                        inline = job();
                    } else {
                        handles.push(s.spawn(job));
                    }
                    first += n;
                }
                let mut result = inline;
                for h in handles {
                    let r = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                    if result.is_ok() {
                        result = r;
                    }
                }
                result
            })?;
            root(&cvs, len as u64)
        }
    };
    // SAFETY: `buf` has capacity for at least `len` bytes (`try_reserve_exact` above), and every
    // byte of `spare[..len]` was written: the single-leaf branch by `pread_exact`, the other
    // branch by `read_leaves` over disjoint ranges covering `0..len`, each of which returned Ok
    // (any error returned early through `?` above, leaving the length at 0).
    unsafe { buf.set_len(len) };
    Ok((buf, digest))
}

fn worker_count(len: usize, leaves: usize, threads: usize) -> usize {
    if len < PARALLEL_MIN_LEN { 1 } else { threads.clamp(1, leaves) }
}

/// Reads the leaves `first..first + cvs.len()` into `buf` and computes their chaining values.
fn read_leaves(
    file: &File,
    offset: u64,
    first: usize,
    buf: &mut [MaybeUninit<u8>],
    cvs: &mut [ChainingValue],
) -> io::Result<()> {
    let mut rest = buf;
    for (i, cv) in cvs.iter_mut().enumerate() {
        let start = (first + i) * LEAF_LEN;
        let n = LEAF_LEN.min(rest.len());
        let (leaf, tail) = rest.split_at_mut(n);
        rest = tail;
        let bytes = pread_exact(file, leaf, offset + start as u64)?;
        *cv = leaf_cv(start, bytes);
    }
    Ok(())
}

/// Fills all of `buf` from `file` at `offset` and returns it as initialised bytes.
fn pread_exact<'a>(file: &File, buf: &'a mut [MaybeUninit<u8>], offset: u64) -> io::Result<&'a [u8]> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        let at =
            libc::off_t::try_from(offset + done as u64).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: `rest` is an exclusively borrowed, writable region of `rest.len()` bytes;
        // `pread` writes at most that many bytes into it and never reads it, so it may be
        // uninitialised. The descriptor is valid for as long as `file` is borrowed.
        let n = unsafe { libc::pread(file.as_raw_fd(), rest.as_mut_ptr().cast(), rest.len(), at) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        done += n as usize;
    }
    // SAFETY: the loop exits only once `pread` has written every byte of `buf`, so all of it is
    // initialised, and `MaybeUninit<u8>` has the layout of `u8`.
    Ok(unsafe { buf.assume_init_ref() })
}

fn leaf_cv(start: usize, leaf: &[u8]) -> ChainingValue {
    blake3::Hasher::new().set_input_offset(start as u64).update(leaf).finalize_non_root()
}

/// Root hash of an input of `len > LEAF_LEN` bytes from the chaining values of its leaves.
fn root(cvs: &[ChainingValue], len: u64) -> Digest {
    let (left, right, left_len) = split(cvs, len);
    let l = subtree(left, left_len);
    let r = subtree(right, len - left_len);
    *merge_subtrees_root(&l, &r, Mode::Hash).as_bytes()
}

fn subtree(cvs: &[ChainingValue], len: u64) -> ChainingValue {
    if cvs.len() == 1 {
        return cvs[0];
    }
    let (left, right, left_len) = split(cvs, len);
    merge_subtrees_non_root(&subtree(left, left_len), &subtree(right, len - left_len), Mode::Hash)
}

fn split(cvs: &[ChainingValue], len: u64) -> (&[ChainingValue], &[ChainingValue], u64) {
    // For len > LEAF_LEN the left subtree is the largest power of two below len, hence a whole
    // number of leaves.
    let left_len = blake3::hazmat::left_subtree_len(len);
    let left_leaves = (left_len / LEAF_LEN as u64) as usize;
    (&cvs[..left_leaves], &cvs[left_leaves..], left_len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Write;

    fn data(len: usize, seed: u8) -> Vec<u8> {
        let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(seed);
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            out.extend_from_slice(&state.to_le_bytes());
        }
        out.truncate(len);
        out
    }

    fn check(d: &[u8], threads: usize) {
        let len = d.len();
        let want = *blake3::hash(d).as_bytes();
        assert_eq!(checksum(d, threads), want, "checksum len {len} threads {threads}");
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"prefix").unwrap();
        f.write_all(d).unwrap();
        f.write_all(b"suffix").unwrap();
        let (read, digest) = read_with_checksum(&f, 6, len, threads).unwrap();
        assert_eq!(digest, want, "read len {len} threads {threads}");
        assert!(read == d, "bytes differ at len {len}");
    }

    #[test]
    fn matches_blake3_at_leaf_boundaries() {
        let all = data(13 * LEAF_LEN + 1, 7);
        for leaves in [0usize, 1, 2, 3, 4, 5, 7, 8, 9, 13] {
            for delta in [-1i64, 0, 1] {
                let len = (leaves * LEAF_LEN) as i64 + delta;
                if len < 0 {
                    continue;
                }
                for threads in [1, 2, 3] {
                    check(&all[..len as usize], threads);
                }
            }
        }
    }

    #[test]
    fn short_file_is_unexpected_eof() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&data(3 * LEAF_LEN, 1)).unwrap();
        for len in [3 * LEAF_LEN + 1, 5 * LEAF_LEN] {
            let e = read_with_checksum(&f, 0, len, 2).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn matches_blake3_for_any_length(len in 0usize..(6 * LEAF_LEN), threads in 1usize..5, seed: u8) {
            check(&data(len, seed), threads);
        }
    }
}
