//! Models whose extents depend on values they compute run as segments: a `Slice` whose end is the
//! maximum of its data (computed, not a model input) runs as two sessions on the host backend, the
//! second compiled per value of that end, with one read per request between them; requests in flight
//! together run side by side. Calls that must know output extents before running refuse such a model,
//! saying what to do.

use std::sync::Arc;

use saggar_device::host::HostBackend;
use saggar_device::{Backend, Device, DeviceBuffer, Stream};
use saggar_dispatch::{DeviceTensor, DispatchError, HostTensor, Session, SessionConfig};
use saggar_onnx::builder::ModelBuilder;
use saggar_onnx::ops::Attribute;
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData, run_on_host};
use saggar_shape::{DType, Dim};

/// Columns of `x`: above the 4,096 elements a value input may have, so `end` is computed from data.
const COLS: usize = 3000;

/// `y = Slice(x, [0], [Cast(ReduceMax(x))], [1]) * 2` with `x` f32 [2, 3000].
fn model() -> OnnxModel {
    let mut b = ModelBuilder::new(18);
    b.input("x", DType::F32, &[Dim::Fixed(2), Dim::Fixed(COLS as u64)]);
    b.initializer("zero", &Tensor::from_i64s(vec![0]));
    b.initializer("one", &Tensor::from_i64s(vec![1]));
    b.initializer("two", &Tensor::new(vec![], TensorData::F32(vec![2.0])).unwrap());
    b.node("ReduceMax", &["x"], &["m"], &[("keepdims", Attribute::Int(1))]);
    b.node("Reshape", &["m", "one"], &["m1"], &[]);
    b.node("Cast", &["m1"], &["end"], &[("to", Attribute::Int(7))]);
    b.node("Slice", &["x", "zero", "end", "one"], &["s"], &[]);
    b.node("Mul", &["s", "two"], &["y"], &[]);
    b.output("y", DType::F32, &[]);
    OnnxModel::from_bytes(&b.to_bytes(), "segments", &ImportLimits::default()).unwrap()
}

/// `x` whose largest element is `max` (every element an integer below it but one).
fn x(max: usize) -> Tensor {
    let data = (0..2 * COLS).map(|i| if i == COLS + 7 { max as f32 } else { (i % max) as f32 }).collect();
    Tensor::new(vec![2, COLS], TensorData::F32(data)).unwrap()
}

