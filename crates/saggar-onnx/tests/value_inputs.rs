//! Models whose shapes depend on input values (a Reshape `shape` and a reduction's `axes` given as
//! model inputs) served by a `Session` on the host backend, every input fed: a program per shape and
//! values (the value inputs are part of the key), host and device requests, and the size limit on a
//! value input.

use std::sync::Arc;

use saggar_device::host::HostBackend;
use saggar_device::{Backend, Device, DeviceBuffer, Stream};
use saggar_dispatch::{DeviceTensor, DispatchError, HostTensor, MAX_VALUE_INPUT_BYTES, Session, SessionConfig};
use saggar_onnx::builder::ModelBuilder;
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData, run_on_host};
use saggar_shape::{DType, Dim};

/// `y = ReduceSum(Reshape(x, shape), axes)` with `x` f32 [2, 3, 4], `shape` i64 [2] and `axes` i64
/// [n], all three model inputs.
fn model() -> OnnxModel {
    let mut b = ModelBuilder::new(18);
    b.input("x", DType::F32, &[Dim::Fixed(2), Dim::Fixed(3), Dim::Fixed(4)]);
    b.input("shape", DType::I64, &[Dim::Fixed(2)]);
    b.input("axes", DType::I64, &[Dim::symbolic("n")]);
    b.node("Reshape", &["x", "shape"], &["r"], &[]);
    b.node("ReduceSum", &["r", "axes"], &["y"], &[]);
    b.output("y", DType::F32, &[]);
    OnnxModel::from_bytes(&b.to_bytes(), "value_inputs", &ImportLimits::default()).unwrap()
}

fn x() -> Tensor {
    Tensor::new(vec![2, 3, 4], TensorData::F32((0..24).map(|i| i as f32).collect())).unwrap()
}

