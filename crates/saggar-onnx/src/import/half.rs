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
    let mut renamed = Vec::new();
    for name in &half_inputs {
        let wide = fresh(name);
        rename_reads(graph, name, &wide);
        front.push(cast(name, &wide, data_type::FLOAT));
        renamed.push((name.clone(), wide));
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
        renamed.push((name, wide));
    }
    widen_inside(graph);
    widen_subgraphs(graph, &renamed, 0);
    let nodes = std::mem::take(&mut graph.node);
    graph.node = front.into_iter().chain(nodes).chain(back).collect();
}

/// Makes the half-precision `Cast` targets, `dtype` attributes and value infos of `graph` f32.
fn widen_inside(graph: &mut GraphProto) {
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
}

/// Deepest subgraph nesting widened (the importer refuses deeper ones by its own limit).
const MAX_WIDEN_DEPTH: usize = 16;

/// Widens the subgraphs (If branches, Loop and Scan bodies) of `graph`'s nodes like the graph, their
/// reads of the enclosing graph's `renamed` values (from, to) following the renames. A subgraph
/// that does not decode is left for the importer to refuse.
fn widen_subgraphs(graph: &mut GraphProto, renamed: &[(String, String)], depth: usize) {
    if depth >= MAX_WIDEN_DEPTH {
        return;
    }
    for a in graph.node.iter_mut().flat_map(|n| n.attribute.iter_mut()) {
        let Some(Ok(mut sub)) = a.g.as_deref().map(<GraphProto as prost::Message>::decode) else { continue };
        // A name the subgraph defines itself shadows the enclosing one.
        let own: HashSet<&str> = sub
            .input
            .iter()
            .map(|i| i.name.as_str())
            .chain(sub.initializer.iter().map(|t| t.name.as_str()))
            .chain(sub.node.iter().flat_map(|n| n.output.iter().map(String::as_str)))
            .collect();
        let visible: Vec<(String, String)> =
            renamed.iter().filter(|(from, _)| !own.contains(from.as_str())).cloned().collect();
        for (from, to) in &visible {
            rename_reads(&mut sub, from, to);
            for out in sub.output.iter_mut().filter(|o| o.name == *from) {
                out.name.clone_from(to);
            }
        }
        widen_inside(&mut sub);
        for info in sub.input.iter_mut().chain(&mut sub.output) {
            if elem_type(info).is_some_and(|t| HALF.contains(&t)) {
                set_elem_type(info, data_type::FLOAT);
            }
        }
        widen_subgraphs(&mut sub, &visible, depth + 1);
        a.g = Some(prost::Message::encode_to_vec(&sub));
    }
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
    fn subgraphs_read_the_widened_values_and_compute_in_f32() {
        use prost::Message as _;
        let then_branch = GraphProto {
            output: vec![info("t", data_type::FLOAT16)],
            node: vec![cast("x", "t", data_type::FLOAT16)],
            ..GraphProto::default()
        };
        let else_branch = GraphProto { output: vec![info("x", data_type::FLOAT16)], ..GraphProto::default() };
        let graph_attr = |name: &str, g: &GraphProto| AttributeProto {
            name: name.into(),
            r#type: attribute_type::GRAPH,
            g: Some(g.encode_to_vec()),
            ..AttributeProto::default()
        };
        let mut if_node = node("If", &["c"], &["y"]);
        if_node.attribute = vec![graph_attr("then_branch", &then_branch), graph_attr("else_branch", &else_branch)];
        let graph = GraphProto {
            input: vec![info("x", data_type::FLOAT16), info("c", data_type::BOOL)],
            output: vec![info("y", data_type::FLOAT16)],
            node: vec![if_node],
            ..GraphProto::default()
        };
        let mut model = ModelProto { graph: Some(graph), ..ModelProto::default() };
        widen(&mut model);
        let g = model.graph.unwrap();
        let branch = |k: usize| GraphProto::decode(g.node[1].attribute[k].g.as_deref().unwrap()).unwrap();
        let then_branch = branch(0);
        assert_eq!(then_branch.node[0].input, ["x.f32"]);
        assert_eq!(then_branch.node[0].attribute[0].i, i64::from(data_type::FLOAT));
        assert_eq!(elem_type(&then_branch.output[0]), Some(data_type::FLOAT));
        assert_eq!(branch(1).output[0].name, "x.f32", "an outer value read as an output follows the rename");
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
