//! Half results for half products: at fp16 and bf16, after [`super::precision`] has made a layer's
//! products read half operands, a MatMul or Gemm whose result (after its bias) only feeds kernels
//! that read half values as cheaply as f32 ones writes its result in the half type, as PyTorch's half
//! layers do. That halves the bytes the product writes and its readers read: the attention reading
//! Q, K and V, the GELU after the first feed-forward product, the residual Add and LayerNorm after
//! the others.
//!
//! A product qualifies when:
//! - it is a MatMul of half operands writing f32, optionally followed by `Add(product, bias)` (either
//!   order, the product's only reader) with `bias` a constant f32 vector over the output's columns;
//!   or a Gemm of half operands whose `C`, if any, is a constant;
//! - its result (the Add's, where there is one) is no graph output, and every node reading it is
//!   elementwise, a LayerNormalization, a MatMul, or a view or part of it (Reshape, Flatten,
//!   Squeeze, Unsqueeze, Transpose, Split, Slice, Gather): the kernels a `Cast` back to f32 fuses into
//!   (elementwise chains, LayerNorm's input group) or an attention group reads through
//!   ([`crate::fuse::attention`]).
//!
//! The product then writes a new half value, the bias (rounded to half, as PyTorch's half layers
//! hold it) added in f32 in its epilogue before the result is rounded
//! ([`crate::ops::linalg::half_product`]). The Add is removed, and each node reading
//! the old result reads a `Cast` of the half value to f32 of its own (the first defines the old
//! result), which its kernel fuses. A Cast read only by a reshaping view moves past it, the view
//! reshaping the half value, so it still meets the kernel that reads it.

use std::collections::HashMap;

use saggar_shape::DType;

use super::precision::{at_node, cast, half_constant, half_twin_named};
use crate::error::OnnxError;
use crate::graph::ir::{Graph, Node, Value, ValueId};
use crate::ops;

/// The views and parts of a tensor an attention group reads through.
const VIEWS: [&str; 8] = ["Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Split", "Slice", "Gather"];

/// The views that only reshape a tensor, which a widening Cast moves past.
const RESHAPES: [&str; 4] = ["Reshape", "Flatten", "Squeeze", "Unsqueeze"];

/// Rewrites every qualifying half product of `graph` (see the module docs) to write `half`; returns
/// how many it rewrote.
pub(crate) fn half_results(graph: &mut Graph, half: DType) -> Result<usize, OnnxError> {
    let mut rewritten = 0;
    let mut index = 0;
    // Each constant's half copy, made once.
    let mut biases = HashMap::new();
    while index < graph.nodes.len() {
        if let Some(found) = candidate(graph, index, half) {
            rewrite(graph, index, found, half, &mut biases)?;
            rewritten += 1;
        }
        index += 1;
    }
    Ok(rewritten)
}

/// A qualifying product's bias Add (its node and the constant bias), if it has one, the value its
/// readers read, and those readers (in graph order, each once).
struct Found {
    add: Option<(usize, ValueId)>,
    result: ValueId,
    readers: Vec<usize>,
}

