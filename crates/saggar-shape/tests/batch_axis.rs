//! Batch-axis detection through a signature: by symbol, by the most common leading extent,
//! and the consequences for bucketing and padding.

use saggar_shape::{BatchAxis, BatchSource, DType, Dim, ShapeError, Signature, TensorSpec};

fn spec(name: &str, dims: impl IntoIterator<Item = Dim>) -> TensorSpec {
    TensorSpec::new(name, DType::F32, dims)
}

#[test]
fn symbolic_batch_is_the_most_common_leading_symbol() {
    let signature = Signature::new(
        vec![
            spec("image", [Dim::symbolic("N"), Dim::fixed(3), Dim::fixed(224), Dim::fixed(224)]),
            spec("boxes", [Dim::symbolic("N"), Dim::fixed(4)]),
            spec("anchors", [Dim::fixed(9), Dim::fixed(4)]),
        ],
        vec![spec("scores", [Dim::symbolic("N"), Dim::fixed(1000)]), spec("anchor_stats", [Dim::fixed(9)])],
    )
    .unwrap();
    let layout = signature.batch_layout();
    assert_eq!(layout.source(), &BatchSource::Symbol("N".into()));
    assert_eq!(layout.inputs(), &[BatchAxis::Leading, BatchAxis::Leading, BatchAxis::Absent]);
    assert_eq!(layout.outputs(), &[BatchAxis::Leading, BatchAxis::Absent]);
    assert!(layout.batch_is_only_dynamic_dim());
    assert!(layout.is_input_batched(0) && !layout.is_input_batched(2) && !layout.is_input_batched(9));
}

#[test]
fn traced_model_batch_is_the_most_common_leading_extent() {
    // Seed 001's reviewer: inputs whose leading extent is not the most common have no batch.
    let signature = Signature::new(
        vec![
            spec("a", [Dim::fixed(4), Dim::fixed(16)]),
            spec("b", [Dim::fixed(4), Dim::fixed(8)]),
            spec("lut", [Dim::fixed(256)]),
            spec("c", [Dim::fixed(4)]),
        ],
        vec![spec("y", [Dim::fixed(4), Dim::fixed(2)])],
    )
    .unwrap();
    let layout = signature.batch_layout();
    assert_eq!(layout.source(), &BatchSource::LeadingExtent(4));
    assert_eq!(layout.inputs(), &[BatchAxis::Leading, BatchAxis::Leading, BatchAxis::Absent, BatchAxis::Leading]);
    assert!(!layout.batch_is_only_dynamic_dim(), "a traced model has no dynamic dimension to bucket");
    let bindings = signature.check(&[[4u64, 16].as_slice(), &[4, 8], &[256], &[4]]).unwrap();
    assert_eq!(bindings.batch(), Some(4));
    assert_eq!(bindings.with_batch(8).unwrap_err(), ShapeError::NoBatchSymbol);
}

#[test]
fn sequence_length_sends_the_model_to_the_per_shape_path() {
    let signature = Signature::new(
        vec![
            spec("ids", [Dim::symbolic("batch"), Dim::symbolic("seq")]),
            spec("mask", [Dim::symbolic("batch"), Dim::symbolic("seq")]),
        ],
        vec![spec("hidden", [Dim::symbolic("batch"), Dim::symbolic("seq"), Dim::fixed(768)])],
    )
    .unwrap();
    assert_eq!(signature.batch_layout().symbol(), Some("batch"));
    assert!(!signature.batch_layout().batch_is_only_dynamic_dim());
    let bindings = signature.check(&[[2u64, 9].as_slice(), &[2, 9]]).unwrap();
    assert_eq!(bindings.output_shape(0).unwrap().dims(), &[2, 9, 768]);
}

#[test]
fn named_batch_symbol_wins_over_detection() {
    let inputs =
        vec![spec("x", [Dim::symbolic("time"), Dim::symbolic("B")]), spec("h", [Dim::symbolic("B"), Dim::fixed(8)])];
    let detected = Signature::new(inputs.clone(), Vec::new()).unwrap();
    assert_eq!(detected.batch_layout().symbol(), Some("time"));
    let named = Signature::with_batch_symbol(inputs.clone(), Vec::new(), "B").unwrap();
    assert_eq!(named.batch_layout().inputs(), &[BatchAxis::Absent, BatchAxis::Leading]);
    // "B" also sits at axis 1 of `x`, so rows cannot be padded: not bucketable.
    assert!(!named.batch_layout().batch_is_only_dynamic_dim());
    assert_eq!(
        Signature::with_batch_symbol(inputs, Vec::new(), "batch").unwrap_err(),
        ShapeError::UnknownSymbol { symbol: "batch".into() }
    );
}

#[test]
fn scalars_only_have_no_batch() {
    let signature = Signature::new(vec![spec("t", [])], Vec::new()).unwrap();
    assert_eq!(signature.batch_layout().source(), &BatchSource::None);
    assert_eq!(signature.check(&[[0u64; 0].as_slice()]).unwrap().batch(), None);
}
