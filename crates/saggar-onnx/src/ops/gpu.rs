//! What an op compiles to on CUDA and HIP: [`Op::gpu`](crate::ops::Op::gpu) describes a node as an
//! elementwise expression (fused with its neighbours by the lowering) or as launches of generated
//! kernel kinds whose C++ depends only on the [`GpuKind`]; every extent, stride and offset travels
//! in the launch's `meta` table (an `i64` array in device memory), so one kernel serves every shape.

use saggar_shape::DType;

use crate::ops::{InferInputs, OpError};
use crate::tensor::checked_numel;

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
        DType::I64 => Some("long long"),
        DType::I32 => Some("int"),
        DType::Bool => Some("unsigned char"),
        // Bits; only Cast reads or writes them, through the prelude's conversions.
        DType::F16 | DType::BF16 => Some("unsigned short"),
        _ => None,
    }
}

/// A kernel kind: its C++ text is a function of this value alone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GpuKind {
    /// `out[o] = in[in_base + Σ c_d in_stride_d]` at `out_base + Σ c_d out_stride_d`, elements of
    /// `elem_bytes`. Meta: `rank, n, in_base, out_base, dims[rank], in_strides[rank], out_strides[rank]`.
    Copy { elem_bytes: u8 },
    /// Concat of `inputs` contiguous tensors along the middle axis of `[outer, len_p, inner]` into
    /// `[outer, Σ len_p, inner]`, one thread per output element: one launch whatever the input
    /// count. Meta: `outer, inner, total_len, offsets[inputs + 1]` (where each input starts along
    /// the axis).
    Concat { elem_bytes: u8, inputs: u16 },
    /// `out[o, j, i] = data[o, idx[j], i]`. Meta: `outer, axis_len, inner, n_idx`.
    Gather { elem_bytes: u8, index: DType },
    /// GatherElements. Meta: `rank, n, axis, axis_len, dims[rank], data_strides[rank]`.
    GatherElements { elem_bytes: u8, index: DType },
    /// GatherND. Meta: `batch, m, k, slice, data_batch_stride, dims[k], strides[k]`.
    GatherNd { elem_bytes: u8, index: DType },
    /// `C[b] = alpha op(A[b]) op(B[b]) + beta bias`, tiled in shared memory. Meta: `M, N, K, brank,
    /// a_rs, a_cs, b_rs, b_cs, bias_rs, bias_cs, bdims[brank], a_bstride[brank], b_bstride[brank]`.
    Gemm { alpha_bits: u32, beta_bits: u32, bias: bool },
    /// Softmax / LogSoftmax over the middle axis of `[outer, len, inner]`, one block per row.
    /// Meta: `outer, len, inner`.
    Softmax { log: bool },
    /// LayerNormalization over the trailing `cols`, one block per row, with `stats` of the Mean and
    /// InvStdDev outputs (0, 1 or 2); with `channels` (InstanceNormalization) scale and bias are
    /// indexed by the row's channel `row % C` instead of the column. Meta: `rows, cols, C`.
    LayerNorm { epsilon_bits: u32, bias: bool, stats: u8, channels: bool },
    /// Pad (`mode` 0 constant, 1 reflect, 2 edge), one thread per output element; the fill value is
    /// the `value` input's first element, else `fill_bits` (an f32 attribute). Meta: `rank, n,
    /// out_dims[rank], in_dims[rank], before[rank], in_strides[rank]`.
    Pad { mode: u8, elem_bytes: u8, from_input: bool, fill_bits: u32 },
    /// A reduction, one block per output element. Meta: `nk, nr, n_out, n_red, kdims[nk],
    /// kstrides[nk], rdims[nr], rstrides[nr]`.
    Reduce { op: ReduceOp },
    /// ArgMax / ArgMin over the middle axis of `[outer, len, inner]`, one thread per output, in
    /// index order (the first extreme, or the last with `last`). Meta: `outer, len, inner`.
    Arg { max: bool, last: bool, dtype: DType },
    /// Per-channel normalisation of `(N, C, plane)`, one thread per element: BatchNormalization
    /// (inference; `a` epsilon; inputs x, scale, bias, mean, var) or LRN (`a` alpha / size, `b` beta,
    /// `c` bias; the window `before`, `after` channels). Meta: `N, C, plane, before, after`.
    ChannelNorm { lrn: bool, a_bits: u32, b_bits: u32, c_bits: u32 },
    /// Direct convolution, one thread per output element. Meta: `s, N, C, M, group, in[s], out[s],
    /// kernel[s], stride[s], pad_begin[s], dilation[s]`.
    Conv { bias: bool },
    /// The im2col patch matrix `[N, C * taps, plane]` of a convolution's input, one thread per
    /// element, padding taps 0. Meta: `s, N, C, in[s], out[s], kernel[s], stride[s], pad_begin[s],
    /// dilation[s]`.
    Im2col,
    /// Max or average pooling, one thread per output element. Meta: `s, N*C, count_include_pad,
    /// in[s], out[s], kernel[s], stride[s], pad_begin[s], pad_end[s], dilation[s]`.
    Pool { max: bool },
}

/// The reductions of [`GpuKind::Reduce`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    SumSquare,
    LogSum,
    LogSumExp,
}

