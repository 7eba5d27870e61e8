//! The host backend's simulated device memory.
//!
//! Device memory lives in an address space of its own: a device pointer is a number handed out by
//! [`AddressSpace::alloc`], never a host pointer. Every access is resolved against the live
//! allocations, so touching freed or never-allocated memory is a typed error instead of undefined
//! behaviour. Each device's space starts at a different base, so a pointer names its device. Pinned
//! host memory is mapped into its device's space as well ([`AddressSpace::map_host`]), as GPUs map
//! page-locked memory, so kernels reach it at an address of that space.
//!
//! The allocator can reuse a freed address for the very next allocation that fits
//! ([`AddressReuse::Immediate`], what real caching allocators do, and what turns a stale pointer
//! baked into a graph into a silent read of somebody else's data) or never reuse addresses
//! ([`AddressReuse::Never`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::host::counters::Counters;
use crate::host::pinned::PinnedAlloc;
use crate::types::DevicePtr;

/// Allocation granularity and alignment of simulated device memory, like a GPU's 256-byte alignment.
pub const ALIGNMENT: u64 = 256;
/// Unmapped bytes left after every allocation, so an access one past the end is an error.
const GUARD: u64 = ALIGNMENT;
/// Each device's addresses start at `(ordinal + 1) << ADDRESS_SHIFT`.
const ADDRESS_SHIFT: u32 = 40;
/// Byte value freshly allocated device memory holds: GPUs do not zero memory, and neither do we, so a
/// read of memory nobody wrote shows up.
pub const POISON: u8 = 0xA5;

/// Whether freed device addresses are handed out again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AddressReuse {
    /// The most recently freed block that fits is reused by the next allocation (LIFO).
    #[default]
    Immediate,
    /// Addresses are never reused; every allocation gets a fresh range.
    Never,
}

/// The device ordinal an address of the host backend belongs to, if it is in any device's range.
pub fn owner_of(ptr: DevicePtr) -> Option<usize> {
    let slot = ptr.0 >> ADDRESS_SHIFT;
    (slot >= 1).then(|| (slot - 1) as usize)
}

/// What an allocation's addresses hold.
enum Memory {
    /// Device memory: the allocation's own bytes.
    Device(Box<[u8]>),
    /// Pinned host memory mapped into the space ([`AddressSpace::map_host`]).
    Mapped(Arc<PinnedAlloc>),
}

impl Memory {
    fn len(&self) -> usize {
        match self {
            Memory::Device(data) => data.len(),
            Memory::Mapped(alloc) => alloc.len(),
        }
    }
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Memory::Device(data) => write!(f, "Device({} bytes)", data.len()),
            Memory::Mapped(alloc) => write!(f, "Mapped({} bytes)", alloc.len()),
        }
    }
}

#[derive(Debug)]
struct Block {
    data: Memory,
    /// Bytes of address range this block holds (at least the rounded length; more when a larger freed
    /// block was reused), handed back whole on free.
    reserved: u64,
}

#[derive(Debug)]
pub(crate) struct AddressSpace {
    ordinal: usize,
    next: u64,
    end: u64,
    live: BTreeMap<u64, Block>,
    free: Vec<(u64, u64)>,
    reuse: AddressReuse,
    capacity: u64,
    used: u64,
    counters: Arc<Counters>,
}

fn round_up(len: u64) -> u64 {
    len.div_ceil(ALIGNMENT) * ALIGNMENT
}

/// The longest single allocation: one device's whole address range.
const MAX_ALLOCATION: u64 = 1 << ADDRESS_SHIFT;

