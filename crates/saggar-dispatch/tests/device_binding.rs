//! Device bindings: a request validated once, run many times. Same outputs, paths and counters as
//! `run_device`; buffers changed through the binding are checked as they are set, and drift is
//! handled exactly as for `run_device`.

mod common;

use std::sync::Arc;

use common::*;
use saggar_device::{Device, DeviceBuffer, DeviceSlice};
use saggar_dispatch::{BindingMode, BucketSpec, DeviceTensor, DispatchError, RunPath, Session, SessionConfig};

type HostSession = Session<saggar_device::host::HostBackend, SumModel>;

fn session(max: u64, splitting: bool) -> (HostSession, Arc<SumModel>) {
    let model = Arc::new(SumModel::new(5, 3, true));
    let mut builder = SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max });
    if !splitting {
        builder = builder.splitting(saggar_shape::Splitting::Disabled);
    }
    (Session::builder(host_device(), model.clone()).config(builder.build().unwrap()).build().unwrap(), model)
}

#[test]
fn a_binding_runs_ultra_fast_with_the_outputs_of_run_device() {
    let (s, m) = session(8, true);
    let d = s.device().clone();
    let req = DeviceRequest::new(&d, &m, 4, 1);
    let (ins, outs) = req.tensors(&m);
    let binding = s.bind_device(&ins, &outs).unwrap();
    assert_eq!((binding.mode(), binding.batch()), (BindingMode::DirectBind, Some(4)));
    assert_eq!(binding.output_dims(), &req.out_dims[..]);
    req.poison(&d);
    assert_eq!(binding.run().unwrap().path, RunPath::Fast);
    req.check(&d, &m);
    for _ in 0..5 {
        req.poison(&d);
        let info = binding.run().unwrap();
        assert_eq!((info.path, info.replayed), (RunPath::UltraFast, true));
        req.check(&d, &m);
    }
    // run_device with the same request shares the context's graph and stays ultra-fast.
    assert_eq!(s.run_device(&ins, &outs).unwrap().path, RunPath::UltraFast);
    let st = s.stats();
    assert_eq!((st.captures, st.replays, st.requests), (1, 7, 7));
}

#[test]
fn inputs_in_any_order_are_bound_in_binding_order() {
    let (s, m) = session(8, true);
    let d = s.device().clone();
    let req = DeviceRequest::new(&d, &m, 2, 3);
    let (mut ins, outs) = req.tensors(&m);
    ins.reverse();
    let binding = s.bind_device(&ins, &outs).unwrap();
    binding.run().unwrap();
    req.check(&d, &m);
    assert_eq!(binding.input_dims(), &req.dims[..]);
}

#[test]
fn new_buffers_set_on_the_binding_drift_update_and_stay_correct() {
    let (s, m) = session(8, true);
    let d = s.device().clone();
    let first = DeviceRequest::new(&d, &m, 4, 1);
    let (ins, outs) = first.tensors(&m);
    let mut binding = s.bind_device(&ins, &outs).unwrap();
    binding.run().unwrap();
    first.check(&d, &m);
    // Move every buffer to another request's memory: one mismatch, an update, then replays.
    let second = DeviceRequest::new(&d, &m, 4, 2);
    for (i, b) in second.inputs.iter().enumerate() {
        binding.set_input(i, b.as_slice()).unwrap();
    }
    for (o, b) in second.outputs.iter().enumerate() {
        binding.set_output(o, b.as_slice()).unwrap();
    }
    second.poison(&d);
    binding.run().unwrap();
    second.check(&d, &m);
    let st = s.stats();
    assert_eq!(st.updates + st.recaptures, 1);
    for _ in 0..3 {
        second.poison(&d);
        assert!(binding.run().unwrap().replayed);
        second.check(&d, &m);
    }
    assert_eq!(s.stats().eager_fallbacks, 0);
}

#[test]
fn padded_and_split_requests_bind_stabilized_and_return_every_row() {
    let (s, m) = session(4, true);
    let d = s.device().clone();
    for batch in [3usize, 7] {
        let req = DeviceRequest::new(&d, &m, batch, batch as u32);
        let (ins, outs) = req.tensors(&m);
        let binding = s.bind_device(&ins, &outs).unwrap();
        assert_eq!(binding.mode(), BindingMode::Stabilized);
        for _ in 0..3 {
            req.poison(&d);
            let info = binding.run().unwrap();
            assert_eq!(info.chunks, if batch > 4 { 2 } else { 1 }, "batch {batch}");
            req.check(&d, &m);
        }
    }
}

