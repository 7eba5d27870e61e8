//! Step programs on the host backend: a plan loaded from its artifact resolves every kind of
//! argument, runs its launches and matmuls in order, refuses bindings shorter than the plan, finds
//! each kernel only in a code object declaring it with the same signature, and shares each device's
//! weights among the programs its loader loads.

use std::sync::atomic::{AtomicUsize, Ordering};

use saggar_device::blas::BlasConfig;
use saggar_device::host::{HostBackend, HostDevice, register_kernel};
use saggar_device::{
    Backend, BackendKind, Device, DeviceBuffer, KernelArg, KernelSignature, KernelSource, LaunchConfig, MatmulDesc,
    ParamKind, Stream,
};
use saggar_dispatch::Program;
use saggar_dispatch::steps::{
    ArgSource, ArtifactError, ArtifactFormat, LaunchStep, LoadError, MatmulStep, PlanStep, ProgramLoader, ProgramPlan,
    StepArtifact, StepProgram,
};

const FORMAT: ArtifactFormat = ArtifactFormat { magic: *b"SAGSTEPT", version: 1 };
/// Where the weight bytes start in each device's weight buffer (past the residency marker).
const WEIGHTS_OFFSET: usize = 64;
const N: usize = 4;

/// `out[i] = x[i] * w[i] + c[i]` over `n` elements, `bytes` being `4 n`.
fn axpy() -> KernelSignature {
    use ParamKind::*;
    KernelSignature::new("saggar_dispatch_test_axpy", &[Ptr, Ptr, Ptr, Ptr, U32, U64])
}

fn register_axpy() {
    register_kernel(axpy(), |ctx, _, args| {
        let &[
            KernelArg::Ptr(out),
            KernelArg::Ptr(x),
            KernelArg::Ptr(w),
            KernelArg::Ptr(c),
            KernelArg::U32(n),
            KernelArg::U64(bytes),
        ] = args
        else {
            return Err(ctx.fault("unexpected arguments"));
        };
        let n = n as usize;
        if bytes != 4 * n as u64 {
            return Err(ctx.fault(format!("{bytes} bytes for {n} elements")));
        }
        let (x, w, c) = (ctx.read_f32s(x, n)?, ctx.read_f32s(w, n)?, ctx.read_f32s(c, n)?);
        let y: Vec<f32> = (0..n).map(|i| x[i] * w[i] + c[i]).collect();
        ctx.write_f32s(out, &y)
    })
    .unwrap();
}

