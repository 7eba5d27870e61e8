//! Convolutions as GEMMs, on a specialised graph, in one of two layouts ([`ConvEngine`]):
//! - **channels-first**: every Conv with one group becomes an [`Im2col`] patch matrix (skipped for
//!   1x1 stride-1 unpadded kernels, whose input already is that matrix) times the weights viewed as
//!   `[M, C * taps]`, one product for all images (the weights broadcast, batch stride 0), which the
//!   lowering runs as a BLAS-Lt matmul step. The result is viewed as `[N, M, spatial...]`; the bias,
//!   per output channel (a row of each product, which the BLAS column-bias epilogue cannot add),
//!   becomes an `Add` of the bias viewed as `[M, 1, ...]`, which the elementwise fusion merges with
//!   the activations and residual adds after it.
//! - **channels-last** (one or two spatial axes): the input is transposed to `[N, spatial..., C]`,
//!   its [`Im2colNhwc`] patch matrix (none for a pointwise kernel) times the weights laid out
//!   `[taps * C, M]` once at compile time is one tall product over every image, whose bias is over
//!   its columns (the BLAS bias epilogue takes it, with a Relu after it), and the result is
//!   transposed back to `[N, M, spatial...]`. The layout pass ([`super::layout`]) then moves those
//!   transposes through the elementwise ops between convolutions and cancels them pairwise, so a
//!   residual network stays channels-last from its first convolution to its pooling. Small images at
//!   large batches gain most: ResNet-50's last stage multiplies 49-column matrices per image
//!   channels-first, one 1,568-row matrix per batch of 32 channels-last.
//!
//! Views (Reshape) launch nothing, so a biased Conv costs at most an im2col kernel, one matmul and
//! its share of one fused elementwise kernel, and the patch matrix is scratch of the memory plan.
//!
//! A 2-D ConvTranspose whose stride equals its square kernel `k` (no padding, dilation or output
//! padding, one group: a UNet's upsampling) writes each input pixel's `k x k` output block from that
//! pixel alone, so it is one product and a pixel shuffle: the weights `[C, M, k, k]` viewed as
//! `[C, M k k]` and transposed (once at compile when they are constant, else per run), times the image viewed as
//! `[N, C, H W]`, gives `[N, M k k, H, W]`, which `DepthToSpace` in CRD order lays out as
//! `[N, M, H k, W k]`; the bias is the same `Add` as a Conv's.

use std::sync::Arc;

use saggar_shape::DType;

use crate::graph::ir::{Graph, Node, Value, ValueId};
use crate::ops::conv::im2col::Im2col;
use crate::ops::conv::im2col_nhwc::Im2colNhwc;
use crate::ops::conv::{Axis, Window};
use crate::ops::data_movement::{permute, to_channels_first, to_channels_last, transpose_by};
use crate::ops::evaluate::evaluate;
use crate::ops::{self, Attribute, Attributes, NodeCtx, Op, ValueType};
use crate::tensor::{Tensor, TensorData};

/// How Conv is lowered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ConvEngine {
    /// One-group convolutions as GEMMs: channels-last ([`ConvEngine::Nhwc`]) when the layout pass
    /// then cancels most of the transposes that form needs (those left move at most a quarter of
    /// the convolutions' outputs), else channels-first ([`ConvEngine::Im2col`]).
    #[default]
    Auto,
    /// One-group convolutions over one or two spatial axes in channels-last form: the input
    /// transposed to `[N, spatial..., C]`, its channels-last patch matrix (none for 1x1 stride-1
    /// unpadded kernels) times the weights `[taps * C, M]`, one tall product for the whole batch
    /// with the bias over its columns (the BLAS bias epilogue), transposed back. The layout pass
    /// cancels the transposes between consecutive convolutions. The others as [`ConvEngine::Im2col`].
    Nhwc,
    /// One-group convolutions as im2col plus a GEMM per image (a BLAS-Lt matmul where the GEMM
    /// engine is BLAS-Lt), the rest as the direct kernel.
    Im2col,
    /// Always the generated direct-convolution kernel (the baseline im2col is measured against).
    Direct,
}

impl ConvEngine {
    /// Every engine.
    pub const ALL: [ConvEngine; 4] = [ConvEngine::Auto, ConvEngine::Nhwc, ConvEngine::Im2col, ConvEngine::Direct];

