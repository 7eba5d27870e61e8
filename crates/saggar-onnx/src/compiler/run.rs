//! Running a compiled model once on a host-backend device: the shortest path from tensors in to
//! tensors out through the real program (kernels, memory plan, shared constants), for tests, the
//! conformance runner and tools. Serving goes through a `saggar_dispatch::Session`.

use saggar_device::host::HostBackend;
use saggar_device::{Backend as _, Device as _, DeviceBuffer as _, Stream as _};
use saggar_dispatch::{CompileRequest, Program, ProgramCompiler};

use crate::compiler::OnnxCompiler;
use crate::error::OnnxError;
use crate::tensor::Tensor;

/// Compiles `compiler`'s model for the shapes of `inputs` (binding order) and the values of its
/// value inputs ([`OnnxCompiler::value_inputs`]: a `shape`, `axes` or `k` given as an input), runs
/// it once on a fresh host device and returns the outputs in binding order.
///
/// A model whose extents depend on values it computes runs segment by segment
/// ([`saggar_dispatch::Segments`]), each compiled for the values the earlier ones computed.
pub fn run_on_host(compiler: &OnnxCompiler, inputs: &[Tensor]) -> Result<Vec<Tensor>, OnnxError> {
    match compiler.split() {
        None => run_compiled(compiler, inputs),
        Some(_) => run_segments(compiler, inputs, run_compiled),
    }
}

/// Runs the segmented `compiler` on `inputs`: `run` runs each segment's compiler on its inputs, in
/// order, the earlier segments' outputs among them; an error for a model that is not segmented.
pub(crate) fn run_segments(
    compiler: &OnnxCompiler,
    inputs: &[Tensor],
    mut run: impl FnMut(&OnnxCompiler, &[Tensor]) -> Result<Vec<Tensor>, OnnxError>,
) -> Result<Vec<Tensor>, OnnxError> {
    let split = compiler.split().ok_or_else(|| OnnxError::Graph { reason: "the model is not segmented".into() })?;
    let max_iterations = compiler.options().max_loop_iterations;
    crate::graph::passes::segments::run_split(split.clone(), inputs, max_iterations, |k, segment, ins| {
        run(&compiler.segment_compiler(k, segment.graph.clone(), segment.repeat.is_some()), ins)
    })
}

fn run_compiled(compiler: &OnnxCompiler, inputs: &[Tensor]) -> Result<Vec<Tensor>, OnnxError> {
    let model = compiler.onnx_model();
    let request_err = |reason: String| OnnxError::Request { model: model.name().to_string(), reason };
    if inputs.len() != model.inputs().len() {
        return Err(request_err(format!("{} inputs given, the model has {}", inputs.len(), model.inputs().len())));
    }
    for (spec, t) in model.inputs().iter().zip(inputs) {
        if spec.dtype() != t.dtype() {
            return Err(request_err(format!(
                "input `{}` is {}, the model takes {}",
                spec.name(),
                t.dtype(),
                spec.dtype()
            )));
        }
    }
    let boxed = |e: saggar_dispatch::CompilerError| match e.downcast::<OnnxError>() {
        Ok(e) => *e,
        Err(e) => OnnxError::Artifact { reason: e.to_string() },
    };
    let device = HostBackend::open(0)?;
    let dims: Vec<Vec<u64>> = inputs.iter().map(|t| t.dims().iter().map(|&d| d as u64).collect()).collect();
    let values: Vec<(usize, Vec<u8>)> = compiler.value_inputs().iter().map(|&i| (i, inputs[i].to_le_bytes())).collect();
    let request = CompileRequest::new(&dims, None).with_input_values(&values);
    let artifact = ProgramCompiler::<HostBackend>::compile(compiler, &device, &request).map_err(boxed)?;
    let program = ProgramCompiler::<HostBackend>::load(compiler, &device, &request, &artifact).map_err(boxed)?;
    let stream = device.create_stream()?;
    let alloc = |bytes: usize| device.alloc(bytes.max(1));
    let input_buffers = inputs
        .iter()
        .map(|t| {
            let bytes = t.to_le_bytes();
            let buf = alloc(bytes.len())?;
            if !bytes.is_empty() {
                stream.upload(&bytes, buf.slice(0, bytes.len())?)?;
            }
            Ok(buf)
        })
        .collect::<Result<Vec<_>, saggar_device::Error>>()?;
    let out_specs = model.outputs();
    let out_bytes: Vec<usize> = program
        .output_dims()
        .iter()
        .zip(out_specs)
        .map(|(d, s)| d.iter().product::<u64>() as usize * s.dtype().size_bytes())
        .collect();
    let output_buffers = out_bytes.iter().map(|&b| alloc(b)).collect::<Result<Vec<_>, _>>()?;
    let scratch = alloc(program.scratch_bytes())?;
    let in_slices: Vec<_> =
        input_buffers.iter().zip(inputs).map(|(b, t)| b.slice(0, t.to_le_bytes().len())).collect::<Result<_, _>>()?;
    let out_slices: Vec<_> =
        output_buffers.iter().zip(&out_bytes).map(|(b, &n)| b.slice(0, n)).collect::<Result<_, _>>()?;
    // SAFETY: every slice names a buffer allocated above on this device, at least as long as the
    // program needs (inputs hold their tensors, outputs their shapes, scratch its scratch_bytes), and
    // the buffers live until after the stream is synchronised below.
    unsafe { program.launch(&stream, &in_slices, &out_slices, scratch.as_slice())? };
    stream.synchronize()?;
    let mut outputs = Vec::with_capacity(out_specs.len());
    for ((spec, dims), (buf, &n)) in
        out_specs.iter().zip(program.output_dims()).zip(output_buffers.iter().zip(&out_bytes))
    {
        let mut bytes = vec![0u8; n];
        if n > 0 {
            stream.download(buf.slice(0, n)?, &mut bytes)?;
        }
        stream.synchronize()?;
        let dims = dims.iter().map(|&d| d as usize).collect();
        outputs.push(Tensor::from_le_bytes(spec.dtype(), dims, &bytes).map_err(|e| request_err(e.to_string()))?);
    }
    Ok(outputs)
}
