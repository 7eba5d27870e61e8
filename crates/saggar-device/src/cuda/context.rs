//! Which CUDA context is current on each thread.
//!
//! Every device uses its primary context ([`PrimaryContext`], retained on open and released when the
//! last object of the device is gone). Driver calls act on the context current on the calling thread,
//! so every operation makes its device's context current first ([`make_current`]). saggar remembers, per
//! thread, the context it last made current, so on the launch path this is one thread-local compare and
//! no driver call.
//!
//! The cache is saggar's view of the thread: code outside saggar that changes the current context on a
//! thread saggar also uses (a `cuCtxSetCurrent` of its own) must restore it, or saggar may issue work into
//! the context that code left current. [`crate::Device::pin`] reads the driver's real current context and
//! restores exactly that on unpin.
//!
//! Destructors use [`with_context`], which makes the object's context current only for the call and
//! then restores what was current: a buffer of device 1 dropped on a thread where device 0 is pinned is
//! freed in device 1's context and leaves device 0 current.

use std::cell::Cell;
use std::ptr;

use cudarc::driver::sys;

use crate::cuda::result;
use crate::error::Result;

thread_local! {
    /// The context saggar last made current on this thread (null: none, or unknown).
    static CURRENT: Cell<sys::CUcontext> = const { Cell::new(ptr::null_mut()) };
}

/// Makes `ctx` current on this thread, unless saggar already did.
///
/// `ctx` must be a live context; every caller reaches it through an `Arc` of the device that retains it.
#[inline]
pub(crate) fn make_current(op: &'static str, ctx: sys::CUcontext) -> Result<()> {
    if CURRENT.get() == ctx {
        return Ok(());
    }
    // SAFETY: `ctx` is a retained primary context (see above).
    unsafe { result::ctx::set_current(op, ctx) }?;
    CURRENT.set(ctx);
    Ok(())
}

/// Records that `ctx` is now current on this thread (after a `cuCtxSetCurrent` made elsewhere in saggar).
pub(crate) fn note_current(ctx: sys::CUcontext) {
    // `try_with`: this also runs from guards and destructors, possibly while the thread exits.
    let _ = CURRENT.try_with(|c| c.set(ctx));
}

/// Forgets `ctx` if this thread's cache names it, so the next use sets it again.
pub(crate) fn forget(ctx: sys::CUcontext) {
    let _ = CURRENT.try_with(|c| {
        if c.get() == ctx {
            c.set(ptr::null_mut());
        }
    });
}

/// Runs `f` with `ctx` current, then makes current again what the driver had current before.
///
/// `ctx` must be a live context.
pub(crate) fn with_context<R>(op: &'static str, ctx: sys::CUcontext, f: impl FnOnce() -> Result<R>) -> Result<R> {
    let previous = result::ctx::get_current(op)?;
    if previous == ctx {
        note_current(ctx);
        return f();
    }
    // SAFETY: `ctx` is live (see above).
    unsafe { result::ctx::set_current(op, ctx) }?;
    let out = f();
    // SAFETY: `previous` was current a moment ago, so it is null or a context that is still live: saggar
    // releases a primary context only when no object of its device is left, and an object is running `f`.
    let restored = unsafe { result::ctx::set_current(op, previous) };
    note_current(if restored.is_ok() { previous } else { ctx });
    let value = out?;
    restored.map(|()| value)
}

/// A retain of a device's primary context, released on drop.
///
/// # Thread safety
/// `Send + Sync`. The CUDA documentation: "The primary context is unique per device and shared with the
/// CUDA runtime API." A context handle may be made current on any thread (`cuCtxSetCurrent`: "Binds the
/// specified CUDA context to the calling CPU thread"), on several threads at once.
#[derive(Debug)]
pub(crate) struct PrimaryContext {
    device: sys::CUdevice,
    raw: sys::CUcontext,
}

// SAFETY: the handle is an opaque token the driver accepts from any thread (see the type's docs); saggar
// never dereferences it.
unsafe impl Send for PrimaryContext {}
// SAFETY: as above; every use is a driver call, and the driver API is thread-safe.
unsafe impl Sync for PrimaryContext {}

impl PrimaryContext {
    /// Retains the primary context of `device`.
    pub(crate) fn retain(op: &'static str, device: sys::CUdevice) -> Result<PrimaryContext> {
        let raw = result::primary_ctx::retain(op, device)?;
        Ok(PrimaryContext { device, raw })
    }

    /// The context handle.
    #[inline]
    pub(crate) fn raw(&self) -> sys::CUcontext {
        self.raw
    }

    /// Releases the retain now; `Err` if the driver refused. Idempotent.
    pub(crate) fn release(&mut self) -> Result<()> {
        let raw = std::mem::replace(&mut self.raw, ptr::null_mut());
        if raw.is_null() {
            return Ok(());
        }
        forget(raw);
        // SAFETY: balances the retain made in `retain`; `raw` was swapped out, so it is released once.
        unsafe { result::primary_ctx::release("device.drop", self.device) }
    }
}

impl Drop for PrimaryContext {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            crate::cuda::device::orphan(e);
        }
    }
}
