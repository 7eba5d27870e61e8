//! NonMaxSuppression: the ONNX examples (both box formats, flipped corners, thresholds, limits,
//! batches and classes), ties, max_output_boxes_per_class 0 or absent, the bounded form's extents
//! and the typed errors.

use saggar_shape::DType;

use super::{attrs, build, fixed, infer_types, ints, run};
use crate::ops::testing::{f32s, run_op_outputs};
use crate::ops::{OpError, ValueType, unknown_dim};
use crate::tensor::Tensor;

const CORNERS: [f32; 24] = [
    0.0, 0.0, 1.0, 1.0, 0.0, 0.1, 1.0, 1.1, 0.0, -0.1, 1.0, 0.9, 0.0, 10.0, 1.0, 11.0, 0.0, 10.1, 1.0, 11.1, 0.0,
    100.0, 1.0, 101.0,
];
const SCORES: [f32; 6] = [0.9, 0.75, 0.6, 0.95, 0.5, 0.3];

fn one(v: f32) -> Tensor {
    f32s(&[1], &[v])
}

/// The selected rows of NonMaxSuppression (checked against its bounded form).
fn nms(
    center: i64,
    boxes: &Tensor,
    scores: &Tensor,
    max: Option<i64>,
    iou: Option<f32>,
    score: Option<f32>,
) -> Vec<i64> {
    let (max, iou, score) = (max.map(|m| Tensor::from_i64s(vec![m])), iou.map(one), score.map(one));
    let inputs = [Some(boxes), Some(scores), max.as_ref(), iou.as_ref(), score.as_ref()];
    let out = run("NonMaxSuppression", 11, &attrs(&[("center_point_box", center)]), &inputs, 1);
    assert_eq!(out[0].dims()[1], 3);
    ints(&out[0]).to_vec()
}

fn boxes() -> Tensor {
    f32s(&[1, 6, 4], &CORNERS)
}

fn scores() -> Tensor {
    f32s(&[1, 1, 6], &SCORES)
}

#[test]
fn nms_suppresses_by_iou_in_score_order() {
    assert_eq!(nms(0, &boxes(), &scores(), Some(3), Some(0.5), Some(0.0)), [0, 0, 3, 0, 0, 0, 0, 0, 5]);
    // The score threshold is strict; the limit stops early.
    assert_eq!(nms(0, &boxes(), &scores(), Some(3), Some(0.5), Some(0.4)), [0, 0, 3, 0, 0, 0]);
    assert_eq!(nms(0, &boxes(), &scores(), Some(2), Some(0.5), Some(0.3)), [0, 0, 3, 0, 0, 0]);
    assert_eq!(nms(0, &boxes(), &scores(), Some(9), Some(0.5), Some(0.3)), [0, 0, 3, 0, 0, 0]);
    // The overlaps are at most 0.9 / 1.1: above that threshold every box is kept, by score.
    let all = [0, 0, 3, 0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 4, 0, 0, 5];
    assert_eq!(nms(0, &boxes(), &scores(), Some(9), Some(0.9), None), all);
    // Without thresholds every box is a candidate and any overlap (IoU > 0) suppresses.
    assert_eq!(nms(0, &boxes(), &scores(), Some(9), None, None), [0, 0, 3, 0, 0, 0, 0, 0, 5]);
}

#[test]
fn nms_reads_centers_and_flipped_corners() {
    let centers = [
        0.5, 0.5, 1.0, 1.0, 0.5, 0.6, 1.0, 1.0, 0.5, 0.4, 1.0, 1.0, 0.5, 10.5, 1.0, 1.0, 0.5, 10.6, 1.0, 1.0, 0.5,
        100.5, 1.0, 1.0,
    ];
    let b = f32s(&[1, 6, 4], &centers);
    assert_eq!(nms(1, &b, &scores(), Some(3), Some(0.5), Some(0.0)), [0, 0, 3, 0, 0, 0, 0, 0, 5]);
    let flipped = [
        1.0, 1.0, 0.0, 0.0, 0.0, 0.1, 1.0, 1.1, 0.0, 0.9, 1.0, -0.1, 0.0, 10.0, 1.0, 11.0, 1.0, 10.1, 0.0, 11.1, 1.0,
        101.0, 0.0, 100.0,
    ];
    let b = f32s(&[1, 6, 4], &flipped);
    assert_eq!(nms(0, &b, &scores(), Some(3), Some(0.5), Some(0.0)), [0, 0, 3, 0, 0, 0, 0, 0, 5]);
}

#[test]
fn nms_orders_rows_by_batch_then_class_and_ties_by_index() {
    let b = f32s(&[2, 6, 4], &[CORNERS, CORNERS].concat());
    let s = f32s(&[2, 1, 6], &[SCORES, SCORES].concat());
    assert_eq!(nms(0, &b, &s, Some(2), Some(0.5), Some(0.0)), [0, 0, 3, 0, 0, 0, 1, 0, 3, 1, 0, 0]);
    let s = f32s(&[1, 2, 6], &[SCORES, [0.1, 0.2, 0.3, 0.0, 0.0, 0.9]].concat());
    assert_eq!(nms(0, &boxes(), &s, Some(2), Some(0.5), Some(0.0)), [0, 0, 3, 0, 0, 0, 0, 1, 5, 0, 1, 2]);
    // Ten identical boxes of equal scores: the first is kept, the rest suppressed.
    let same = f32s(&[1, 10, 4], &[[0.0, 0.0, 1.0, 1.0]; 10].concat());
    assert_eq!(nms(0, &same, &f32s(&[1, 1, 10], &[0.9; 10]), Some(3), Some(0.5), Some(0.0)), [0, 0, 0]);
    // Equal scores: the lower index first (box 0 suppresses 1 and 2); a NaN score last (box 3
    // comes after 4, which then suppresses it).
    let s = f32s(&[1, 1, 6], &[0.5, 0.5, 0.5, f32::NAN, 0.2, 0.1]);
    assert_eq!(nms(0, &boxes(), &s, Some(9), Some(0.5), None), [0, 0, 0, 0, 0, 4, 0, 0, 5]);
}

