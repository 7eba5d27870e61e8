//! Shape ops: Shape, Reshape, Flatten, Unsqueeze, Squeeze, Expand, Concat, Range, ConstantOfShape, Constant, Identity, Dropout.

use crate::ops::OpEntry;

/// The ops of this family.
pub(crate) static OPS: &[OpEntry] = &[];
