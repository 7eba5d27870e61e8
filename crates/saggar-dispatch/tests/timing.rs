//! `Session::run_into_timed` and `Session::copy_times`: a timed run computes what `run_into` computes,
//! takes the same paths and counts, and its stages fit inside the call; copies are timed per bucket.

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::*;
use saggar_dispatch::{BucketSpec, HostTensor, RunPath, Session, SessionConfig};

type S = Session<saggar_device::host::HostBackend, SumModel>;

fn session(model: &Arc<SumModel>) -> S {
    let config = SessionConfig::builder().buckets(BucketSpec::List(vec![2, 4, 8])).build().unwrap();
    Session::builder(host_device(), model.clone()).config(config).build().unwrap()
}

fn host<'a>(s: &'a S, data: &'a [Vec<f32>], dims: &'a [Vec<u64>]) -> Vec<HostTensor<'a>> {
    s.signature()
        .inputs()
        .iter()
        .zip(data)
        .zip(dims)
        .map(|((spec, d), dims)| HostTensor { name: spec.name(), dtype: spec.dtype(), dims, data: as_bytes(d) })
        .collect()
}

#[test]
fn timed_runs_compute_and_count_what_untimed_runs_do() {
    let model = Arc::new(SumModel::new(2, 4, true));
    let s = session(&model);
    let timer = s.stage_timer().unwrap();
    // Batch 3 pads into bucket 4 (fast, then ultra-fast); batch 11 is split over two buckets
    // (standard: not one main program, so no stage split).
    for (batch, expected) in
        [(3usize, RunPath::Fast), (3, RunPath::UltraFast), (8, RunPath::Fast), (11, RunPath::Standard)]
    {
        let data = model.inputs(batch, 5);
        let dims = model.dims(batch as u64);
        let inputs = host(&s, &data, &dims);
        let (want_sum, want_rows) = model.reference(&data, batch);
        let mut outputs = vec![vec![0u8; want_sum.len() * 4], vec![0u8; want_rows.len() * 4]];
        let started = Instant::now();
        let (info, times) = s.run_into_timed(&timer, &inputs, &mut outputs).unwrap();
        let latency = started.elapsed();
        assert_eq!(info.path, expected, "batch {batch}");
        assert_eq!(floats(&outputs[0]), want_sum, "batch {batch}");
        assert_eq!(floats(&outputs[1]), want_rows, "batch {batch}");
        let host_stages = times.queue_wait + times.check + times.gather + times.enqueue + times.sync + times.scatter;
        assert!(host_stages <= latency, "batch {batch}: stages {host_stages:?} within the call's {latency:?}");
        match expected {
            RunPath::Standard => assert_eq!(times.device, None, "a split request has no single device span"),
            _ => {
                let device = times.device.expect("one main program: a device span");
                assert!(device <= latency, "batch {batch}: device span {device:?} within {latency:?}");
                assert_eq!(info.bucket, Some(if batch <= 4 { 4 } else { 8 }));
            }
        }
    }
    let stats = s.stats();
    assert_eq!((stats.ultra_fast, stats.fast, stats.standard, stats.failed), (1, 2, 1, 0));
    assert_eq!(stats.requests, 4);

    // A timed run leaves the context as an untimed one would: the next untimed run of the same
    // batch is ultra-fast and correct.
    let data = model.inputs(11, 5);
    let dims = model.dims(11);
    let mut outputs = vec![vec![0u8; 11 * 4 * 4], vec![0u8; 11 * 4]];
    let info = s.run_into(&host(&s, &data, &dims), &mut outputs).unwrap();
    assert_eq!(floats(&outputs[0]), model.reference(&data, 11).0);
    assert_eq!(info.path, RunPath::Standard);
}

#[test]
fn a_bad_timed_request_is_a_typed_error_and_counted() {
    let model = Arc::new(SumModel::new(2, 4, false));
    let s = session(&model);
    let timer = s.stage_timer().unwrap();
    let data = model.inputs(3, 1);
    let dims = model.dims(3);
    let mut short = vec![vec![0u8; 4], vec![0u8; 4]];
    assert!(s.run_into_timed(&timer, &host(&s, &data, &dims), &mut short).is_err());
    let mut too_few: Vec<Vec<u8>> = vec![vec![0u8; 3 * 16]];
    assert!(s.run_into_timed(&timer, &host(&s, &data, &dims), &mut too_few).is_err());
    assert_eq!(s.stats().failed, 2);
    // The session keeps serving.
    let mut outputs = vec![vec![0u8; 3 * 16], vec![0u8; 3 * 4]];
    let (info, _) = s.run_into_timed(&timer, &host(&s, &data, &dims), &mut outputs).unwrap();
    assert_eq!(floats(&outputs[0]), model.reference(&data, 3).0);
    assert_eq!(info.path, RunPath::Fast);
}

#[test]
fn copy_times_cover_each_bucket_and_only_buckets() {
    let model = Arc::new(SumModel::new(2, 4, false));
    let s = session(&model);
    let timer = s.stage_timer().unwrap();
    let two = s.copy_times(&timer, 2, 3).unwrap().expect("bucket 2 exists");
    let eight = s.copy_times(&timer, 8, 3).unwrap().expect("bucket 8 exists");
    assert!(two.upload_bytes > 0 && two.download_bytes > 0);
    assert!(eight.upload_bytes > two.upload_bytes && eight.download_bytes > two.download_bytes);
    assert_eq!(s.copy_times(&timer, 3, 3).unwrap(), None, "3 is not a bucket");
    assert_eq!(s.stats().requests, 0, "timing copies is not a request");
    // Requests after the copies are still correct (the copies left no stale ultra-fast state).
    let data = model.inputs(2, 9);
    let dims = model.dims(2);
    let mut outputs = vec![vec![0u8; 2 * 16], vec![0u8; 2 * 4]];
    s.run_into(&host(&s, &data, &dims), &mut outputs).unwrap();
    assert_eq!(floats(&outputs[0]), model.reference(&data, 2).0);
}
