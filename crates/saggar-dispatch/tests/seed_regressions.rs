//! One named regression test per bug the seeds fixed after the fact.

mod common;

use std::sync::Arc;

use common::*;
use saggar_device::host::HostBackend;
use saggar_dispatch::{BindingMode, BucketSpec, HostTensor, RunPath, Session, SessionConfig};
use saggar_shape::DType;

type S = Session<HostBackend, SumModel>;

fn session(model: &Arc<SumModel>, max: u64) -> S {
    let config = SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max }).max_concurrency(1).build().unwrap();
    Session::builder(host_device(), model.clone()).config(config).build().unwrap()
}

fn host_run(s: &S, m: &SumModel, batch: usize, seed: u32) -> Vec<saggar_dispatch::OwnedTensor> {
    let data = m.inputs(batch, seed);
    let dims = m.dims(batch as u64);
    let inputs: Vec<HostTensor<'_>> = s
        .signature()
        .inputs()
        .iter()
        .zip(&data)
        .zip(&dims)
        .map(|((sp, d), dims)| HostTensor { name: sp.name(), dtype: DType::F32, dims, data: as_bytes(d) })
        .collect();
    let out = s.run(&inputs).unwrap();
    let (want_sum, want_rowsum) = m.reference(&data, batch);
    assert_eq!(floats(&out[0].data), want_sum);
    assert_eq!(floats(&out[1].data), want_rowsum);
    out
}

/// Seed 000: a batch-3 request after an exact batch-4 direct binding got shape {4,64} instead of
/// {3,64}, because the ultra-fast path reused a binding made for another batch and mode.
#[test]
fn alternating_exact_batch_4_and_padded_batch_3_never_returns_a_batch_4_shape() {
    let model = Arc::new(SumModel::new(2, 64, false));
    let s = session(&model, 8);
    let device = s.device().clone();
    for round in 0..6 {
        // Host path.
        let out = host_run(&s, &model, if round % 2 == 0 { 4 } else { 3 }, round);
        let batch = if round % 2 == 0 { 4 } else { 3 };
        assert_eq!(out[0].dims, vec![batch, 64]);
        assert_eq!(out[1].dims, vec![batch, 1]);
        // Device path: exact batch 4 is direct-bound, batch 3 is padded into bucket 4 and stabilized.
        let req = DeviceRequest::new(&device, &model, batch as usize, round);
        req.poison(&device);
        let (ins, outs) = req.tensors(&model);
        let info = s.run_device(&ins, &outs).unwrap();
        assert_eq!(info.mode, if batch == 4 { BindingMode::DirectBind } else { BindingMode::Stabilized });
        assert_eq!(info.batch, Some(batch));
        req.check(&device, &model);
    }
}

/// Seed 000: after the direct-bind drift fallback, a direct-captured entry stayed in the cache and
/// the pinned path replayed it, leaving outputs unwritten.
#[test]
fn a_direct_captured_entry_is_never_replayed_by_the_pinned_path_after_a_fallback() {
    let model = Arc::new(SumModel::new(2, 8, false));
    let s = session(&model, 4);
    let device = s.device().clone();
    // Drift on every run until the direct entry falls back to eager.
    let mut keep = Vec::new();
    for i in 0..6 {
        let req = DeviceRequest::new(&device, &model, 4, i);
        let (ins, outs) = req.tensors(&model);
        s.run_device(&ins, &outs).unwrap();
        req.check(&device, &model);
        keep.push(req);
    }
    let st = s.stats();
    assert_eq!(st.eager_fallbacks, 1, "{st:?}");
    let captures_before = st.captures;
    // The pinned path captures its own entry and produces every output.
    host_run(&s, &model, 4, 99);
    let st = s.stats();
    assert_eq!(
        st.captures,
        captures_before + 1,
        "the pinned path must capture its own graph, not reuse the direct one"
    );
    host_run(&s, &model, 4, 100);
    assert_eq!(s.stats().replays, st.replays + 1);
}