/// The [`Found`] of node `index` when it is a qualifying product.
fn candidate(graph: &Graph, index: usize, half: DType) -> Option<Found> {
    let node = &graph.nodes[index];
    let [out] = node.outputs.as_slice() else { return None };
    let a = node.inputs.first().copied().flatten()?;
    let b = node.inputs.get(1).copied().flatten()?;
    let dtype = |id: ValueId| graph.ty(id).map(|t| t.dtype);
    if dtype(a) != Some(half) || dtype(b) != Some(half) || dtype(*out) != Some(DType::F32) {
        return None;
    }
    let readers = graph.readers();
    let only_reader = |id: ValueId| match readers[id.0].as_slice() {
        [r] if !graph.outputs.iter().any(|o| o.value == id) => Some(*r),
        _ => None,
    };
    let found = match (node.op_type.as_str(), node.inputs.len()) {
        ("MatMul", 2) => {
            let n = graph.ty(b)?.dims.last()?.as_fixed()?;
            let add = only_reader(*out).and_then(|r| bias_add(graph, r, *out, n).map(|bias| (r, bias)));
            Found { add, result: add.map_or(*out, |(r, _)| graph.nodes[r].outputs[0]), readers: Vec::new() }
        }
        ("Gemm", _) => {
            let c = node.inputs.get(2).copied().flatten();
            if c.is_some_and(|c| graph.value(c).constant.is_none()) {
                return None;
            }
            Found { add: None, result: *out, readers: Vec::new() }
        }
        _ => return None,
    };
    let takes_half = |&r: &usize| {
        let op = graph.nodes[r].op_type.as_str();
        super::layout::elementwise(op) || VIEWS.contains(&op) || op == "LayerNormalization" || op == "MatMul"
    };
    let mut result_readers = readers[found.result.0].clone();
    result_readers.dedup();
    let graph_output = graph.outputs.iter().any(|o| o.value == found.result);
    let takes = !graph_output && !result_readers.is_empty() && result_readers.iter().all(takes_half);
    takes.then_some(Found { readers: result_readers, ..found })
}

/// The constant bias of `Add(product, bias)` (node `add`) when it is an f32 vector of `n` elements.
fn bias_add(graph: &Graph, add: usize, product: ValueId, n: u64) -> Option<ValueId> {
    let (bias, t) = graph.bias_of(add, product, n)?;
    (t.dtype() == DType::F32).then_some(bias)
}

/// Rewrites product `index` as the module docs say.
fn rewrite(
    graph: &mut Graph,
    index: usize,
    found: Found,
    half: DType,
    biases: &mut HashMap<ValueId, ValueId>,
) -> Result<(), OnnxError> {
    let node = &graph.nodes[index];
    let op = ops::linalg::half_product(&node.op_type, &node.attrs, half, found.add.is_some())
        .map_err(|e| at_node(graph, node, e))?;
    // Gemm's C is of its output's type.
    let c = node.inputs.get(2).copied().flatten();
    let name = node.name.clone();
    let bias = match (found.add, c) {
        (Some((_, bias)), _) | (None, Some(bias)) => Some(match biases.get(&bias) {
            Some(&id) => id,
            None => {
                let id = half_constant(graph, bias, half)?;
                biases.insert(bias, id);
                id
            }
        }),
        (None, None) => None,
    };
    let (_, result_half) = half_twin_named(graph, found.result, half, " product")?;
    let widening = widening_casts(graph, &name, &found, result_half)?;
    let node = &mut graph.nodes[index];
    node.op = op;
    node.outputs = vec![result_half];
    match (found.add, bias) {
        (Some(_), Some(bias)) => node.inputs.push(Some(bias)),
        (None, Some(bias)) => node.inputs[2] = Some(bias),
        _ => {}
    }
    // At the Add's place (every reader of its result comes after it), or after the product.
    let at = match found.add {
        Some((add, _)) => {
            graph.nodes.remove(add);
            add
        }
        None => index + 1,
    };
    let widened: Vec<ValueId> = widening.iter().map(|c| c.outputs[0]).collect();
    for (k, cast) in widening.into_iter().enumerate() {
        graph.nodes.insert(at + k, cast);
    }
    for value in widened {
        sink_past_views(graph, value);
    }
    Ok(())
}

