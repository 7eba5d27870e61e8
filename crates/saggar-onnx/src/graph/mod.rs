//! The model graph: the [`ir`] an ONNX model is imported into (`build`, through the op registry),
//! the passes that infer shapes, fold constants and specialise a graph to concrete input shapes
//! (`passes`), the subgraphs of control-flow ops (`subgraph`), and [`model::OnnxModel`], which does all of that for a file.

pub(crate) mod build;
pub mod ir;
pub(crate) mod model;
pub(crate) mod passes;
pub(crate) mod subgraph;
