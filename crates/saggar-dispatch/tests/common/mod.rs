//! A small test compiler for the dispatcher's tests: the "sum" model.
//!
//! Inputs `in0 .. in{n-1}`, each `[batch, width]` f32, and optionally `bias` `[width]` (no batch
//! axis). Outputs `sum` `[batch, width]` = the inputs added (plus the bias) and `rowsum` `[batch, 1]`.
//! The program runs one host kernel that writes the sum into scratch and then both outputs. Compiles
//! are counted, so tests can prove what was compiled and what was loaded.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use saggar_device::host::{HostBackend, register_kernel};
use saggar_device::{
    Backend, CodeObject, Device, DeviceSlice, KernelArg, KernelSignature, KernelSource, LaunchConfig, Module,
    ParamKind, Stream,
};
use saggar_dispatch::{
    CompileRequest, CompilerError, CompilerIdentity, HostTensor, ModelHash, ModelSpec, Program, ProgramCompiler,
    Session,
};
use saggar_shape::{DType, Dim, TensorSpec};

pub struct SumModel {
    pub n: usize,
    pub width: u64,
    pub bias: bool,
    pub spec: ModelSpec,
    pub compiles: Arc<AtomicUsize>,
    pub fail_next_compile: Arc<std::sync::atomic::AtomicBool>,
    /// While set, a launch enqueues a kernel that fails on the stream and then fails itself.
    pub sabotage_launch: Arc<std::sync::atomic::AtomicBool>,
    /// While set, loaded programs report their second output as i32.
    pub wrong_output_dtype: Arc<std::sync::atomic::AtomicBool>,
    /// When set, the next load refuses its artifact (as one of another build), then clears.
    pub refuse_next_load: Arc<std::sync::atomic::AtomicBool>,
}

const FAIL_KERNEL: &str = "saggar_test_fail";

fn fail_signature() -> KernelSignature {
    KernelSignature::new(FAIL_KERNEL, &[ParamKind::Ptr])
}

fn kernel_name(n: usize, bias: bool) -> String {
    format!("saggar_test_sum_{n}_{}", if bias { "bias" } else { "nobias" })
}

fn signature(n: usize, bias: bool) -> KernelSignature {
    let mut params = vec![ParamKind::Ptr, ParamKind::Ptr, ParamKind::Ptr, ParamKind::U32, ParamKind::U32];
    params.extend(std::iter::repeat_n(ParamKind::Ptr, n + usize::from(bias)));
    KernelSignature::new(kernel_name(n, bias), &params)
}

/// Registers the host kernel: args = sum_out, rowsum_out, scratch, rows, width, inputs..., [bias].
fn register(n: usize, bias: bool) {
    register_kernel(signature(n, bias), move |ctx, _, args| {
        let ptr = |i: usize| args[i].as_ptr().unwrap();
        let (rows, width) = match (args[3], args[4]) {
            (KernelArg::U32(r), KernelArg::U32(w)) => (r as usize, w as usize),
            _ => unreachable!(),
        };
        let mut acc = vec![0f32; rows * width];
        for i in 0..n {
            for (a, v) in acc.iter_mut().zip(ctx.read_f32s(ptr(5 + i), rows * width)?) {
                *a += v;
            }
        }
        if bias {
            let b = ctx.read_f32s(ptr(5 + n), width)?;
            for (j, a) in acc.iter_mut().enumerate() {
                *a += b[j % width];
            }
        }
        ctx.write_f32s(ptr(2), &acc)?;
        let staged = ctx.read_f32s(ptr(2), rows * width)?;
        ctx.write_f32s(ptr(0), &staged)?;
        let sums: Vec<f32> = staged.chunks(width).map(|r| r.iter().sum()).collect();
        ctx.write_f32s(ptr(1), &sums)
    })
    .unwrap();
}

