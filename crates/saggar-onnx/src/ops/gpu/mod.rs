//! What an op compiles to on CUDA and HIP: [`Op::gpu`](crate::ops::Op::gpu) describes a node as an
//! elementwise expression (fused with its neighbours by the lowering) or as launches of generated
//! kernel kinds. A kind is a [`GpuKernel`] defined in its op family's folder beside its `.cu`
//! template: its C++ text is a function of the kind's value alone, and every extent, stride and
//! offset travels in the launch's `meta` table (an `i64` array in device memory, laid out as the
//! template's header says), so one kernel serves every shape.
//!
//! Every kernel is `extern "C"`, takes `const long long* meta` then its tensor pointers, and loops
//! over its work with grid-stride loops, so it serves any grid size. The text compiles unchanged
//! under NVRTC and hipRTC and is correct at warp size 32 or 64: block reductions use shared memory,
//! and shuffles stay within groups of at most 32 adjacent lanes; kernels with a block reduction
//! assume `BLOCK` threads (a power of two).

mod template;

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use saggar_device::{KernelSignature, ParamKind};
use saggar_shape::DType;

pub(crate) use template::{bits_type, float_literal, index_type, render, strip_header};

use crate::ops::{InferInputs, OpError};
use crate::tensor::checked_numel;

/// Threads per block of every element and row kernel.
pub(crate) const BLOCK: u32 = 256;
/// Threads sharing one row in row-group kernels (`ONNX_ROW_LANES` in the prelude).
pub(crate) const ROW_LANES: u32 = 32;
/// Bytes of dynamic shared memory up to which a row-group LayerNorm keeps its block's rows there
/// (`ONNX_ROW_CACHE_BYTES` in the prelude; the default limit of a launch without opting in).
pub(crate) const ROW_CACHE_BYTES: u64 = 49_152;
/// Tile edge of the generated GEMM (blocks are `TILE x TILE` threads).
pub(crate) const TILE: u32 = 16;
/// Largest spatial rank of Conv and pooling on GPU.
pub(crate) const MAX_SPATIAL: usize = 8;

/// Definitions every generated source shares, after [`saggar_device::builtin::PRELUDE`]: the macros
/// and device functions the kernels of every family call (`prelude.cuh`).
pub(crate) const PRELUDE: &str = strip_header(include_str!("prelude.cuh"));

/// The signature of a generated kernel with `pointers` tensor parameters after the meta table.
pub(crate) fn kernel_signature(name: &str, pointers: usize) -> KernelSignature {
    KernelSignature { name: name.to_string(), params: vec![ParamKind::Ptr; pointers + 1] }
}

/// A generated kernel kind. Implemented in the op family that launches it, beside its `.cu`
/// template; the lowering names the kernel from its text and emits each distinct text once.
/// Fusions recognise the launches they absorb through [`Any`] ([`GpuLaunch::kernel_as`]).
pub trait GpuKernel: Any + fmt::Debug + Send + Sync {
    /// The name's prefix: a kernel is named `onnx_<prefix>_<hash of its text>`.
    fn prefix(&self) -> &'static str;

    /// The parameter list and body of the kernel: everything after its name.
    fn source(&self) -> String;
}

/// A kernel name from its text: identical kernels (the same kind, the same fused chain) share one.
pub(crate) fn kernel_name(prefix: &str, text: &str) -> String {
    let hex = blake3::hash(text.as_bytes()).to_hex();
    format!("onnx_{prefix}_{}", &hex[..16])
}

/// `(name, C++ definition)` of a kind's kernel.
pub(crate) fn kernel_definition(kernel: &dyn GpuKernel) -> (String, String) {
    let body = kernel.source();
    let name = kernel_name(kernel.prefix(), &body);
    (name.clone(), format!("SAGGAR_GLOBAL void {name}{body}"))
}

