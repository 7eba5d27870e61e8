//! Binding symbols from requests: typed errors for bad input, and the three entry points
//! (`bind`, `check`, `check_request`) agreeing on every request.

use proptest::prelude::*;
use saggar_shape::{DType, Dim, Shape, ShapeError, Signature, TensorRole, TensorShape, TensorSpec};

fn bert() -> Signature {
    Signature::new(
        vec![
            TensorSpec::new("input_ids", DType::I64, [Dim::symbolic("batch"), Dim::fixed(128)]),
            TensorSpec::new("attention_mask", DType::I64, [Dim::symbolic("batch"), Dim::fixed(128)]),
            TensorSpec::new("scale", DType::F32, []),
        ],
        vec![
            TensorSpec::new("logits", DType::F32, [Dim::symbolic("batch"), Dim::fixed(2)]),
            TensorSpec::new("tokens", DType::I64, [Dim::symbolic("num_tokens")]),
        ],
    )
    .unwrap()
}

fn named<'a>(signature: &'a Signature, shapes: &'a [&'a [u64]]) -> Vec<TensorShape<'a>> {
    signature
        .inputs()
        .iter()
        .zip(shapes)
        .map(|(spec, dims)| TensorShape::new(spec.name(), spec.dtype(), dims))
        .collect()
}

#[test]
fn valid_request_binds_the_batch_on_every_path() {
    let signature = bert();
    let shapes: [&[u64]; 3] = [&[4, 128], &[4, 128], &[]];
    let bound = signature.bind(&named(&signature, &shapes)).unwrap();
    assert_eq!(bound.get("batch"), Some(4));
    assert_eq!(bound.batch(), Some(4));
    assert_eq!(signature.check(&shapes).unwrap(), bound);
    let mut request = signature.request_shapes();
    assert!(!request.is_complete());
    request.set_batch(&signature, 4).unwrap();
    assert!(request.is_complete());
    assert_eq!(signature.check_request(&request).unwrap(), bound);
    assert_eq!(bound.output_shape(0), Ok(Shape::from([4, 2])));
    assert_eq!(
        bound.output_shape(1),
        Err(ShapeError::UnboundSymbol { output: "tokens".into(), symbol: "num_tokens".into() })
    );
    assert_eq!(bound.with_batch(8).unwrap().input_shape(1), Ok(Shape::from([8, 128])));
    assert_eq!(bound.input_shape(3), Err(ShapeError::IndexOutOfRange { role: TensorRole::Input, index: 3, count: 3 }));
    assert_eq!(
        bound.output_shape(2),
        Err(ShapeError::IndexOutOfRange { role: TensorRole::Output, index: 2, count: 2 })
    );
    assert_eq!(bound.with_batch(0).unwrap_err(), ShapeError::ZeroBatchSize);
}

#[test]
fn names_may_come_in_any_order() {
    let signature = bert();
    let request = [
        TensorShape::new("scale", DType::F32, &[]),
        TensorShape::new("attention_mask", DType::I64, &[2, 128]),
        TensorShape::new("input_ids", DType::I64, &[2, 128]),
    ];
    assert_eq!(signature.bind(&request).unwrap().batch(), Some(2));
}

#[test]
fn rank_mismatch_is_typed() {
    let signature = bert();
    let shapes: [&[u64]; 3] = [&[4, 128, 1], &[4, 128], &[]];
    let expected =
        ShapeError::RankMismatch { input: "input_ids".into(), expected: 2, actual: 3, shape: Shape::from([4, 128, 1]) };
    assert_eq!(signature.check(&shapes).unwrap_err(), expected);
    assert_eq!(signature.bind(&named(&signature, &shapes)).unwrap_err(), expected);
    let mut request = signature.request_shapes();
    assert_eq!(request.set(&signature, 0, shapes[0]).unwrap_err(), expected);
}

#[test]
fn fixed_dim_mismatch_is_typed() {
    let signature = bert();
    let shapes: [&[u64]; 3] = [&[4, 128], &[4, 64], &[]];
    assert_eq!(
        signature.check(&shapes).unwrap_err(),
        ShapeError::FixedDimMismatch { input: "attention_mask".into(), axis: 1, expected: 128, actual: 64 }
    );
}

