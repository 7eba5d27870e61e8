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

use std::sync::Arc;

use saggar_shape::DType;

use crate::graph::ir::{Graph, Node, Value, ValueId};
use crate::ops::conv::im2col::Im2col;
use crate::ops::conv::{Axis, Window};
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

/// Rewrites every one-group Conv of `graph` (f32, or half input and weights writing f32) (all extents known) as im2col and a GEMM. See the
/// module docs. A Conv whose geometry does not resolve is left to the direct kernel.
pub(crate) fn convs_as_gemms(graph: &mut Graph) {
    let mut index = 0;
    while index < graph.nodes.len() {
        match rewrite(graph, index) {
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
        // Today's forms (numpy broadcasting) even in a model of opset 6 or older.
        let opset = self.opset.max(ops::MODERN_OPSET);
        let entry = ops::lookup(op_type, opset)?;
        (entry.build)(&mut NodeCtx::new(&Attributes::default(), opset, inputs, 1)).ok().map(Arc::from)
    }

    fn push(&mut self, op_type: &str, op: Arc<dyn Op>, inputs: Vec<Option<ValueId>>, out: ValueId) {
        // Unique per part (a Conv becomes several Reshapes), named after the Conv it came from.
        let name = format!("{}:{}{}", self.name, op_type.to_lowercase(), self.nodes.len());
        let (op_type, attrs) = (op_type.to_string(), Attributes::default());
        self.nodes.push(Node { name, op_type, attrs, inputs, outputs: vec![out], op });
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
