//! The ONNX file format: protobuf messages ([`proto`]), tensors in `.pb` files and in external data
//! files inside the model's folder ([`tensor_pb`], `external`), half-precision models rewritten to
//! compute in f32 (`half`), and the [`limits::ImportLimits`] every read is checked against.
//!
//! **Architecture Invariant:** this layer knows nothing of ops, graphs or lowering: it imports only
//! [`crate::error`] and [`crate::tensor`].

pub(crate) mod external;
pub(crate) mod half;
pub(crate) mod limits;
pub mod proto;
pub mod tensor_pb;