#[test]
fn one_symbol_bound_to_two_values_is_typed() {
    let signature = bert();
    let shapes: [&[u64]; 3] = [&[4, 128], &[5, 128], &[]];
    let expected = ShapeError::SymbolConflict {
        symbol: "batch".into(),
        first_input: "input_ids".into(),
        first_axis: 0,
        first_value: 4,
        input: "attention_mask".into(),
        axis: 0,
        value: 5,
    };
    assert_eq!(signature.check(&shapes).unwrap_err(), expected);
    assert_eq!(signature.bind(&named(&signature, &shapes)).unwrap_err(), expected);
    // Written one input at a time, each write is valid on its own; the run check catches it.
    let mut request = signature.request_shapes();
    request.set(&signature, 0, shapes[0]).unwrap();
    request.set(&signature, 1, shapes[1]).unwrap();
    assert_eq!(signature.check_request(&request).unwrap_err(), expected);

    // Within one input, too.
    let square =
        Signature::new(vec![TensorSpec::new("adj", DType::F32, [Dim::symbolic("n"), Dim::symbolic("n")])], Vec::new())
            .unwrap();
    assert!(matches!(
        square.check(&[[3u64, 4].as_slice()]),
        Err(ShapeError::SymbolConflict { axis: 1, value: 4, first_value: 3, .. })
    ));
    assert_eq!(square.check(&[[3u64, 3].as_slice()]).unwrap().get("n"), Some(3));
}

#[test]
fn zero_batch_is_typed() {
    let signature = bert();
    let shapes: [&[u64]; 3] = [&[0, 128], &[0, 128], &[]];
    let expected = ShapeError::ZeroBatch { input: "input_ids".into(), axis: 0 };
    assert_eq!(signature.check(&shapes).unwrap_err(), expected);
    assert_eq!(signature.bind(&named(&signature, &shapes)).unwrap_err(), expected);
    let mut request = signature.request_shapes();
    assert_eq!(request.set_batch(&signature, 0).unwrap_err(), ShapeError::ZeroBatchSize);
    assert_eq!(
        request.set(&signature, 1, shapes[1]).unwrap_err(),
        ShapeError::ZeroBatch { input: "attention_mask".into(), axis: 0 }
    );
    // A non-batch symbol may be zero (an empty sequence).
    let seq = Signature::with_batch_symbol(
        vec![TensorSpec::new("ids", DType::I64, [Dim::symbolic("batch"), Dim::symbolic("seq")])],
        Vec::new(),
        "batch",
    )
    .unwrap();
    assert_eq!(seq.check(&[[2u64, 0].as_slice()]).unwrap().get("seq"), Some(0));
}

#[test]
fn overflowing_dims_are_typed() {
    let signature = bert();
    // 2^57 rows of 128 i64 values: 2^67 bytes.
    let shapes: [&[u64]; 3] = [&[1 << 57, 128], &[1 << 57, 128], &[]];
    let err = signature.check(&shapes).unwrap_err();
    let ShapeError::Overflow { input, source } = &err else { panic!("expected an overflow, got {err:?}") };
    assert_eq!(&**input, "input_ids");
    assert_eq!(source.dims, Shape::from([1 << 57, 128]));
    assert_eq!(source.element_bytes, 8);
    assert_eq!(signature.bind(&named(&signature, &shapes)).unwrap_err(), err);
    let mut request = signature.request_shapes();
    assert_eq!(request.set_batch(&signature, 1 << 57).unwrap_err(), err);
    // 128 i64 values are 2^10 bytes a row, so 2^54 - 1 rows is the largest batch that fits.
    assert!(signature.check(&[[(1 << 54) - 1, 128].as_slice(), &[(1 << 54) - 1, 128], &[]]).is_ok());
    assert!(signature.check(&[[1 << 54, 128].as_slice(), &[1 << 54, 128], &[]]).is_err());

    // Fixed extents that overflow on their own are refused when the signature is built.
    let err = Signature::new(
        vec![TensorSpec::new("huge", DType::F64, [Dim::fixed(1 << 40), Dim::fixed(1 << 30)])],
        Vec::new(),
    )
    .unwrap_err();
    assert!(matches!(err, ShapeError::Overflow { .. }));
}

