//! Helpers shared by the model test files, generic over the backend so the host and GPU tests run
//! the same checks: compile -> load -> launch on a stream -> download -> compare with the CPU reference.

#![allow(dead_code)]

use saggar_device::{Backend, CaptureMode, Device, DeviceBuffer, Stream};
use saggar_dispatch::{CompileRequest, CompilerError, Program, ProgramCompiler};
use saggar_models::{
    ModelConfig, ModelError, ModelProgram, RecsysConfig, ReferenceCompiler, compare_outputs, generate_inputs,
    reference_forward,
};

/// The tolerance of every comparison with the reference: `|got - want| <= 1e-4 * max(1, |want|)`.
pub const TOLERANCE: f64 = 1e-4;

/// A small recommender with every feature: several dense and sparse inputs, two hidden layers.
pub fn small_recsys(two_outputs: bool) -> ModelConfig {
    ModelConfig::Recsys(RecsysConfig {
        name: "small-recsys".into(),
        dense_inputs: 5,
        dense_width: 3,
        sparse_inputs: 4,
        bag_size: 3,
        table_rows: 50,
        embedding_dim: 6,
        hidden: vec![16, 8],
        two_outputs,
        weights: saggar_models::WeightSource::Seed(11),
    })
}

/// The typed error inside a compiler error.
pub fn model_error(e: &CompilerError) -> &ModelError {
    e.downcast_ref::<ModelError>().unwrap_or_else(|| panic!("not a ModelError: {e}"))
}

/// Compiles `compiler`'s model for `batch` rows (bucket = batch) on `device`.
pub fn compile<B: Backend>(compiler: &ReferenceCompiler, device: &B::Device, batch: u64) -> Vec<u8> {
    let dims = compiler.config().input_dims(batch);
    ProgramCompiler::<B>::compile(compiler, device, &CompileRequest::new(&dims, Some(batch)))
        .unwrap_or_else(|e| panic!("compile batch {batch}: {e}"))
}

/// The request an artifact was compiled for, read from its header (batch 1 when the header does not
/// parse: loading such bytes fails before the request is looked at).
pub fn request_of(compiler: &ReferenceCompiler, artifact: &[u8]) -> (Vec<Vec<u64>>, Option<u64>) {
    match saggar_models::artifact::ArtifactHeader::parse(artifact) {
        Ok((header, _)) => (header.input_dims, header.bucket),
        Err(_) => (compiler.config().input_dims(1), Some(1)),
    }
}

/// Loads an artifact for the request it was compiled for.
pub fn try_load<B: Backend>(
    compiler: &ReferenceCompiler,
    device: &B::Device,
    artifact: &[u8],
) -> Result<ModelProgram<B>, saggar_dispatch::CompilerError> {
    let (dims, bucket) = request_of(compiler, artifact);
    ProgramCompiler::<B>::load(compiler, device, &CompileRequest::new(&dims, bucket), artifact)
}

/// Loads an artifact.
pub fn load<B: Backend>(compiler: &ReferenceCompiler, device: &B::Device, artifact: &[u8]) -> ModelProgram<B> {
    try_load::<B>(compiler, device, artifact).unwrap_or_else(|e| panic!("load: {e}"))
}

/// Device buffers bound to one program.
pub struct Bindings<B: Backend> {
    pub inputs: Vec<B::DeviceBuffer>,
    pub outputs: Vec<B::DeviceBuffer>,
    pub scratch: B::DeviceBuffer,
}

impl<B: Backend> Bindings<B> {
    /// Buffers of exactly the sizes `batch` rows need.
    pub fn new(device: &B::Device, config: &ModelConfig, program: &ModelProgram<B>, batch: usize) -> Bindings<B> {
        let alloc = |bytes: usize| device.alloc(bytes).expect("alloc");
        Bindings {
            inputs: config.input_row_bytes().iter().map(|r| alloc(r * batch)).collect(),
            outputs: config.output_row_bytes().iter().map(|r| alloc(r * batch)).collect(),
            scratch: alloc(program.scratch_bytes()),
        }
    }

    pub fn upload(&self, stream: &B::Stream, inputs: &[Vec<u8>]) {
        for (buffer, data) in self.inputs.iter().zip(inputs) {
            stream.upload(data, buffer.as_slice()).expect("upload input");
        }
    }

