//! Half-precision models (f16 and bf16, as `model.half()` exports them) computed in f32.
//!
//! Before import, [`widen`] rewrites the `ModelProto` so that only its inputs and outputs stay in
//! half precision: a `Cast` to f32 after each half-precision graph input, a `Cast` back (rounding to
//! nearest even) before each half-precision graph output, and every other half-precision type in the
//! graph (value infos, `Cast` targets, `dtype` attributes) made f32. The import widens half-precision
//! initializers and tensor attributes exactly ([`crate::Tensor::widened`]). Every op therefore
//! computes in f32 with f32 accumulation, on every backend, from the same weights the file holds;
//! only the two boundary casts see half-precision bits. Results differ from a computation rounding
//! every intermediate to half precision by at most that rounding (they are the more accurate), and
//! from the same model in f32 by the rounding of its weights and inputs; the tests state the
//! tolerances (`tests/half_models.rs`).

use std::collections::HashSet;

use crate::import::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, ValueInfoProto, attribute_type, data_type,
};

/// ONNX element type codes widened to f32.
const HALF: [i32; 2] = [data_type::FLOAT16, data_type::BFLOAT16];

fn elem_type(info: &ValueInfoProto) -> Option<i32> {
    info.r#type.as_ref()?.tensor_type.as_ref().map(|t| t.elem_type)
}

fn set_elem_type(info: &mut ValueInfoProto, code: i32) {
    if let Some(t) = info.r#type.as_mut().and_then(|t| t.tensor_type.as_mut()) {
        t.elem_type = code;
    }
}

/// `Cast(input) -> output` to element type `to`.
fn cast(input: &str, output: &str, to: i32) -> NodeProto {
    NodeProto {
        input: vec![input.to_string()],
        output: vec![output.to_string()],
        name: format!("saggar_half_cast_{output}"),
        op_type: "Cast".into(),
        attribute: vec![AttributeProto {
            name: "to".into(),
            r#type: attribute_type::INT,
            i: i64::from(to),
            ..AttributeProto::default()
        }],
        ..NodeProto::default()
    }
}

/// Whether an attribute of `node` names a half-precision element type (a `Cast` target, a
/// `dtype`).
fn targets_half(node: &NodeProto, a: &AttributeProto) -> bool {
    let targets_type = (node.op_type == "Cast" && a.name == "to") || a.name == "dtype";
    targets_type && HALF.iter().any(|&h| i64::from(h) == a.i)
}

/// Whether `model` has a half-precision input, output, initializer or value info, or makes a
/// half-precision value inside (a `Cast` to one).
pub(crate) fn is_half(model: &ModelProto) -> bool {
    let Some(graph) = model.graph.as_ref() else { return false };
    graph
        .input
        .iter()
        .chain(&graph.output)
        .chain(&graph.value_info)
        .any(|i| elem_type(i).is_some_and(|t| HALF.contains(&t)))
        || graph.initializer.iter().any(|t| HALF.contains(&t.data_type))
        || graph.node.iter().any(|n| n.attribute.iter().any(|a| targets_half(n, a)))
}

/// Rewrites a half-precision `model` to compute in f32 between casts at its inputs and outputs (see
/// the module docs). A model without half-precision types is left as it is.
pub(crate) fn widen(model: &mut ModelProto) {
    if !is_half(model) {
        return;
    }
    let Some(graph) = model.graph.as_mut() else { return };
    let mut taken: HashSet<String> = graph
        .input
        .iter()
        .chain(&graph.output)
        .map(|i| i.name.clone())
        .chain(graph.initializer.iter().map(|t| t.name.clone()))
        .chain(graph.node.iter().flat_map(|n| n.output.iter().cloned()))
        .collect();
    let mut fresh = |base: &str| {
        let mut name = format!("{base}.f32");
        while taken.contains(&name) {
            name.push('_');
        }
        taken.insert(name.clone());
        name
    };
    let initializers: HashSet<String> = graph.initializer.iter().map(|t| t.name.clone()).collect();
    let half_inputs: Vec<String> = graph
        .input
        .iter()
        .filter(|i| !initializers.contains(&i.name) && elem_type(i).is_some_and(|t| HALF.contains(&t)))
        .map(|i| i.name.clone())
        .collect();
    let mut front = Vec::new();
    for name in &half_inputs {
        let wide = fresh(name);
        rename_reads(graph, name, &wide);
        front.push(cast(name, &wide, data_type::FLOAT));
    }
    let mut back = Vec::new();
    let outputs: Vec<(String, i32)> = graph
        .output
        .iter()
        .filter_map(|o| elem_type(o).filter(|t| HALF.contains(t)).map(|t| (o.name.clone(), t)))
        .collect();
    for (name, code) in outputs {
        // An input passed straight through stays the caller's half-precision bits.
        if half_inputs.contains(&name) {
            continue;
        }
        let wide = fresh(&name);
        rename_definition(graph, &name, &wide);
        rename_reads(graph, &name, &wide);
        back.push(cast(&wide, &name, code));
    }
    for node in &mut graph.node {
        let halves: Vec<usize> =
            (0..node.attribute.len()).filter(|&k| targets_half(node, &node.attribute[k])).collect();
        for k in halves {
            node.attribute[k].i = i64::from(data_type::FLOAT);
        }
    }
    for info in &mut graph.value_info {
        if elem_type(info).is_some_and(|t| HALF.contains(&t)) {
            set_elem_type(info, data_type::FLOAT);
        }
    }
    let nodes = std::mem::take(&mut graph.node);
    graph.node = front.into_iter().chain(nodes).chain(back).collect();
}