#[test]
fn names_missing_unknown_duplicated_and_wrong_dtype_are_typed() {
    let signature = bert();
    let ids = TensorShape::new("input_ids", DType::I64, &[1, 128]);
    let mask = TensorShape::new("attention_mask", DType::I64, &[1, 128]);
    let scale = TensorShape::new("scale", DType::F32, &[]);
    assert_eq!(signature.bind(&[ids, mask]).unwrap_err(), ShapeError::MissingInput { input: "scale".into() });
    assert_eq!(
        signature.bind(&[ids, mask, scale, TensorShape::new("extra", DType::F32, &[])]).unwrap_err(),
        ShapeError::UnknownInput { input: "extra".into() }
    );
    assert_eq!(
        signature.bind(&[ids, mask, ids]).unwrap_err(),
        ShapeError::DuplicateInput { input: "input_ids".into() }
    );
    assert_eq!(
        signature.bind(&[ids, TensorShape::new("attention_mask", DType::I32, &[1, 128]), scale]).unwrap_err(),
        ShapeError::DTypeMismatch { input: "attention_mask".into(), expected: DType::I64, actual: DType::I32 }
    );
    assert_eq!(
        signature.check(&[[1u64, 128].as_slice()]).unwrap_err(),
        ShapeError::InputCount { expected: 3, actual: 1 }
    );
    assert_eq!(signature.check_dtypes(&[DType::I64, DType::I64, DType::F32]), Ok(()));
    assert_eq!(
        signature.check_dtypes(&[DType::I64, DType::F32, DType::F32]),
        Err(ShapeError::DTypeMismatch { input: "attention_mask".into(), expected: DType::I64, actual: DType::F32 })
    );
    let mut request = signature.request_shapes();
    request.set(&signature, 0, &[1, 128]).unwrap();
    assert_eq!(
        signature.check_request(&request).unwrap_err(),
        ShapeError::MissingInput { input: "attention_mask".into() }
    );
    assert_eq!(
        request.set(&signature, 3, &[]).unwrap_err(),
        ShapeError::IndexOutOfRange { role: TensorRole::Input, index: 3, count: 3 }
    );
}

#[test]
fn duplicate_specs_are_refused() {
    let spec = TensorSpec::new("x", DType::F32, [Dim::fixed(1)]);
    assert_eq!(
        Signature::new(vec![spec.clone(), spec.clone()], Vec::new()).unwrap_err(),
        ShapeError::DuplicateSpec { role: TensorRole::Input, name: "x".into() }
    );
    assert_eq!(
        Signature::new(vec![spec.clone()], vec![spec.clone(), spec]).unwrap_err(),
        ShapeError::DuplicateSpec { role: TensorRole::Output, name: "x".into() }
    );
}

#[test]
fn request_shapes_belong_to_one_signature() {
    let (a, b) = (bert(), bert());
    let mut request = a.request_shapes();
    request.set_batch(&a, 2).unwrap();
    assert_eq!(b.check_request(&request).unwrap_err(), ShapeError::ForeignRequest);
    assert_eq!(request.set_batch(&b, 2).unwrap_err(), ShapeError::ForeignRequest);
    // A failed write leaves the request as it was.
    let before = request.clone();
    assert!(request.set(&a, 0, &[3, 64]).is_err());
    assert_eq!(request, before);
    assert_eq!(a.request_input_shape(&request, 0), Ok(Shape::from([2, 128])));
    assert_eq!(b.request_input_shape(&request, 0), Err(ShapeError::ForeignRequest));
}

#[test]
fn static_model_checks_exact_shapes() {
    let signature =
        Signature::new(vec![TensorSpec::new("x", DType::F32, [Dim::fixed(2), Dim::fixed(3)])], Vec::new()).unwrap();
    assert!(signature.is_static());
    assert!(signature.check(&[[2u64, 3].as_slice()]).unwrap().values().is_empty());
    assert!(matches!(signature.check(&[[2u64, 4].as_slice()]), Err(ShapeError::FixedDimMismatch { axis: 1, .. })));
    assert!(signature.check_request(&signature.request_shapes()).is_ok());
}

/// A random model: up to five inputs of rank up to four, each axis fixed or one of two symbols.
/// `one_symbol` restricts the symbols to the batch, which exercises the fast paths.
fn model(one_symbol: bool) -> impl Strategy<Value = Vec<Vec<Dim>>> {
    let dim = prop_oneof![
        3 => (1u64..4).prop_map(Dim::Fixed),
        2 => Just(Dim::symbolic("batch")),
        1 => Just(Dim::symbolic(if one_symbol { "batch" } else { "seq" })),
    ];
    prop::collection::vec(prop::collection::vec(dim, 0..5), 1..6)
}

