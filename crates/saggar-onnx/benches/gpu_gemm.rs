//! BLAS-Lt GEMMs against the generated (naive, shared-memory tiled) GEMM kernel, side by side in one
//! run, at the GEMM shapes of the BERT test model at sequence 128: hidden 256, FFN 1024, 4 heads of 64,
//! at batch 1 and 64. Each shape is a one-node ONNX model compiled twice through saggar-onnx (the
//! `gemm` option: `blaslt`, `generated`), loaded as a program and launched back to back between two
//! events; the two outputs are compared.
//!
//! A plain binary (`harness = false`): `cargo bench -p saggar-onnx --features cuda --bench gpu_gemm --
//! --json out.json`. It prints a table and JSON (microseconds per GEMM, TFLOP/s, the BLAS speed-up),
//! and without a GPU prints why it skips and exits successfully.

mod support;

fn main() {
    support::main_with("gpu_gemm", run);
}

#[cfg(not(feature = "cuda"))]
fn run() -> Result<serde_json::Value, String> {
    Err("saggar-onnx was built without the `cuda` feature".into())
}

#[cfg(feature = "cuda")]
fn run() -> Result<serde_json::Value, String> {
    bench::run::<saggar_device::cuda::CudaBackend>()
}

#[cfg(feature = "cuda")]
mod bench {
    use saggar_device::{Backend, Device};
    use saggar_onnx::builder::ModelBuilder;
    use saggar_onnx::{GemmEngine, ImportLimits, OnnxCompiler, OnnxModel, OnnxOptions, Tensor, TensorData};
    use saggar_shape::{DType, Dim};
    use serde_json::json;

    use crate::support::{time_program, values};

    const SEQ: usize = 128;
    const HIDDEN: usize = 256;
    const FFN: usize = 1024;
    const HEADS: usize = 4;
    const HEAD_DIM: usize = HIDDEN / HEADS;
    const ITERATIONS: u32 = 20;

    /// One GEMM of the model: a name, the shapes of A and B, and whether B is a weight (an initializer).
    struct Shape {
        name: &'static str,
        a: Vec<usize>,
        b: Vec<usize>,
        weight: bool,
    }

    fn shapes(batch: usize) -> Vec<Shape> {
        let tokens = batch * SEQ;
        let heads = batch * HEADS;
        vec![
            Shape { name: "qkv/out projection", a: vec![tokens, HIDDEN], b: vec![HIDDEN, HIDDEN], weight: true },
            Shape { name: "ffn up", a: vec![tokens, HIDDEN], b: vec![HIDDEN, FFN], weight: true },
            Shape { name: "ffn down", a: vec![tokens, FFN], b: vec![FFN, HIDDEN], weight: true },
            Shape {
                name: "attention scores",
                a: vec![heads, SEQ, HEAD_DIM],
                b: vec![heads, HEAD_DIM, SEQ],
                weight: false,
            },
            Shape { name: "attention context", a: vec![heads, SEQ, SEQ], b: vec![heads, SEQ, HEAD_DIM], weight: false },
        ]
    }

    fn fixed(dims: &[usize]) -> Vec<Dim> {
        dims.iter().map(|&d| Dim::Fixed(d as u64)).collect()
    }

    fn model(shape: &Shape) -> OnnxModel {
        let mut b = ModelBuilder::new(13);
        b.input("a", DType::F32, &fixed(&shape.a));
        if shape.weight {
            let n: usize = shape.b.iter().product();
            b.initializer("b", &Tensor::new(shape.b.clone(), TensorData::F32(values(n, 2))).expect("weight"));
        } else {
            b.input("b", DType::F32, &fixed(&shape.b));
        }
        b.node("MatMul", &["a", "b"], &["y"], &[]);
        b.output("y", DType::F32, &[]);
        OnnxModel::from_bytes(&b.to_bytes(), "gemm", &ImportLimits::default()).expect("a one-node model")
    }

    /// Microseconds per launch of `shape` with `engine`, and the output.
    fn time<B: Backend>(device: &B::Device, shape: &Shape, engine: GemmEngine) -> Result<(f64, Vec<f32>), String> {
        let compiler = OnnxCompiler::new(model(shape), OnnxOptions::default().with_gemm(engine));
        let mut dims = vec![shape.a.iter().map(|&d| d as u64).collect::<Vec<_>>()];
        if !shape.weight {
            dims.push(shape.b.iter().map(|&d| d as u64).collect());
        }
        time_program::<B>(device, &compiler, &dims, ITERATIONS)
    }

    pub fn run<B: Backend>() -> Result<serde_json::Value, String> {
        B::enumerate().map_err(|e| e.to_string())?;
        let device = B::open(0).map_err(|e| e.to_string())?;
        let mut rows = Vec::new();
        println!(
            "{:<20} {:>5} {:>22} {:>12} {:>14} {:>8} {:>10} {:>10}",
            "gemm", "batch", "m x n x k (x batch)", "blaslt us", "generated us", "speedup", "blas TF/s", "max diff"
        );
        for batch in [1usize, 64] {
            for shape in shapes(batch) {
                let (ra, rb) = (shape.a.len(), shape.b.len());
                let (m, k, n) = (shape.a[ra - 2], shape.a[ra - 1], shape.b[rb - 1]);
                let count: usize = shape.a[..ra - 2].iter().product();
                let flops = 2.0 * (m * n * k * count) as f64;
                let (blas_us, blas_out) = time::<B>(&device, &shape, GemmEngine::BlasLt)?;
                let (gen_us, gen_out) = time::<B>(&device, &shape, GemmEngine::Generated)?;
                let diff = blas_out.iter().zip(&gen_out).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                let speedup = gen_us / blas_us;
                println!(
                    "{:<20} {:>5} {:>22} {:>12.1} {:>14.1} {:>7.2}x {:>10.2} {:>10.2e}",
                    shape.name,
                    batch,
                    format!("{m}x{n}x{k} (x{count})"),
                    blas_us,
                    gen_us,
                    speedup,
                    flops / blas_us / 1e6,
                    diff
                );
                rows.push(json!({
                    "gemm": shape.name, "batch": batch, "m": m, "n": n, "k": k, "count": count,
                    "blaslt_us": blas_us, "generated_us": gen_us, "speedup": speedup,
                    "blaslt_tflops": flops / blas_us / 1e6, "generated_tflops": flops / gen_us / 1e6,
                    "max_abs_diff": diff,
                }));
            }
        }
        Ok(json!({
            "bench": "gpu_gemm",
            "device": device.info().name,
            "backend": B::KIND.name(),
            "precision": "f32 (TF32 off)",
            "iterations": ITERATIONS,
            "rows": rows,
        }))
    }
}
