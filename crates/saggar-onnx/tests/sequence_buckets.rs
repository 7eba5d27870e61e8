//! BERT with sequence buckets on the host backend: padded runs equal exact-shape runs at the real
//! positions for random (batch, sequence) requests; an undeclared axis is never padded; a bad
//! declaration or a sequence above the largest bucket is a typed error.

mod gpu_common;

use gpu_common::sequence::*;
use proptest::prelude::*;
use saggar_device::Backend;
use saggar_device::host::{HostBackend, HostDevice};
use saggar_dispatch::{BucketSpec, DispatchError, PaddedAxis, Session, SessionConfig};
use saggar_onnx::OnnxCompiler;

fn device() -> HostDevice {
    HostBackend::open(0).expect("the host backend is always present")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10))]
    /// Random shapes, batches past the largest bucket (split) and sequences between buckets
    /// included: every output at every real position equals the exact-shape run's.
    #[test]
    fn padded_runs_equal_exact_runs(batch in 1usize..=6, seq in 1usize..=16, seed in any::<u64>()) {
        thread_local! {
            static SESSION: (Session<HostBackend, OnnxCompiler>, std::sync::Arc<OnnxCompiler>) = {
                let compiler = bert_compiler();
                (bert_session::<HostBackend>(device(), compiler.clone()), compiler)
            };
        }
        SESSION.with(|(session, compiler)| check_padded_matches_exact(session, compiler, batch, seq, seed));
    }
}

#[test]
fn the_grid_precompiles_every_cell_and_the_explicit_declaration_is_the_same() {
    let compiler = bert_compiler();
    let declared = compiler.padded_axis("seq", BucketSpec::List(SEQ_BUCKETS.to_vec()), 0);
    let written = bert_sequence_axis();
    assert_eq!(declared.pad_values(), written.pad_values());
    let session = bert_session::<HostBackend>(device(), compiler.clone());
    assert_eq!(session.buckets(), vec![1, 2, 4]);
    assert_eq!(session.axis_buckets(), SEQ_BUCKETS.to_vec());
    assert_eq!(session.stats().compiles, 9, "3 batch buckets x 3 sequence buckets");
    check_padded_matches_exact(&session, &compiler, 3, 5, 1);
    let stats = session.stats();
    assert_eq!(stats.compiles, 9, "a padded request compiles nothing");
    assert_eq!((stats.useful_rows, stats.padded_rows), (6, 2), "batch 3 runs as bucket 4, twice");
}

#[test]
fn an_undeclared_axis_is_never_padded() {
    let compiler = bert_compiler();
    let config = SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 4 }).build().unwrap();
    let session = Session::<HostBackend, _>::new(device(), compiler.clone(), config, &|_| {}).unwrap();
    assert!(session.buckets().is_empty(), "served per shape");
    assert!(session.axis_buckets().is_empty());
    check_padded_matches_exact(&session, &compiler, 2, 5, 3);
}

#[test]
fn bad_declarations_and_requests_are_typed_errors() {
    let compiler = bert_compiler();
    let session_with = |axis: PaddedAxis| {
        let config = SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 2 }).padded_axis(axis).build()?;
        Session::<HostBackend, _>::new(device(), compiler.clone(), config, &|_| {})
    };
    let missing = session_with(PaddedAxis::new("seq", BucketSpec::List(vec![4])).pad("input_ids", 0)).unwrap_err();
    assert!(matches!(&missing, DispatchError::Config(m) if m.contains("attention_mask")), "{missing}");
    let unknown = session_with(PaddedAxis::new("tokens", BucketSpec::List(vec![4]))).unwrap_err();
    assert!(matches!(&unknown, DispatchError::Config(m) if m.contains("tokens")), "{unknown}");
    let batch = session_with(PaddedAxis::new("batch", BucketSpec::List(vec![4]))).unwrap_err();
    assert!(matches!(&batch, DispatchError::Config(m) if m.contains("batch")), "{batch}");
    let not_an_int =
        session_with(PaddedAxis::new("seq", BucketSpec::List(vec![4])).pad("input_ids", 0.5).pad("attention_mask", 0))
            .unwrap_err();
    assert!(matches!(&not_an_int, DispatchError::Config(m) if m.contains("input_ids")), "{not_an_int}");

    let session = session_with(bert_sequence_axis()).unwrap();
    let inputs = bert_inputs(1, 17, 0);
    let request = Request::new(&["input_ids", "attention_mask"], &inputs);
    let too_long = session.run(&request.host()).unwrap_err();
    assert!(matches!(too_long, DispatchError::PaddedAxisAboveLargest { extent: 17, largest: 16, .. }), "{too_long}");
    // The session keeps serving.
    check_padded_matches_exact(&session, &compiler, 2, 16, 4);
    assert!(session.request(1).is_err(), "requests written in place need the batch alone");
}

