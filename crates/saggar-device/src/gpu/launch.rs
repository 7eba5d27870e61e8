//! What a kernel launch hands the driver ([`PackedArgs`]) and what a capture records of the work it
//! enqueued ([`CapturedOp`]), for drivers that update graphs node by node.

use std::ffi::c_void;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::types::{KernelArg, KernelSignature, LaunchConfig};

/// A kernel launch recorded during a capture.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelLaunch {
    /// The function handle, as an address (it is only compared and handed back to the driver).
    pub function: usize,
    /// The kernel's signature.
    pub signature: Arc<KernelSignature>,
    /// How it was launched.
    pub config: LaunchConfig,
    /// With what.
    pub args: SmallVec<[KernelArg; 8]>,
}

/// An operation a saggar stream enqueued into a capture, in capture order.
#[derive(Debug, Clone, PartialEq)]
pub enum CapturedOp {
    /// A kernel launch: one kernel node.
    Kernel(KernelLaunch),
    /// A copy: one memcpy node. Its parameters are not recorded, so two copies are never known to be
    /// equal.
    Copy,
    /// A memset: one memset node; parameters not recorded either.
    Memset,
    /// A replay of an executable graph: a child-graph node.
    Graph,
}

impl CapturedOp {
    /// The launch, for a kernel node.
    pub fn kernel(&self) -> Option<&KernelLaunch> {
        match self {
            CapturedOp::Kernel(k) => Some(k),
            _ => None,
        }
    }
}

/// One kernel argument's bytes, aligned for any parameter type saggar passes.
#[repr(align(8))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ArgSlot(pub(crate) [u8; 8]);

/// A launch's arguments as `cuLaunchKernel`, `hipModuleLaunchKernel` and kernel-node parameters take
/// them: one pointer per parameter, each to that argument's little-endian bytes
/// ([`KernelArg::to_bytes`]) in an 8-byte slot. The driver reads each parameter's size from the kernel,
/// so a 4-byte parameter reads the first 4 bytes of its slot, which on a little-endian host are the
/// value. Inline up to 12 arguments: no allocation on the launch path.
pub struct PackedArgs {
    slots: SmallVec<[ArgSlot; 12]>,
    params: SmallVec<[*mut c_void; 12]>,
}

impl std::fmt::Debug for PackedArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedArgs").field("slots", &self.slots).finish()
    }
}

impl PackedArgs {
    /// The arguments' bytes.
    #[inline]
    pub fn new(args: &[KernelArg]) -> PackedArgs {
        let slots: SmallVec<[ArgSlot; 12]> = args.iter().map(|a| ArgSlot(a.to_bytes())).collect();
        // Filled in by `as_params`, once `self` is where it stays.
        let params = std::iter::repeat_n(std::ptr::null_mut(), slots.len()).collect();
        PackedArgs { slots, params }
    }

    /// The pointer array; valid while `self` is neither moved nor dropped (the slots live in `self`,
    /// inline up to 12 arguments, so a move would leave the pointers behind; each call points them at
    /// the slots again).
    #[inline]
    pub fn as_params(&mut self) -> *mut *mut c_void {
        for (param, slot) in self.params.iter_mut().zip(self.slots.iter_mut()) {
            *param = slot.0.as_mut_ptr().cast::<c_void>();
        }
        self.params.as_mut_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::DevicePtr;

    #[test]
    fn arguments_are_packed_little_endian_one_slot_each() {
        let args = [
            KernelArg::Ptr(DevicePtr(0x1122_3344_5566_7788)),
            KernelArg::U64(7),
            KernelArg::U32(0xAABB_CCDD),
            KernelArg::F32(1.5),
            KernelArg::I32(-2),
        ];
        let mut packed = PackedArgs::new(&args);
        let params = packed.as_params();
        for (i, arg) in args.iter().enumerate() {
            // SAFETY: `params` has one pointer per argument, each to an 8-byte slot inside `packed`, which
            // is neither moved nor dropped while the pointers are read.
            let bytes = unsafe { std::slice::from_raw_parts((*params.add(i)).cast::<u8>(), arg.kind().size()) };
            assert_eq!(bytes, &arg.to_bytes()[..arg.kind().size()], "argument {i}");
        }
        assert_eq!(packed.slots.len(), args.len());
        assert!(packed.slots.iter().all(|s| (s as *const ArgSlot as usize).is_multiple_of(8)));
        // A move (out of a vector, say) is repaired by `as_params`.
        let mut moved = vec![PackedArgs::new(&args)].pop().unwrap();
        let params = moved.as_params();
        // SAFETY: as above.
        let first = unsafe { *(*params).cast::<u64>() };
        assert_eq!(first, 0x1122_3344_5566_7788);
    }
}