    /// The name used in options and cache keys.
    pub const fn name(self) -> &'static str {
        match self {
            ConvEngine::Auto => "auto",
            ConvEngine::Nhwc => "nhwc",
            ConvEngine::Im2col => "im2col",
            ConvEngine::Direct => "direct",
        }
    }
}

impl std::str::FromStr for ConvEngine {
    type Err = String;

    fn from_str(s: &str) -> Result<ConvEngine, String> {
        ConvEngine::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| format!("unknown conv engine `{s}`: use auto, nhwc, im2col or direct"))
    }
}

/// The share of the channels-last convolutions' output elements that the transposes left after the
/// layout pass may move, at most, for [`ConvEngine::Auto`] to keep the channels-last form: above
/// it (a network whose convolutions alternate with ops the pass cannot move a transpose through,
/// such as depthwise convolutions) the transposes would cost more than the tall products save.
const AUTO_TRANSPOSE_SHARE: u64 = 4;

/// The channel count a channels-last patch matrix is padded to a multiple of.
const CHANNEL_MULTIPLE: usize = 4;

/// Rewrites the convolutions of `graph` as GEMMs by `engine` (nothing for [`ConvEngine::Direct`]).
/// Every f32 ConvTranspose whose stride is its square kernel becomes a GEMM and a pixel shuffle
/// under every engine but `Direct`. See the module docs.
pub(crate) fn convs_as_gemms(graph: &mut Graph, engine: ConvEngine) {
    match engine {
        ConvEngine::Direct => {}
        ConvEngine::Im2col => {
            rewrite_all(graph, Layout::ChannelsFirst);
        }
        ConvEngine::Nhwc => {
            rewrite_all(graph, Layout::ChannelsLast);
            super::layout::sink_transposes(graph);
        }
        ConvEngine::Auto => {
            let mut last = graph.clone();
            let before = transposed_elements(&last);
            let convs = rewrite_all(&mut last, Layout::ChannelsLast);
            if convs > 0 {
                super::layout::sink_transposes(&mut last);
                let added = transposed_elements(&last).saturating_sub(before);
                if added.saturating_mul(AUTO_TRANSPOSE_SHARE) <= convs {
                    *graph = last;
                    return;
                }
            }
            rewrite_all(graph, Layout::ChannelsFirst);
        }
    }
}

/// The layout a convolution's product works in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    ChannelsFirst,
    ChannelsLast,
}

/// Rewrites every convolution it can in `layout`; returns the output elements of those rewritten
/// channels-last.
fn rewrite_all(graph: &mut Graph, layout: Layout) -> u64 {
    let mut index = 0;
    let mut last_elements = 0u64;
    while index < graph.nodes.len() {
        let nodes = match ConvGeometry::parse(graph, index) {
            Some(c) if layout == Layout::ChannelsLast && c.axes.len() <= 2 => {
                let elements = crate::ops::gpu::numel(&c.yd);
                match c.clone().channels_last(graph) {
                    Some(nodes) => {
                        last_elements = last_elements.saturating_add(elements);
                        Some(nodes)
                    }
                    None => c.channels_first(graph),
                }
            }
            Some(c) => c.channels_first(graph),
            None => rewrite_transposed(graph, index),
        };
        match nodes {
            Some(nodes) => {
                let count = nodes.len();
                graph.nodes.splice(index..=index, nodes);
                index += count;
            }
            None => index += 1,
        }
    }
    last_elements
}

/// Elements all the Transpose nodes of `graph` move.
fn transposed_elements(graph: &Graph) -> u64 {
    let dims = |n: &Node| graph.ty(n.outputs[0]).and_then(ValueType::fixed_dims);
    graph.nodes.iter().filter(|n| n.op_type == "Transpose").filter_map(dims).map(|d| crate::ops::gpu::numel(&d)).sum()
}

/// A one-group Conv the rewrite takes: f32 input and weights, or half ones (the precision pass's
/// Conv writing f32), every extent known.
#[derive(Debug, Clone)]
struct ConvGeometry {
    name: String,
    x: ValueId,
    w: ValueId,
    bias: Option<ValueId>,
    out: ValueId,
    element: DType,
    xd: Vec<usize>,
    wd: Vec<usize>,
    yd: Vec<usize>,
    axes: Vec<Axis>,
}

