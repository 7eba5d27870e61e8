//! Data movement: Slice, Split, Gather, GatherElements, GatherND, Transpose, Pad.

use crate::ops::OpEntry;

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[];
