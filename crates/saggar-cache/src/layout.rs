//! File names in the cache directory. Entries, lock files and temp files have disjoint name
//! shapes, so no listing can ever take a temp or lock file for an entry:
//!
//! | file       | name                                   |
//! |------------|----------------------------------------|
//! | entry      | `<id>.sce` (32 lowercase hex digits)   |
//! | lock file  | `<id>.sce.lock`                        |
//! | temp file  | `.saggar-tmp.<id>.<pid>.<nonce>`         |
//! | probe lock | `.saggar-cache.lock`                     |
//!
//! Temp names start with a dot and never end in `.sce`; an entry name is exactly 36 bytes.

use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::key::EntryId;

/// Extension of entry files.
pub const ENTRY_EXTENSION: &str = "sce";
pub(crate) const TEMP_PREFIX: &str = ".saggar-tmp.";
pub(crate) const PROBE_LOCK_NAME: &str = ".saggar-cache.lock";

/// What a directory item is, judged by its name alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Item {
    Entry(EntryId),
    Lock(EntryId),
    Temp(EntryId),
    Other,
}

pub(crate) fn entry_name(id: EntryId) -> String {
    format!("{id}.{ENTRY_EXTENSION}")
}

pub(crate) fn lock_name(id: EntryId) -> String {
    format!("{id}.{ENTRY_EXTENSION}.lock")
}

pub(crate) fn temp_name(id: EntryId) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    format!("{TEMP_PREFIX}{id}.{}.{t:x}{n:x}", std::process::id())
}

pub(crate) fn classify(name: &OsStr) -> Item {
    let Some(name) = name.to_str() else {
        return Item::Other;
    };
    if let Some(rest) = name.strip_prefix(TEMP_PREFIX) {
        return match rest.get(..32).and_then(|h| h.parse().ok()) {
            Some(id) if rest.as_bytes().get(32) == Some(&b'.') => Item::Temp(id),
            _ => Item::Other,
        };
    }
    let Some((stem, ext)) = name.split_once('.') else {
        return Item::Other;
    };
    let Ok(id) = stem.parse::<EntryId>() else {
        return Item::Other;
    };
    match ext {
        "sce" => Item::Entry(id),
        "sce.lock" => Item::Lock(id),
        _ => Item::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_never_overlap() {
        let id: EntryId = "0123456789abcdef0123456789abcdef".parse().unwrap();
        assert_eq!(classify(entry_name(id).as_ref()), Item::Entry(id));
        assert_eq!(classify(lock_name(id).as_ref()), Item::Lock(id));
        for _ in 0..100 {
            let t = temp_name(id);
            assert_eq!(classify(t.as_ref()), Item::Temp(id), "{t}");
            assert!(!t.ends_with(".sce"));
        }
        for other in [
            "0123456789ABCDEF0123456789abcdef.sce",
            "0123456789abcdef0123456789abcdef.sce.tmp",
            "0123456789abcdef0123456789abcde.sce",
            ".0123456789abcdef0123456789abcdef.sce",
            ".saggar-tmp.zz",
            PROBE_LOCK_NAME,
            "README",
        ] {
            assert_eq!(classify(other.as_ref()), Item::Other, "{other}");
        }
    }
}
