//! Truly concurrent runs on one session: 16 threads x 1000 runs with mixed batch sizes; every output
//! correct, no global run lock, results never mix.

mod common;

use std::sync::Arc;

use common::*;
use saggar_dispatch::{BucketSpec, HostTensor, Session, SessionConfig};
use saggar_shape::DType;

#[test]
fn sixteen_threads_times_a_thousand_mixed_runs_are_all_correct() {
    let model = Arc::new(SumModel::new(4, 6, true));
    let config =
        SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 16 }).max_concurrency(8).build().unwrap();
    let session = Session::builder(host_device(), model.clone()).config(config).build().unwrap();
    let runs = 1000;
    std::thread::scope(|scope| {
        for t in 0..16u32 {
            let (session, model) = (&session, &model);
            scope.spawn(move || {
                let device = session.device().clone();
                for i in 0..runs {
                    let batch = 1 + ((t as usize * 7 + i * 13) % 20);
                    let seed = t * 10_000 + i as u32;
                    if i % 4 == 3 {
                        let req = DeviceRequest::new(&device, model, batch, seed);
                        let (ins, outs) = req.tensors(model);
                        session.run_device(&ins, &outs).unwrap();
                        req.check(&device, model);
                        continue;
                    }
                    let data = model.inputs(batch, seed);
                    let dims = model.dims(batch as u64);
                    let inputs: Vec<HostTensor<'_>> = session
                        .signature()
                        .inputs()
                        .iter()
                        .zip(&data)
                        .zip(&dims)
                        .map(|((sp, d), dims)| HostTensor {
                            name: sp.name(),
                            dtype: DType::F32,
                            dims,
                            data: as_bytes(d),
                        })
                        .collect();
                    let out = session.run(&inputs).unwrap();
                    let (sum, rowsum) = model.reference(&data, batch);
                    assert_eq!(floats(&out[0].data), sum, "thread {t} run {i} batch {batch}");
                    assert_eq!(floats(&out[1].data), rowsum, "thread {t} run {i} batch {batch}");
                }
            });
        }
    });
    let st = session.stats();
    assert_eq!(st.requests, 16 * runs as u64);
    assert_eq!(st.failed, 0);
    assert_eq!(st.ultra_fast + st.fast + st.standard, st.requests);
}
