//! The host backend's BLAS: the same matmuls as cuBLASLt and hipBLASLt (row-major, batched and
//! strided, bias and epilogue fused, `f32`, `f16` or `bf16` matrices), computed in `f32` on the
//! stream's worker: half elements are widened exactly, products accumulate in `f32`, and the result
//! (bias and epilogue applied in `f32`) is rounded to nearest even into the output type. `i8` products
//! accumulate exactly in `i32`, wrapping as ONNX `MatMulInteger` does, so they are bit-exact
//! references for the GPU libraries' integer kernels. A matmul is enqueued
//! as a launch of one host kernel, so it runs asynchronously, is recorded by a capture and replays
//! with the addresses it was captured with, as on a GPU.

use std::sync::{Arc, OnceLock};

use crate::api::Stream as _;
use crate::blas::{Blas, BlasConfig, Epilogue, MatmulDesc, MatmulOperands, MatmulType};
use crate::error::Result;
use crate::host::kernels::{KernelContext, RegisteredKernel};
use crate::host::stream::forbid_during_capture;
use crate::host::{HostBackend, HostDevice, HostKernel, HostStream};
use crate::rules;
use crate::types::{DevicePtr, KernelArg, KernelSignature, LaunchConfig, ParamKind};

/// The host kernel behind every host matmul (every element type; it accumulates in `f32`, or in `i32`
/// for `i8` inputs).
pub const MATMUL_KERNEL: &str = "saggar_host_blas_matmul_f32";

/// The kernel's flags: the transposes, and 4-bit fields for the epilogue and the two element types.
const TRANS_A: u32 = 1;
const TRANS_B: u32 = 2;
const EPILOGUE_SHIFT: u32 = 4;
const INPUTS_SHIFT: u32 = 8;
const OUTPUT_SHIFT: u32 = 12;
const FIELD: u32 = 0xf;

const EPILOGUES: [Epilogue; 3] = [Epilogue::None, Epilogue::Relu, Epilogue::GeluTanh];
const TYPES: [MatmulType; 5] = [MatmulType::F32, MatmulType::F16, MatmulType::BF16, MatmulType::I8, MatmulType::I32];

/// The flags' code of `value`: its index in `codes`.
fn code<T: PartialEq>(codes: &[T], value: T) -> u32 {
    codes.iter().position(|c| *c == value).expect("every value has a code") as u32
}

fn kernel() -> &'static RegisteredKernel {
    static KERNEL: OnceLock<RegisteredKernel> = OnceLock::new();
    KERNEL.get_or_init(|| {
        use ParamKind::*;
        let signature = KernelSignature::new(
            MATMUL_KERNEL,
            &[Ptr, Ptr, Ptr, Ptr, U64, U64, U64, U64, U64, U64, U64, U32, F32, F32],
        );
        RegisteredKernel { signature: Arc::new(signature), func: Arc::new(matmul_kernel) }
    })
}

/// A host BLAS handle. It loads nothing, so it is always available.
///
/// # Thread safety
/// `Send + Sync`: it holds only the kernel and the workspace size.
#[derive(Debug, Clone)]
pub struct HostBlas {
    kernel: HostKernel,
    workspace_bytes: usize,
}

impl HostBlas {
    pub(crate) fn new(device: &HostDevice, config: &BlasConfig) -> Result<HostBlas> {
        forbid_during_capture(&device.shared, "device.create_blas")?;
        let kernel = HostKernel { ordinal: device.shared.info.ordinal, registered: kernel().clone() };
        Ok(HostBlas { kernel, workspace_bytes: config.workspace_bytes })
    }
}

impl Blas for HostBlas {
    type Backend = HostBackend;

    fn workspace_bytes(&self) -> usize {
        self.workspace_bytes
    }

    fn prepare(&self, desc: &MatmulDesc) -> Result<()> {
        // The host has no plans; the description is checked as a GPU's plan would check it.
        rules::check_matmul_desc(desc)
    }

