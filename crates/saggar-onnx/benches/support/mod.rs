//! What the GPU benches of saggar-onnx that report one JSON value share: the command line (`--json
//! PATH`), printing or writing the report, and timing one compiled program on deterministic inputs.

use std::path::PathBuf;

use saggar_device::{Backend, Device, DeviceBuffer, Event, Stream};
use saggar_dispatch::{CompileRequest, Program, ProgramCompiler};
use saggar_onnx::OnnxCompiler;

/// Runs bench `name`: prints `run`'s report as JSON, or why it skipped, and writes it (or the skip
/// reason) to the `--json` path when one was given.
pub fn main_with(name: &str, run: impl FnOnce() -> Result<serde_json::Value, String>) {
    let json_path = json_path_from_args();
    let report = run();
    match &report {
        Ok(value) => println!("{}", serde_json::to_string_pretty(value).expect("JSON")),
        Err(reason) => println!("{name}: skipping: {reason}"),
    }
    if let Some(path) = json_path {
        let value = report.unwrap_or_else(|reason| serde_json::json!({ "skipped": reason }));
        std::fs::write(&path, serde_json::to_string_pretty(&value).expect("JSON") + "\n")
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        eprintln!("{name}: wrote {}", path.display());
    }
}

/// `--json PATH`, or the first argument that is not a flag. (`cargo bench` adds `--bench`.)
fn json_path_from_args() -> Option<PathBuf> {
    let mut args = std::env::args().skip(1);
    let mut positional = None;
    while let Some(arg) = args.next() {
        if arg == "--json" {
            return args.next().map(PathBuf::from);
        } else if let Some(path) = arg.strip_prefix("--json=") {
            return Some(PathBuf::from(path));
        } else if !arg.starts_with('-') && positional.is_none() {
            positional = Some(PathBuf::from(arg));
        }
    }
    positional
}

/// `n` values in [-1, 1] from an xorshift stream seeded by `seed` (the BLAS conformance suite's).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub use saggar_device::conformance_blas::values;

/// Little-endian bytes of `values`.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Compiles and loads `compiler` for input dimensions `dims` (f32 inputs filled with [`values`]),
/// launches the program 3 times to warm up, then `iterations` times back to back between two events;
/// returns microseconds per launch and output 0.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub fn time_program<B: Backend>(
    device: &B::Device,
    compiler: &OnnxCompiler,
    dims: &[Vec<u64>],
    iterations: u32,
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
    for _ in 0..iterations {
        launch()?;
    }
    stream.record(&end).map_err(|x| e(&x))?;
    end.synchronize().map_err(|x| e(&x))?;
    let elapsed = end.elapsed_since(&start).map_err(|x| e(&x))?;
    let mut out = vec![0u8; out_elems * 4];
    stream.download(output.as_slice(), &mut out).map_err(|x| e(&x))?;
    let out = out.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect();
    Ok((elapsed.as_secs_f64() * 1e6 / f64::from(iterations), out))
}
