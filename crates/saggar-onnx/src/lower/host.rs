//! Host kernels: each lowered node becomes a kernel registered with
//! [`saggar_device::host::register_kernel`], running the op's own [`crate::ops::Op::eval`].
//!
//! A kernel is specialised to one op (with its attributes) and one set of concrete input and output
//! shapes; its name is `saggar_onnx_<op>_<hash>`, the hash covering [`crate::ops::Op::key`] and the
//! shapes, so identical nodes (twelve identical encoder layers) share one kernel and a name always
//! means the same computation. Parameters: one pointer per present input, then one per output.
//!
//! Inputs are read in place from device memory (allocations and plan offsets are 64-byte aligned);
//! outputs are computed into a per-thread buffer reused across launches, then copied out, because
//! the simulated device lends one mutable region at a time.

use std::cell::RefCell;
use std::sync::Arc;

use saggar_device::host::KernelContext;
use saggar_device::{KernelArg, KernelSignature, LaunchConfig, ParamKind};
use smallvec::SmallVec;

use crate::ops::{EvalInputs, Op};
use crate::tensor::{DataMut, DataRef, TensorMut, TensorView, checked_numel};

/// The copy kernel: `(ptr dst, ptr src, u64 bytes)`.
pub(crate) const COPY: &str = "saggar_onnx_copy";

use crate::ops::gpu::Operand;
use crate::plan::host::register_once;

/// What one node kernel computes.
#[derive(Debug, Clone)]
pub(crate) struct NodeKernel {
    pub(crate) op_type: String,
    pub(crate) op: Arc<dyn Op>,
    /// One entry per input slot; `None` for an absent optional input.
    pub(crate) inputs: Vec<Option<Operand>>,
    pub(crate) outputs: Vec<Operand>,
}

impl NodeKernel {
    /// The kernel's name (see the module docs).
    pub(crate) fn name(&self) -> String {
        let mut h = blake3::Hasher::new();
        h.update(self.op_type.as_bytes());
        h.update(self.op.key().as_bytes());
        h.update(format!("{:?}|{:?}", self.inputs, self.outputs).as_bytes());
        let hex = h.finalize().to_hex();
        format!("saggar_onnx_{}_{}", self.op_type, &hex[..16])
    }

    pub(crate) fn signature(&self) -> KernelSignature {
        let n = self.inputs.iter().flatten().count() + self.outputs.len();
        KernelSignature { name: self.name(), params: vec![ParamKind::Ptr; n] }
    }
}

/// A fused group on the host: its nodes in order, each input slot an external input (`Ok(k)`: kernel
/// parameter `k`) or an earlier node's output (`Err(j)`). Parameters: the externals, then the values
/// of the nodes `outputs` lists (the last node's among them).
#[derive(Debug, Clone)]
pub(crate) struct FusedHostKernel {
    pub(crate) nodes: Vec<(NodeKernel, crate::fuse::elementwise::Wiring)>,
    pub(crate) externals: usize,
    pub(crate) outputs: Vec<usize>,
}

impl FusedHostKernel {
    /// `saggar_onnx_fused_<hash>` over the member kernels and their wiring.
    pub(crate) fn signature(&self) -> KernelSignature {
        let mut h = blake3::Hasher::new();
        for (kernel, operands) in &self.nodes {
            h.update(kernel.name().as_bytes());
            h.update(format!("{operands:?}").as_bytes());
        }
        h.update(format!("{:?}", self.outputs).as_bytes());
        let hex = h.finalize().to_hex();
        KernelSignature {
            name: format!("saggar_onnx_fused_{}", &hex[..16]),
            params: vec![ParamKind::Ptr; self.externals + self.outputs.len()],
        }
    }
}

/// Registers `kernel` unless this process already did.
pub(crate) fn ensure_fused_registered(kernel: &FusedHostKernel) -> Result<(), saggar_device::Error> {
    let body = kernel.clone();
    register_once(kernel.signature(), move |ctx: &mut KernelContext<'_>, _: &LaunchConfig, args: &[KernelArg]| {
        let mut buffers = OUTPUTS.with(RefCell::take);
        let result = run_fused(&body, ctx, args, &mut buffers);
        OUTPUTS.with(|c| c.replace(buffers));
        result
    })
}