#[test]
fn the_gpu_bundles_cases_pass_on_the_host_backend() {
    check_bert_sequence_buckets::<HostBackend>(device());
}

/// Device tensors are not padded along the axis: at an axis bucket they run (direct bind at an
/// exact batch bucket, stabilized otherwise) and equal the exact run; between buckets they are a
/// typed error that says to pad them or use host tensors.
#[test]
fn device_requests_run_at_axis_buckets_and_are_refused_between_them() {
    use saggar_device::{Device as _, DeviceBuffer as _, Stream as _};
    use saggar_dispatch::{BindingMode, DeviceTensor};
    use saggar_onnx::{Tensor, run_on_host};

    let compiler = bert_compiler();
    let session = bert_session::<HostBackend>(device(), compiler.clone());
    let names = ["input_ids", "attention_mask"];
    let run = |batch: usize, seq: usize| -> Result<(Vec<Tensor>, Option<BindingMode>), DispatchError> {
        let inputs = bert_inputs(batch, seq, 11);
        let exact = run_on_host(&compiler, &inputs).unwrap();
        let stream = session.device().create_stream().unwrap();
        let upload = |t: &Tensor| {
            let bytes = t.to_le_bytes();
            let buf = session.device().alloc(bytes.len()).unwrap();
            stream.upload(&bytes, buf.slice(0, bytes.len()).unwrap()).unwrap();
            buf
        };
        let (ins, outs): (Vec<_>, Vec<_>) = (inputs.iter().map(upload).collect(), exact.iter().map(upload).collect());
        stream.synchronize().unwrap();
        let dims = |t: &Tensor| t.dims().iter().map(|&d| d as u64).collect::<Vec<u64>>();
        let (in_dims, out_dims): (Vec<_>, Vec<_>) =
            (inputs.iter().map(dims).collect(), exact.iter().map(dims).collect());
        let tensor = |name, t: &Tensor, dims, buf: &saggar_device::host::HostDeviceBuffer| DeviceTensor {
            name,
            dtype: t.dtype(),
            dims,
            data: buf.as_slice(),
        };
        let device_in: Vec<_> = (0..2).map(|k| tensor(names[k], &inputs[k], &in_dims[k][..], &ins[k])).collect();
        let out_names = ["last_hidden_state", "pooler_output"];
        let device_out: Vec<_> = (0..2).map(|k| tensor(out_names[k], &exact[k], &out_dims[k][..], &outs[k])).collect();
        let info = session.run_device(&device_in, &device_out)?;
        let got = exact
            .iter()
            .zip(&outs)
            .map(|(t, b)| {
                let mut bytes = t.to_le_bytes();
                stream.download(b.slice(0, bytes.len()).unwrap(), &mut bytes).unwrap();
                stream.synchronize().unwrap();
                Tensor::from_le_bytes(t.dtype(), t.dims().to_vec(), &bytes).unwrap()
            })
            .collect::<Vec<_>>();
        for (k, (g, e)) in got.iter().zip(&exact).enumerate() {
            assert_same(g, e, &format!("device {batch}x{seq} output {k}"));
        }
        Ok((got, Some(info.mode)))
    };
    assert_eq!(run(4, 8).unwrap().1, Some(BindingMode::DirectBind));
    assert_eq!(run(3, 8).unwrap().1, Some(BindingMode::Stabilized));
    let between = run(2, 5).unwrap_err();
    assert!(matches!(between, DispatchError::PaddedAxisNeedsHostTensors { extent: 5, bucket: 8, .. }), "{between}");
}

