//! The checked-in models (`models/{bert,dlrm,mlp,cnn}`) against their expected outputs
//! (`test_data_set_N`, batches 3, 1 and 17), through one host run and through a `Session`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use saggar_device::Backend;
use saggar_device::host::HostBackend;
use saggar_dispatch::{BucketSpec, HostTensor, Session, SessionConfig};
use saggar_onnx::{OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData, read_tensor_pb, run_on_host};

const MODELS: [&str; 4] = ["bert", "dlrm", "mlp", "cnn"];

fn model_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join(name)
}

/// `(inputs, expected outputs)` of every data set of a model.
fn data_sets(dir: &Path) -> Vec<(Vec<Tensor>, Vec<Tensor>)> {
    let mut sets = Vec::new();
    for n in 0.. {
        let set = dir.join(format!("test_data_set_{n}"));
        if !set.is_dir() {
            break;
        }
        let read = |prefix: &str| {
            (0..)
                .map(|k| set.join(format!("{prefix}_{k}.pb")))
                .take_while(|p| p.exists())
                .map(|p| read_tensor_pb(&p).unwrap().tensor)
                .collect::<Vec<_>>()
        };
        sets.push((read("input"), read("output")));
    }
    sets
}

/// Max |got - want| - (atol + rtol |want|) must be <= 0 (the ONNX backend test rule).
fn assert_close(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.dims(), want.dims(), "{what}: shape");
    match (got.data(), want.data()) {
        (TensorData::F32(g), TensorData::F32(w)) => {
            let (rtol, atol) = (1e-3f32, 1e-4f32);
            let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs() - (atol + rtol * b.abs())).fold(f32::MIN, f32::max);
            assert!(worst <= 0.0, "{what}: exceeds tolerance by {worst}");
        }
        (g, w) => assert_eq!(g, w, "{what}"),
    }
}

#[test]
fn every_model_matches_its_expected_outputs_in_one_host_run() {
    for name in MODELS {
        let dir = model_dir(name);
        let model = OnnxModel::load(dir.join("model.onnx")).unwrap_or_else(|e| panic!("{name}: {e}"));
        let compiler = OnnxCompiler::new(model, OnnxOptions::default());
        for (i, (inputs, expected)) in data_sets(&dir).into_iter().enumerate() {
            let got = run_on_host(&compiler, &inputs).unwrap_or_else(|e| panic!("{name} set {i}: {e}"));
            for (k, (g, w)) in got.iter().zip(&expected).enumerate() {
                assert_close(g, w, &format!("{name} set {i} output {k}"));
            }
        }
    }
}

#[test]
fn batch_layouts_are_detected_from_the_imported_specs() {
    for name in MODELS {
        let model = OnnxModel::load(model_dir(name).join("model.onnx")).unwrap();
        let layout = model.batch_layout();
        assert!(layout.inputs().iter().all(|a| *a == saggar_shape::BatchAxis::Leading), "{name}: {layout:?}");
        assert!(layout.outputs().iter().all(|a| *a == saggar_shape::BatchAxis::Leading), "{name}: {layout:?}");
        // BERT's sequence axis is symbolic too, so it is served per shape; the others are bucketed.
        assert_eq!(layout.batch_is_only_dynamic_dim(), name != "bert", "{name}");
    }
}

#[test]
fn every_model_matches_through_a_session_at_batches_1_3_and_17() {
    for name in MODELS {
        let dir = model_dir(name);
        let model = OnnxModel::load(dir.join("model.onnx")).unwrap();
        let compiler = Arc::new(OnnxCompiler::new(model.clone(), OnnxOptions::default()));
        let config = SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 8 }).build().unwrap();
        let session: Session<HostBackend, OnnxCompiler> =
            Session::new(HostBackend::open(0).unwrap(), compiler, config, &|_| {}).unwrap();
        for (i, (inputs, expected)) in data_sets(&dir).into_iter().enumerate() {
            let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
            let bytes: Vec<Vec<u8>> = inputs.iter().map(Tensor::to_le_bytes).collect();
            let host: Vec<HostTensor<'_>> = model
                .inputs()
                .iter()
                .enumerate()
                .map(|(k, s)| HostTensor { name: s.name(), dtype: s.dtype(), dims: &dims[k], data: &bytes[k] })
                .collect();
            let outputs = session.run(&host).unwrap_or_else(|e| panic!("{name} set {i}: {e}"));
            for (k, (o, w)) in outputs.iter().zip(&expected).enumerate() {
                let dims = o.dims.iter().map(|&d| d as usize).collect();
                let got = Tensor::from_le_bytes(o.dtype, dims, &o.data).unwrap();
                assert_close(&got, w, &format!("{name} session set {i} output {k}"));
            }
        }
    }
}

