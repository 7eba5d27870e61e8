//! Compile once, load everywhere: a second session over the same cache directory compiles nothing;
//! a session group over two devices compiles once and loads once per bucket.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::*;
use saggar_cache::{CacheConfig, CompileCache};
use saggar_device::Backend;
use saggar_device::host::HostBackend;
use saggar_dispatch::{BucketSpec, HostTensor, ProgramSource, Routing, Session, SessionConfig, SessionGroup};
use saggar_shape::DType;

fn cache(dir: &std::path::Path) -> Arc<CompileCache> {
    Arc::new(CompileCache::open(CacheConfig::builder(dir.join("cache")).build()).unwrap())
}

#[test]
fn a_second_session_on_the_same_cache_directory_compiles_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let model = Arc::new(SumModel::new(2, 4, false));
    let config = |c| SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 16 }).cache(c).build().unwrap();
    let first = Session::builder(host_device(), model.clone()).config(config(cache(tmp.path()))).build().unwrap();
    assert_eq!(first.stats().compiles, 5);
    assert_eq!(model.compiles.load(Ordering::SeqCst), 5);
    drop(first);
    let loaded = std::sync::Mutex::new(Vec::new());
    // A fresh cache instance: no memory tier, so every bucket comes from disk, in parallel.
    let second = Session::new(host_device(), model.clone(), config(cache(tmp.path())), &|p| {
        loaded.lock().unwrap().push(p.source)
    })
    .unwrap();
    assert_eq!(model.compiles.load(Ordering::SeqCst), 5, "the second session compiled");
    assert_eq!(second.stats().compiles, 0);
    assert_eq!(second.stats().disk_loads, 5);
    assert_eq!(loaded.lock().unwrap().iter().filter(|s| **s == ProgramSource::Loaded).count(), 5);
    let data = model.inputs(3, 1);
    let dims = model.dims(3);
    let inputs: Vec<HostTensor<'_>> = second
        .signature()
        .inputs()
        .iter()
        .zip(&data)
        .zip(&dims)
        .map(|((sp, d), dims)| HostTensor { name: sp.name(), dtype: DType::F32, dims, data: as_bytes(d) })
        .collect();
    assert_eq!(floats(&second.run(&inputs).unwrap()[0].data), model.reference(&data, 3).0);
}

#[test]
fn a_session_group_over_two_devices_compiles_once_and_loads_once() {
    let tmp = tempfile::tempdir().unwrap();
    let model = Arc::new(SumModel::new(2, 4, false));
    let config =
        SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 8 }).cache(cache(tmp.path())).build().unwrap();
    let devices = vec![HostBackend::open(0).unwrap(), HostBackend::open(1).unwrap()];
    let group = SessionGroup::new(devices, model.clone(), config, Routing::RoundRobin, &|_, _| {}).unwrap();
    assert_eq!(model.compiles.load(Ordering::SeqCst), 4, "one compile per bucket for both devices");
    let stats = group.stats();
    assert_eq!((stats[0].compiles, stats[1].compiles), (4, 0));
    assert_eq!(stats[1].program_loads, 4, "the second device loads what the first compiled");
    let data = model.inputs(5, 2);
    let dims = model.dims(5);
    let inputs: Vec<HostTensor<'_>> = group.sessions()[0]
        .signature()
        .inputs()
        .iter()
        .zip(&data)
        .zip(&dims)
        .map(|((sp, d), dims)| HostTensor { name: sp.name(), dtype: DType::F32, dims, data: as_bytes(d) })
        .collect();
    let mut used = [false; 2];
    for _ in 0..4 {
        let (device, out) = group.run(&inputs).unwrap();
        used[device] = true;
        assert_eq!(floats(&out[0].data), model.reference(&data, 5).0);
    }
    assert_eq!(used, [true, true], "round robin uses both devices");
}

#[test]
fn a_group_without_a_cache_is_refused_with_a_hint() {
    let model = Arc::new(SumModel::new(2, 4, false));
    let err = SessionGroup::new(
        vec![host_device()],
        model,
        SessionConfig::builder().build().unwrap(),
        Routing::LeastLoaded,
        &|_, _| {},
    )
    .unwrap_err();
    assert!(err.to_string().contains("compile cache"), "{err}");
}
