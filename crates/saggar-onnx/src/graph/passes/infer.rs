//! Shape and type inference over the graph, folding constants on the way.
//!
//! Nodes are visited in topological order. Each op infers its outputs from its inputs' types,
//! constant values and shape vectors ([`crate::ops::Op::dims_value`]). A node whose inputs are all
//! constant is evaluated with the same host evaluation the kernels use and becomes constants; so is
//! a node whose integer output is a shape vector with every element known (`Shape` of a fixed-shape
//! value, and the Gather/Concat/Unsqueeze chains built on it).

use std::sync::Arc;

use saggar_shape::{DType, Dim};

use crate::error::OnnxError;
use crate::graph::ir::Graph;
use crate::ops::evaluate::evaluate;
use crate::ops::shape_util::UNNAMED_PREFIX;
use crate::ops::{InferInput, InferInputs, OpError, SymInt, UNKNOWN_DIM, ValueType};
use crate::tensor::{Tensor, TensorData, checked_numel};

/// Longest shape vector propagated symbolically.
const MAX_SHAPE_VECTOR: usize = 64;

/// How inference treats dimensions it cannot know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// At import: unknown extents become fresh symbols.
    Symbolic,
    /// Per concrete input shape: every extent must be known.
    Concrete,
}

/// Names for extents inference cannot know (`unk__N`), past every such name the graph already holds:
/// a segment's inputs carry symbols of the whole model's inference, which a count restarting at 1
/// would give to other extents, and the dispatcher would then bind the two together. The graph is
/// read for the names it holds at the first new name only: a Loop unrolled iteration by iteration
/// infers each iteration's nodes on their own, and most name nothing.
#[derive(Default)]
pub(crate) struct FreshSymbols(Option<usize>);

impl FreshSymbols {
    /// A symbol none of `graph`'s values, nor an earlier call, uses.
    pub(crate) fn next(&mut self, graph: &Graph) -> Dim {
        let last = self.0.get_or_insert_with(|| {
            let names = graph.values.iter().filter_map(|v| v.ty.as_ref()).flat_map(|t| &t.dims);
            names.filter_map(|d| d.symbol()?.strip_prefix(UNNAMED_PREFIX)?.parse::<usize>().ok()).max().unwrap_or(0)
        });
        *last += 1;
        Dim::symbolic(format!("{UNNAMED_PREFIX}{last}"))
    }

    /// `ty` with each unknown extent ([`UNKNOWN_DIM`]) given its own symbol.
    pub(crate) fn name(&mut self, graph: &Graph, mut ty: ValueType) -> ValueType {
        for d in &mut ty.dims {
            if d.symbol() == Some(UNKNOWN_DIM) {
                *d = self.next(graph);
            }
        }
        ty
    }
}

/// Infers every node's outputs and folds constants whose outputs have at most `fold_limit`
/// elements. Folded nodes are removed.
pub(crate) fn infer_and_fold(graph: &mut Graph, mode: Mode, fold_limit: usize) -> Result<(), OnnxError> {
    infer_and_fold_keeping(graph, mode, fold_limit, &[])
}