/// Element type and concrete dimensions of one kernel operand.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Operand {
    /// Element type.
    pub dtype: DType,
    /// Extents.
    pub dims: Vec<usize>,
}

impl Operand {
    /// Bytes of the tensor, `None` on overflow.
    pub fn bytes(&self) -> Option<usize> {
        checked_numel(&self.dims)?.checked_mul(self.dtype.size_bytes())
    }
}

/// The C++ spelling of an element type on the device (`None`: not supported on GPU).
pub fn ctype(d: DType) -> Option<&'static str> {
    match d {
        DType::F32 => Some("float"),
        DType::F64 => Some("double"),
        DType::I8 => Some("signed char"),
        DType::U8 => Some("unsigned char"),
        DType::I16 => Some("short"),
        DType::U16 => Some("unsigned short"),
        DType::I32 => Some("int"),
        DType::U32 => Some("unsigned int"),
        DType::I64 => Some("long long"),
        DType::U64 => Some("unsigned long long"),
        DType::Bool => Some("unsigned char"),
        // Bits; only Cast reads or writes them, through the prelude's conversions.
        DType::F16 | DType::BF16 => Some("unsigned short"),
        _ => None,
    }
}

/// An expression reading the element `e` of a tensor of type `d` as the `f32` a float kernel computes
/// with: half precisions are converted (exactly), `f32` is read as it is.
pub(crate) fn load_f32(d: DType, e: &str) -> String {
    match d {
        DType::F16 => format!("onnx_f16_to_f32({e})"),
        DType::BF16 => format!("onnx_bf16_to_f32({e})"),
        _ => e.to_string(),
    }
}

/// An expression turning the `f32` value `e` into an element of type `d`: half precisions are rounded
/// to nearest even, `f32` stays as it is.
pub(crate) fn store_f32(d: DType, e: &str) -> String {
    match d {
        DType::F16 => format!("onnx_f32_to_f16({e})"),
        DType::BF16 => format!("onnx_f32_to_bf16({e})"),
        _ => e.to_string(),
    }
}

/// How many threads a launch needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// One thread per element (grid-stride loops in the kernel).
    Elements(u64),
    /// One block per row.
    Rows(u64),
    /// A group of threads per row: a warp each and several rows a block when there are many rows
    /// of `cols`, a block each when there are few (sized by `plan::launch::launch_config`).
    RowGroups { rows: u64, cols: u64 },
    /// A thread per column of a row, several rows a block: `threadIdx.x` along the `cols` of a row
    /// (looping past the block's width), `threadIdx.y` and the blocks along the `rows`.
    Columns { rows: u64, cols: u64 },
    /// GEMM tiles: `m` rows, `n` columns, `batch` matrices.
    Tiles { m: u64, n: u64, batch: u64 },
}

/// A kernel parameter of a launch: input or output slot of the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    In(usize),
    Out(usize),
}

/// One launch of a node.
#[derive(Debug, Clone)]
pub struct GpuLaunch {
    /// The kernel kind, which owns its C++ text.
    pub kernel: Arc<dyn GpuKernel>,
    /// The kind's `meta` table, laid out as its `.cu` file says.
    pub meta: Vec<i64>,
    pub work: Work,
    /// Pointer parameters after the meta table, in order.
    pub slots: Vec<Slot>,
}

impl GpuLaunch {
    /// A launch of `kernel`.
    pub fn new(kernel: impl GpuKernel, meta: Vec<i64>, work: Work, slots: Vec<Slot>) -> GpuLaunch {
        GpuLaunch { kernel: Arc::new(kernel), meta, work, slots }
    }

    /// The launch's kernel as the kind `K`, when it is one (for fusions that look inside a launch).
    pub fn kernel_as<K: GpuKernel>(&self) -> Option<&K> {
        let kernel: &dyn Any = &*self.kernel;
        kernel.downcast_ref::<K>()
    }
}

