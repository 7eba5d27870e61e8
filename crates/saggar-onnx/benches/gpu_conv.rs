//! The checked-in CNN's convolutions as im2col plus BLAS-Lt matmuls against the generated direct
//! convolution kernel, side by side in one run: the whole model (its time is mostly its convolutions)
//! compiled twice through saggar-onnx (the `conv` option: `im2col`, `direct`), loaded as a program and
//! launched back to back between two events, at batch 1 and 64; the two outputs are compared.
//!
//! A plain binary (`harness = false`): `cargo bench -p saggar-onnx --features cuda --bench gpu_conv --
//! --json out.json`. It prints a table and JSON (microseconds per run, launches and matmul steps per
//! plan, the im2col speed-up), and without a GPU prints why it skips and exits successfully.

mod support;

fn main() {
    support::main_with("gpu_conv", run);
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
    use std::path::Path;

    use saggar_device::{Backend, Device};
    use saggar_onnx::{ConvEngine, OnnxCompiler, OnnxModel, OnnxOptions};
    use serde_json::json;

    use crate::support::time_program;

    const ITERATIONS: u32 = 50;

    /// Microseconds per run of `compiler` on `dims`, and the output.
    fn time<B: Backend>(
        device: &B::Device,
        compiler: &OnnxCompiler,
        dims: &[Vec<u64>],
    ) -> Result<(f64, Vec<f32>), String> {
        time_program::<B>(device, compiler, dims, ITERATIONS)
    }

    pub fn run<B: Backend>() -> Result<serde_json::Value, String> {
        B::enumerate().map_err(|e| e.to_string())?;
        let device = B::open(0).map_err(|e| e.to_string())?;
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/cnn/model.onnx");
        let model = OnnxModel::load(&path).map_err(|e| e.to_string())?;
        let compiler = |engine: ConvEngine| OnnxCompiler::new(model.clone(), OnnxOptions::default().with_conv(engine));
        let (im2col, direct) = (compiler(ConvEngine::Im2col), compiler(ConvEngine::Direct));
        let mut rows = Vec::new();
        println!(
            "{:<6} {:>12} {:>12} {:>8} {:>16} {:>16} {:>10}",
            "batch", "im2col us", "direct us", "speedup", "im2col launches", "direct launches", "max diff"
        );
        for batch in [1u64, 64] {
            let dims: Vec<Vec<u64>> = model
                .inputs()
                .iter()
                .map(|s| {
                    s.dims()
                        .iter()
                        .enumerate()
                        .map(|(i, d)| d.as_fixed().unwrap_or(if i == 0 { batch } else { 1 }))
                        .collect()
                })
                .collect();
            let plans = |c: &OnnxCompiler| c.plan_summary(&dims, B::KIND).map_err(|e| e.to_string());
            let (pi, pd) = (plans(&im2col)?, plans(&direct)?);
            let (im2col_us, a) = time::<B>(&device, &im2col, &dims)?;
            let (direct_us, b) = time::<B>(&device, &direct, &dims)?;
            let diff = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
            let speedup = direct_us / im2col_us;
            println!(
                "{batch:<6} {im2col_us:>12.1} {direct_us:>12.1} {speedup:>7.2}x {:>16} {:>16} {diff:>10.2e}",
                format!("{} ({} matmul)", pi.launches, pi.matmuls),
                format!("{} ({} matmul)", pd.launches, pd.matmuls),
            );
            rows.push(json!({
                "batch": batch, "im2col_us": im2col_us, "direct_us": direct_us, "speedup": speedup,
                "im2col_launches": pi.launches, "im2col_matmuls": pi.matmuls,
                "direct_launches": pd.launches, "direct_matmuls": pd.matmuls, "max_abs_diff": diff,
            }));
        }
        Ok(json!({
            "bench": "gpu_conv",
            "model": "cnn",
            "device": device.info().name,
            "backend": B::KIND.name(),
            "precision": "f32 (TF32 off)",
            "iterations": ITERATIONS,
            "rows": rows,
        }))
    }
}
