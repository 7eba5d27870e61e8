//! A user's own compiler: `y = 2x + 1` over `x: [batch, 4]` f32, as a host kernel registered with
//! saggar-device's host kernel registry, served by a [`Session`] for every batch from 1 to 40.
//! Batches above the largest bucket (16) are split into chunks; every output is sliced back to the
//! request's batch.
//!
//! Run it with `cargo run -p saggar-dispatch --example custom_compiler`.

use std::sync::Arc;

use saggar_device::host::{HostBackend, HostDevice, register_kernel};
use saggar_device::{
    Backend, CodeObject, Device, DeviceSlice, KernelArg, KernelSignature, KernelSource, LaunchConfig, Module,
    ParamKind, Stream,
};
use saggar_dispatch::{
    BucketSpec, CompileRequest, CompilerError, CompilerIdentity, HostTensor, ModelHash, ModelSpec, Program,
    ProgramCompiler, RunPath, Session, SessionConfig,
};
use saggar_shape::{DType, Dim, TensorSpec};

const WIDTH: u64 = 4;
const KERNEL: &str = "example_affine_2x_plus_1";

/// The kernel's parameters: `x`, `y`, element count.
fn kernel_signature() -> KernelSignature {
    KernelSignature::new(KERNEL, &[ParamKind::Ptr, ParamKind::Ptr, ParamKind::U64])
}

/// The compiler: it knows its model and makes programs for concrete shapes.
struct AffineCompiler {
    spec: ModelSpec,
}

impl AffineCompiler {
    fn new() -> Result<AffineCompiler, saggar_device::Error> {
        // The host backend's "GPU code": a function registered by name. A CUDA or HIP compiler would
        // generate source for NVRTC / hipRTC here instead.
        register_kernel(kernel_signature(), |ctx, _config, args| {
            let (KernelArg::Ptr(x), KernelArg::Ptr(y), KernelArg::U64(n)) = (args[0], args[1], args[2]) else {
                return Err(ctx.fault("arguments do not match the signature"));
            };
            let values = ctx.read_f32s(x, n as usize)?;
            let out: Vec<f32> = values.iter().map(|v| 2.0 * v + 1.0).collect();
            ctx.write_f32s(y, &out)
        })?;
        let batch_by_width = || [Dim::symbolic("batch"), Dim::Fixed(WIDTH)];
        Ok(AffineCompiler {
            spec: ModelSpec::new(
                "affine",
                vec![TensorSpec::new("x", DType::F32, batch_by_width())],
                vec![TensorSpec::new("y", DType::F32, batch_by_width())],
            ),
        })
    }
}

/// A loaded program for one bucket: the kernel and the number of elements it covers.
struct AffineProgram {
    kernel: <HostBackend as Backend>::Kernel,
    elements: u64,
    output_dims: Vec<Vec<u64>>,
    /// Kept alive while the kernel is used.
    _module: <HostBackend as Backend>::Module,
}

impl ProgramCompiler<HostBackend> for AffineCompiler {
    type Program = AffineProgram;

    fn model(&self) -> &ModelSpec {
        &self.spec
    }

    fn identity(&self) -> CompilerIdentity {
        // Everything that changes the generated code, besides shapes and device, goes here.
        CompilerIdentity::new("affine-example", "1.0.0", ModelHash::of_bytes(b"y = 2x + 1"))
    }

    fn compile(&self, device: &HostDevice, _request: &CompileRequest<'_>) -> Result<Vec<u8>, CompilerError> {
        // The code does not depend on the batch here (it is a kernel argument), so every bucket
        // compiles to the same bytes; the cache still stores one entry per bucket.
        let code = device.compile(&KernelSource::new("affine", "", vec![kernel_signature()]))?;
        Ok(code.to_bytes())
    }

    fn load(
        &self,
        device: &HostDevice,
        request: &CompileRequest<'_>,
        artifact: &[u8],
    ) -> Result<AffineProgram, CompilerError> {
        // `request` is what the artifact was compiled for: the shapes need no framing in the bytes.
        let dims = request.input_dims.first().ok_or("the model has one input")?;
        let module = device.load_module(&CodeObject::from_bytes(artifact)?)?;
        Ok(AffineProgram {
            kernel: module.kernel(KERNEL)?,
            elements: dims.iter().product(),
            output_dims: vec![dims.clone()],
            _module: module,
        })
    }
}

impl Program<HostBackend> for AffineProgram {
    fn output_dims(&self) -> &[Vec<u64>] {
        &self.output_dims
    }

    fn scratch_bytes(&self) -> usize {
        0
    }

    unsafe fn launch(
        &self,
        stream: &<HostBackend as Backend>::Stream,
        inputs: &[DeviceSlice],
        outputs: &[DeviceSlice],
        _scratch: DeviceSlice,
    ) -> Result<(), saggar_device::Error> {
        let args = [KernelArg::Ptr(inputs[0].ptr()), KernelArg::Ptr(outputs[0].ptr()), KernelArg::U64(self.elements)];
        // SAFETY: the dispatcher passes live slices of at least the program's sizes and keeps them
        // alive until the stream has run the launch (the `Program::launch` contract).
        unsafe { stream.launch(&self.kernel, &LaunchConfig::for_elements(self.elements, 64), &args) }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = HostBackend::open(0)?;
    let config = SessionConfig::builder().buckets(BucketSpec::PowersOfTwo { max: 16 }).build()?;
    let session = Session::builder(device, Arc::new(AffineCompiler::new()?))
        .config(config)
        .on_progress(|p| println!("program {}/{} ready (bucket {:?}, {:?})", p.done, p.total, p.bucket, p.source))
        .build()?;
    println!("buckets: {:?}", session.buckets());

    for batch in 1..=40u64 {
        let x: Vec<f32> = (0..batch * WIDTH).map(|i| i as f32).collect();
        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let dims = [batch, WIDTH];
        let mut y = vec![0u8; bytes.len()];
        let info = session
            .run_into(&[HostTensor { name: "x", dtype: DType::F32, dims: &dims, data: &bytes }], &mut [&mut y])?;
        let got: Vec<f32> = y.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        let want: Vec<f32> = x.iter().map(|v| 2.0 * v + 1.0).collect();
        if got != want {
            return Err(format!("batch {batch}: got {got:?}, want {want:?}").into());
        }
        if info.chunks > 1 || batch % 10 == 0 {
            println!("batch {batch:2}: bucket {:?}, {} chunk(s), {:?} path", info.bucket, info.chunks, info.path);
        }
    }
    let stats = session.stats();
    println!("{} requests, {} split, {} ultra-fast", stats.requests, stats.split_requests, stats.ultra_fast);
    assert!(stats.split_requests > 0, "batches above 16 are split");
    // A repeat of a shape that fits one bucket takes the ultra-fast path (split requests take the
    // standard path every time).
    let x = vec![0u8; (12 * WIDTH * 4) as usize];
    let mut y = vec![0u8; x.len()];
    let mut paths = Vec::new();
    for _ in 0..2 {
        let input = HostTensor { name: "x", dtype: DType::F32, dims: &[12, WIDTH], data: &x };
        paths.push(session.run_into(&[input], &mut [&mut y])?.path);
    }
    println!("batch 12 twice: {paths:?}");
    assert_eq!(paths[1], RunPath::UltraFast);
    Ok(())
}
