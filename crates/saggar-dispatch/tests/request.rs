//! Requests written in place (`Session::request`): outputs equal `Session::run`, views of
//! concurrent requests never alias, dropped requests return their lease and leak nothing, and
//! the typed errors of the API.

mod common;

use std::sync::{Arc, Barrier, mpsc};
use std::time::Duration;

use common::*;
use saggar_device::Backend;
use saggar_device::host::HostBackend;
use saggar_dispatch::{BucketSpec, DispatchError, GraphConfig, HostTensor, RunPath, Session, SessionConfig};
use saggar_shape::DType;

type HostSession = Session<HostBackend, SumModel>;

fn session(model: SumModel, max: u64, concurrency: usize, graphs: bool) -> (HostSession, Arc<SumModel>) {
    let model = Arc::new(model);
    let config = SessionConfig::builder()
        .buckets(BucketSpec::PowersOfTwo { max })
        .max_concurrency(concurrency)
        .graphs(GraphConfig::default().with_enabled(graphs))
        .build()
        .unwrap();
    (Session::builder(host_device(), model.clone()).config(config).build().unwrap(), model)
}

/// Writes `data` (binding order) into a request's inputs, by name for the even inputs and by index
/// for the odd ones.
fn fill(request: &mut saggar_dispatch::Request<'_, HostBackend, SumModel>, names: &[String], data: &[Vec<f32>]) {
    for (i, d) in data.iter().enumerate() {
        let view = if i % 2 == 0 { request.input_mut::<f32>(&names[i]) } else { request.input_mut::<f32>(i) };
        view.unwrap().copy_from_slice(d);
    }
}

fn host_run(session: &HostSession, model: &SumModel, data: &[Vec<f32>], batch: u64) -> Vec<Vec<f32>> {
    let dims = model.dims(batch);
    let specs = session.signature().inputs();
    let inputs: Vec<HostTensor<'_>> = specs
        .iter()
        .zip(data)
        .zip(&dims)
        .map(|((s, d), dims)| HostTensor { name: s.name(), dtype: DType::F32, dims, data: as_bytes(d) })
        .collect();
    session.run(&inputs).unwrap().iter().map(|t| floats(&t.data)).collect()
}

#[test]
fn outputs_equal_session_run_for_every_batch_with_graphs_on_and_off() {
    for graphs in [true, false] {
        let (s, m) = session(SumModel::new(3, 4, true), 8, 2, graphs);
        let names = names(&m);
        for batch in 1..=8u64 {
            let mut request = s.request(batch).unwrap();
            assert_eq!(request.bucket(), Some(batch.next_power_of_two()));
            assert_eq!(request.output_dims(), &[vec![batch, 4], vec![batch, 1]]);
            for (round, seed) in [3u32, 11].into_iter().enumerate() {
                let data = m.inputs(batch as usize, seed + batch as u32);
                fill(&mut request, &names, &data);
                let info = request.run().unwrap();
                assert_eq!(info.path, if round == 0 { RunPath::Fast } else { RunPath::UltraFast }, "batch {batch}");
                assert_eq!(info.replayed, graphs);
                let want = host_run(&s, &m, &data, batch);
                assert_eq!(request.output::<f32>("sum").unwrap(), &want[0][..], "sum, batch {batch}");
                assert_eq!(request.output::<f32>(1).unwrap(), &want[1][..], "rowsum, batch {batch}");
                let (sum, rowsum) = m.reference(&data, batch as usize);
                assert_eq!(
                    (request.output::<f32>(0).unwrap(), request.output::<f32>(1).unwrap()),
                    (&sum[..], &rowsum[..])
                );
            }
        }
        let st = s.stats();
        assert_eq!(st.ultra_fast + st.fast + st.standard + st.failed, st.requests, "paths + failed = requests");
        assert_eq!(st.padded_rows, 4 * (1 + 3 + 2 + 1), "two runs per batch each of a Request and of Session::run");
    }
}

