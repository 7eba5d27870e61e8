//! `Session::builder`: defaults, the progress callback, and the same session `Session::new` makes.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use saggar_dispatch::{BucketSpec, ProgramSource, Session, SessionConfig};

#[test]
fn builder_without_config_uses_the_default_buckets() {
    let model = Arc::new(SumModel::new(2, 4, false));
    let session = Session::builder(host_device(), model.clone()).build().unwrap();
    assert_eq!(session.buckets(), [1, 2, 4, 8, 16, 32, 64]);
    assert_eq!(model.compiles.load(Ordering::SeqCst), 7, "every bucket compiled at creation");
}

#[test]
fn progress_is_reported_once_per_program_and_matches_new() {
    let model = Arc::new(SumModel::new(2, 4, true));
    let config = || SessionConfig::builder().buckets(BucketSpec::List(vec![2, 5, 9])).build().unwrap();
    let calls = AtomicUsize::new(0);
    let built = Session::builder(host_device(), model.clone())
        .config(config())
        .on_progress(|p| {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            assert_eq!((p.done, p.total, p.source), (n, 3, ProgramSource::Compiled));
        })
        .build()
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let made = Session::new(host_device(), model.clone(), config(), &no_progress).unwrap();
    assert_eq!(built.buckets(), made.buckets());
    for batch in [1, 5, 12] {
        let (a, b) = (run_sum(&built, &model, batch), run_sum(&made, &model, batch));
        assert_eq!(a, b, "batch {batch}");
        assert_eq!(a, model.reference(&model.inputs(batch, 3), batch).0);
    }
}

/// Runs `batch` rows of seed-3 inputs and returns the `sum` output.
fn run_sum(session: &Session<saggar_device::host::HostBackend, SumModel>, model: &SumModel, batch: usize) -> Vec<f32> {
    let data = model.inputs(batch, 3);
    let dims = model.dims(batch as u64);
    let specs = session.signature().inputs();
    let inputs: Vec<_> = specs
        .iter()
        .zip(&data)
        .zip(&dims)
        .map(|((s, d), dims)| saggar_dispatch::HostTensor {
            name: s.name(),
            dtype: saggar_shape::DType::F32,
            dims,
            data: as_bytes(d),
        })
        .collect();
    floats(&session.run(&inputs).unwrap()[0].data)
}

#[test]
fn the_gather_options_reach_the_session_s_arenas() {
    // One helper that never spins: it is parked for every gather, so each gather of this session's
    // layout (split from one input on) runs on the calling thread and is counted so.
    let gather = saggar_dispatch::GatherOptions::auto()
        .with_helpers(1)
        .with_parallel_min_inputs(1)
        .with_spin(std::time::Duration::ZERO);
    let model = Arc::new(SumModel::new(3, 4, false));
    let config = SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 4 }).gather(gather).build().unwrap();
    let session = Session::builder(host_device(), model.clone()).config(config).build().unwrap();
    let before = session.gather_stats();
    for _ in 0..5 {
        assert_eq!(run_sum(&session, &model, 2), model.reference(&model.inputs(2, 3), 2).0);
    }
    let ran = session.gather_stats().since(&before);
    assert!(ran.alone_parked + ran.split >= 5, "{ran:?}");
}
