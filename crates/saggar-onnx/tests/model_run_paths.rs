//! The checked-in models through every run path of a host `Session` (standard, fast, ultra-fast on
//! host memory; `run_device` and a `DeviceBinding` on device memory) at batches 1, 3 and 17 with
//! buckets up to 16 (padding, and splitting for 17), each output equal to its expected output and to
//! the unpadded exact-shape run, also with 8 threads mixing models, batches and paths; and a Loop
//! (how PyTorch exports `nn.EmbeddingBag`) is refused at import as an op outside the declared set.

mod support;

use std::sync::Arc;

use prost::Message as _;
use saggar_device::host::HostBackend;
use saggar_device::{Backend, Device as _, DeviceBuffer as _, Stream as _};
use saggar_dispatch::{BucketSpec, DeviceTensor, RunPath, Session, SessionConfig};
use saggar_onnx::builder::{ModelBuilder, value_info};
use saggar_onnx::proto::{AttributeProto, GraphProto, NodeProto, attribute_type};
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxError, OnnxModel, OnnxOptions, Tensor, TensorData, run_on_host};
use saggar_shape::{DType, Dim};
use support::{MODELS, Request, assert_close, data_sets, model_dir, owned_to_tensor};

type HostSession = Session<HostBackend, OnnxCompiler>;

/// A session over `name` with power-of-two buckets up to 16, splitting on, and one run context so
/// the run path each request takes is deterministic.
fn open(name: &str) -> (OnnxModel, Arc<OnnxCompiler>, HostSession) {
    let model = OnnxModel::load(model_dir(name).join("model.onnx")).unwrap_or_else(|e| panic!("{name}: {e}"));
    let compiler = Arc::new(OnnxCompiler::new(model.clone(), OnnxOptions::default()));
    let config =
        SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 16 }).max_concurrency(1).build().unwrap();
    let session = Session::new(HostBackend::open(0).unwrap(), compiler.clone(), config, &|_| {}).unwrap();
    (model, compiler, session)
}

fn input_names(model: &OnnxModel) -> Vec<&str> {
    model.inputs().iter().map(|s| s.name()).collect()
}

