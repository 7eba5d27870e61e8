//! A while loop over data (a `Loop` whose condition is computed from a 5,000-element input) and its
//! expected outputs, and a session running it on any backend: the loop segment's body once per
//! iteration, a carried value growing by one element each iteration, a stacked scan output and a
//! segment after the loop.

#![allow(dead_code)]

use std::sync::Arc;

use saggar_device::Backend;
use saggar_dispatch::{DispatchError, HostTensor, Session, SessionConfig};
use saggar_onnx::builder::ModelBuilder;
use saggar_onnx::ops::Attribute;
use saggar_onnx::proto::GraphProto;
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxModel, Tensor, TensorData};
use saggar_shape::{DType, Dim};

pub const BIG: usize = 5000;

pub fn f32s(dims: &[usize], v: &[f32]) -> Tensor {
    Tensor::new(dims.to_vec(), TensorData::F32(v.to_vec())).unwrap()
}

pub fn scalar_i64(v: i64) -> Tensor {
    Tensor::new(vec![], TensorData::I64(vec![v])).unwrap()
}

pub fn floats(t: &Tensor) -> Vec<f32> {
    match t.data() {
        TensorData::F32(v) => v.clone(),
        other => panic!("expected f32, found {other:?}"),
    }
}

/// The while loop's body: `acc_out = acc_in + step` (`step` the outer graph's constant 1,
/// captured), `grow_out = Concat(grow_in, [i])` (a carried value one longer each iteration), the scan
/// output `2 * acc_out` (or, `scan_grow`, `grow_out`, whose extent changes every iteration), and
/// `c_out = ReduceSum(big) > acc_out[0]`.
pub fn body(scan_grow: bool) -> GraphProto {
    let mut b = ModelBuilder::new(17);
    for (n, t) in [("i", DType::I64), ("c", DType::Bool), ("acc_in", DType::F32), ("grow_in", DType::F32)] {
        b.input(n, t, &[]);
    }
    b.initializer("two", &f32s(&[1], &[2.0]));
    b.initializer("zero_i", &scalar_i64(0)).initializer("shape1", &Tensor::from_i64s(vec![1]));
    b.node("Add", &["acc_in", "step"], &["acc_out"], &[]);
    b.node("Cast", &["i"], &["fi"], &[("to", Attribute::Int(1))]);
    b.node("Reshape", &["fi", "shape1"], &["fi1"], &[]);
    b.node("Concat", &["grow_in", "fi1"], &["grow_out"], &[("axis", Attribute::Int(0))]);
    if scan_grow {
        b.node("Identity", &["grow_out"], &["scan"], &[]);
    } else {
        b.node("Mul", &["acc_out", "two"], &["scan"], &[]);
    }
    b.node("ReduceSum", &["big"], &["total"], &[("keepdims", Attribute::Int(0))]);
    b.node("Gather", &["acc_out", "zero_i"], &["first"], &[("axis", Attribute::Int(0))]);
    b.node("Greater", &["total", "first"], &["c_out"], &[]);
    for o in ["c_out", "acc_out", "grow_out", "scan"] {
        b.output(o, DType::F32, &[]);
    }
    let mut g = b.graph().clone();
    g.name = "body".into();
    g
}

/// `Loop(M, "", acc0, grow0)` over `big` (5,000 elements: data, never a value input), the trip
/// count a model input; outputs the final `acc` and `grow` and the stacked scan, then `acc + 10`
/// computed after the loop.
pub fn while_model() -> OnnxModel {
    while_model_scanning(false)
}

/// [`while_model`] with [`body`]'s `scan_grow`.
pub fn while_model_scanning(scan_grow: bool) -> OnnxModel {
    let mut b = ModelBuilder::new(17);
    b.input("big", DType::F32, &[Dim::Fixed(BIG as u64)]).input("M", DType::I64, &[]);
    b.initializer("acc0", &f32s(&[1], &[0.0])).initializer("grow0", &f32s(&[1], &[-1.0]));
    b.initializer("ten", &f32s(&[1], &[10.0])).initializer("step", &f32s(&[1], &[1.0]));
    b.control_node("Loop", &["M", "", "acc0", "grow0"], &["acc", "grow", "scans"], &[], &[("body", &body(scan_grow))]);
    b.node("Add", &["acc", "ten"], &["after"], &[]);
    b.output("acc", DType::F32, &[]).output("grow", DType::F32, &[]).output("scans", DType::F32, &[]);
    b.output("after", DType::F32, &[]);
    OnnxModel::from_bytes(&b.to_bytes(), "while", &ImportLimits::default()).unwrap()
}

/// `big` summing to `total`.
pub fn big(total: f32) -> Tensor {
    f32s(&[BIG], &vec![total / BIG as f32; BIG])
}

/// The loop's outputs for a total and a trip count: iterations run while `total > acc` after each.
pub fn want(total: f32, m: i64) -> (Vec<f32>, Vec<f32>, Vec<usize>, Vec<f32>) {
    let mut n = 0;
    while (n as i64) < m {
        n += 1;
        if total <= n as f32 {
            break;
        }
    }
    let grow: Vec<f32> = std::iter::once(-1.0).chain((0..n).map(|i| i as f32)).collect();
    let scans: Vec<f32> = (1..=n).map(|i| 2.0 * i as f32).collect();
    (vec![n as f32], grow, vec![n, 1], scans)
}