#[test]
fn views_of_sixteen_concurrent_requests_never_alias() {
    let (s, m) = session(SumModel::new(4, 8, false), 4, 16, true);
    let names = names(&m);
    let barrier = Barrier::new(16);
    std::thread::scope(|scope| {
        for t in 0..16u32 {
            let (s, m, names, barrier) = (&s, &m, &names, &barrier);
            scope.spawn(move || {
                let batch = u64::from(t % 4) + 1;
                let mut request = s.request(batch).unwrap();
                for round in 0..20u32 {
                    let data = m.inputs(batch as usize, t * 1000 + round);
                    fill(&mut request, names, &data);
                    // Every thread holds its filled request at once before any runs.
                    if round == 0 {
                        barrier.wait();
                    }
                    request.run().unwrap();
                    let (sum, rowsum) = m.reference(&data, batch as usize);
                    assert_eq!(request.output::<f32>(0).unwrap(), &sum[..], "thread {t} round {round}");
                    assert_eq!(request.output::<f32>(1).unwrap(), &rowsum[..], "thread {t} round {round}");
                }
            });
        }
    });
    assert_eq!(s.stats().requests, 16 * 20);
}

/// Leases `n` requests at once on another thread; fails the test instead of hanging if a lease
/// never came back.
fn lease_all_at_once(s: &HostSession, n: usize) {
    let (done, finished) = mpsc::channel();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let held: Vec<_> = (0..n).map(|_| s.request(2).unwrap()).collect();
            drop(held);
            done.send(()).unwrap();
        });
        finished.recv_timeout(Duration::from_secs(20)).expect("every lease came back");
    });
}

#[test]
fn requests_dropped_midway_return_their_lease_and_leak_nothing() {
    let concurrency = 3;
    let (s, m) = session(SumModel::new(2, 4, true), 4, concurrency, true);
    let names = names(&m);
    // Create every context, and capture the bucket's graph on each, before the baseline.
    let barrier = Barrier::new(concurrency);
    std::thread::scope(|scope| {
        for _ in 0..concurrency {
            let (s, m, names, barrier) = (&s, &m, &names, &barrier);
            scope.spawn(move || {
                let mut request = s.request(2).unwrap();
                barrier.wait();
                fill(&mut request, names, &m.inputs(2, 1));
                request.run().unwrap();
            });
        }
    });
    let device = s.device().clone();
    let baseline = device.counters();
    for round in 0..5u32 {
        // Filled, never run.
        let mut request = s.request(2).unwrap();
        fill(&mut request, &names, &m.inputs(2, round));
        drop(request);
        // Run, outputs never read.
        let mut request = s.request(2).unwrap();
        fill(&mut request, &names, &m.inputs(2, round + 7));
        request.run().unwrap();
        drop(request);
        // Leased and dropped at once.
        drop(s.request(2).unwrap());
        lease_all_at_once(&s, concurrency);
    }
    let after = device.counters();
    assert_eq!(after.live_device_bytes, baseline.live_device_bytes, "device memory back to the baseline");
    assert_eq!(after.live_pinned_bytes, baseline.live_pinned_bytes, "pinned memory back to the baseline");
    assert_eq!(after.live_graph_execs, baseline.live_graph_execs, "no graph made or kept per request");
    assert_eq!(after.pinned_released_while_pending, 0);
    // The session still serves correct requests.
    let mut request = s.request(3).unwrap();
    let data = m.inputs(3, 42);
    fill(&mut request, &names, &data);
    request.run().unwrap();
    assert_eq!(request.output::<f32>(0).unwrap(), &m.reference(&data, 3).0[..]);
}

#[test]
fn typed_errors_for_batches_names_element_types_and_unrun_outputs() {
    let (s, m) = session(SumModel::new(2, 4, true), 4, 2, true);
    assert!(matches!(s.request(5), Err(DispatchError::RequestBatch { batch: 5, largest: 4 })));
    assert!(matches!(s.request(0), Err(DispatchError::RequestBatch { batch: 0, .. })));
    let mut request = s.request(3).unwrap();
    assert!(matches!(request.input_mut::<f32>("nope"), Err(DispatchError::NoSuchName { role: "input", .. })));
    assert!(matches!(request.input_mut::<f32>(7), Err(DispatchError::NoSuchTensor { role: "input", index: 7, .. })));
    assert!(matches!(
        request.input_mut::<u16>(0),
        Err(DispatchError::ElementType { role: "input", dtype: DType::F32, element_bytes: 2, .. })
    ));
    assert!(matches!(request.output::<f32>(0), Err(DispatchError::RequestNotRun)));
    assert!(matches!(request.output::<f64>("sum"), Err(DispatchError::ElementType { role: "output", .. })));
    assert_eq!(request.input_mut::<u32>("bias").unwrap().len(), 4, "any type of the element size, unbatched whole");
    fill(&mut request, &names(&m), &m.inputs(3, 5));
    request.run().unwrap();
    assert_eq!(request.output::<f32>("rowsum").unwrap().len(), 3);
    drop(request);
    let st = s.stats();
    assert_eq!((st.requests, st.failed), (1, 0), "refused leases and views are not requests");
}

