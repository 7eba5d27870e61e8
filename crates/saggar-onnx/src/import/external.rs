//! External tensor data: elements stored in a side file next to the model.
//!
//! **Architecture Invariant:** a side file is read only if its canonical path (symlinks resolved)
//! lies inside the model's canonical folder; an absolute `location`, a `..` component or a symlink
//! leading out is refused before the file is opened. Offsets and lengths are checked against the
//! file's size and the tensor's byte size before a buffer is allocated.

use saggar_dispatch::FileError;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path};

use crate::error::OnnxError;
use crate::import::limits::ImportLimits;
use crate::import::proto::TensorProto;

/// Reads the `expected_bytes` bytes of `proto`'s external data, relative to `model_dir`.
pub(crate) fn read(
    proto: &TensorProto,
    model_dir: &Path,
    expected_bytes: usize,
    limits: &ImportLimits,
) -> Result<Vec<u8>, OnnxError> {
    let bad = |reason: String| OnnxError::ExternalData { name: proto.name.clone(), reason };
    let mut location = None;
    let (mut offset, mut length) = (0u64, None);
    for entry in &proto.external_data {
        let number = || {
            entry.value.parse::<u64>().map_err(|_| bad(format!("`{}` is not a number: {:?}", entry.key, entry.value)))
        };
        match entry.key.as_str() {
            "location" => location = Some(entry.value.as_str()),
            "offset" => offset = number()?,
            "length" => length = Some(number()?),
            // A checksum is advisory; saggar hashes the model itself for cache keys.
            "checksum" => {}
            other => return Err(bad(format!("unknown key `{other}`"))),
        }
    }
    let location = location.ok_or_else(|| bad("no `location`".into()))?;
    let relative = Path::new(location);
    if location.is_empty() || relative.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(bad(format!(
            "location `{location}` must be a relative path inside the model's folder without `..`"
        )));
    }
    if expected_bytes as u64 > limits.max_external_bytes {
        return Err(OnnxError::TooLarge {
            what: format!("external data of tensor `{}`", proto.name),
            size: expected_bytes as u64,
            limit: limits.max_external_bytes,
            field: "max_external_bytes",
        });
    }
    let dir = model_dir.canonicalize().map_err(FileError::at("resolving the model folder", model_dir))?;
    let joined = dir.join(relative);
    let path = joined.canonicalize().map_err(|e| bad(format!("file `{}` cannot be opened: {e}", joined.display())))?;
    if !path.starts_with(&dir) {
        return Err(bad(format!("`{location}` resolves to `{}`, outside the model's folder", path.display())));
    }
    let mut file = File::open(&path).map_err(|e| bad(format!("file `{}` cannot be opened: {e}", path.display())))?;
    let meta = file.metadata().map_err(|e| bad(format!("file `{}`: {e}", path.display())))?;
    if !meta.is_file() {
        return Err(bad(format!("`{}` is not a regular file", path.display())));
    }
    let length = length.unwrap_or(expected_bytes as u64);
    if length != expected_bytes as u64 {
        return Err(bad(format!("length {length} differs from the {expected_bytes} bytes the tensor's shape needs")));
    }
    let end = offset.checked_add(length).ok_or_else(|| bad("offset + length overflows".into()))?;
    if end > meta.len() {
        return Err(bad(format!(
            "bytes {offset}..{end} lie past the end of `{}` ({} bytes)",
            path.display(),
            meta.len()
        )));
    }
    file.seek(SeekFrom::Start(offset)).map_err(|e| bad(format!("seek: {e}")))?;
    let mut bytes = vec![0u8; expected_bytes];
    file.read_exact(&mut bytes).map_err(|e| bad(format!("read: {e}")))?;
    Ok(bytes)
}