impl AddressSpace {
    pub(crate) fn new(ordinal: usize, reuse: AddressReuse, capacity: u64, counters: Arc<Counters>) -> AddressSpace {
        let base = (ordinal as u64 + 1) << ADDRESS_SHIFT;
        AddressSpace {
            ordinal,
            next: base,
            end: base + (1 << ADDRESS_SHIFT),
            live: BTreeMap::new(),
            free: Vec::new(),
            reuse,
            capacity,
            used: 0,
            counters,
        }
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    pub(crate) fn used(&self) -> u64 {
        self.used
    }

    pub(crate) fn alloc(&mut self, bytes: usize) -> Result<DevicePtr> {
        crate::rules::check_alloc_size("device.alloc", bytes, MAX_ALLOCATION)?;
        let rounded = round_up(bytes as u64);
        if rounded > self.capacity - self.used {
            return Err(Error::OutOfMemory {
                op: "device.alloc",
                requested: bytes as u64,
                available: self.capacity - self.used,
            });
        }
        let reused = match self.reuse {
            AddressReuse::Immediate => {
                self.free.iter().rposition(|(_, cap)| *cap >= rounded).map(|i| self.free.remove(i))
            }
            AddressReuse::Never => None,
        };
        let (addr, reserved) = match reused {
            Some(block) => block,
            None => {
                let addr = self.next;
                let after = addr.checked_add(rounded + GUARD).filter(|a| *a <= self.end).ok_or(Error::OutOfMemory {
                    op: "device.alloc",
                    requested: bytes as u64,
                    available: self.end.saturating_sub(self.next),
                })?;
                self.next = after;
                (addr, rounded)
            }
        };
        let mut data = Vec::new();
        if data.try_reserve_exact(bytes).is_err() {
            self.free.push((addr, reserved));
            return Err(Error::OutOfMemory { op: "device.alloc", requested: bytes as u64, available: 0 });
        }
        data.resize(bytes, POISON);
        self.live.insert(addr, Block { data: Memory::Device(data.into_boxed_slice()), reserved });
        self.used += rounded;
        self.counters.on_alloc(bytes as u64);
        Ok(DevicePtr(addr))
    }

    pub(crate) fn free(&mut self, ptr: DevicePtr) -> Result<()> {
        let invalid = Error::InvalidAddress { op: "device.free", ptr, len: 0, ordinal: self.ordinal };
        if !matches!(self.live.get(&ptr.0), Some(Block { data: Memory::Device(_), .. })) {
            return Err(invalid);
        }
        let block = self.live.remove(&ptr.0).ok_or(invalid)?;
        self.used -= round_up(block.data.len() as u64);
        self.counters.on_free(block.data.len() as u64);
        self.free.push((ptr.0, block.reserved));
        Ok(())
    }

    /// Maps pinned host memory into the space, as a GPU maps page-locked memory for its kernels: its
    /// bytes become reachable at the returned address until [`AddressSpace::unmap_host`]. The mapping
    /// takes no device memory.
    pub(crate) fn map_host(&mut self, alloc: Arc<PinnedAlloc>) -> Result<DevicePtr> {
        let reserved = round_up(alloc.len() as u64);
        let addr = self.next;
        let after = addr.checked_add(reserved + GUARD).filter(|a| *a <= self.end).ok_or(Error::OutOfMemory {
            op: "device.alloc_pinned",
            requested: alloc.len() as u64,
            available: self.end.saturating_sub(self.next),
        })?;
        self.next = after;
        self.live.insert(addr, Block { data: Memory::Mapped(alloc), reserved });
        Ok(DevicePtr(addr))
    }

    /// Removes a mapping of [`AddressSpace::map_host`]; later accesses are invalid addresses.
    pub(crate) fn unmap_host(&mut self, ptr: DevicePtr) -> Result<()> {
        match self.live.remove(&ptr.0) {
            Some(Block { data: Memory::Mapped(_), reserved }) => {
                self.free.push((ptr.0, reserved));
                Ok(())
            }
            other => {
                if let Some(block) = other {
                    self.live.insert(ptr.0, block);
                }
                Err(Error::InvalidAddress { op: "pinned_buffer.drop", ptr, len: 0, ordinal: self.ordinal })
            }
        }
    }

    /// The bytes `ptr..ptr + len`, which must lie inside one live allocation.
    pub(crate) fn region(&self, op: &'static str, ptr: DevicePtr, len: usize) -> Result<&[u8]> {
        let (base, block) = self.find(op, ptr, len)?;
        let start = (ptr.0 - base) as usize;
        let data = match &block.data {
            Memory::Device(data) => data,
            // SAFETY: device access to mapped pinned memory is asynchronous device access, which the
            // enqueuer promised does not overlap host access to the range (as for a copy).
            Memory::Mapped(alloc) => unsafe { alloc.bytes() },
        };
        Ok(&data[start..start + len])
    }

    /// The bytes `ptr..ptr + len`, mutable.
    pub(crate) fn region_mut(&mut self, op: &'static str, ptr: DevicePtr, len: usize) -> Result<&mut [u8]> {
        let (base, _) = self.find(op, ptr, len)?;
        let data = match &mut self.live.get_mut(&base).expect("found above").data {
            Memory::Device(data) => &mut data[..],
            // SAFETY: as in `region`; `&mut self` keeps every other device access out.
            Memory::Mapped(alloc) => unsafe { alloc.bytes_mut() },
        };
        let start = (ptr.0 - base) as usize;
        Ok(&mut data[start..start + len])
    }

    /// Copies between two ranges of this space (they may be in the same allocation, even overlap).
    pub(crate) fn copy(&mut self, op: &'static str, src: DevicePtr, dst: DevicePtr, len: usize) -> Result<()> {
        let tmp = self.region(op, src, len)?.to_vec();
        self.region_mut(op, dst, len)?.copy_from_slice(&tmp);
        Ok(())
    }

    fn find(&self, op: &'static str, ptr: DevicePtr, len: usize) -> Result<(u64, &Block)> {
        let invalid = || Error::InvalidAddress { op, ptr, len: len as u64, ordinal: self.ordinal };
        let (base, block) = self.live.range(..=ptr.0).next_back().ok_or_else(invalid)?;
        let offset = ptr.0 - base;
        let fits = offset.checked_add(len as u64).is_some_and(|end| end <= block.data.len() as u64);
        if !fits {
            return Err(invalid());
        }
        Ok((*base, block))
    }
}
