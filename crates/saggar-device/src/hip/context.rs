//! Which HIP device is current on each thread.
//!
//! HIP has no contexts to retain: the runtime API acts on the device current on the calling thread
//! (`hipSetDevice`: "Set default device to be used for subsequent hip API calls from this thread"), so
//! every operation makes its device current first ([`make_current`]). saggar remembers, per thread, the
//! device it last made current, so on the launch path this is one thread-local compare and no HIP call.
//! This is the HIP counterpart of the CUDA backend's `context.rs`.
//!
//! The cache is saggar's view of the thread: code outside saggar that calls `hipSetDevice` on a thread saggar
//! also uses must restore the device it found, or saggar may issue work (allocations, module loads,
//! graph instantiations) onto the device that code left current. [`crate::Device::pin`] reads HIP's real
//! current device and restores exactly that on unpin.
//!
//! Destructors use [`with_device`], which makes the object's device current only for the call and then
//! restores what was current: a buffer of device 1 dropped on a thread where device 0 is pinned is freed
//! with device 1 current and leaves device 0 current.

use std::cell::Cell;
use std::ffi::c_int;

use crate::error::Result;
use crate::hip::result;

/// No device is known to be current (HIP's default is device 0, but saggar does not assume it).
const UNKNOWN: c_int = -1;

thread_local! {
    /// The device saggar last made current on this thread ([`UNKNOWN`]: none, or unknown).
    static CURRENT: Cell<c_int> = const { Cell::new(UNKNOWN) };
}

/// Makes device `ordinal` current on this thread, unless saggar already did.
#[inline]
pub(crate) fn make_current(op: &'static str, ordinal: c_int) -> Result<()> {
    if CURRENT.get() == ordinal {
        return Ok(());
    }
    result::device::set(op, ordinal)?;
    CURRENT.set(ordinal);
    Ok(())
}

/// Records that `ordinal` is now current on this thread (after a `hipSetDevice` made elsewhere in saggar).
pub(crate) fn note_current(ordinal: c_int) {
    // `try_with`: this also runs from guards and destructors, possibly while the thread exits.
    let _ = CURRENT.try_with(|c| c.set(ordinal));
}

/// Runs `f` with device `ordinal` current, then makes current again what HIP had current before.
pub(crate) fn with_device<R>(op: &'static str, ordinal: c_int, f: impl FnOnce() -> Result<R>) -> Result<R> {
    let previous = result::device::get(op)?;
    if previous == ordinal {
        note_current(ordinal);
        return f();
    }
    result::device::set(op, ordinal)?;
    let out = f();
    let restored = result::device::set(op, previous);
    if restored.is_ok() {
        note_current(previous);
    } else {
        note_current(ordinal);
    }
    let value = out?;
    restored.map(|()| value)
}
