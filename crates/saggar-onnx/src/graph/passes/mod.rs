//! Graph passes: inference with constant folding, clean-up, canonicalisation, and specialisation
//! to concrete input shapes.
//!
//! At import (`optimise`): run the QDQ products of quantised models on `i8` ([`qdq_products`]),
//! infer symbolically and fold (initializer-only subgraphs included, up
//! to [`crate::ImportLimits::max_fold_elements`] per tensor), inline the control flow whose
//! controlling values are constants (`control_flow`), remove Identity/Dropout, fold
//! BatchNormalization into Conv, normalise Gemm, merge sibling projections of one activation into one
//! product ([`sibling_products`]), remove dead nodes. Per compile (`specialise`):
//! bind the request's input shapes and value inputs, inline every If, Loop and Scan, infer again
//! with every extent known, fold what became constant
//! (the shape chains) and remove dead nodes again.

pub(crate) mod calibrate;
pub(crate) mod control_flow;
pub(crate) mod conv_gemm;
mod fuse;
pub(crate) mod half_outputs;
pub(crate) mod half_storage;
pub(crate) mod infer;
mod layout;
pub(crate) mod precision;
pub(crate) mod qdq_products;
pub(crate) mod reciprocals;
pub(crate) mod segments;
mod sibling_products;
mod simplify;
pub(crate) mod value_inputs;

use crate::error::OnnxError;
use crate::graph::ir::Graph;

/// Largest tensor folded per compile: shape vectors and small masks, not activations, so programs
/// do not each carry large per-shape constants.
pub(crate) const SPECIALISE_FOLD_LIMIT: usize = 1 << 16;

/// The import-time pipeline.
pub(crate) fn optimise(graph: &mut Graph, fold_limit: usize) -> Result<(), OnnxError> {
    const QDQ: [&str; 2] = ["QuantizeLinear", "DequantizeLinear"];
    if graph.nodes.iter().any(|n| QDQ.contains(&n.op_type.as_str())) {
        // Types, folding everything but the Q/DQ nodes, so the QDQ products are found before their
        // weights' dequantisation folds into f32 weights (and bad scales are refused), while shape
        // chains (an embedding's Expand of a computed shape) still fold into the constants their
        // readers' types need.
        infer::infer_and_fold_keeping(graph, infer::Mode::Symbolic, fold_limit, &QDQ)?;
        if qdq_products::int8_products(graph)? > 0 {
            simplify::remove_dead_nodes(graph);
        }
    }
    infer::infer_and_fold(graph, infer::Mode::Symbolic, fold_limit)?;
    if control_flow::inline(graph, fold_limit, false)? {
        infer::infer_and_fold(graph, infer::Mode::Symbolic, fold_limit)?;
    }
    simplify::remove_identities(graph);
    fuse::fold_batch_norm_into_conv(graph);
    fuse::normalise_gemm(graph);
    sibling_products::merge_sibling_projections(graph);
    simplify::remove_dead_nodes(graph);
    Ok(())
}

/// A copy of `graph` for concrete `input_dims` and the value inputs' `values` (binding index, bytes),
/// every extent known and shape chains folded.
pub(crate) fn specialise(
    graph: &Graph,
    input_dims: &[Vec<u64>],
    values: &[(usize, Vec<u8>)],
    model: &str,
) -> Result<Graph, OnnxError> {
    let mut g = graph.clone();
    infer::bind_inputs(&mut g, input_dims, model)?;
    value_inputs::bind_values(&mut g, values, model)?;
    control_flow::specialise(&mut g)?;
    infer::infer_and_fold(&mut g, infer::Mode::Concrete, SPECIALISE_FOLD_LIMIT)?;
    simplify::remove_dead_nodes(&mut g);
    Ok(g)
}