    pub fn download(&self, stream: &B::Stream) -> Vec<Vec<u8>> {
        self.outputs
            .iter()
            .map(|buffer| {
                let mut out = vec![0u8; buffer.len()];
                stream.download(buffer.as_slice(), &mut out).expect("download output");
                out
            })
            .collect()
    }

    /// Enqueues one run of `program` on these buffers.
    pub fn launch(&self, program: &ModelProgram<B>, stream: &B::Stream) -> Result<(), saggar_device::Error> {
        let inputs: Vec<_> = self.inputs.iter().map(|b| b.as_slice()).collect();
        let outputs: Vec<_> = self.outputs.iter().map(|b| b.as_slice()).collect();
        // SAFETY: every buffer is owned by `self`, which outlives the synchronisations the callers do.
        unsafe { program.launch(stream, &inputs, &outputs, self.scratch.as_slice()) }
    }
}

/// Runs `program` once on `inputs` and returns the outputs' bytes.
pub fn run<B: Backend>(
    device: &B::Device,
    program: &ModelProgram<B>,
    config: &ModelConfig,
    inputs: &[Vec<u8>],
    batch: usize,
) -> Vec<Vec<u8>> {
    let bindings = Bindings::<B>::new(device, config, program, batch);
    let stream = device.create_stream().expect("stream");
    bindings.upload(&stream, inputs);
    bindings.launch(program, &stream).expect("launch");
    stream.synchronize().expect("synchronize");
    bindings.download(&stream)
}

/// Asserts that `outputs` equal the CPU reference on `inputs` within [`TOLERANCE`].
pub fn assert_matches_reference(compiler: &ReferenceCompiler, inputs: &[Vec<u8>], batch: usize, outputs: &[Vec<u8>]) {
    let expected = reference_forward(compiler.config(), compiler.weights(), inputs, batch).expect("reference");
    let cmp = compare_outputs(&expected, outputs, TOLERANCE).expect("compare");
    assert!(
        cmp.all_match(),
        "model `{}` batch {batch}: {} of {} values differ from the reference (max relative error {:e})",
        compiler.config().name(),
        cmp.mismatches,
        cmp.checked,
        cmp.max_rel_error
    );
    assert_eq!(cmp.checked, expected.iter().map(Vec::len).sum::<usize>());
    // A model whose outputs were never written would hold poison, not a near-match; make sure the
    // comparison saw real values.
    assert!(expected.iter().flatten().any(|v| *v != 0.0), "the reference outputs are all zero");
}

/// Compile -> load -> run -> compare, for each batch.
pub fn check_end_to_end<B: Backend>(compiler: &ReferenceCompiler, device: &B::Device, batches: &[usize], seed: u64) {
    for &batch in batches {
        let program = load::<B>(compiler, device, &compile::<B>(compiler, device, batch as u64));
        assert_eq!(program.output_dims(), compiler.config().output_dims(batch as u64).as_slice());
        let inputs = generate_inputs(compiler.config(), batch, seed + batch as u64);
        let outputs = run(device, &program, compiler.config(), &inputs, batch);
        assert_matches_reference(compiler, &inputs, batch, &outputs);
    }
}

/// Captures one launch into a graph, then replays it on two different sets of inputs written into the
/// same buffers: both replays must match the reference.
pub fn check_graph_replay<B: Backend>(compiler: &ReferenceCompiler, device: &B::Device, batch: usize) {
    let config = compiler.config();
    let program = load::<B>(compiler, device, &compile::<B>(compiler, device, batch as u64));
    let bindings = Bindings::<B>::new(device, config, &program, batch);
    let stream = device.create_stream().expect("stream");
    stream.begin_capture(CaptureMode::ThreadLocal).expect("begin capture");
    bindings.launch(&program, &stream).expect("launch during capture");
    let graph = stream.end_capture().expect("end capture: the launch only enqueued work");
    let exec = device.instantiate(&graph).expect("instantiate");
    for seed in [100, 200] {
        let inputs = generate_inputs(config, batch, seed);
        bindings.upload(&stream, &inputs);
        // SAFETY: the graph's addresses are `bindings`' buffers and the weights, all alive here.
        unsafe { stream.launch_graph(&exec).expect("replay") };
        stream.synchronize().expect("synchronize");
        assert_matches_reference(compiler, &inputs, batch, &bindings.download(&stream));
    }
}