/// Runs `request` with `run_into` and returns the outputs and the path taken.
fn run_into(session: &HostSession, request: &[saggar_dispatch::HostTensor<'_>]) -> (Vec<Tensor>, RunPath) {
    let dims = session.output_dims(request).unwrap();
    let specs = session.signature().outputs();
    let mut buffers: Vec<Vec<u8>> = specs
        .iter()
        .zip(&dims)
        .map(|(s, d)| vec![0u8; d.iter().product::<u64>() as usize * s.dtype().size_bytes()])
        .collect();
    let info = session.run_into(request, &mut buffers).unwrap();
    let outputs = specs
        .iter()
        .zip(&dims)
        .zip(&buffers)
        .map(|((s, d), b)| Tensor::from_le_bytes(s.dtype(), d.iter().map(|&x| x as usize).collect(), b).unwrap())
        .collect();
    (outputs, info.path)
}

#[test]
fn every_host_run_path_gives_the_expected_outputs_at_batches_1_3_and_17() {
    for name in MODELS {
        let (model, compiler, session) = open(name);
        let names = input_names(&model);
        let per_shape = session.buckets().is_empty();
        // BERT's sequence axis is symbolic besides the batch: it is served per shape, not bucketed.
        assert_eq!(per_shape, name == "bert", "{name}: buckets {:?}", session.buckets());
        let mut paths = Vec::new();
        for (i, (inputs, expected)) in data_sets(&model_dir(name)).into_iter().enumerate() {
            let what = |run: &str, k: usize| format!("{name} set {i} ({run}) output {k}");
            let exact = run_on_host(&compiler, &inputs).unwrap();
            let request = Request::new(&names, &inputs);
            let host = request.host();
            // `run_into` twice with the same shape, `run` (allocating), then names reversed.
            let (first, first_path) = run_into(&session, &host);
            let (again, again_path) = run_into(&session, &host);
            let owned = session.run(&host).unwrap();
            let reversed: Vec<_> = host.iter().rev().copied().collect();
            let (by_name, by_name_path) = run_into(&session, &reversed);
            paths.extend([first_path, again_path, by_name_path]);
            let batch = inputs[0].dims()[0];
            if !per_shape && batch <= 16 {
                assert_eq!(first_path, RunPath::Fast, "{name} set {i}: a new shape with its bucket ready");
                assert_eq!(again_path, RunPath::UltraFast, "{name} set {i}: a repeated shape");
            }
            if batch > 16 || per_shape || names.len() > 1 {
                assert_eq!(by_name_path, RunPath::Standard, "{name} set {i}: split, per shape or out of order");
            }
            for (k, want) in expected.iter().enumerate() {
                assert_close(&exact[k], want, &what("exact shape", k));
                for (run, got) in [("run", &owned_to_tensor(&owned[k])), ("first", &first[k]), ("again", &again[k])] {
                    assert_close(got, want, &what(run, k));
                    assert_close(got, &exact[k], &what(&format!("{run} vs exact"), k));
                }
                assert_close(&by_name[k], want, &what("by name", k));
            }
        }
        let seen = |p: RunPath| paths.contains(&p);
        if per_shape {
            assert!(paths.iter().all(|&p| p == RunPath::Standard), "{name}: {paths:?}");
        } else {
            assert!(seen(RunPath::Standard) && seen(RunPath::Fast) && seen(RunPath::UltraFast), "{name}: {paths:?}");
            let stats = session.stats();
            assert!(stats.padded_rows > 0 && stats.split_requests > 0, "{name}: {stats:?}");
        }
    }
}

/// Copies `tensors` into fresh device buffers of `session`'s device.
fn upload<B: Backend>(session: &Session<B, OnnxCompiler>, tensors: &[Tensor]) -> Vec<B::DeviceBuffer> {
    let stream = session.device().create_stream().unwrap();
    let buffers = tensors
        .iter()
        .map(|t| {
            let bytes = t.to_le_bytes();
            let buf = session.device().alloc(bytes.len().max(1)).unwrap();
            stream.upload(&bytes, buf.slice(0, bytes.len()).unwrap()).unwrap();
            buf
        })
        .collect();
    stream.synchronize().unwrap();
    buffers
}

#[test]
fn device_runs_and_device_bindings_give_the_expected_outputs() {
    for name in MODELS {
        let (model, _, session) = open(name);
        let names = input_names(&model);
        for (i, (inputs, expected)) in data_sets(&model_dir(name)).into_iter().enumerate() {
            let request = Request::new(&names, &inputs);
            let out_dims = session.output_dims(&request.host()).unwrap();
            let in_buffers = upload(&session, &inputs);
            let outs: Vec<Tensor> = model
                .outputs()
                .iter()
                .zip(&out_dims)
                .map(|(s, d)| Tensor::zeros(s.dtype(), d.iter().map(|&x| x as usize).collect()).unwrap())
                .collect();
            let out_buffers = upload(&session, &outs);
            let in_dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
            let device_inputs: Vec<DeviceTensor<'_>> = (0..inputs.len())
                .map(|k| DeviceTensor {
                    name: names[k],
                    dtype: inputs[k].dtype(),
                    dims: &in_dims[k],
                    data: in_buffers[k].as_slice(),
                })
                .collect();
            let device_outputs: Vec<DeviceTensor<'_>> = model
                .outputs()
                .iter()
                .enumerate()
                .map(|(k, s)| DeviceTensor {
                    name: s.name(),
                    dtype: s.dtype(),
                    dims: &out_dims[k],
                    data: out_buffers[k].as_slice(),
                })
                .collect();
            let check = |run: &str| {
                let stream = session.device().create_stream().unwrap();
                for (k, want) in expected.iter().enumerate() {
                    let mut bytes = vec![0u8; outs[k].to_le_bytes().len()];
                    stream.download(out_buffers[k].as_slice(), &mut bytes).unwrap();
                    stream.synchronize().unwrap();
                    let got = Tensor::from_le_bytes(want.dtype(), outs[k].dims().to_vec(), &bytes).unwrap();
                    assert_close(&got, want, &format!("{name} set {i} ({run}) output {k}"));
                }
            };
            session.run_device(&device_inputs, &device_outputs).unwrap_or_else(|e| panic!("{name} set {i}: {e}"));
            check("run_device");
            // Clear the outputs so the binding's runs must write them again.
            let stream = session.device().create_stream().unwrap();
            for (o, t) in out_buffers.iter().zip(&outs) {
                stream.upload(&t.to_le_bytes(), o.slice(0, t.to_le_bytes().len()).unwrap()).unwrap();
            }
            stream.synchronize().unwrap();
            let binding = session.bind_device(&device_inputs, &device_outputs).unwrap();
            binding.run().unwrap();
            binding.run().unwrap();
            check("device binding");
        }
    }
}

/// Runs `inputs` with `run_device` on fresh device buffers and returns the outputs.
fn run_on_device(session: &HostSession, model: &OnnxModel, inputs: &[Tensor]) -> Vec<Tensor> {
    let names = input_names(model);
    let request = Request::new(&names, inputs);
    let out_dims = session.output_dims(&request.host()).unwrap();
    let outs: Vec<Tensor> = model
        .outputs()
        .iter()
        .zip(&out_dims)
        .map(|(s, d)| Tensor::zeros(s.dtype(), d.iter().map(|&x| x as usize).collect()).unwrap())
        .collect();
    let (in_buffers, out_buffers) = (upload(session, inputs), upload(session, &outs));
    let in_dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
    let device_inputs: Vec<DeviceTensor<'_>> = (0..inputs.len())
        .map(|k| DeviceTensor {
            name: names[k],
            dtype: inputs[k].dtype(),
            dims: &in_dims[k],
            data: in_buffers[k].as_slice(),
        })
        .collect();
    let device_outputs: Vec<DeviceTensor<'_>> = model
        .outputs()
        .iter()
        .enumerate()
        .map(|(k, s)| DeviceTensor {
            name: s.name(),
            dtype: s.dtype(),
            dims: &out_dims[k],
            data: out_buffers[k].as_slice(),
        })
        .collect();
    session.run_device(&device_inputs, &device_outputs).unwrap();
    let stream = session.device().create_stream().unwrap();
    outs.iter()
        .zip(&out_buffers)
        .map(|(t, b)| {
            let mut bytes = t.to_le_bytes();
            stream.download(b.slice(0, bytes.len()).unwrap(), &mut bytes).unwrap();
            stream.synchronize().unwrap();
            Tensor::from_le_bytes(t.dtype(), t.dims().to_vec(), &bytes).unwrap()
        })
        .collect()
}

/// Runs per thread: 200, or 50 in debug builds, where BERT's per-shape batch-17 runs are slow.
const RUNS_PER_THREAD: usize = if cfg!(debug_assertions) { 50 } else { 200 };

#[test]
fn eight_threads_mixing_models_batches_and_run_paths_stay_correct() {
    let fixtures: Vec<_> = MODELS
        .iter()
        .map(|&name| {
            let model = OnnxModel::load(model_dir(name).join("model.onnx")).unwrap();
            let compiler = Arc::new(OnnxCompiler::new(model.clone(), OnnxOptions::default()));
            let config = SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 16 }).build().unwrap();
            let session: HostSession = Session::new(HostBackend::open(0).unwrap(), compiler, config, &|_| {}).unwrap();
            (name, model, session, data_sets(&model_dir(name)))
        })
        .collect();
    std::thread::scope(|scope| {
        for t in 0..8usize {
            let fixtures = &fixtures;
            scope.spawn(move || {
                for r in 0..RUNS_PER_THREAD {
                    let (name, model, session, sets) = &fixtures[(t + r) % fixtures.len()];
                    let (inputs, expected) = &sets[(t * 7 + r) % sets.len()];
                    let names = input_names(model);
                    let request = Request::new(&names, inputs);
                    let (how, outputs) = match (t + 2 * r) % 3 {
                        0 => ("run", session.run(&request.host()).unwrap().iter().map(owned_to_tensor).collect()),
                        1 => ("run_into", run_into(session, &request.host()).0),
                        _ => ("run_device", run_on_device(session, model, inputs)),
                    };
                    for (k, (got, want)) in outputs.iter().zip(expected).enumerate() {
                        assert_close(got, want, &format!("{name} thread {t} run {r} ({how}) output {k}"));
                    }
                }
            });
        }
    });
    // Every request was counted on exactly one run path of its model's session.
    for (i, (name, _, session, _)) in fixtures.iter().enumerate() {
        let requests =
            (0..8).flat_map(|t| (0..RUNS_PER_THREAD).map(move |r| (t + r) % MODELS.len())).filter(|&m| m == i);
        let stats = session.stats();
        assert_eq!(stats.fast + stats.ultra_fast + stats.standard, requests.count() as u64, "{name}: {stats:?}");
    }
}