#[test]
fn eight_threads_times_two_hundred_mixed_runs_stay_correct() {
    let sessions: Vec<_> = MODELS
        .iter()
        .map(|name| {
            let dir = model_dir(name);
            let model = OnnxModel::load(dir.join("model.onnx")).unwrap();
            let compiler = Arc::new(OnnxCompiler::new(model.clone(), OnnxOptions::default()));
            let config = SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 4 }).build().unwrap();
            let session: Session<HostBackend, OnnxCompiler> =
                Session::new(HostBackend::open(0).unwrap(), compiler, config, &|_| {}).unwrap();
            // Batches 3 and 1 (data sets 0 and 1): padded and exact buckets.
            let sets: Vec<_> = data_sets(&dir).into_iter().take(2).collect();
            (name, model, session, sets)
        })
        .collect();
    std::thread::scope(|scope| {
        for t in 0..8usize {
            let sessions = &sessions;
            scope.spawn(move || {
                for r in 0..200usize {
                    let (name, model, session, sets) = &sessions[(t + r) % sessions.len()];
                    let (inputs, expected) = &sets[(t * 7 + r) % sets.len()];
                    let dims: Vec<Vec<u64>> =
                        inputs.iter().map(|x| x.dims().iter().map(|&d| d as u64).collect()).collect();
                    let bytes: Vec<Vec<u8>> = inputs.iter().map(Tensor::to_le_bytes).collect();
                    let host: Vec<HostTensor<'_>> = model
                        .inputs()
                        .iter()
                        .enumerate()
                        .map(|(k, s)| HostTensor { name: s.name(), dtype: s.dtype(), dims: &dims[k], data: &bytes[k] })
                        .collect();
                    let outputs = session.run(&host).unwrap_or_else(|e| panic!("{name} thread {t} run {r}: {e}"));
                    for (k, (o, w)) in outputs.iter().zip(expected).enumerate() {
                        let got = Tensor::from_le_bytes(o.dtype, o.dims.iter().map(|&d| d as usize).collect(), &o.data)
                            .unwrap();
                        assert_close(&got, w, &format!("{name} thread {t} run {r} output {k}"));
                    }
                }
            });
        }
    });
}

#[test]
fn constants_are_uploaded_once_per_device_and_shared_by_every_bucket() {
    use saggar_dispatch::{CompileRequest, ProgramCompiler};
    let model = OnnxModel::load(model_dir("bert").join("model.onnx")).unwrap();
    let compiler = OnnxCompiler::new(model, OnnxOptions::default());
    let device = HostBackend::open(0).unwrap();
    let mut programs = Vec::new();
    let mut live = Vec::new();
    for batch in [1u64, 2, 4, 8] {
        let dims = vec![vec![batch, 16], vec![batch, 16]];
        let request = CompileRequest::new(&dims, Some(batch));
        let artifact = ProgramCompiler::<HostBackend>::compile(&compiler, &device, &request).unwrap();
        programs.push(ProgramCompiler::<HostBackend>::load(&compiler, &device, &request, &artifact).unwrap());
        live.push(device.counters().live_device_bytes);
    }
    assert!(live[0] as usize >= compiler.weight_bytes(), "the first load uploads the constants");
    // Later buckets add at most their own small per-shape constants, never another copy.
    let added = live[3] - live[0];
    assert!((added as usize) < compiler.weight_bytes() / 4, "{added} bytes added for three more buckets");
}
