//! Pad and slice plans: padding then slicing returns the original bytes for every dtype and
//! rank, padding repeats the last real row, and unbatched tensors pass through untouched.

use proptest::prelude::*;
use saggar_shape::{
    BucketPolicy, Chunk, DType, Dim, PadPlan, ShapeError, Signature, SlicePlan, Splitting, TensorShape, TensorSpec,
    pad_rows_into, slice_rows,
};

/// Deterministic bytes, different for every position, so a misplaced row shows.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn pad_then_slice_returns_the_original_bytes(
        dtype in prop::sample::select(DType::ALL.to_vec()),
        batch in 1u64..20,
        row_dims in prop::collection::vec(0u64..5, 0..4),
        extra in 0u64..20,
        seed in any::<u64>(),
    ) {
        let bucket = batch + extra;
        let dims: Vec<u64> = std::iter::once(batch).chain(row_dims.iter().copied()).collect();
        let row_bytes = row_dims.iter().product::<u64>() as usize * dtype.size_bytes();
        let original = pattern(batch as usize * row_bytes, seed);

        let input = TensorShape::new("x", dtype, &dims);
        let pad = PadPlan::new(input, true, Chunk::whole(batch, bucket)).unwrap();
        prop_assert_eq!(pad.row_bytes(), row_bytes);
        prop_assert_eq!(pad.dst_len(), bucket as usize * row_bytes);
        let mut padded = vec![0u8; pad.dst_len()];
        pad_rows_into(&original, &mut padded, &pad).unwrap();
        prop_assert_eq!(&padded[..original.len()], &original[..]);
        let last = &original[original.len() - row_bytes..];
        for row in pad.replicated_rows() {
            let start = row as usize * row_bytes;
            prop_assert_eq!(&padded[start..start + row_bytes], last, "row {} repeats the last real row", row);
        }

        // The program's output has the padded batch; slicing returns the real rows.
        let program_dims: Vec<u64> = std::iter::once(bucket).chain(row_dims.iter().copied()).collect();
        let slice = SlicePlan::new(TensorShape::new("y", dtype, &program_dims), true, Chunk::whole(batch, bucket)).unwrap();
        let mut sliced = vec![0u8; original.len()];
        slice_rows(&padded, &mut sliced, &slice).unwrap();
        prop_assert_eq!(sliced, original);
    }

    #[test]
    fn split_requests_round_trip_chunk_by_chunk(
        dtype in prop::sample::select(DType::ALL.to_vec()),
        max in 1u64..16,
        batch in 1u64..70,
        row_dims in prop::collection::vec(1u64..4, 0..3),
        seed in any::<u64>(),
    ) {
        let policy = BucketPolicy::powers_of_two(max).unwrap();
        let plan = policy.plan(batch, Splitting::Allowed).unwrap();
        let dims: Vec<u64> = std::iter::once(batch).chain(row_dims.iter().copied()).collect();
        let row_bytes = row_dims.iter().product::<u64>() as usize * dtype.size_bytes();
        let original = pattern(batch as usize * row_bytes, seed);
        let mut output = vec![0u8; original.len()];
        for chunk in plan.chunks() {
            let pad = PadPlan::new(TensorShape::new("x", dtype, &dims), true, chunk).unwrap();
            let mut padded = vec![0u8; pad.dst_len()];
            pad_rows_into(&original, &mut padded, &pad).unwrap();
            // An identity "program": its output is its padded input.
            let program_dims: Vec<u64> = std::iter::once(chunk.bucket).chain(row_dims.iter().copied()).collect();
            let slice = SlicePlan::new(TensorShape::new("y", dtype, &program_dims), true, chunk).unwrap();
            slice_rows(&padded, &mut output, &slice).unwrap();
        }
        prop_assert_eq!(output, original);
    }
}

#[test]
fn inputs_without_a_batch_axis_are_never_padded() {
    let signature = Signature::new(
        vec![
            TensorSpec::new("ids", DType::I32, [Dim::symbolic("batch"), Dim::fixed(2)]),
            TensorSpec::new("table", DType::U8, [Dim::fixed(3), Dim::fixed(2)]),
        ],
        vec![
            TensorSpec::new("out", DType::I32, [Dim::symbolic("batch")]),
            TensorSpec::new("norm", DType::U8, [Dim::fixed(2)]),
        ],
    )
    .unwrap();
    let plan = BucketPolicy::powers_of_two(4).unwrap().plan(6, Splitting::Allowed).unwrap();
    let chunks: Vec<Chunk> = plan.chunks().collect();
    assert_eq!(chunks.len(), 2);
    let table: Vec<u8> = (10..16).collect();
    for chunk in &chunks {
        let pad = signature.pad_plan(1, &[3, 2], *chunk).unwrap();
        assert!(!pad.is_batched());
        assert_eq!(pad.src_range(), 0..6);
        assert!(pad.replicated_rows().is_empty());
        let mut copy = vec![0u8; pad.dst_len()];
        pad_rows_into(&table, &mut copy, &pad).unwrap();
        assert_eq!(copy, table);
        assert!(signature.pad_plan(0, &[6, 2], *chunk).unwrap().is_batched());
    }
    assert!(matches!(
        signature.pad_plan(2, &[1], chunks[0]),
        Err(ShapeError::IndexOutOfRange { index: 2, count: 2, .. })
    ));
    // An unbatched output is copied from the first chunk only.
    let first = signature.slice_plan(1, &[2], chunks[0]).unwrap();
    let second = signature.slice_plan(1, &[2], chunks[1]).unwrap();
    assert_eq!(first.dst_range(), 0..2);
    assert!(second.dst_range().is_empty());
    let mut norm = [0u8; 2];
    slice_rows(&[7, 8], &mut norm, &first).unwrap();
    slice_rows(&[9, 9], &mut norm, &second).unwrap();
    assert_eq!(norm, [7, 8]);
    // The batched output lands at its chunk's rows.
    let out = signature.slice_plan(0, &[2], chunks[1]).unwrap();
    assert_eq!(out.dst_range(), 16..24);
}

#[test]
fn undetermined_outputs_are_sliced_when_they_have_bucket_rows() {
    let signature = Signature::new(
        vec![TensorSpec::new("x", DType::F32, [Dim::symbolic("batch")])],
        vec![TensorSpec::new("y", DType::F32, [Dim::symbolic("unk__0"), Dim::fixed(2)])],
    )
    .unwrap();
    let chunk = Chunk::whole(3, 4);
    assert!(signature.slice_plan(0, &[4, 2], chunk).unwrap().is_batched());
    assert!(!signature.slice_plan(0, &[7, 2], chunk).unwrap().is_batched());
}

#[test]
fn short_buffers_are_typed_errors() {
    let plan =
        SlicePlan::new(TensorShape::new("y", DType::F32, &[4, 2]), true, Chunk { offset: 2, rows: 2, bucket: 4 })
            .unwrap();
    let mut dst = [0u8; 16];
    assert_eq!(
        slice_rows(&[0u8; 31], &mut dst, &plan),
        Err(ShapeError::BufferTooShort { buffer: "source", needed: 32, actual: 31 })
    );
    assert_eq!(
        slice_rows(&[0u8; 32], &mut dst, &plan),
        Err(ShapeError::BufferTooShort { buffer: "destination", needed: 32, actual: 16 })
    );
    assert!(matches!(
        SlicePlan::new(TensorShape::new("y", DType::F32, &[1, 2]), true, Chunk::whole(2, 4)),
        Err(ShapeError::RowsOutOfRange { needed: 2, available: 1, .. })
    ));
}