impl ConvGeometry {
    /// Node `index` when it is such a Conv.
    fn parse(graph: &Graph, index: usize) -> Option<ConvGeometry> {
        let node = &graph.nodes[index];
        if node.op_type != "Conv" || node.outputs.len() != 1 {
            return None;
        }
        if matches!(node.attrs.get("group"), Some(Attribute::Int(g)) if *g != 1) {
            return None;
        }
        let (x, w) = (node.inputs.first().copied().flatten()?, node.inputs.get(1).copied().flatten()?);
        let bias = node.inputs.get(2).copied().flatten();
        let out = node.outputs[0];
        // f32 input and weights, or half ones (the precision pass's Conv writing f32).
        let element = graph.ty(x)?.dtype;
        let typed = |id: ValueId, d: DType| graph.ty(id).filter(|t| t.dtype == d).and_then(ValueType::fixed_dims);
        let (xd, wd, yd) = (typed(x, element)?, typed(w, element)?, typed(out, DType::F32)?);
        if ![DType::F32, DType::F16, DType::BF16].contains(&element) {
            return None;
        }
        if xd.len() < 3 || wd.len() != xd.len() || wd[1] != xd[1] || xd.len() - 2 > crate::ops::gpu::MAX_SPATIAL {
            return None;
        }
        let window = Window::parse(&NodeCtx::new(&node.attrs, graph.opset, node.inputs.len(), 1), false).ok()?;
        if !window.kernel.is_empty() && window.kernel != wd[2..] {
            return None;
        }
        let axes = window.resolve(&xd[2..], &wd[2..]).ok()?;
        if yd[..2] != [xd[0], wd[0]] || yd[2..].iter().copied().ne(axes.iter().map(|a| a.output)) {
            return None;
        }
        Some(ConvGeometry { name: node.name.clone(), x, w, bias, out, element, xd, wd, yd, axes })
    }

    fn pointwise(&self) -> bool {
        self.axes.iter().all(|a: &Axis| a.kernel == 1 && a.stride == 1 && a.pad_begin == 0 && a.pad_end == 0)
    }

    fn product_op(&self, b: &Builder<'_>) -> Option<Arc<dyn Op>> {
        match self.element {
            DType::F32 => b.op("MatMul", 2),
            _ => ops::linalg::half_product("MatMul", &Attributes::default(), DType::F32, false).ok(),
        }
    }

    /// The channels-first nodes: `[M, C taps]` weights times each image's im2col matrix.
    fn channels_first(self, graph: &mut Graph) -> Option<Vec<Node>> {
        let (n, c, m, element) = (self.xd[0], self.xd[1], self.wd[0], self.element);
        let rows = c.checked_mul(self.wd[2..].iter().product())?;
        let plane: usize = self.axes.iter().map(|a| a.output).product();
        let opset = graph.opset;
        let mut b = Builder { graph, name: self.name.clone(), opset, nodes: Vec::new() };
        let col = if self.pointwise() {
            b.reshape(self.x, element, &[n, rows, plane], None)?
        } else {
            let col = b.value("col", element, &[n, rows, plane]);
            b.push("Im2col", Arc::new(Im2col { axes: self.axes.clone() }), vec![Some(self.x)], col);
            col
        };
        let weights = b.reshape(self.w, element, &[m, rows], None)?;
        let product = b.value("product", DType::F32, &[n, m, plane]);
        let matmul = self.product_op(&b)?;
        b.push("MatMul", matmul, vec![Some(weights), Some(col)], product);
        match self.bias {
            None => {
                b.reshape(product, DType::F32, &self.yd, Some(self.out))?;
            }
            Some(bias) => {
                let y = b.reshape(product, DType::F32, &self.yd, None)?;
                let mut channel = vec![1; self.yd.len() - 1];
                channel[0] = m;
                let bias = b.reshape(bias, DType::F32, &channel, None)?;
                let add = b.op("Add", 2)?;
                b.push("Add", add, vec![Some(y), Some(bias)], self.out);
            }
        }
        Some(b.nodes)
    }

