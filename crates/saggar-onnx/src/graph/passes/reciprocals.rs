//! At fp16 and bf16, a division by a constant scalar becomes a product with its reciprocal.
//!
//! An f32 division costs a GPU about ten instructions (a reciprocal, two refinement steps and a test
//! for the slow path); a product costs one. GELU's erf form divides every element of a transformer's
//! widest activation by sqrt(2), and its kernel is bound by instructions, not bytes. `x * (1 / c)`
//! differs from `x / c` by at most one unit in the last place of f32, far below the half rounding
//! every activation of a model at reduced precision meets, so the rewrite is made there only: strict
//! f32 and TF32 divide as the model says. A Div the keep list names (by name, or `Div`) stays.

use std::sync::Arc;

use saggar_shape::DType;

use crate::error::OnnxError;
use crate::graph::ir::{Graph, Value};
use crate::graph::passes::precision::{at_node, kept};
use crate::ops::{self, Attributes};
use crate::tensor::{Tensor, TensorData};

/// Rewrites every f32 `Div(x, c)` with `c` a one-element constant whose reciprocal is a normal f32
/// as `Mul(x, 1 / c)`; returns how many.
pub(crate) fn reciprocal_divisions(graph: &mut Graph, keep: &[String]) -> Result<usize, OnnxError> {
    let mut rewritten = 0;
    for index in 0..graph.nodes.len() {
        let node = &graph.nodes[index];
        let (true, [Some(_), Some(c)]) = (node.op_type == "Div" && !kept(keep, node), node.inputs.as_slice()) else {
            continue;
        };
        let value = graph.value(*c);
        let Some(constant) = value.constant.as_deref().filter(|t| t.dtype() == DType::F32 && t.len() == 1) else {
            continue;
        };
        let Some(reciprocal) = constant.to_f32s().map(|v| 1.0 / v[0]).filter(|r| r.is_normal()) else { continue };
        let tensor = Tensor::new(constant.dims().to_vec(), TensorData::F32(vec![reciprocal]))
            .map_err(|e| at_node(graph, node, e))?;
        let name = format!("{}:reciprocal", value.name);
        let ty = value.ty.clone();
        let opset = graph.opset.max(ops::MODERN_OPSET);
        let op = ops::build_op("Mul", opset, &Attributes::default(), 2, 1)
            .map_err(|e| OnnxError::Graph { reason: format!("the reciprocal of `{}`'s divisor: {e}", node.name) })?;
        let id = graph.add_value(Value { name, ty, constant: Some(Arc::new(tensor)), dims_value: None });
        let node = &mut graph.nodes[index];
        node.op_type = "Mul".into();
        node.op = op;
        node.inputs[1] = Some(id);
        rewritten += 1;
    }
    Ok(rewritten)
}

#[cfg(test)]
mod tests {
    use saggar_shape::{DType, Dim};

    use crate::builder::ModelBuilder;
    use crate::tensor::{Tensor, TensorData};
    use crate::{ImportLimits, OnnxModel};

    fn model() -> OnnxModel {
        let d = |v: &[u64]| v.iter().map(|&x| Dim::Fixed(x)).collect::<Vec<_>>();
        let f32s = |dims: &[usize], v: &[f32]| Tensor::new(dims.to_vec(), TensorData::F32(v.to_vec())).unwrap();
        let mut b = ModelBuilder::new(17);
        b.input("x", DType::F32, &d(&[2, 4]));
        b.initializer("root2", &f32s(&[], &[std::f32::consts::SQRT_2]));
        b.initializer("zero", &f32s(&[1], &[0.0]));
        b.initializer("row", &f32s(&[4], &[1.0, 2.0, 3.0, 4.0]));
        b.node("Div", &["x", "root2"], &["a"], &[]).node("Div", &["a", "zero"], &["b"], &[]);
        b.node("Div", &["b", "row"], &["c"], &[]).node("Div", &["root2", "c"], &["y"], &[]);
        b.output("y", DType::F32, &d(&[2, 4]));
        OnnxModel::from_bytes(&b.to_bytes(), "divisions", &ImportLimits::default()).unwrap()
    }

    #[test]
    fn a_division_by_a_constant_scalar_becomes_a_product_with_its_reciprocal() {
        let mut graph = model().graph().clone();
        assert_eq!(super::reciprocal_divisions(&mut graph, &[]).unwrap(), 1, "only x / sqrt 2");
        let ops: Vec<&str> = graph.nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops, ["Mul", "Div", "Div", "Div"], "a zero, a vector and a constant numerator stay divisions");
        let c = graph.value(graph.nodes[0].inputs[1].unwrap()).constant.as_ref().unwrap().to_f32s().unwrap();
        assert_eq!(c, [1.0 / std::f32::consts::SQRT_2]);
        let name = model().graph().nodes[0].name.clone();
        for keep in [vec!["Div".to_string()], vec![name]] {
            let mut graph = model().graph().clone();
            assert_eq!(super::reciprocal_divisions(&mut graph, &keep).unwrap(), 0, "{keep:?}");
        }
    }
}