/// Requests written in place run at the axis's buckets: the inputs are written at a bucket's
/// extent (no padding along the axis; the batch pads as usual) and the outputs read in place equal
/// the exact run's; an extent between buckets, or a request by batch alone, is a typed error.
#[test]
fn requests_written_in_place_run_at_axis_buckets() {
    use saggar_onnx::{Tensor, run_on_host};

    let compiler = bert_compiler();
    let session = bert_session::<HostBackend>(device(), compiler.clone());
    for (batch, seq) in [(3, 8), (4, 16), (1, 16)] {
        let inputs = bert_inputs(batch, seq, 5);
        let exact = run_on_host(&compiler, &inputs).unwrap();
        let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
        let mut request = session.request_shaped(&dims).unwrap();
        assert_eq!(request.batch(), Some(batch as u64));
        for (k, t) in inputs.iter().enumerate() {
            request.write_input_bytes(k, &t.to_le_bytes()).unwrap();
        }
        request.run().unwrap();
        for (k, e) in exact.iter().enumerate() {
            let got = Tensor::from_le_bytes(e.dtype(), e.dims().to_vec(), request.output_bytes(k).unwrap()).unwrap();
            assert_same(&got, e, &format!("request {batch}x{seq} output {k}"));
        }
    }
    let between = session.request_shaped(&[[2u64, 5], [2, 5]]).unwrap_err();
    assert!(matches!(between, DispatchError::PaddedAxisNeedsHostTensors { extent: 5, bucket: 8, .. }), "{between}");
    let above = session.request_shaped(&[[2u64, 17], [2, 17]]).unwrap_err();
    assert!(matches!(above, DispatchError::PaddedAxisAboveLargest { extent: 17, .. }), "{above}");
    let by_batch = session.request(2).unwrap_err();
    assert!(matches!(by_batch, DispatchError::RequestNeedsBuckets), "{by_batch}");
    let mismatched = session.request_shaped(&[[2u64, 8], [2, 16]]).unwrap_err();
    assert!(matches!(mismatched, DispatchError::Shape(_)), "{mismatched}");
}

/// Live re-bucketing fits both axes: traffic of sequences 5 and 6 at batches 1 and 2 moves the grid
/// to batch buckets {2, 4} by sequence buckets {6, 16}, compiled in the background, and requests
/// padded to the new cells still equal exact runs.
#[test]
fn live_buckets_refit_the_sequence_axis_too() {
    use std::time::{Duration, Instant};

    use saggar_dispatch::LiveBuckets;

    let compiler = bert_compiler();
    let config = SessionConfig::builder()
        .buckets(BucketSpec::PowersOfTwo { max: BATCH_BUCKETS })
        .padded_axis(bert_sequence_axis())
        .live_buckets(LiveBuckets::new(8, 2))
        .build()
        .unwrap();
    let session = Session::<HostBackend, _>::new(device(), compiler.clone(), config, &|_| {}).unwrap();
    for i in 0..8 {
        check_padded_matches_exact(&session, &compiler, 1 + i % 2, 5 + i % 2, i as u64);
    }
    let start = Instant::now();
    while session.stats().refits == 0 {
        assert!(start.elapsed() < Duration::from_secs(60), "no refit: {:?}", session.stats());
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(session.buckets(), vec![2, 4]);
    assert_eq!(session.axis_buckets(), vec![6, 16]);
    check_padded_matches_exact(&session, &compiler, 2, 5, 100);
    check_padded_matches_exact(&session, &compiler, 3, 16, 101);
    let stats = session.stats();
    assert_eq!((stats.refit_failures, stats.failed), (0, 0));
    assert_eq!(stats.compiles, 9 + 2, "the new cells (2, 6) and (4, 6) only");
}
