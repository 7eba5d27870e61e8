//! BLAS-Lt on a GPU backend, written once for cuBLASLt and hipBLASLt: their APIs have the same
//! functions with the same arguments under two prefixes, and differ only in enum numbers and the size
//! of the heuristic result, which a vendor states in its [`LtSpec`]. The library is loaded at run time
//! with libloading (cudarc's own loader panics when the library is absent and cannot be pointed at a
//! path), so a missing library is [`Error::LibraryUnavailable`](crate::Error::LibraryUnavailable)
//! naming the files tried.
//!
//! The row-major matmul of [`crate::blas`] is the column-major `C^T = op(B)^T op(A)^T`: the vendor's
//! `A` is our `B` and its `B` our `A`, every matrix is read with the leading dimension of its row-major
//! storage, and a bias over the columns of our `C` is the vendor's bias over the rows of `D`.
//!
//! The work is split by job: `library.rs` loads the library and turns its statuses into errors,
//! `plan.rs` makes a description into the library's objects, and `algorithm.rs` chooses (and, when
//! asked, times) the algorithm a plan launches. This module holds the handle, [`GpuBlas`].

mod algorithm;
mod library;
mod plan;

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

use parking_lot::Mutex;

use self::algorithm::MAX_TUNE_CANDIDATES;
use self::library::{Handle, LtApi, SetAttr, check, load, with_matmul};
pub use self::library::{LtSpec, probe_library};
use self::plan::{Plan, PlanKey, alignment};
use crate::api::Stream as _;
use crate::blas::{Blas, BlasConfig, MatmulDesc, MatmulOperands};
use crate::error::Result;
use crate::gpu::device::{self, DeviceShared};
use crate::gpu::driver::Driver;
use crate::gpu::{Device, GpuBackend, Stream};
use crate::rules;

/// The handle's state behind its `Arc`.
struct Shared<D: Driver> {
    device: Arc<DeviceShared<D>>,
    api: Arc<LtApi>,
    handle: Handle,
    workspace_bytes: usize,
    /// [`BlasConfig::tune_candidates`].
    tune_candidates: usize,
    /// One plan per description and alignment. The lock is this handle's, never global, and held only
    /// to find a plan.
    plans: Mutex<HashMap<PlanKey, Arc<Plan>>>,
}

/// A BLAS-Lt handle of a GPU device ([`Blas`]).
///
/// # Thread safety
/// `Send + Sync`: the library's handle may be used from any thread (cuBLASLt: "the cuBLASLt handle is
/// thread safe"), and the plans are behind this handle's lock.
pub struct GpuBlas<D: Driver> {
    shared: Arc<Shared<D>>,
}

// SAFETY: the raw handles are owned by this value and destroyed once, in `Drop`; the libraries allow
// their use from any thread, and the only write to a plan after planning (its bias pointer) happens
// under that plan's lock.
unsafe impl<D: Driver> Send for Shared<D> {}
// SAFETY: as above.
unsafe impl<D: Driver> Sync for Shared<D> {}

impl<D: Driver> std::fmt::Debug for GpuBlas<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuBlas")
            .field("library", &D::BLAS_LT.library)
            .field("device", &self.shared.device.ordinal())
            .field("workspace_bytes", &self.shared.workspace_bytes)
            .finish()
    }
}

impl<D: Driver> GpuBlas<D> {
    pub(crate) fn new(device: &Device<D>, config: &BlasConfig) -> Result<GpuBlas<D>> {
        let op = "device.create_blas";
        device.shared.enter(op)?;
        device::forbid_during_capture::<D>(op)?;
        let api = load(D::BLAS_LT, config.library_path.as_ref())?;
        let mut handle = std::ptr::null_mut();
        // Creating a handle loads and allocates the library's device state: kept apart from captures.
        // SAFETY: `handle` is writable; the device's context is current (entered above).
        check::<D>(op, device::loading_code::<D, _>(|| unsafe { (api.create)(&mut handle) }))?;
        Ok(GpuBlas {
            shared: Arc::new(Shared {
                device: device.shared.clone(),
                api,
                handle,
                workspace_bytes: config.workspace_bytes,
                tune_candidates: config.tune_candidates.min(MAX_TUNE_CANDIDATES),
                plans: Mutex::new(HashMap::new()),
            }),
        })
    }
}

