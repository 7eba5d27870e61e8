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

    use saggar_device::{Backend, Device, DeviceBuffer, Event, Stream};
    use saggar_dispatch::{CompileRequest, Program, ProgramCompiler};
    use saggar_onnx::{ConvEngine, OnnxCompiler, OnnxModel, OnnxOptions};
    use serde_json::json;

    use crate::support::{bytes, values};

    const ITERATIONS: u32 = 50;

    /// Microseconds per run of `compiler` on `dims`, and the output.
    fn time<B: Backend>(
        device: &B::Device,
        compiler: &OnnxCompiler,
        dims: &[Vec<u64>],
    ) -> Result<(f64, Vec<f32>), String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        let request = CompileRequest::new(dims, None);
        let artifact = ProgramCompiler::<B>::compile(compiler, device, &request).map_err(|x| e(&x))?;
        let program = ProgramCompiler::<B>::load(compiler, device, &request, &artifact).map_err(|x| e(&x))?;
        let stream = device.create_stream().map_err(|x| e(&x))?;
        let mut inputs = Vec::new();
        for (i, d) in dims.iter().enumerate() {
            let n = d.iter().product::<u64>() as usize;
            let buffer = device.alloc(n * 4).map_err(|x| e(&x))?;
            stream.upload(&bytes(&values(n, 10 + i as u32)), buffer.as_slice()).map_err(|x| e(&x))?;
            inputs.push(buffer);
        }
        let out_elems = program.output_dims()[0].iter().product::<u64>() as usize;
        let output = device.alloc(out_elems * 4).map_err(|x| e(&x))?;
        let scratch = device.alloc(program.scratch_bytes().max(1)).map_err(|x| e(&x))?;
        let in_slices: Vec<_> = inputs.iter().map(|b| b.as_slice()).collect();
        let out_slices = [output.as_slice()];
        let launch = || {
            // SAFETY: every buffer lives until the stream is synchronised below, sized from the program.
            unsafe { program.launch(&stream, &in_slices, &out_slices, scratch.as_slice()) }.map_err(|x| e(&x))
        };
        for _ in 0..3 {
            launch()?;
        }
        stream.synchronize().map_err(|x| e(&x))?;
        let (start, end) = (device.create_event().map_err(|x| e(&x))?, device.create_event().map_err(|x| e(&x))?);
        stream.record(&start).map_err(|x| e(&x))?;
        for _ in 0..ITERATIONS {
            launch()?;
        }
        stream.record(&end).map_err(|x| e(&x))?;
        end.synchronize().map_err(|x| e(&x))?;
        let elapsed = end.elapsed_since(&start).map_err(|x| e(&x))?;
        let mut out = vec![0u8; out_elems * 4];
        stream.download(output.as_slice(), &mut out).map_err(|x| e(&x))?;
        let out = out.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect();
        Ok((elapsed.as_secs_f64() * 1e6 / f64::from(ITERATIONS), out))
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
