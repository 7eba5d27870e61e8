//! Tensor specs, shape hashing, batch-axis detection, bucket policies, and pad and slice plans.
#![doc = include_str!("../README.md")]
//!
//! # Design
//!
//! saggar-shape is the part of saggar that reasons about shapes and nothing else.
//! **Architecture invariant:** it never touches a device, a stream or a file; it computes
//! numbers (bindings, keys, buckets, byte offsets) that the arena, the cache and the dispatcher
//! act on. It has no `unsafe` code.
//!
//! # Design
//!
//! A model declares its inputs and outputs as [`TensorSpec`]s, each dimension either fixed or a
//! named symbol ([`Dim`]). When a model is loaded, the specs become a [`Signature`], which works
//! out once everything later runs need: the symbols, the order of the inputs by name, which
//! inputs and outputs carry the batch ([`BatchLayout`]), and flat tables for the per-run check.
//! Requests then come in through three doors, the last one modelled on seed 001's run paths:
//!
//! * The **standard path** names its inputs in any order. [`Signature::bind`] checks each one
//!   (name, element type, rank, fixed extents, one value per symbol, non-zero batch, sizes that
//!   fit in 64 bits) and returns the [`Bindings`], the value of every symbol.
//! * [`Signature::check`] takes one shape per input in the program's binding order and accepts
//!   exactly what `bind` accepts. For a model with at most one symbol it folds every extent
//!   into one accumulator, `extent ^ (expected | (batch & mask))`, with inputs grouped by rank
//!   so the inner loops have fixed trip counts: no branch per axis, no allocation.
//! * The **per-run path** goes further. Seed 001 re-checks only the symbolic dimensions per
//!   run, trusting that the fixed ones did not change; saggar makes that sound. A
//!   [`RequestShapes`] holds one slot per symbolic axis and validates rank, fixed extents, a
//!   non-zero batch and byte sizes when it is written, so [`Signature::check_request`] only
//!   verifies that every input was given and that each symbol agrees everywhere: for a model
//!   whose only symbol is the batch, one vectorised pass over the batch slots (under 100 ns for
//!   190 inputs; `docs/benchmarks.md` has the figures for all three).
//!
//! The [`Bindings`] of a run are its in-memory key: equal bindings mean equal input shapes, and
//! hashing them is hashing a handful of integers. For anything written to disk there is the
//! [`StableShapeKey`], BLAKE3 over a documented byte encoding of the shapes in canonical (name)
//! order, so neither the caller's input order nor the process, platform or a hasher's version
//! changes it; [`fast_hash`] hashes the same canonical stream with ahash for in-memory maps.
//!
//! A model whose only dynamic dimension is the batch is served from precompiled buckets. A
//! [`BucketPolicy`] (powers of two, an explicit list, stepped, or adaptive: the K buckets that
//! minimise expected padding over an observed [`BatchHistogram`], found exactly by dynamic
//! programming) maps a batch to its bucket in O(1) or O(log K) without allocating. A batch above
//! the largest bucket becomes a [`SplitPlan`] of [`Chunk`]s, or an error when splitting is
//! disabled. For each chunk, a [`PadPlan`] per input and a [`SlicePlan`] per output say which
//! bytes to copy and which rows repeat (padding repeats the last real row); [`pad_rows_into`]
//! and [`slice_rows`] carry them out on the host, as the reference for device backends and the
//! implementation of the host backend. A [`WasteReport`] totals the padding a policy costs over
//! a trace. An inner axis declared paddable (a sequence) is padded with a value and sliced back by
//! an [`AxisPlan`].
//!
//! Every fallible entry point returns [`ShapeError`], a `#[non_exhaustive]` enum whose variants
//! name the input, the axis, the expected and the actual value. Bad input never panics.
//!
//! # Example
//!
//! ```
//! use saggar_shape::{BucketPolicy, DType, Dim, Signature, Splitting, TensorSpec};
//!
//! let signature = Signature::new(
//!     vec![
//!         TensorSpec::new("ids", DType::I64, [Dim::symbolic("batch"), 128.into()]),
//!         TensorSpec::new("table", DType::F32, [1000.into(), 64.into()]),
//!     ],
//!     vec![TensorSpec::new("logits", DType::F32, [Dim::symbolic("batch"), 2.into()])],
//! )?;
//! assert!(signature.batch_layout().batch_is_only_dynamic_dim());
//!
//! // Shapes in binding order...
//! let bindings = signature.check(&[[5u64, 128].as_slice(), &[1000, 64]])?;
//! assert_eq!(bindings.batch(), Some(5));
//! // ...or reusable request shapes: for a batch-only model, one write per run.
//! let mut request = signature.request_shapes();
//! request.set_batch(&signature, 5)?;
//! assert_eq!(signature.check_request(&request)?, bindings);
//!
//! // Bucket 8 serves it; the table is not batched, so only `ids` is padded.
//! let policy = BucketPolicy::powers_of_two(32)?;
//! let plan = policy.plan(5, Splitting::Allowed)?;
//! let chunk = plan.chunks().next().unwrap();
//! assert_eq!(chunk.bucket, 8);
//! let pad = signature.pad_plan(0, &[5, 128], chunk)?;
//! assert_eq!(pad.replicated_rows(), 5..8);
//! assert!(!signature.pad_plan(1, &[1000, 64], chunk)?.is_batched());
//! # Ok::<(), saggar_shape::ShapeError>(())
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod axis;
mod batch;
mod bindings;
mod bucket;
mod check;
mod dtype;
mod error;
pub mod hash;
mod pad;
mod request;
mod shape;
mod signature;
mod split;
mod trace;

pub use axis::{AxisPlan, pad_axis_into, slice_axis_into};
pub use batch::{BatchAxis, BatchLayout, BatchSource};
pub use bindings::Bindings;
pub use bucket::{BucketPolicy, LOOKUP_TABLE_LIMIT, MAX_BUCKETS, PolicyKind};
pub use dtype::DType;
pub use error::{ShapeError, TensorRole};
pub use hash::{STABLE_KEY_CONTEXT, StableShapeKey, TensorShape, fast_hash};
pub use pad::{PadPlan, SlicePlan, pad_rows_in_place, pad_rows_into, slice_rows};
pub use request::RequestShapes;
pub use shape::{Dim, INLINE_RANK, Shape, SizeOverflow, TensorSpec, byte_size, element_count};
pub use signature::Signature;
pub use split::{Chunk, SplitPlan, Splitting};
pub use trace::{BatchHistogram, WasteReport};

/// Compiles and runs the README's example as a doctest, so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;
