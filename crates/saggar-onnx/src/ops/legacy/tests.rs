//! Tests of the opset 1-6 forms.