impl SumModel {
    pub fn new(n: usize, width: u64, bias: bool) -> SumModel {
        register(n, bias);
        // Reads through the null pointer it is given: fails on the stream, after the launch returned.
        register_kernel(fail_signature(), |ctx, _, args| ctx.read_f32s(args[0].as_ptr().unwrap(), 1).map(drop))
            .unwrap();
        let mut inputs: Vec<TensorSpec> = (0..n)
            .map(|i| TensorSpec::new(format!("in{i}"), DType::F32, [Dim::symbolic("batch"), Dim::Fixed(width)]))
            .collect();
        if bias {
            inputs.push(TensorSpec::new("bias", DType::F32, [Dim::Fixed(width)]));
        }
        let outputs = vec![
            TensorSpec::new("sum", DType::F32, [Dim::symbolic("batch"), Dim::Fixed(width)]),
            TensorSpec::new("rowsum", DType::F32, [Dim::symbolic("batch"), Dim::Fixed(1)]),
        ];
        SumModel {
            n,
            width,
            bias,
            spec: ModelSpec::new(format!("sum{n}"), inputs, outputs),
            compiles: Arc::new(AtomicUsize::new(0)),
            fail_next_compile: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            sabotage_launch: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            wrong_output_dtype: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            refuse_next_load: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
    }

    /// The expected outputs for a request (binding order inputs, `batch` rows).
    pub fn reference(&self, inputs: &[Vec<f32>], batch: usize) -> (Vec<f32>, Vec<f32>) {
        let w = self.width as usize;
        let mut sum = vec![0f32; batch * w];
        for input in &inputs[..self.n] {
            for (s, v) in sum.iter_mut().zip(input) {
                *s += v;
            }
        }
        if self.bias {
            for (j, s) in sum.iter_mut().enumerate() {
                *s += inputs[self.n][j % w];
            }
        }
        let rowsum = sum.chunks(w).map(|r| r.iter().sum()).collect();
        (sum, rowsum)
    }

    /// Deterministic inputs for `batch` rows (binding order).
    pub fn inputs(&self, batch: usize, seed: u32) -> Vec<Vec<f32>> {
        let w = self.width as usize;
        let mut all: Vec<Vec<f32>> = (0..self.n)
            .map(|i| (0..batch * w).map(|j| ((i * 7 + j * 3 + seed as usize) % 13) as f32 - 6.0).collect())
            .collect();
        if self.bias {
            all.push((0..w).map(|j| j as f32 * 0.5 + seed as f32).collect());
        }
        all
    }

    pub fn dims(&self, batch: u64) -> Vec<Vec<u64>> {
        let mut d: Vec<Vec<u64>> = (0..self.n).map(|_| vec![batch, self.width]).collect();
        if self.bias {
            d.push(vec![self.width]);
        }
        d
    }
}

pub struct SumProgram {
    kernel: <HostBackend as Backend>::Kernel,
    rows: u32,
    width: u32,
    output_dims: Vec<Vec<u64>>,
    output_dtypes: [DType; 2],
    fail: <HostBackend as Backend>::Kernel,
    sabotage: Arc<std::sync::atomic::AtomicBool>,
    _module: <HostBackend as Backend>::Module,
}

impl Program<HostBackend> for SumProgram {
    fn output_dims(&self) -> &[Vec<u64>] {
        &self.output_dims
    }

    fn output_dtypes(&self) -> Option<&[DType]> {
        Some(&self.output_dtypes)
    }

    fn scratch_bytes(&self) -> usize {
        self.rows as usize * self.width as usize * 4
    }