#[test]
fn bad_buffers_are_typed_errors_and_leave_the_binding_usable() {
    let (s, m) = session(8, true);
    let d = s.device().clone();
    let req = DeviceRequest::new(&d, &m, 4, 1);
    let (ins, outs) = req.tensors(&m);
    let mut binding = s.bind_device(&ins, &outs).unwrap();
    let small = d.alloc(8).unwrap();
    let err = binding.set_input(0, small.as_slice()).unwrap_err();
    assert!(matches!(err, DispatchError::BufferTooSmall { role: "input", .. }), "{err:?}");
    let err = binding.set_output(1, small.as_slice()).unwrap_err();
    assert!(matches!(err, DispatchError::BufferTooSmall { role: "output", .. }), "{err:?}");
    let big = d.alloc(4096).unwrap();
    let misaligned = big.slice(2, 1024).unwrap();
    let err = binding.set_input(1, misaligned).unwrap_err();
    assert!(matches!(err, DispatchError::Misaligned { role: "input", align: 4, .. }), "{err:?}");
    // Five summed inputs and a bias.
    let err = binding.set_input(6, big.as_slice()).unwrap_err();
    assert!(matches!(err, DispatchError::NoSuchTensor { role: "input", index: 6, count: 6 }), "{err:?}");
    let err = binding.set_output(2, big.as_slice()).unwrap_err();
    assert!(matches!(err, DispatchError::NoSuchTensor { role: "output", index: 2, count: 2 }), "{err:?}");
    // Nothing was changed by the failed sets.
    req.poison(&d);
    binding.run().unwrap();
    req.check(&d, &m);
}

#[test]
fn bad_requests_are_refused_at_bind_time() {
    let (s, m) = session(4, false);
    let d = s.device().clone();
    // A batch above the largest bucket with splitting off.
    let req = DeviceRequest::new(&d, &m, 6, 1);
    let (ins, outs) = req.tensors(&m);
    let err = s.bind_device(&ins, &outs).unwrap_err();
    assert!(matches!(err, DispatchError::Shape(_)), "{err:?}");
    // A misaligned input buffer, a wrong output shape, a missing output.
    let req = DeviceRequest::new(&d, &m, 2, 1);
    let (mut ins, outs) = req.tensors(&m);
    let raw = ins[0].data;
    ins[0].data = DeviceSlice::from_raw(saggar_device::DevicePtr(raw.ptr().0 + 1), raw.len());
    assert!(matches!(s.bind_device(&ins, &outs).unwrap_err(), DispatchError::Misaligned { .. }));
    let (ins, mut outs) = req.tensors(&m);
    let wrong = [9u64, 3];
    outs[0] = DeviceTensor { dims: &wrong, ..outs[0] };
    assert!(matches!(s.bind_device(&ins, &outs).unwrap_err(), DispatchError::OutputShape { .. }));
    let (ins, outs) = req.tensors(&m);
    assert!(matches!(s.bind_device(&ins, &outs[..1]).unwrap_err(), DispatchError::OutputCount { .. }));
    // The session still serves.
    let binding = s.bind_device(&ins, &outs).unwrap();
    binding.run().unwrap();
    req.check(&d, &m);
}

#[test]
fn sixteen_threads_share_one_binding_shape_with_their_own_buffers() {
    let (s, m) = session(8, true);
    let d = s.device().clone();
    std::thread::scope(|scope| {
        for t in 0..16u32 {
            let (s, m, d) = (s.clone(), m.clone(), d.clone());
            scope.spawn(move || {
                let batch = 1 + (t as usize % 6);
                let req = DeviceRequest::new(&d, &m, batch, t);
                let (ins, outs) = req.tensors(&m);
                let binding = s.bind_device(&ins, &outs).unwrap();
                for _ in 0..50 {
                    req.poison(&d);
                    binding.run().unwrap();
                    req.check(&d, &m);
                }
            });
        }
    });
    let st = s.stats();
    assert_eq!(st.requests, 800);
    assert_eq!(st.failed, 0);
}