fn session(model: &OnnxModel) -> Session<HostBackend, OnnxCompiler> {
    let compiler = Arc::new(OnnxCompiler::new(model.clone(), OnnxOptions::default()));
    assert!(compiler.value_inputs().is_empty(), "x is data, not a value input");
    let config = SessionConfig::builder().build().unwrap();
    Session::new(HostBackend::open(0).unwrap(), compiler, config, &|_| {}).unwrap()
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn run(session: &Session<HostBackend, OnnxCompiler>, model: &OnnxModel, max: usize) {
    let x = x(max);
    let want = model.run_once(std::slice::from_ref(&x)).unwrap();
    let dims = [2u64, COLS as u64];
    let bytes = x.to_le_bytes();
    let out = session.run(&[HostTensor { name: "x", dtype: DType::F32, dims: &dims, data: &bytes }]).unwrap();
    assert_eq!(out[0].dims, [2, max as u64], "max {max}");
    let TensorData::F32(w) = want[0].data() else { panic!("f32") };
    assert_eq!(floats(&out[0].data), *w, "max {max}");
    let compiler = OnnxCompiler::new(model.clone(), OnnxOptions::default());
    assert_eq!(run_on_host(&compiler, &[x]).unwrap(), want, "run_on_host runs the segments too");
}

#[test]
fn a_computed_extent_runs_as_two_segments_compiled_per_value() {
    let model = model();
    let session = session(&model);
    assert!(session.is_segmented());
    for max in [5, 9, 5, 12] {
        run(&session, &model, max);
    }
    let st = session.stats();
    assert_eq!(st.requests, 4, "{st:?}");
    assert_eq!(st.segment_reads, 4, "one read between the two segments per request: {st:?}");
    assert_eq!(st.shape_programs, 3, "the second segment keeps a program per end (5, 9, 12): {st:?}");
}

#[test]
fn concurrent_requests_each_get_their_own_extents_and_buffers() {
    // Requests in flight together take a workspace each; the buffers a small request leaves grow for
    // a larger one; every answer matches the model's own evaluation.
    let model = model();
    let session = session(&model);
    std::thread::scope(|scope| {
        for t in 0..4 {
            let (session, model) = (&session, &model);
            scope.spawn(move || {
                for r in 0..6 {
                    run(session, model, 3 + (t * 5 + r * 3) % 17);
                }
            });
        }
    });
    let st = session.stats();
    assert_eq!((st.requests, st.failed, st.segment_reads), (24, 0, 24), "{st:?}");
}

#[test]
fn calls_needing_extents_before_running_say_to_use_run() {
    let model = model();
    let session = session(&model);
    let dims = [2u64, COLS as u64];
    let bytes = x(4).to_le_bytes();
    let host = [HostTensor { name: "x", dtype: DType::F32, dims: &dims, data: &bytes }];
    let err = session.output_dims(&host).unwrap_err();
    assert!(matches!(err, DispatchError::ExtentsDependOnValues { segments: 2, .. }), "{err}");
    assert!(err.to_string().contains("Session::run"), "{err}");
    let device = session.device().clone();
    let stream = device.create_stream().unwrap();
    let xb = device.alloc(bytes.len()).unwrap();
    stream.upload(&bytes, xb.as_slice()).unwrap();
    let yb = device.alloc(64).unwrap();
    let yd = [2u64, 4];
    let err = session
        .run_device(
            &[DeviceTensor { name: "x", dtype: DType::F32, dims: &dims, data: xb.as_slice() }],
            &[DeviceTensor { name: "y", dtype: DType::F32, dims: &yd, data: yb.as_slice() }],
        )
        .unwrap_err();
    assert!(matches!(err, DispatchError::ExtentsDependOnValues { .. }), "{err}");
    // run_into takes buffers large enough for what the request produces.
    let mut out = vec![vec![0u8; 2 * 4 * 4]];
    session.run_into(&host, &mut out).unwrap();
    assert_eq!(floats(&out[0])[..2], [0.0, 2.0]);
}

/// Elements of the detector-like models below: above the value-input limit, so counts are data.
const N: usize = 6000;

/// `x` f32 [N] cycling through -0.5, 0.5, 1.5, 2.5: a quarter of it above each of 0, 1 and 2 more.
fn quarters() -> Tensor {
    Tensor::new(vec![N], TensorData::F32((0..N).map(|i| (i % 4) as f32 - 0.5).collect())).unwrap()
}

/// Adds `kept = Gather(data, Reshape(NonZero(Greater(data, above)), [-1]))` to `b`.
fn keep_above(b: &mut ModelBuilder, data: &str, above: &str, kept: &str) {
    let (mask, idx, flat) = (format!("{kept}_mask"), format!("{kept}_idx"), format!("{kept}_flat"));
    b.node("Greater", &[data, above], &[&mask], &[]);
    b.node("NonZero", &[&mask], &[&idx], &[]);
    b.node("Reshape", &[&idx, "minus_one"], &[&flat], &[]);
    b.node("Gather", &[data, &flat], &[kept], &[]);
}

fn detector_like(build: impl FnOnce(&mut ModelBuilder)) -> OnnxModel {
    let mut b = ModelBuilder::new(18);
    b.input("x", DType::F32, &[Dim::Fixed(N as u64)]);
    b.initializer("minus_one", &Tensor::from_i64s(vec![-1]));
    for (name, v) in [("t0", 0.0f32), ("t1", 1.0), ("t2", 2.0)] {
        b.initializer(name, &Tensor::new(vec![], TensorData::F32(vec![v])).unwrap());
    }
    build(&mut b);
    OnnxModel::from_bytes(&b.to_bytes(), "detector_like", &ImportLimits::default()).unwrap()
}

/// Runs `model` on [`quarters`] through a host session and checks it against the model's own
/// evaluation; returns the outputs' extents.
fn run_quarters(model: &OnnxModel) -> Vec<Vec<u64>> {
    let x = quarters();
    let want = model.run_once(std::slice::from_ref(&x)).unwrap();
    let session = session(model);
    let (dims, bytes) = ([N as u64], x.to_le_bytes());
    let out = session.run(&[HostTensor { name: "x", dtype: DType::F32, dims: &dims, data: &bytes }]).unwrap();
    for (got, want) in out.iter().zip(&want) {
        assert_eq!(got.dims, want.dims().iter().map(|&d| d as u64).collect::<Vec<_>>());
        assert_eq!(got.data, want.to_le_bytes());
    }
    out.into_iter().map(|o| o.dims).collect()
}

/// Three NonZeros in a chain, each over what the one before kept (as a detector filters boxes by
/// score, then by size, then by class): each bounded form's worst case has a name of its own. Two
/// unnamed extents in one segment's declared types once shared a name, so the dispatcher bound the
/// third filter's output to the first one's extent and refused the program.
#[test]
fn chained_filters_each_keep_their_own_extent() {
    let model = detector_like(|b| {
        keep_above(b, "x", "t0", "a");
        keep_above(b, "a", "t1", "ab");
        keep_above(b, "ab", "t2", "abc");
        b.output("abc", DType::F32, &[]);
    });
    assert_eq!(run_quarters(&model), [vec![N as u64 / 4]]);
}

/// A shape vector one segment computes from the extent of what a filter kept (`Concat(Shape(a)[0],
/// [1])`, as Faster R-CNN's box head writes its Reshapes) and a later segment reads: the later
/// segment is compiled per value of that vector, which fixes its Reshape's extents.
#[test]
fn a_shape_vector_from_an_earlier_segment_fixes_extents_in_a_later_one() {
    let model = detector_like(|b| {
        keep_above(b, "x", "t0", "a");
        b.initializer("zero", &Tensor::from_i64s(vec![0]));
        b.initializer("one", &Tensor::from_i64s(vec![1]));
        b.node("Shape", &["a"], &["a_shape"], &[]);
        b.node("Gather", &["a_shape", "zero"], &["a_len"], &[]);
        b.node("Concat", &["a_len", "one"], &["column"], &[("axis", Attribute::Int(0))]);
        // A value of a later segment with a's extent: a plus the sum of what the second filter kept.
        keep_above(b, "a", "t1", "ab");
        b.node("ReduceSum", &["ab"], &["ab_sum"], &[("keepdims", Attribute::Int(0))]);
        b.node("Add", &["a", "ab_sum"], &["shifted"], &[]);
        b.node("Reshape", &["shifted", "column"], &["y"], &[]);
        b.output("y", DType::F32, &[]);
    });
    assert_eq!(run_quarters(&model), [vec![3 * N as u64 / 4, 1]]);
}
