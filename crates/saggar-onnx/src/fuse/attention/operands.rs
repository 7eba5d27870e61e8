//! An attention operand read through the nodes that produced it: Transposes and reshaping views
//! as strides ([`views::Layout`]), and, walking [`Walk::Shared`], the part of a tensor a Split,
//! Slice or Gather takes as an offset into it.

use saggar_shape::DType;

use super::{Uses, dims, input, perm, views};
use crate::graph::ir::{Graph, ValueId};
use crate::ops::Attribute;
use crate::ops::gpu::{contiguous, ext};
use crate::plan::nodes::NodeInfo;
use crate::tensor::TensorData;

/// How an operand's views are followed: `Strict`, only through values read once, by the next node
/// of the chain, and through Transposes and reshaping views; `Shared` also through values other
/// members read (Q, K and V split off one stacked projection) and through the nodes that take part of
/// a tensor at an offset (Split, Slice with unit steps, Gather of a constant index), whose
/// absorption the group's closure check confirms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Walk {
    Strict,
    Shared,
}

/// The part of its input a node's output `out` is, when it is one: `(axis, start, len, dropped)`,
/// the axis dropped for a Gather of a scalar index.
fn part_of(graph: &Graph, n: usize, out: ValueId) -> Option<(usize, usize, usize, bool)> {
    let node = &graph.nodes[n];
    let (_, in_dims) = dims(graph, input(graph, n, 0)?)?;
    let (_, out_dims) = dims(graph, out)?;
    let rank = in_dims.len();
    let axis_of = |name: &str| -> Option<usize> {
        let a = match node.attrs.get(name) {
            Some(Attribute::Int(a)) => *a,
            None => 0,
            _ => return None,
        };
        usize::try_from(if a < 0 { a + ext(rank) } else { a }).ok().filter(|&a| a < rank)
    };
    match node.op_type.as_str() {
        "Split" => {
            let axis = axis_of("axis")?;
            let k = node.outputs.iter().position(|&o| o == out)?;
            let start =
                node.outputs[..k].iter().map(|&o| dims(graph, o).map(|(_, d)| d[axis])).sum::<Option<usize>>()?;
            Some((axis, start, out_dims[axis], false))
        }
        "Gather" => {
            let axis = axis_of("axis")?;
            let index = constant_ints(graph, input(graph, n, 1)?)?;
            // A scalar index drops the axis; a one-element index keeps it.
            let (&[i], scalar) = (index.as_slice(), out_dims.len() + 1 == rank) else { return None };
            let i = usize::try_from(if i < 0 { i + ext(in_dims[axis]) } else { i }).ok()?;
            (i < in_dims[axis]).then_some((axis, i, 1, scalar))
        }
        "Slice" => {
            // One sliced axis with unit steps: the output's extents tell its length.
            let starts = constant_ints(graph, input(graph, n, 1)?)?;
            let axes = match input(graph, n, 3) {
                Some(a) => constant_ints(graph, a)?,
                None => (0..ext(starts.len())).collect(),
            };
            let steps = input(graph, n, 4).map(|st| constant_ints(graph, st));
            let changed: Vec<usize> = (0..rank).filter(|&a| in_dims[a] != out_dims[a]).collect();
            if steps.is_some_and(|st| st.is_none_or(|st| st.iter().any(|&v| v != 1))) || changed.len() > 1 {
                return None;
            }
            let axis = changed.first().copied().unwrap_or(0);
            let at = axes.iter().position(|&a| a == ext(axis) || a + ext(rank) == ext(axis));
            let start = at.map_or(Some(0), |k| {
                let s = starts[k];
                let s = if s < 0 { s + ext(in_dims[axis]) } else { s };
                usize::try_from(s.clamp(0, ext(in_dims[axis]))).ok()
            })?;
            Some((axis, start, out_dims[axis], false))
        }
        _ => None,
    }
}

/// The integers of a constant i64 or i32 tensor.
fn constant_ints(graph: &Graph, id: ValueId) -> Option<Vec<i64>> {
    match graph.value(id).constant.as_ref()?.data() {
        TensorData::I64(v) => Some(v.clone()),
        TensorData::I32(v) => Some(v.iter().map(|&x| i64::from(x)).collect()),
        _ => None,
    }
}