impl<D: Driver> Shared<D> {
    /// Sets one attribute of a descriptor, layout or preference.
    ///
    /// # Safety
    /// `object` is a live object of the kind `set` belongs to.
    unsafe fn set<T>(&self, op: &'static str, set: SetAttr, object: Handle, attr: c_int, value: &T) -> Result<()> {
        let bytes = std::mem::size_of::<T>();
        // SAFETY: `value` is readable for `bytes`; `object` is live (this function's contract).
        check::<D>(op, unsafe { set(object, attr, (value as *const T).cast(), bytes) })
    }
}

impl<D: Driver> Drop for Shared<D> {
    fn drop(&mut self) {
        // The library releases the handle's resources in the device's context.
        if let Err(e) = self.device.enter("blas.drop") {
            self.device.defer(e);
        }
        // Only the map holds plans once no call is running (calls borrow the handle).
        let plans: Vec<Plan> = self.plans.get_mut().drain().filter_map(|(_, p)| Arc::into_inner(p)).collect();
        let mut first = Ok(());
        for plan in plans {
            first = first.and(self.destroy(plan));
        }
        if !self.handle.is_null() {
            let handle = std::mem::replace(&mut self.handle, std::ptr::null_mut());
            // Destroying it frees the library's device state: kept apart from captures.
            // SAFETY: the handle is live and destroyed once (replaced by null above).
            let destroyed = device::loading_code::<D, _>(|| unsafe { (self.api.destroy)(handle) });
            first = first.and(check::<D>("blas.drop", destroyed));
        }
        if let Err(e) = first {
            self.device.defer(e);
        }
    }
}

impl<D: Driver> Blas for GpuBlas<D> {
    type Backend = GpuBackend<D>;

    fn workspace_bytes(&self) -> usize {
        self.shared.workspace_bytes
    }

    fn prepare(&self, desc: &MatmulDesc) -> Result<()> {
        rules::check_matmul_desc(desc)?;
        self.shared.plan_for(desc, alignment(desc, &[]), true).map(drop)
    }

    unsafe fn matmul(&self, stream: &Stream<D>, desc: &MatmulDesc, operands: &MatmulOperands) -> Result<()> {
        let op = "blas.matmul";
        let shared = &*self.shared;
        rules::check_matmul(desc, operands, shared.workspace_bytes)?;
        rules::check_same_device(op, stream.device_ordinal(), shared.device.ordinal())?;
        let bias_ptr = operands.bias.map_or(0, |b| b.ptr().0);
        let ptrs = [operands.a.ptr().0, operands.b.ptr().0, operands.c.ptr().0, bias_ptr];
        let plan = shared.plan_for(desc, alignment(desc, &ptrs), false)?;
        let [a, b, c] = plan.layouts;
        stream.enqueue_library(op, |raw| {
            let _bias_guard = operands.bias.map(|bias| {
                let guard = plan.bias.lock();
                let attr = D::BLAS_LT.desc_attrs[3];
                let ptr = bias.ptr().0 as *const c_void;
                // SAFETY: the descriptor is live; under the plan's bias lock no other call reads or
                // writes its bias pointer until this call has read it.
                unsafe { shared.set(op, shared.api.desc_set, plan.desc, attr, &ptr) }.map(|()| guard)
            });
            let _bias_guard = _bias_guard.transpose()?;
            let workspace = operands.workspace.ptr().0 as *mut c_void;
            // SAFETY: every handle is live; the operands were checked against the description and the
            // caller promised they stay live (this function's contract); alpha and beta are host values
            // of the scale type read during the call; the algorithm was chosen for this descriptor,
            // these layouts and operands of this alignment.
            check::<D>(op, unsafe {
                (shared.api.matmul)(
                    shared.handle,
                    plan.desc,
                    (&plan.alpha as *const u32).cast(),
                    operands.b.ptr().0 as *const c_void,
                    a,
                    operands.a.ptr().0 as *const c_void,
                    b,
                    (&plan.beta as *const u32).cast(),
                    operands.c.ptr().0 as *const c_void,
                    c,
                    operands.c.ptr().0 as *mut c_void,
                    c,
                    plan.algo.as_ptr().cast(),
                    workspace,
                    shared.workspace_bytes,
                    D::blas_stream(raw),
                )
            })
            .map_err(|e| with_matmul(e, desc, &ptrs, workspace as u64, shared.workspace_bytes))
        })
    }
}