    /// The channels-last nodes (see [`ConvEngine::Nhwc`]).
    fn channels_last(self, graph: &mut Graph) -> Option<Vec<Node>> {
        let (rank, element, m) = (self.xd.len(), self.element, self.wd[0]);
        let (to_last, to_first) = (to_channels_last(rank), to_channels_first(rank));
        let opset = graph.opset;
        let mut b = Builder { graph, name: self.name.clone(), opset, nodes: Vec::new() };
        let mut x_dims = permute(&self.xd, &to_last);
        let mut x_last = b.transpose(self.x, element, &x_dims, &to_last, None)?;
        let (mut w, mut wd) = (self.w, self.wd.clone());
        // A patch matrix of few channels (an image's three colours) has its channels padded with
        // zeros to a multiple of four, and the weights with zero rows to match: the im2col kernel
        // moves 8- or 16-byte units, and the product's rows stay 16-byte aligned for tensor cores.
        let extra = self.xd[1].next_multiple_of(CHANNEL_MULTIPLE) - self.xd[1];
        if !self.pointwise() && extra > 0 && b.graph.value(self.w).constant.is_some() {
            (w, wd) = b.padded_constant(self.w, element, &self.wd, 1, extra)?;
            let mut pads = vec![0i64; 2 * rank];
            pads[2 * rank - 1] = extra as i64;
            x_dims[rank - 1] += extra;
            x_last = b.pad(x_last, element, &x_dims, &pads)?;
        }
        let col = if self.pointwise() {
            x_last
        } else {
            let op = Im2colNhwc { axes: self.axes.clone() };
            let dims = op.output_dims(&x_dims)?;
            let col = b.value("col", element, &dims);
            b.push("Im2colNhwc", Arc::new(op), vec![Some(x_last)], col);
            col
        };
        // [M, C, k...] as [k..., C, M], then [taps C, M].
        let mut weight_perm: Vec<usize> = (2..rank).collect();
        weight_perm.extend([1, 0]);
        let rows = wd[1..].iter().product();
        let weights = b.transposed_constant(w, element, &wd, &weight_perm, &[rows, m])?;
        let mut y_last = permute(&self.yd, &to_last);
        let product = b.value("product", DType::F32, &y_last);
        let matmul = self.product_op(&b)?;
        b.push("MatMul", matmul, vec![Some(col), Some(weights)], product);
        let y_last_id = match self.bias {
            None => product,
            Some(bias) => {
                let biased = b.value("biased", DType::F32, &y_last);
                let add = b.op("Add", 2)?;
                b.push("Add", add, vec![Some(product), Some(bias)], biased);
                biased
            }
        };
        y_last = permute(&y_last, &to_first);
        b.transpose(y_last_id, DType::F32, &y_last, &to_first, Some(self.out))?;
        Some(b.nodes)
    }
}