/// How many threads a launch needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// One thread per element (grid-stride loops in the kernel).
    Elements(u64),
    /// One block per row.
    Rows(u64),
    /// A group of threads per row: a warp each and several rows a block when there are many rows
    /// of `cols`, a block each when there are few (sized by `lowering::launch_config`).
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuLaunch {
    pub kind: GpuKind,
    pub meta: Vec<i64>,
    pub work: Work,
    /// Pointer parameters after the meta table, in order.
    pub slots: Vec<Slot>,
}

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
/// against `out` in one of the common ways: `[mode, m]` with mode 1 the same shape (`i`), 2 a
/// trailing block (a bias: `i % m`), 3 a single value (`0`), 4 a leading block repeated along the
/// trailing axes (`i / m`), and 0 anything else (the kernel walks the dimensions with the
/// broadcast strides). The kernel branches on the mode, the same for every thread.
pub fn broadcast_mode(dims: &[usize], out: &[usize]) -> [i64; 2] {
    let strides = broadcast(dims, out);
    let own = contiguous(out);
    let matters = |d: usize| out[d] != 1;
    let inner = |j: usize| numel(&out[j..]) as i64;
    let suffix =
        |j: usize| (0..out.len()).filter(|&d| matters(d)).all(|d| strides[d] == if d < j { 0 } else { own[d] });
    let prefix = |j: usize| {
        (0..out.len()).filter(|&d| matters(d)).all(|d| strides[d] == if d < j { own[d] / inner(j) } else { 0 })
    };
    if suffix(0) {
        [1, 0]
    } else if numel(dims) == 1 {
        [3, 0]
    } else if let Some(j) = (1..out.len()).find(|&j| suffix(j)) {
        [2, inner(j)]
    } else if let Some(j) = (1..out.len()).find(|&j| prefix(j)) {
        [4, inner(j)]
    } else {
        [0, 0]
    }
}

/// Element count of `dims`.
pub fn numel(dims: &[usize]) -> u64 {
    dims.iter().map(|&d| d as u64).product()
}

/// A [`GpuKind::Copy`] launch of `dims` elements with the given bases and strides.
pub fn copy_launch(
    elem_bytes: usize,
    dims: &[usize],
    (input, in_base, in_strides): (Slot, i64, &[i64]),
    (output, out_base, out_strides): (Slot, i64, &[i64]),
) -> GpuLaunch {
    let mut meta = vec![ext(dims.len()), numel(dims) as i64, in_base, out_base];
    meta.extend(dims.iter().map(|&d| ext(d)));
    meta.extend_from_slice(in_strides);
    meta.extend_from_slice(out_strides);
    GpuLaunch {
        kind: GpuKind::Copy { elem_bytes: elem_bytes as u8 },
        meta,
        work: Work::Elements(numel(dims)),
        slots: vec![input, output],
    }
}

/// A copy of input 0 into output 0 of the same element count (a view that must materialise).
pub fn contiguous_copy(ctx: &GpuCtx<'_>) -> Result<GpuNode, OpError> {
    let out = ctx.output(0)?;
    let dims = [numel(&out.dims) as usize];
    Ok(GpuNode::Launches(vec![copy_launch(
        out.dtype.size_bytes(),
        &dims,
        (Slot::In(0), 0, &[1]),
        (Slot::Out(0), 0, &[1]),
    )]))
}

/// A [`GpuKind::Reduce`] launch of input 0 (of `dims`) over the axes `reduced` into output 0.
pub fn reduce_launch(op: ReduceOp, dims: &[usize], reduced: &[usize]) -> GpuNode {
    let own = contiguous(dims);
    let (kept, red): (Vec<usize>, Vec<usize>) = (0..dims.len()).partition(|a| !reduced.contains(a));
    let n_out: u64 = kept.iter().map(|&a| dims[a] as u64).product();
    let n_red: u64 = red.iter().map(|&a| dims[a] as u64).product();
    let mut meta = vec![ext(kept.len()), ext(red.len()), n_out as i64, n_red as i64];
    for axes in [&kept, &red] {
        meta.extend(axes.iter().map(|&a| ext(dims[a])));
        meta.extend(axes.iter().map(|&a| own[a]));
    }
    GpuNode::Launches(vec![GpuLaunch {
        kind: GpuKind::Reduce { op },
        meta,
        work: Work::Rows(n_out),
        slots: vec![Slot::In(0), Slot::Out(0)],
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_modes_name_the_common_patterns_and_index_like_the_strides() {
        let out = [2, 3, 4];
        assert_eq!(broadcast_mode(&[2, 3, 4], &out), [1, 0], "same shape");
        assert_eq!(broadcast_mode(&[1, 3, 4], &[1, 3, 4]), [1, 0], "unit axes do not matter");
        assert_eq!(broadcast_mode(&[1], &out), [3, 0], "scalar");
        assert_eq!(broadcast_mode(&[4], &out), [2, 4], "bias");
        assert_eq!(broadcast_mode(&[3, 4], &out), [2, 12], "trailing block");
        assert_eq!(broadcast_mode(&[2, 3, 1], &out), [4, 4], "leading block");
        assert_eq!(broadcast_mode(&[2, 1, 1], &out), [4, 12], "leading block");
        assert_eq!(broadcast_mode(&[3, 1], &out), [0, 0], "a middle axis: general");
        assert_eq!(broadcast_mode(&[2, 1, 4], &out), [0, 0], "a broadcast middle axis: general");
        // Every mode reads what the broadcast strides read, at every output element.
        for dims in [vec![2, 3, 4], vec![1], vec![4], vec![3, 4], vec![2, 3, 1], vec![2, 1, 1], vec![1, 1, 4]] {
            let strides = broadcast(&dims, &out);
            let [mode, m] = broadcast_mode(&dims, &out);
            for i in 0..numel(&out) as i64 {
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
                    _ => continue,
                };
                assert_eq!(by_mode, by_strides, "{dims:?} at {i}");
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