/// [`infer_and_fold`], folding no node whose op type `keep` lists (a quantised model's
/// DequantizeLinear of constant weights, which the QDQ products must still find).
pub(crate) fn infer_and_fold_keeping(
    graph: &mut Graph,
    mode: Mode,
    fold_limit: usize,
    keep: &[&str],
) -> Result<(), OnnxError> {
    let mut fresh = FreshSymbols::default();
    let mut folded = Vec::with_capacity(graph.nodes.len());
    for index in 0..graph.nodes.len() {
        let node = &graph.nodes[index];
        let node_err = |source: OpError| OnnxError::Node {
            node: node.name.clone(),
            op: node.op_type.clone(),
            opset: graph.opset,
            source: Box::new(source),
        };
        let infer_inputs: Vec<Option<InferInput<'_>>> = node
            .inputs
            .iter()
            .map(|id| {
                id.map(|id| {
                    let v = graph.value(id);
                    v.ty.as_ref().map(|ty| InferInput {
                        ty,
                        value: v.constant.as_deref(),
                        dims_value: v.dims_value.as_deref(),
                    })
                })
                .map(|x| x.ok_or(()))
                .transpose()
            })
            .collect::<Result<_, ()>>()
            .map_err(|()| OnnxError::Graph { reason: format!("node `{}` reads a value with no type", node.name) })?;
        let inputs = InferInputs::new(&infer_inputs);
        let mut types = node.op.infer(&inputs).map_err(node_err)?;
        if types.len() < node.outputs.len() {
            return Err(node_err(OpError::infer(format!(
                "the node lists {} outputs, the op makes {}",
                node.outputs.len(),
                types.len()
            ))));
        }
        types.truncate(node.outputs.len());
        for (k, ty) in types.iter_mut().enumerate() {
            for (axis, d) in ty.dims.iter_mut().enumerate() {
                if d.symbol() == Some(UNKNOWN_DIM) {
                    match mode {
                        Mode::Symbolic => *d = fresh.next(graph),
                        Mode::Concrete => {
                            return Err(OnnxError::ShapeDependsOnData {
                                node: node.name.clone(),
                                op: node.op_type.clone(),
                                output: k,
                                axis,
                            });
                        }
                    }
                }
            }
            if mode == Mode::Concrete && ty.fixed_dims().is_none() {
                return Err(node_err(OpError::infer(format!(
                    "output {k} has shape {ty}, not fixed for these input shapes"
                ))));
            }
            // Sizes past the address space are refused here, before any lowering multiplies them.
            if let Some(dims) = ty.fixed_dims()
                && checked_numel(&dims)
                    .and_then(|n| n.checked_mul(ty.dtype.size_bytes()))
                    .is_none_or(|b| b > isize::MAX as usize)
            {
                return Err(node_err(OpError::infer(format!(
                    "output {k} of shape {ty} has more bytes than memory can hold"
                ))));
            }
        }
        let dims_value = if types.len() == 1
            && types[0].rank() <= 1
            && matches!(types[0].dtype, DType::I64 | DType::I32 | DType::Bool)
        {
            node.op.dims_value(&inputs).filter(|v| v.len() <= MAX_SHAPE_VECTOR)
        } else {
            None
        };
        let all_constant = node.op.foldable()
            && !keep.contains(&node.op_type.as_str())
            && infer_inputs.iter().flatten().all(|x| x.value.is_some());
        let small =
            types.iter().all(|t| t.fixed_dims().and_then(|d| checked_numel(&d)).is_some_and(|n| n <= fold_limit));
        let constants: Option<Vec<Tensor>> = if all_constant && small {
            let tensors: Vec<Option<&Tensor>> = infer_inputs.iter().map(|x| x.and_then(|x| x.value)).collect();
            Some(evaluate(node.op.as_ref(), &tensors, fold_limit).map_err(node_err)?)
        } else {
            shape_constant(&types, dims_value.as_deref()).map(|t| vec![t])
        };
        let outputs = node.outputs.clone();
        folded.push(constants.is_some());
        let mut constants = constants.map(|c| c.into_iter());
        for (id, ty) in outputs.iter().zip(types) {
            let value = graph.value_mut(*id);
            value.constant = constants.as_mut().and_then(Iterator::next).map(Arc::new);
            value.ty = Some(match &value.constant {
                Some(t) => ValueType::fixed(t.dtype(), t.dims()),
                None => ty,
            });
            value.dims_value = None;
        }
        if let Some(dv) = dims_value {
            graph.value_mut(outputs[0]).dims_value = Some(dv);
        }
    }
    let mut keep = folded.iter().map(|f| !f);
    graph.nodes.retain(|_| keep.next().unwrap_or(true));
    Ok(())
}

/// A constant for an integer shape vector whose elements are all known.
fn shape_constant(types: &[ValueType], dims_value: Option<&[SymInt]>) -> Option<Tensor> {
    let dims = types.first()?.fixed_dims()?;
    let values: Vec<i64> = dims_value?.iter().map(SymInt::as_int).collect::<Option<_>>()?;
    if checked_numel(&dims)? != values.len() {
        return None;
    }
    let data = match types[0].dtype {
        DType::I64 => TensorData::I64(values),
        DType::I32 => TensorData::I32(values.into_iter().map(|v| i32::try_from(v).ok()).collect::<Option<_>>()?),
        DType::Bool => TensorData::Bool(values.into_iter().map(|v| u8::from(v != 0)).collect()),
        _ => return None,
    };
    Tensor::new(dims, data).ok()
}

/// Binds concrete input dimensions: checks them against the inputs' declared dimensions (fixed
/// extents equal, one symbol one extent) and makes every input type fixed. Node outputs lose their
/// types, to be inferred again.
pub(crate) fn bind_inputs(graph: &mut Graph, input_dims: &[Vec<u64>], model: &str) -> Result<(), OnnxError> {
    let err = |reason: String| OnnxError::Request { model: model.to_string(), reason };
    if input_dims.len() != graph.inputs.len() {
        return Err(err(format!(
            "{} input shapes given, the model has {} inputs",
            input_dims.len(),
            graph.inputs.len()
        )));
    }
    let mut symbols: Vec<(Box<str>, u64)> = Vec::new();
    for (&id, dims) in graph.inputs.clone().iter().zip(input_dims) {
        let value = graph.value(id);
        let ty = value.ty.clone().ok_or_else(|| err(format!("input `{}` has no type", value.name)))?;
        if ty.rank() != dims.len() {
            return Err(err(format!("input `{}` has rank {}, the request gives {:?}", value.name, ty.rank(), dims)));
        }
        for (axis, (d, &n)) in ty.dims.iter().zip(dims).enumerate() {
            match d {
                Dim::Fixed(f) if *f != n => {
                    return Err(err(format!(
                        "input `{}` axis {axis} is fixed at {f}, the request gives {n}",
                        value.name
                    )));
                }
                Dim::Symbolic(s) => match symbols.iter().find(|(name, _)| name == s) {
                    Some((_, v)) if *v != n => {
                        return Err(err(format!("symbol `{s}` is {v} in one input and {n} in input `{}`", value.name)));
                    }
                    Some(_) => {}
                    None => symbols.push((s.clone(), n)),
                },
                Dim::Fixed(_) => {}
            }
        }
        graph.value_mut(id).ty = Some(ValueType::new(ty.dtype, dims.iter().map(|&n| Dim::Fixed(n)).collect()));
    }
    for node in &graph.nodes {
        for &o in &node.outputs {
            let v = &mut graph.values[o.0];
            v.ty = None;
            v.dims_value = None;
            v.constant = None;
        }
    }
    Ok(())
}