    unsafe fn matmul(&self, stream: &HostStream, desc: &MatmulDesc, operands: &MatmulOperands) -> Result<()> {
        rules::check_matmul(desc, operands, self.workspace_bytes)?;
        rules::check_same_device("blas.matmul", stream.device_ordinal(), self.kernel.ordinal)?;
        let flags = u32::from(desc.trans_a) * TRANS_A
            + u32::from(desc.trans_b) * TRANS_B
            + (code(&EPILOGUES, desc.epilogue) << EPILOGUE_SHIFT)
            + (code(&TYPES, desc.inputs) << INPUTS_SHIFT)
            + (code(&TYPES, desc.output) << OUTPUT_SHIFT);
        let bias = operands.bias.map_or(DevicePtr::NULL, |b| b.ptr());
        let args = [
            KernelArg::Ptr(operands.a.ptr()),
            KernelArg::Ptr(operands.b.ptr()),
            KernelArg::Ptr(operands.c.ptr()),
            KernelArg::Ptr(bias),
            KernelArg::U64(desc.m),
            KernelArg::U64(desc.n),
            KernelArg::U64(desc.k),
            KernelArg::U64(desc.batch),
            KernelArg::U64(desc.stride_a),
            KernelArg::U64(desc.stride_b),
            KernelArg::U64(desc.stride_c),
            KernelArg::U32(flags),
            KernelArg::F32(desc.alpha()),
            KernelArg::F32(desc.beta()),
        ];
        // SAFETY: the operands were checked against the description above, and the caller promised
        // (this function's contract) that they stay live until the stream passed the work; the host
        // kernel reads and writes only inside the extents that check covered.
        unsafe { stream.launch(&self.kernel, &LaunchConfig::for_elements(1, 1), &args) }
    }
}

fn arg_u64(args: &[KernelArg], i: usize) -> u64 {
    match args[i] {
        KernelArg::U64(v) => v,
        _ => 0,
    }
}

/// The host kernel: arguments as [`HostBlas::matmul`] packs them (checked against the signature by
/// the launch, and against the buffers by [`rules::check_matmul`]).
fn matmul_kernel(ctx: &mut KernelContext<'_>, _: &LaunchConfig, args: &[KernelArg]) -> Result<()> {
    let ptr = |i: usize| args[i].as_ptr().unwrap_or(DevicePtr::NULL);
    let (a, b, c, bias) = (ptr(0), ptr(1), ptr(2), ptr(3));
    let [m, n, k, batch, stride_a, stride_b, stride_c] = std::array::from_fn(|i| arg_u64(args, 4 + i) as usize);
    let (flags, alpha, beta) = match (args[11], args[12], args[13]) {
        (KernelArg::U32(f), KernelArg::F32(a), KernelArg::F32(b)) => (f, a, b),
        _ => return Err(ctx.fault("arguments out of order")),
    };
    let field = |shift: u32| (flags >> shift & FIELD) as usize;
    let (Some(&epilogue), Some(&inputs), Some(&output)) =
        (EPILOGUES.get(field(EPILOGUE_SHIFT)), TYPES.get(field(INPUTS_SHIFT)), TYPES.get(field(OUTPUT_SHIFT)))
    else {
        return Err(ctx.fault(format!("unknown flags {flags:#x}")));
    };
    let dims = Dims { m, n, k, batch, stride_a, stride_b, stride_c };
    if inputs == MatmulType::I8 {
        return i8_matmul(ctx, [a, b, c], dims, flags, beta != 0.0);
    }
    // Half inputs are widened once (exactly); C stays in its bytes, so elements between batches of a
    // strided C are written back as they were.
    let read = |ptr: DevicePtr, elements: usize, ty: MatmulType| -> Result<Vec<f32>> {
        Ok(ty.decode(ctx.bytes(ptr, elements * ty.bytes())?))
    };
    let bias = if bias == DevicePtr::NULL { None } else { Some(read(bias, n, output)?) };
    let span = |stride: usize, elements: usize| (batch - 1) * stride + elements;
    let a_all = read(a, span(stride_a, m * k), inputs)?;
    let b_all = read(b, span(stride_b, k * n), inputs)?;
    let out_bytes = output.bytes();
    let mut c_all = ctx.bytes(c, span(stride_c, m * n) * out_bytes)?.to_vec();
    // Row-major operands in the order the loops want them: `a_rows` [m, k], `b_rows` [k, n].
    let mut a_rows = vec![0f32; m * k];
    let mut b_rows = vec![0f32; k * n];
    let mut row = vec![0f32; n];
    for batch_index in 0..batch {
        let a_batch = &a_all[batch_index * stride_a..][..m * k];
        let b_batch = &b_all[batch_index * stride_b..][..k * n];
        transpose_into(a_batch, &mut a_rows, flags & TRANS_A != 0, k, m);
        transpose_into(b_batch, &mut b_rows, flags & TRANS_B != 0, n, k);
        let c_batch = &mut c_all[batch_index * stride_c * out_bytes..][..m * n * out_bytes];
        for i in 0..m {
            row.fill(0.0);
            // i-p-j order: the inner loop streams one row of B into one row of C.
            for (p, &a_ip) in a_rows[i * k..(i + 1) * k].iter().enumerate() {
                for (acc, &b_pj) in row.iter_mut().zip(&b_rows[p * n..(p + 1) * n]) {
                    *acc += a_ip * b_pj;
                }
            }
            let c_row = c_batch[i * n * out_bytes..(i + 1) * n * out_bytes].chunks_exact_mut(out_bytes);
            for (j, (out, acc)) in c_row.zip(&row).enumerate() {
                let prior = if beta == 0.0 { 0.0 } else { beta * output.load(out) };
                let biased = alpha * acc + prior + bias.as_ref().map_or(0.0, |b| b[j]);
                output.store(epilogue.apply(biased), out);
            }
        }
    }
    ctx.bytes_mut(c, c_all.len())?.copy_from_slice(&c_all);
    Ok(())
}