/// Registers the copy kernel unless this process already did.
pub(crate) fn ensure_copy_registered() -> Result<(), saggar_device::Error> {
    register_once(copy_signature(), copy_kernel)
}

/// Registers `kernel` unless this process already did.
pub(crate) fn ensure_registered(kernel: &NodeKernel) -> Result<(), saggar_device::Error> {
    let body = kernel.clone();
    register_once(kernel.signature(), move |ctx: &mut KernelContext<'_>, _: &LaunchConfig, args: &[KernelArg]| {
        run(&body, ctx, args)
    })
}

/// The copy kernel's signature.
pub(crate) fn copy_signature() -> KernelSignature {
    KernelSignature::new(COPY, &[ParamKind::Ptr, ParamKind::Ptr, ParamKind::U64])
}

fn copy_kernel(ctx: &mut KernelContext<'_>, _: &LaunchConfig, args: &[KernelArg]) -> saggar_device::Result<()> {
    let (Some(dst), Some(src), Some(KernelArg::U64(len))) = (args[0].as_ptr(), args[1].as_ptr(), args.get(2)) else {
        return Err(ctx.fault("copy takes (ptr dst, ptr src, u64 bytes)"));
    };
    let len = usize::try_from(*len).map_err(|_| ctx.fault("length overflows"))?;
    ctx.copy(src, dst, len)
}

thread_local! {
    /// Output buffers of the kernel running on this (stream worker) thread, reused across launches.
    static OUTPUTS: RefCell<Vec<Vec<u64>>> = const { RefCell::new(Vec::new()) };
}

fn view<'a>(op: &'a Operand, bytes: &'a [u8]) -> Option<TensorView<'a>> {
    Some(TensorView { dims: &op.dims, data: DataRef::from_bytes(op.dtype, bytes)? })
}

fn output_view<'a>(op: &'a Operand, words: &'a mut [u64], n: usize) -> Option<TensorMut<'a>> {
    Some(TensorMut { dims: &op.dims, data: DataMut::from_words(op.dtype, words, n)? })
}

