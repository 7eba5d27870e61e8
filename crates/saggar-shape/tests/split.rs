//! Split plans: chunks cover the batch exactly, use the fewest launches, and pad no more than
//! any other cover with that many launches.

use proptest::prelude::*;
use saggar_shape::{BatchHistogram, BucketPolicy, ShapeError, SplitPlan, Splitting};

fn policy() -> impl Strategy<Value = BucketPolicy> {
    prop_oneof![
        (1u64..100).prop_map(|max| BucketPolicy::powers_of_two(max).unwrap()),
        (1u64..100).prop_map(|max| BucketPolicy::stepped(max).unwrap()),
        prop::collection::vec(1u64..100, 1..6).prop_map(|list| BucketPolicy::explicit(list).unwrap()),
        (prop::collection::vec(1u64..100, 1..40), 1usize..6).prop_map(|(trace, budget)| BucketPolicy::adaptive(
            &BatchHistogram::from_trace(trace).unwrap(),
            budget
        )
        .unwrap()),
    ]
}

/// The least total bucket size of `chunks` buckets (repeats allowed) that holds `batch` rows.
fn least_cover(buckets: &[u64], chunks: usize, batch: u64) -> u64 {
    fn search(buckets: &[u64], chunks: usize, from: usize, sum: u64, batch: u64, best: &mut u64) {
        if chunks == 0 {
            if sum >= batch {
                *best = (*best).min(sum);
            }
            return;
        }
        for index in from..buckets.len() {
            search(buckets, chunks - 1, index, sum + buckets[index], batch, best);
        }
    }
    let mut best = u64::MAX;
    search(buckets, chunks, 0, 0, batch, &mut best);
    best
}

fn assert_covers(policy: &BucketPolicy, plan: &SplitPlan, batch: u64) -> Result<(), TestCaseError> {
    let mut next = 0;
    for chunk in plan.chunks() {
        prop_assert_eq!(chunk.offset, next, "chunks are contiguous");
        prop_assert!(chunk.rows >= 1);
        prop_assert!(chunk.rows <= chunk.bucket);
        prop_assert!(chunk.bucket <= policy.largest());
        prop_assert_eq!(
            policy.bucket_for(chunk.rows),
            Ok(chunk.bucket),
            "each chunk runs at the smallest bucket for its rows"
        );
        next += chunk.rows;
    }
    prop_assert_eq!(next, batch, "chunks cover the batch exactly");
    prop_assert_eq!(plan.chunk_count(), plan.chunks().count() as u64);
    prop_assert_eq!(plan.chunk_count(), batch.div_ceil(policy.largest()), "fewest launches");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn split_plans_cover_the_batch_exactly(policy in policy(), batch in 1u64..2_000) {
        let plan = policy.plan(batch, Splitting::Allowed).unwrap();
        assert_covers(&policy, &plan, batch)?;
        // Never more padding than the greedy rule (full chunks, then the remainder's bucket).
        let largest = policy.largest();
        let remainder = batch - (batch.div_ceil(largest) - 1) * largest;
        prop_assert!(plan.padded_rows() <= policy.bucket_for(remainder).unwrap() - remainder);
    }

    #[test]
    fn split_plans_pad_least_among_covers_with_fewest_launches(policy in policy(), chunks in 1u64..=5, rows in any::<u64>()) {
        // A batch that needs exactly `chunks` launches.
        let largest = policy.largest();
        let batch = (chunks - 1) * largest + 1 + rows % largest;
        let plan = policy.plan(batch, Splitting::Allowed).unwrap();
        prop_assert_eq!(plan.chunk_count(), chunks);
        prop_assert_eq!(plan.padded_rows() + batch, least_cover(policy.buckets(), chunks as usize, batch));
    }

    #[test]
    fn disabled_splitting_refuses_exactly_the_oversized(policy in policy(), batch in 1u64..400) {
        match policy.plan(batch, Splitting::Disabled) {
            Ok(plan) => {
                prop_assert!(batch <= policy.largest());
                prop_assert!(!plan.is_split());
                assert_covers(&policy, &plan, batch)?;
            }
            Err(error) => {
                prop_assert!(batch > policy.largest());
                prop_assert_eq!(error, ShapeError::BatchAboveLargestBucket { batch, largest: policy.largest() });
            }
        }
    }
}

#[test]
fn seventy_rows_over_buckets_up_to_thirty_two() {
    let plan = BucketPolicy::powers_of_two(32).unwrap().plan(70, Splitting::Allowed).unwrap();
    let chunks: Vec<(u64, u64, u64)> = plan.chunks().map(|c| (c.offset, c.rows, c.bucket)).collect();
    assert_eq!(chunks, [(0, 32, 32), (32, 32, 32), (64, 6, 8)]);
}

#[test]
fn large_buckets_fall_back_to_the_greedy_rule() {
    // The largest bucket is past the split-table limit.
    let policy = BucketPolicy::explicit([3 << 15, 1 << 17]).unwrap();
    let batch = (1 << 17) + 5;
    let plan = policy.plan(batch, Splitting::Allowed).unwrap();
    let chunks: Vec<(u64, u64, u64)> = plan.chunks().map(|c| (c.offset, c.rows, c.bucket)).collect();
    assert_eq!(chunks, [(0, 1 << 17, 1 << 17), (1 << 17, 5, 3 << 15)]);
}