/// The nodes replacing ConvTranspose node `index` when its stride is its square kernel, or `None`.
fn rewrite_transposed(graph: &mut Graph, index: usize) -> Option<Vec<Node>> {
    let node = &graph.nodes[index];
    if node.op_type != "ConvTranspose" || node.outputs.len() != 1 {
        return None;
    }
    let (x, w) = (node.inputs.first().copied().flatten()?, node.inputs.get(1).copied().flatten()?);
    let bias = node.inputs.get(2).copied().flatten();
    let out = node.outputs[0];
    let typed = |id: ValueId| graph.ty(id).filter(|t| t.dtype == DType::F32).and_then(ValueType::fixed_dims);
    let (xd, wd, yd) = (typed(x)?, typed(w)?, typed(out)?);
    let k = *wd.get(2)?;
    if xd.len() != 4 || wd.len() != 4 || wd[3] != k || wd[0] != xd[1] || k < 2 {
        return None;
    }
    let ints = |name: &str| match node.attrs.get(name) {
        None => Some(None),
        Some(Attribute::Ints(v)) => Some(Some(v.clone())),
        Some(_) => None,
    };
    let k64 = k as i64;
    let all = |name: &str, want: i64| ints(name).is_some_and(|v| v.is_none_or(|v| v.iter().all(|&e| e == want)));
    let no_auto_pad = match node.attrs.get("auto_pad") {
        None => true,
        Some(Attribute::String(p)) => p.as_slice() == b"NOTSET",
        Some(_) => false,
    };
    let one_group = !matches!(node.attrs.get("group"), Some(Attribute::Int(g)) if *g != 1);
    if !(one_group && no_auto_pad && all("pads", 0) && all("dilations", 1) && all("output_padding", 0))
        || ints("strides")?.as_deref() != Some(&[k64, k64][..])
        || ints("kernel_shape")?.is_some_and(|v| v != [k64, k64])
    {
        return None;
    }
    let (n, c, h, wide, m) = (xd[0], xd[1], xd[2], xd[3], wd[1]);
    if yd != [n, m, h * k, wide * k] {
        return None;
    }
    let rows = m.checked_mul(k * k)?;
    let (name, opset) = (node.name.clone(), graph.opset);
    let mut b = Builder { graph, name, opset, nodes: Vec::new() };
    let transposed = b.transposed_constant(w, DType::F32, &[c, rows], &[1, 0], &[rows, c])?;
    let image = b.reshape(x, DType::F32, &[n, c, h * wide], None)?;
    let product = b.value("product", DType::F32, &[n, rows, h * wide]);
    let matmul = b.op("MatMul", 2)?;
    b.push("MatMul", matmul, vec![Some(transposed), Some(image)], product);
    let blocks = b.reshape(product, DType::F32, &[n, rows, h, wide], None)?;
    let shuffle_attrs = Attributes(vec![
        ("blocksize".into(), Attribute::Int(k64)),
        ("mode".into(), Attribute::String(b"CRD".to_vec())),
    ]);
    let shuffle = b.op_with("DepthToSpace", 1, &shuffle_attrs)?;
    let Some(bias) = bias else {
        b.push_with("DepthToSpace", shuffle, shuffle_attrs, vec![Some(blocks)], out);
        return Some(b.nodes);
    };
    let y = b.value("shuffled", DType::F32, &yd);
    b.push_with("DepthToSpace", shuffle, shuffle_attrs, vec![Some(blocks)], y);
    let bias = b.reshape(bias, DType::F32, &[m, 1, 1], None)?;
    let add = b.op("Add", 2)?;
    b.push("Add", add, vec![Some(y), Some(bias)], out);
    Some(b.nodes)
}

/// The nodes replacing one Conv, with the values they define.
struct Builder<'g> {
    graph: &'g mut Graph,
    name: String,
    opset: u32,
    nodes: Vec<Node>,
}

