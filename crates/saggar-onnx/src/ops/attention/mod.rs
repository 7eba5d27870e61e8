//! The transformer attention ops of opsets 23 and 24: Attention ([`sdpa`]: scaled dot-product
//! attention with masks, caches, grouped heads and soft-capping; `host.rs` and `launch.rs` compute
//! it, `geometry.rs` lays out its operands) and RotaryEmbedding (`rotary.rs`).

mod geometry;
pub(crate) mod gpu;
mod host;
mod launch;
mod rotary;
mod sdpa;

use crate::ops::OpEntry;

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[
    OpEntry { op_type: "Attention", since: 23, until: 24, build: sdpa::build_attention },
    OpEntry { op_type: "RotaryEmbedding", since: 23, until: 24, build: rotary::build_rotary },
];

#[cfg(test)]
mod tests;
