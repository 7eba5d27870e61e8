//! Errors of saggar-arena.

use saggar_shape::ShapeError;

/// What went wrong in saggar-arena. A lease that met an error still returns to its pool on drop.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ArenaError {
    /// A device operation failed.
    #[error(transparent)]
    Device(#[from] saggar_device::Error),
    /// A pad or slice plan could not be applied.
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// A layout that cannot be built.
    #[error("invalid arena layout: {reason}")]
    Layout {
        /// What is wrong.
        reason: String,
    },
    /// The request has a different number of inputs or outputs than the layout.
    #[error("the arena holds {expected} {role}s, the request gives {actual}")]
    Count {
        /// `"input"` or `"output"`.
        role: &'static str,
        /// Slots in the layout.
        expected: usize,
        /// Items given.
        actual: usize,
    },
    /// A host input shorter than its plan needs.
    #[error("input `{input}` has {actual} bytes but its plan reads {needed}")]
    InputTooShort {
        /// The input.
        input: Box<str>,
        /// Bytes the plan reads.
        needed: usize,
        /// Bytes given.
        actual: usize,
    },
    /// Bytes written in place into an input's staging slot must be exactly its real rows.
    #[error("input `{input}` takes {expected} bytes (its real rows), the caller gave {actual}")]
    InputLength {
        /// The input's name.
        input: String,
        /// Bytes of its real rows.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// An input (after padding) larger than its slot.
    #[error(
        "input `{input}` needs {bytes} bytes but its arena slot holds {capacity}; size the layout for the largest bucket"
    )]
    InputTooLarge {
        /// The input.
        input: Box<str>,
        /// Bytes needed.
        bytes: usize,
        /// Slot capacity.
        capacity: usize,
    },
    /// An output larger than its slot or a destination too short.
    #[error("output `{output}`: {reason}")]
    Output {
        /// The output.
        output: Box<str>,
        /// What is wrong.
        reason: String,
    },
    /// A host pointer not aligned for the tensor's element type.
    #[error("{role} `{name}` is at address {address:#x}, which is not aligned to its element size of {align} bytes")]
    Misaligned {
        /// `"input"` or `"output"`.
        role: &'static str,
        /// The tensor.
        name: Box<str>,
        /// The address.
        address: usize,
        /// The required alignment.
        align: usize,
    },
    /// Every arena of the pool is leased and the pool is configured to fail.
    #[error("all {max} arenas of the pool are leased; raise the pool bound or wait")]
    PoolExhausted {
        /// The pool bound.
        max: usize,
    },
    /// Waiting for a free arena timed out.
    #[error("no arena became free within {waited_ms} ms (pool bound {max})")]
    PoolTimeout {
        /// The pool bound.
        max: usize,
        /// How long the caller waited.
        waited_ms: u64,
    },
    /// The host side of a gather failed (helper threads could not start, or a copy failed).
    #[error("gather failed: {reason}")]
    Gather {
        /// What went wrong.
        reason: String,
    },
    /// An output download was not enqueued before scattering.
    #[error("the arena has no read-back buffer: build it with ArenaOptions::coalesce_outputs on")]
    NotDownloaded,
    /// The host read pinned memory that an enqueued copy may still be writing.
    #[error("the arena's copies are still in flight; call Arena::wait_idle before reading the read-back buffer")]
    InFlight,
}

/// Result with [`ArenaError`].
pub type Result<T, E = ArenaError> = std::result::Result<T, E>;
