//! A state-machine property test on the host backend: random request sequences (batch sizes
//! crossing buckets, host and device binding, caller buffers freed and reallocated so addresses
//! drift or are reused) always give outputs equal to an eager reference, and the drift counters
//! follow the rules: fallback only after more than N CONSECUTIVE mismatches, reset on a match.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::*;
use proptest::prelude::*;
use saggar_device::host::{AddressReuse, HostConfig, HostDevice};
use saggar_device::{DeviceBuffer, DevicePtr};
use saggar_dispatch::{BindingMode, BucketSpec, HostTensor, Session, SessionConfig};
use saggar_shape::DType;

#[derive(Debug, Clone)]
enum Op {
    Host { batch: usize },
    Device { set: usize },
    Realloc { set: usize, batch: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1..12usize).prop_map(|batch| Op::Host { batch }),
        (0..3usize).prop_map(|set| Op::Device { set }),
        (0..3usize, prop::sample::select(vec![1usize, 2, 3, 4, 4, 8, 8]))
            .prop_map(|(set, batch)| Op::Realloc { set, batch }),
    ]
}

/// The reference model of one direct-bind graph entry.
#[derive(Default)]
struct Entry {
    baked: Vec<DevicePtr>,
    drift: u32,
    fallen: bool,
}

const LIMIT: u32 = 3;

fn check(ops: Vec<Op>, reuse: AddressReuse) {
    let model = Arc::new(SumModel::new(2, 3, false));
    let device = HostDevice::with_config(0, HostConfig { address_reuse: reuse, ..HostConfig::default() }).unwrap();
    let config =
        SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 8 }).max_concurrency(1).build().unwrap();
    let session = Session::builder(device.clone(), model.clone()).config(config).build().unwrap();
    let mut sets: Vec<DeviceRequest> =
        (0..3).map(|i| DeviceRequest::new(&device, &model, [4, 3, 8][i], i as u32)).collect();
    let mut entries: HashMap<usize, Entry> = HashMap::new();
    let mut fallbacks = 0u64;
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Host { batch } => {
                let data = model.inputs(batch, step as u32);
                let dims = model.dims(batch as u64);
                let inputs: Vec<HostTensor<'_>> = session
                    .signature()
                    .inputs()
                    .iter()
                    .zip(&data)
                    .zip(&dims)
                    .map(|((sp, d), dims)| HostTensor { name: sp.name(), dtype: DType::F32, dims, data: as_bytes(d) })
                    .collect();
                let out = session.run(&inputs).unwrap();
                let (sum, rowsum) = model.reference(&data, batch);
                assert_eq!(floats(&out[0].data), sum, "step {step}: host batch {batch}");
                assert_eq!(floats(&out[1].data), rowsum);
                assert_eq!(out[0].dims, vec![batch as u64, 3]);
            }
            Op::Device { set } => {
                let req = &sets[set];
                req.poison(&device);
                let (ins, outs) = req.tensors(&model);
                let info = session.run_device(&ins, &outs).unwrap();
                req.check(&device, &model);
                if info.mode == BindingMode::DirectBind {
                    let ptrs: Vec<DevicePtr> = req.inputs.iter().chain(&req.outputs).map(|b| b.ptr()).collect();
                    let e = entries.entry(req.batch).or_default();
                    if e.baked.is_empty() {
                        e.baked = ptrs;
                    } else if !e.fallen {
                        if e.baked == ptrs {
                            e.drift = 0;
                        } else {
                            e.drift += 1;
                            if e.drift > LIMIT {
                                e.fallen = true;
                                fallbacks += 1;
                            } else {
                                e.baked = ptrs;
                            }
                        }
                    }
                    assert_eq!(info.replayed, !e.fallen, "step {step}: replay state");
                } else {
                    assert!(![1, 2, 4, 8].contains(&req.batch), "exact buckets must be direct-bound");
                }
                assert_eq!(session.stats().eager_fallbacks, fallbacks, "step {step}: fallbacks");
            }
            Op::Realloc { set, batch } => {
                sets[set] = DeviceRequest::new(&device, &model, batch, step as u32);
            }
        }
    }
    let st = session.stats();
    assert_eq!(st.failed, 0);
    assert_eq!(st.ultra_fast + st.fast + st.standard, st.requests);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_match_the_reference_with_address_reuse(ops in prop::collection::vec(op(), 1..60)) {
        check(ops, AddressReuse::Immediate);
    }

    #[test]
    fn random_sequences_match_the_reference_without_address_reuse(ops in prop::collection::vec(op(), 1..60)) {
        check(ops, AddressReuse::Never);
    }
}