impl PartialEq for GpuLaunch {
    fn eq(&self, other: &GpuLaunch) -> bool {
        self.kernel.prefix() == other.kernel.prefix()
            && self.kernel.source() == other.kernel.source()
            && (&self.meta, self.work, &self.slots) == (&other.meta, other.work, &other.slots)
    }
}

impl Eq for GpuLaunch {}

/// What a node is on the GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuNode {
    /// A C++ expression of the inputs `$0`, `$1`, ... (each of its operand's element type, read at the
    /// broadcast position), giving output 0's element type. The lowering fuses these.
    Elementwise(String),
    /// Launches of generated kernel kinds.
    Launches(Vec<GpuLaunch>),
}

/// The concrete operands of a node being lowered.
#[derive(Debug, Clone, Copy)]
pub struct GpuCtx<'a> {
    pub inputs: &'a [Option<Operand>],
    pub outputs: &'a [Operand],
    /// The inputs as inference sees them (constant values included).
    pub infer: &'a InferInputs<'a>,
}

impl GpuCtx<'_> {
    /// Input `i`, which must be present.
    pub fn input(&self, i: usize) -> Result<&Operand, OpError> {
        self.inputs.get(i).and_then(Option::as_ref).ok_or_else(|| OpError::eval(format!("input {i} is required")))
    }

    /// Output `i`.
    pub fn output(&self, i: usize) -> Result<&Operand, OpError> {
        self.outputs.get(i).ok_or_else(|| OpError::eval(format!("output {i} is missing")))
    }
}

