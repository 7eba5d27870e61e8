//! A QDQ model (as `quantize_static` writes it: the activation quantised with a zero point, the
//! weights `i8` per output channel) through a session with graphs on: the import rewrites its MatMul
//! to an `i8` product, which runs on the BLAS-Lt library's int8 tensor-core GEMM (int32
//! accumulation) and must equal the host backend's exact `i8` GEMM; the scales are applied after,
//! in f32, by the same fused kernel on both. Prints one PASS line.

use std::sync::Arc;

use saggar_device::conformance_blas::values;
use saggar_device::{Backend, BackendKind};
use saggar_onnx::builder::ModelBuilder;
use saggar_onnx::ops::Attribute;
use saggar_onnx::{ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData, run_on_host};
use saggar_shape::{DType, Dim};

use super::support::{Request, owned_to_tensor};

const K: usize = 64;
const N: usize = 48;

fn model() -> OnnxModel {
    let t = |dims: &[usize], data| Tensor::new(dims.to_vec(), data).unwrap();
    let mut b = ModelBuilder::new(13);
    b.input("x", DType::F32, &[Dim::Symbolic("N".into()), Dim::Fixed(K as u64)]);
    b.initializer("sx", &t(&[], TensorData::F32(vec![0.01])));
    b.initializer("zx", &t(&[], TensorData::I8(vec![3])));
    b.node("QuantizeLinear", &["x", "sx", "zx"], &["xq"], &[]);
    b.node("DequantizeLinear", &["xq", "sx", "zx"], &["xd"], &[]);
    let w: Vec<i8> = values(K * N, 5).iter().map(|v| (v * 127.0).round() as i8).collect();
    b.initializer("wq", &t(&[K, N], TensorData::I8(w)));
    b.initializer("sw", &t(&[N], TensorData::F32((0..N).map(|j| 0.002 * (1 + j % 5) as f32).collect())));
    b.initializer("zw", &t(&[N], TensorData::I8(vec![0; N])));
    b.node("DequantizeLinear", &["wq", "sw", "zw"], &["wd"], &[("axis", Attribute::Int(1))]);
    b.node("MatMul", &["xd", "wd"], &["y"], &[]);
    b.output("y", DType::F32, &[]);
    OnnxModel::from_bytes(&b.to_bytes(), "qdq", &ImportLimits::default()).unwrap()
}

/// See the module docs.
pub fn check_qdq_products<B: Backend>(device: B::Device) {
    let model = model();
    assert!(
        model.graph().nodes.iter().any(|n| n.op_type == "Int8Product"),
        "FAIL qdq: the import did not rewrite the MatMul"
    );
    let compiler = Arc::new(OnnxCompiler::new(model, OnnxOptions::default()));
    let kind = if B::KIND == BackendKind::Hip { BackendKind::Hip } else { BackendKind::Cuda };
    let dims = [vec![5, K as u64]];
    assert_eq!(compiler.plan_summary(&dims, kind).unwrap().matmuls, 1, "FAIL qdq: the i8 product is a BLAS step");
    let s = super::session::<B>(&device, compiler.clone(), "qdq");
    for rows in [1usize, 5, 33] {
        let x = Tensor::new(vec![rows, K], TensorData::F32(values(rows * K, rows as u32 + 11))).unwrap();
        let want = run_on_host(&compiler, std::slice::from_ref(&x)).unwrap();
        let request = Request::new(&["x"], std::slice::from_ref(&x));
        for run in 0..2 {
            let out = s.run(&request.host()).unwrap_or_else(|e| panic!("FAIL qdq rows {rows} run {run}: {e}"));
            let (got, want) = (owned_to_tensor(&out[0]).to_f32s().unwrap(), want[0].to_f32s().unwrap());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!((g - w).abs() <= 1e-6 * w.abs().max(1.0), "FAIL qdq rows {rows} element {i}: {g} vs {w}");
            }
        }
    }
    assert!(s.stats().replays > 0, "FAIL qdq: the second run replays a graph");
    println!("PASS qdq i8 product on {:?}: equal to the host's exact i8 GEMM at 1, 5 and 33 rows", B::KIND);
}