impl Builder<'_> {
    fn value(&mut self, what: &str, dtype: DType, dims: &[usize]) -> ValueId {
        let ty = Some(ValueType::fixed(dtype, dims));
        self.graph.add_value(Value { name: format!("{}:{what}", self.name), ty, constant: None, dims_value: None })
    }

    fn op(&self, op_type: &str, inputs: usize) -> Option<Arc<dyn Op>> {
        self.op_with(op_type, inputs, &Attributes::default())
    }

    fn op_with(&self, op_type: &str, inputs: usize, attrs: &Attributes) -> Option<Arc<dyn Op>> {
        // Today's forms (numpy broadcasting, DepthToSpace's modes) even in a model of opset 6 or older.
        let opset = self.opset.max(ops::MODERN_OPSET).max(11);
        ops::build_op(op_type, opset, attrs, inputs, 1).ok()
    }

    fn push(&mut self, op_type: &str, op: Arc<dyn Op>, inputs: Vec<Option<ValueId>>, out: ValueId) {
        self.push_with(op_type, op, Attributes::default(), inputs, out);
    }

    fn push_with(
        &mut self,
        op_type: &str,
        op: Arc<dyn Op>,
        attrs: Attributes,
        inputs: Vec<Option<ValueId>>,
        out: ValueId,
    ) {
        // Unique per part (a Conv becomes several Reshapes), named after the Conv it came from.
        let name = format!("{}:{}{}", self.name, op_type.to_lowercase(), self.nodes.len());
        let op_type = op_type.to_string();
        self.nodes.push(Node { name, op_type, attrs, inputs, outputs: vec![out], op });
    }

    /// `input` (of type `dtype`) transposed by `perm` to `dims`, into `out` or a new value.
    fn transpose(
        &mut self,
        input: ValueId,
        dtype: DType,
        dims: &[usize],
        perm: &[usize],
        out: Option<ValueId>,
    ) -> Option<ValueId> {
        let (op, attrs) = transpose_by(perm);
        let out = out.unwrap_or_else(|| self.value("transposed", dtype, dims));
        self.push_with("Transpose", op, attrs, vec![Some(input)], out);
        Some(out)
    }

    /// The weights `w` (of type `dtype`) viewed as `dims`, transposed by `perm` and viewed as
    /// `view`: transposed here once when they are constant, else by a Transpose node each run.
    fn transposed_constant(
        &mut self,
        w: ValueId,
        dtype: DType,
        dims: &[usize],
        perm: &[usize],
        view: &[usize],
    ) -> Option<ValueId> {
        if let Some(constant) = self.graph.value(w).constant.clone() {
            let matrix = Tensor::clone(&constant).reshaped(dims.to_vec()).ok()?;
            let (transpose, _) = transpose_by(perm);
            let packed = evaluate(transpose.as_ref(), &[Some(&matrix)], matrix.len()).ok()?.pop()?;
            let packed = packed.reshaped(view.to_vec()).ok()?;
            let name = format!("{}:weights_t", self.name);
            let ty = Some(ValueType::fixed(dtype, view));
            return Some(self.graph.add_value(Value { name, ty, constant: Some(Arc::new(packed)), dims_value: None }));
        }
        let permuted = permute(dims, perm);
        let viewed = self.reshape(w, dtype, dims, None)?;
        let transposed = self.transpose(viewed, dtype, &permuted, perm, None)?;
        self.reshape(transposed, dtype, view, None)
    }

    /// `input` (of type `dtype`) padded with zeros by `pads` (ONNX's begins then ends) to `dims`.
    fn pad(&mut self, input: ValueId, dtype: DType, dims: &[usize], pads: &[i64]) -> Option<ValueId> {
        let tensor = Tensor::new(vec![pads.len()], TensorData::I64(pads.to_vec())).ok()?;
        let ty = Some(ValueType::fixed(DType::I64, &[pads.len()]));
        let name = format!("{}:pads{}", self.name, self.nodes.len());
        let pads = self.graph.add_value(Value { name, ty, constant: Some(Arc::new(tensor)), dims_value: None });
        let out = self.value("padded", dtype, dims);
        let op = self.op("Pad", 2)?;
        self.push("Pad", op, vec![Some(input), Some(pads)], out);
        Some(out)
    }

    /// The constant `w` (of type `dtype` and extents `dims`) with `extra` zeros appended along
    /// `axis`, as a new constant, with its extents.
    fn padded_constant(
        &mut self,
        w: ValueId,
        dtype: DType,
        dims: &[usize],
        axis: usize,
        extra: usize,
    ) -> Option<(ValueId, Vec<usize>)> {
        let constant = self.graph.value(w).constant.clone()?;
        let mut pads = vec![0i64; 2 * dims.len()];
        pads[dims.len() + axis] = extra as i64;
        let pads = Tensor::new(vec![pads.len()], TensorData::I64(pads)).ok()?;
        let op = self.op("Pad", 2)?;
        let mut padded_dims = dims.to_vec();
        padded_dims[axis] += extra;
        let limit = padded_dims.iter().product();
        let padded = evaluate(op.as_ref(), &[Some(&constant), Some(&pads)], limit).ok()?.pop()?;
        let name = format!("{}:weights_padded", self.name);
        let ty = Some(ValueType::fixed(dtype, &padded_dims));
        let id = self.graph.add_value(Value { name, ty, constant: Some(Arc::new(padded)), dims_value: None });
        Some((id, padded_dims))
    }

    /// `input` (of type `dtype`) viewed as `dims`, into `out` or a new value.
    fn reshape(&mut self, input: ValueId, dtype: DType, dims: &[usize], out: Option<ValueId>) -> Option<ValueId> {
        let shape: Vec<i64> = dims.iter().map(|&d| i64::try_from(d).ok()).collect::<Option<_>>()?;
        let tensor = Tensor::new(vec![shape.len()], TensorData::I64(shape)).ok()?;
        let ty = Some(ValueType::fixed(DType::I64, &[dims.len()]));
        let name = format!("{}:shape{}", self.name, self.nodes.len());
        let shape = self.graph.add_value(Value { name, ty, constant: Some(Arc::new(tensor)), dims_value: None });
        let out = out.unwrap_or_else(|| self.value("view", dtype, dims));
        let op = self.op("Reshape", 2)?;
        self.push("Reshape", op, vec![Some(input), Some(shape)], out);
        Some(out)
    }
}
