//! Bucket policies, split plans, and pad and slice plans, on the host: what a dispatcher does
//! with a request's batch before anything touches a device.
//!
//! Run it with `cargo run -p saggar-shape --example buckets`.

use saggar_shape::{
    BatchHistogram, BucketPolicy, DType, Dim, ShapeError, Signature, Splitting, TensorSpec, pad_rows_into, slice_rows,
};

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

fn main() -> Result<(), ShapeError> {
    // A model: `x` [batch, 2] in, `y` [batch, 2] out, and `scale` [2] without a batch axis.
    let signature = Signature::new(
        vec![
            TensorSpec::new("x", DType::F32, [Dim::symbolic("batch"), Dim::Fixed(2)]),
            TensorSpec::new("scale", DType::F32, [Dim::Fixed(2)]),
        ],
        vec![TensorSpec::new("y", DType::F32, [Dim::symbolic("batch"), Dim::Fixed(2)])],
    )?;

    // Four policies with a largest bucket of 32; the adaptive one picks 3 buckets that minimise the
    // expected padding over an observed trace.
    let observed = BatchHistogram::from_trace([1, 1, 1, 2, 3, 3, 5, 9, 9, 9, 17, 32])?;
    for policy in [
        BucketPolicy::powers_of_two(32)?,
        BucketPolicy::stepped(32)?,
        BucketPolicy::explicit([3, 10, 32])?,
        BucketPolicy::adaptive(&observed, 3)?,
    ] {
        let served: Vec<(u64, u64)> =
            [1, 3, 5, 9, 17].iter().map(|&b| Ok((b, policy.bucket_for(b)?))).collect::<Result<_, ShapeError>>()?;
        println!("{:?} buckets {:?}: batch -> bucket {served:?}", policy.kind(), policy.buckets());
    }

    // A batch above the largest bucket is split into chunks (or refused with splitting off).
    let policy = BucketPolicy::powers_of_two(8)?;
    let plan = policy.plan(21, Splitting::Allowed)?;
    let chunks: Vec<_> = plan.chunks().map(|c| (c.offset, c.rows, c.bucket)).collect();
    println!(
        "batch 21 over buckets {:?}: (offset, rows, bucket) {chunks:?}, {} padded rows",
        policy.buckets(),
        plan.padded_rows()
    );
    assert!(policy.plan(21, Splitting::Disabled).is_err());

    // Pad a 3-row input to bucket 4 (the last real row repeats), then slice a 4-row output back to 3.
    let x: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let chunk = policy.plan(3, Splitting::Allowed)?.chunks().next().expect("one chunk");
    let pad = signature.pad_plan(0, &[3, 2], chunk)?;
    let mut padded = vec![0u8; pad.dst_len()];
    pad_rows_into(&x, &mut padded, &pad)?;
    println!(
        "x padded to bucket {}: {:?} (rows {:?} repeat the last real row)",
        chunk.bucket,
        floats(&padded),
        pad.replicated_rows()
    );
    assert!(!signature.pad_plan(1, &[2], chunk)?.is_batched(), "`scale` has no batch axis: never padded");

    let slice = signature.slice_plan(0, &[chunk.bucket, 2], chunk)?;
    let mut y = vec![0u8; 3 * 8];
    slice_rows(&padded, &mut y, &slice)?;
    println!("y sliced back to 3 rows: {:?}", floats(&y));
    assert_eq!(y, x);
    Ok(())
}
