//! Live re-bucketing: a trace that shifts is re-fitted within the configured interval and pays
//! (within 10%) the padding of an offline fit to its second half; runs on every path stay correct
//! while tables are swapped under them; graphs of retired buckets are dropped.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use proptest::prelude::*;
use saggar_dispatch::{BucketSpec, LiveBuckets, Session, SessionConfig, StatsSnapshot};
use saggar_shape::{BatchHistogram, BucketPolicy, Splitting, WasteReport};

/// A small deterministic generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A Zipf draw (exponent 1.1) over `lo..=hi`: `lo` is the most frequent.
    fn zipf(&mut self, lo: u64, hi: u64) -> u64 {
        let weights: Vec<f64> = (1..=hi - lo + 1).map(|r| 1.0 / (r as f64).powf(1.1)).collect();
        let total: f64 = weights.iter().sum();
        let mut u = (self.next() >> 11) as f64 / (1u64 << 53) as f64 * total;
        for (i, w) in weights.iter().enumerate() {
            if u < *w {
                return lo + i as u64;
            }
            u -= w;
        }
        hi
    }
}

/// Waits until `done` holds of the session's counters (the refit thread works in the background).
fn wait_for(session: &Session<saggar_device::host::HostBackend, SumModel>, done: impl Fn(&StatsSnapshot) -> bool) {
    let start = Instant::now();
    while !done(&session.stats()) {
        assert!(start.elapsed() < Duration::from_secs(20), "the refit thread did not finish: {:?}", session.stats());
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_shifting_zipf_trace_is_refit_within_the_interval_and_pays_an_offline_fits_padding() {
    const EVERY: u64 = 200;
    const BUDGET: usize = 4;
    const MAX: u64 = 64;
    let model = Arc::new(SumModel::new(1, 2, false));
    let config = SessionConfig::builder()
        .buckets(BucketSpec::PowersOfTwo { max: MAX })
        .live_buckets(LiveBuckets::new(EVERY, BUDGET))
        .build()
        .unwrap();
    let session = Session::builder(host_device(), model.clone()).config(config).build().unwrap();
    let mut rng = Rng(7);
    let first: Vec<u64> = (0..2 * EVERY).map(|_| rng.zipf(1, 8)).collect();
    let second: Vec<u64> = (0..3 * EVERY).map(|_| rng.zipf(32, 64)).collect();

    // Each interval is closed before the next request, so every window holds exactly one interval.
    let mut windows = 0;
    let mut run_interval = |batches: &[u64], seed: u32| {
        for (i, &b) in batches.iter().enumerate() {
            run_checked(&session, &model, b as usize, seed + i as u32);
        }
        windows += 1;
        wait_for(&session, |s| s.refit_windows >= windows);
    };
    for (n, interval) in first.chunks(EVERY as usize).enumerate() {
        run_interval(interval, n as u32 * 1000);
    }
    let fitted_first = session.buckets();
    assert!(fitted_first.iter().filter(|&&b| b < MAX).all(|&b| b <= 8), "first fit {fitted_first:?}");
    assert_eq!(fitted_first.len(), BUDGET);

    // One interval after the shift, the buckets fit the new traffic.
    run_interval(&second[..EVERY as usize], 50_000);
    let refit = session.buckets();
    assert!(
        refit.iter().all(|&b| (32..=MAX).contains(&b)),
        "refit within one interval of the shift: {refit:?} {:?}",
        session.stats()
    );

    // The rest of the second half: the measured padding against an offline fit to all of it.
    let before = session.stats();
    for (n, interval) in second[EVERY as usize..].chunks(EVERY as usize).enumerate() {
        run_interval(interval, 60_000 + n as u32 * 1000);
    }
    let after = session.stats();
    let padded = (after.padded_rows - before.padded_rows) as f64;
    let useful = (after.useful_rows - before.useful_rows) as f64;
    let live_waste = padded / (padded + useful);
    let mut histogram = BatchHistogram::from_trace(second.iter().copied()).unwrap();
    histogram.record_n(MAX, 0).unwrap();
    let offline = BucketPolicy::adaptive(&histogram, BUDGET).unwrap();
    let report: WasteReport =
        offline.waste_over_trace(second[EVERY as usize..].iter().copied(), Splitting::Allowed).unwrap();
    let offline_waste = report.waste_ratio();
    println!(
        "live buckets {:?} waste {live_waste:.4}; offline {:?} waste {offline_waste:.4}; refits {}",
        session.buckets(),
        offline.buckets(),
        after.refits
    );
    assert!(
        live_waste <= offline_waste * 1.10 + 1e-9,
        "live waste {live_waste} exceeds the offline fit's {offline_waste} by more than 10%"
    );
    assert!(after.refits >= 2 && after.refit_failures == 0, "{after:?}");
}

#[test]
fn graphs_of_retired_buckets_are_dropped() {
    let model = Arc::new(SumModel::new(1, 2, false));
    let config = SessionConfig::builder()
        .buckets(BucketSpec::PowersOfTwo { max: 16 })
        .max_concurrency(1)
        .live_buckets(LiveBuckets::new(8, 2))
        .build()
        .unwrap();
    let session = Session::builder(host_device(), model.clone()).config(config).build().unwrap();
    // Captures graphs of buckets 1, 2 and 8, then batch 3 traffic: the fit is {3, 16}.
    for (i, b) in [1, 2, 8, 3, 3, 3, 3, 3].into_iter().enumerate() {
        run_checked(&session, &model, b, i as u32);
    }
    // Graphs of buckets 1, 2, 8 and 4 (batch 3's), of one size each (one context, same nodes).
    let before = session.stats().graph_bytes;
    assert!(before > 0 && before % 4 == 0, "four graphs measured: {before}");
    wait_for(&session, |s| s.refits >= 1);
    assert_eq!(session.buckets(), vec![3, 16]);
    run_checked(&session, &model, 3, 99);
    let stats = session.stats();
    assert!(stats.retired_graphs >= 4, "graphs of buckets 1, 2, 4 and 8 retired: {stats:?}");
    // The retired graphs gave their memory back to the session's budget: bucket 3's graph is all
    // the session holds now.
    assert_eq!(stats.graph_bytes, before / 4, "{stats:?}");
    assert_eq!(stats.graph_bytes_peak, before, "{stats:?}");
}

#[test]
fn graphs_of_retired_buckets_leave_the_budget_of_idle_contexts_at_the_swap() {
    let model = Arc::new(SumModel::new(1, 2, false));
    let config = SessionConfig::builder()
        .buckets(BucketSpec::PowersOfTwo { max: 16 })
        .max_concurrency(1)
        .live_buckets(LiveBuckets::new(8, 2))
        .build()
        .unwrap();
    let session = Session::builder(host_device(), model.clone()).config(config).build().unwrap();
    for (i, b) in [1, 2, 8, 3, 3, 3, 3, 3].into_iter().enumerate() {
        run_checked(&session, &model, b, i as u32);
    }
    wait_for(&session, |s| s.refits >= 1);
    // No request ran since the swap: the refit itself dropped the idle context's retired graphs
    // (unless the last request still held the context's graphs when the refit came, in which case
    // they go on its next run).
    let stats = session.stats();
    if stats.retired_graphs > 0 {
        assert_eq!(stats.retired_graphs, 4, "{stats:?}");
        assert_eq!(stats.graph_bytes, 0, "every graph was of a retired bucket: {stats:?}");
    }
    run_checked(&session, &model, 3, 99);
    let stats = session.stats();
    assert_eq!(stats.retired_graphs, 4, "{stats:?}");
    assert_eq!(stats.graph_bytes * 4, stats.graph_bytes_peak, "one graph of four kept: {stats:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]
    /// Four threads run random batches (host and device paths) while the refit thread swaps tables
    /// every few requests: every output is right, and tables were swapped during the runs.
    #[test]
    fn runs_during_swaps_are_always_correct(seed in any::<u64>(), every in 4u64..12) {
        let model = Arc::new(SumModel::new(2, 3, true));
        let config = SessionConfig::builder()
            .buckets(BucketSpec::PowersOfTwo { max: 16 })
            .max_concurrency(4)
            .live_buckets(LiveBuckets::new(every, 2))
            .build()
            .unwrap();
        let session = Session::builder(host_device(), model.clone()).config(config).build().unwrap();
        std::thread::scope(|scope| {
            for t in 0..4u64 {
                let (session, model) = (&session, &model);
                scope.spawn(move || {
                    let mut rng = Rng(seed ^ (t << 32));
                    let device = session.device().clone();
                    for i in 0..40u32 {
                        // Traffic drifts between small and large batches (and past the largest bucket).
                        let batch = if (i / 10) % 2 == 0 { rng.zipf(1, 5) } else { rng.zipf(9, 20) } as usize;
                        let seed = (t as u32) * 1000 + i;
                        if i % 3 == 2 {
                            let req = DeviceRequest::new(&device, model, batch, seed);
                            let (ins, outs) = req.tensors(model);
                            session.run_device(&ins, &outs).unwrap();
                            req.check(&device, model);
                        } else {
                            run_checked(session, model, batch, seed);
                        }
                    }
                });
            }
        });
        wait_for(&session, |s| s.refits >= 1);
        let stats = session.stats();
        prop_assert_eq!(stats.failed, 0);
        prop_assert_eq!(stats.refit_failures, 0);
    }
}
