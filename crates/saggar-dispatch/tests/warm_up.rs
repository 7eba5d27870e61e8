//! Every program runs once eagerly before its first capture, so no kernel's first launch on a device
//! is recorded into a graph: GPU drivers load kernels lazily at their first launch (CUDA's default
//! module loading, and every kernel of the BLAS-Lt libraries), and a load inside a capture that
//! races another thread's first launch of the same kernel fails the capture. The host backend counts
//! first launches recorded into a capture (`HostCounters::first_launches_in_capture`); every path
//! that captures (host inputs, device inputs, `Request`, from several threads) keeps it at zero, with
//! one warm-up per program.

mod common;

use std::sync::Arc;

use common::*;
use saggar_dispatch::{BucketSpec, HostTensor, Session, SessionConfig};
use saggar_shape::DType;

fn session(model: &Arc<SumModel>) -> Session<saggar_device::host::HostBackend, SumModel> {
    let config = SessionConfig::builder()
        .buckets(BucketSpec::List(vec![1, 2, 4, 8]))
        .max_concurrency(4)
        .prewarm_contexts(1)
        .build()
        .unwrap();
    Session::builder(host_device(), model.clone()).config(config).build().unwrap()
}

fn run_host(s: &Session<saggar_device::host::HostBackend, SumModel>, model: &SumModel, batch: usize, seed: u32) {
    let data = model.inputs(batch, seed);
    let dims = model.dims(batch as u64);
    let names = names(model);
    let inputs: Vec<HostTensor<'_>> = names
        .iter()
        .zip(&data)
        .zip(&dims)
        .map(|((name, d), dims)| HostTensor { name, dtype: DType::F32, dims, data: as_bytes(d) })
        .collect();
    let out = s.run(&inputs).unwrap();
    let (sum, rowsum) = model.reference(&data, batch);
    assert_eq!((floats(&out[0].data), floats(&out[1].data)), (sum, rowsum), "batch {batch} seed {seed}");
}

#[test]
fn no_first_launch_is_captured_on_any_path_from_four_threads() {
    let model = Arc::new(SumModel::new(3, 4, true));
    let s = session(&model);
    std::thread::scope(|scope| {
        for t in 0..4u32 {
            let (s, model) = (&s, &model);
            scope.spawn(move || {
                for i in 0..12u32 {
                    run_host(s, model, 1 + ((t + i * 3) % 8) as usize, t * 100 + i);
                }
            });
        }
    });
    // Device inputs (bound directly, captured apart from the pinned-copy graphs).
    let device = s.device().clone();
    for batch in [2usize, 4] {
        let req = DeviceRequest::new(&device, &model, batch, 9);
        let (ins, outs) = req.tensors(&model);
        s.run_device(&ins, &outs).unwrap();
        req.check(&device, &model);
    }
    // A request written in place.
    let mut request = s.request(8).unwrap();
    request.run().unwrap();
    drop(request);

    let st = s.stats();
    assert_eq!(device.counters().first_launches_in_capture, 0, "a kernel's first launch was captured: {st:?}");
    assert!(st.captures >= 4, "every bucket was captured: {st:?}");
    assert_eq!(st.warmups, 4, "one warm-up per program (4 buckets), not per capture or context: {st:?}");
    assert_eq!(st.failed, 0);
}
