//! Convolutions as GEMMs: on a specialised graph, every Conv with one group becomes an
//! [`Im2col`] patch matrix (skipped for 1x1 stride-1 unpadded kernels, whose input already is
//! that matrix) times the weights viewed as `[M, C * taps]`, one product for all images (the
//! weights broadcast, batch stride 0), which the lowering runs as a BLAS-Lt matmul step. The result
//! is viewed as `[N, M, spatial...]`; the bias, per output channel (a row of each product, which
//! the BLAS column-bias epilogue cannot add), becomes an `Add` of the bias viewed as `[M, 1, ...]`,
//! which the elementwise fusion merges with the activations and residual adds after it.
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
use crate::ops::conv::{Axis, Window};
use crate::ops::evaluate::evaluate;
use crate::ops::{self, Attribute, Attributes, NodeCtx, Op, ValueType};
use crate::tensor::{Tensor, TensorData};

/// How Conv is lowered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ConvEngine {
    /// One group convolutions as im2col plus a GEMM (a BLAS-Lt matmul where the GEMM engine is
    /// BLAS-Lt), the rest as the direct kernel.
    #[default]
    Im2col,
    /// Always the generated direct-convolution kernel (the baseline im2col is measured against).
    Direct,
}

impl ConvEngine {
    /// The name used in options and cache keys.
    pub const fn name(self) -> &'static str {
        match self {
            ConvEngine::Im2col => "im2col",
            ConvEngine::Direct => "direct",
        }
    }
}

/// Rewrites every one-group Conv of `graph` (f32, or half input and weights writing f32) (all extents
/// known) as im2col and a GEMM, and every f32 ConvTranspose whose stride is its square kernel as a
/// GEMM and a pixel shuffle. See the module docs. A node whose geometry does not resolve is left to
/// the direct kernel.
pub(crate) fn convs_as_gemms(graph: &mut Graph) {
    let mut index = 0;
    while index < graph.nodes.len() {
        match rewrite(graph, index).or_else(|| rewrite_transposed(graph, index)) {
            Some(nodes) => {
                let count = nodes.len();
                graph.nodes.splice(index..=index, nodes);
                index += count;
            }
            None => index += 1,
        }
    }
}

/// The nodes replacing Conv node `index`, or `None` to keep it.
fn rewrite(graph: &mut Graph, index: usize) -> Option<Vec<Node>> {
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
    let (name, opset) = (node.name.clone(), graph.opset);
    let (n, c, m) = (xd[0], xd[1], wd[0]);
    let rows = c.checked_mul(wd[2..].iter().product())?;
    let plane: usize = axes.iter().map(|a| a.output).product();
    let mut b = Builder { graph, name, opset, nodes: Vec::new() };
    let pointwise = axes.iter().all(|a: &Axis| a.kernel == 1 && a.stride == 1 && a.pad_begin == 0 && a.pad_end == 0);
    let col = if pointwise {
        b.reshape(x, element, &[n, rows, plane], None)?
    } else {
        let col = b.value("col", element, &[n, rows, plane]);
        b.push("Im2col", Arc::new(Im2col { axes }), vec![Some(x)], col);
        col
    };
    let weights = b.reshape(w, element, &[m, rows], None)?;
    let product = b.value("product", DType::F32, &[n, m, plane]);
    let matmul = match element {
        DType::F32 => b.op("MatMul", 2)?,
        _ => ops::linalg::half_product_writing_f32("MatMul", &Attributes::default()).ok()?,
    };
    b.push("MatMul", matmul, vec![Some(weights), Some(col)], product);
    match bias {
        None => {
            b.reshape(product, DType::F32, &yd, Some(out))?;
        }
        Some(bias) => {
            let y = b.reshape(product, DType::F32, &yd, None)?;
            let mut channel = vec![1; yd.len() - 1];
            channel[0] = m;
            let bias = b.reshape(bias, DType::F32, &channel, None)?;
            let add = b.op("Add", 2)?;
            b.push("Add", add, vec![Some(y), Some(bias)], out);
        }
    }
    Some(b.nodes)
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
    let transposed = b.transposed_weights(w, c, rows)?;
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

    /// The f32 weights `w` (`[C, M, k, k]`) as `[M k k, C]`: transposed here once when they are
    /// constant, else by a Transpose node each run.
    fn transposed_weights(&mut self, w: ValueId, c: usize, rows: usize) -> Option<ValueId> {
        let transpose = self.op("Transpose", 1)?;
        if let Some(constant) = self.graph.value(w).constant.clone() {
            let matrix = Tensor::clone(&constant).reshaped(vec![c, rows]).ok()?;
            let packed = evaluate(transpose.as_ref(), &[Some(&matrix)], matrix.len()).ok()?.pop()?;
            let name = format!("{}:weights_t", self.name);
            let ty = Some(ValueType::fixed(DType::F32, &[rows, c]));
            return Some(self.graph.add_value(Value { name, ty, constant: Some(Arc::new(packed)), dims_value: None }));
        }
        let weights = self.reshape(w, DType::F32, &[c, rows], None)?;
        let transposed = self.value("weights_t", DType::F32, &[rows, c]);
        self.push("Transpose", transpose, vec![Some(weights)], transposed);
        Some(transposed)
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
