//! Padding-waste reports over traces and histograms.

use saggar_shape::{BatchHistogram, BucketPolicy, ShapeError, Splitting, WasteReport};

#[test]
fn uniform_trace_over_powers_of_two() {
    // Batches 1..=8 once each over buckets 1, 2, 4, 8: padded rows 0+0+1+0+3+2+1+0 = 7.
    let policy = BucketPolicy::powers_of_two(8).unwrap();
    let report = policy.waste_over_trace(1..=8, Splitting::Disabled).unwrap();
    assert_eq!(report.requests, 8);
    assert_eq!(report.launches, 8);
    assert_eq!(report.useful_rows, 36);
    assert_eq!(report.padded_rows, 7);
    assert_eq!(report.computed_rows(), 43);
    assert!((report.waste_ratio() - 7.0 / 43.0).abs() < 1e-12);
    assert!((report.padded_rows_per_request() - 7.0 / 8.0).abs() < 1e-12);
}

#[test]
fn histogram_and_trace_reports_agree() {
    let trace: Vec<u64> = (0..500u64).map(|i| 1 + (i * i + 7 * i) % 97).collect();
    let histogram = BatchHistogram::from_trace(trace.iter().copied()).unwrap();
    assert_eq!(histogram.total(), 500);
    for policy in [
        BucketPolicy::powers_of_two(64).unwrap(),
        BucketPolicy::stepped(64).unwrap(),
        BucketPolicy::adaptive(&histogram, 6).unwrap(),
    ] {
        let by_trace = policy.waste_over_trace(trace.iter().copied(), Splitting::Allowed).unwrap();
        let by_histogram = policy.waste_over_histogram(&histogram, Splitting::Allowed).unwrap();
        assert_eq!(by_trace, by_histogram, "{policy:?}");
        assert_eq!(by_trace.useful_rows, trace.iter().sum::<u64>());
    }
}

#[test]
fn split_requests_count_every_launch() {
    let policy = BucketPolicy::powers_of_two(32).unwrap();
    let mut report = WasteReport::default();
    report.record(&policy.plan(70, Splitting::Allowed).unwrap());
    assert_eq!((report.requests, report.launches, report.useful_rows, report.padded_rows), (1, 3, 70, 2));
    assert_eq!(
        policy.waste_over_trace([70], Splitting::Disabled),
        Err(ShapeError::BatchAboveLargestBucket { batch: 70, largest: 32 })
    );
}