/// Every node input named `from` reads `to` instead.
fn rename_reads(graph: &mut GraphProto, from: &str, to: &str) {
    for input in graph.node.iter_mut().flat_map(|n| n.input.iter_mut()) {
        if input == from {
            *input = to.to_string();
        }
    }
}

/// The node output or initializer named `from` is named `to` instead.
fn rename_definition(graph: &mut GraphProto, from: &str, to: &str) {
    for output in graph.node.iter_mut().flat_map(|n| n.output.iter_mut()) {
        if output == from {
            *output = to.to_string();
        }
    }
    for init in &mut graph.initializer {
        if init.name == from {
            init.name = to.to_string();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::proto::{TypeProto, TypeProtoTensor};

    fn info(name: &str, code: i32) -> ValueInfoProto {
        ValueInfoProto {
            name: name.into(),
            r#type: Some(TypeProto {
                tensor_type: Some(TypeProtoTensor { elem_type: code, ..TypeProtoTensor::default() }),
                ..TypeProto::default()
            }),
            ..ValueInfoProto::default()
        }
    }

    fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
        NodeProto {
            op_type: op.into(),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            ..NodeProto::default()
        }
    }

    #[test]
    fn half_inputs_and_outputs_get_boundary_casts_and_inner_types_become_f32() {
        let mut to_half = cast("y", "z", data_type::FLOAT16);
        to_half.name = "inner".into();
        let graph = GraphProto {
            input: vec![info("x", data_type::FLOAT16), info("ids", data_type::INT64)],
            output: vec![info("z", data_type::FLOAT16), info("x", data_type::FLOAT16), info("n", data_type::BFLOAT16)],
            value_info: vec![info("y", data_type::FLOAT16)],
            node: vec![
                node("Relu", &["x"], &["y"]),
                to_half,
                node("Neg", &["z"], &["n"]),
                node("Shape", &["ids"], &["s"]),
            ],
            ..GraphProto::default()
        };
        let mut model = ModelProto { graph: Some(graph), ..ModelProto::default() };
        assert!(is_half(&model));
        widen(&mut model);
        let g = model.graph.unwrap();
        let summary: Vec<(String, Vec<String>, Vec<String>)> =
            g.node.iter().map(|n| (n.op_type.clone(), n.input.clone(), n.output.clone())).collect();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            summary,
            vec![
                ("Cast".into(), s(&["x"]), s(&["x.f32"])),
                ("Relu".into(), s(&["x.f32"]), s(&["y"])),
                ("Cast".into(), s(&["y"]), s(&["z.f32"])),
                ("Neg".into(), s(&["z.f32"]), s(&["n.f32"])),
                ("Shape".into(), s(&["ids"]), s(&["s"])),
                ("Cast".into(), s(&["z.f32"]), s(&["z"])),
                ("Cast".into(), s(&["n.f32"]), s(&["n"])),
            ]
        );
        let to = |n: &NodeProto| n.attribute[0].i as i32;
        assert_eq!(to(&g.node[0]), data_type::FLOAT);
        assert_eq!(to(&g.node[2]), data_type::FLOAT, "the inner cast to f16 computes in f32");
        assert_eq!((to(&g.node[5]), to(&g.node[6])), (data_type::FLOAT16, data_type::BFLOAT16));
        assert_eq!(elem_type(&g.value_info[0]), Some(data_type::FLOAT));
        assert_eq!(elem_type(&g.input[0]), Some(data_type::FLOAT16), "the caller still passes f16");
    }

    #[test]
    fn a_cast_to_half_inside_an_f32_model_computes_in_f32() {
        let graph = GraphProto {
            input: vec![info("x", data_type::FLOAT)],
            output: vec![info("y", data_type::FLOAT)],
            node: vec![
                cast("x", "h", data_type::BFLOAT16),
                node("Relu", &["h"], &["r"]),
                cast("r", "y", data_type::FLOAT),
            ],
            ..GraphProto::default()
        };
        let mut model = ModelProto { graph: Some(graph), ..ModelProto::default() };
        assert!(is_half(&model));
        widen(&mut model);
        let g = model.graph.unwrap();
        assert_eq!(g.node.len(), 3, "no boundary casts: the inputs and outputs are f32");
        assert_eq!(g.node[0].attribute[0].i, i64::from(data_type::FLOAT));
    }

    #[test]
    fn an_f32_model_is_untouched_and_fresh_names_never_collide() {
        let graph = GraphProto {
            input: vec![info("x", data_type::FLOAT)],
            output: vec![info("y", data_type::FLOAT)],
            node: vec![node("Relu", &["x"], &["y"])],
            ..GraphProto::default()
        };
        let mut model = ModelProto { graph: Some(graph), ..ModelProto::default() };
        let before = model.clone();
        widen(&mut model);
        assert_eq!(model, before);
        let graph = GraphProto {
            input: vec![info("x", data_type::FLOAT16)],
            output: vec![info("y", data_type::FLOAT)],
            node: vec![node("Relu", &["x"], &["x.f32"]), node("Cast", &["x.f32"], &["y"])],
            ..GraphProto::default()
        };
        let mut model = ModelProto { graph: Some(graph), ..ModelProto::default() };
        widen(&mut model);
        let g = model.graph.unwrap();
        assert_eq!(g.node[0].output, ["x.f32_"]);
        assert_eq!(g.node[1].input, ["x.f32_"]);
    }
}
