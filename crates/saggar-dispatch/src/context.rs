//! Run contexts: what one request needs for itself, leased from a pool so concurrent runs share
//! nothing mutable. A context holds a stream, the checked buffers of its current device request,
//! what its last run looked like (for the ultra-fast path) and, in sessions with main programs, the
//! [`Slots`] those programs run on: an arena (stable staging and device slots), scratch memory,
//! graph entries and reusable plans.

use std::sync::Arc;

use saggar_arena::ArenaLease;
use saggar_device::{Backend, DevicePtr, DeviceSlice};
use saggar_shape::{PadPlan, SlicePlan};

use crate::graphs::GraphCache;
use crate::stats::Stats;
use crate::tensors::BindingMode;

/// What the context's last successful run was, for the ultra-fast path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LastRun {
    pub(crate) mode: BindingMode,
    pub(crate) batch: Option<u64>,
    pub(crate) program: usize,
}

pub(crate) struct RunContext<B: Backend> {
    pub(crate) stream: B::Stream,
    pub(crate) last: Option<LastRun>,
    /// The current device request's checked buffers (reused).
    pub(crate) io: DeviceIo,
    /// The session's counters, for work that completes after the request returned ([`crate::Pending`]).
    pub(crate) stats: Arc<Stats>,
    /// What main programs (buckets, or a static model's one program) run on. Sessions with main
    /// programs create every context with slots and per-shape models have none, so a context's
    /// slots are what lets a request run on a main program.
    pub(crate) slots: Option<Slots<B>>,
    /// Host buffers of requests padded along a padded axis, reused run after run.
    pub(crate) padded: crate::path_padded::PaddedIo,
}

/// A context's state for running main programs.
pub(crate) struct Slots<B: Backend> {
    /// Every main program's inputs and outputs, at addresses that never change for the arena's life.
    pub(crate) arena: ArenaLease<B>,
    /// Sized for the main program that needs the most.
    pub(crate) scratch: Option<B::DeviceBuffer>,
    pub(crate) graphs: GraphCache<B>,
    /// Per-run plans and bindings, reused so the hot path allocates nothing.
    pub(crate) pad_plans: Vec<PadPlan>,
    pub(crate) slice_plans: Vec<SlicePlan>,
    pub(crate) inputs: Vec<DeviceSlice>,
    pub(crate) outputs: Vec<DeviceSlice>,
    /// The bucket table epoch whose retired graphs this context has dropped.
    pub(crate) epoch: u64,
}

impl<B: Backend> Slots<B> {
    pub(crate) fn new(arena: ArenaLease<B>, scratch: Option<B::DeviceBuffer>, graphs: GraphCache<B>) -> Self {
        Slots {
            arena,
            scratch,
            graphs,
            pad_plans: Vec::new(),
            slice_plans: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            epoch: 0,
        }
    }

    pub(crate) fn scratch_slice(&self, bytes: usize) -> DeviceSlice {
        match &self.scratch {
            Some(buffer) if bytes > 0 => {
                saggar_device::DeviceBuffer::slice(buffer, 0, bytes).expect("scratch sized for every program")
            }
            Some(buffer) => saggar_device::DeviceBuffer::slice(buffer, 0, 0).expect("empty slice"),
            None => DeviceSlice::from_raw(DevicePtr::NULL, 0),
        }
    }
}

/// A device request's buffers in binding order, checked: inputs then outputs, each trimmed to the
/// bytes the request needs, and their addresses (what a direct-bind graph bakes and compares).
#[derive(Debug, Default, Clone)]
pub(crate) struct DeviceIo {
    pub(crate) slices: Vec<DeviceSlice>,
    pub(crate) pointers: Vec<DevicePtr>,
    pub(crate) inputs: usize,
}

impl DeviceIo {
    #[inline]
    pub(crate) fn clear(&mut self, inputs: usize) {
        self.slices.clear();
        self.pointers.clear();
        self.inputs = inputs;
    }

    #[inline]
    pub(crate) fn push(&mut self, slice: DeviceSlice) {
        self.slices.push(slice);
        self.pointers.push(slice.ptr());
    }

    /// Replaces buffer `index` (inputs first, then outputs).
    #[inline]
    pub(crate) fn set(&mut self, index: usize, slice: DeviceSlice) {
        self.slices[index] = slice;
        self.pointers[index] = slice.ptr();
    }

    #[inline]
    pub(crate) fn inputs(&self) -> &[DeviceSlice] {
        &self.slices[..self.inputs]
    }

    #[inline]
    pub(crate) fn outputs(&self) -> &[DeviceSlice] {
        &self.slices[self.inputs..]
    }
}