#[test]
fn nms_without_max_output_selects_nothing() {
    assert!(nms(0, &boxes(), &scores(), Some(0), Some(0.5), None).is_empty());
    assert!(nms(0, &boxes(), &scores(), Some(-4), Some(0.5), None).is_empty());
    assert!(nms(0, &boxes(), &scores(), None, None, None).is_empty());
    let op = build("NonMaxSuppression", 11, &attrs(&[]), 2, 1);
    let out = infer_types(&*op, &[fixed(DType::F32, &[1, 6, 4]), fixed(DType::F32, &[1, 1, 6])]).unwrap();
    assert_eq!(out[0], ValueType::fixed(DType::I64, &[0, 3]), "known without values");
}

#[test]
fn nms_bounded_rows_follow_a_constant_limit_else_the_boxes() {
    let op = build("NonMaxSuppression", 10, &attrs(&[]), 3, 1);
    let types = [fixed(DType::F32, &[2, 6, 4]), fixed(DType::F32, &[2, 3, 6]), fixed(DType::I64, &[1])];
    assert_eq!(infer_types(&*op, &types).unwrap()[0].dims[0], unknown_dim());
    let bounded = op.bounded().unwrap();
    assert_eq!((bounded.cuts.clone(), bounded.op_type), (vec![Some(0)], "NonMaxSuppression.bounded"));
    let out = infer_types(&*bounded.op, &types).unwrap();
    // The GPU's working memory: 6 batches x classes, each a count, 6 keys and one word of 64 rows.
    let work = ValueType::fixed(DType::I64, &[6 * (1 + 6 + 64)]);
    assert_eq!(out, vec![ValueType::fixed(DType::I64, &[36, 3]), ValueType::fixed(DType::I64, &[1]), work]);
    // Under a constant cap below the boxes there is no matrix: one element stands in.
    let max = Tensor::from_i64s(vec![2]);
    let input = |i: usize, value| types[i].as_ref().map(|ty| crate::ops::InferInput { ty, value, dims_value: None });
    let inputs = [input(0, None), input(1, None), input(2, Some(&max))];
    let out = bounded.op.infer(&crate::ops::InferInputs::new(&inputs)).unwrap();
    assert_eq!(out[2], ValueType::fixed(DType::I64, &[1]));
    let huge = [fixed(DType::F32, &[64, 100_000, 4]), fixed(DType::F32, &[64, 80, 100_000]), fixed(DType::I64, &[1])];
    assert!(matches!(infer_types(&*bounded.op, &huge), Err(OpError::Infer(m)) if m.contains("limit")));
    // A constant limit of 2: 2 x 3 x 2 rows, all taken by boxes of no area (they suppress nothing).
    let big = [f32s(&[2, 6, 4], &[0.0; 48]), f32s(&[2, 3, 6], &[0.0; 36])];
    let got = crate::ops::evaluate::evaluate(&*bounded.op, &[Some(&big[0]), Some(&big[1]), Some(&max)], 1 << 20);
    let got = got.unwrap();
    assert_eq!((got[0].dims(), ints(&got[1])), (&[12, 3][..], &[12][..]));
    assert_eq!(&ints(&got[0])[..12], &[0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 1, 1]);
}

#[test]
fn nms_refuses_mismatched_shapes_and_attributes() {
    let err = |boxes: &[usize], scores: &[usize]| {
        let (b, s) =
            (f32s(boxes, &vec![0.0; boxes.iter().product()]), f32s(scores, &vec![0.0; scores.iter().product()]));
        run_op_outputs("NonMaxSuppression", 11, &attrs(&[]), &[Some(&b), Some(&s)], 1).unwrap_err()
    };
    assert!(matches!(err(&[1, 6, 3], &[1, 1, 6]), OpError::Infer(m) if m.contains("4 coordinates")));
    assert!(matches!(err(&[2, 6, 4], &[1, 1, 6]), OpError::Infer(m) if m.contains("batches")));
    assert!(matches!(err(&[1, 5, 4], &[1, 1, 6]), OpError::Infer(m) if m.contains("boxes (axis 1")));
    assert!(matches!(err(&[6, 4], &[1, 1, 6]), OpError::Infer(m) if m.contains("rank 3")));
    let e = run_op_outputs(
        "NonMaxSuppression",
        11,
        &attrs(&[("center_point_box", 2)]),
        &[Some(&boxes()), Some(&scores())],
        1,
    );
    assert!(matches!(e.unwrap_err(), OpError::Attribute { name, .. } if name == "center_point_box"));
    let f = one(3.0);
    let e = run_op_outputs("NonMaxSuppression", 11, &attrs(&[]), &[Some(&boxes()), Some(&scores()), Some(&f)], 1);
    assert!(matches!(e.unwrap_err(), OpError::Infer(m) if m.contains("max_output_boxes_per_class")));
    let two = Tensor::from_i64s(vec![1, 2]);
    let e = run_op_outputs("NonMaxSuppression", 11, &attrs(&[]), &[Some(&boxes()), Some(&scores()), Some(&two)], 1);
    assert!(matches!(e.unwrap_err(), OpError::Infer(m) if m.contains("must be one")));
}
