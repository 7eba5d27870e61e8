//! Graph clean-up: Identity, Casts to their input's own type and inference-mode Dropout removed, dead
//! nodes removed.

use crate::graph::ir::{Graph, ValueId};

/// Removes Identity nodes, Casts to the type their input has, and Dropout nodes whose mask nobody
/// reads: their readers read the input.
pub(crate) fn remove_identities(graph: &mut Graph) {
    let mut index = 0;
    while index < graph.nodes.len() {
        let node = &graph.nodes[index];
        let passthrough = match node.op_type.as_str() {
            "Identity" => true,
            // A Cast to the type its input already has (exporters write `x.to(v.dtype)`).
            "Cast" | "CastLike" => {
                let dtype = |v: ValueId| graph.value(v).ty.as_ref().map(|t| t.dtype);
                let from = node.inputs.first().copied().flatten().and_then(dtype);
                from.is_some() && from == node.outputs.first().copied().and_then(dtype)
            }
            "Dropout" => {
                let uses = graph.use_counts();
                node.outputs.get(1).is_none_or(|m| uses[m.0] == 0)
            }
            _ => false,
        };
        if let (true, Some(Some(input)), Some(&output)) =
            (passthrough, node.inputs.first().copied(), node.outputs.first())
        {
            graph.nodes.remove(index);
            graph.replace_uses(output, input);
        } else {
            index += 1;
        }
    }
}

/// Removes nodes none of whose outputs is read by a graph output, directly or through other nodes.
pub(crate) fn remove_dead_nodes(graph: &mut Graph) {
    let mut live = vec![false; graph.values.len()];
    for out in &graph.outputs {
        live[out.value.0] = true;
    }
    let mut keep = vec![false; graph.nodes.len()];
    for (i, node) in graph.nodes.iter().enumerate().rev() {
        if node.outputs.iter().any(|o| live[o.0]) {
            keep[i] = true;
            for input in node.inputs.iter().flatten() {
                live[input.0] = true;
            }
        }
    }
    let mut it = keep.into_iter();
    graph.nodes.retain(|_| it.next().unwrap_or(true));
}