/// A matmul's sizes and strides, in elements.
#[derive(Clone, Copy)]
struct Dims {
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    stride_a: usize,
    stride_b: usize,
    stride_c: usize,
}

/// The `i8` product into `i32` ([`rules::check_matmul_desc`] admitted it: `alpha` 1, `beta` 0 or 1,
/// no bias or epilogue), exact: products and sums wrap in `i32`, and `accumulate` adds the existing
/// `C` the same way.
fn i8_matmul(
    ctx: &mut KernelContext<'_>,
    [a, b, c]: [DevicePtr; 3],
    d: Dims,
    flags: u32,
    accumulate: bool,
) -> Result<()> {
    let Dims { m, n, k, batch, stride_a, stride_b, stride_c } = d;
    let span = |stride: usize, elements: usize| (batch - 1) * stride + elements;
    let widen = |bytes: &[u8]| bytes.iter().map(|&v| i32::from(v as i8)).collect::<Vec<i32>>();
    let a_all = widen(ctx.bytes(a, span(stride_a, m * k))?);
    let b_all = widen(ctx.bytes(b, span(stride_b, k * n))?);
    let mut c_all = ctx.bytes(c, span(stride_c, m * n) * 4)?.to_vec();
    let (mut a_rows, mut b_rows) = (vec![0i32; m * k], vec![0i32; k * n]);
    let mut row = vec![0i32; n];
    for batch_index in 0..batch {
        transpose_into(&a_all[batch_index * stride_a..][..m * k], &mut a_rows, flags & TRANS_A != 0, k, m);
        transpose_into(&b_all[batch_index * stride_b..][..k * n], &mut b_rows, flags & TRANS_B != 0, n, k);
        let c_batch = &mut c_all[batch_index * stride_c * 4..][..m * n * 4];
        for i in 0..m {
            row.fill(0);
            for (p, &a_ip) in a_rows[i * k..(i + 1) * k].iter().enumerate() {
                for (acc, &b_pj) in row.iter_mut().zip(&b_rows[p * n..(p + 1) * n]) {
                    *acc = acc.wrapping_add(a_ip.wrapping_mul(b_pj));
                }
            }
            for (out, acc) in c_batch[i * n * 4..(i + 1) * n * 4].chunks_exact_mut(4).zip(&row) {
                let prior = if accumulate { i32::from_le_bytes([out[0], out[1], out[2], out[3]]) } else { 0 };
                out.copy_from_slice(&acc.wrapping_add(prior).to_le_bytes());
            }
        }
    }
    ctx.bytes_mut(c, c_all.len())?.copy_from_slice(&c_all);
    Ok(())
}

/// Copies `src` into `dst` as a row-major `[rows_out, cols_out]` matrix: as it is, or transposed from
/// a stored `[cols_out, rows_out]` (`rows_in` x `cols_in` = `cols_out` x `rows_out`).
fn transpose_into<T: Copy>(src: &[T], dst: &mut [T], transposed: bool, stored_rows: usize, stored_cols: usize) {
    if !transposed {
        dst.copy_from_slice(src);
        return;
    }
    // `src` is [stored_rows, stored_cols]; `dst` is its transpose [stored_cols, stored_rows].
    for r in 0..stored_rows {
        for (col, &v) in src[r * stored_cols..(r + 1) * stored_cols].iter().enumerate() {
            dst[col * stored_rows + r] = v;
        }
    }
}