/// Moves the widening Cast defining `value` past the reshaping views (Reshape, Flatten, Squeeze,
/// Unsqueeze) that are each the only reader of the value before them, so the views reshape the
/// half value (they share its bytes) and the Cast meets the kernel reading the last view's result:
/// GPT-2's products reshape their 2-D results back to `[batch, seq, width]` before the residual Add
/// and the GELU, which then fuse the Cast.
fn sink_past_views(graph: &mut Graph, mut value: ValueId) {
    // Each move takes the Cast out before the view and puts it back right after it: no node past
    // the view changes place, so the readers of each later value stay where they were.
    let readers = graph.readers();
    loop {
        let (Some(cast), [view]) = (graph.producer(value), readers[value.0].as_slice()) else { return };
        let (view, node) = (*view, &graph.nodes[*view]);
        let reshape = RESHAPES.contains(&node.op_type.as_str()) && node.outputs.len() == 1;
        if !reshape || node.inputs.first() != Some(&Some(value)) || graph.outputs.iter().any(|o| o.value == value) {
            return;
        }
        let Some(half) = graph.nodes[cast].inputs[0] else { return };
        let Some(half_type) = graph.ty(half).map(|t| t.dtype) else { return };
        let out = node.outputs[0];
        let Ok((_, half_view)) = half_twin_named(graph, out, half_type, "") else { return };
        graph.nodes[view].inputs[0] = Some(half);
        graph.nodes[view].outputs = vec![half_view];
        let mut moved = graph.nodes.remove(cast);
        moved.inputs[0] = Some(half_view);
        moved.outputs = vec![out];
        // The view came after the Cast, so it is one place earlier now; the Cast goes after it.
        graph.nodes.insert(view, moved);
        value = out;
    }
}

/// A Cast of `half` back to f32 for each node reading `result`: the first defines `result`, the
/// others values of their own that their readers read instead. An elementwise group takes in a Cast
/// read only inside it, so the GELU reading the product twice fuses both.
fn widening_casts(graph: &mut Graph, name: &str, found: &Found, half: ValueId) -> Result<Vec<Node>, OnnxError> {
    let result = found.result;
    let mut casts = vec![cast(graph, format!("{name}:widened"), half, result)?];
    for (k, &r) in found.readers.iter().enumerate().skip(1) {
        let value = graph.value(result);
        let own = Value { name: format!("{}:widened {k}", value.name), ..value.clone() };
        let own = graph.add_value(own);
        casts.push(cast(graph, format!("{name}:widened {k}"), half, own)?);
        for input in graph.nodes[r].inputs.iter_mut().filter(|i| **i == Some(result)) {
            *input = Some(own);
        }
    }
    Ok(casts)
}

#[cfg(test)]
mod tests {
    use saggar_shape::{DType, Dim};

    use crate::builder::ModelBuilder;
    use crate::graph::passes::precision::convert_products;
    use crate::tensor::{Tensor, TensorData};
    use crate::{ImportLimits, OnnxModel};

    fn constant(dims: &[usize], seed: f32) -> Tensor {
        let n: usize = dims.iter().product();
        Tensor::new(dims.to_vec(), TensorData::F32((0..n).map(|i| ((i as f32 + seed) * 0.37).sin()).collect())).unwrap()
    }

    /// `x [2, 3, 8]`: `h = MatMul(x, w1) + b1` read by a Relu and a Mul (a half result),
    /// `g = MatMul(relu, w2)` read by a ReduceMean (f32: not a kernel that takes half), and
    /// `y = MatMul(x, w3) + b3`, a graph output (f32).
    fn model() -> OnnxModel {
        let d = |v: &[u64]| v.iter().map(|&x| Dim::Fixed(x)).collect::<Vec<_>>();
        let mut b = ModelBuilder::new(17);
        b.input("x", DType::F32, &d(&[2, 3, 8]));
        for (name, dims, seed) in [("w1", &[8, 4][..], 1.0), ("b1", &[4], 2.0), ("w2", &[4, 4], 3.0)] {
            b.initializer(name, &constant(dims, seed));
        }
        b.initializer("w3", &constant(&[8, 4], 4.0)).initializer("b3", &constant(&[4], 5.0));
        b.node("MatMul", &["x", "w1"], &["p1"], &[]).node("Add", &["b1", "p1"], &["h"], &[]);
        b.node("Relu", &["h"], &["r"], &[]).node("Mul", &["h", "r"], &["hr"], &[]);
        b.node("MatMul", &["hr", "w2"], &["g"], &[]).node("ReduceMean", &["g"], &["m"], &[]);
        b.node("MatMul", &["x", "w3"], &["p3"], &[]).node("Add", &["p3", "b3"], &["y"], &[]);
        b.output("m", DType::F32, &d(&[1, 1, 1])).output("y", DType::F32, &d(&[2, 3, 4]));
        OnnxModel::from_bytes(&b.to_bytes(), "half", &ImportLimits::default()).unwrap()
    }

