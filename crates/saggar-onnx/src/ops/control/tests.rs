//! Tests of the control-flow ops.