fn session(model: &OnnxModel) -> Session<HostBackend, OnnxCompiler> {
    let compiler = Arc::new(OnnxCompiler::new(model.clone(), OnnxOptions::default()));
    assert_eq!(compiler.value_inputs(), [1, 2], "shape and axes fix the program");
    let config = SessionConfig::builder().build().unwrap();
    Session::new(HostBackend::open(0).unwrap(), compiler, config, &|_| {}).unwrap()
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Runs `shape` and `axes` through `session` and checks the output against the reference run.
fn run_host(session: &Session<HostBackend, OnnxCompiler>, model: &OnnxModel, shape: &[i64], axis: i64) {
    let xs = [x(), Tensor::from_i64s(shape.to_vec()), Tensor::from_i64s(vec![axis])];
    let want = model.run_once(&xs).unwrap();
    let dims: Vec<Vec<u64>> = xs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
    let bytes: Vec<Vec<u8>> = xs.iter().map(Tensor::to_le_bytes).collect();
    let names = ["x", "shape", "axes"];
    let host: Vec<HostTensor<'_>> =
        (0..3).map(|i| HostTensor { name: names[i], dtype: xs[i].dtype(), dims: &dims[i], data: &bytes[i] }).collect();
    let out = session.run(&host).unwrap();
    let want_dims: Vec<u64> = want[0].dims().iter().map(|&d| d as u64).collect();
    assert_eq!(out[0].dims, want_dims, "shape {shape:?}, axis {axis}");
    let TensorData::F32(w) = want[0].data() else { panic!("f32") };
    assert_eq!(floats(&out[0].data), *w, "shape {shape:?}, axis {axis}");
    let compiler = OnnxCompiler::new(model.clone(), OnnxOptions::default());
    assert_eq!(run_on_host(&compiler, &xs).unwrap(), want, "run_on_host feeds the values too");
}

#[test]
fn each_shape_and_value_gets_its_program_and_repeats_reuse_it() {
    let model = model();
    let session = session(&model);
    for (shape, axis) in [(&[6i64, 4][..], 0), (&[4, 6], 1), (&[6, 4], 0), (&[2, 12], 1), (&[-1, 3], 0), (&[6, 4], 1)] {
        run_host(&session, &model, shape, axis);
    }
    let st = session.stats();
    assert_eq!(st.shape_programs, 5, "five distinct (shape, values): {st:?}");
    assert_eq!(st.compiles, 5, "the repeated request reuses its program: {st:?}");
}

#[test]
fn device_requests_read_their_values_back_once_and_are_counted() {
    let model = model();
    let session = session(&model);
    let device = session.device().clone();
    let stream = device.create_stream().unwrap();
    let upload = |bytes: &[u8]| {
        let buf = device.alloc(bytes.len()).unwrap();
        stream.upload(bytes, buf.as_slice()).unwrap();
        buf
    };
    let x = x().to_le_bytes();
    for (shape, axis, want, yd) in
        [([4i64, 6], 1i64, vec![15.0f32, 51.0, 87.0, 123.0], [4, 1]), ([12, 2], 0, vec![132.0, 144.0], [1, 2])]
    {
        let (xb, sb, ab) =
            (upload(&x), upload(&Tensor::from_i64s(shape.to_vec()).to_le_bytes()), upload(&axis.to_le_bytes()));
        let yb = device.alloc(want.len() * 4).unwrap();
        let (xd, sd, ad) = ([2, 3, 4], [2], [1]);
        let inputs = [
            DeviceTensor { name: "x", dtype: DType::F32, dims: &xd, data: xb.as_slice() },
            DeviceTensor { name: "shape", dtype: DType::I64, dims: &sd, data: sb.as_slice() },
            DeviceTensor { name: "axes", dtype: DType::I64, dims: &ad, data: ab.as_slice() },
        ];
        let outputs = [DeviceTensor { name: "y", dtype: DType::F32, dims: &yd, data: yb.as_slice() }];
        session.run_device(&inputs, &outputs).unwrap();
        let mut got = vec![0u8; want.len() * 4];
        stream.download(yb.as_slice(), &mut got).unwrap();
        assert_eq!(floats(&got), want, "shape {shape:?}, axis {axis}");
    }
    let st = session.stats();
    assert_eq!((st.value_input_reads, st.shape_programs), (2, 2), "{st:?}");
}

#[test]
fn a_value_input_above_the_limit_is_refused_before_anything_compiles() {
    let model = model();
    let session = session(&model);
    let n = MAX_VALUE_INPUT_BYTES / 8 + 1;
    let (xd, sd, ad) = ([2u64, 3, 4], [2u64], [n as u64]);
    let (xb, sb, ab) = (x().to_le_bytes(), Tensor::from_i64s(vec![6, 4]).to_le_bytes(), vec![0u8; n * 8]);
    let host = [
        HostTensor { name: "x", dtype: DType::F32, dims: &xd, data: &xb },
        HostTensor { name: "shape", dtype: DType::I64, dims: &sd, data: &sb },
        HostTensor { name: "axes", dtype: DType::I64, dims: &ad, data: &ab },
    ];
    let err = session.run(&host).unwrap_err();
    assert!(matches!(err, DispatchError::LimitExceeded { .. }), "{err}");
    assert_eq!(session.stats().compiles, 0);
}

/// A concatenation's output extent is the sum of its inputs' whatever their values: vectors of
/// unnamed lengths concatenated are data, not values that key the program.
#[test]
fn concatenated_vectors_of_unknown_length_are_data() {
    let mut b = ModelBuilder::new(17);
    b.input("a", DType::F32, &[Dim::symbolic("n")]);
    b.input("b", DType::I64, &[Dim::symbolic("m")]);
    b.node("Cast", &["b"], &["bf"], &[("to", saggar_onnx::ops::Attribute::Int(1))]);
    b.node("Concat", &["a", "bf"], &["y"], &[("axis", saggar_onnx::ops::Attribute::Int(0))]);
    b.output("y", DType::F32, &[]);
    let model = OnnxModel::from_bytes(&b.to_bytes(), "concat", &ImportLimits::default()).unwrap();
    assert!(OnnxCompiler::new(model, OnnxOptions::default()).value_inputs().is_empty());
}