#[test]
fn a_failed_run_is_counted_hides_stale_outputs_and_the_request_runs_again() {
    let (s, m) = session(SumModel::new(2, 4, false), 4, 1, true);
    let names = names(&m);
    let mut request = s.request(2).unwrap();
    fill(&mut request, &names, &m.inputs(2, 1));
    request.run().unwrap();
    m.sabotage_launch.store(true, std::sync::atomic::Ordering::SeqCst);
    // Sabotage needs a launch: with graphs on the entry is replayed, so turn to a fresh bucket.
    drop(request);
    let mut request = s.request(4).unwrap();
    fill(&mut request, &names, &m.inputs(4, 2));
    assert!(request.run().is_err());
    assert!(matches!(request.output::<f32>(0), Err(DispatchError::RequestNotRun)));
    m.sabotage_launch.store(false, std::sync::atomic::Ordering::SeqCst);
    let data = m.inputs(4, 3);
    fill(&mut request, &names, &data);
    assert_eq!(request.run().unwrap().path, RunPath::Fast, "a failed run never leads to the ultra-fast path");
    assert_eq!(request.output::<f32>(0).unwrap(), &m.reference(&data, 4).0[..]);
    let st = s.stats();
    assert_eq!((st.requests, st.failed), (3, 1));
    assert_eq!(st.ultra_fast + st.fast + st.standard + st.failed, st.requests);
}

#[test]
fn a_group_request_counts_in_flight_on_its_device_until_dropped() {
    let tmp = tempfile::tempdir().unwrap();
    let model = Arc::new(SumModel::new(2, 4, false));
    let cache =
        saggar_cache::CompileCache::open(saggar_cache::CacheConfig::builder(tmp.path().join("cache")).build()).unwrap();
    let config =
        SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 4 }).cache(Arc::new(cache)).build().unwrap();
    let devices = vec![HostBackend::open(0).unwrap(), HostBackend::open(1).unwrap()];
    let group = saggar_dispatch::SessionGroup::new(
        devices,
        model.clone(),
        config,
        saggar_dispatch::Routing::LeastLoaded,
        &|_, _| {},
    )
    .unwrap();
    let names = names(&model);
    let (first, mut a) = group.request(3).unwrap();
    // The first request is in flight on its device while it lives, so the next goes to the other.
    let (second, mut b) = group.request(3).unwrap();
    assert_ne!(first, second);
    for (request, seed) in [(&mut a, 1), (&mut b, 2)] {
        let data = model.inputs(3, seed);
        fill(request, &names, &data);
        request.run().unwrap();
        assert_eq!(request.output::<f32>(0).unwrap(), &model.reference(&data, 3).0[..]);
    }
    drop(a);
    // Device `first` is free again; `second` still holds a request.
    let (third, _c) = group.request(1).unwrap();
    assert_eq!(third, first);
    let stats = group.stats();
    assert_eq!((stats[first].requests, stats[second].requests), (1, 1));
}

#[test]
fn a_request_moves_to_another_thread() {
    let (s, m) = session(SumModel::new(2, 4, false), 2, 1, true);
    let names = names(&m);
    let mut request = s.request(2).unwrap();
    let data = m.inputs(2, 9);
    // Send: run on another thread, read back on this one.
    fill(&mut request, &names, &data);
    let request = std::thread::scope(|scope| {
        scope
            .spawn(move || {
                let mut request = request;
                request.run().unwrap();
                request
            })
            .join()
            .unwrap()
    });
    assert_eq!(request.output::<f32>(0).unwrap(), &m.reference(&data, 2).0[..]);
}

/// Bytes of `count` slots of `bytes` each at offsets aligned to the arena's default 256, without the
/// last slot's tail alignment (what one copy of them sends).
fn packed(slots: &[usize]) -> usize {
    let (last, rest) = slots.split_last().unwrap();
    rest.iter().map(|b| b.next_multiple_of(256)).sum::<usize>() + last
}

#[test]
fn a_run_is_one_copy_each_way_of_its_own_bucket_one_graph_launch_and_one_wait() {
    // Copies by the copy engine: counted with their bytes.
    one_copy_each_way_with(0);
    // Copies by the copy kernel through the mapped pinned buffers: two more kernels in each graph.
    one_copy_each_way_with(saggar_arena::DEFAULT_KERNEL_COPIES_UP_TO);
}

