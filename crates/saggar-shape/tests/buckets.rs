//! Bucket policies: the chosen bucket is the smallest that fits, adaptive buckets are optimal
//! (and never worse than powers of two), and lookups reject what they cannot serve.

use proptest::prelude::*;
use saggar_shape::{BatchHistogram, BucketPolicy, PolicyKind, ShapeError, Splitting};

/// Any policy, built from random parameters.
fn policy() -> impl Strategy<Value = BucketPolicy> {
    prop_oneof![
        (1u64..300).prop_map(|max| BucketPolicy::powers_of_two(max).unwrap()),
        (1u64..300).prop_map(|max| BucketPolicy::stepped(max).unwrap()),
        (1u64..300, 1u64..40).prop_map(|(max, step)| BucketPolicy::stepped_by(max, step).unwrap()),
        prop::collection::vec(1u64..300, 1..12).prop_map(|list| BucketPolicy::explicit(list).unwrap()),
        // Past the lookup-table limit, so lookups binary-search.
        prop::collection::vec(1u64..20_000, 1..12).prop_map(|list| BucketPolicy::explicit(list).unwrap()),
        (prop::collection::vec((1u64..200, 0u64..50), 1..30), 1usize..10).prop_map(|(counts, budget)| {
            let mut histogram = BatchHistogram::new();
            counts.into_iter().for_each(|(batch, count)| histogram.record_n(batch, count).unwrap());
            BucketPolicy::adaptive(&histogram, budget).unwrap()
        }),
    ]
}

/// A histogram of up to 40 distinct batch sizes below 200.
fn histogram(max_distinct: usize) -> impl Strategy<Value = BatchHistogram> {
    prop::collection::vec((1u64..200, 1u64..1000), 1..max_distinct).prop_map(|counts| {
        let mut histogram = BatchHistogram::new();
        counts.into_iter().for_each(|(batch, count)| histogram.record_n(batch, count).unwrap());
        histogram
    })
}

/// Total padded rows of serving `histogram` with `buckets` (every batch must fit).
fn waste(buckets: &[u64], histogram: &BatchHistogram) -> u128 {
    histogram
        .iter()
        .map(|(batch, count)| {
            let bucket = buckets.iter().copied().filter(|&b| b >= batch).min().expect("a bucket fits");
            u128::from(bucket - batch) * u128::from(count)
        })
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn chosen_bucket_is_the_smallest_that_fits(policy in policy(), batch in 0u64..25_000) {
        let buckets = policy.buckets();
        prop_assert!(buckets.windows(2).all(|pair| pair[0] < pair[1]), "buckets sorted and distinct");
        let smallest = buckets.iter().copied().find(|&bucket| bucket >= batch);
        match policy.bucket_for(batch) {
            Ok(bucket) => {
                prop_assert!(batch >= 1);
                prop_assert_eq!(Some(bucket), smallest);
                prop_assert_eq!(buckets[policy.bucket_index_for(batch).unwrap()], bucket);
            }
            Err(ShapeError::ZeroBatchSize) => prop_assert_eq!(batch, 0),
            Err(ShapeError::BatchAboveLargestBucket { batch: b, largest }) => {
                prop_assert_eq!(b, batch);
                prop_assert_eq!(largest, policy.largest());
                prop_assert!(smallest.is_none());
            }
            Err(other) => prop_assert!(false, "unexpected error {other:?}"),
        }
    }

    #[test]
    fn adaptive_never_wastes_more_than_powers_of_two(histogram in histogram(40)) {
        // Powers of two up to the next power of two of the largest batch: K of them.
        let top = histogram.max_batch().unwrap().next_power_of_two();
        let powers = BucketPolicy::powers_of_two(top).unwrap();
        let budget = powers.buckets().len();
        let adaptive = BucketPolicy::adaptive(&histogram, budget).unwrap();
        prop_assert!(adaptive.buckets().len() <= budget);
        let adaptive_waste = adaptive.waste_over_histogram(&histogram, Splitting::Disabled).unwrap();
        let powers_waste = powers.waste_over_histogram(&histogram, Splitting::Disabled).unwrap();
        prop_assert!(adaptive_waste.padded_rows <= powers_waste.padded_rows,
            "adaptive {:?} wastes {} rows, powers of two {}", adaptive.buckets(), adaptive_waste.padded_rows, powers_waste.padded_rows);
        prop_assert_eq!(adaptive_waste.useful_rows, powers_waste.useful_rows);
    }

    #[test]
    fn adaptive_is_optimal(histogram in histogram(9), budget in 1usize..5) {
        let sizes: Vec<u64> = histogram.iter().map(|(batch, _)| batch).collect();
        let largest = *sizes.last().unwrap();
        // Brute force over every subset of observed sizes that holds the largest.
        let mut best = u128::MAX;
        for mask in 0u32..(1 << sizes.len()) {
            let chosen: Vec<u64> = sizes.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, &s)| s).collect();
            if chosen.len() <= budget && chosen.last() == Some(&largest) {
                best = best.min(waste(&chosen, &histogram));
            }
        }
        let adaptive = BucketPolicy::adaptive(&histogram, budget).unwrap();
        prop_assert_eq!(waste(adaptive.buckets(), &histogram), best);
        prop_assert_eq!(adaptive.largest(), largest);
        prop_assert!(adaptive.buckets().iter().all(|bucket| sizes.contains(bucket)));
        prop_assert_eq!(adaptive.buckets().len(), budget.min(sizes.len()));
        prop_assert_eq!(adaptive.kind(), PolicyKind::Adaptive);
    }
}

#[test]
fn seed_policy_matches_the_runtime_it_replaces() {
    // Seed 001 precompiles 1, 2, 4, ... up to max_dynamic_batch and pads to the next one.
    let policy = BucketPolicy::powers_of_two(64).unwrap();
    assert_eq!(policy.buckets(), &[1, 2, 4, 8, 16, 32, 64]);
    for (batch, bucket) in [(1, 1), (3, 4), (5, 8), (17, 32), (33, 64), (64, 64)] {
        assert_eq!(policy.bucket_for(batch), Ok(bucket));
    }
    assert_eq!(policy.bucket_for(65), Err(ShapeError::BatchAboveLargestBucket { batch: 65, largest: 64 }));
    assert_eq!(policy.bucket_for(0), Err(ShapeError::ZeroBatchSize));
}

#[test]
fn stepped_wastes_under_eight_rows_above_four() {
    let policy = BucketPolicy::stepped(256).unwrap();
    for batch in 5..=256 {
        let bucket = policy.bucket_for(batch).unwrap();
        assert!(bucket - batch < 8, "batch {batch} bucket {bucket}");
        assert_eq!(bucket % 8, 0);
    }
}

#[test]
fn adaptive_uses_every_size_when_the_budget_allows() {
    let histogram = BatchHistogram::from_trace([3, 9, 9, 27]).unwrap();
    let policy = BucketPolicy::adaptive(&histogram, 10).unwrap();
    assert_eq!(policy.buckets(), &[3, 9, 27]);
    assert_eq!(policy.waste_over_histogram(&histogram, Splitting::Disabled).unwrap().padded_rows, 0);
}

#[test]
fn zero_count_size_forces_coverage() {
    let mut histogram = BatchHistogram::from_trace([1, 1, 2, 5]).unwrap();
    histogram.record_n(64, 0).unwrap();
    let policy = BucketPolicy::adaptive(&histogram, 3).unwrap();
    // Two requests of 1 padded to 2 (2 rows) beat one of 2 padded to 5 (3 rows).
    assert_eq!(policy.buckets(), &[2, 5, 64]);
}