/// A Loop summing rows of an embedding table, the way PyTorch exports `nn.EmbeddingBag`.
fn embedding_bag_as_loop() -> Vec<u8> {
    let f32_dims = |dims: &[u64]| dims.iter().map(|&d| Dim::Fixed(d)).collect::<Vec<_>>();
    let body = GraphProto {
        name: "bag_body".into(),
        node: vec![
            NodeProto {
                input: vec!["cond_in".into()],
                output: vec!["cond_out".into()],
                op_type: "Identity".into(),
                ..Default::default()
            },
            NodeProto {
                input: vec!["table".into(), "iter".into()],
                output: vec!["row".into()],
                op_type: "Gather".into(),
                ..Default::default()
            },
            NodeProto {
                input: vec!["acc_in".into(), "row".into()],
                output: vec!["acc_out".into()],
                op_type: "Add".into(),
                ..Default::default()
            },
        ],
        input: vec![
            value_info("iter", DType::I64, &[]),
            value_info("cond_in", DType::Bool, &[]),
            value_info("acc_in", DType::F32, &f32_dims(&[4])),
        ],
        output: vec![value_info("cond_out", DType::Bool, &[]), value_info("acc_out", DType::F32, &f32_dims(&[4]))],
        ..Default::default()
    };
    let mut b = ModelBuilder::new(18);
    b.input("trips", DType::I64, &[])
        .input("cond", DType::Bool, &[])
        .output("bag", DType::F32, &f32_dims(&[4]))
        .initializer("table", &Tensor::new(vec![8, 4], TensorData::F32((0..32).map(|v| v as f32).collect())).unwrap())
        .initializer("zeros", &Tensor::new(vec![4], TensorData::F32(vec![0.0; 4])).unwrap());
    b.graph_mut().node.push(NodeProto {
        input: vec!["trips".into(), "cond".into(), "zeros".into()],
        output: vec!["bag".into()],
        name: "embedding_bag_loop".into(),
        op_type: "Loop".into(),
        attribute: vec![AttributeProto {
            name: "body".into(),
            r#type: attribute_type::GRAPH,
            g: Some(body.encode_to_vec()),
            ..Default::default()
        }],
        ..Default::default()
    });
    b.to_bytes()
}