/// An operand read through the nodes that produced it: the value actually read and its element type
/// (f32, or the half type of a product's result that a Cast widened), where in it the operand starts
/// (elements), its strides for the operand's dims, and the absorbed nodes.
pub(super) struct Through {
    pub(super) base: ValueId,
    pub(super) dtype: DType,
    pub(super) offset: i64,
    pub(super) strides: Vec<i64>,
    pub(super) absorbed: Vec<usize>,
}

/// Whether node `n` is a Cast widening a half value to f32 (exact, so the kernel may read the half
/// value and widen it itself).
fn widening(graph: &Graph, n: usize) -> bool {
    let node = &graph.nodes[n];
    let (Some(Some(x)), [out]) = (node.inputs.first(), node.outputs.as_slice()) else { return false };
    let ty = |id: ValueId| graph.ty(id).map(|t| t.dtype);
    node.op_type == "Cast" && matches!(ty(*x), Some(DType::F16 | DType::BF16)) && ty(*out) == Some(DType::F32)
}

/// `id` read through the Transpose and view nodes (and, walking [`Walk::Shared`], the parts of
/// tensors) that produced it: the longest chain whose layout needs no copy. A view starting past
/// its first element reads a value with memory of the plan's own (computed or constant, no graph
/// output), where a pointer can move.
pub(super) fn through_views(
    graph: &Graph,
    info: &[NodeInfo],
    uses: &Uses,
    id: ValueId,
    reader: usize,
    walk: Walk,
) -> Through {
    let Some((own_type, own)) = dims(graph, id) else {
        return Through { base: id, dtype: DType::F32, offset: 0, strides: Vec::new(), absorbed: Vec::new() };
    };
    // The chain from `id` back: (node, its input, the output followed), ending at a widening Cast.
    let mut chain: Vec<(usize, ValueId, ValueId)> = Vec::new();
    let (mut cur, mut next_reader) = (id, reader);
    while (walk == Walk::Shared || uses.readers[cur.0] == [next_reader])
        && !uses.graph_output[cur.0]
        && let Some(p) = graph.producer(cur)
        && let view = (graph.nodes[p].op_type == "Transpose" || graph.nodes[p].op.is_view())
        && let cast = widening(graph, p)
        && (view && info[p].outputs.len() == 1 || walk == Walk::Shared && part_of(graph, p, cur).is_some() || cast)
        && let Some(Some(input)) = graph.nodes[p].inputs.first()
        && (cast || dims(graph, *input).is_some_and(|(t, _)| t == DType::F32))
    {
        chain.push((p, *input, cur));
        cur = *input;
        next_reader = p;
        if cast {
            break;
        }
    }
    for start in (1..=chain.len()).rev() {
        let base = chain[start - 1].1;
        let Some((dtype, d)) = dims(graph, base) else { continue };
        let mut layout = Some(views::Layout::contiguous(&d));
        for &(p, input, out) in chain[..start].iter().rev() {
            let rank = dims(graph, input).map_or(0, |(_, d)| d.len());
            layout = layout.and_then(|l| match part_of(graph, p, out) {
                _ if widening(graph, p) => Some(l),
                _ if graph.nodes[p].op_type == "Transpose" => perm(graph, p, rank).and_then(|pm| l.transpose(&pm)),
                Some((axis, at, _, true)) => l.select(axis, at),
                Some((axis, at, len, false)) => l.slice(axis, at, len),
                None => dims(graph, out).and_then(|(_, out)| l.reshape(&out)),
            });
        }
        let movable = graph.value(base).constant.is_some() || graph.producer(base).is_some();
        if let Some(l) = layout
            && (l.offset() == 0 || movable && !uses.graph_output[base.0])
            && let Some(strides) = l.strides()
        {
            let absorbed = chain[..start].iter().map(|&(p, _, _)| p).collect();
            return Through { base, dtype, offset: l.offset(), strides, absorbed };
        }
    }
    Through { base: id, dtype: own_type, offset: 0, strides: contiguous(&own), absorbed: Vec::new() }
}
