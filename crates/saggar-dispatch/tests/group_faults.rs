//! A session group whose device fails mid-run: the requests that meet the lost device fail with a
//! typed error, the group routes around it, and the other devices keep serving.

mod common;

use std::sync::Arc;

use common::*;
use saggar_cache::{CacheConfig, CompileCache};
use saggar_device::host::{HostConfig, HostDevice};
use saggar_dispatch::{BucketSpec, DispatchError, Routing, SessionConfig, SessionGroup};

fn group(
    lose_after: [Option<u64>; 2],
    routing: Routing,
) -> (tempfile::TempDir, Arc<SumModel>, SessionGroup<saggar_device::host::HostBackend, SumModel>) {
    let tmp = tempfile::tempdir().unwrap();
    let model = Arc::new(SumModel::new(2, 4, false));
    let cache = Arc::new(CompileCache::open(CacheConfig::builder(tmp.path().join("cache")).build()).unwrap());
    let config = SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 8 }).cache(cache).build().unwrap();
    let devices = lose_after
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            HostDevice::with_config(i, HostConfig { lose_after_launches: n, ..HostConfig::default() }).unwrap()
        })
        .collect();
    let group = SessionGroup::new(devices, model.clone(), config, routing, &|_, _| {}).unwrap();
    (tmp, model, group)
}

#[test]
fn a_lost_device_fails_its_request_and_the_others_keep_serving() {
    // Sequential requests under least-loaded routing all go to device 0, so that is the one to lose.
    for (routing, faulty) in [(Routing::RoundRobin, 1), (Routing::LeastLoaded, 0)] {
        let mut lose_after = [None, None];
        lose_after[faulty] = Some(3);
        let (_tmp, model, group) = group(lose_after, routing);
        let healthy = 1 - faulty;
        let (data, dims) = (model.inputs(3, 7), model.dims(3));
        let inputs = host_tensors(&model, &data, &dims);
        let expected = model.reference(&data, 3).0;
        let (mut served, mut lost_errors) = ([0usize; 2], 0);
        for _ in 0..40 {
            match group.run(&inputs) {
                Ok((device, out)) => {
                    served[device] += 1;
                    assert_eq!(floats(&out[0].data), expected);
                }
                Err(e) => {
                    assert!(e.is_device_lost(), "{routing:?}: {e}");
                    assert!(e.to_string().contains(&format!("device {faulty} is lost")), "{e}");
                    assert_eq!(e.to_string().matches("is lost").count(), 1, "said once: {e}");
                    lost_errors += 1;
                }
            }
        }
        assert_eq!(lost_errors, 1, "{routing:?}: only the request that met the fault fails");
        assert_eq!(served[0] + served[1], 39);
        assert!(served[healthy] >= 30, "{routing:?}: device {healthy} takes the load after the loss: {served:?}");
        assert!(group.lost()[faulty]);
        assert!(!group.lost()[healthy]);
        let stats = group.stats();
        assert_eq!((stats[healthy].failed, stats[faulty].failures.device), (0, 1));
        assert_eq!(group.total_stats().requests, stats[0].requests + stats[1].requests);
    }
}

#[test]
fn a_request_written_in_place_also_takes_a_lost_device_out() {
    let (_tmp, model, group) = group([Some(0), None], Routing::RoundRobin);
    let data = model.inputs(2, 1);
    let (device, mut request) = group.request(2).unwrap();
    assert_eq!(device, 0);
    for (i, d) in data.iter().enumerate() {
        request.write_input_bytes(i, as_bytes(d)).unwrap();
    }
    assert!(request.run().unwrap_err().is_device_lost());
    drop(request);
    assert_eq!(group.lost(), [true, false]);
    for _ in 0..3 {
        let (device, mut request) = group.request(2).unwrap();
        assert_eq!(device, 1, "requests go to the device left");
        for (i, d) in data.iter().enumerate() {
            request.write_input_bytes(i, as_bytes(d)).unwrap();
        }
        request.run().unwrap();
        assert_eq!(request.output::<f32>(0).unwrap(), model.reference(&data, 2).0);
    }
}

#[test]
fn once_every_device_is_lost_requests_fail_with_no_device_left() {
    let (_tmp, model, group) = group([Some(0), Some(0)], Routing::RoundRobin);
    let (data, dims) = (model.inputs(1, 3), model.dims(1));
    let inputs = host_tensors(&model, &data, &dims);
    assert!(group.run(&inputs).unwrap_err().is_device_lost());
    assert!(group.run(&inputs).unwrap_err().is_device_lost());
    let err = group.run(&inputs).unwrap_err();
    assert!(matches!(err, DispatchError::NoDeviceLeft { devices: 2 }), "{err}");
    assert!(err.to_string().contains("restart the process"), "{err}");
}
