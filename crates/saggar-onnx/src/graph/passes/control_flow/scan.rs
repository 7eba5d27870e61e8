//! Scan unrolled: per step, a Gather picks each scan input's element on its axis (last to first
//! for a reversed input), the body runs on the states and those elements, and the states chain;
//! each scan output stacks its steps on its axis (last to first for a reversed output). Opset 8
//! does that per batch element and stacks the results on axis 0.

use super::copy::{captured, constant, explicit_inputs, scan_extents};
use super::{Inliner, body_of, node_error};
use crate::error::OnnxError;
use crate::graph::ir::{Graph, Node, ValueId};
use crate::graph::subgraph::SubgraphBody;
use crate::ops::control::{ScanSpec, scan_spec};

/// A Scan's states and scan inputs for one (unbatched) run.
struct Run<'a> {
    body: &'a SubgraphBody,
    spec: &'a ScanSpec,
    captured: &'a [ValueId],
    extent: usize,
    axes: &'a [usize],
}

impl Inliner {
    pub(super) fn unroll_scan(&mut self, graph: &mut Graph, node: &Node) -> Result<Vec<Node>, OnnxError> {
        let opset = graph.opset;
        let body = body_of(opset, node, "body")?;
        let captured = captured(opset, node, body)?;
        let spec = scan_spec(&node.attrs, opset, explicit_inputs(node), node.outputs.len())
            .map_err(|e| node_error(opset, node, e.to_string()))?;
        let (batch, extent, axes) = scan_extents(graph, node)
            .ok_or_else(|| node_error(opset, node, "the scan inputs' sequence extents are not known".into()))?;
        let first = spec.first_scan_input();
        let present =
            |slot: usize| node.inputs[slot].ok_or_else(|| node_error(opset, node, format!("input {slot} is absent")));
        let states: Vec<ValueId> = (first - spec.states..first).map(present).collect::<Result<_, _>>()?;
        let scans: Vec<ValueId> = (first..first + spec.scan_inputs).map(present).collect::<Result<_, _>>()?;
        let run = Run { body, spec: &spec, captured: &captured, extent, axes: &axes };
        let mut out = Vec::new();
        let Some(batch) = batch else {
            let (finals, steps) = self.steps(graph, node, &run, states, &scans, "", &mut out)?;
            return self.finish(graph, node, &spec, &finals, &steps, out);
        };
        if let Some(lens) = constant(graph, node.inputs[0]) {
            let lens = lens.to_i64s().unwrap_or_default();
            if lens.len() != batch || lens.iter().any(|&l| l != extent as i64) {
                let reason = format!(
                    "sequence_lens {lens:?} must give each of the {batch} batch elements the full {extent} steps (shorter sequences are not supported)"
                );
                return Err(node_error(opset, node, reason));
            }
        }
        // Per batch element: its states and scan inputs picked on axis 0, then scanned.
        let mut finals_by_b = Vec::with_capacity(batch);
        let mut stacked_by_b = Vec::with_capacity(batch);
        for b in 0..batch {
            let mut pick = |graph: &mut Graph, v: ValueId| -> Result<ValueId, OnnxError> {
                let (n, picked) = self.pick(graph, node, v, 0, b)?;
                out.push(n);
                Ok(picked)
            };
            let states_b: Vec<ValueId> = states.iter().map(|&v| pick(graph, v)).collect::<Result<_, _>>()?;
            let scans_b: Vec<ValueId> = scans.iter().map(|&v| pick(graph, v)).collect::<Result<_, _>>()?;
            let (finals, steps) = self.steps(graph, node, &run, states_b, &scans_b, &format!("b{b}/"), &mut out)?;
            let mut stacked = Vec::with_capacity(steps.len());
            for pieces in &steps {
                let (nodes, v) = self.stack(graph, node, pieces, 0, None)?;
                out.extend(nodes);
                stacked.push(v);
            }
            finals_by_b.push(finals);
            stacked_by_b.push(stacked);
        }
        let columns = |rows: &[Vec<ValueId>], k: usize| rows.iter().map(|r| r[k]).collect::<Vec<_>>();
        for (k, &to) in node.outputs.iter().enumerate() {
            let pieces =
                if k < spec.states { columns(&finals_by_b, k) } else { columns(&stacked_by_b, k - spec.states) };
            out.extend(self.stack(graph, node, &pieces, 0, Some(to))?.0);
        }
        Ok(out)
    }

    /// Runs the body over the `extent` steps of `scans` from `states`: the final states and each
    /// scan output's per-step values in stacking order.
    #[allow(clippy::too_many_arguments)]
    fn steps(
        &mut self,
        graph: &mut Graph,
        node: &Node,
        run: &Run<'_>,
        mut states: Vec<ValueId>,
        scans: &[ValueId],
        tag: &str,
        out: &mut Vec<Node>,
    ) -> Result<(Vec<ValueId>, Vec<Vec<ValueId>>), OnnxError> {
        let spec = run.spec;
        let mut steps: Vec<Vec<ValueId>> = vec![Vec::with_capacity(run.extent); spec.scan_outputs];
        for t in 0..run.extent {
            let what = format!("the sequence extent {}", run.extent);
            self.charge(graph, node, crate::ops::control::Body::node_count(run.body), t as i64, &what)?;
            let mut formal = states.clone();
            for (j, &x) in scans.iter().enumerate() {
                let index = if spec.input_reverse[j] { run.extent - 1 - t } else { t };
                let (n, picked) = self.pick(graph, node, x, run.axes[j], index)?;
                out.push(n);
                formal.push(picked);
            }
            let (nodes, outs) =
                self.instantiate(graph, node, run.body, &formal, run.captured, &format!("{tag}step{t}"))?;
            out.extend(nodes);
            states = outs[..spec.states].to_vec();
            for (stack, &v) in steps.iter_mut().zip(&outs[spec.states..]) {
                stack.push(v);
            }
        }
        for (stack, &reverse) in steps.iter_mut().zip(&spec.output_reverse) {
            if reverse {
                stack.reverse();
            }
        }
        Ok((states, steps))
    }

    /// The unbatched Scan's outputs: final states through Identity, scan outputs stacked.
    fn finish(
        &mut self,
        graph: &mut Graph,
        node: &Node,
        spec: &ScanSpec,
        finals: &[ValueId],
        steps: &[Vec<ValueId>],
        mut out: Vec<Node>,
    ) -> Result<Vec<Node>, OnnxError> {
        for (&from, &to) in finals.iter().zip(&node.outputs) {
            out.push(self.identity(graph, node, from, to)?);
        }
        for ((pieces, &axis), &to) in steps.iter().zip(&spec.output_axes).zip(&node.outputs[spec.states..]) {
            if pieces.is_empty() {
                return Err(node_error(
                    graph.opset,
                    node,
                    "a Scan over 0 steps has empty scan outputs, which are not supported".into(),
                ));
            }
            out.extend(self.stack(graph, node, pieces, axis, Some(to))?.0);
        }
        Ok(out)
    }
}