/// Seed 000: on the pinned path an output that no copy routine claimed was never produced.
#[test]
fn every_output_is_produced_on_the_pinned_path() {
    let model = Arc::new(SumModel::new(3, 5, true));
    let s = session(&model, 8);
    for batch in [1usize, 3, 8, 5, 5, 2] {
        let data = model.inputs(batch, batch as u32);
        let dims = model.dims(batch as u64);
        let inputs: Vec<HostTensor<'_>> = s
            .signature()
            .inputs()
            .iter()
            .zip(&data)
            .zip(&dims)
            .map(|((sp, d), dims)| HostTensor { name: sp.name(), dtype: DType::F32, dims, data: as_bytes(d) })
            .collect();
        let mut sum = vec![f32::NAN; batch * 5];
        let mut rowsum = vec![f32::NAN; batch];
        {
            // SAFETY: f32 -> u8 views of initialised, exclusively borrowed memory.
            let mut outs: Vec<&mut [u8]> =
                vec![unsafe { std::slice::from_raw_parts_mut(sum.as_mut_ptr().cast::<u8>(), sum.len() * 4) }, unsafe {
                    std::slice::from_raw_parts_mut(rowsum.as_mut_ptr().cast::<u8>(), rowsum.len() * 4)
                }];
            s.run_into(&inputs, &mut outs).unwrap();
        }
        assert!(sum.iter().chain(&rowsum).all(|v| !v.is_nan()), "an output was not written for batch {batch}");
        assert_eq!((sum, rowsum), model.reference(&data, batch));
    }
}

/// Seed 000: the drift counter never reset, so rare recoverable drift accumulated over a long
/// session into a permanent eager fallback.
#[test]
fn transient_drift_never_accumulates_into_a_permanent_fallback() {
    let model = Arc::new(SumModel::new(2, 4, false));
    let s = session(&model, 4);
    let device = s.device().clone();
    let a = DeviceRequest::new(&device, &model, 4, 1);
    let b = DeviceRequest::new(&device, &model, 4, 2);
    // A, then bursts of up to 3 mismatching runs (b) between matches (a): 40 mismatches in total.
    let pattern = [&a, &b, &b, &b, &a];
    for _ in 0..20 {
        for req in pattern {
            req.poison(&device);
            let (ins, outs) = req.tensors(&model);
            let info = s.run_device(&ins, &outs).unwrap();
            assert_eq!(info.mode, BindingMode::DirectBind);
            req.check(&device, &model);
        }
    }
    let st = s.stats();
    assert_eq!(st.eager_fallbacks, 0, "transient drift caused a fallback: {st:?}");
    assert!(st.updates + st.recaptures >= 40, "{st:?}");
    // Four CONSECUTIVE mismatches (more than the limit of 3) do fall back.
    let reqs: Vec<_> = (0..4).map(|i| DeviceRequest::new(&device, &model, 4, 10 + i)).collect();
    for req in &reqs {
        let (ins, outs) = req.tensors(&model);
        s.run_device(&ins, &outs).unwrap();
        req.check(&device, &model);
    }
    assert_eq!(s.stats().eager_fallbacks, 1);
}

/// The ultra-fast path is taken only when batch AND mode match the last run.
#[test]
fn the_ultra_fast_path_requires_the_same_batch_and_mode() {
    let model = Arc::new(SumModel::new(2, 4, false));
    let s = session(&model, 8);
    let device = s.device().clone();
    let req4 = DeviceRequest::new(&device, &model, 4, 1);
    let (ins, outs) = req4.tensors(&model);
    assert_eq!(s.run_device(&ins, &outs).unwrap().path, RunPath::Fast);
    assert_eq!(s.run_device(&ins, &outs).unwrap().path, RunPath::UltraFast);
    let req3 = DeviceRequest::new(&device, &model, 3, 2);
    let (ins3, outs3) = req3.tensors(&model);
    assert_eq!(s.run_device(&ins3, &outs3).unwrap().path, RunPath::Fast, "a new batch must rebind");
    req3.check(&device, &model);
    let data = model.inputs(4, 3);
    let dims = model.dims(4);
    let inputs: Vec<HostTensor<'_>> = s
        .signature()
        .inputs()
        .iter()
        .zip(&data)
        .zip(&dims)
        .map(|((sp, d), dims)| HostTensor { name: sp.name(), dtype: DType::F32, dims, data: as_bytes(d) })
        .collect();
    let mut o1 = vec![0f32; 16];
    let mut o2 = vec![0f32; 4];
    // SAFETY: f32 -> u8 views of initialised, exclusively borrowed memory.
    let mut outs_host: Vec<&mut [u8]> =
        vec![unsafe { std::slice::from_raw_parts_mut(o1.as_mut_ptr().cast::<u8>(), 64) }, unsafe {
            std::slice::from_raw_parts_mut(o2.as_mut_ptr().cast::<u8>(), 16)
        }];
    assert_eq!(s.run_into(&inputs, &mut outs_host).unwrap().path, RunPath::Fast, "a new mode must rebind");
}