    unsafe fn launch(
        &self,
        stream: &<HostBackend as Backend>::Stream,
        inputs: &[DeviceSlice],
        outputs: &[DeviceSlice],
        scratch: DeviceSlice,
    ) -> Result<(), saggar_device::Error> {
        let mut args = vec![
            KernelArg::Ptr(outputs[0].ptr()),
            KernelArg::Ptr(outputs[1].ptr()),
            KernelArg::Ptr(scratch.ptr()),
            KernelArg::U32(self.rows),
            KernelArg::U32(self.width),
        ];
        args.extend(inputs.iter().map(|s| KernelArg::Ptr(s.ptr())));
        if self.sabotage.load(Ordering::SeqCst) {
            let null = [KernelArg::Ptr(saggar_device::DevicePtr::NULL)];
            // SAFETY: the kernel only reads through its argument, and reading null fails cleanly.
            unsafe { stream.launch(&self.fail, &LaunchConfig::for_elements(1, 1), &null)? };
            return outputs[0].sub(0, usize::MAX).map(drop);
        }
        // SAFETY: the dispatcher passes live slices sized for this program.
        unsafe { stream.launch(&self.kernel, &LaunchConfig::for_elements(1, 1), &args) }
    }
}

impl ProgramCompiler<HostBackend> for SumModel {
    type Program = SumProgram;

    fn model(&self) -> &ModelSpec {
        &self.spec
    }

    fn identity(&self) -> CompilerIdentity {
        let hash = format!("{:064x}", self.n as u64 * 1000 + self.width + u64::from(self.bias) * 7);
        CompilerIdentity::new("saggar-dispatch-tests", "1", ModelHash::parse(hash).expect("64 hex digits"))
    }

    fn compile(
        &self,
        device: &<HostBackend as Backend>::Device,
        _request: &CompileRequest<'_>,
    ) -> Result<Vec<u8>, CompilerError> {
        if self.fail_next_compile.swap(false, Ordering::SeqCst) {
            return Err("injected compile failure".into());
        }
        self.compiles.fetch_add(1, Ordering::SeqCst);
        // A compile takes a moment, so races between compilers are real.
        std::thread::sleep(std::time::Duration::from_millis(5));
        let code =
            device.compile(&KernelSource::new("sum", "", vec![signature(self.n, self.bias), fail_signature()]))?;
        Ok(code.to_bytes())
    }

    fn load(
        &self,
        device: &<HostBackend as Backend>::Device,
        request: &CompileRequest<'_>,
        artifact: &[u8],
    ) -> Result<SumProgram, CompilerError> {
        if self.refuse_next_load.swap(false, Ordering::SeqCst) {
            return Err("injected load refusal: an artifact of another build".into());
        }
        // The request says which shape the artifact was compiled for: no framing of its own.
        let rows = request.input_dims[0][0];
        let code = CodeObject::from_bytes(artifact)?;
        let module = device.load_module(&code)?;
        let kernel = module.kernel(&kernel_name(self.n, self.bias))?;
        let second = if self.wrong_output_dtype.load(Ordering::SeqCst) { DType::I32 } else { DType::F32 };
        Ok(SumProgram {
            kernel,
            rows: rows as u32,
            width: self.width as u32,
            output_dims: vec![vec![rows, self.width], vec![rows, 1]],
            output_dtypes: [DType::F32, second],
            fail: module.kernel(FAIL_KERNEL)?,
            sabotage: self.sabotage_launch.clone(),
            _module: module,
        })
    }
}

pub fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// f32 host data aligned for f32 (a Vec<f32> is).
pub fn as_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: f32 -> u8 view of initialised memory; u8 has no alignment requirement.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), v.len() * 4) }
}

pub fn host_device() -> saggar_device::host::HostDevice {
    HostBackend::open(0).unwrap()
}

pub fn no_progress(_: &saggar_dispatch::Progress) {}

/// `data` (one vector per input, each at its `dims`) as host tensors of `model`, in binding order.
pub fn host_tensors<'a>(model: &'a SumModel, data: &'a [Vec<f32>], dims: &'a [Vec<u64>]) -> Vec<HostTensor<'a>> {
    model
        .spec
        .inputs
        .iter()
        .zip(data)
        .zip(dims)
        .map(|((spec, d), dims)| HostTensor { name: spec.name(), dtype: DType::F32, dims, data: as_bytes(d) })
        .collect()
}