/// A request for `dims`: the valid shapes for symbol values (batch, seq), then possibly one
/// perturbation (an extent changed, an axis added or removed, a huge extent).
fn request(model: &[Vec<Dim>], batch: u64, seq: u64, perturb: Option<(usize, usize, u64)>) -> Vec<Vec<u64>> {
    let mut shapes: Vec<Vec<u64>> = model
        .iter()
        .map(|dims| {
            dims.iter()
                .map(|dim| match dim {
                    Dim::Fixed(extent) => *extent,
                    Dim::Symbolic(name) if &**name == "batch" => batch,
                    Dim::Symbolic(_) => seq,
                })
                .collect()
        })
        .collect();
    if let Some((input, axis, value)) = perturb {
        let shape = &mut shapes[input % model.len()];
        match value % 5 {
            0 => shape.push(1),
            1 if !shape.is_empty() => {
                shape.pop();
            }
            2 if !shape.is_empty() => {
                let axis = axis % shape.len();
                shape[axis] = u64::MAX / 3;
            }
            _ if !shape.is_empty() => {
                let axis = axis % shape.len();
                shape[axis] = value % 4;
            }
            _ => {}
        }
    }
    shapes
}

fn agree(
    model: Vec<Vec<Dim>>,
    batch: u64,
    seq: u64,
    perturb: Option<(usize, usize, u64)>,
) -> Result<(), TestCaseError> {
    let specs: Vec<TensorSpec> =
        model.iter().enumerate().map(|(i, dims)| TensorSpec::new(format!("in{i}"), DType::F32, dims.clone())).collect();
    let signature = Signature::new(specs, Vec::new()).unwrap();
    let shapes = request(&model, batch, seq, perturb);
    let names: Vec<String> = (0..shapes.len()).map(|i| format!("in{i}")).collect();
    let named: Vec<TensorShape<'_>> =
        names.iter().zip(&shapes).map(|(name, dims)| TensorShape::new(name, DType::F32, dims)).collect();

    let bound = signature.bind(&named);
    let checked = signature.check(&shapes);
    prop_assert_eq!(&bound, &checked);

    let mut reusable = signature.request_shapes();
    let written: Result<(), ShapeError> =
        shapes.iter().enumerate().try_for_each(|(index, dims)| reusable.set(&signature, index, dims));
    match written {
        Ok(()) => prop_assert_eq!(signature.check_request(&reusable), checked),
        Err(_) => prop_assert!(checked.is_err(), "a write failed but check accepted {:?}", shapes),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn bind_check_and_check_request_agree(
        model in model(false),
        batch in 0u64..4,
        seq in 0u64..4,
        perturb in prop::option::of((0usize..8, 0usize..8, any::<u64>())),
    ) {
        agree(model, batch, seq, perturb)?;
    }

    #[test]
    fn fast_paths_agree_with_bind(
        model in model(true),
        batch in 0u64..4,
        perturb in prop::option::of((0usize..8, 0usize..8, any::<u64>())),
    ) {
        agree(model, batch, batch, perturb)?;
    }
}

#[test]
fn ranks_past_the_unrolled_ones_and_the_inline_storage_are_checked() {
    let dims: Vec<Dim> = std::iter::once(Dim::symbolic("batch")).chain((2..=8).map(Dim::fixed)).collect();
    let signature = Signature::new(
        vec![TensorSpec::new("deep", DType::U8, dims), TensorSpec::new("flat", DType::U8, [Dim::symbolic("batch")])],
        Vec::new(),
    )
    .unwrap();
    let good = Shape::from([3, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(signature.check(&[good.clone(), Shape::from([3])]).unwrap().batch(), Some(3));
    let mut bad = good.clone();
    bad.set_dim(7, 9);
    assert_eq!(
        signature.check(&[bad, Shape::from([3])]).unwrap_err(),
        ShapeError::FixedDimMismatch { input: "deep".into(), axis: 7, expected: 8, actual: 9 }
    );
    assert!(matches!(signature.check(&[good, Shape::from([4])]), Err(ShapeError::SymbolConflict { .. })));
}