pub fn check(out: &[Tensor], total: f32, m: i64, what: &str) {
    let (acc, grow, dims, scans) = want(total, m);
    assert_eq!(floats(&out[0]), acc, "{what}: acc for total {total}, M {m}");
    assert_eq!(floats(&out[1]), grow, "{what}: grow");
    assert_eq!((out[2].dims().to_vec(), floats(&out[2])), (dims, scans), "{what}: scans");
    assert_eq!(floats(&out[3]), [acc[0] + 10.0], "{what}: after");
}

pub fn session<B: Backend>(device: B::Device, compiler: Arc<OnnxCompiler>) -> Session<B, OnnxCompiler> {
    let config = SessionConfig::builder().build().unwrap();
    Session::new(device, compiler, config, &|_| {}).unwrap()
}

pub fn session_run<B: Backend>(
    session: &Session<B, OnnxCompiler>,
    inputs: &[Tensor],
) -> Result<Vec<Tensor>, DispatchError> {
    let names = ["big", "M"];
    let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
    let bytes: Vec<Vec<u8>> = inputs.iter().map(Tensor::to_le_bytes).collect();
    let host: Vec<HostTensor<'_>> = (0..inputs.len())
        .map(|k| HostTensor { name: names[k], dtype: inputs[k].dtype(), dims: &dims[k], data: &bytes[k] })
        .collect();
    let out = session.run(&host)?;
    Ok(out
        .iter()
        .map(|t| {
            let dims = t.dims.iter().map(|&d| d as usize).collect();
            Tensor::from_le_bytes(t.dtype, dims, &t.data).unwrap()
        })
        .collect())
}

/// The request cases: four iterations; one (the condition false after it); the trip count first;
/// none (M = 0); four again (the workspace reused).
pub const CASES: [(f32, i64); 5] = [(3.5, 100), (0.5, 100), (50.0, 3), (3.5, 0), (3.5, 100)];

/// Runs [`CASES`] through a session on `device` and checks each against the expected outputs;
/// returns the iterations they ran.
pub fn runs_on<B: Backend>(device: B::Device) -> u64 {
    let compiler = Arc::new(OnnxCompiler::new(while_model(), saggar_onnx::OnnxOptions::default()));
    let session = session::<B>(device, compiler);
    assert!(session.is_segmented());
    let mut iterations = 0;
    for (total, m) in CASES {
        check(&session_run(&session, &[big(total), scalar_i64(m)]).unwrap(), total, m, B::KIND.name());
        iterations += want(total, m).0[0] as u64;
    }
    let st = session.stats();
    assert_eq!(st.failed, 0, "{st:?}");
    // Each iteration reads its condition back; each request crosses from the loop to the segment
    // after it once, and from the segment of the loop's constants to the loop once.
    assert_eq!(st.segment_reads, iterations + CASES.len() as u64 * 2, "{st:?}");
    iterations
}

/// `halve.onnx` (`export_halve.py`): TorchScript's while loop as `torch.onnx.export` writes it.
pub fn halve_model() -> OnnxModel {
    OnnxModel::load(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/while_common/halve.onnx")).unwrap()
}

/// `x` of `rows` x 64 elements, each `scale` times a spread in [-1, 1), and what `Halve` returns
/// for it (halving is exact in f32).
pub fn halve_case(rows: usize, scale: f32) -> (Tensor, Vec<f32>, f32) {
    let x: Vec<f32> = (0..rows * 64).map(|i| scale * (((i * 37) % 200) as f32 / 100.0 - 1.0)).collect();
    let (mut y, mut steps) = (x.clone(), 0.0f32);
    while y.iter().map(|v| v.abs()).sum::<f32>() > 1.0 {
        y.iter_mut().for_each(|v| *v *= 0.5);
        steps += 1.0;
    }
    (f32s(&[rows, 64], &x), y, steps)
}

/// The halving cases: no halving (a tiny input), a few, many; at batches 1 and 4.
pub const HALVE_CASES: [(usize, f32); 4] = [(1, 0.001), (1, 1.0), (4, 10.0), (4, 1000.0)];

/// Runs [`HALVE_CASES`] through a session on `device` against what `Halve` returns.
pub fn halve_runs_on<B: Backend>(device: B::Device) {
    let compiler = Arc::new(OnnxCompiler::new(halve_model(), saggar_onnx::OnnxOptions::default()));
    let session = session::<B>(device, compiler);
    for (rows, scale) in HALVE_CASES {
        let (x, y, steps) = halve_case(rows, scale);
        let dims = [rows as u64, 64];
        let bytes = x.to_le_bytes();
        let out = session.run(&[HostTensor { name: "x", dtype: DType::F32, dims: &dims, data: &bytes }]).unwrap();
        let got: Vec<f32> = out[0].data.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, y, "{}: y of {rows} x 64 at scale {scale}", B::KIND.name());
        assert_eq!(out[1].data, steps.to_le_bytes(), "{}: steps at scale {scale}", B::KIND.name());
    }
}