/// Runs `batch` rows of inputs of seed `seed` through `session` and checks both outputs against
/// `model`'s reference.
pub fn run_checked<C: ProgramCompiler<HostBackend>>(
    session: &Session<HostBackend, C>,
    model: &SumModel,
    batch: usize,
    seed: u32,
) {
    let data = model.inputs(batch, seed);
    let dims = model.dims(batch as u64);
    let out = session.run(&host_tensors(model, &data, &dims)).unwrap();
    let (sum, rowsum) = model.reference(&data, batch);
    assert_eq!((floats(&out[0].data), floats(&out[1].data)), (sum, rowsum), "batch {batch} seed {seed}");
}

pub fn names(model: &SumModel) -> Vec<String> {
    model.spec.inputs.iter().map(|s| s.name().to_string()).collect()
}

/// Device buffers holding one request for the sum model, and room for its outputs.
pub struct DeviceRequest {
    pub inputs: Vec<<HostBackend as Backend>::DeviceBuffer>,
    pub outputs: Vec<<HostBackend as Backend>::DeviceBuffer>,
    pub dims: Vec<Vec<u64>>,
    pub out_dims: Vec<Vec<u64>>,
    pub data: Vec<Vec<f32>>,
    pub batch: usize,
}

impl DeviceRequest {
    pub fn new(device: &saggar_device::host::HostDevice, model: &SumModel, batch: usize, seed: u32) -> DeviceRequest {
        let stream = device.create_stream().unwrap();
        let data = model.inputs(batch, seed);
        let inputs = data
            .iter()
            .map(|d| {
                let b = device.alloc(d.len() * 4).unwrap();
                stream.upload(as_bytes(d), saggar_device::DeviceBuffer::as_slice(&b)).unwrap();
                b
            })
            .collect();
        let w = model.width as usize;
        let outputs = vec![device.alloc(batch * w * 4).unwrap(), device.alloc(batch * 4).unwrap()];
        DeviceRequest {
            inputs,
            outputs,
            dims: model.dims(batch as u64),
            out_dims: vec![vec![batch as u64, model.width], vec![batch as u64, 1]],
            data,
            batch,
        }
    }

    pub fn tensors<'a>(
        &'a self,
        model: &'a SumModel,
    ) -> (Vec<saggar_dispatch::DeviceTensor<'a>>, Vec<saggar_dispatch::DeviceTensor<'a>>) {
        use saggar_device::DeviceBuffer;
        let ins = model
            .spec
            .inputs
            .iter()
            .zip(&self.inputs)
            .zip(&self.dims)
            .map(|((s, b), d)| saggar_dispatch::DeviceTensor {
                name: s.name(),
                dtype: s.dtype(),
                dims: d,
                data: b.as_slice(),
            })
            .collect();
        let outs = model
            .spec
            .outputs
            .iter()
            .zip(&self.outputs)
            .zip(&self.out_dims)
            .map(|((s, b), d)| saggar_dispatch::DeviceTensor {
                name: s.name(),
                dtype: s.dtype(),
                dims: d,
                data: b.as_slice(),
            })
            .collect();
        (ins, outs)
    }

    /// Downloads the outputs and checks them against the reference.
    pub fn check(&self, device: &saggar_device::host::HostDevice, model: &SumModel) {
        use saggar_device::DeviceBuffer;
        let stream = device.create_stream().unwrap();
        let (want_sum, want_rowsum) = model.reference(&self.data, self.batch);
        let mut got = vec![0u8; self.outputs[0].len()];
        stream.download(self.outputs[0].as_slice(), &mut got).unwrap();
        assert_eq!(floats(&got), want_sum, "device sum, batch {}", self.batch);
        let mut got = vec![0u8; self.outputs[1].len()];
        stream.download(self.outputs[1].as_slice(), &mut got).unwrap();
        assert_eq!(floats(&got), want_rowsum, "device rowsum, batch {}", self.batch);
    }

    /// Poisons the outputs so a run that skips one is caught.
    pub fn poison(&self, device: &saggar_device::host::HostDevice) {
        use saggar_device::DeviceBuffer;
        let stream = device.create_stream().unwrap();
        for b in &self.outputs {
            stream.memset(b.as_slice(), 0xFF).unwrap();
        }
        stream.synchronize().unwrap();
    }
}
