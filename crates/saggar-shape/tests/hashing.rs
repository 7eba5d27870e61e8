//! Shape hashing: the pinned stable key, its documented encoding, and canonical-order properties.

use proptest::prelude::*;
use saggar_shape::{DType, Dim, STABLE_KEY_CONTEXT, Signature, StableShapeKey, TensorShape, TensorSpec, fast_hash};

/// The stable key of one fixed input. If this test fails, the on-disk key changed: every cache
/// written before is orphaned. Change the encoding only with a new `STABLE_KEY_CONTEXT`
/// version, and then update this literal.
#[test]
fn stable_key_is_pinned() {
    let key = StableShapeKey::of(&[TensorShape::new("pixels", DType::F32, &[1, 3, 224, 224])]);
    assert_eq!(key.to_hex(), "ede8b6b691f09b6c72dd08b261e75bb3f8cb7a9ff48ad036596beaf67fd3af87");
}

/// The module documentation's byte table, written out by hand with the blake3 crate.
#[test]
fn stable_key_follows_the_documented_encoding() {
    let inputs = [TensorShape::new("mask", DType::Bool, &[2, 7]), TensorShape::new("ids", DType::I64, &[2, 7])];
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&2u64.to_le_bytes());
    // Canonical order: "ids" < "mask".
    for (name, code, dims) in [("ids", 9u8, [2u64, 7]), ("mask", 1u8, [2, 7])] {
        bytes.extend_from_slice(&(name.len() as u64).to_le_bytes());
        bytes.extend_from_slice(name.as_bytes());
        bytes.push(code);
        bytes.extend_from_slice(&(dims.len() as u64).to_le_bytes());
        for extent in dims {
            bytes.extend_from_slice(&extent.to_le_bytes());
        }
    }
    assert_eq!(DType::I64.code(), 9);
    assert_eq!(DType::Bool.code(), 1);
    let expected = blake3::derive_key(STABLE_KEY_CONTEXT, &bytes);
    assert_eq!(StableShapeKey::of(&inputs).as_bytes(), &expected);
}

#[test]
fn long_inputs_hash_the_same_through_the_buffer() {
    // Names and shapes long enough to cross the sink's internal buffer several times...
    // ...and one name longer than the buffer on its own.
    let mut names: Vec<String> = (0..40).map(|i| format!("{}_{i}", "x".repeat(i * 7))).collect();
    names[17] = "y".repeat(5000);
    let dims: Vec<Vec<u64>> = (0..40).map(|i| (0..(i % 9) as u64).map(|d| d * 1000 + i as u64).collect()).collect();
    let inputs: Vec<TensorShape<'_>> =
        names.iter().zip(&dims).map(|(name, dims)| TensorShape::new(name, DType::F16, dims)).collect();
    let mut order: Vec<&TensorShape<'_>> = inputs.iter().collect();
    order.sort_by(|a, b| a.name.cmp(b.name));
    let mut bytes = (inputs.len() as u64).to_le_bytes().to_vec();
    for input in order {
        bytes.extend_from_slice(&(input.name.len() as u64).to_le_bytes());
        bytes.extend_from_slice(input.name.as_bytes());
        bytes.push(input.dtype.code());
        bytes.extend_from_slice(&(input.dims.len() as u64).to_le_bytes());
        input.dims.iter().for_each(|extent| bytes.extend_from_slice(&extent.to_le_bytes()));
    }
    assert_eq!(StableShapeKey::of(&inputs).as_bytes(), &blake3::derive_key(STABLE_KEY_CONTEXT, &bytes));
}

#[test]
fn bindings_keys_match_free_functions() {
    let signature = Signature::new(
        vec![
            TensorSpec::new("z_ids", DType::I64, [Dim::symbolic("batch"), Dim::symbolic("seq")]),
            TensorSpec::new("a_mask", DType::U8, [Dim::symbolic("batch"), Dim::symbolic("seq")]),
            TensorSpec::new("table", DType::F32, [Dim::fixed(10), Dim::fixed(4)]),
        ],
        Vec::new(),
    )
    .unwrap();
    let shapes: [&[u64]; 3] = [&[3, 17], &[3, 17], &[10, 4]];
    let bindings = signature.check(&shapes).unwrap();
    let named: Vec<TensorShape<'_>> = signature
        .inputs()
        .iter()
        .zip(shapes)
        .map(|(spec, dims)| TensorShape::new(spec.name(), spec.dtype(), dims))
        .collect();
    assert_eq!(bindings.stable_key(), StableShapeKey::of(&named));
    assert_eq!(bindings.fast_hash(), fast_hash(&named));
    let other = signature.check(&[[4u64, 17].as_slice(), &[4, 17], &[10, 4]]).unwrap();
    assert_ne!(bindings.stable_key(), other.stable_key());
    assert_ne!(bindings, other);
}

/// One input drawn from a small alphabet, so that equal and unequal sets both come up often.
fn input() -> impl Strategy<Value = (String, DType, Vec<u64>)> {
    (
        prop::sample::select(vec!["a", "b", "ab", "input"]).prop_map(str::to_owned),
        prop::sample::select(vec![DType::F32, DType::F16, DType::I64]),
        prop::collection::vec(1u64..4, 0..3),
    )
}

fn canonical(inputs: &[(String, DType, Vec<u64>)]) -> Vec<(String, u8, Vec<u64>)> {
    let mut canonical: Vec<_> =
        inputs.iter().map(|(name, dtype, dims)| (name.clone(), dtype.code(), dims.clone())).collect();
    canonical.sort();
    canonical
}

fn borrowed(inputs: &[(String, DType, Vec<u64>)]) -> Vec<TensorShape<'_>> {
    inputs.iter().map(|(name, dtype, dims)| TensorShape::new(name, *dtype, dims)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn stable_keys_equal_exactly_when_canonical_shapes_equal(
        a in prop::collection::vec(input(), 0..4),
        b in prop::collection::vec(input(), 0..4),
    ) {
        let same = canonical(&a) == canonical(&b);
        let (key_a, key_b) = (StableShapeKey::of(&borrowed(&a)), StableShapeKey::of(&borrowed(&b)));
        prop_assert_eq!(key_a == key_b, same);
        if same {
            prop_assert_eq!(fast_hash(&borrowed(&a)), fast_hash(&borrowed(&b)));
        }
    }

    #[test]
    fn caller_order_does_not_change_keys(
        inputs in prop::collection::vec(input(), 0..6),
        seed in any::<u64>(),
    ) {
        let mut shuffled = inputs.clone();
        // A deterministic Fisher-Yates shuffle driven by the seed.
        let mut state = seed | 1;
        for i in (1..shuffled.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            shuffled.swap(i, (state % (i as u64 + 1)) as usize);
        }
        prop_assert_eq!(StableShapeKey::of(&borrowed(&inputs)), StableShapeKey::of(&borrowed(&shuffled)));
        prop_assert_eq!(fast_hash(&borrowed(&inputs)), fast_hash(&borrowed(&shuffled)));
    }

    #[test]
    fn hex_round_trips(bytes in any::<[u8; 32]>()) {
        let key = StableShapeKey::from_bytes(bytes);
        prop_assert_eq!(StableShapeKey::from_hex(&key.to_hex()), Some(key));
    }
}