fn f32s(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn from_f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// The weights: `w` at 0, the 2x2 matrix `B` at 16.
fn weights() -> Vec<u8> {
    f32s(&[2.0, 3.0, 4.0, 5.0, 1.0, 2.0, 3.0, 4.0])
}

/// Two chained axpy launches through scratch (`y = (x w + c) w + c`, `c` the program's own
/// constants) and a matmul `C = A B` (`A` input 1, `B` in the weights).
fn plan() -> ProgramPlan {
    let axpy_step = |out, x| {
        let args = vec![
            out,
            x,
            ArgSource::Weights(0),
            ArgSource::Local(0),
            ArgSource::U32(N as u32),
            ArgSource::Bytes(4 * N as u64),
        ];
        PlanStep::Launch(LaunchStep { kernel: axpy().name, args, config: LaunchConfig::for_elements(1, 1) })
    };
    let matmul = MatmulStep {
        desc: MatmulDesc::gemm(2, 2, 2),
        a: ArgSource::Input(1),
        b: ArgSource::Weights(16),
        c: ArgSource::Output(1),
        bias: None,
        workspace: 0,
    };
    ProgramPlan {
        label: "test program".into(),
        steps: vec![
            axpy_step(ArgSource::Scratch(64), ArgSource::Input(0)),
            axpy_step(ArgSource::Output(0), ArgSource::Scratch(64)),
            PlanStep::Matmul(matmul),
        ],
        kernels: vec![axpy()],
        output_dims: vec![vec![N as u64], vec![2, 2]],
        input_bytes: vec![4 * N, 16],
        output_bytes: vec![4 * N, 16],
        scratch_bytes: 64 + 4 * N,
        local_constants: f32s(&[1.0, 1.0, 1.0, 1.0]),
    }
}

/// The plan's artifact on the host: one code object declaring `kernels`, through its bytes.
fn artifact(device: &HostDevice, kernels: Vec<KernelSignature>) -> StepArtifact {
    register_axpy();
    let code = device.compile(&KernelSource::new("step_programs.plan", "step-program test plan", kernels)).unwrap();
    let artifact = StepArtifact {
        backend: BackendKind::Host,
        model_hash: [1; 32],
        bucket: None,
        input_dims: vec![vec![N as u64], vec![2, 2]],
        source_hash: [2; 32],
        fields: Vec::new(),
        codes: vec![code],
    };
    StepArtifact::parse(&artifact.encode(FORMAT), FORMAT).unwrap()
}

fn loader() -> ProgramLoader {
    ProgramLoader::new(WEIGHTS_OFFSET).with_blas(BlasConfig { workspace_bytes: 0, ..BlasConfig::default() })
}

fn load(device: &HostDevice) -> StepProgram<HostBackend> {
    let weights = weights();
    loader().load::<HostBackend>(device, &artifact(device, vec![axpy()]), plan(), || &weights).unwrap()
}

/// Buffers bound to a program: inputs uploaded, outputs and scratch as the plan sizes them unless
/// `scratch` says otherwise.
struct Run {
    inputs: Vec<<HostBackend as Backend>::DeviceBuffer>,
    outputs: Vec<<HostBackend as Backend>::DeviceBuffer>,
    scratch: <HostBackend as Backend>::DeviceBuffer,
}

impl Run {
    fn new(device: &HostDevice, program: &StepProgram<HostBackend>, scratch: usize) -> Run {
        let stream = device.create_stream().unwrap();
        let inputs = [f32s(&[1.0, 2.0, 3.0, 4.0]), f32s(&[1.0, 0.0, 0.0, 2.0])]
            .iter()
            .map(|bytes| {
                let buffer = device.alloc(bytes.len()).unwrap();
                stream.upload(bytes, buffer.as_slice()).unwrap();
                buffer
            })
            .collect();
        stream.synchronize().unwrap();
        let outputs = program.output_bytes().iter().map(|&n| device.alloc(n).unwrap()).collect();
        Run { inputs, outputs, scratch: device.alloc(scratch).unwrap() }
    }

    fn launch(&self, device: &HostDevice, program: &StepProgram<HostBackend>) -> saggar_device::Result<Vec<Vec<f32>>> {
        let stream = device.create_stream()?;
        let ins: Vec<_> = self.inputs.iter().map(|b| b.as_slice()).collect();
        let outs: Vec<_> = self.outputs.iter().map(|b| b.as_slice()).collect();
        // SAFETY: every buffer is this device's and outlives the synchronize below.
        unsafe { program.launch(&stream, &ins, &outs, self.scratch.as_slice())? };
        stream.synchronize()?;
        self.outputs
            .iter()
            .map(|b| {
                let mut bytes = vec![0u8; b.len()];
                stream.download(b.as_slice(), &mut bytes)?;
                Ok(from_f32s(&bytes))
            })
            .collect()
    }
}

#[test]
fn every_kind_of_argument_resolves_and_the_steps_run_in_order() {
    let device = HostBackend::open(0).unwrap();
    let program = load(&device);
    assert_eq!((program.launches(), program.matmuls()), (3, 1));
    assert_eq!(program.output_dims(), &[vec![N as u64], vec![2, 2]]);
    let run = Run::new(&device, &program, program.scratch_bytes());
    let outputs = run.launch(&device, &program).unwrap();
    // y = (x w + 1) w + 1 with w = 2, 3, 4, 5.
    assert_eq!(outputs[0], [7.0, 22.0, 53.0, 106.0]);
    // C = [[1, 0], [0, 2]] [[1, 2], [3, 4]].
    assert_eq!(outputs[1], [1.0, 2.0, 6.0, 8.0]);
}

#[test]
fn bindings_shorter_than_the_plan_are_typed_errors() {
    let device = HostBackend::open(0).unwrap();
    let program = load(&device);
    let short_scratch = Run::new(&device, &program, program.scratch_bytes() - 1);
    let error = short_scratch.launch(&device, &program).unwrap_err();
    assert!(
        matches!(&error, saggar_device::Error::InvalidLaunchConfig { kernel, reason }
            if kernel == "test program" && reason.contains("scratch")),
        "{error}"
    );
    let mut missing_output = Run::new(&device, &program, program.scratch_bytes());
    missing_output.outputs.pop();
    assert!(matches!(missing_output.launch(&device, &program), Err(saggar_device::Error::InvalidLaunchConfig { .. })));
    let mut short_input = Run::new(&device, &program, program.scratch_bytes());
    short_input.inputs[1] = device.alloc(12).unwrap();
    assert!(matches!(short_input.launch(&device, &program), Err(saggar_device::Error::InvalidLaunchConfig { .. })));
}

#[test]
fn a_range_of_steps_enqueues_only_those() {
    let device = HostBackend::open(0).unwrap();
    let program = load(&device);
    let run = Run::new(&device, &program, program.scratch_bytes());
    let stream = device.create_stream().unwrap();
    let ins: Vec<_> = run.inputs.iter().map(|b| b.as_slice()).collect();
    let outs: Vec<_> = run.outputs.iter().map(|b| b.as_slice()).collect();
    let scratch = run.scratch.as_slice();
    stream.upload(&[0u8; 16], run.outputs[0].as_slice()).unwrap();
    // SAFETY: every buffer is this device's and outlives the synchronize below.
    unsafe {
        program.enqueue(&stream, 0..1, &ins, &outs, scratch).unwrap();
        program.enqueue(&stream, 5..9, &ins, &outs, scratch).unwrap();
    }
    stream.synchronize().unwrap();
    let mut bytes = vec![0u8; 16];
    stream.download(run.scratch.slice(64, 16).unwrap(), &mut bytes).unwrap();
    assert_eq!(from_f32s(&bytes), [3.0, 7.0, 13.0, 21.0], "the first step ran");
    stream.download(run.outputs[0].as_slice(), &mut bytes).unwrap();
    assert_eq!(from_f32s(&bytes), [0.0; 4], "the second did not");
}

#[test]
fn a_kernel_no_code_object_declares_with_its_signature_is_an_artifact_error() {
    let device = HostBackend::open(0).unwrap();
    let weights = weights();
    let mut other = axpy();
    other.params.pop();
    let mut plan = plan();
    plan.kernels = vec![other];
    match loader().load::<HostBackend>(&device, &artifact(&device, vec![axpy()]), plan, || &weights) {
        Err(LoadError::Artifact(ArtifactError::CodeObject { reason })) => {
            assert!(reason.contains("saggar_dispatch_test_axpy"), "{reason}")
        }
        other => panic!("expected a code object error, got {other:?}"),
    }
}

#[test]
fn one_weight_upload_per_device_serves_every_program_of_the_loader() {
    let device = HostBackend::open(0).unwrap();
    let loader = loader();
    let artifact = artifact(&device, vec![axpy()]);
    let weights = weights();
    let uploads = AtomicUsize::new(0);
    let bytes = || {
        uploads.fetch_add(1, Ordering::Relaxed);
        weights.as_slice()
    };
    let first = loader.load::<HostBackend>(&device, &artifact, plan(), bytes).unwrap();
    let second = loader.load::<HostBackend>(&device, &artifact, plan(), bytes).unwrap();
    assert_eq!(uploads.load(Ordering::Relaxed), 1);
    let other_device = HostBackend::open(0).unwrap();
    let third = loader.load::<HostBackend>(&other_device, &artifact, plan(), bytes).unwrap();
    assert_eq!(uploads.load(Ordering::Relaxed), 2, "another device of the same ordinal uploads its own");
    for (device, program) in [(&device, &first), (&device, &second), (&other_device, &third)] {
        let run = Run::new(device, program, program.scratch_bytes());
        assert_eq!(run.launch(device, program).unwrap()[0], [7.0, 22.0, 53.0, 106.0]);
    }
}