/// `i64` of an extent.
pub fn ext(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Row-major strides of `dims`, in elements.
pub fn contiguous(dims: &[usize]) -> Vec<i64> {
    let mut s = vec![0i64; dims.len()];
    let mut acc = 1i64;
    for d in (0..dims.len()).rev() {
        s[d] = acc;
        acc = acc.saturating_mul(ext(dims[d]));
    }
    s
}

/// Strides reading `dims` (right-aligned) at each position of a shape of `rank` it broadcasts to:
/// 0 along broadcast axes.
pub fn broadcast(dims: &[usize], out: &[usize]) -> Vec<i64> {
    let own = contiguous(dims);
    let lead = out.len() - dims.len().min(out.len());
    (0..out.len()).map(|d| if d < lead || dims[d - lead] == 1 && out[d] != 1 { 0 } else { own[d - lead] }).collect()
}

/// How a fused kernel finds an input's element for output element `i`, when the input broadcasts
/// against `out` in one of the common ways: `[mode, m, c]` with mode 1 the same shape (`i`), 2 a
/// trailing block (a bias: `i % m`), 3 a single value (`0`), 4 a leading block repeated along the
/// trailing axes (`i / m`), 5 a middle block repeated along the leading and the trailing axes (a
/// per-channel value over NCHW: `(i / m) % c`), and 0 anything else (the kernel walks the dimensions
/// with the broadcast strides). For modes 2, 4 and 5, `c` is the block's element count, so that each
/// reads `(i / inner) % c` with `inner` 1 for mode 2 and `m` for the others; it is 0 for the rest.
/// The kernel branches on the mode, the same for every thread.
pub fn broadcast_mode(dims: &[usize], out: &[usize]) -> [i64; 3] {
    let strides = broadcast(dims, out);
    let own = contiguous(out);
    let rank = out.len();
    let inner = |k: usize| numel(&out[k..]) as i64;
    // The input is the block of axes `j..k` of the output, broadcast along the others.
    let block = |j: usize, k: usize| {
        (0..rank)
            .filter(|&d| out[d] != 1)
            .all(|d| Some(strides[d]) == if (j..k).contains(&d) { own[d].checked_div(inner(k)) } else { Some(0) })
    };
    let count = |j: usize, k: usize| numel(&out[j..k]) as i64;
    if block(0, rank) {
        [1, 0, 0]
    } else if numel(dims) == 1 {
        [3, 0, 0]
    } else if let Some(j) = (1..rank).find(|&j| block(j, rank)) {
        [2, inner(j), inner(j)]
    } else if let Some(k) = (1..rank).find(|&k| block(0, k)) {
        [4, inner(k), count(0, k)]
    } else if let Some((j, k)) = (1..rank).flat_map(|j| (j + 1..rank).map(move |k| (j, k))).find(|&(j, k)| block(j, k))
    {
        [5, inner(k), count(j, k)]
    } else {
        [0, 0, 0]
    }
}

/// Element count of `dims` (saturating: inference refuses shapes whose bytes overflow, so a
/// saturated count never reaches a launch).
pub fn numel(dims: &[usize]) -> u64 {
    dims.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant of every kernel kind the families define.
    fn every_kind() -> Vec<Box<dyn GpuKernel>> {
        use crate::ops::conv::gpu::{BatchNormKernel, ConvKernel, ConvTransposeKernel, Im2colKernel};
        use crate::ops::data_movement::gpu::CopyKernel;
        use crate::ops::gather::gpu::{GatherForm, GatherKernel};
        use crate::ops::linalg::gpu::GemmKernel;
        use crate::ops::norm::gpu::{
            AxesNorm, AxesNormKernel, GroupNormKernel, LayerNormKernel, NormStores, SoftmaxKernel,
        };
        use crate::ops::pool::gpu::{GlobalMode, GlobalPoolKernel, LrnKernel, MaxUnpoolKernel, PoolKernel, PoolMode};
        use crate::ops::reduce::ReduceOp;
        use crate::ops::reduce::gpu::{ArgKernel, ReduceKernel};
        use crate::ops::shapes::gpu::ConcatKernel;
        let mut kinds: Vec<Box<dyn GpuKernel>> = vec![Box::new(BatchNormKernel { epsilon_bits: 1 })];
        for (bytes, planar) in [(2, false), (2, true), (4, false), (4, true)] {
            kinds.push(Box::new(Im2colKernel { bytes, planar }));
        }
        kinds.extend([1, 2, 4, 8].map(|b| Box::new(CopyKernel { elem_bytes: b }) as Box<dyn GpuKernel>));
        kinds.extend([1, 3].map(|n| Box::new(ConcatKernel { elem_bytes: 4, inputs: n }) as Box<dyn GpuKernel>));
        for form in [GatherForm::Axis, GatherForm::Elements, GatherForm::Nd] {
            for index in [DType::I32, DType::I64] {
                kinds.push(Box::new(GatherKernel { form, elem_bytes: 4, index }));
            }
        }
        for bias in [false, true] {
            for plane in [false, true] {
                kinds.push(Box::new(ConvKernel { bias, inputs: DType::F32, plane }));
                kinds.push(Box::new(ConvKernel { bias, inputs: DType::F16, plane }));
            }
            kinds.push(Box::new(ConvTransposeKernel { bias }));
            kinds.push(Box::new(GemmKernel::f32(2, 3, bias)));
            kinds.push(Box::new(GemmKernel::f32(2, 3, bias).with_types(DType::F16, DType::F32)));
            kinds.push(Box::new(GemmKernel::f32(2, 3, bias).with_types(DType::BF16, DType::BF16)));
            for (stats, channels) in [(0, false), (1, false), (2, false), (0, true)] {
                let stores = NormStores::F32;
                kinds.push(Box::new(LayerNormKernel { epsilon_bits: 5, bias, stats, channels, stores }));
            }
            for (f32, half) in [(true, DType::F16), (false, DType::BF16)] {
                let stores = NormStores { f32, half: Some(half) };
                kinds.push(Box::new(LayerNormKernel { epsilon_bits: 5, bias, stats: 0, channels: false, stores }));
            }
        }
        for flag in [false, true] {
            kinds.push(Box::new(SoftmaxKernel { log: flag }));
            kinds.push(Box::new(MaxUnpoolKernel { scatter: flag }));
            for last in [false, true] {
                kinds.push(Box::new(ArgKernel { max: flag, last, dtype: DType::F32 }));
            }
        }
        kinds.push(Box::new(LrnKernel { scale_bits: 1, beta_bits: 2, bias_bits: 3 }));
        for mode in [PoolMode::Max, PoolMode::MaxWithIndices, PoolMode::Average, PoolMode::Lp] {
            kinds.push(Box::new(PoolKernel { mode, dtype: DType::F32, channels_last: false }));
            if matches!(mode, PoolMode::Max | PoolMode::MaxWithIndices) {
                kinds.push(Box::new(PoolKernel { mode, dtype: DType::U8, channels_last: false }));
                kinds.push(Box::new(PoolKernel { mode, dtype: DType::I8, channels_last: false }));
            }
            if matches!(mode, PoolMode::Max | PoolMode::Average) {
                kinds.push(Box::new(PoolKernel { mode, dtype: DType::F32, channels_last: true }));
            }
        }
        for unit in [1, 2, 4, 8, 16] {
            kinds.push(Box::new(crate::ops::conv::im2col_nhwc::Im2colNhwcKernel { unit }));
        }
        for mode in [GlobalMode::Average, GlobalMode::Max, GlobalMode::Lp] {
            kinds.push(Box::new(GlobalPoolKernel { mode }));
        }
        kinds.push(Box::new(GroupNormKernel { epsilon_bits: 5 }));
        for norm in [AxesNorm::L1, AxesNorm::L2, AxesNorm::MeanVariance] {
            kinds.push(Box::new(AxesNormKernel { norm }));
        }
        use ReduceOp::*;
        for op in [Sum, Mean, Max, Min, Prod, L1, L2, SumSquare, LogSum, LogSumExp] {
            kinds.push(Box::new(ReduceKernel { op, dtype: DType::F32 }));
            kinds.push(Box::new(ReduceKernel { op, dtype: DType::F64 }));
            if !matches!(op, L2 | LogSum | LogSumExp) {
                for dtype in
                    [DType::I8, DType::U8, DType::I16, DType::U16, DType::I32, DType::U32, DType::I64, DType::U64]
                {
                    kinds.push(Box::new(ReduceKernel { op, dtype }));
                }
            }
        }
        kinds
    }

    /// Every variant renders with every placeholder filled, starts with its parameter list, and has a
    /// name of its own (the same name would make two kernels of different text collide).
    #[test]
    fn every_kernel_kind_renders_completely_and_names_its_text() {
        let mut names = std::collections::HashMap::new();
        for kind in every_kind() {
            let (name, definition) = kernel_definition(&*kind);
            let body = kind.source();
            assert!(!body.contains('@'), "{kind:?} leaves a placeholder: {body}");
            assert!(body.starts_with("(const onnx_i64* meta"), "{kind:?}: {body}");
            assert!(definition.starts_with(&format!("SAGGAR_GLOBAL void {name}(")), "{definition}");
            assert!(name.starts_with(&format!("onnx_{}_", kind.prefix())));
            if let Some(other) = names.insert(name.clone(), body.clone()) {
                assert_eq!(other, body, "{name} names two texts");
            }
        }
        assert_eq!(names.len(), every_kind().len(), "each variant has a text of its own");
    }

    #[test]
    fn a_launch_shows_its_kind_to_fusions() {
        use crate::ops::norm::gpu::{LayerNormKernel, SoftmaxKernel};
        let launch = GpuLaunch::new(SoftmaxKernel { log: true }, vec![1, 2, 3], Work::Rows(1), vec![Slot::In(0)]);
        assert_eq!(launch.kernel_as::<SoftmaxKernel>(), Some(&SoftmaxKernel { log: true }));
        assert_eq!(launch.kernel_as::<LayerNormKernel>(), None);
        let other = GpuLaunch::new(SoftmaxKernel { log: false }, vec![1, 2, 3], Work::Rows(1), vec![Slot::In(0)]);
        assert_ne!(launch, other, "launches of different text differ");
        assert_eq!(launch, launch.clone());
    }

    #[test]
    fn broadcast_modes_name_the_common_patterns_and_index_like_the_strides() {
        let out = [2, 3, 4];
        assert_eq!(broadcast_mode(&[2, 3, 4], &out), [1, 0, 0], "same shape");
        assert_eq!(broadcast_mode(&[1, 3, 4], &[1, 3, 4]), [1, 0, 0], "unit axes do not matter");
        assert_eq!(broadcast_mode(&[1], &out), [3, 0, 0], "scalar");
        assert_eq!(broadcast_mode(&[4], &out), [2, 4, 4], "bias");
        assert_eq!(broadcast_mode(&[3, 4], &out), [2, 12, 12], "trailing block");
        assert_eq!(broadcast_mode(&[2, 3, 1], &out), [4, 4, 6], "leading block");
        assert_eq!(broadcast_mode(&[2, 1, 1], &out), [4, 12, 2], "leading block");
        assert_eq!(broadcast_mode(&[3, 1], &out), [5, 4, 3], "a middle axis");
        assert_eq!(broadcast_mode(&[5, 1, 1], &[2, 5, 7, 7]), [5, 49, 5], "per channel over NCHW");
        assert_eq!(broadcast_mode(&[1, 5, 1, 1], &[1, 5, 7, 7]), [4, 49, 5], "per channel of one image");
        assert_eq!(broadcast_mode(&[3, 4, 1], &[2, 3, 4, 5]), [5, 5, 12], "a block of middle axes");
        assert_eq!(broadcast_mode(&[2, 1, 4], &out), [0, 0, 0], "a broadcast middle axis: general");
        assert_eq!(broadcast_mode(&[3, 1], &[2, 3, 0]), [0, 0, 0], "nothing to read: general");
        // Every mode reads what the broadcast strides read, at every output element.
        let cases: [(&[usize], &[usize]); 12] = [
            (&[2, 3, 4], &out),
            (&[1], &out),
            (&[4], &out),
            (&[3, 4], &out),
            (&[2, 3, 1], &out),
            (&[2, 1, 1], &out),
            (&[1, 1, 4], &out),
            (&[3, 1], &out),
            (&[5, 1, 1], &[2, 5, 7, 7]),
            (&[3, 4, 1], &[2, 3, 4, 5]),
            (&[3, 1, 1], &[2, 3, 1, 2]),
            (&[1, 3, 1], &[2, 1, 3, 2]),
        ];
        for (dims, out) in cases {
            let strides = broadcast(dims, out);
            let [mode, m, c] = broadcast_mode(dims, out);
            for i in 0..numel(out) as i64 {
                let (mut rem, mut by_strides) = (i, 0);
                for d in (0..out.len()).rev() {
                    by_strides += rem % out[d] as i64 * strides[d];
                    rem /= out[d] as i64;
                }
                let by_mode = match mode {
                    1 => i,
                    2 => i % m,
                    3 => 0,
                    4 => i / m,
                    5 => i / m % c,
                    _ => continue,
                };
                assert_eq!(by_mode, by_strides, "{dims:?} at {i}");
                if matches!(mode, 2 | 4 | 5) {
                    let inner = if mode == 2 { 1 } else { m };
                    assert_eq!(i / inner % c, by_strides, "{dims:?} at {i} as a block");
                }
            }
        }
    }

    #[test]
    fn broadcast_strides_zero_the_broadcast_axes() {
        assert_eq!(contiguous(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(broadcast(&[3, 1], &[2, 3, 4]), vec![0, 1, 0]);
        assert_eq!(broadcast(&[4], &[2, 3, 4]), vec![0, 0, 1]);
        assert_eq!(broadcast(&[1, 1], &[1, 1]), vec![1, 1]);
    }
}