    /// (`tests/precision.rs` checks the numbers: the half result is the f32 result, bias added in
    /// f32, rounded once.)
    #[test]
    fn a_product_read_by_kernels_that_take_half_writes_half_with_its_bias() {
        let mut graph = model().graph().clone();
        assert_eq!(convert_products(&mut graph, DType::F16, &[]).unwrap(), 3);
        assert_eq!(super::half_results(&mut graph, DType::F16).unwrap(), 1);
        let products: Vec<_> = graph.nodes.iter().filter(|n| n.op_type == "MatMul").collect();
        let out_type = |n: &crate::graph::ir::Node| graph.ty(n.outputs[0]).unwrap().dtype;
        // The first writes f16 and takes its bias (rounded to f16); the others write f32.
        assert_eq!(products.iter().map(|n| out_type(n)).collect::<Vec<_>>(), [DType::F16, DType::F32, DType::F32]);
        let bias = graph.value(products[0].inputs[2].unwrap());
        assert_eq!(bias.constant.as_ref().unwrap().dtype(), DType::F16);
        // Its Add is gone; a Cast back to f32 for each of its two readers.
        let ops: Vec<&str> = graph.nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops.iter().filter(|o| **o == "Add").count(), 1, "{ops:?}");
        let widened = graph.nodes.iter().filter(|n| n.op_type == "Cast" && n.inputs[0] == Some(products[0].outputs[0]));
        assert_eq!(widened.count(), 2, "{ops:?}");
    }

    /// GPT-2's form: a 2-D product reshaped back before its reader. The Reshape views the half
    /// result and the Cast moves after it, next to the Relu that fuses it.
    #[test]
    fn the_widening_cast_moves_past_a_reshape_to_its_reader() {
        let d = |v: &[u64]| v.iter().map(|&x| Dim::Fixed(x)).collect::<Vec<_>>();
        let mut b = ModelBuilder::new(17);
        b.input("x", DType::F32, &d(&[6, 8]));
        b.initializer("w", &constant(&[8, 4], 1.0)).initializer("c", &constant(&[4], 2.0));
        let shape = Tensor::new(vec![3], TensorData::I64(vec![2, 3, 4])).unwrap();
        b.initializer("shape", &shape);
        b.node("Gemm", &["x", "w", "c"], &["p"], &[]).node("Reshape", &["p", "shape"], &["r"], &[]);
        b.node("Relu", &["r"], &["y"], &[]).output("y", DType::F32, &d(&[2, 3, 4]));
        let model = OnnxModel::from_bytes(&b.to_bytes(), "reshaped", &ImportLimits::default()).unwrap();
        let mut graph = model.graph().clone();
        convert_products(&mut graph, DType::F16, &[]).unwrap();
        assert_eq!(super::half_results(&mut graph, DType::F16).unwrap(), 1);
        let ops: Vec<&str> = graph.nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops, ["Cast", "Gemm", "Reshape", "Cast", "Relu"], "{ops:?}");
        let (gemm, reshape, cast) = (&graph.nodes[1], &graph.nodes[2], &graph.nodes[3]);
        assert_eq!(reshape.inputs[0], Some(gemm.outputs[0]));
        assert_eq!(graph.ty(reshape.outputs[0]).unwrap().dtype, DType::F16);
        assert_eq!(cast.inputs[0], Some(reshape.outputs[0]));
        assert_eq!(graph.nodes[4].inputs[0], Some(cast.outputs[0]));
    }
}