#[test]
fn an_embedding_bag_exported_as_a_loop_is_unrolled_per_trip_count() {
    let model = OnnxModel::from_bytes(&embedding_bag_as_loop(), "dlrm_loop", &ImportLimits::default()).unwrap();
    // The trip count and condition decide the program: value inputs, the Loop unrolled per value.
    let compiler = OnnxCompiler::new(model.clone(), OnnxOptions::default());
    assert_eq!(compiler.value_inputs(), &[0, 1]);
    let trips = Tensor::new(vec![], TensorData::I64(vec![3])).unwrap();
    let go = Tensor::new(vec![], TensorData::Bool(vec![1])).unwrap();
    let bag = model.run_once(&[trips, go]).unwrap();
    // Rows 0, 1 and 2 of the 8x4 table holding 0..32.
    assert_eq!(bag[0].data(), &TensorData::F32(vec![12.0, 15.0, 18.0, 21.0]));
    // Without the values the compile names the node and the value it needs.
    let err = compiler.plan_summary(&[vec![], vec![]], saggar_device::BackendKind::Host).unwrap_err();
    let OnnxError::Node { node, op, .. } = &err else { panic!("expected a node error, got {err:?}") };
    assert_eq!((node.as_str(), op.as_str()), ("embedding_bag_loop", "Loop"));
    assert!(err.to_string().contains("trip count `trips`") && err.to_string().contains("run-time segment"), "{err}");
}
