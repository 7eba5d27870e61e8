//! Device pinning per thread.
//!
//! The parallel-warmup seed found compiles, loads and graph captures landing on the wrong GPU when N
//! sessions started at once. saggar makes the device explicit: [`crate::Device::pin`] returns a guard
//! that makes the device current on this thread, and every operation of every backend calls
//! [`check_pinned`] first, so an object of device 1 used while device 0 is pinned is a typed error,
//! not work on the wrong GPU.

use std::cell::RefCell;
use std::marker::PhantomData;

use crate::error::{Error, Result};
use crate::types::BackendKind;

thread_local! {
    static PINNED: RefCell<Vec<(BackendKind, usize)>> = const { RefCell::new(Vec::new()) };
}

/// Keeps a device pinned to the current thread; unpins (and restores the previous device) on drop.
/// Not `Send`: a pin belongs to the thread that made it.
#[must_use = "the device is unpinned when the guard drops"]
pub struct PinGuard {
    restore: Option<Box<dyn FnOnce()>>,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for PinGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinGuard").finish_non_exhaustive()
    }
}

impl PinGuard {
    /// Pins `(backend, ordinal)` to this thread. `restore` runs when the guard drops, after the pin is
    /// popped; backends use it to make the previously current device current again.
    pub fn push(backend: BackendKind, ordinal: usize, restore: Option<Box<dyn FnOnce()>>) -> PinGuard {
        PINNED.with(|p| p.borrow_mut().push((backend, ordinal)));
        PinGuard { restore, _not_send: PhantomData }
    }
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        PINNED.with(|p| {
            p.borrow_mut().pop();
        });
        if let Some(restore) = self.restore.take() {
            restore();
        }
    }
}

/// The device of `backend` pinned to this thread, if any.
pub fn pinned_device(backend: BackendKind) -> Option<usize> {
    PINNED.with(|p| p.borrow().iter().rev().find(|(b, _)| *b == backend).map(|(_, o)| *o))
}

/// Fails with [`Error::WrongDevice`] if another device of the same backend is pinned to this thread.
#[inline]
pub fn check_pinned(op: &'static str, backend: BackendKind, ordinal: usize) -> Result<()> {
    match pinned_device(backend) {
        Some(current) if current != ordinal => Err(Error::WrongDevice { op, backend, expected: ordinal, current }),
        _ => Ok(()),
    }
}
