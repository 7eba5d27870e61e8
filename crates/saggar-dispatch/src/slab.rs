//! An append-only table read by index without locks: the session's main programs (and their
//! staging spans). Live re-bucketing appends programs while requests run; an index, once handed
//! out by a bucket table, names the same program for the session's life, so a request that read
//! an older table still runs the program it chose.

use std::ops::Index;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

pub(crate) struct Slab<T> {
    cells: Box<[OnceLock<T>]>,
    len: AtomicUsize,
}

impl<T> Slab<T> {
    /// A table holding `values`, with room for `capacity` in all.
    pub(crate) fn from_vec(values: Vec<T>, capacity: usize) -> Slab<T> {
        let len = values.len();
        let mut cells: Vec<OnceLock<T>> = values.into_iter().map(OnceLock::from).collect();
        cells.resize_with(capacity.max(len), OnceLock::new);
        Slab { cells: cells.into(), len: AtomicUsize::new(len) }
    }

    /// Publishes `value` at the next index and returns it, or `None` when the table is full.
    /// Callers serialise their pushes (the refit lock); readers never wait.
    pub(crate) fn push(&self, value: T) -> Option<usize> {
        let index = self.len.load(Ordering::Acquire);
        self.cells.get(index)?.set(value).ok()?;
        self.len.store(index + 1, Ordering::Release);
        Some(index)
    }

    /// Values published.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Room left.
    pub(crate) fn remaining(&self) -> usize {
        self.cells.len() - self.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T> Index<usize> for Slab<T> {
    type Output = T;

    fn index(&self, index: usize) -> &T {
        // Indices come from bucket tables, which are published after the values they name.
        self.cells[index].get().expect("a bucket table names only published programs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_until_full_and_reads_by_index() {
        let slab = Slab::from_vec(vec![10, 11], 3);
        assert_eq!((slab.len(), slab.remaining()), (2, 1));
        assert_eq!(slab.push(12), Some(2));
        assert_eq!(slab.push(13), None);
        assert_eq!(slab[2], 12);
        assert_eq!((slab[0], slab[1]), (10, 11));
    }
}