/// Evaluates a fused group: each node into its own per-thread buffer, those of `outputs` copied out.
fn run_fused(
    kernel: &FusedHostKernel,
    ctx: &mut KernelContext<'_>,
    args: &[KernelArg],
    buffers: &mut Vec<Vec<u64>>,
) -> saggar_device::Result<()> {
    let n = kernel.nodes.len();
    if buffers.len() < n {
        buffers.resize_with(n, Vec::new);
    }
    for (j, (node, operands)) in kernel.nodes.iter().enumerate() {
        let out = node.outputs.first().ok_or_else(|| ctx.fault("a fused node has no output"))?;
        let bytes = out.bytes().ok_or_else(|| ctx.fault("output size overflows"))?;
        let (done, rest) = buffers.split_at_mut(j);
        let buf = &mut rest[0];
        buf.resize(bytes.div_ceil(8), 0);
        let mut views: SmallVec<[Option<TensorView<'_>>; 8]> = SmallVec::new();
        for (input, operand) in node.inputs.iter().zip(operands) {
            let (Some(op), Some(src)) = (input, operand) else {
                views.push(None);
                continue;
            };
            let len = op.bytes().ok_or_else(|| ctx.fault("input size overflows"))?;
            let bytes: &[u8] = match *src {
                Ok(k) => {
                    let ptr = args
                        .get(k)
                        .and_then(KernelArg::as_ptr)
                        .ok_or_else(|| ctx.fault("argument is not a pointer"))?;
                    ctx.bytes(ptr, len)?
                }
                Err(m) => {
                    bytemuck::cast_slice(done.get(m).ok_or_else(|| ctx.fault("a fused operand is not computed yet"))?)
                        .get(..len)
                        .ok_or_else(|| ctx.fault("a fused operand is short"))?
                }
            };
            views.push(Some(view(op, bytes).ok_or_else(|| ctx.fault("input is misaligned for its element type"))?));
        }
        let count = checked_numel(&out.dims).unwrap_or(0);
        let mut outs = [output_view(out, buf, count).ok_or_else(|| ctx.fault("unsupported output type"))?];
        crate::ops::evaluate::guarded(|| node.op.eval(&EvalInputs::new(&views), &mut outs))
            .map_err(|e| ctx.fault(format!("{}: {e}", node.op_type)))?;
    }
    for (k, &j) in kernel.outputs.iter().enumerate() {
        let (node, buffer) = kernel.nodes.get(j).zip(buffers.get(j)).ok_or_else(|| ctx.fault("no such fused node"))?;
        let out = node.0.outputs.first().ok_or_else(|| ctx.fault("a fused node has no output"))?;
        let len = out.bytes().ok_or_else(|| ctx.fault("output size overflows"))?;
        let ptr = args
            .get(kernel.externals + k)
            .and_then(KernelArg::as_ptr)
            .ok_or_else(|| ctx.fault("argument is not a pointer"))?;
        let bytes: &[u8] = bytemuck::cast_slice(buffer);
        ctx.bytes_mut(ptr, len)?.copy_from_slice(&bytes[..len]);
    }
    Ok(())
}

fn run(kernel: &NodeKernel, ctx: &mut KernelContext<'_>, args: &[KernelArg]) -> saggar_device::Result<()> {
    let mut buffers = OUTPUTS.with(RefCell::take);
    let result = run_with(kernel, ctx, args, &mut buffers);
    OUTPUTS.with(|c| c.replace(buffers));
    result
}

fn run_with(
    kernel: &NodeKernel,
    ctx: &mut KernelContext<'_>,
    args: &[KernelArg],
    buffers: &mut Vec<Vec<u64>>,
) -> saggar_device::Result<()> {
    let n_inputs = kernel.inputs.iter().flatten().count();
    if buffers.len() < kernel.outputs.len() {
        buffers.resize_with(kernel.outputs.len(), Vec::new);
    }
    for (buf, out) in buffers.iter_mut().zip(&kernel.outputs) {
        let bytes = out.bytes().ok_or_else(|| ctx.fault("output size overflows"))?;
        buf.resize(bytes.div_ceil(8), 0);
    }
    {
        let mut views: SmallVec<[Option<TensorView<'_>>; 8]> = SmallVec::new();
        let mut arg = 0;
        for input in &kernel.inputs {
            let Some(op) = input else {
                views.push(None);
                continue;
            };
            let ptr = args[arg].as_ptr().ok_or_else(|| ctx.fault("argument is not a pointer"))?;
            arg += 1;
            let len = op.bytes().ok_or_else(|| ctx.fault("input size overflows"))?;
            let bytes = ctx.bytes(ptr, len)?;
            views.push(Some(view(op, bytes).ok_or_else(|| ctx.fault("input is misaligned for its element type"))?));
        }
        let mut outs: SmallVec<[TensorMut<'_>; 4]> = SmallVec::new();
        for (buf, out) in buffers.iter_mut().zip(&kernel.outputs) {
            let n = checked_numel(&out.dims).unwrap_or(0);
            outs.push(output_view(out, buf, n).ok_or_else(|| ctx.fault("unsupported output type"))?);
        }
        crate::ops::evaluate::guarded(|| kernel.op.eval(&EvalInputs::new(&views), &mut outs))
            .map_err(|e| ctx.fault(e.to_string()))?;
    }
    for (k, (buf, out)) in buffers.iter().zip(&kernel.outputs).enumerate() {
        let ptr = args[n_inputs + k].as_ptr().ok_or_else(|| ctx.fault("argument is not a pointer"))?;
        let len = out.bytes().ok_or_else(|| ctx.fault("output size overflows"))?;
        let bytes: &[u8] = bytemuck::cast_slice(buf);
        ctx.bytes_mut(ptr, len)?.copy_from_slice(&bytes[..len]);
    }
    Ok(())
}