fn one_copy_each_way_with(kernel_copies_up_to: usize) {
    let by_kernel = kernel_copies_up_to > 0;
    // Buckets up to 64, so a batch-1 request would send 64 times its bytes if its copy covered a
    // span laid out for the largest bucket.
    let model = Arc::new(SumModel::new(6, 4, true));
    let config = SessionConfig::builder()
        .buckets(BucketSpec::PowersOfTwo { max: 64 })
        .max_concurrency(1)
        .kernel_copies_up_to(kernel_copies_up_to)
        .build()
        .unwrap();
    let s = Session::builder(host_device(), model.clone()).config(config).build().unwrap();
    let device = s.device().clone();
    let names = names(&model);
    for batch in [1u64, 3, 64] {
        let mut request = s.request(batch).unwrap();
        let bucket = request.bucket().unwrap() as usize;
        // Six inputs of `bucket` rows of 16 bytes, then the unbatched bias; outputs `sum` (16 bytes a
        // row) and `rowsum` (4).
        let (upload, download) = (
            packed(&[bucket * 16; 6].iter().copied().chain([16]).collect::<Vec<_>>()),
            packed(&[bucket * 16, bucket * 4]),
        );
        assert_eq!((request.upload_bytes(), request.download_bytes()), (upload, download), "batch {batch}");
        fill(&mut request, &names, &model.inputs(batch as usize, 1));
        request.run().unwrap(); // captures the bucket's graph
        let before = device.counters();
        let runs = 5u64;
        for round in 0..runs as u32 {
            let data = model.inputs(batch as usize, round + 2);
            for (i, d) in data.iter().enumerate() {
                // Both ways of filling: streamed copies and views.
                if i % 2 == 0 {
                    request.write_input(i, d).unwrap();
                } else {
                    request.input_mut::<f32>(i).unwrap().copy_from_slice(d);
                }
            }
            assert_eq!(request.run().unwrap().path, RunPath::UltraFast);
            let (sum, rowsum) = model.reference(&data, batch as usize);
            assert_eq!((request.output::<f32>(0).unwrap(), request.output::<f32>(1).unwrap()), (&sum[..], &rowsum[..]));
        }
        let after = device.counters();
        let per_run = |f: fn(&saggar_device::host::HostCounters) -> u64| (f(&after) - f(&before)) / runs;
        assert_eq!(per_run(|c| c.graph_launches), 1, "one replay per run, batch {batch}");
        if by_kernel {
            assert_eq!((per_run(|c| c.copies_h2d), per_run(|c| c.copies_d2h)), (0, 0), "no copy-engine copy");
        } else {
            assert_eq!((per_run(|c| c.copies_h2d), per_run(|c| c.copies_d2h)), (1, 1), "one copy each way");
            assert_eq!(per_run(|c| c.bytes_h2d), upload as u64, "the bucket's own bytes up, batch {batch}");
            assert_eq!(per_run(|c| c.bytes_d2h), download as u64, "and down");
        }
        assert_eq!(per_run(|c| c.stream_synchronizes), 1, "one wait");
        assert_eq!(per_run(|c| c.event_records), 0, "no fence event");
        assert_eq!(after.copies_d2d + after.memsets, before.copies_d2d + before.memsets);
        assert_eq!((after.allocations, after.captures), (before.allocations, before.captures), "nothing made per run");
    }
}

#[test]
fn a_request_dropped_before_its_run_leaves_no_stale_plan_for_the_next_run() {
    // One run context: a batch-2 run, then a batch-3 request on the same context that is never run,
    // then batch 2 again: it must plan again (the request replaced the context's plans and layout).
    let (s, m) = session(SumModel::new(3, 4, true), 4, 1, true);
    let names = names(&m);
    assert_eq!(host_run(&s, &m, &m.inputs(2, 1), 2), {
        let (sum, rowsum) = m.reference(&m.inputs(2, 1), 2);
        vec![sum, rowsum]
    });
    let mut request = s.request(3).unwrap();
    fill(&mut request, &names, &m.inputs(3, 2));
    drop(request);
    let data = m.inputs(2, 3);
    let (sum, rowsum) = m.reference(&data, 2);
    assert_eq!(host_run(&s, &m, &data, 2), vec![sum, rowsum]);
    let st = s.stats();
    assert_eq!((st.ultra_fast, st.fast), (0, 2), "the run after the dropped request planned again");
}
