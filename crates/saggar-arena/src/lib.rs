//! saggar-arena: pinned staging and one-copy inputs.
#![doc = include_str!("../README.md")]
//!
//! # Design
//!
//! A batch-1 recommender model with about 190 small inputs spends its time launching 190
//! host-to-device copies (on an H200: 190 copies of 1 KiB take about 620 us, one copy of the same
//! 190 KiB about 6.4 us). saggar-arena lays every input of a program out in one device arena at aligned
//! offsets ([`ArenaLayout`]), gathers the host inputs into one pinned staging buffer in a single pass
//! (padding batched inputs to their bucket by repeating the last real row, per saggar-shape's
//! [`saggar_shape::PadPlan`]), and sends them with ONE copy. Each input is then a device sub-view of the
//! arena. Outputs can come back the same way: one device-to-host copy into a pinned read-back buffer,
//! then a scatter, sliced to the real batch, into the caller's buffers.
//!
//! Arenas are leased per request from an [`ArenaPool`], so concurrent runs never share staging or
//! device slots. An arena keeps its device addresses for its whole life, so graphs captured against
//! its slots stay valid: pinned-copy graph mode has no pointer drift.
//!
//! Pinned memory is never reused or freed while a copy that uses it may still be in flight: each
//! arena records an event after its last such copy and waits for it before the host touches the
//! pinned buffers again, and before freeing them.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod arena;
mod error;
mod gather;
mod layout;
mod pool;
mod staged;

pub use arena::{
    Arena, ArenaOptions, BindingKind, DEFAULT_KERNEL_COPIES_UP_TO, DeviceInputMode, InputSource, OutputTarget,
    StageReport,
};
pub use error::{ArenaError, Result};
pub use gather::{GatherOptions, GatherStats, StagingStores};
pub use layout::{ArenaLayout, DEFAULT_ALIGNMENT, Slot, SlotSpec};
pub use pool::{ArenaLease, ArenaPool, Lease, Pool, PoolConfig, WhenExhausted};
